//! What a run's housekeeping adds up to: the Telemetry rows, one entry per thread (the
//! placement log's view joined with what `/proc` said), and the housekeeper's own cost.
//!
//! Owns: the figures of `telemetry` and of the enriched `threads` entries (the report's
//! shapes of them are in [`crate::report::model`]). Pure: built from values, no I/O.

use super::cpu_sampler::CpuTelemetry;
use super::placer::Owned;
use super::policy::unplaced::Spot;
use super::tracked::Tracked;
use super::Settings;
use crate::fsroot::ReadError;
use crate::placement_log::{Log, Record, ThreadPlacement};
use goset_plan::log::{Event, PlacedBy};
use std::collections::BTreeMap;

/// Everything the housekeeper gathered.
pub struct Outcome {
    /// The plan it worked with.
    pub settings: Settings,
    /// Polls made.
    pub polls: u64,
    /// Seconds from the first snapshot to the end.
    pub wall_s: f64,
    /// Unix time of the first snapshot, seconds.
    pub started_unix_s: f64,
    /// CPU seconds the launcher used while the task ran (polling, placing).
    pub cpu_s: f64,
    /// One row per task CPU.
    pub cpus: Vec<CpuTelemetry>,
    /// The `all` row.
    pub all: CpuTelemetry,
    /// Threads seen in `/proc`.
    pub threads: std::collections::HashMap<i32, Tracked>,
    /// Tids in order of first sight.
    pub order: Vec<i32>,
    /// Threads the housekeeper placed.
    pub owned: BTreeMap<i32, Owned>,
    /// The records it wrote (the report's source for them when there is no log file).
    pub records: Vec<Record>,
    /// Failed or unsupported reads, once each.
    pub errors: Vec<ReadError>,
    /// Threads that ended briefly with their records deferred, as the shim counted them.
    pub brief: u64,
}

/// The housekeeper's own cost.
#[derive(Debug, Clone)]
pub struct HousekeeperCost {
    /// Its CPU.
    pub cpu: usize,
    /// CPU seconds it used while the task ran.
    pub cpu_s: f64,
    /// Of one CPU, in percent, over the run.
    pub cpu_pct: f64,
    /// Threads it placed itself.
    pub placed: usize,
    /// Moves of threads after their placement (`move` records): busy threads off a crowded
    /// slot, and the threads of a slot that left a noisy CPU.
    pub moved: usize,
}

/// The task CPUs over the run, the housekeeper's cost and its moves.
#[derive(Debug, Clone)]
pub struct Telemetry {
    /// Poll interval, ms.
    pub interval_ms: u64,
    /// Polls made.
    pub polls: u64,
    /// Seconds between the first and the last CPU snapshot.
    pub window_s: f64,
    /// One row per task CPU, in slot order.
    pub cpus: Vec<CpuTelemetry>,
    /// Summed over the task CPUs.
    pub all: CpuTelemetry,
    /// What the housekeeper cost.
    pub housekeeper: HousekeeperCost,
    /// Totals over the threads (null where a thread's counter is unknown).
    pub totals: Totals,
    /// The housekeeper's moves of threads after their placement, in order.
    pub moves: Vec<MoveEvent>,
}

/// One thread moved after its placement (a `move` record of the placement log).
#[derive(Debug, Clone, PartialEq)]
pub struct MoveEvent {
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
    /// Why, with the figures (`demand: ...` or `noise: ...`).
    pub reason: String,
}

/// Sums over every thread seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Threads seen in `/proc`.
    pub threads: usize,
    /// Sum of `se.nr_migrations`.
    pub migrations: Option<u64>,
    /// Sum of run-queue wait, seconds.
    pub run_delay_s: Option<f64>,
    /// Threads seen outside their assigned CPU.
    pub drift: usize,
    /// Threads in no other figure and not in `threads`: each was born beside its creator,
    /// which waited on it, and ended within a millisecond; the shim counted them and logged
    /// none (docs/placement.md, "Brief children of a waiting creator").
    pub brief: u64,
}

/// One thread of the run: the placement log's view of it and what the housekeeper measured.
/// Counters are over the thread's life up to the last poll that read it;
/// `None` when it was never read (it lived less than one interval) or the file is missing.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadOutcome {
    /// The log's view.
    pub placement: ThreadPlacement,
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

impl ThreadOutcome {
    /// A thread the housekeeper never read: its placement alone, every measure unknown.
    pub fn unmeasured(placement: ThreadPlacement) -> ThreadOutcome {
        ThreadOutcome {
            placement,
            seen_on: Vec::new(),
            migrations: None,
            voluntary_ctxsw: None,
            involuntary_ctxsw: None,
            run_delay_s: None,
            cpu_s: None,
            drift: None,
            polls: 0,
        }
    }
}

