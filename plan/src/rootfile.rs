//! The rule goset-run and the shim both apply, as root, to a file they write at a name a user
//! gave (`--log`, `--json`, `GOSET_LOG`): root never writes through a symbolic link or into a
//! hard link that another user planted, nor into a file that another user could swap for a
//! link afterwards (the shim and the housekeeper reopen the log by its name).
//!
//! In a directory that other users can add names to (group- or world-writable, or owned by
//! another user), the file itself is opened without following a link (`O_NOFOLLOW`); an
//! existing file must be a regular file with one link, owned by root or by the directory's
//! owner; and a group- or world-writable directory must be sticky, so that nobody else can
//! rename or remove root's file later. In a directory only root can write to, links are
//! followed as usual. The same holds for every directory on the way ([`walk`]).
//!
//! Every file a goset program writes as root at a name a user gave goes through here: the
//! shim's log by [`walk`] with its own system calls, goset-run's `--json` and `--log`,
//! goset-bench's outputs and goset-dist's installed files by [`os`].

pub mod os;
pub mod walk;

/// What the rule reads of a directory or a file: `st_uid`, `st_mode` and `st_nlink`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    /// Owner.
    pub uid: u32,
    /// Type and permission bits.
    pub mode: u32,
    /// Hard links.
    pub nlink: u64,
}

/// Whether users other than root can add names to `dir`: root then opens the file in it
/// without following a link, and checks what it opened.
pub fn others_can_write(dir: Owned) -> bool {
    dir.uid != 0 || dir.mode & 0o022 != 0
}

/// Whether others can rename or remove root's file in `dir` (writable by group or world, not
/// sticky): root refuses to write there.
pub fn others_can_swap(dir: Owned) -> bool {
    dir.mode & 0o022 != 0 && dir.mode & libc::S_ISVTX == 0
}

/// Whether root may write to `file`, opened in `dir` where others can write: a regular file
/// with one link, owned by root or by the directory's owner.
pub fn is_safe_in(file: Owned, dir: Owned) -> bool {
    file.mode & libc::S_IFMT == libc::S_IFREG
        && file.nlink == 1
        && (file.uid == 0 || file.uid == dir.uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: u32 = libc::S_IFDIR;
    const REG: u32 = libc::S_IFREG;

    fn owned(uid: u32, mode: u32, nlink: u64) -> Owned {
        Owned { uid, mode, nlink }
    }

    #[test]
    fn only_directories_of_roots_that_nobody_else_writes_are_trusted() {
        assert!(!others_can_write(owned(0, DIR | 0o755, 2)));
        assert!(others_can_write(owned(0, DIR | 0o1777, 2)));
        assert!(others_can_write(owned(0, DIR | 0o775, 2)));
        assert!(others_can_write(owned(1000, DIR | 0o700, 2)));
    }

    #[test]
    fn a_writable_directory_must_be_sticky() {
        assert!(others_can_swap(owned(0, DIR | 0o777, 2)));
        assert!(others_can_swap(owned(0, DIR | 0o770, 2)));
        assert!(!others_can_swap(owned(0, DIR | 0o1777, 2)));
        assert!(!others_can_swap(owned(1000, DIR | 0o755, 2)));
    }

    #[test]
    fn a_file_must_be_regular_single_linked_and_of_root_or_the_directory_owner() {
        let tmp = owned(0, DIR | 0o1777, 2);
        let home = owned(1000, DIR | 0o755, 2);
        assert!(is_safe_in(owned(0, REG | 0o644, 1), tmp));
        assert!(!is_safe_in(owned(1000, REG | 0o644, 1), tmp));
        assert!(is_safe_in(owned(1000, REG | 0o644, 1), home));
        assert!(!is_safe_in(owned(0, REG | 0o644, 2), tmp), "a hard link");
        assert!(!is_safe_in(owned(0, libc::S_IFIFO | 0o644, 1), tmp));
    }
}
