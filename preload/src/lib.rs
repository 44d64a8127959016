//! libgoset.so: an `LD_PRELOAD` shim that puts every thread of a task on its own planned CPU,
//! whatever its runtime does (pthreads, libgomp, libomp, Rust, MPI), and logs each decision.
//!
//! The modules and what each owns: `preload/README.md`, the shim's one module map (the one
//! docs/architecture.md links to).
//!
//! Every exported symbol is listed below; each hook is a thin `extern "C"` function that hands
//! over to its module. Under `cargo test` nothing is exported, so tests do not interpose on
//! themselves.
//!
//! Stack budgets (the shim runs on other programs' stacks: 16 KiB `PTHREAD_STACK_MIN` threads,
//! 8 KiB `SIGSTKSZ` signal stacks that also carry the kernel's signal frame): beyond what the
//! same call takes without the shim, a hook uses at most 2 KiB once the shim is initialised
//! (a logged decision included), and at most 4 KiB on any path, initialisation included (a
//! hook called before the constructor, from another library's constructor).
//! `shim-tests/tests/robust/small_stacks.rs` measures every hook against these figures.

mod affinity;
mod attr;
mod block;
mod buf;
mod claim;
mod config;
mod create;
mod env;
mod exec;
mod init;
mod load;
mod log;
mod notes;
mod process;
mod rank;
mod real;
mod role;
mod sys;
mod thread;
mod view;

use goset_plan::raw;
use libc::{c_char, c_int, c_long, c_void, cpu_set_t, pid_t, pthread_attr_t, pthread_t, size_t};

/// Hook: every new thread claims a slot and is born on its CPU.
///
/// # Safety
/// As `pthread_create`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: real::StartRoutine,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded unchanged.
    unsafe { create::create(thread, attr, routine, arg) }
}

/// Hook: passes through (the mask is replaced at `pthread_create`), and logs.
///
/// # Safety
/// As `pthread_attr_setaffinity_np`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_attr_setaffinity_np(
    attr: *mut pthread_attr_t,
    size: size_t,
    set: *const cpu_set_t,
) -> c_int {
    let Some(real) = real::pthread_attr_setaffinity_np() else {
        return libc::ENOSYS;
    };
    // SAFETY: forwarded unchanged; then attr is initialised.
    unsafe {
        let ret = real(attr, size, set);
        affinity::note_attr(attr, "pthread_attr_setaffinity_np");
        ret
    }
}

/// Hook: passes through (the mask is replaced at `pthread_create`), and logs.
///
/// # Safety
/// As `pthread_setattr_default_np`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_setattr_default_np(attr: *const pthread_attr_t) -> c_int {
    let Some(real) = real::pthread_setattr_default_np() else {
        return libc::ENOSYS;
    };
    // SAFETY: forwarded unchanged; then attr is initialised.
    unsafe {
        let ret = real(attr);
        affinity::note_attr(attr, "pthread_setattr_default_np");
        ret
    }
}

/// Hook: a thread's own request gets its CPU; another thread's, that thread's CPU.
///
/// # Safety
/// As `pthread_setaffinity_np`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_setaffinity_np(
    thread: pthread_t,
    size: size_t,
    set: *const cpu_set_t,
) -> c_int {
    // SAFETY: forwarded unchanged.
    unsafe { affinity::pthread_set(thread, size, set) }
}

/// Hook: as `pthread_setaffinity_np`, by tid; tids outside the task pass through.
///
/// # Safety
/// As `sched_setaffinity`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sched_setaffinity(
    pid: pid_t,
    size: size_t,
    set: *const cpu_set_t,
) -> c_int {
    // SAFETY: forwarded unchanged.
    let ret = unsafe { affinity::sched_set(pid, size, set.cast(), "sched_setaffinity") };
    finish(ret) as c_int
}

/// Hook: the calling thread's view (what it asked for, else the task's CPUs) in the kernel's
/// answer; threads outside the task read their kernel mask.
///
/// # Safety
/// As `sched_getaffinity`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sched_getaffinity(pid: pid_t, size: size_t, set: *mut cpu_set_t) -> c_int {
    // SAFETY: forwarded unchanged.
    unsafe { affinity::sched_get_libc(pid, size, set.cast()) }
}

/// Hook: as `sched_getaffinity`, by `pthread_t`.
///
/// # Safety
/// As `pthread_getaffinity_np`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_getaffinity_np(
    thread: pthread_t,
    size: size_t,
    set: *mut cpu_set_t,
) -> c_int {
    // SAFETY: forwarded unchanged.
    unsafe { affinity::pthread_get(thread, size, set) }
}

