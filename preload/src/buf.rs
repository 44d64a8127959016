//! Fixed memory the shim builds text and keeps state in, instead of the heap or a big stack
//! frame: [`Buf`], a small buffer for paths and log text, and [`Exclusive`], static memory
//! reached one at a time by protocol (initialisation's buffers, the warning's line).
//!
//! Owns: those two types. Must not: allocate, make system calls, or panic.

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

/// A small fixed buffer that builds NUL-terminated paths and other text without allocating.
pub struct Buf<const N: usize> {
    // Not zeroed: a record's buffer is kilobytes, and only the written prefix is ever read.
    bytes: [core::mem::MaybeUninit<u8>; N],
    len: usize,
    overflow: bool,
}

impl<const N: usize> Buf<N> {
    /// An empty buffer.
    pub const fn new() -> Self {
        Buf {
            bytes: [core::mem::MaybeUninit::uninit(); N],
            len: 0,
            overflow: false,
        }
    }

    /// Appends bytes; remembers when they did not fit.
    pub fn push(&mut self, s: &[u8]) -> &mut Self {
        let room = N - self.len;
        let n = s.len().min(room);
        // SAFETY: n <= room, so the copy stays inside `bytes`; source and buffer are distinct.
        unsafe {
            core::ptr::copy_nonoverlapping(
                s.as_ptr(),
                self.bytes.as_mut_ptr().add(self.len).cast(),
                n,
            )
        };
        self.len += n;
        self.overflow |= n < s.len();
        self
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by `push`.
        unsafe { core::slice::from_raw_parts(self.bytes.as_ptr().cast(), self.len) }
    }

    /// The bytes with a NUL appended, or `None` if they did not fit.
    pub fn c_str(&mut self) -> Option<&[u8]> {
        if self.overflow || self.len >= N {
            return None;
        }
        self.bytes[self.len] = core::mem::MaybeUninit::new(0);
        // SAFETY: the first `len` bytes were written by `push`, and byte `len` just now.
        Some(unsafe { core::slice::from_raw_parts(self.bytes.as_ptr().cast(), self.len + 1) })
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops what was written after the first `len` bytes, and any overflow since.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        self.overflow = false;
    }

    /// Whether everything written fitted.
    pub fn fits(&self) -> bool {
        !self.overflow
    }
}

impl<const N: usize> Default for Buf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Write for Buf<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push(s.as_bytes());
        if self.overflow {
            Err(core::fmt::Error)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buf_tracks_overflow() {
        let mut b = Buf::<8>::new();
        b.push(b"/proc");
        assert_eq!(b.c_str(), Some(&b"/proc\0"[..]));
        b.push(b"/self");
        assert!(!b.fits());
        assert_eq!(b.c_str(), None);
        b.truncate(2);
        assert!(b.fits());
        assert_eq!(b.as_bytes(), b"/p");
    }
}
