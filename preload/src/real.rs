//! The real libc functions behind the pthread and exec hooks, found with `dlsym(RTLD_NEXT)`: all of
//! them in the constructor ([`resolve_all`]), so that a hook does not pay for `dlsym`'s stack
//! and locks; on first use when a hook runs before the constructor.
//!
//! Owns: one cached pointer per wrapped pthread function. Must not: be used on the `syscall` or
//! `sched_setaffinity` paths, which use raw system calls instead (dlsym may lock and allocate).

use core::sync::atomic::{AtomicUsize, Ordering};
use libc::{
    c_char, c_int, c_void, cpu_set_t, pid_t, posix_spawn_file_actions_t, posix_spawnattr_t,
    pthread_attr_t, pthread_t, size_t,
};

/// A thread start routine; `C-unwind` so that `pthread_exit` may unwind through it.
pub type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;
/// `pthread_create`.
pub type CreateFn =
    unsafe extern "C" fn(*mut pthread_t, *const pthread_attr_t, StartRoutine, *mut c_void) -> c_int;
/// `pthread_attr_setaffinity_np`.
pub type AttrAffinityFn =
    unsafe extern "C" fn(*mut pthread_attr_t, size_t, *const cpu_set_t) -> c_int;
/// `pthread_setattr_default_np`.
pub type SetDefaultFn = unsafe extern "C" fn(*const pthread_attr_t) -> c_int;
/// `pthread_setaffinity_np`.
pub type SetAffinityFn = unsafe extern "C" fn(pthread_t, size_t, *const cpu_set_t) -> c_int;
/// `pthread_getaffinity_np`.
pub type GetAffinityFn = unsafe extern "C" fn(pthread_t, size_t, *mut cpu_set_t) -> c_int;

/// `execve` (and `execvpe`, `fexecve` with an fd first: see their own types).
pub type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
/// `execv` and `execvp`.
pub type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
/// `fexecve`.
pub type FexecveFn =
    unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
/// `system`.
pub type SystemFn = unsafe extern "C" fn(*const c_char) -> c_int;
/// `popen`.
pub type PopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;
/// `posix_spawn` and `posix_spawnp`.
pub type SpawnFn = unsafe extern "C" fn(
    *mut pid_t,
    *const c_char,
    *const posix_spawn_file_actions_t,
    *const posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

fn lookup(cache: &AtomicUsize, name: &[u8]) -> usize {
    let cached = cache.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    // SAFETY: name is a NUL-terminated symbol name; RTLD_NEXT finds the definition after ours.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    cache.store(found, Ordering::Release);
    found
}

macro_rules! real {
    ($fn_name:ident, $ty:ty, $sym:literal) => {
        /// The real function, or `None` when libc does not have it.
        pub fn $fn_name() -> Option<$ty> {
            static CACHE: AtomicUsize = AtomicUsize::new(0);
            let addr = lookup(&CACHE, $sym);
            // SAFETY: a non-zero address from dlsym is the libc function of this name, whose C
            // signature is the one given by the type.
            (addr != 0).then(|| unsafe { core::mem::transmute::<usize, $ty>(addr) })
        }
    };
}

real!(pthread_create, CreateFn, b"pthread_create\0");
real!(
    pthread_attr_setaffinity_np,
    AttrAffinityFn,
    b"pthread_attr_setaffinity_np\0"
);
real!(
    pthread_setattr_default_np,
    SetDefaultFn,
    b"pthread_setattr_default_np\0"
);
real!(
    pthread_setaffinity_np,
    SetAffinityFn,
    b"pthread_setaffinity_np\0"
);
real!(
    pthread_getaffinity_np,
    GetAffinityFn,
    b"pthread_getaffinity_np\0"
);

real!(execve, ExecveFn, b"execve\0");
real!(execv, ExecvFn, b"execv\0");
real!(execvp, ExecvFn, b"execvp\0");
real!(execvpe, ExecveFn, b"execvpe\0");
real!(fexecve, FexecveFn, b"fexecve\0");
real!(posix_spawn, SpawnFn, b"posix_spawn\0");
real!(posix_spawnp, SpawnFn, b"posix_spawnp\0");
real!(system, SystemFn, b"system\0");
real!(popen, PopenFn, b"popen\0");

/// Looks every function up now (from the constructor): the exec hooks also run in `vfork`
/// children, where `dlsym` must not be called.
pub fn resolve_all() {
    let _ = (
        pthread_create(),
        pthread_attr_setaffinity_np(),
        pthread_setattr_default_np(),
        pthread_setaffinity_np(),
        pthread_getaffinity_np(),
    );
    let _ = (execve(), execv(), execvp(), execvpe(), fexecve());
    let _ = (posix_spawn(), posix_spawnp(), system(), popen());
}
