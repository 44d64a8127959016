//! The direct detour probe (`goset probe`, `goset-run --probe MS`): one busy thread per CPU,
//! all at once, each reading the clock in a tight loop; a gap between two readings longer than
//! the threshold is a detour, time the CPU spent on something else (an interrupt, a softirq,
//! a kernel thread, a real-time task, an SMI, the hypervisor). It measures what counters
//! cannot: how long each detour took, including those no counter shows.
//!
//! Owns: the probe's threads and clock loop (`run.rs`) and the pure statistics of what they
//! saw (`stats.rs`): count, lost time, longest, percentiles, and the ranking of CPUs by lost
//! time. Must not: select CPUs or print.

mod run;
pub(crate) mod stats;

pub use run::{run, Probe, FIFO_PRIORITY};
pub use stats::{ranking, CpuProbe};

use std::time::Duration;

/// The default threshold: a gap longer than this between two clock readings is a detour.
/// The kernel's osnoise tracer uses 5 µs (`tracing_thresh` 0); a user-space loop reading the
/// vDSO clock under a hypervisor sees single readings of 1-2 µs that are the clock's own
/// cost, so the finer 1 µs of rtla's newer default would count them as noise.
pub const DEFAULT_THRESHOLD: Duration = Duration::from_micros(5);
/// The default busy time of `goset probe`, in ms.
pub const DEFAULT_MS: u64 = 1000;
/// The longest probe: every candidate CPU is kept busy for it.
pub const MAX_MS: u64 = 10_000;
