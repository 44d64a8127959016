//! How the task ran (the `run` section) and how its threads were placed (`placement`).

use crate::summary::RunSummary;
use crate::task::Usage;
use serde::Serialize;

/// How the threads were placed (`--placement`, [`crate::cli::PlacementMode`]), written as its
/// [`PlacementMode::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementMode {
    /// Each thread on its own CPU.
    Thread,
    /// One shared mask of the task CPUs.
    Mask,
}

impl PlacementMode {
    /// Its name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            PlacementMode::Thread => "thread",
            PlacementMode::Mask => "mask",
        }
    }
}

impl Serialize for PlacementMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// How the task ran (see [`RunSummary`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Wall time in seconds.
    pub wall_s: f64,
    /// CPU time over wall time, in percent (100 = one busy thread).
    pub util_pct: f64,
    /// goset-run's exit code (the task's status, or 128+signal).
    pub exit: i32,
    /// The signal that killed the task.
    pub signal: Option<i32>,
    /// `wait4` rusage.
    pub rusage: UsageReport,
    /// The shim was preloaded.
    pub shim: bool,
}

impl From<&RunSummary> for RunReport {
    fn from(r: &RunSummary) -> RunReport {
        RunReport {
            wall_s: r.wall_s,
            util_pct: r.util_pct,
            exit: r.exit,
            signal: r.signal,
            rusage: UsageReport::from(&r.rusage),
            shim: r.shim,
        }
    }
}

/// The task's resource usage from `wait4` (see [`Usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UsageReport {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub system_s: f64,
    /// Peak resident set in KiB.
    pub max_rss_kib: i64,
    /// Minor page faults.
    pub minor_faults: i64,
    /// Major page faults.
    pub major_faults: i64,
    /// Voluntary context switches.
    pub voluntary_ctxsw: i64,
    /// Involuntary context switches.
    pub involuntary_ctxsw: i64,
}

impl From<&Usage> for UsageReport {
    fn from(u: &Usage) -> UsageReport {
        UsageReport {
            user_s: u.user_s,
            system_s: u.system_s,
            max_rss_kib: u.max_rss_kib,
            minor_faults: u.minor_faults,
            major_faults: u.major_faults,
            voluntary_ctxsw: u.voluntary_ctxsw,
            involuntary_ctxsw: u.involuntary_ctxsw,
        }
    }
}
