//! The launcher's signals. From the start of a run until the task is reaped, SIGINT, SIGQUIT,
//! SIGTERM and SIGHUP neither kill goset-run (it must report and clean up) nor get lost: one
//! that arrives before the task exists ends the run before anything is started; one that
//! arrives while the task runs is forwarded to it, unless the kernel sent it to the whole
//! process group (a terminal's Ctrl-C or hangup), which the task then got by itself.
//!
//! Owns: the handlers, the tasks' pids they forward to (several with `--instances`), and the first signal that arrived before
//! there was a task. Must not: do anything in a handler but atomics, `getpid` and `kill`.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The signals the launcher outlives.
const HANDLED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

/// Most tasks running at once (`--instances`).
pub const MAX_TASKS: usize = crate::instances::MAX_INSTANCES;
/// The pid of each task while it runs, else 0.
static TASKS: [AtomicI32; MAX_TASKS] = [const { AtomicI32::new(0) }; MAX_TASKS];
/// The first handled signal that arrived while there was no task, else 0.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// The launcher's own pid: a forked child that has not exec'd yet runs these handlers too.
static LAUNCHER: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: getpid, signal and raise are async-signal-safe.
    unsafe {
        if libc::getpid() != LAUNCHER.load(Ordering::Relaxed) {
            // The task between fork and exec: what the signal would have done to it.
            // kill, not raise: after a raw clone glibc's cached thread id is the launcher's.
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
            return;
        }
    }
    if TASKS.iter().all(|t| t.load(Ordering::Relaxed) <= 0) {
        let _ = PENDING.compare_exchange(0, sig, Ordering::Relaxed, Ordering::Relaxed);
        return;
    }
    // si_code > 0: the kernel sent it (to the terminal's foreground group, which holds the
    // task too); <= 0: a process did (kill, sigqueue, tgkill), and only the launcher got it.
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let from_kernel = !info.is_null() && unsafe { (*info).si_code } > 0;
    if !from_kernel {
        for task in TASKS.iter().map(|t| t.load(Ordering::Relaxed)) {
            if task > 0 {
                // SAFETY: kill is async-signal-safe.
                unsafe { libc::kill(task, sig) };
            }
        }
    }
}

/// Bit `sig`: a handled signal that was blocked before [`hold`] blocked it, so the child
/// keeps it blocked.
static BLOCKED_BEFORE: AtomicU64 = AtomicU64::new(0);

/// In a child of the launcher (a fork handler, or called after a raw clone): the handled
/// signals [`hold`] blocked are unblocked again, so the task
/// starts with the mask goset-run was given (a mask is inherited across exec; `std::process`
/// does not reset it).
pub extern "C" fn unblock_in_child() {
    let before = BLOCKED_BEFORE.load(Ordering::Relaxed);
    // SAFETY: sigemptyset, sigaddset and pthread_sigmask on a local set are async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in HANDLED.into_iter().filter(|&s| before & (1 << s) == 0) {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Installs the handlers (handlers, not SIG_IGN, which exec would pass on to the task).
pub fn install() {
    // SAFETY: getpid has no preconditions.
    LAUNCHER.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    static AT_FORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: the child handler is an extern "C" fn that only changes the signal mask.
    AT_FORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(unblock_in_child));
    });
    for sig in HANDLED {
        // SAFETY: a zeroed sigaction with a valid SA_SIGINFO handler is well-formed.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_signal;
            act.sa_sigaction = handler as usize;
            act.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// The signal that asked the launcher to end before there was a task, if any.
pub fn pending() -> Option<i32> {
    Some(PENDING.load(Ordering::Relaxed)).filter(|&s| s != 0)
}

/// The handled signals, blocked until this is dropped: the task is started and its pid
/// recorded while they are held, so one sent meanwhile is forwarded, not lost.
pub struct Held {
    old: libc::sigset_t,
}

/// Blocks the handled signals (a forked child unblocks them again, see [`unblock_in_child`]).
pub fn hold() -> Held {
    // SAFETY: both sets are valid; pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in HANDLED {
            libc::sigaddset(&mut set, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let before = HANDLED
            .into_iter()
            .filter(|&s| libc::sigismember(&old, s) == 1)
            .fold(0u64, |bits, s| bits | 1 << s);
        BLOCKED_BEFORE.store(before, Ordering::Relaxed);
        Held { old }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by hold.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Signals from now on go to `pid` too (call while [`Held`]); false when [`MAX_TASKS`] run.
pub fn set_task(pid: i32) -> bool {
    TASKS.iter().any(|t| {
        t.compare_exchange(0, pid, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

/// Task `pid` was reaped: signals no longer go to it.
pub fn clear_task(pid: i32) {
    for t in &TASKS {
        let _ = t.compare_exchange(pid, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Sleeps for `d`, or less when a handled signal asks the launcher to end.
pub fn sleep(d: Duration) {
    let end = Instant::now() + d;
    while pending().is_none() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        // At most 50 ms at a time: a signal interrupts nanosleep only when it arrives during
        // it, not when it arrived just before.
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// The conventional name of a signal (`SIGTERM`), for messages.
pub fn name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}
