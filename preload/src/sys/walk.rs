//! [`goset_plan::rootfile::walk`]'s system calls, made raw like every other call of the shim's.

use super::{error_of, fstat, open_in, syscall6};
use goset_plan::rootfile::walk::Calls;
use goset_plan::rootfile::Owned;

/// The raw system calls, for the walk to the log as root.
pub struct Raw;

/// `Ok` or the errno of a call that returns 0 on success.
fn done(ret: i64) -> Result<(), i32> {
    error_of(ret).map_or(Ok(()), Err)
}

impl Calls for Raw {
    fn open_at(&self, dir: i32, name: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        open_in(dir, name, flags, mode)
    }

    fn stat_fd(&self, fd: i32) -> Result<Owned, i32> {
        fstat(fd).map(|st| st.owned).ok_or(libc::EBADF)
    }

    fn is_link_at(&self, dir: i32, name: &[u8]) -> bool {
        if name.last() != Some(&0) {
            return false;
        }
        let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
        let (at, name, out) = (dir as i64, name.as_ptr() as i64, st.as_mut_ptr() as i64);
        let flags = libc::AT_SYMLINK_NOFOLLOW as i64;
        // SAFETY: name is NUL-terminated; the kernel writes one stat struct into st.
        let ret = unsafe { syscall6(libc::SYS_newfstatat, [at, name, out, flags, 0, 0]) };
        // SAFETY: newfstatat succeeded, so st is initialised.
        ret == 0 && unsafe { st.assume_init_ref() }.st_mode & libc::S_IFMT == libc::S_IFLNK
    }

    fn make_dir_at(&self, dir: i32, name: &[u8], mode: u32) -> Result<(), i32> {
        if name.last() != Some(&0) {
            return Err(libc::EINVAL);
        }
        let (at, name) = (dir as i64, name.as_ptr() as i64);
        // SAFETY: name is NUL-terminated and lives across the call.
        done(unsafe { syscall6(libc::SYS_mkdirat, [at, name, mode as i64, 0, 0, 0]) })
    }

    fn chmod_fd(&self, fd: i32, mode: u32) -> Result<(), i32> {
        // SAFETY: no memory is passed.
        done(unsafe { syscall6(libc::SYS_fchmod, [fd as i64, mode as i64, 0, 0, 0, 0]) })
    }

    fn close(&self, fd: i32) {
        super::close(fd);
    }
}