/// Hook: libc's `syscall`. `SYS_sched_setaffinity` (LLVM libomp's path) and
/// `SYS_sched_getaffinity` are handled as the libc functions are (with the raw return value);
/// every other number goes straight to the kernel. Variadic in C; seven `long`s are
/// ABI-compatible.
///
/// # Safety
/// As `syscall`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    if n == libc::SYS_sched_setaffinity {
        // SAFETY: the caller's arguments, as sched_setaffinity's.
        return finish(unsafe {
            affinity::sched_set(a1 as i32, a2 as usize, a3 as *const u8, "syscall")
        });
    }
    if n == libc::SYS_sched_getaffinity {
        // SAFETY: the caller's arguments, as the system call's.
        return finish(unsafe { affinity::sched_get(a1 as i32, a2 as usize, a3 as *mut u8) });
    }
    // SAFETY: the caller's system call, unchanged.
    let ret = unsafe { raw::syscall6(n, [a1, a2, a3, a4, a5, a6]) };
    if n == libc::SYS_seccomp && ret == 0 {
        sys::note_seccomp_filter();
    }
    finish(ret)
}

/// Hook: the program starts on the mask its caller would have without the shim ([`exec`]).
///
/// # Safety
/// As `execve`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real::execve() else {
        return enosys();
    };
    // SAFETY: the caller\'s arguments, forwarded unchanged.
    exec::around(|| unsafe { real(path, argv, envp) })
}

/// Hook: as [`execve`], with the environment now.
///
/// # Safety
/// As `execv`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) = real::execv() else {
        return enosys();
    };
    // SAFETY: the caller\'s arguments, forwarded unchanged.
    exec::around(|| unsafe { real(path, argv) })
}

/// Hook: as [`execve`], with the environment now.
///
/// # Safety
/// As `execvp`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) = real::execvp() else {
        return enosys();
    };
    // SAFETY: the caller\'s arguments, forwarded unchanged.
    exec::around(|| unsafe { real(file, argv) })
}

/// Hook: as [`execve`].
///
/// # Safety
/// As `execvpe`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real::execvpe() else {
        return enosys();
    };
    // SAFETY: the caller\'s arguments, forwarded unchanged.
    exec::around(|| unsafe { real(file, argv, envp) })
}

/// Hook: as [`execve`].
///
/// # Safety
/// As `fexecve`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real::fexecve() else {
        return enosys();
    };
    // SAFETY: the caller\'s arguments, forwarded unchanged.
    exec::around(|| unsafe { real(fd, argv, envp) })
}

/// Hook: the child takes the caller's mask at clone, so it is spawned while the caller's
/// mask is widened ([`exec`]), then the mask is put back.
///
/// # Safety
/// As `posix_spawn`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let Some(real) = real::posix_spawn() else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller\'s arguments, forwarded unchanged.
    exec::around(|| unsafe { real(pid, path, actions, attr, argv, envp) })
}

/// Hook: as [`posix_spawn`].
///
/// # Safety
/// As `posix_spawnp`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let Some(real) = real::posix_spawnp() else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller\'s arguments, forwarded unchanged.
    exec::around(|| unsafe { real(pid, file, actions, attr, argv, envp) })
}

/// Hook: as [`posix_spawn`]; glibc's `system` spawns its shell with an internal call no
/// preload sees.
///
/// # Safety
/// As `system`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let Some(real) = real::system() else {
        return -1;
    };
    // SAFETY: the caller's argument, forwarded unchanged.
    exec::around(|| unsafe { real(command) })
}

/// Hook: as [`system`].
///
/// # Safety
/// As `popen`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let Some(real) = real::popen() else {
        return core::ptr::null_mut();
    };
    // SAFETY: the caller's arguments, forwarded unchanged.
    exec::around(|| unsafe { real(command, mode) })
}

/// An exec whose real function libc lacks: -1 with ENOSYS.
fn enosys() -> c_int {
    sys::set_errno(libc::ENOSYS);
    -1
}

/// A raw result as libc returns it: -1 with errno on failure.
fn finish(ret: i64) -> i64 {
    match sys::error_of(ret) {
        Some(e) => {
            sys::set_errno(e);
            -1
        }
        None => ret,
    }
}

/// The constructor (`.init_array`, so it receives envp): initialise as early as libc allows,
/// keeping the envp the loader gives, and look the real functions up, so that hooks called
/// later neither initialise nor call `dlsym` on their callers' stacks.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_load(_argc: c_int, _argv: *const *const c_char, envp: *const *const c_char) {
    env::set_envp(envp);
    real::resolve_all();
    if let Some(_guard) = thread::Guard::enter() {
        let _ = init::get();
    }
    load::hand_on_now();
}

/// The exit handler: releases the main thread's slot (others release theirs in a key destructor).
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_unload() {
    if let Some(_guard) = thread::Guard::enter() {
        process::at_exit();
    }
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = on_load;

#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static DESTRUCTOR: extern "C" fn() = on_unload;
