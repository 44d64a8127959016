//! What `--cgroup`, `--fence` and `--steer` changed and how it was undone (`isolation`).

use crate::isolate::cgroup::{Group, Version};
use crate::isolate::irq::Steering;
use crate::isolate::undo::Undone;
use crate::isolate::IsolationOutcome;
use serde::Serialize;
use std::path::PathBuf;

/// The `isolation` object (see [`IsolationOutcome`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IsolationReport {
    /// The cgroup the task ran in.
    pub cgroup: Option<CgroupReport>,
    /// IRQ steering (`--steer`).
    pub steer: Option<SteeringReport>,
    /// What was done with irqbalance (`--steer`).
    pub irqbalance: Option<String>,
    /// Undoing the changes at the end.
    pub undone: UndoneReport,
}

impl From<&IsolationOutcome> for IsolationReport {
    fn from(i: &IsolationOutcome) -> IsolationReport {
        IsolationReport {
            cgroup: i.cgroup.as_ref().map(CgroupReport::from),
            steer: i.steer.as_ref().map(SteeringReport::from),
            irqbalance: i.irqbalance.clone(),
            undone: UndoneReport::from(&i.undone),
        }
    }
}

/// The cgroup the task ran in (see [`Group`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupReport {
    /// Its directory.
    pub path: PathBuf,
    /// `v1` or `v2`.
    pub version: &'static str,
    /// Its `cpuset.cpus`.
    pub cpus: String,
    /// Its `cpuset.mems`.
    pub mems: String,
}

impl From<&Group> for CgroupReport {
    fn from(g: &Group) -> CgroupReport {
        CgroupReport {
            path: g.path.clone(),
            version: match g.version {
                Version::V1 => "v1",
                Version::V2 => "v2",
            },
            cpus: g.cpus.clone(),
            mems: g.mems.clone(),
        }
    }
}

/// What IRQ steering did, and the drift found while the task ran (see [`Steering`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SteeringReport {
    /// IRQs moved off the task CPUs.
    pub applied: usize,
    /// IRQs whose write the kernel refused, with the reason (`[irq, "EIO"]`).
    pub refused: Vec<(u32, String)>,
    /// IRQs already off the task CPUs.
    pub already_off: usize,
    /// IRQs still delivered to a task CPU at the end of the run.
    pub remaining: usize,
    /// IRQs that were off the task CPUs and came back while the task ran.
    pub drift: usize,
}

impl From<&Steering> for SteeringReport {
    fn from(s: &Steering) -> SteeringReport {
        SteeringReport {
            applied: s.applied,
            refused: s.refused.clone(),
            already_off: s.already_off,
            remaining: s.remaining,
            drift: s.drift,
        }
    }
}

/// What undoing the run's changes did (see [`Undone`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UndoneReport {
    /// Changes undone (or found already undone).
    pub restored: usize,
    /// Changes that could not be undone, one line each.
    pub failed: Vec<String>,
    /// Processes found in a group being removed, moved to its parent: `[pid, comm]`.
    pub outlived: Vec<(i32, String)>,
}

impl From<&Undone> for UndoneReport {
    fn from(u: &Undone) -> UndoneReport {
        UndoneReport {
            restored: u.restored,
            failed: u.failed.clone(),
            outlived: u.outlived.clone(),
        }
    }
}
