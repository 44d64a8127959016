//! Files and descriptors: opening (relative to the working directory or a directory
//! descriptor), bounded reads of regular files that never block, writes, `fstat` as the shim
//! needs it, and descriptors moved out of the low numbers a program may expect free.

use super::errno::error_of;
use goset_plan::raw::syscall6;

/// `openat(AT_FDCWD, path, flags, mode)`; `path` must end with a NUL byte. The error is an errno.
pub fn open(path: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
    open_in(libc::AT_FDCWD, path, flags, mode)
}

/// `openat(dir, name, flags, mode)`; `name` must end with a NUL byte. The error is an errno.
pub fn open_in(dir: i32, name: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
    if name.last() != Some(&0) {
        return Err(libc::EINVAL);
    }
    // SAFETY: name is NUL-terminated and lives across the call.
    let ret = unsafe {
        syscall6(
            libc::SYS_openat,
            [
                dir as i64,
                name.as_ptr() as i64,
                flags as i64,
                mode as i64,
                0,
                0,
            ],
        )
    };
    match error_of(ret) {
        Some(e) => Err(e),
        None => Ok(ret as i32),
    }
}

/// A `*at` system call on `path` relative to the working directory, with two more arguments;
/// EINVAL without a system call when `path` is not NUL-terminated.
fn at_cwd(nr: i64, path: &[u8], a: i64, b: i64) -> Result<i64, i32> {
    if path.last() != Some(&0) {
        return Err(libc::EINVAL);
    }
    // SAFETY: path is NUL-terminated and lives across the call; callers pass the arguments
    // their system call expects (a buffer they own for readlinkat).
    Ok(unsafe {
        syscall6(
            nr,
            [libc::AT_FDCWD as i64, path.as_ptr() as i64, a, b, 0, 0],
        )
    })
}

/// Reads until `buf` is full or end of file; the number of bytes read.
fn read_all(fd: i32, buf: &mut [u8]) -> Option<usize> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the kernel writes at most buf.len() - done bytes past buf[done].
        let ret = unsafe {
            syscall6(
                libc::SYS_read,
                [
                    fd as i64,
                    buf[done..].as_mut_ptr() as i64,
                    (buf.len() - done) as i64,
                    0,
                    0,
                    0,
                ],
            )
        };
        match ret {
            0 => break,
            r if r > 0 => done += r as usize,
            r if error_of(r) == Some(libc::EINTR) => continue,
            _ => return None,
        }
    }
    Some(done)
}

/// One `write(2)` of all of `buf` (what O_APPEND makes atomic); errors are dropped.
pub fn write(fd: i32, buf: &[u8]) {
    loop {
        // SAFETY: buf is readable for its length.
        let ret = unsafe {
            syscall6(
                libc::SYS_write,
                [fd as i64, buf.as_ptr() as i64, buf.len() as i64, 0, 0, 0],
            )
        };
        if error_of(ret) != Some(libc::EINTR) {
            return;
        }
    }
}

/// Scatter write of `parts` with one `writev(2)` (one record, whole, on an `O_APPEND` file);
/// errors, a full pipe included, are dropped.
pub fn writev(fd: i32, parts: &[&[u8]]) {
    const MAX: usize = 4;
    let mut iov = [libc::iovec {
        iov_base: core::ptr::null_mut(),
        iov_len: 0,
    }; MAX];
    let n = parts.len().min(MAX);
    for (v, p) in iov.iter_mut().zip(parts) {
        v.iov_base = p.as_ptr() as *mut libc::c_void;
        v.iov_len = p.len();
    }
    loop {
        // SAFETY: the first n iovecs describe live, readable slices.
        let ret = unsafe {
            syscall6(
                libc::SYS_writev,
                [fd as i64, iov.as_ptr() as i64, n as i64, 0, 0, 0],
            )
        };
        if error_of(ret) != Some(libc::EINTR) {
            return;
        }
    }
}

/// What identifies an open file: device and inode, as `fstat` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// What `fstat` tells the shim about an open file.
#[derive(Debug, Clone, Copy)]
pub struct FileStat {
    /// Device and inode.
    pub id: Identity,
    /// The type (`S_IFMT` bits).
    pub kind: u32,
    /// Size in bytes.
    pub size: u64,
    /// Owner, mode and links, for [`goset_plan::rootfile`].
    pub owned: goset_plan::rootfile::Owned,
}

/// `fstat(fd)`; `None` for a descriptor that is not open.
pub fn fstat(fd: i32) -> Option<FileStat> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: the kernel writes one stat struct into st.
    let ret = unsafe {
        syscall6(
            libc::SYS_fstat,
            [fd as i64, st.as_mut_ptr() as i64, 0, 0, 0, 0],
        )
    };
    if ret != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so st is initialised.
    let st = unsafe { st.assume_init_ref() };
    Some(FileStat {
        id: Identity {
            dev: st.st_dev,
            ino: st.st_ino,
        },
        kind: st.st_mode & libc::S_IFMT,
        size: st.st_size as u64,
        owned: goset_plan::rootfile::Owned {
            uid: st.st_uid,
            mode: st.st_mode,
            nlink: st.st_nlink,
        },
    })
}

