//! The record's arithmetic: decayed sums per CPU and horizon, an observation added, two records
//! merged, and what a record says at an instant.
//!
//! Owns: [`Record`], [`Sums`], [`Observation`], [`View`] and the checks a record read from a
//! file must pass ([`Record::check`]). Must not: read or write files (`file.rs`), read `/proc`
//! (`feed.rs`).
//!
//! Each horizon `τ` keeps, per CPU, sums of `value × seconds observed`, each term weighted by
//! `exp(-age / τ)`, and the weight itself (`Σ seconds × exp(-age / τ)`). The average is their
//! ratio, so it does not depend on how often the CPU was observed, only on when: an hour-old
//! observation counts `exp(-6)` of a new one over 10 minutes and nearly as much over a day. All
//! sums are kept as of [`Record::updated`]; moving that instant forward multiplies them by
//! `exp(-Δ / τ)`. The decayed weight is how much of the horizon was observed ([`View::covered_s`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The horizons, in seconds: what the last seconds, minutes and day looked like.
pub const HORIZONS_S: [f64; 3] = [10.0, 600.0, 86_400.0];

/// Their names in reports.
pub const HORIZON_NAMES: [&str; 3] = ["10 s", "10 min", "1 day"];

/// The minutes horizon: the one selection combines with its sample.
pub const MINUTES: usize = 1;

/// The format name and version written into every record (a reader refuses others).
pub const FORMAT: &str = "goset-noise-record";
/// See [`FORMAT`].
pub const VERSION: u32 = 1;

/// Most CPUs a record holds (Linux's `NR_CPUS` maximum on x86 is 8192).
pub const MAX_CPUS: usize = 8192;

/// How far in the future a record's time may be before it is refused: clocks of a node agree,
/// a record from later than this was forged or written under a wrong clock.
pub const FUTURE_SLACK_S: f64 = 60.0;

/// Decayed sums of one CPU over one horizon (see the module doc). Percentages are of the CPU's
/// accounted time; rates are per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sums {
    /// Seconds observed (decayed): the weight of `irq`, `softirq`, `steal` and the rates.
    pub w: f64,
    /// Seconds whose other tasks' load was observed: less than `w` where this user's own task
    /// ran (its time is not noise, and the counters cannot tell it from other work).
    pub lw: f64,
    /// Other tasks' load (user, nice and system time) × seconds.
    pub load: f64,
    /// Hard interrupt time × seconds, where the kernel accounts it (`IRQ_TIME_ACCOUNTING`).
    pub irq: f64,
    /// Softirq time × seconds.
    pub softirq: f64,
    /// Time stolen by the hypervisor × seconds.
    pub steal: f64,
    /// Non-steerable interrupts and softirqs per second × seconds.
    pub events: f64,
    /// Steerable device interrupts per second × seconds.
    pub steerable: f64,
    /// Seconds a direct probe ran on the CPU (decayed).
    pub pw: f64,
    /// Share lost to detours the probe measured × its seconds.
    pub probe: f64,
}

impl Sums {
    fn scaled(&self, f: f64) -> Sums {
        Sums {
            w: self.w * f,
            lw: self.lw * f,
            load: self.load * f,
            irq: self.irq * f,
            softirq: self.softirq * f,
            steal: self.steal * f,
            events: self.events * f,
            steerable: self.steerable * f,
            pw: self.pw * f,
            probe: self.probe * f,
        }
    }

    fn add(&mut self, o: &Sums) {
        self.w += o.w;
        self.lw += o.lw;
        self.load += o.load;
        self.irq += o.irq;
        self.softirq += o.softirq;
        self.steal += o.steal;
        self.events += o.events;
        self.steerable += o.steerable;
        self.pw += o.pw;
        self.probe += o.probe;
    }

    fn fields(&self) -> [f64; 10] {
        [
            self.w,
            self.lw,
            self.load,
            self.irq,
            self.softirq,
            self.steal,
            self.events,
            self.steerable,
            self.pw,
            self.probe,
        ]
    }
}

/// One CPU observed over `secs` seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observation {
    /// How long.
    pub secs: f64,
    /// Other tasks' load, percent; `None` where this user's task ran there.
    pub load_pct: Option<f64>,
    /// Hard interrupt time, percent.
    pub irq_pct: f64,
    /// Softirq time, percent.
    pub softirq_pct: f64,
    /// Steal, percent.
    pub steal_pct: f64,
    /// Non-steerable interrupts and softirqs per second.
    pub events_per_s: f64,
    /// Steerable device interrupts per second.
    pub steerable_per_s: f64,
}