fn measured(p: ThreadPlacement, t: Option<&Tracked>) -> ThreadOutcome {
    let Some(t) = t else {
        return ThreadOutcome::unmeasured(p);
    };
    let cpu_s = match (t.sched, &t.stat) {
        (Some(s), _) => Some(s.runtime_ns as f64 / 1e9),
        (None, Some(st)) => Some(st.cpu_ticks as f64 / crate::noise::USER_HZ as f64),
        _ => None,
    };
    ThreadOutcome {
        seen_on: t.seen_on.iter().copied().collect(),
        migrations: t.switches.and_then(|s| s.migrations),
        voluntary_ctxsw: t.switches.map(|s| s.voluntary),
        involuntary_ctxsw: t.switches.map(|s| s.involuntary),
        run_delay_s: t.sched.map(|s| s.run_delay_ns as f64 / 1e9),
        cpu_s,
        drift: p.cpu.map(|_| t.drift_polls > 0),
        polls: t.polls,
        placement: ThreadPlacement {
            exited: p.exited || t.ended,
            // Its own name as last read: a thread that names itself after its birth (a JVM's
            // GC workers) was logged under its creator's.
            comm: (t.stat.as_ref())
                .map(|s| s.comm.clone())
                .filter(|c| !c.is_empty())
                .unwrap_or(p.comm.clone()),
            ..p
        },
    }
}

impl Outcome {
    /// `log` with only the records of the task's own threads (see [`super::own::own_records`]:
    /// the threads this housekeeper saw, and live ones descending from `launcher`), and how
    /// many records were left out.
    pub fn own_log(&self, log: Log, launcher: i32, procs: &impl super::own::Procs) -> (Log, usize) {
        let seen: BTreeMap<i32, i32> = (self.threads.iter())
            .map(|(&tid, t)| (tid, t.pid))
            .collect();
        let (records, left_out) = super::own::own_records(log.records, &seen, launcher, procs);
        let log = Log {
            records,
            bad_lines: log.bad_lines + left_out,
        };
        (log, left_out)
    }

    /// One entry per thread: those of the placement log (`log`, which holds the housekeeper's
    /// records when it had a file) in log order, then threads only `/proc` saw, in order of
    /// first sight. A thread the housekeeper placed shows where it put it last.
    pub fn thread_reports(&self, log: &Log) -> Vec<ThreadOutcome> {
        let mut placements = log.threads();
        if log.records.iter().all(|r| !r.by_housekeeper()) {
            let own = Log {
                records: self.records.clone(),
                bad_lines: 0,
            };
            for p in own.threads() {
                if !placements.iter().any(|q| q.tid == p.tid) {
                    placements.push(p);
                }
            }
        }
        for p in placements.iter_mut() {
            if let Some(o) = self.owned.get(&p.tid) {
                p.role = o.spot.role().as_str().to_string();
                p.slot = match o.spot {
                    Spot::Slot(s) => Some(s),
                    Spot::Parked => None,
                };
                p.cpu = Some(o.cpu);
                p.roams = false;
                p.placed_by = PlacedBy::Housekeeper.as_str().into();
            }
        }
        let mut out: Vec<ThreadOutcome> = Vec::new();
        for p in placements {
            let t = self.threads.get(&p.tid).filter(|t| t.pid == p.pid);
            out.push(measured(p, t));
        }
        for tid in &self.order {
            if out.iter().any(|r| r.placement.tid == *tid) {
                continue;
            }
            let t = &self.threads[tid];
            let p = ThreadPlacement {
                tid: *tid,
                pid: t.pid,
                comm: t.stat.as_ref().map(|s| s.comm.clone()).unwrap_or_default(),
                role: "-".into(),
                slot: None,
                cpu: None,
                shared: false,
                roams: false,
                set_calls: 0,
                asked: None,
                exited: t.ended,
                placed_by: PlacedBy::Nobody.as_str().into(),
            };
            out.push(measured(p, Some(t)));
        }
        out
    }

    /// The run's [`Telemetry`]; `threads` are the entries from [`Outcome::thread_reports`].
    pub fn telemetry(&self, threads: &[ThreadOutcome]) -> Telemetry {
        let seen: Vec<&ThreadOutcome> = threads.iter().filter(|t| t.polls > 0).collect();
        Telemetry {
            interval_ms: self.settings.interval.as_millis() as u64,
            polls: self.polls,
            window_s: self.wall_s,
            cpus: self.cpus.clone(),
            all: self.all.clone(),
            housekeeper: HousekeeperCost {
                cpu: self.settings.housekeeper_cpu,
                cpu_s: self.cpu_s,
                cpu_pct: if self.wall_s > 0.0 {
                    100.0 * self.cpu_s / self.wall_s
                } else {
                    0.0
                },
                placed: self.owned.len(),
                moved: self.moves().count(),
            },
            totals: Totals {
                threads: seen.len(),
                migrations: seen.iter().map(|t| t.migrations).sum(),
                run_delay_s: seen.iter().map(|t| t.run_delay_s).sum(),
                drift: seen.iter().filter(|t| t.drift == Some(true)).count(),
                brief: self.brief,
            },
            moves: (self.moves())
                .map(|r| MoveEvent {
                    after_s: (r.time - self.started_unix_s).max(0.0),
                    tid: r.tid,
                    pid: r.pid,
                    comm: r.comm.clone(),
                    from_cpu: r.from_cpu,
                    to_cpu: r.cpu,
                    reason: r.reason.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// The housekeeper's `move` records.
    fn moves(&self) -> impl Iterator<Item = &Record> {
        (self.records.iter()).filter(|r| r.is(Event::Move))
    }
}
