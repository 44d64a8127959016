//! The walk through libc, for the programs that have std: goset-run, goset-bench and
//! goset-dist open and replace the files a user names by [`super::walk`], as root by the rule.

use super::walk::{self, Calls, Dir, Refusal};
use super::Owned;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The walk's system calls, made through libc.
pub struct Libc;

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn c_str(name: &[u8]) -> Result<&CStr, i32> {
    CStr::from_bytes_with_nul(name).map_err(|_| libc::EINVAL)
}

impl Calls for Libc {
    fn open_at(&self, dir: i32, name: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        // SAFETY: the name is NUL-terminated; the descriptor returned is the caller's.
        let fd = unsafe { libc::openat(dir, c_str(name)?.as_ptr(), flags, mode) };
        if fd < 0 {
            Err(errno())
        } else {
            Ok(fd)
        }
    }

    fn stat_fd(&self, fd: i32) -> Result<Owned, i32> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: st is a stat-sized out-parameter.
        if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
            return Err(errno());
        }
        // SAFETY: fstat succeeded, so st is filled.
        let st = unsafe { st.assume_init() };
        // nlink_t is u64 on x86_64 but u32 on aarch64.
        #[allow(clippy::unnecessary_cast)]
        Ok(Owned {
            uid: st.st_uid,
            mode: st.st_mode,
            nlink: st.st_nlink as u64,
        })
    }

    fn is_link_at(&self, dir: i32, name: &[u8]) -> bool {
        let Ok(name) = c_str(name) else {
            return false;
        };
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        let flags = libc::AT_SYMLINK_NOFOLLOW;
        // SAFETY: name is NUL-terminated, st a stat-sized out-parameter.
        let rc = unsafe { libc::fstatat(dir, name.as_ptr(), st.as_mut_ptr(), flags) };
        // SAFETY: fstatat succeeded, so st is filled.
        rc == 0 && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFLNK
    }

    fn make_dir_at(&self, dir: i32, name: &[u8], mode: u32) -> Result<(), i32> {
        // SAFETY: the name is NUL-terminated.
        match unsafe { libc::mkdirat(dir, c_str(name)?.as_ptr(), mode) } {
            0 => Ok(()),
            _ => Err(errno()),
        }
    }

    fn chmod_fd(&self, fd: i32, mode: u32) -> Result<(), i32> {
        // SAFETY: no memory is passed.
        match unsafe { libc::fchmod(fd, mode) } {
            0 => Ok(()),
            _ => Err(errno()),
        }
    }

    fn close(&self, fd: i32) {
        // SAFETY: the walk closes only descriptors it opened and no longer uses.
        unsafe { libc::close(fd) };
    }
}

