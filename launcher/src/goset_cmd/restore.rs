//! `goset restore`: undoes the journals of launchers that died (SIGKILL, OOM kill) before
//! undoing their own changes, and removes their bookings.
//!
//! Owns: what `goset restore` says about each journal. Must not: undo anything itself (that is
//! [`crate::isolate`]'s).

use crate::error::{Error, Result};

/// `goset restore`: undoes the journals of dead launchers and removes their bookings, saying
/// what it did.
pub fn run() -> Result<()> {
    let (done, journals) = crate::isolate::restore(&crate::rundir::base_dir());
    for (pid, comm) in &done.outlived {
        crate::output::to_stderr(&format!(
            "goset: pid {pid} ({}) was still in a goset cgroup: moved to its parent\n",
            crate::output::escape(comm)
        ));
    }
    crate::output::to_stderr(&format!(
        "goset: restore: {} change(s) undone from {journals} journal(s) of dead runs\n",
        done.restored
    ));
    let swept = crate::booking::sweep_dead();
    if swept > 0 {
        crate::output::to_stderr(&format!(
            "goset: restore: {swept} booking(s) of dead runs removed\n"
        ));
    }
    for why in &done.failed {
        crate::output::to_stderr(&format!("goset: restore: {why}\n"));
    }
    if done.failed.is_empty() {
        Ok(())
    } else {
        Err(Error::System(format!(
            "restore: {} change(s) could not be undone (above); their journals are kept",
            done.failed.len()
        )))
    }
}
