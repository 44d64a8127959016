//! The files a user names for goset-run to write: `--json FILE` and `--log FILE`.
//!
//! Owns: opening them so that goset-run, run as root, never writes through a symbolic link or
//! into a hard link that another user planted, and never into a file that another user could
//! swap for a link afterwards (the shim and the housekeeper reopen the log by its name).
//! Must not: truncate or write; the callers do, once the file is known to be the right one.
//!
//! The rule, as root, is [`goset_plan::rootfile`]'s. Other users' runs follow links: they
//! cannot be made to write anywhere they could not write anyway, and the kernel's
//! `fs.protected_symlinks` guards their sticky directories.

use goset_plan::rootfile::{self, Owned};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Opens `path` for writing, creating it (0666 less the umask) when it is missing, without
/// truncating it; a FIFO without a reader is an error (ENXIO), not a hang in `open`.
pub fn open(path: &Path) -> io::Result<File> {
    let name = path.file_name().ok_or_else(|| refused("not a file name"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // The checks and the open go through one descriptor of the directory, so a directory
    // renamed or replaced meanwhile cannot send the open elsewhere.
    let dir_file = open_dir(dir)?;
    let dir_meta = dir_file.metadata()?;
    // SAFETY: geteuid cannot fail.
    let guarded = unsafe { libc::geteuid() } == 0 && rootfile::others_can_write(owned(&dir_meta));
    if guarded && rootfile::others_can_swap(owned(&dir_meta)) {
        return Err(refused(&format!(
            "other users can write to {} and it is not sticky, so they could swap the file for a link (name a file in a directory of root's)",
            dir.display()
        )));
    }
    let nofollow = if guarded { libc::O_NOFOLLOW } else { 0 };
    let flags = libc::O_WRONLY
        | libc::O_CREAT
        | libc::O_CLOEXEC
        | libc::O_NOCTTY
        | libc::O_NONBLOCK
        | nofollow;
    let c_name = std::ffi::CString::new(name.as_bytes()).map_err(|_| refused("a NUL byte"))?;
    // SAFETY: dir_file is an open directory, c_name a NUL-terminated name; the descriptor
    // returned is owned by the File made from it below.
    let fd = unsafe { libc::openat(dir_file.as_raw_fd(), c_name.as_ptr(), flags, 0o666) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        // ELOOP, or EACCES on kernels that check O_CREAT first: say which.
        if guarded && is_link(&dir_file, &c_name) {
            return Err(refused(&format!(
                "a symbolic link in {}, which other users can write to (name the file itself)",
                dir.display()
            )));
        }
        return Err(e);
    }
    // SAFETY: fd was just opened and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    // Non-blocking was for the open only: a report written to a pipe must not be cut short.
    // SAFETY: fcntl on a descriptor owned by file; no memory is passed.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK,
        )
    };
    if guarded {
        let meta = file.metadata()?;
        if !rootfile::is_safe_in(owned(&meta), owned(&dir_meta)) {
            return Err(refused(&format!(
                "in {}, which other users can write to, it must be a regular file with one link, of root's or of the directory's owner",
                dir.display()
            )));
        }
    }
    Ok(file)
}

fn owned(meta: &std::fs::Metadata) -> Owned {
    Owned {
        uid: meta.uid(),
        mode: meta.mode(),
        nlink: meta.nlink(),
    }
}

/// Whether `name` in `dir` is a symbolic link.
fn is_link(dir: &File, name: &std::ffi::CStr) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: dir is an open directory, name NUL-terminated, st a stat-sized out-parameter.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: fstatat succeeded, so st is filled.
    rc == 0 && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFLNK
}

fn open_dir(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_created_and_an_existing_one_kept_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        open(&path).unwrap();
        assert!(path.is_file());
        std::fs::write(&path, "old").unwrap();
        open(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert!(open(Path::new("/nonexistent-dir/r.json")).is_err());
        assert!(open(&dir.path().join("..")).is_err(), "not a file name");
    }
}
