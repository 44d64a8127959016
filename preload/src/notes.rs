//! Memory for the notes a creating thread hands its new thread (the trampoline's argument),
//! outside the program's heap: a `malloc` there is one the program's allocation profiler
//! (heaptrack, a leak checker) counts as its own, and a program's allocator may not expect
//! calls from inside `pthread_create`.
//!
//! Owns: a static pool of [`POOL`] cells taken and given back by compare-and-swap on a bitmap,
//! and a private anonymous mapping for a note when every cell is in flight. Must not: lock,
//! allocate on the heap, or hold anything across `fork` (the child's handler resets the pool:
//! the notes in flight belong to threads that are not born in the child).

use core::mem::{align_of, size_of, MaybeUninit};
use core::sync::atomic::{AtomicU64, Ordering};

/// Notes the pool holds; creations in flight beyond this take a mapping each.
const POOL: usize = 256;
const WORDS: usize = POOL / 64;
/// The largest note the pool takes (the shim's one note fits; a bigger one is mapped).
const CELL: usize = 512;

#[repr(C, align(64))]
struct Cell(MaybeUninit<[u8; CELL]>);

struct Pool {
    cells: core::cell::UnsafeCell<[Cell; POOL]>,
    taken: [AtomicU64; WORDS],
}

// SAFETY: a cell is written and read only by the thread that took it (by CAS on `taken`) and
// the thread it was handed to, which the program's `pthread_create` orders.
unsafe impl Sync for Pool {}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Cell = Cell(MaybeUninit::uninit());
static NOTES: Pool = Pool {
    cells: core::cell::UnsafeCell::new([EMPTY; POOL]),
    taken: [FREE; WORDS],
};

/// Whether a `T` fits a pool cell (a bigger note costs a mapping at every take).
pub const fn fits<T>() -> bool {
    size_of::<T>() <= CELL && align_of::<T>() <= 64
}

/// Memory for one `T`, uninitialised; `None` when none can be had.
pub fn take<T>() -> Option<*mut T> {
    if !fits::<T>() {
        return mapped();
    }
    for (w, word) in NOTES.taken.iter().enumerate() {
        let mut bits = word.load(Ordering::Relaxed);
        while bits != u64::MAX {
            let bit = (!bits).trailing_zeros() as usize;
            match word.compare_exchange_weak(
                bits,
                bits | 1 << bit,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(cell(w * 64 + bit).cast()),
                Err(now) => bits = now,
            }
        }
    }
    mapped()
}

/// Gives back memory [`take`] returned.
///
/// # Safety
/// `p` came from [`take::<T>`] and is not used afterwards.
pub unsafe fn give_back<T>(p: *mut T) {
    match index_of(p.cast()) {
        Some(i) => {
            NOTES.taken[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
        }
        // SAFETY: not in the pool, so mapped() made it, of this size.
        None => unsafe {
            libc::munmap(p.cast(), size_of::<T>());
        },
    }
}

/// After fork, in the child: no note is in flight (only the forking thread lives).
pub fn reset_after_fork() {
    for word in &NOTES.taken {
        word.store(0, Ordering::Relaxed);
    }
}

fn cell(i: usize) -> *mut u8 {
    // SAFETY: i < POOL; a pointer into the static, not a reference.
    unsafe { (NOTES.cells.get() as *mut Cell).add(i).cast() }
}

fn index_of(p: *mut u8) -> Option<usize> {
    let base = cell(0) as usize;
    let at = (p as usize).checked_sub(base)?;
    (at < POOL * size_of::<Cell>()).then_some(at / size_of::<Cell>())
}

fn mapped<T>() -> Option<*mut T> {
    crate::sys::map_zeroed(size_of::<T>()).map(|p| p.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_come_from_the_pool_then_from_mappings_and_go_back() {
        let taken: Vec<*mut [u8; 300]> = (0..POOL + 3).filter_map(|_| take()).collect();
        assert_eq!(taken.len(), POOL + 3);
        let pooled = taken
            .iter()
            .filter(|p| index_of(p.cast()).is_some())
            .count();
        // Other tests of this binary may hold cells; every note is distinct all the same.
        assert!(pooled <= POOL);
        let mut sorted: Vec<usize> = taken.iter().map(|p| *p as usize).collect();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), POOL + 3);
        for p in taken {
            // SAFETY: from take, used no more.
            unsafe { give_back(p) };
        }
        let again: *mut [u8; 300] = take().unwrap();
        assert!(index_of(again.cast()).is_some(), "a cell is free again");
        // SAFETY: as above.
        unsafe { give_back(again) };
    }
}
