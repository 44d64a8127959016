//! The task CPUs over the run and the housekeeper's cost (the `telemetry` object).

use crate::housekeeper::cpu_sampler::CpuTelemetry;
use crate::housekeeper::outcome::{HousekeeperCost, MoveEvent, Telemetry, Totals};
use serde::Serialize;
use std::collections::BTreeMap;

/// The `telemetry` object (see [`Telemetry`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TelemetryReport {
    /// Poll interval, ms.
    pub interval_ms: u64,
    /// Polls made.
    pub polls: u64,
    /// Seconds between the first and the last CPU snapshot.
    pub window_s: f64,
    /// One row per task CPU, in slot order.
    pub cpus: Vec<CpuTelemetryReport>,
    /// Summed over the task CPUs.
    pub all: CpuTelemetryReport,
    /// What the housekeeper cost.
    pub housekeeper: HousekeeperReport,
    /// Totals over the threads (null where a thread's counter is unknown).
    pub totals: TotalsReport,
    /// The housekeeper's moves of threads after their placement, in order.
    pub moves: Vec<MoveReport>,
}

impl From<&Telemetry> for TelemetryReport {
    fn from(t: &Telemetry) -> TelemetryReport {
        TelemetryReport {
            interval_ms: t.interval_ms,
            polls: t.polls,
            window_s: t.window_s,
            cpus: t.cpus.iter().map(CpuTelemetryReport::from).collect(),
            all: CpuTelemetryReport::from(&t.all),
            housekeeper: HousekeeperReport::from(&t.housekeeper),
            totals: TotalsReport::from(&t.totals),
            moves: t.moves.iter().map(MoveReport::from).collect(),
        }
    }
}

/// One row of the Telemetry table: a task CPU, or `all` (see [`CpuTelemetry`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuTelemetryReport {
    /// The CPU; `None` for the `all` row.
    pub cpu: Option<usize>,
    /// Lowest sampled frequency, kHz (`None`: no cpufreq).
    pub freq_min_khz: Option<u64>,
    /// Average sampled frequency, kHz.
    pub freq_avg_khz: Option<u64>,
    /// Highest sampled frequency, kHz.
    pub freq_max_khz: Option<u64>,
    /// Frequency samples taken.
    pub freq_samples: u64,
    /// Thermal throttle events during the run (core + package counters).
    pub throttle: Option<u64>,
    /// Steerable (device) interrupts during the run.
    pub irq_steerable: Option<u64>,
    /// Non-steerable interrupts during the run.
    pub irq_nonsteerable: Option<u64>,
    /// Softirqs during the run.
    pub softirq: Option<u64>,
    /// Share of the run stolen by the hypervisor, percent.
    pub steal_pct: Option<f64>,
    /// Each non-steerable row (`LOC`, `RES`, `CAL`, `TLB`, ...) during the run.
    pub rows: BTreeMap<String, u64>,
}

impl From<&CpuTelemetry> for CpuTelemetryReport {
    fn from(c: &CpuTelemetry) -> CpuTelemetryReport {
        CpuTelemetryReport {
            cpu: c.cpu,
            freq_min_khz: c.freq_min_khz,
            freq_avg_khz: c.freq_avg_khz,
            freq_max_khz: c.freq_max_khz,
            freq_samples: c.freq_samples,
            throttle: c.throttle,
            irq_steerable: c.irq_steerable,
            irq_nonsteerable: c.irq_nonsteerable,
            softirq: c.softirq,
            steal_pct: c.steal_pct,
            rows: c.rows.clone(),
        }
    }
}

/// The housekeeper's own line (see [`HousekeeperCost`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HousekeeperReport {
    /// Its CPU.
    pub cpu: usize,
    /// CPU seconds it used while the task ran.
    pub cpu_s: f64,
    /// Of one CPU, in percent, over the run.
    pub cpu_pct: f64,
    /// Threads it placed itself.
    pub placed: usize,
    /// Moves of threads after their placement.
    pub moved: usize,
}

impl From<&HousekeeperCost> for HousekeeperReport {
    fn from(h: &HousekeeperCost) -> HousekeeperReport {
        HousekeeperReport {
            cpu: h.cpu,
            cpu_s: h.cpu_s,
            cpu_pct: h.cpu_pct,
            placed: h.placed,
            moved: h.moved,
        }
    }
}

/// Sums over every thread seen (see [`Totals`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TotalsReport {
    /// Threads seen in `/proc`.
    pub threads: usize,
    /// Sum of `se.nr_migrations`.
    pub migrations: Option<u64>,
    /// Sum of run-queue wait, seconds.
    pub run_delay_s: Option<f64>,
    /// Threads seen outside their assigned CPU.
    pub drift: usize,
    /// Brief children of a waiting creator: counted by the shim, in no other figure.
    pub brief: u64,
}

impl From<&Totals> for TotalsReport {
    fn from(t: &Totals) -> TotalsReport {
        TotalsReport {
            threads: t.threads,
            migrations: t.migrations,
            run_delay_s: t.run_delay_s,
            drift: t.drift,
            brief: t.brief,
        }
    }
}

/// One thread moved after its placement (see [`MoveEvent`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoveReport {
    /// Seconds after the task started.
    pub after_s: f64,
    /// Thread id.
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// The thread's name.
    pub comm: String,
    /// The CPU it left.
    pub from_cpu: Option<usize>,
    /// The CPU it went to.
    pub to_cpu: Option<usize>,
    /// Why, with the figures: the move's [`crate::housekeeper::placer::MoveReason`] as the
    /// placement log wrote it.
    pub reason: String,
}

impl From<&MoveEvent> for MoveReport {
    fn from(m: &MoveEvent) -> MoveReport {
        MoveReport {
            after_s: m.after_s,
            tid: m.tid,
            pid: m.pid,
            comm: m.comm.clone(),
            from_cpu: m.from_cpu,
            to_cpu: m.to_cpu,
            reason: m.reason.clone(),
        }
    }
}
