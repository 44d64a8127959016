//! Ending the run in progress when goset-bench is interrupted: each run is a process group of
//! its own (so that a timed-out run's every process can be killed), which the terminal's
//! SIGINT no longer reaches; the handler passes SIGINT, SIGTERM and SIGHUP on to that group,
//! then dies of the signal itself.
//!
//! Owns: the signal handlers and the one atomic they read.

use std::sync::atomic::{AtomicI32, Ordering};

/// The process group of the run in progress, 0 for none.
static RUNNING: AtomicI32 = AtomicI32::new(0);

/// Records the group of the run in progress (`0`: none).
pub fn running(group: i32) {
    RUNNING.store(group, Ordering::SeqCst);
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe calls: kill, signal, raise.
    let group = RUNNING.load(Ordering::SeqCst);
    // SAFETY: plain syscalls on integers.
    unsafe {
        if group > 0 {
            libc::kill(-group, sig);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs the handlers; called once at start.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only makes async-signal-safe calls.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}
