//! Fixed memory the shim builds text and keeps state in, instead of the heap or a big stack
//! frame: [`Buf`], a small buffer for paths and log text, and [`Exclusive`], static memory
//! reached one at a time by protocol (initialisation's buffers, the warning's line).
//!
//! Owns: [`Exclusive`]; [`Buf`] is the contract's ([`goset_plan::buf`]), since the placement
//! log's writer fills one. Must not: allocate, make system calls, or panic.

/// Static memory that its users reach one at a time by protocol rather than by a lock: the
/// buffers of initialisation (only the thread that won the initialisation touches them, and
/// only before the configuration is published; after that they are read-only), and the
/// one-time warning's line (only the thread that claimed the warning). Big buffers live here
/// and not on the stack: the shim runs on other programs' stacks, some of 16 KiB.
pub struct Exclusive<T>(core::cell::UnsafeCell<T>);

// SAFETY: every access goes through the unsafe methods below, whose callers guarantee that
// a mutable access never overlaps any other access.
unsafe impl<T> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    /// Wraps an initial value.
    pub const fn new(value: T) -> Self {
        Exclusive(core::cell::UnsafeCell::new(value))
    }

    /// The value, for writing.
    ///
    /// # Safety
    /// No other reference to the value may be live, now or until this one ends (the caller is
    /// the one thread that may write it, per the protocol of the static).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&self) -> &mut T {
        // SAFETY: exclusive by the caller's guarantee.
        unsafe { &mut *self.0.get() }
    }

    /// The value, for reading.
    ///
    /// # Safety
    /// No mutable reference may be live: the writes are over and published (an Acquire load of
    /// the flag that a Release store set after them), or the caller is the writer.
    pub unsafe fn get(&self) -> &T {
        // SAFETY: no writer overlaps, by the caller's guarantee.
        unsafe { &*self.0.get() }
    }
}

pub use goset_plan::buf::Buf;
