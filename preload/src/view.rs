//! What a thread reads back from `sched_getaffinity`, `pthread_getaffinity_np` and
//! `syscall(SYS_sched_getaffinity)`: its view, which is not its kernel mask (the shim keeps
//! every thread on its one planned CPU, whatever it asks for).
//!
//! The rules: a thread that never asked sees the task's CPUs (the plan's, so that runtimes
//! sizing their pools from the mask see N); a thread that asked for M (any setter, a mask in
//! its `pthread_create` attr, or another thread of the process asking for it) sees what the
//! kernel would have set, M ∩ online CPUs, or M itself when that is empty (the shim answered
//! success where the kernel would have refused). A new thread without an attr mask, and a
//! forked child's main thread, start with the view of the thread that created them, as the
//! kernel mask is inherited; an exec'd image starts with none. Helpers and launcher threads
//! have no view: the shim applies their requests for real (clamped to the reservation), so
//! they read their kernel mask, and a launcher that re-applies what it reads (mpirun, through
//! hwloc) stays on the housekeeper instead of spreading over the task's CPUs.
//!
//! Owns: those rules, the lock-free cell that holds one thread's view (a sequence lock over
//! atomics, so any thread may read any other's), and putting a view into a caller's buffer.
//! Must not: allocate, lock, or make system calls beyond reading the online CPUs once per
//! image; decide whose view is whose (the cells live in [`crate::thread`]'s registry).

use crate::sys;
use core::sync::atomic::{fence, AtomicU64, Ordering};
use goset_plan::{cpulist, CpuSet};

const WORDS: usize = goset_plan::MAX_CPUS / 64;
/// Attempts at a consistent read or an exclusive write before giving up: a writer holds the
/// cell for sixteen stores, so this is only reached when one was preempted mid-write.
const TRIES: u32 = 1000;

