//! Each thread of the run (the `threads` entries): where it was placed and what it did.

use crate::housekeeper::outcome::ThreadOutcome;
use crate::placement_log::ThreadPlacement;
use serde::Serialize;

/// One thread: the placement log's view and what the housekeeper measured (see
/// [`ThreadOutcome`]). Counters are `null` where the thread was never read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadReport {
    /// The log's view.
    #[serde(flatten)]
    pub placement: PlacementReport,
    /// CPUs it was seen running on.
    pub seen_on: Vec<usize>,
    /// `se.nr_migrations`.
    pub migrations: Option<u64>,
    /// Voluntary context switches.
    pub voluntary_ctxsw: Option<u64>,
    /// Involuntary context switches.
    pub involuntary_ctxsw: Option<u64>,
    /// Time waiting on a run queue, seconds.
    pub run_delay_s: Option<f64>,
    /// CPU time, seconds.
    pub cpu_s: Option<f64>,
    /// Seen outside the CPU assigned to it; `null` when it had no single CPU or was not read.
    pub drift: Option<bool>,
    /// Polls that read it.
    pub polls: u32,
}

impl From<&ThreadOutcome> for ThreadReport {
    fn from(t: &ThreadOutcome) -> ThreadReport {
        ThreadReport {
            placement: PlacementReport::from(&t.placement),
            seen_on: t.seen_on.clone(),
            migrations: t.migrations,
            voluntary_ctxsw: t.voluntary_ctxsw,
            involuntary_ctxsw: t.involuntary_ctxsw,
            run_delay_s: t.run_delay_s,
            cpu_s: t.cpu_s,
            drift: t.drift,
            polls: t.polls,
        }
    }
}

/// What the placement log says about one thread (see [`ThreadPlacement`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacementReport {
    /// Thread id.
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// Latest name.
    pub comm: String,
    /// Role.
    pub role: String,
    /// Slot, if it held one.
    pub slot: Option<usize>,
    /// The CPU last applied.
    pub cpu: Option<usize>,
    /// It shared its slot.
    pub shared: bool,
    /// It ends on the whole reservation, no CPU of its own.
    pub roams: bool,
    /// Affinity calls the shim answered for it.
    pub set_calls: usize,
    /// The last mask it asked for, as a cpulist.
    pub asked: Option<String>,
    /// An exit record was seen.
    pub exited: bool,
    /// Who placed it last.
    pub placed_by: String,
}

impl From<&ThreadPlacement> for PlacementReport {
    fn from(p: &ThreadPlacement) -> PlacementReport {
        PlacementReport {
            tid: p.tid,
            pid: p.pid,
            comm: p.comm.clone(),
            role: p.role.clone(),
            slot: p.slot,
            cpu: p.cpu,
            shared: p.shared,
            roams: p.roams,
            set_calls: p.set_calls,
            asked: p.asked.clone(),
            exited: p.exited,
            placed_by: p.placed_by.clone(),
        }
    }
}
