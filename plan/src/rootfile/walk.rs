//! The walk to a file root writes at a name a user gave: every component of the path, not
//! only the last, by [`super`]'s rule, as systemd-tmpfiles' `chase` and OpenSSH's
//! `secure_filename` do.
//!
//! The path is walked one component at a time with `openat` from `/` (or from the working
//! directory), each step through the descriptor of the directory checked before it, so that
//! nothing renamed or replaced meanwhile can send a later step elsewhere. In a directory that
//! others can write to, a component is opened with `O_NOFOLLOW` (a link there is refused, not
//! followed) and must be a directory of root's or of that directory's owner; a group- or
//! world-writable directory on the way must be sticky. A link in a directory only root can
//! write to is root's own and the kernel follows it (so `/dev/stdout` and `/proc/self/fd/N`
//! still work). Run as another user, the walk follows links as the kernel does: the rule is
//! root's. Allocation-free: the shim walks the same way on its hook paths, through its own
//! raw system calls ([`Calls`]).

use super::{is_safe_in, others_can_swap, others_can_write, Owned};

/// The system calls the walk makes, so that the shim can make them without libc. Errors are
/// errnos; names end with a NUL byte.
pub trait Calls {
    /// `openat(dir, name, flags, mode)`.
    fn open_at(&self, dir: i32, name: &[u8], flags: i32, mode: u32) -> Result<i32, i32>;
    /// `fstat(fd)`'s owner, mode and links.
    fn stat_fd(&self, fd: i32) -> Result<Owned, i32>;
    /// Whether `name` in `dir` is a symbolic link (`fstatat`, not following it).
    fn is_link_at(&self, dir: i32, name: &[u8]) -> bool;
    /// `mkdirat(dir, name, mode)`.
    fn make_dir_at(&self, dir: i32, name: &[u8], mode: u32) -> Result<(), i32>;
    /// `fchmod(fd, mode)`.
    fn chmod_fd(&self, fd: i32, mode: u32) -> Result<(), i32>;
    /// `close(fd)`.
    fn close(&self, fd: i32);
}

/// Why root will not write at a path (each an errno as well, for the shim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A symbolic link in a directory others can write to.
    Link,
    /// Others can write to a directory on the way and it is not sticky: they could swap what
    /// root opens there for a link.
    Swappable,
    /// What others could have put there: not a directory (or regular file with one link) of
    /// root's or of its directory's owner.
    NotTheirs,
    /// The system said no (an errno).
    Os(i32),
}

impl Refusal {
    /// The errno the shim reports: `ELOOP` for a link, `EPERM` when the rule refuses.
    pub fn errno(self) -> i32 {
        match self {
            Refusal::Link => libc::ELOOP,
            Refusal::Swappable | Refusal::NotTheirs => libc::EPERM,
            Refusal::Os(e) => e,
        }
    }
}

/// How the walk opens a directory: to name things in it, without needing the right to list it.
const DIR_FLAGS: i32 = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;

/// Longest path component, with its NUL.
const NAME_MAX: usize = 256;

/// A directory reached by [`walk`]: its descriptor (the caller closes it), what the rule
/// reads of it, and whether root opens names in it by the rule (others can write to it).
#[derive(Debug, Clone, Copy)]
pub struct Dir {
    /// An `O_PATH|O_DIRECTORY` descriptor of it (`O_RDONLY` for one the walk made).
    pub fd: i32,
    /// Its owner and mode.
    pub owned: Owned,
    /// Whether names in it are opened without following links and checked.
    pub guarded: bool,
}

/// Opens the directory `path` names by the rule (as root, `as_root`), making the missing ones
/// with exactly `make` (not the umask's say) when it is given.
pub fn walk(
    calls: &impl Calls,
    path: &[u8],
    as_root: bool,
    make: Option<u32>,
) -> Result<Dir, Refusal> {
    let start: &[u8] = if path.first() == Some(&b'/') {
        b"/\0"
    } else {
        b".\0"
    };
    let fd = (calls.open_at(libc::AT_FDCWD, start, DIR_FLAGS, 0)).map_err(Refusal::Os)?;
    let mut dir = reached(calls, fd, as_root)?;
    for part in path
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
    {
        let next = step(calls, &dir, part, make);
        calls.close(dir.fd);
        dir = reached(calls, next?, as_root)?;
    }
    Ok(dir)
}

/// What the rule reads of the directory `fd`; closes it when the rule refuses it.
fn reached(calls: &impl Calls, fd: i32, as_root: bool) -> Result<Dir, Refusal> {
    let owned = calls.stat_fd(fd).map_err(|e| {
        calls.close(fd);
        Refusal::Os(e)
    })?;
    let guarded = as_root && others_can_write(owned);
    if guarded && others_can_swap(owned) {
        calls.close(fd);
        return Err(Refusal::Swappable);
    }
    Ok(Dir { fd, owned, guarded })
}

