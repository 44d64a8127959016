//! Raw system calls, so that hook paths never call back into libc's `syscall` (which this
//! library replaces) and never allocate.
//!
//! Owns: thin typed wrappers for the few calls the shim makes, over the contract's
//! inline-asm entry ([`goset_plan::raw::syscall6`]). Must not: touch errno (callers decide), allocate, or panic.

use core::sync::atomic::{AtomicBool, Ordering};
use goset_plan::raw::syscall6;
use goset_plan::CpuSet;

mod errno;
mod file;

pub use errno::error_of;
pub use file::{
    close, dup_high, exists, fstat, identity, open, open_in, read_prefix, read_whole, readlink,
    write, writev, ErrnoName, FileError, Identity,
};

/// Sets the calling thread's errno.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { syscall6(libc::SYS_gettid, [0; 6]) as i32 }
}

/// The calling process's id.
pub fn getpid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { syscall6(libc::SYS_getpid, [0; 6]) as i32 }
}

/// The parent's process id.
pub fn getppid() -> i32 {
    // SAFETY: getppid takes no arguments and cannot fail.
    unsafe { syscall6(libc::SYS_getppid, [0; 6]) as i32 }
}

/// The CPU the calling thread runs on now (`getcpu`); `None` if the kernel does not say.
pub fn current_cpu() -> Option<usize> {
    let mut cpu: u32 = 0;
    // SAFETY: getcpu writes one u32 through its first pointer; the others may be null.
    let ret = unsafe {
        syscall6(
            libc::SYS_getcpu,
            [&mut cpu as *mut u32 as i64, 0, 0, 0, 0, 0],
        )
    };
    (ret == 0).then_some(cpu as usize)
}

/// `sched_setaffinity(tid, mask)`; the raw result.
///
/// # Safety
/// `mask` must be readable for `len` bytes.
pub unsafe fn set_affinity_raw(tid: i32, len: usize, mask: *const u8) -> i64 {
    // SAFETY: forwarded from the caller.
    unsafe {
        syscall6(
            libc::SYS_sched_setaffinity,
            [tid as i64, len as i64, mask as i64, 0, 0, 0],
        )
    }
}

/// Copies `out.len()` bytes at `src` in this process (`pid`, the raw getpid) into `out` with
/// `process_vm_readv`, so that a bad pointer is an error instead of a fault. The number of
/// bytes copied (fewer than asked when `src` runs into unmapped memory), or the errno: EFAULT
/// when nothing at `src` is readable, something else (ENOSYS, EPERM under seccomp) when the
/// call itself is unavailable.
pub fn read_own(pid: i32, src: *const u8, out: &mut [u8]) -> Result<usize, i32> {
    if out.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: src as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: the kernel writes at most out.len() bytes into out (local) and only reads the
    // remote range, checking it itself; both iovecs live across the call.
    let ret = unsafe {
        syscall6(
            libc::SYS_process_vm_readv,
            [
                pid as i64,
                &local as *const libc::iovec as i64,
                1,
                &remote as *const libc::iovec as i64,
                1,
                0,
            ],
        )
    };
    match error_of(ret) {
        Some(e) => Err(e),
        None => Ok(ret as usize),
    }
}