/// Whether this process writes as root, so by the rule.
pub fn as_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The error a refusal is, in words that name what to do instead.
pub fn error(refusal: Refusal) -> io::Error {
    let why = match refusal {
        Refusal::Os(e) => return io::Error::from_raw_os_error(e),
        Refusal::Link => "a symbolic link in a directory other users can write to, which root does not follow (name the file itself)",
        Refusal::Swappable => "other users can write to a directory of the path and it is not sticky, so they could swap the file for a link (name a file in a directory of root's)",
        Refusal::NotTheirs => "in a directory other users can write to, it must be a regular file with one link (or a directory), of root's or of the directory's owner",
    };
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// The directory `path` names, opened by the rule; missing ones made with `make`'s mode.
pub fn open_dir(path: &Path, make: Option<u32>) -> io::Result<DirFd> {
    let dir = walk::walk(&Libc, path.as_os_str().as_bytes(), as_root(), make).map_err(error)?;
    Ok(DirFd {
        // SAFETY: the walk hands over the descriptor it opened.
        fd: unsafe { OwnedFd::from_raw_fd(dir.fd) },
        dir,
    })
}

/// A directory opened by the rule.
pub struct DirFd {
    fd: OwnedFd,
    dir: Dir,
}

impl DirFd {
    /// Opens `name` in it by the rule (`O_CLOEXEC|O_NOCTTY` added).
    pub fn open(&self, name: &[u8], flags: i32, mode: u32) -> io::Result<File> {
        let flags = flags | libc::O_CLOEXEC | libc::O_NOCTTY;
        let fd = walk::open_in(&Libc, &self.dir, name, flags, mode).map_err(error)?;
        // SAFETY: fd was just opened and nothing else owns it.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Writes `bytes` as the file `name` with `mode`, replacing what had that name (a link is
    /// replaced, never followed): a new file of an unguessable name, made with `O_EXCL`, then
    /// renamed over `name`, so that no one sees it half written, as install(1) does.
    pub fn replace(&self, name: &[u8], bytes: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        let (tmp_name, mut file) = self.new_temporary(name)?;
        let written = file
            .write_all(bytes)
            .and_then(|_| file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)))
            .and_then(|_| self.rename(&tmp_name, name));
        if written.is_err() {
            // SAFETY: tmp_name is NUL-terminated; removing our own temporary name only.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), tmp_name.as_ptr(), 0) };
        }
        written
    }

    /// A new empty file `.<name>.<random>` beside `name`, only its owner's to open.
    fn new_temporary(&self, name: &[u8]) -> io::Result<(std::ffi::CString, File)> {
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let dir = self.fd.as_raw_fd();
        let (name, fd) = unguessable(name, |c| {
            Libc.open_at(dir, c.to_bytes_with_nul(), flags, 0o600)
        })?;
        // SAFETY: the descriptor was just opened and nothing else owns it.
        Ok((name, unsafe { File::from_raw_fd(fd) }))
    }

    /// Makes a new directory `.<prefix>.<random>` in it, 0700, and returns its name: private
    /// to its maker, and, where others cannot move things (see [`DirFd::others_can_move`]),
    /// staying where it is.
    pub fn make_private_dir(&self, prefix: &[u8]) -> io::Result<std::ffi::OsString> {
        let dir = self.fd.as_raw_fd();
        let (name, ()) = unguessable(prefix, |c| {
            Libc.make_dir_at(dir, c.to_bytes_with_nul(), 0o700)
        })?;
        Ok(std::ffi::OsStr::from_bytes(name.as_bytes()).to_owned())
    }

    /// Whether others could rename or remove what root makes in it: they can write to it and
    /// it is not sticky, or it is another user's.
    pub fn others_can_move(&self) -> bool {
        self.dir.guarded && (self.dir.owned.uid != 0 || self.dir.owned.mode & libc::S_ISVTX == 0)
    }

    /// Removes the file `name` in it (a link itself, never what it points to).
    pub fn remove(&self, name: &[u8]) -> io::Result<()> {
        let name = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: name is NUL-terminated.
        match unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    fn rename(&self, from: &CStr, to: &[u8]) -> io::Result<()> {
        let to = std::ffi::CString::new(to).map_err(|_| io::ErrorKind::InvalidInput)?;
        let dir = self.fd.as_raw_fd();
        // SAFETY: both names are NUL-terminated, in the one directory the walk checked.
        match unsafe { libc::renameat(dir, from.as_ptr(), dir, to.as_ptr()) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

/// Makes something (`make`) by a new name `.<base>.<random>`, trying again while the name is
/// taken (`EEXIST`).
fn unguessable<T>(
    base: &[u8],
    make: impl Fn(&std::ffi::CStr) -> Result<T, i32>,
) -> io::Result<(std::ffi::CString, T)> {
    for _ in 0..16 {
        let mut name = b".".to_vec();
        name.extend_from_slice(&base[..base.len().min(200)]);
        name.extend_from_slice(format!(".{:016x}", random()).as_bytes());
        let name = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
        match make(&name) {
            Ok(made) => return Ok((name, made)),
            Err(libc::EEXIST) => continue,
            Err(e) => return Err(io::Error::from_raw_os_error(e)),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EEXIST))
}

/// Writes `bytes` as the file `path` with `mode` by [`DirFd::replace`], its directory walked
/// to by the rule and the missing ones made 0755 (not the umask's say), as install(1) does.
pub fn install(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (dir, name) = parent(path, Some(0o755))?;
    dir.replace(name, bytes, mode)
}

/// 64 bits from the kernel's random source, for names no one can guess.
fn random() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most bytes.len() bytes into bytes.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // Never short for 8 bytes once the pool is ready; the time is a fallback only.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        return t.map_or(0, |d| d.as_nanos() as u64) ^ u64::from(std::process::id()) << 32;
    }
    u64::from_ne_bytes(bytes)
}

/// `path`'s directory, opened by the rule, and its file name (refused when it has none).
pub fn parent(path: &Path, make: Option<u32>) -> io::Result<(DirFd, &[u8])> {
    let (dir, name) = walk::split(path.as_os_str().as_bytes());
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file name",
        ));
    }
    Ok((
        open_dir(Path::new(std::ffi::OsStr::from_bytes(dir)), make)?,
        name,
    ))
}

/// Opens `path` to write a user's output into, by the rule, creating it (0666 less the umask)
/// when missing, not truncated: a FIFO without a reader is an error (`ENXIO`), not a hang.
/// The descriptor blocks again once open, so a report written to a pipe is not cut short.
pub fn open_output(path: &Path) -> io::Result<File> {
    let (dir, name) = parent(path, None)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_NONBLOCK;
    let file = dir.open(name, flags, 0o666)?;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor owned by file; no memory is passed.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK,
        )
    };
    Ok(file)
}

/// Writes `bytes` into a user's output `path` (see [`open_output`]): a regular file is
/// emptied first; a pipe or a terminal (`/dev/stdout`) takes them as they come.
pub fn write_output(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_into(open_output(path)?, bytes)
}

/// Writes `bytes` into `file`, opened by [`open_output`], emptying a regular file first.
pub fn write_into(mut file: File, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    if file.metadata()?.is_file() {
        file.set_len(0)?;
    }
    file.write_all(bytes)?;
    file.flush()
}

#[cfg(test)]
mod tests;
