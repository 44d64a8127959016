//! Per-thread state: the reentrancy guard, the thread's placement, and the process-local
//! registry that maps tids and `pthread_t`s of this process's placed threads to placements
//! and views (what they read back from the affinity calls, see [`crate::view`]).
//!
//! Owns: thread-locals with const initialisers and no destructors (so they work in any thread,
//! at any time, and register nothing with the runtime); the registry, lock-free chunks mapped
//! as threads need them (no cost until used, no limit short of a quarter million threads),
//! and the main thread's view. Must not: allocate on the heap or lock.

use crate::placement::Placement;
use crate::view::ViewCell;
use core::cell::Cell;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

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

/// After fork: the surviving thread forgets its parent's tid, placement and entry. It is the
/// child's main thread now, and its view becomes the main thread's (the kernel mask is
/// inherited); `was_main` says whether it already was.
pub fn forget(was_main: bool) {
    if !was_main {
        MAIN_VIEW.put(own_view().and_then(ViewCell::get).as_ref());
    }
    let _ = TID.try_with(|t| t.set(0));
    let _ = STATE.try_with(|s| s.set(0));
    let _ = ENTRY.try_with(|e| e.set(usize::MAX));
}

/// Entries per registry chunk; chunks are mapped one at a time, as threads need them.
const CHUNK: usize = 1024;
/// Chunks the registry can grow to: room for 262,144 live threads, more than Linux's
/// default `threads-max` on most machines; past that, one warning and the rest go untracked.
const CHUNKS: usize = 256;

struct Entry {
    tid: AtomicI32,
    thread: AtomicUsize,
    placement: AtomicU64,
    view: ViewCell,
}

/// The main thread's view (the main thread has no registry entry).
static MAIN_VIEW: ViewCell = ViewCell::new();

#[allow(clippy::declare_interior_mutable_const)]
const NO_CHUNK: AtomicPtr<Entry> = AtomicPtr::new(core::ptr::null_mut());
/// The registry: chunks of [`CHUNK`] entries, mapped on demand and never unmapped (a forked
/// child keeps them, as private copies), so a reader never meets freed memory.
static CHUNKS_MAPPED: [AtomicPtr<Entry>; CHUNKS] = [NO_CHUNK; CHUNKS];
/// One past the highest entry ever used since start or the last fork: lookups stop there.
static USED: AtomicUsize = AtomicUsize::new(0);
/// Entries freed lately, `index + 1` (0: none), for [`register`] to take first.
static FREED: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];

/// Chunk `i`, if it is mapped.
fn chunk(i: usize) -> Option<&'static [Entry]> {
    let ptr = CHUNKS_MAPPED.get(i)?.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a mapping of CHUNK entries that is never unmapped; all-zero
    // memory (a fresh anonymous mapping) is a free entry, since an Entry is only atomics.
    (!ptr.is_null()).then(|| unsafe { core::slice::from_raw_parts(ptr, CHUNK) })
}

/// Chunk `i`, mapping it when it is not yet (another thread may win the race: the loser's
/// mapping is returned to the kernel). `None` when the kernel gives no memory.
#[cold]
#[inline(never)]
fn map_chunk(i: usize) -> Option<&'static [Entry]> {
    let bytes = CHUNK * core::mem::size_of::<Entry>();
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it yet.
    let ptr = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return None;
    }
    let installed = CHUNKS_MAPPED[i].compare_exchange(
        core::ptr::null_mut(),
        ptr.cast(),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    if installed.is_err() {
        // SAFETY: our own mapping of `bytes` bytes, which no one else has seen.
        unsafe { libc::munmap(ptr, bytes) };
    }
    chunk(i)
}

/// Records the calling thread (`tid`, `thread`) with placement `p` and no view yet, for
/// lookups by others. When no entry can be had (the kernel gives no memory, or more than
/// `CHUNK * CHUNKS` threads are alive), says so once: the thread keeps its own placement,
/// but requests other threads make for it are clamped to the reservation instead.
pub fn register(tid: i32, thread: libc::pthread_t, p: Placement) {
    let take = |e: &Entry, index: usize| {
        if e.tid.load(Ordering::Relaxed) != 0
            || e.tid
                .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        e.view.put(None);
        e.thread.store(thread as usize, Ordering::Release);
        e.placement.store(p.pack(), Ordering::Release);
        USED.fetch_max(index + 1, Ordering::AcqRel);
        let _ = ENTRY.try_with(|c| c.set(index));
        true
    };
    // An entry a thread that ended freed lately: a program that churns threads beside
    // thousands of live ones takes one back at once, not after scanning past theirs.
    for hint in &FREED {
        let freed = hint.swap(0, Ordering::AcqRel);
        if let Some(index) = freed.checked_sub(1) {
            if entry(index).is_some_and(|e| take(e, index)) {
                return;
            }
        }
    }
    for i in 0..CHUNKS {
        let Some(entries) = chunk(i).or_else(|| map_chunk(i)) else {
            break;
        };
        for (j, e) in entries.iter().enumerate() {
            if take(e, i * CHUNK + j) {
                return;
            }
        }
    }
    crate::log::warn_once(format_args!(
        "cannot track thread {tid} (more than {} threads, or no memory): \
         other threads' affinity requests for it are clamped to the reservation",
        CHUNK * CHUNKS
    ));
}