impl Observation {
    fn sums(&self) -> Sums {
        let d = self.secs;
        let load = self.load_pct.map(|l| l.clamp(0.0, 100.0));
        Sums {
            w: d,
            lw: if load.is_some() { d } else { 0.0 },
            load: load.unwrap_or(0.0) * d,
            irq: self.irq_pct.clamp(0.0, 100.0) * d,
            softirq: self.softirq_pct.clamp(0.0, 100.0) * d,
            steal: self.steal_pct.clamp(0.0, 100.0) * d,
            events: self.events_per_s.max(0.0) * d,
            steerable: self.steerable_per_s.max(0.0) * d,
            pw: 0.0,
            probe: 0.0,
        }
    }

    fn usable(&self) -> bool {
        self.secs.is_finite()
            && self.secs > 0.0
            && [
                self.load_pct.unwrap_or(0.0),
                self.irq_pct,
                self.softirq_pct,
                self.steal_pct,
                self.events_per_s,
                self.steerable_per_s,
            ]
            .iter()
            .all(|v| v.is_finite())
    }
}

/// A node's noise record: per CPU, [`Sums`] over each of [`HORIZONS_S`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The machine it describes (`/etc/machine-id`, else the host name).
    pub machine: String,
    /// The instant every sum is kept as of, Unix seconds.
    pub updated: f64,
    /// The first observation's instant, Unix seconds.
    pub since: f64,
    /// Per CPU, one [`Sums`] per horizon.
    pub cpus: BTreeMap<usize, [Sums; 3]>,
}

/// What a record says of one CPU over one horizon, at an instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct View {
    /// Seconds of the horizon observed, decayed to the instant asked.
    pub covered_s: f64,
    /// Other tasks' load, percent (0 where never observed).
    pub load_pct: f64,
    /// Hard interrupt time, percent.
    pub irq_pct: f64,
    /// Softirq time, percent.
    pub softirq_pct: f64,
    /// Steal, percent.
    pub steal_pct: f64,
    /// Non-steerable interrupts and softirqs per second.
    pub events_per_s: f64,
    /// Steerable device interrupts per second.
    pub steerable_per_s: f64,
    /// Share lost to detours a probe measured, percent; `None` where no probe ran.
    pub probe_pct: Option<f64>,
}

impl View {
    /// The time the task could not have had, percent: other tasks, irq, softirq and steal
    /// (as a sample's `busy_pct + steal_pct` counts it).
    pub fn lost_pct(&self) -> f64 {
        (self.load_pct + self.irq_pct + self.softirq_pct + self.steal_pct).min(100.0)
    }
}

fn decay(dt: f64, horizon: f64) -> f64 {
    (-dt.max(0.0) / horizon).exp()
}

impl Record {
    /// An empty record of `machine` as of `now` (Unix seconds).
    pub fn new(machine: &str, now: f64) -> Record {
        Record {
            format: FORMAT.to_string(),
            version: VERSION,
            machine: machine.to_string(),
            updated: now,
            since: now,
            cpus: BTreeMap::new(),
        }
    }

    /// Moves every sum forward to `now` (decays them); an earlier `now` changes nothing.
    pub fn advance(&mut self, now: f64) {
        // A NaN or an earlier instant moves nothing.
        if now.partial_cmp(&self.updated) != Some(std::cmp::Ordering::Greater) {
            return;
        }
        let dt = now - self.updated;
        for sums in self.cpus.values_mut() {
            for (h, s) in sums.iter_mut().enumerate() {
                *s = s.scaled(decay(dt, HORIZONS_S[h]));
            }
        }
        self.updated = now;
    }

    /// Adds `sums` as of instant `at`: decayed by its age where the record is later.
    fn add_sums(&mut self, cpu: usize, at: f64, sums: &Sums) {
        if cpu >= MAX_CPUS {
            return;
        }
        self.advance(at);
        self.since = self.since.min(at);
        let age = self.updated - at;
        let entry = self.cpus.entry(cpu).or_default();
        for (h, s) in entry.iter_mut().enumerate() {
            s.add(&sums.scaled(decay(age, HORIZONS_S[h])));
        }
    }

    /// Adds what was observed of `cpu` over the seconds ending at `at` (Unix seconds). An
    /// observation of no length, or with a value that is not a number, is left out.
    pub fn observe(&mut self, cpu: usize, at: f64, obs: &Observation) {
        if obs.usable() {
            self.add_sums(cpu, at, &obs.sums());
        }
    }

