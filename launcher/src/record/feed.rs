//! What the record is fed: every CPU's counters between two snapshots, as [`Observation`]s,
//! and [`Feed`], which takes a snapshot at most once a [`FEED_PERIOD`] and adds what changed.
//!
//! Owns: turning `/proc/stat` times and interrupt counts into percentages and rates per CPU.
//! Must not: write files (`file.rs`) or decide anything.

use super::decay::{Observation, Record};
use crate::fsroot::FsRoot;
use crate::noise::{self, Snapshot};
use std::collections::BTreeMap;
use std::time::Duration;

/// The shortest interval [`Feed::finish`] still adds: `/proc/stat`'s ticks make a shorter one
/// mostly rounding, and a run of `true` need not pay for a last reading.
pub const MIN_LAST: Duration = Duration::from_millis(100);

/// How often a run's housekeeper (and `goset noise --watch`) reads the counters for the
/// record: `/proc/stat` counts 10 ms ticks, so a second resolves 1 % of a CPU, and three
/// file reads a second cost well under 0.1 % of one.
pub const FEED_PERIOD: Duration = Duration::from_secs(1);

/// Unix time now, in seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Each CPU seen in both snapshots, observed between them. `own`: CPUs whose busy time holds
/// this user's own task (or the launcher), whose other tasks' load is therefore not known.
pub fn observations(
    before: &Snapshot,
    after: &Snapshot,
    own: &[usize],
) -> BTreeMap<usize, Observation> {
    let secs = after
        .taken
        .saturating_duration_since(before.taken)
        .as_secs_f64();
    let (Some(b), Some(a)) = (&before.stat, &after.stat) else {
        return BTreeMap::new();
    };
    let counts = noise::delta(before, after);
    let mut out = BTreeMap::new();
    for (cpu, t) in &a.cpus {
        let Some(was) = b.cpus.get(cpu) else {
            continue;
        };
        let d = t.since(was);
        let total = d.total();
        if total == 0 || secs <= 0.0 {
            continue;
        }
        let pct = |v: u64| 100.0 * v as f64 / total as f64;
        let c = counts.get(cpu).cloned().unwrap_or_default();
        let load = d.user.saturating_add(d.nice).saturating_add(d.system);
        out.insert(
            *cpu,
            Observation {
                secs,
                load_pct: (!own.contains(cpu)).then(|| pct(load)),
                irq_pct: pct(d.irq),
                softirq_pct: pct(d.softirq),
                steal_pct: pct(d.steal),
                events_per_s: c.irq_nonsteerable.saturating_add(c.softirq) as f64 / secs,
                steerable_per_s: c.irq_steerable as f64 / secs,
            },
        );
    }
    out
}

/// Adds every CPU's observations between `before` and `after` to `record`, as of now.
pub fn add(record: &mut Record, before: &Snapshot, after: &Snapshot, own: &[usize]) {
    let now = unix_now();
    for (cpu, obs) in observations(before, after, own) {
        record.observe(cpu, now, &obs);
    }
}

/// A record fed as a run goes: at most one snapshot a [`FEED_PERIOD`], whatever the caller's
/// poll interval.
pub struct Feed {
    root: FsRoot,
    own: Vec<usize>,
    before: Snapshot,
    /// What was observed so far.
    pub record: Record,
}

impl Feed {
    /// Starts from `before` (the selection's last snapshot, or the housekeeper's opening one:
    /// one reading an instant). `own`: see [`observations`].
    pub fn start(root: &FsRoot, machine: &str, own: Vec<usize>, before: Snapshot) -> Feed {
        Feed {
            root: root.clone(),
            own,
            before,
            record: Record::new(machine, unix_now()),
        }
    }

    /// Adds what changed since the last snapshot, once it is a [`FEED_PERIOD`] old.
    pub fn poll(&mut self) {
        if self.before.taken.elapsed() >= FEED_PERIOD {
            self.take();
        }
    }

    /// Adds what changed up to `closing` (the run's closing snapshot, shared with the
    /// housekeeper) unless the last snapshot was under [`MIN_LAST`] before it, and returns the
    /// record.
    pub fn finish(mut self, closing: Snapshot) -> Record {
        if closing.taken.saturating_duration_since(self.before.taken) >= MIN_LAST {
            self.add_until(closing);
        }
        self.record
    }

    /// Adds what changed since the last snapshot, however recent.
    pub fn take(&mut self) {
        self.add_until(Snapshot::read(&self.root));
    }

    fn add_until(&mut self, after: Snapshot) {
        add(&mut self.record, &self.before, &after, &self.own);
        self.before = after;
    }
}
