//! Per-thread state: the reentrancy guard, the thread's placement, and the process-local
//! registry that maps tids and `pthread_t`s of this process's placed threads to placements.
//!
//! Owns: thread-locals with const initialisers and no destructors (so they work in any thread,
//! at any time, and register nothing with the runtime). Must not: allocate or lock.

use crate::placement::Placement;
use core::cell::Cell;
use core::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

thread_local! {
    static GUARD: Cell<bool> = const { Cell::new(false) };
    static STATE: Cell<u64> = const { Cell::new(0) };
    static TID: Cell<i32> = const { Cell::new(0) };
    static ENTRY: Cell<usize> = const { Cell::new(usize::MAX) };
    static LAST_SET: Cell<u64> = const { Cell::new(0) };
}

/// Held while a hook runs: hooks re-entered from inside (or before init) call the real thing.
pub struct Guard(());

impl Guard {
    /// Takes the guard, or `None` when this thread already holds it.
    pub fn enter() -> Option<Guard> {
        let free = GUARD.try_with(|g| !g.replace(true)).unwrap_or(false);
        free.then_some(Guard(()))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = GUARD.try_with(|g| g.set(false));
    }
}

/// The calling thread's tid (cached).
pub fn tid() -> i32 {
    let cached = TID.try_with(Cell::get).unwrap_or(0);
    if cached != 0 {
        return cached;
    }
    let tid = crate::sys::gettid();
    let _ = TID.try_with(|t| t.set(tid));
    tid
}

/// The calling thread's own placement (not meaningful for the main thread: see `process`).
pub fn state() -> Placement {
    Placement::unpack(STATE.try_with(Cell::get).unwrap_or(0))
}

/// Sets the calling thread's placement.
pub fn set_state(p: Placement) {
    let _ = STATE.try_with(|s| s.set(p.pack()));
}

/// Takes the calling thread's placement and registry entry, leaving it unplaced.
pub fn take_state() -> (Placement, usize) {
    let p = Placement::unpack(STATE.try_with(|s| s.replace(0)).unwrap_or(0));
    (
        p,
        ENTRY
            .try_with(|e| e.replace(usize::MAX))
            .unwrap_or(usize::MAX),
    )
}

/// After fork: the surviving thread forgets its parent's tid, placement and entry.
pub fn forget() {
    let _ = TID.try_with(|t| t.set(0));
    let _ = STATE.try_with(|s| s.set(0));
    let _ = ENTRY.try_with(|e| e.set(usize::MAX));
}

const ENTRIES: usize = 1024;

struct Entry {
    tid: AtomicI32,
    thread: AtomicUsize,
    placement: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Entry = Entry {
    tid: AtomicI32::new(0),
    thread: AtomicUsize::new(0),
    placement: AtomicU64::new(0),
};
static REGISTRY: [Entry; ENTRIES] = [FREE; ENTRIES];
static USED: AtomicUsize = AtomicUsize::new(0);

/// Records the calling thread (`tid`, `thread`) with placement `p`, for lookups by others.
pub fn register(tid: i32, thread: libc::pthread_t, p: Placement) {
    for (i, e) in REGISTRY.iter().enumerate() {
        if e.tid.load(Ordering::Relaxed) == 0
            && e.tid
                .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            e.thread.store(thread as usize, Ordering::Release);
            e.placement.store(p.pack(), Ordering::Release);
            USED.fetch_max(i + 1, Ordering::AcqRel);
            let _ = ENTRY.try_with(|c| c.set(i));
            return;
        }
    }
}

/// Removes a registry entry.
pub fn unregister(index: usize) {
    if let Some(e) = REGISTRY.get(index) {
        e.thread.store(0, Ordering::Relaxed);
        e.placement.store(0, Ordering::Relaxed);
        e.tid.store(0, Ordering::Release);
    }
}

fn used() -> &'static [Entry] {
    &REGISTRY[..USED.load(Ordering::Acquire).min(ENTRIES)]
}

/// The placement of this process's thread `tid`, if the shim placed it.
pub fn find_tid(tid: i32) -> Option<Placement> {
    used()
        .iter()
        .find(|e| e.tid.load(Ordering::Acquire) == tid)
        .map(|e| Placement::unpack(e.placement.load(Ordering::Acquire)))
}

/// The tid and placement of this process's thread `thread`, if the shim placed it.
pub fn find_thread(thread: libc::pthread_t) -> Option<(i32, Placement)> {
    used().iter().find_map(|e| {
        let tid = e.tid.load(Ordering::Acquire);
        (tid != 0 && e.thread.load(Ordering::Acquire) == thread as usize)
            .then(|| (tid, Placement::unpack(e.placement.load(Ordering::Acquire))))
    })
}

/// After fork only the forking thread survives: empty the registry.
pub fn clear_registry() {
    for e in used() {
        e.tid.store(0, Ordering::Relaxed);
    }
    USED.store(0, Ordering::Release);
}

/// Whether a `set` decision with this fingerprint repeats the last one this thread logged. A
/// runtime that re-applies the same mask in a loop makes one decision, so it gets one log line;
/// the log write is most of an affinity call's cost under the shim.
pub fn repeats_last_set(fingerprint: u64) -> bool {
    LAST_SET
        .try_with(|c| c.replace(fingerprint) == fingerprint)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;

    #[test]
    fn guard_is_reentrant_safe() {
        let g = Guard::enter();
        assert!(g.is_some());
        assert!(Guard::enter().is_none());
        drop(g);
        assert!(Guard::enter().is_some());
    }

    #[test]
    fn registry_finds_by_tid_and_thread() {
        let p = Placement::unslotted(Role::Helper, Some(3));
        register(999_999, 77, p);
        assert_eq!(find_tid(999_999), Some(p));
        assert_eq!(find_thread(77), Some((999_999, p)));
        let (_, entry) = take_state();
        unregister(entry);
        assert_eq!(find_tid(999_999), None);
    }
}
