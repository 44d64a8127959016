//! The configuration's life cycle, as the hooks see it: [`get`] returns the process's
//! [`Config`], initialising it on first use.
//!
//! Owns: the one slow path: the first call (normally the constructor's; a hook's when another
//! library's constructor calls it first, as libgomp's does) loads the configuration ([`load`])
//! and places the main thread ([`crate::process::start`]); other threads that arrive meanwhile
//! wait briefly, then pass through. Sits above every module that places threads, so the
//! imports run one way: the type and its storage live below, in [`crate::config`].
//!
//! Stack: a ready or disabled configuration costs two atomic loads and no frame of its own;
//! initialisation is `#[cold]`, `#[inline(never)]`, and keeps its buffers in static memory, so
//! that even a hook that initialises fits in a few KiB (see [`crate::load`]). Must not:
//! allocate, lock, or put anything large on the stack.

use crate::config::{self, Config};
use crate::{load, log, process, sys};
use goset_plan::raw;

/// The configuration, initialising it on first use; `None` while disabled, or while another
/// thread is still initialising after a short wait.
#[inline]
pub fn get() -> Option<&'static Config> {
    if let Some(cfg) = config::ready() {
        return Some(cfg);
    }
    if config::disabled() {
        return None;
    }
    initialise_or_wait()
}

#[cold]
#[inline(never)]
fn initialise_or_wait() -> Option<&'static Config> {
    for _ in 0..10_000 {
        if let Some(cfg) = config::ready() {
            return Some(cfg);
        }
        if config::disabled() {
            return None;
        }
        if config::begin() {
            return initialise();
        }
        // SAFETY: sched_yield has no arguments and no memory effects.
        unsafe { raw::syscall6(libc::SYS_sched_yield, [0; 6]) };
    }
    None
}

#[cold]
#[inline(never)]
fn initialise() -> Option<&'static Config> {
    // Before anything can warn: a warning goes only to the stderr the process started with.
    log::note_stderr();
    // SAFETY: this thread won `begin`, so it alone fills the plan and the configuration.
    let loaded = unsafe { load::load(config::plan_mut()) };
    let Ok(cfg) = loaded else {
        config::disable();
        return None;
    };
    // Before READY, so no thread that sees READY takes the main thread for a stranger.
    process::set_pid(sys::getpid());
    if sys::seccomp_mode() == 2 {
        sys::note_seccomp_filter();
    }
    // SAFETY: as above.
    let cfg = unsafe { config::publish(cfg) };
    process::start(cfg, "init");
    Some(cfg)
}