/// The identity of `fd`, when it is open.
pub fn identity(fd: i32) -> Option<Identity> {
    fstat(fd).map(|st| st.id)
}

/// A close-on-exec duplicate of `fd` at the floor of [`goset_plan::descriptor`] or above
/// (512, or the upper half of a lower `RLIMIT_NOFILE`); `fd` itself when no duplicate can be
/// made. The caller closes `fd` when it gets another descriptor back.
pub fn dup_high(fd: i32) -> i32 {
    let floor = goset_plan::descriptor::floor_now();
    if floor <= fd as i64 {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC reads no memory.
    let ret = unsafe {
        syscall6(
            libc::SYS_fcntl,
            [fd as i64, libc::F_DUPFD_CLOEXEC as i64, floor, 0, 0, 0],
        )
    };
    if ret < 0 {
        fd
    } else {
        ret as i32
    }
}

/// Why a file the shim reads was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileError {
    /// `open` or `read` failed with this errno.
    Os(i32),
    /// Not a regular file (a FIFO, a device, a directory ...).
    NotRegular,
    /// Larger than the shim reads.
    TooBig,
}

impl core::fmt::Display for FileError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            FileError::Os(e) => write!(f, "{}", ErrnoName(e)),
            FileError::NotRegular => f.write_str("not a regular file"),
            FileError::TooBig => f.write_str("too large"),
        }
    }
}

/// An errno as its name where the shim's messages are likely to meet it, else its number.
pub struct ErrnoName(pub i32);

impl core::fmt::Display for ErrnoName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = match self.0 {
            libc::ENOENT => "ENOENT, no such file",
            libc::EACCES => "EACCES, permission denied",
            libc::EPERM => "EPERM, not permitted",
            libc::ENXIO => "ENXIO, no reader",
            libc::EISDIR => "EISDIR, a directory",
            libc::ENOTDIR => "ENOTDIR",
            libc::ELOOP => "ELOOP",
            libc::EROFS => "EROFS, read-only file system",
            libc::EMFILE => "EMFILE, too many open files",
            e => return write!(f, "errno {e}"),
        };
        f.write_str(name)
    }
}

/// Opens `path` (NUL-terminated) for reading without ever blocking (`O_NONBLOCK`: a FIFO
/// without a writer, a device) and checks it is a regular file.
fn open_regular(path: &[u8]) -> Result<i32, FileError> {
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    let fd = open(path, flags, 0).map_err(FileError::Os)?;
    match fstat(fd) {
        Some(st) if st.kind == libc::S_IFREG => Ok(fd),
        _ => {
            close(fd);
            Err(FileError::NotRegular)
        }
    }
}

/// The first `buf.len()` bytes (at most) of the regular file at `path` (NUL-terminated): the
/// one reader of every file the shim reads, bounded, non-blocking, regular files only.
pub fn read_prefix(path: &[u8], buf: &mut [u8]) -> Result<usize, FileError> {
    let fd = open_regular(path)?;
    let n = read_all(fd, buf);
    close(fd);
    n.ok_or(FileError::Os(libc::EIO))
}

/// The whole regular file at `path` (NUL-terminated) into `buf`; [`FileError::TooBig`] when it
/// does not fit.
pub fn read_whole(path: &[u8], buf: &mut [u8]) -> Result<usize, FileError> {
    let fd = open_regular(path)?;
    let n = read_all(fd, buf);
    let more = n == Some(buf.len()) && read_all(fd, &mut [0u8; 1]) != Some(0);
    close(fd);
    match n {
        Some(_) if more => Err(FileError::TooBig),
        Some(n) => Ok(n),
        None => Err(FileError::Os(libc::EIO)),
    }
}

/// Closes `fd`.
pub fn close(fd: i32) {
    // SAFETY: closing an fd we opened.
    unsafe { syscall6(libc::SYS_close, [fd as i64, 0, 0, 0, 0, 0]) };
}

/// Whether `path` (NUL-terminated) exists.
pub fn exists(path: &[u8]) -> bool {
    at_cwd(libc::SYS_faccessat, path, libc::F_OK as i64, 0) == Ok(0)
}

/// `readlink(path)` into `buf`; the length of the target.
pub fn readlink(path: &[u8], buf: &mut [u8]) -> Option<usize> {
    // The kernel writes at most buf.len() bytes into buf.
    let ret = at_cwd(
        libc::SYS_readlinkat,
        path,
        buf.as_mut_ptr() as i64,
        buf.len() as i64,
    )
    .ok()?;
    (ret >= 0).then_some(ret as usize)
}