/// The cell that holds one thread's view, or "never asked".
pub struct ViewCell {
    /// 0: never asked; odd: being written; even and non-zero: `words` hold the view.
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl ViewCell {
    /// A cell holding "never asked"; all-zero memory is one too.
    pub const fn new() -> ViewCell {
        #[allow(clippy::declare_interior_mutable_const)]
        const ZERO: AtomicU64 = AtomicU64::new(0);
        ViewCell {
            seq: AtomicU64::new(0),
            words: [ZERO; WORDS],
        }
    }

    /// The view, or `None` when the thread never asked (or, after a writer stalled for
    /// [`TRIES`] reads, as if it had not).
    pub fn get(&self) -> Option<CpuSet> {
        for _ in 0..TRIES {
            let before = self.seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let mut words = [0u64; WORDS];
            for (w, cell) in words.iter_mut().zip(&self.words) {
                *w = cell.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                // SAFETY: words is WORDS * 8 readable bytes, a CpuSet's worth.
                return Some(unsafe { CpuSet::from_raw(words.as_ptr().cast(), WORDS * 8) });
            }
        }
        None
    }

    /// Makes the view `view` (`None`: never asked). Concurrent writers (two threads setting a
    /// third's affinity at once) take turns; one that cannot get its turn drops its write,
    /// as if the other had come last.
    pub fn put(&self, view: Option<&CpuSet>) {
        let Some(set) = view else {
            self.seq.store(0, Ordering::Release);
            return;
        };
        for _ in 0..TRIES {
            let seq = self.seq.load(Ordering::Relaxed);
            if seq & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            if self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            fence(Ordering::Release);
            for (cell, &w) in self.words.iter().zip(set.words()) {
                cell.store(w, Ordering::Relaxed);
            }
            // Odd values are never 0, so the even value after is "asked"; a cell reset to
            // "never asked" meanwhile (its thread ended) stays reset.
            let _ =
                self.seq
                    .compare_exchange(seq + 1, seq + 2, Ordering::Release, Ordering::Relaxed);
            return;
        }
    }
}

impl Default for ViewCell {
    fn default() -> Self {
        ViewCell::new()
    }
}

/// The online CPUs, read once per image (a cell of the same kind, so no lock guards it).
static ONLINE: ViewCell = ViewCell::new();

/// What the kernel would have set for a request of `requested`: the request's online CPUs,
/// or the request itself when none is online.
pub fn granted(requested: &CpuSet) -> CpuSet {
    let online = ONLINE.get().unwrap_or_else(read_online);
    let inside = requested.intersection(&online);
    if inside.is_empty() {
        *requested
    } else {
        inside
    }
}

/// Reads `/sys/devices/system/cpu/online` into [`ONLINE`]. A file the shim cannot read or
/// parse (or a list longer than a short buffer, which only a machine with hundreds of
/// isolated online CPUs writes) counts as "every CPU", so views are the requests themselves.
#[cold]
#[inline(never)]
fn read_online() -> CpuSet {
    let mut text = [0u8; 256];
    let online = sys::read_whole(b"/sys/devices/system/cpu/online\0", &mut text)
        .ok()
        .and_then(|n| cpulist::parse_set(&text[..n]).ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| (0..goset_plan::MAX_CPUS).collect());
    ONLINE.put(Some(&online));
    online
}

/// Overwrites the `written` bytes the kernel just put at `mask` (its raw `sched_getaffinity`
/// result) with `view`: the caller gets the kernel's byte count and the view's bits.
///
/// # Safety
/// `mask` must be writable for `written` bytes (the kernel has just written them).
pub unsafe fn fill(mask: *mut u8, written: usize, view: &CpuSet) {
    let (src, size) = view.as_raw();
    let copied = written.min(size);
    // SAFETY: both ranges are valid for `copied` bytes (the caller's for `written`, the
    // set's for `size`) and distinct (the view is a local copy).
    unsafe {
        core::ptr::copy_nonoverlapping(src, mask, copied);
        // A kernel mask wider than a CpuSet (more than 1024 CPUs): the view holds none there.
        core::ptr::write_bytes(mask.add(copied), 0, written - copied);
    }
}

/// What glibc's `sched_getaffinity` and `pthread_getaffinity_np` do after the system call:
/// zero the rest of the caller's `size`-byte buffer beyond the `written` bytes.
///
/// # Safety
/// `mask` must be writable for `size` bytes, as the caller of those functions promises.
pub unsafe fn zero_rest(mask: *mut u8, written: usize, size: usize) {
    if written < size {
        // SAFETY: written < size, so the range lies inside the caller's buffer.
        unsafe { core::ptr::write_bytes(mask.add(written), 0, size - written) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_holds_never_asked_or_a_set() {
        let v = ViewCell::new();
        assert_eq!(v.get(), None);
        let set: CpuSet = [1, 64, 1023].into_iter().collect();
        v.put(Some(&set));
        assert_eq!(v.get(), Some(set));
        v.put(Some(&CpuSet::single(0)));
        assert_eq!(v.get(), Some(CpuSet::single(0)));
        v.put(None);
        assert_eq!(v.get(), None);
    }

    #[test]
    fn concurrent_writers_leave_one_whole_set() {
        let v = std::sync::Arc::new(ViewCell::new());
        let sets: Vec<CpuSet> = (0..4).map(|i| (i * 100..i * 100 + 50).collect()).collect();
        let writers: Vec<_> = sets
            .iter()
            .map(|&set| {
                let v = v.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        v.put(Some(&set));
                        // None only when a writer was preempted mid-write for all of a
                        // reader's tries (a loaded machine): never a torn set.
                        if let Some(got) = v.get() {
                            assert!(sets_contains(&got), "torn read: {got:?}");
                        }
                    }
                })
            })
            .collect();
        fn sets_contains(got: &CpuSet) -> bool {
            (0..4).any(|i| *got == (i * 100..i * 100 + 50).collect::<CpuSet>())
        }
        for w in writers {
            w.join().unwrap();
        }
        assert!(sets.contains(&v.get().unwrap()));
    }

    #[test]
    fn granted_keeps_online_cpus_or_the_request() {
        let online = read_online();
        let first = online.first().unwrap();
        let with_offline: CpuSet = [first, goset_plan::MAX_CPUS - 1].into_iter().collect();
        let expect = if online.contains(goset_plan::MAX_CPUS - 1) {
            with_offline
        } else {
            CpuSet::single(first)
        };
        assert_eq!(granted(&with_offline), expect);
        let beyond = CpuSet::single(goset_plan::MAX_CPUS - 1);
        if !online.contains(goset_plan::MAX_CPUS - 1) {
            assert_eq!(granted(&beyond), beyond, "none online: the request itself");
        }
    }

    #[test]
    fn fill_and_zero_rest_write_as_glibc_does() {
        let mut buf = [0xaau8; 200];
        let view: CpuSet = [0, 9].into_iter().collect();
        // SAFETY: buf is 200 writable bytes.
        unsafe {
            fill(buf.as_mut_ptr(), 8, &view);
            zero_rest(buf.as_mut_ptr(), 8, 16);
        }
        assert_eq!(&buf[..2], &[0x01, 0x02]);
        assert!(buf[2..16].iter().all(|&b| b == 0));
        assert!(buf[16..].iter().all(|&b| b == 0xaa), "past size: untouched");
        // SAFETY: as above; the kernel "wrote" 160 bytes, more than a CpuSet.
        unsafe { fill(buf.as_mut_ptr(), 160, &view) };
        assert!(buf[128..160].iter().all(|&b| b == 0));
    }
}
