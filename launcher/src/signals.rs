//! The launcher's signals. From the start of a run until the task is reaped, no signal that a
//! program can catch and whose default action ends the process kills goset-run (it must
//! report and put the machine back), and none gets lost: one that arrives before the task
//! exists ends the run before anything is started; one that arrives while the task runs is
//! forwarded to it, unless the kernel sent it to the whole process group (a terminal's Ctrl-C
//! or hangup), which the task then got by itself. A signal the launcher was started with
//! ignored (`nohup`'s SIGHUP) stays ignored, by it and by the task. A fault of the launcher
//! itself, or its own `abort`, is no request: it gets the action it had before.
//!
//! Owns: which signals are caught ([`terminating`]), the handlers, the tasks' pids they
//! forward to (several with `--instances`), and the first signal that arrived before there was
//! a task. Must not: do anything in a handler but atomics, `getpid`, `sigaction`, `signal` and
//! `kill`.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The signals whose default action does not end the process: ignored (SIGCHLD, SIGURG,
/// SIGWINCH), continue (SIGCONT) and stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU), the kernel's
/// `SIG_KERNEL_IGNORE_MASK` and `SIG_KERNEL_STOP_MASK`.
const NOT_TERMINATING: [libc::c_int; 8] = [
    libc::SIGCHLD,
    libc::SIGURG,
    libc::SIGWINCH,
    libc::SIGCONT,
    libc::SIGSTOP,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

/// The signals the kernel raises for a fault of the thread that gets them.
const FAULTS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Every signal a program can catch whose default action ends it, the ones the launcher
/// catches: 1 to `SIGRTMAX`, less SIGKILL, those whose default does not terminate
/// ([`NOT_TERMINATING`]), and the real-time signals the C library keeps for its threads (after
/// SIGSYS, the last standard one, and below its `SIGRTMIN`: its `sigaction` refuses them).
pub fn terminating() -> impl Iterator<Item = libc::c_int> {
    let reserved = libc::SIGSYS + 1..libc::SIGRTMIN();
    (1..=libc::SIGRTMAX())
        .filter(move |s| *s != libc::SIGKILL && !NOT_TERMINATING.contains(s))
        .filter(move |s| !reserved.contains(s))
}

/// The bit of `sig` in a signal mask word.
fn bit(sig: libc::c_int) -> u64 {
    1 << (sig - 1)
}

/// The signals caught (bit `sig - 1`): [`terminating`] less those ignored at the start.
static CAUGHT: AtomicU64 = AtomicU64::new(0);

/// The caught signals, in order.
fn caught() -> impl Iterator<Item = libc::c_int> {
    let mask = CAUGHT.load(Ordering::Relaxed);
    (1..=64).filter(move |&s| mask & bit(s) != 0)
}

/// Each caught signal's action before [`install`] (Rust's stack-overflow handler for SIGSEGV
/// and SIGBUS): what a fault of the launcher itself gets.
static PREVIOUS: OnceLock<Vec<(libc::c_int, libc::sigaction)>> = OnceLock::new();

/// Whether signal `sig` with `si_code` `code`, sent by `sender` (`si_pid`, for `code <= 0`),
/// is the launcher's (`me`) own: a fault the kernel raised in it, or one it sent itself
/// (`abort`). Such a signal is not a request to forward: it gets the action it had before.
pub fn own(sig: libc::c_int, code: libc::c_int, sender: libc::pid_t, me: libc::pid_t) -> bool {
    if code > 0 {
        FAULTS.contains(&sig)
    } else {
        sender == me
    }
}

/// Puts back the action `sig` had before [`install`], the default if none was saved.
fn restore_previous(sig: libc::c_int) {
    let saved = PREVIOUS
        .get()
        .and_then(|all| all.iter().find(|(s, _)| *s == sig));
    // SAFETY: sigaction and signal are async-signal-safe; the saved action is a valid one.
    unsafe {
        match saved {
            Some((_, act)) => {
                libc::sigaction(sig, act, std::ptr::null_mut());
            }
            None => {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}

/// Most tasks running at once (`--instances`).
pub const MAX_TASKS: usize = crate::instances::MAX_INSTANCES;
/// The pid of each task while it runs, else 0.
static TASKS: [AtomicI32; MAX_TASKS] = [const { AtomicI32::new(0) }; MAX_TASKS];
/// The first caught signal that arrived while there was no task, else 0.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// The launcher's own pid: a forked child that has not exec'd yet runs these handlers too.
static LAUNCHER: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let me = LAUNCHER.load(Ordering::Relaxed);
    // SAFETY: getpid, signal and kill are async-signal-safe.
    unsafe {
        if libc::getpid() != me {
            // The task between fork and exec: what the signal would have done to it.
            // kill, not raise: after a raw clone glibc's cached thread id is the launcher's.
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
            return;
        }
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; si_pid is set for
    // the codes a process sends (<= 0).
    let (code, sender) = match unsafe { info.as_ref() } {
        Some(i) if i.si_code <= 0 => (i.si_code, unsafe { i.si_pid() }),
        Some(i) => (i.si_code, 0),
        None => (0, 0),
    };
    if own(sig, code, sender, me) {
        if sig == libc::SIGPIPE {
            // Its own write to a closed pipe, which fails with EPIPE.
            return;
        }
        restore_previous(sig);
        if code <= 0 {
            // Delivered again once this handler returns, to the action put back.
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(me, sig) };
        }
        // A fault repeats when its instruction runs again on return.
        return;
    }
    if TASKS.iter().all(|t| t.load(Ordering::Relaxed) <= 0) {
        let _ = PENDING.compare_exchange(0, sig, Ordering::Relaxed, Ordering::Relaxed);
        return;
    }
    // si_code > 0: the kernel sent it (to the terminal's foreground group, which holds the
    // task too, or for a limit of the launcher's own); <= 0: a process did (kill, sigqueue,
    // tgkill), and only the launcher got it.
    if code <= 0 {
        for task in TASKS.iter().map(|t| t.load(Ordering::Relaxed)) {
            if task > 0 {
                // SAFETY: kill is async-signal-safe.
                unsafe { libc::kill(task, sig) };
            }
        }
    }
}

/// The caught signals that were blocked before [`hold`] blocked them, so the child keeps
/// them blocked.
static BLOCKED_BEFORE: AtomicU64 = AtomicU64::new(0);

/// In a child of the launcher (a fork handler, or called after a raw clone): the caught
/// signals [`hold`] blocked are unblocked again, so the task starts with the mask goset-run
/// was given (a mask is inherited across exec; `std::process` does not reset it).
pub extern "C" fn unblock_in_child() {
    let before = BLOCKED_BEFORE.load(Ordering::Relaxed);
    // SAFETY: sigemptyset, sigaddset and pthread_sigmask on a local set are async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in caught().filter(|&s| before & bit(s) == 0) {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Installs the handlers for every [`terminating`] signal that is not ignored now (handlers,
/// not SIG_IGN, which exec would pass on to the task); once per process.
pub fn install() {
    // SAFETY: getpid has no preconditions.
    LAUNCHER.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: the child handler is an extern "C" fn that only changes the signal mask.
        unsafe { libc::pthread_atfork(None, None, Some(unblock_in_child)) };
        // Saved before any handler exists, so that a fault always finds its old action.
        let previous =
            PREVIOUS.get_or_init(|| terminating().filter_map(action_unless_ignored).collect());
        for &(sig, _) in previous {
            // SAFETY: a zeroed sigaction with a valid SA_SIGINFO handler is well-formed.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    on_signal;
                act.sa_sigaction = handler as usize;
                act.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
                libc::sigemptyset(&mut act.sa_mask);
                if libc::sigaction(sig, &act, std::ptr::null_mut()) == 0 {
                    CAUGHT.fetch_or(bit(sig), Ordering::Relaxed);
                }
            }
        }
    });
}

/// `sig` and its action now, unless that is SIG_IGN (`nohup`'s choice). SIGPIPE is Rust's
/// to ignore, not the invoker's (std ignores it in every program, and gives the task the
/// default back): it is caught, and one the launcher's own write raises is dropped.
fn action_unless_ignored(sig: libc::c_int) -> Option<(libc::c_int, libc::sigaction)> {
    // SAFETY: a null new action only reads the current one into a valid out-parameter.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let read = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0;
    let kept = old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE;
    (read && kept).then_some((sig, old))
}

/// The signal that asked the launcher to end before there was a task, if any.
pub fn pending() -> Option<i32> {
    Some(PENDING.load(Ordering::Relaxed)).filter(|&s| s != 0)
}

/// The caught signals, blocked until this is dropped: the task is started and its pid
/// recorded while they are held, so one sent meanwhile is forwarded, not lost.
pub struct Held {
    old: libc::sigset_t,
}

/// Blocks the caught signals (a forked child unblocks them again, see [`unblock_in_child`]).
pub fn hold() -> Held {
    // SAFETY: both sets are valid; pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in caught() {
            libc::sigaddset(&mut set, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let before = caught()
            .filter(|&s| libc::sigismember(&old, s) == 1)
            .fold(0u64, |bits, s| bits | bit(s));
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

/// Sleeps for `d`, or less when a caught signal asks the launcher to end.
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

/// The conventional name of a signal (`SIGTERM`, `SIGRTMIN+3`), for messages.
pub fn name(sig: i32) -> String {
    if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&sig) {
        return format!("SIGRTMIN+{}", sig - libc::SIGRTMIN());
    }
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};

    /// A plain `sleep` whose actions are all the default, without core dumps.
    fn plain_process() -> std::process::Child {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("60");
        // SAFETY: signal, sigprocmask and setrlimit are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                for s in 1..=libc::SIGRTMAX() {
                    libc::signal(s, libc::SIG_DFL);
                }
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                let no_core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &no_core);
                Ok(())
            });
        }
        cmd.spawn().unwrap()
    }

    /// The signal that ended `child`, waiting at most a minute (killing it past that).
    fn ending_signal(mut child: std::process::Child) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.signal();
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn the_caught_signals_end_a_plain_process_and_no_other_catchable_one_does() {
        let caught: Vec<libc::c_int> = terminating().collect();
        let reserved = libc::SIGSYS + 1..libc::SIGRTMIN();
        // Each signal to a process of its own, all at once. One the rule leaves out is
        // followed by SIGTERM (and SIGCONT): a signal that would have ended the process has
        // done so at the send, so SIGTERM ends it only when this one did not.
        let sent: Vec<(libc::c_int, bool, std::process::Child)> = (1..=libc::SIGRTMAX())
            .filter(|s| *s != libc::SIGKILL && !reserved.contains(s))
            .map(|sig| {
                let child = plain_process();
                let ends = caught.contains(&sig);
                // SAFETY: signalling our own child.
                unsafe {
                    libc::kill(child.id() as i32, sig);
                    if !ends {
                        libc::kill(child.id() as i32, libc::SIGTERM);
                        // A stop signal delivered before SIGTERM (the child ran between the
                        // two sends, as on a loaded machine) holds SIGTERM pending until the
                        // process continues.
                        libc::kill(child.id() as i32, libc::SIGCONT);
                    }
                }
                (sig, ends, child)
            })
            .collect();
        for (sig, ends, child) in sent {
            let by = ending_signal(child);
            let expected = if ends { sig } else { libc::SIGTERM };
            assert_eq!(by, Some(expected), "{} (caught: {ends})", name(sig));
        }
        // The C library's own (what they do to a process depends on the library: glibc 2.36
        // handles the first itself, the second ends a plain process): sigaction refuses them.
        for sig in reserved {
            // SAFETY: a null new action only reads the current one.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            let read = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
            assert_eq!(read, -1, "signal {sig} is not the C library's");
        }
        for sig in [libc::SIGUSR1, libc::SIGALRM, libc::SIGPWR, libc::SIGRTMAX()] {
            assert!(caught.contains(&sig), "{}", name(sig));
        }
    }

    #[test]
    fn a_fault_or_abort_of_the_launcher_is_its_own_and_anything_sent_is_not() {
        let (me, other) = (100, 200);
        // SEGV_MAPERR, ILL_ILLOPC, FPE_INTDIV, BUS_ADRERR.
        for (sig, code) in [
            (libc::SIGSEGV, 1),
            (libc::SIGILL, 1),
            (libc::SIGFPE, 1),
            (libc::SIGBUS, 2),
        ] {
            assert!(own(sig, code, 0, me), "{}", name(sig));
            assert!(!own(sig, libc::SI_USER, other, me), "kill -{}", name(sig));
        }
        // abort() raises SIGABRT with tgkill.
        assert!(own(libc::SIGABRT, libc::SI_TKILL, me, me));
        assert!(!own(libc::SIGUSR1, libc::SI_QUEUE, other, me));
        // A terminal's Ctrl-C or a limit the kernel enforces is not a fault.
        assert!(!own(libc::SIGINT, libc::SI_KERNEL, 0, me));
        assert!(!own(libc::SIGXFSZ, libc::SI_KERNEL, 0, me));
    }

    #[test]
    fn real_time_signals_are_named_from_sigrtmin() {
        assert_eq!(name(libc::SIGRTMIN() + 3), "SIGRTMIN+3");
        assert_eq!(name(libc::SIGUSR1), "SIGUSR1");
    }
}