/// Sleeps while `word` holds `expected` (or until a wake, a signal, or a spurious return:
/// callers loop on the word).
pub fn futex_wait(word: &core::sync::atomic::AtomicU32, expected: u32) {
    // SAFETY: the kernel reads the live word; no timeout.
    unsafe {
        syscall6(
            libc::SYS_futex,
            [
                word.as_ptr() as i64,
                (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as i64,
                expected as i64,
                0,
                0,
                0,
            ],
        )
    };
}

/// Wakes every thread waiting on `word`.
pub fn futex_wake(word: &core::sync::atomic::AtomicU32) {
    // SAFETY: the kernel only uses the address as a key; nothing is read or written there.
    unsafe {
        syscall6(
            libc::SYS_futex,
            [
                word.as_ptr() as i64,
                (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as i64,
                i32::MAX as i64,
                0,
                0,
                0,
            ],
        )
    };
}

/// Sets the affinity of `tid` (0: the caller) to `set`; the raw result.
pub fn set_affinity(tid: i32, set: &CpuSet) -> i64 {
    let (ptr, len) = set.as_raw();
    // SAFETY: ptr/len describe a live CpuSet.
    unsafe { set_affinity_raw(tid, len, ptr) }
}

/// Raw `sched_getaffinity(tid)` into a fresh set: the kernel's return (bytes written, or a
/// negative errno) and the set.
fn get_affinity_raw(tid: i32) -> (i64, CpuSet) {
    let mut set = CpuSet::new();
    let len = core::mem::size_of::<CpuSet>();
    // CpuSet is repr(C) in cpu_set_t layout; the pointer comes from a unique borrow.
    let ptr = &mut set as *mut CpuSet as *mut u8;
    // SAFETY: the kernel writes at most len bytes into the CpuSet we own.
    let ret = unsafe {
        syscall6(
            libc::SYS_sched_getaffinity,
            [tid as i64, len as i64, ptr as i64, 0, 0, 0],
        )
    };
    (ret, set)
}

/// The affinity mask of `tid` (0: the caller).
pub fn get_affinity(tid: i32) -> Option<CpuSet> {
    // The kernel wrote `ret` bytes; the rest stays zero.
    let (ret, set) = get_affinity_raw(tid);
    (ret >= 0).then_some(set)
}

/// The kernel's affinity mask size in bytes (`cpumask_size()`, at most a [`CpuSet`]): what
/// `sched_getaffinity` copies out, and the most `sched_setaffinity` reads of a caller's mask.
pub fn kernel_mask_bytes() -> Option<usize> {
    let (ret, _) = get_affinity_raw(0);
    (ret > 0).then_some(ret as usize)
}

/// `prctl(PR_GET_SECCOMP)`: 0 none, 1 strict, 2 filter (negative: an error).
pub fn seccomp_mode() -> i64 {
    // SAFETY: PR_GET_SECCOMP reads nothing from memory.
    unsafe {
        syscall6(
            libc::SYS_prctl,
            [libc::PR_GET_SECCOMP as i64, 0, 0, 0, 0, 0],
        )
    }
}

/// Set once this process may run under a seccomp filter: `process_vm_readv` is then not used.
static SECCOMP_FILTERED: AtomicBool = AtomicBool::new(false);

/// Notes that a seccomp filter may be in force: at start, when `prctl(PR_GET_SECCOMP)` says
/// so, and after the program installs one with `syscall(SYS_seccomp, ...)`.
pub fn note_seccomp_filter() {
    SECCOMP_FILTERED.store(true, Ordering::Relaxed);
}

/// Whether [`note_seccomp_filter`] was called in this process.
pub fn seccomp_filtered() -> bool {
    SECCOMP_FILTERED.load(Ordering::Relaxed)
}

/// The effective user id.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { syscall6(libc::SYS_geteuid, [0; 6]) as u32 }
}

/// The calling thread's name (`comm`), NUL-padded.
pub fn thread_name() -> [u8; 16] {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into name.
    unsafe {
        syscall6(
            libc::SYS_prctl,
            [
                libc::PR_GET_NAME as i64,
                name.as_mut_ptr() as i64,
                0,
                0,
                0,
                0,
            ],
        )
    };
    name
}

/// A fresh private anonymous mapping of `bytes` (zero-filled, page-aligned, outside the
/// program's heap); `None` when the kernel refuses one.
pub fn map_zeroed(bytes: usize) -> Option<*mut u8> {
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let addr = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (addr != libc::MAP_FAILED).then_some(addr.cast())
}

/// Unix time in seconds.
pub fn now() -> f64 {
    goset_plan::clock::seconds(libc::CLOCK_REALTIME)
}

/// The calling thread's CPU time in microseconds (a system call: not the vDSO).
pub fn thread_cpu_us() -> u64 {
    goset_plan::clock::micros(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The raw system calls, for [`goset_plan::rootfile::walk`] to the log as root.
pub struct Raw;

/// `Ok` or the errno of a call that returns 0 on success.
fn done(ret: i64) -> Result<(), i32> {
    error_of(ret).map_or(Ok(()), Err)
}

impl goset_plan::rootfile::walk::Calls for Raw {
    fn open_at(&self, dir: i32, name: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        open_in(dir, name, flags, mode)
    }

    fn stat_fd(&self, fd: i32) -> Result<goset_plan::rootfile::Owned, i32> {
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
        close(fd);
    }
}

#[cfg(test)]
mod tests;