fn entry(index: usize) -> Option<&'static Entry> {
    chunk(index / CHUNK).map(|c| &c[index % CHUNK])
}

/// Removes a registry entry, and offers it to the next [`register`].
pub fn unregister(index: usize) {
    if let Some(e) = entry(index) {
        e.view.put(None);
        e.thread.store(0, Ordering::Relaxed);
        e.placement.store(0, Ordering::Relaxed);
        e.tid.store(0, Ordering::Release);
        let offered = index + 1;
        for hint in &FREED {
            if hint
                .compare_exchange(0, offered, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                break;
            }
        }
    }
}

/// The entries in use (and free ones among them), in index order.
fn used() -> impl Iterator<Item = &'static Entry> {
    let n = USED.load(Ordering::Acquire);
    (0..n.div_ceil(CHUNK)).filter_map(chunk).flatten().take(n)
}

fn by_tid(tid: i32) -> Option<&'static Entry> {
    used().find(|e| e.tid.load(Ordering::Acquire) == tid)
}

/// The entry of `thread` and its tid.
fn by_thread(thread: libc::pthread_t) -> Option<(i32, &'static Entry)> {
    used().find_map(|e| {
        let tid = e.tid.load(Ordering::Acquire);
        (tid != 0 && e.thread.load(Ordering::Acquire) == thread as usize).then_some((tid, e))
    })
}

/// A thread of this process the shim placed, as the registry knows it.
#[derive(Clone, Copy)]
pub struct Known {
    /// Its tid.
    pub tid: i32,
    /// Its placement.
    pub placement: Placement,
    /// Its view cell.
    pub view: &'static ViewCell,
}

fn known(tid: i32, e: &'static Entry) -> Known {
    Known {
        tid,
        placement: Placement::unpack(e.placement.load(Ordering::Acquire)),
        view: &e.view,
    }
}

/// This process's thread `tid`, if the shim placed it.
pub fn find_tid(tid: i32) -> Option<Known> {
    by_tid(tid).map(|e| known(tid, e))
}

/// This process's thread `thread`, if the shim placed it.
pub fn find_thread(thread: libc::pthread_t) -> Option<Known> {
    by_thread(thread).map(|(tid, e)| known(tid, e))
}

/// The calling thread's own view cell, when it has a registry entry (the main thread has
/// none: see [`main_view`]).
pub fn own_view() -> Option<&'static ViewCell> {
    let index = ENTRY.try_with(Cell::get).unwrap_or(usize::MAX);
    entry(index).map(|e| &e.view)
}

/// The main thread's view cell.
pub fn main_view() -> &'static ViewCell {
    &MAIN_VIEW
}

/// After fork only the forking thread survives: empty the registry.
pub fn clear_registry() {
    for e in used() {
        e.view.put(None);
        e.tid.store(0, Ordering::Relaxed);
    }
    for hint in &FREED {
        hint.store(0, Ordering::Relaxed);
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
        assert_eq!(find_tid(999_999).map(|k| k.placement), Some(p));
        let k = find_thread(77).unwrap();
        assert_eq!((k.tid, k.placement), (999_999, p));
        let (_, entry) = take_state();
        unregister(entry);
        assert!(find_tid(999_999).is_none());
    }

    #[test]
    fn registry_grows_past_one_chunk() {
        let n = CHUNK + 100;
        let base = 5_000_000;
        let mut entries = Vec::new();
        for i in 0..n {
            let p = Placement::unslotted(Role::Worker, Some(i % 7));
            register(base + i as i32, 1_000_000 + i as libc::pthread_t, p);
            entries.push(take_state().1);
        }
        assert!(entries.iter().any(|&e| e >= CHUNK), "{entries:?}");
        let last = base + n as i32 - 1;
        let k = find_tid(last).unwrap();
        assert_eq!(k.placement.cpu, Some((n - 1) % 7));
        assert_eq!(k.view.get(), None, "a new entry has no view");
        k.view.put(Some(&goset_plan::CpuSet::single(3)));
        let by_thread = find_thread(1_000_000 + n as libc::pthread_t - 1).unwrap();
        assert_eq!(by_thread.tid, last);
        assert_eq!(by_thread.view.get(), Some(goset_plan::CpuSet::single(3)));
        for e in entries {
            unregister(e);
        }
        assert!(find_tid(last).is_none());
    }
}
