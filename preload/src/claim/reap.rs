//! Reaping: freeing the slot-table records of the task's processes that died without running
//! exit handlers (killed, `_exit`), one `/proc` read per distinct process.

use super::process_state::alive;
use crate::config::Config;
use crate::sys;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Frees the records of processes that died without exit handlers (killed, `_exit`), when every
/// slot is busy, at most every 100 ms for the task ([`goset_plan::SlotTable::reap_due`]).
pub(super) fn reap_if_full(cfg: &Config) {
    let table = cfg.table;
    if (0..table.slot_count()).any(|s| table.live(s) == 0) || !table.reap_due(100_000) {
        return;
    }
    reap(cfg);
}

/// Distinct processes one reap looks at: one `/proc` read each.
const REAP_PIDS: usize = 1024;
/// Where the next reap starts, as a position among the records in use (approximate, since
/// records come and go), after a reap that met more processes than it could track.
static REAP_FROM: AtomicUsize = AtomicUsize::new(0);

/// A fixed open-addressing set of pids with whether each is alive: 4 KiB, so it lives in its
/// own anonymous mapping for the length of one reap, never on the stack (the shim runs on
/// threads with 16 KiB stacks), and never in a static (threads of this process and of forked
/// children may reap at once).
struct PidSet {
    /// `pid` (alive), `-pid` (dead) or 0 (free).
    cells: [i32; REAP_PIDS],
    len: usize,
}

/// A [`PidSet`] in a mapping of its own, unmapped on drop.
struct MappedPidSet(&'static mut PidSet);

impl MappedPidSet {
    fn new() -> Option<MappedPidSet> {
        let addr = sys::map_zeroed(core::mem::size_of::<PidSet>())?;
        // SAFETY: the mapping is page-aligned, large enough, zero-filled (an empty set: all
        // cells free, len 0) and ours alone until drop unmaps it.
        Some(MappedPidSet(unsafe { &mut *(addr as *mut PidSet) }))
    }
}

impl Drop for MappedPidSet {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in new; the reference dies with self.
        unsafe {
            libc::munmap(
                (self.0 as *mut PidSet).cast(),
                core::mem::size_of::<PidSet>(),
            )
        };
    }
}

impl PidSet {
    fn home(pid: i32) -> usize {
        (pid as u32).wrapping_mul(0x9e37_79b9) as usize % REAP_PIDS
    }

    /// Whether `pid` (> 0) is alive, as recorded; `None` when it is not in the set.
    fn get(&self, pid: i32) -> Option<bool> {
        let mut at = Self::home(pid);
        for _ in 0..REAP_PIDS {
            match self.cells[at] {
                0 => return None,
                c if c.unsigned_abs() == pid as u32 => return Some(c > 0),
                _ => at = (at + 1) % REAP_PIDS,
            }
        }
        None
    }

    /// Records `pid` (> 0, not yet in the set); false when the set is full (kept at 3/4, so
    /// probes stay short).
    fn insert(&mut self, pid: i32, alive: bool) -> bool {
        if self.len >= REAP_PIDS / 4 * 3 {
            return false;
        }
        let mut at = Self::home(pid);
        while self.cells[at] != 0 {
            at = (at + 1) % REAP_PIDS;
        }
        self.cells[at] = if alive { pid } else { -pid };
        self.len += 1;
        true
    }
}

/// Frees the records of every dead process: one `/proc` read per distinct process. Past the
/// processes one round can track, the round stops and the next starts where it stopped.
#[cold]
#[inline(never)]
fn reap(cfg: &Config) {
    let Some(mapped) = MappedPidSet::new() else {
        return;
    };
    let seen = &mut *mapped.0;
    let from = REAP_FROM.load(Ordering::Relaxed);
    let records = cfg.table.records().enumerate();
    let wrapped = cfg.table.records().enumerate().take(from);
    for (at, (label, _)) in records.skip(from).chain(wrapped) {
        let pid = label.unsigned_abs() as i32;
        if pid <= 0 {
            continue;
        }
        let live = match seen.get(pid) {
            Some(live) => live,
            None => {
                let live = alive(pid);
                if !seen.insert(pid, live) {
                    REAP_FROM.store(at, Ordering::Relaxed);
                    return;
                }
                live
            }
        };
        if !live {
            cfg.table.release_all(label);
        }
    }
    REAP_FROM.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_set_dedupes_until_full() {
        let mapped = MappedPidSet::new().unwrap();
        let set = &mut *mapped.0;
        assert_eq!(set.get(7), None);
        assert!(set.insert(7, true));
        assert!(set.insert(7 + REAP_PIDS as i32, false));
        assert_eq!(set.get(7), Some(true));
        assert_eq!(set.get(7 + REAP_PIDS as i32), Some(false));
        let mut pid = 100;
        while set.insert(pid, pid % 2 == 0) {
            pid += 1;
        }
        assert_eq!(set.len, REAP_PIDS / 4 * 3);
        assert!((100..pid).all(|p| set.get(p) == Some(p % 2 == 0)));
        assert_eq!(set.get(pid), None);
        assert_eq!(set.get(i32::MAX), None);
    }
}
