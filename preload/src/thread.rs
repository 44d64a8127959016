//! Per-thread state: the reentrancy guard, the thread's placement, and the process-local
//! registry that maps tids and `pthread_t`s of this process's placed threads to placements
//! and views (what they read back from the affinity calls, see [`crate::view`]).
//!
//! Owns: thread-locals with const initialisers and no destructors (so they work in any thread,
//! at any time, and register nothing with the runtime); the registry, lock-free chunks mapped
//! as threads need them (no cost until used, no limit short of a quarter million threads),
//! and the main thread's view. Must not: allocate on the heap or lock.

use crate::claim::Placement;
use crate::view::ViewCell;
use core::cell::Cell;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

thread_local! {
    static GUARD: Cell<bool> = const { Cell::new(false) };
    static STATE: Cell<u64> = const { Cell::new(0) };
    static TID: Cell<i32> = const { Cell::new(0) };
    static ENTRY: Cell<usize> = const { Cell::new(usize::MAX) };
    static LAST_SET: Cell<u64> = const { Cell::new(0) };
    static STREAK: Cell<u32> = const { Cell::new(0) };
    // The creation that last read this thread's CPU time: its wall and CPU time (µs), and
    // whether it found the thread waiting on its brief children (see `child_born`).
    static LAST_CREATION: Cell<(u64, u64, bool)> = const { Cell::new((0, 0, false)) };
    static PARENT: Cell<(usize, u64)> = const { Cell::new((NO_CELL, 0)) };
    static DEFERRED: Cell<usize> = const { Cell::new(0) };
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
    let _ = STREAK.try_with(|s| s.set(0));
    let _ = LAST_CREATION.try_with(|c| c.set((0, 0, false)));
    let _ = PARENT.try_with(|p| p.set((NO_CELL, 0)));
    let _ = DEFERRED.try_with(|d| d.set(0));
    MAIN_LAST_CHILD.store(0, Ordering::Relaxed);
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
    /// The latest child this thread created: its birth (µs) `<< 1`, `| 1` once it ended
    /// briefly (see [`child_born`]).
    last_child: AtomicU64,
}

/// The main thread's view (the main thread has no registry entry).
static MAIN_VIEW: ViewCell = ViewCell::new();
/// The main thread's [`Entry::last_child`].
static MAIN_LAST_CHILD: AtomicU64 = AtomicU64::new(0);
/// The cell id of [`MAIN_LAST_CHILD`]; registry indexes name the others.
const MAIN_CELL: usize = usize::MAX - 1;
/// No cell: a thread with no registry entry, or no creator to report to.
const NO_CELL: usize = usize::MAX;

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
    let ptr = crate::sys::map_zeroed(bytes)?;
    let installed = CHUNKS_MAPPED[i].compare_exchange(
        core::ptr::null_mut(),
        ptr.cast(),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    if installed.is_err() {
        // SAFETY: our own mapping of `bytes` bytes, which no one else has seen.
        unsafe { libc::munmap(ptr.cast(), bytes) };
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
        e.last_child.store(0, Ordering::Relaxed);
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

/// A thread that lived less than this ended briefly: it cost less than pinning it elsewhere
/// saves (a birth on a CPU of its own means a stopped start, a mask set from the parent and a
/// wakeup across CPUs, tens of microseconds; a millisecond of work on a shared CPU costs
/// at most that millisecond).
pub const BRIEF_US: u64 = 1_000;
/// Children in a row that ended briefly before the next was created, after which a creator's
/// new children are born beside it: one brief thread (a library's start-up helper) says
/// nothing of the pool that follows; several in a row are a churning creator.
pub const BRIEF_STREAK: u32 = 3;

/// A creator's cell for its latest child (see [`Entry::last_child`]).
fn child_cell(index: usize) -> Option<&'static AtomicU64> {
    match index {
        MAIN_CELL => Some(&MAIN_LAST_CHILD),
        _ => entry(index).map(|e| &e.last_child),
    }
}

/// Whether a creator's next child is born beside it, with its mask: its last
/// [`BRIEF_STREAK`] children (or more) each ended briefly before the next was created, and it
/// waited while the last one lived (its CPU time over that interval under half the wall time),
/// so that the child takes nothing from it. A creator that computes beside its brief children
/// (a fork-join loop of short tasks) keeps giving each a CPU of its own.
pub fn born_beside(streak: u32, wall_us: u64, cpu_us: u64) -> bool {
    streak >= BRIEF_STREAK && cpu_us.saturating_mul(2) < wall_us
}

/// How long a creator found waiting on the brief children it churns keeps them beside it
/// before its CPU time is read again. Reading a thread's CPU time is a system call of about
/// half a microsecond, a twentieth of a whole creation in a churning loop (and a churning
/// creator that shares its CPU creates one about every 300 µs); once every 10 ms is enough to
/// notice a creator that started to compute. A creator found computing is read again at its
/// next creation: that verdict rests on one interval, which a slow start (the first
/// children's own CPUs) can stretch, and holding it would keep a waiting creator's children
/// off its CPU for nothing.
pub const RECHECK_US: u64 = 10_000;

/// What a creator knows of the child it is about to create (see [`child_born`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Birth {
    /// The creator's cell the child reports to ([`set_parent`]).
    pub cell: usize,
    /// Born beside its creator, with its mask ([`born_beside`]).
    pub beside: bool,
    /// The creator's last [`BRIEF_STREAK`] children (or more) each ended briefly before the
    /// next was created: this one most likely will too, wherever it is born, so its records
    /// wait until it ends (see `goset_plan::slots::Deferred`).
    pub churning: bool,
}