/// Opens the directory `part` in `dir`, making it with mode `make` when missing.
fn step(calls: &impl Calls, dir: &Dir, part: &[u8], make: Option<u32>) -> Result<i32, Refusal> {
    let mut name = [0u8; NAME_MAX];
    let name = c_name(&mut name, part)?;
    let flags = DIR_FLAGS | nofollow(dir);
    let mut made = false;
    let fd = match calls.open_at(dir.fd, name, flags, 0) {
        Err(libc::ENOENT) if make.is_some() => match calls.make_dir_at(dir.fd, name, 0o700) {
            Ok(()) => {
                made = true;
                // Readable, for fchmod: root's own new directory, not a link.
                let own = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW;
                calls.open_at(dir.fd, name, own, 0)
            }
            Err(libc::EEXIST) => calls.open_at(dir.fd, name, flags, 0),
            Err(e) => Err(e),
        },
        other => other,
    }
    .map_err(|e| link_or(calls, dir, name, e))?;
    let checked = calls.stat_fd(fd).map_err(Refusal::Os).and_then(|st| {
        let theirs = st.uid == 0 || st.uid == dir.owned.uid;
        match make.filter(|_| made) {
            _ if dir.guarded && !theirs => Err(Refusal::NotTheirs),
            // Made 0700 first, so nobody else used it before it has its mode.
            Some(mode) => calls.chmod_fd(fd, mode).map_err(Refusal::Os),
            None => Ok(()),
        }
    });
    match checked {
        Ok(()) => Ok(fd),
        Err(e) => {
            calls.close(fd);
            Err(e)
        }
    }
}

/// Opens the file `name` in `dir` by the rule: not through a link, and, in a directory others
/// can write to, only a regular file with one link of root's or of the directory's owner.
/// `flags` get `O_NOFOLLOW` there; with `O_CREAT` a missing file is made with `mode`.
pub fn open_in(
    calls: &impl Calls,
    dir: &Dir,
    name: &[u8],
    flags: i32,
    mode: u32,
) -> Result<i32, Refusal> {
    let mut buf = [0u8; NAME_MAX];
    let name = c_name(&mut buf, name)?;
    let fd = calls
        .open_at(dir.fd, name, flags | nofollow(dir), mode)
        .map_err(|e| link_or(calls, dir, name, e))?;
    if !dir.guarded {
        return Ok(fd);
    }
    match calls.stat_fd(fd) {
        Ok(st) if is_safe_in(st, dir.owned) => Ok(fd),
        Ok(_) => {
            calls.close(fd);
            Err(Refusal::NotTheirs)
        }
        Err(e) => {
            calls.close(fd);
            Err(Refusal::Os(e))
        }
    }
}

/// `path` split into its directory and its last component (empty for `/`, `..`, `x/`...: no
/// file name).
pub fn split(path: &[u8]) -> (&[u8], &[u8]) {
    let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
        None => (&b"."[..], path),
        Some(0) => (&b"/"[..], &path[1..]),
        Some(at) => (&path[..at], &path[at + 1..]),
    };
    if name == b"." || name == b".." {
        (dir, &[])
    } else {
        (dir, name)
    }
}

fn nofollow(dir: &Dir) -> i32 {
    if dir.guarded {
        libc::O_NOFOLLOW
    } else {
        0
    }
}

/// The error of an open of `name` in `dir`: a link where one is not followed is
/// [`Refusal::Link`] (`ELOOP`, or `EACCES` and `ENOTDIR` on kernels that check other things first).
fn link_or(calls: &impl Calls, dir: &Dir, name: &[u8], errno: i32) -> Refusal {
    if dir.guarded && calls.is_link_at(dir.fd, name) {
        Refusal::Link
    } else {
        Refusal::Os(errno)
    }
}

/// `part` with a NUL, in `buf`.
fn c_name<'a>(buf: &'a mut [u8; NAME_MAX], part: &[u8]) -> Result<&'a [u8], Refusal> {
    if part.is_empty() || part.len() >= NAME_MAX || part.contains(&0) || part.contains(&b'/') {
        return Err(Refusal::Os(if part.len() >= NAME_MAX {
            libc::ENAMETOOLONG
        } else {
            libc::EINVAL
        }));
    }
    buf[..part.len()].copy_from_slice(part);
    buf[part.len()] = 0;
    Ok(&buf[..=part.len()])
}
