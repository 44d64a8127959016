//! [`Buf`], the fixed buffer the shim builds paths and log lines in instead of the heap.
//!
//! It lives in the contract because the placement log's writer ([`crate::log::format`]) fills
//! one, and the launcher's tests format records exactly as the shim does.
//! Must not: allocate, make system calls, or panic.

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
