//! The Run section of the report: how the task ran, added up from its ending and its rusage.
//! Below both the launcher and the report, so that each depends on it and not on the other.

use crate::task::{Ending, Usage};

/// The Run section.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Wall time in seconds.
    pub wall_s: f64,
    /// CPU time over wall time, in percent (100 = one busy thread).
    pub util_pct: f64,
    /// goset-run's exit code (the task's status, or 128+signal).
    pub exit: i32,
    /// The signal that killed the task.
    pub signal: Option<i32>,
    /// `wait4` rusage.
    pub rusage: Usage,
    /// The shim was preloaded.
    pub shim: bool,
}

impl RunSummary {
    /// The summary of a task that ran `wall_s` seconds, used `rusage` and ended so.
    pub fn new(wall_s: f64, ending: Ending, rusage: Usage, shim: bool) -> RunSummary {
        let cpu_s = rusage.user_s + rusage.system_s;
        RunSummary {
            wall_s,
            util_pct: if wall_s > 0.0 {
                100.0 * cpu_s / wall_s
            } else {
                0.0
            },
            exit: ending.exit_code(),
            signal: match ending {
                Ending::Signaled(s) => Some(s),
                Ending::Exited(_) => None,
            },
            rusage,
            shim,
        }
    }
}
