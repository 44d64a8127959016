//! What the node's noise record knew of the task CPUs against what the run saw
//! (`noise_record`), built by [`crate::report::record::known_and_seen`].

use serde::Serialize;

/// How a run used the noise record (the `noise_record` of its JSON report).
#[derive(Debug, Clone, Serialize)]
pub struct RecordUse {
    /// Whether the record took part in the selection (it covered enough of the minutes
    /// horizon); without it the sample alone decided.
    pub informed: bool,
    /// The sampling window, ms (shorter by default with a recent record).
    pub sample_ms: u64,
    /// Per task CPU.
    pub cpus: Vec<KnownAndSeen>,
}

/// What the record knew of each task CPU when the run was selected, against what the run then
/// saw (the housekeeper's telemetry).
#[derive(Debug, Clone, Serialize)]
pub struct KnownAndSeen {
    /// Task CPU.
    pub cpu: usize,
    /// Lost % over the minutes horizon, as the record said at selection.
    pub known_lost_pct: f64,
    /// Seconds of that horizon it had observed.
    pub known_covered_s: f64,
    /// Lost to irq, softirq and steal over the run, percent, as the housekeeper's polls saw it
    /// (the task's own load is not noise, and other tasks' cannot be told from it there).
    pub seen_lost_pct: Option<f64>,
}
