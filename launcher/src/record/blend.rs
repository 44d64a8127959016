//! A fresh sample and the record, combined into the noise scores selection ranks by.
//!
//! Owns: the rule (pure). Per CPU, with a record that covers at least [`MIN_COVERED_S`] of the
//! minutes horizon (at any age: coverage decays with it):
//! - load (other tasks, irq, softirq, steal) is the larger of the sample's (less the one tick
//!   it forgives) and the record's over minutes: periodic noise the sample missed still counts,
//!   and something new in the sample (a job started a second ago) outweighs a quiet history;
//! - the interrupt rate is the record's, unless the sample's is significantly higher (a storm
//!   that just began);
//! - loads are told apart from [`RECORD_TIE_PCT`] instead of the sample's coarser tie, and
//!   rates as if measured over the record's coverage (at most a second).
//!
//! Without such a record the sample alone decides, as before. Must not: read files.

use super::decay::{Record, View, MINUTES};
use crate::noise::{Noise, Score, USER_HZ};
use crate::select;
use std::collections::BTreeMap;

/// Least observed time over the minutes horizon for the record to count: ten seconds of 1 s
/// polls hold a thousand ticks a CPU, and see two bursts of a source busy every 5 s.
pub const MIN_COVERED_S: f64 = 10.0;

/// Least observed time over the minutes horizon for the default launch to trust the record
/// with a short sample: a minute watched, as decayed by the time it took (a 60 s watch
/// leaves 57 s).
pub const RECENT_COVERED_S: f64 = 50.0;

/// Longest time ago the record may have been updated for the default launch to shorten its
/// sample ([`SHORT_SAMPLE_MS`]): a quarter of an hour, so that the systemd timer's watch every
/// 10 minutes keeps a node's record recent however rarely it runs tasks.
pub const RECENT_S: f64 = 900.0;

/// The default sample with a recent record: 3 ticks, enough to see a CPU that is busy now.
pub const SHORT_SAMPLE_MS: u64 = 30;

/// Loads closer than this many points are one when the record informs them: over a minute of
/// 1 s polls a point is 6000 ticks, and what varies between idle CPUs' records is a fraction of
/// one; 2 keeps a CPU that loses 4 % apart from an idle one.
pub const RECORD_TIE_PCT: f64 = 2.0;

/// The longest window rates are compared as if measured over: the record's rates are steadier
/// than a sample's, but a minute's counts would make a dozen timer interrupts a second a tier,
/// enough to leave a favoured core; a second keeps differences that small a tie.
const MAX_RATE_WINDOW_MS: u64 = 1000;

/// What the scores are and how finely they are told apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Blended {
    /// Per CPU, the score selection ranks by (see [`crate::noise::CpuNoise::score`]).
    pub scores: BTreeMap<usize, Score>,
    /// The window rates are compared as if measured over, ms.
    pub window_ms: u64,
    /// Loads closer than this are one tier.
    pub load_tie_pct: f64,
    /// Whether the record took part.
    pub informed: bool,
}

/// Whether `record` is recent at `now` (updated within [`RECENT_S`]) and, when it was updated,
/// covered at least [`RECENT_COVERED_S`] of the minutes horizon (a minute watched): the default
/// launch then samples for [`SHORT_SAMPLE_MS`] only.
pub fn recent(record: &Record, now: f64) -> bool {
    now - record.updated <= RECENT_S
        && coverage(&record.view(MINUTES, record.updated)) >= RECENT_COVERED_S
}

/// How much of the minutes horizon a view covers: the best-covered CPU's (every feed observes
/// every CPU; a CPU only a probe saw has no coverage of its own).
fn coverage(minutes: &BTreeMap<usize, View>) -> f64 {
    minutes.values().map(|v| v.covered_s).fold(0.0, f64::max)
}

/// Whether the minutes view of a record is worth combining: it covers enough of the horizon.
pub fn usable(minutes: &BTreeMap<usize, View>) -> bool {
    coverage(minutes) >= MIN_COVERED_S
}

/// The scores of `sample` combined with the record's `minutes` view (if [`usable`]). `steer`:
/// steerable interrupts are moved away, so they do not count.
pub fn scores(sample: &Noise, minutes: Option<&BTreeMap<usize, View>>, steer: bool) -> Blended {
    let w = sample.window_ms;
    let sampled = |cpu: usize| sample.cpus.get(&cpu).filter(|_| w > 0);
    let Some(minutes) = minutes.filter(|m| usable(m)) else {
        return Blended {
            scores: (sample.cpus.iter())
                .map(|(&cpu, n)| (cpu, n.score(steer, w)))
                .collect(),
            window_ms: w,
            load_tie_pct: select::LOAD_TIE_PCT,
            informed: false,
        };
    };
    let window_ms = ((coverage(minutes) * 1000.0) as u64)
        .min(MAX_RATE_WINDOW_MS)
        .max(w);
    let mut cpus: Vec<usize> = minutes.keys().copied().collect();
    cpus.extend(sample.cpus.keys());
    cpus.sort_unstable();
    cpus.dedup();
    let scores = cpus
        .into_iter()
        .map(|cpu| {
            let view = minutes.get(&cpu).copied().unwrap_or_default();
            let r_rate = view.events_per_s + if steer { 0.0 } else { view.steerable_per_s };
            let (s_load, s_rate) = match sampled(cpu) {
                Some(n) => {
                    let quantum = 100.0 * (1000.0 / USER_HZ as f64) / w as f64;
                    (
                        (n.busy_pct + n.steal_pct - quantum).max(0.0),
                        n.irq_rate(steer, w),
                    )
                }
                None => (0.0, 0.0),
            };
            let load = s_load.max(view.lost_pct());
            let rate = if sampled(cpu).is_some()
                && select::significant(r_rate, s_rate, w as f64 / 1000.0)
            {
                s_rate
            } else {
                r_rate
            };
            // The sample's tick is forgiven already: the larger goes in as load, nothing
            // forgiven again. Probe detours the record holds count as a probe's would.
            let score = Score {
                load_pct: load,
                rate,
                probe_lost_pct: view.probe_pct,
                ..Score::default()
            };
            (cpu, score)
        })
        .collect();
    Blended {
        scores,
        window_ms,
        load_tie_pct: RECORD_TIE_PCT,
        informed: true,
    }
}