    /// Adds a direct probe's result: `lost_fraction` (0-1) of `cpu` lost to detours over the
    /// `secs` seconds ending at `at`, weighted by `secs`.
    pub fn add_probe(&mut self, cpu: usize, at: f64, lost_fraction: f64, secs: f64) {
        if !(secs.is_finite() && secs > 0.0 && lost_fraction.is_finite()) {
            return;
        }
        let sums = Sums {
            pw: secs,
            probe: 100.0 * lost_fraction.clamp(0.0, 1.0) * secs,
            ..Sums::default()
        };
        self.add_sums(cpu, at, &sums);
    }

    /// Adds everything `other` holds, each sum decayed from its own instant: two runs that
    /// watched the same minutes both count (the averages are unchanged; the coverage adds up).
    pub fn merge(&mut self, other: &Record) {
        for (&cpu, sums) in &other.cpus {
            for (h, s) in sums.iter().enumerate() {
                if cpu >= MAX_CPUS {
                    continue;
                }
                self.advance(other.updated);
                let age = self.updated - other.updated;
                let entry = self.cpus.entry(cpu).or_default();
                entry[h].add(&s.scaled(decay(age, HORIZONS_S[h])));
            }
        }
        self.since = self.since.min(other.since);
    }

    /// What the record says of each CPU over horizon `h` at `now`.
    pub fn view(&self, h: usize, now: f64) -> BTreeMap<usize, View> {
        let horizon = HORIZONS_S[h];
        (self.cpus.iter())
            .map(|(&cpu, sums)| {
                let s = &sums[h];
                let per = |v: f64, w: f64| if w > 0.0 { v / w } else { 0.0 };
                let view = View {
                    covered_s: s.w * decay(now - self.updated, horizon),
                    load_pct: per(s.load, s.lw),
                    irq_pct: per(s.irq, s.w),
                    softirq_pct: per(s.softirq, s.w),
                    steal_pct: per(s.steal, s.w),
                    events_per_s: per(s.events, s.w),
                    steerable_per_s: per(s.steerable, s.w),
                    probe_pct: (s.pw > 0.0).then(|| per(s.probe, s.pw)),
                };
                (cpu, view)
            })
            .collect()
    }

    /// Whether a record read from a file can be believed on `machine` at `now` with `cpus`
    /// possible CPUs: its format and version, its machine, its times (none in the future),
    /// its CPUs, and every sum a finite, non-negative number within what its weights allow.
    pub fn check(&self, machine: &str, now: f64, cpus: usize) -> Result<(), String> {
        if self.format != FORMAT || self.version != VERSION {
            return Err(format!(
                "format {} version {}, not {FORMAT} version {VERSION}",
                self.format, self.version
            ));
        }
        if self.machine != machine {
            return Err(format!("of another machine ({})", self.machine));
        }
        if !(self.updated.is_finite() && self.since.is_finite())
            || self.since < 0.0
            || self.since > self.updated
        {
            return Err("times that are not a span".into());
        }
        if self.updated > now + FUTURE_SLACK_S {
            return Err(format!("written {:.0} s in the future", self.updated - now));
        }
        if self.cpus.len() > MAX_CPUS.min(cpus) {
            return Err(format!("{} CPUs, this machine has {cpus}", self.cpus.len()));
        }
        if let Some(&cpu) = self.cpus.keys().find(|&&c| c >= cpus.min(MAX_CPUS)) {
            return Err(format!("CPU {cpu}, this machine has {cpus}"));
        }
        for (cpu, sums) in &self.cpus {
            for (h, s) in sums.iter().enumerate() {
                let f = s.fields();
                // Overlapping observations (concurrent runs) can add weight beyond the horizon;
                // a thousand-fold is forged.
                let bounded = f.iter().all(|v| v.is_finite() && *v >= 0.0)
                    && s.w <= 1000.0 * HORIZONS_S[h]
                    && s.pw <= 1000.0 * HORIZONS_S[h]
                    && s.lw <= s.w * (1.0 + 1e-9)
                    && s.load <= 100.0 * s.lw * (1.0 + 1e-9)
                    && [s.irq, s.softirq, s.steal]
                        .iter()
                        .all(|v| *v <= 100.0 * s.w * (1.0 + 1e-9))
                    && s.probe <= 100.0 * s.pw * (1.0 + 1e-9);
                if !bounded {
                    return Err(format!("CPU {cpu}: sums out of range"));
                }
            }
        }
        Ok(())
    }
}