/// In a thread creating another at `now_us` (`main`: the process's main thread): records the
/// new child's birth, and says where it reports to, whether it is born beside this thread
/// ([`born_beside`]) and whether this thread churns brief children. `cpu_us` reads this
/// thread's CPU time, only when the last child ended briefly, and while this thread churns
/// and waits on its children at most once every [`RECHECK_US`].
pub fn child_born(main: bool, now_us: u64, cpu_us: impl FnOnce() -> u64) -> Birth {
    let index = match main {
        true => MAIN_CELL,
        false => ENTRY.try_with(Cell::get).unwrap_or(NO_CELL),
    };
    let Some(cell) = child_cell(index) else {
        return Birth {
            cell: NO_CELL,
            beside: false,
            churning: false,
        };
    };
    let brief = cell.swap(now_us << 1, Ordering::AcqRel) & 1 != 0;
    let streak = STREAK
        .try_with(|s| {
            let n = if brief { s.get().saturating_add(1) } else { 0 };
            s.set(n);
            n
        })
        .unwrap_or(0);
    let churning = streak >= BRIEF_STREAK;
    let (last_wall, last_cpu, waited) = LAST_CREATION.try_with(Cell::get).unwrap_or((0, 0, false));
    if waited && churning && now_us.saturating_sub(last_wall) < RECHECK_US {
        return Birth {
            cell: index,
            beside: true,
            churning,
        };
    }
    let cpu = if brief { cpu_us() } else { 0 };
    // The previous reading took no CPU time (its own last child had not ended briefly):
    // nothing tells whether this thread waited, so it has not.
    let beside = last_cpu != 0
        && born_beside(
            streak,
            now_us.saturating_sub(last_wall),
            cpu.saturating_sub(last_cpu),
        );
    let _ = LAST_CREATION.try_with(|c| c.set((now_us, cpu, beside)));
    Birth {
        cell: index,
        beside,
        churning,
    }
}

/// In a new thread: whose child it is (the cell [`child_born`] returned) and its birth.
pub fn set_parent(cell: usize, born_us: u64) {
    let _ = PARENT.try_with(|p| p.set((cell, born_us)));
}

/// In an ending thread: whether it ended briefly (lived under [`BRIEF_US`]); if so, tells its
/// creator, when it is still the creator's latest child. A creator that ended meanwhile, its
/// entry reused, holds another birth, so the report is lost, not misplaced.
pub fn ending() -> bool {
    let (index, born) = PARENT
        .try_with(|p| p.replace((NO_CELL, 0)))
        .unwrap_or((NO_CELL, 0));
    let brief = born != 0 && goset_plan::clock::monotonic_us().saturating_sub(born) < BRIEF_US;
    if !brief {
        return false;
    }
    if let Some(cell) = child_cell(index) {
        let _ = cell.compare_exchange(
            born << 1,
            born << 1 | 1,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
    true
}

/// In a new thread whose records are deferred: its entry in the slot table's list (see
/// [`goset_plan::slots::Deferred`]).
pub fn set_deferred(index: usize) {
    let _ = DEFERRED.try_with(|d| d.set(index + 1));
}

/// In an ending thread: its deferred-list entry, if its records were deferred.
pub fn take_deferred() -> Option<usize> {
    DEFERRED.try_with(|d| d.replace(0)).ok()?.checked_sub(1)
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
mod tests;
