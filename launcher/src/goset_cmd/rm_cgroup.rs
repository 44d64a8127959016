//! `goset rm-cgroup NAME`: removes a goset cgroup a run left behind, moving any process
//! still in it to its parent.
//!
//! Owns: what the command says about each group. Must not: remove anything but a goset group
//! (the checks are [`crate::isolate::cgroup::remove_named`]'s).

use crate::error::Result;
use crate::fsroot::FsRoot;

/// `goset rm-cgroup NAME`.
pub fn run(name: &str) -> Result<()> {
    for (dir, moved) in crate::isolate::cgroup::remove_named(&FsRoot::default(), name)? {
        for (pid, comm) in moved {
            crate::output::to_stderr(&format!(
                "goset: pid {pid} ({comm}) moved out of {} to its parent\n",
                dir.display()
            ));
        }
        crate::output::to_stderr(&format!("goset: removed {}\n", dir.display()));
    }
    Ok(())
}
