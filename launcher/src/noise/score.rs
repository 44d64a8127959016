//! What a CPU's noise costs a task, kept as its parts, and the one order of two such costs.
//!
//! Owns: [`Score`] and its order ([`Score::compare`]). Must not: measure (a [`super::CpuNoise`]
//! or a probe makes one) or select (selection groups the parts into tiers).

use serde::Serialize;
use std::cmp::Ordering;

/// A CPU's noise as selection weighs it, by part; see [`Score::compare`] for the order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Score {
    /// Other tasks' time (user, nice, system), in percent of the window.
    pub load_pct: f64,
    /// Interrupt and softirq time where the kernel accounts it, in percent.
    pub irq_pct: f64,
    /// Time stolen by the hypervisor, in percent.
    pub steal_pct: f64,
    /// The share of the window one `/proc/stat` tick represents, in percent: that much of the
    /// sum above is forgiven as quantisation (a CPU that ran the sampler for an instant shows
    /// one tick).
    pub tick_pct: f64,
    /// Interrupt and softirq events a second that count against the CPU.
    pub rate: f64,
    /// The time the detour probe lost on this CPU, in percent of what it measured; `None`
    /// when it was not probed.
    pub probe_lost_pct: Option<f64>,
}

impl Score {
    /// The percent of the CPU the task would not get: other tasks', interrupt and steal time
    /// beyond one tick, in whole percent, or the probe's lost time where that is more. The two
    /// see different things (a SCHED_FIFO probe preempts other tasks and so misses them; the
    /// counters miss detours no tick lands in), so neither lowers what the other found.
    pub fn lost_pct(&self) -> f64 {
        let sampled = (self.load_pct + self.irq_pct + self.steal_pct - self.tick_pct)
            .max(0.0)
            .floor();
        match self.probe_lost_pct {
            Some(probe) => sampled.max(probe),
            None => sampled,
        }
    }

    /// The one order of scores, quieter first: the lost time ([`Score::lost_pct`]) first,
    /// whatever the interrupts (a CPU that another task keeps 2% busy ranks below every idle
    /// one, as a 1000-interrupt-a-second timer costs well under 1%); among equal lost time,
    /// the event rate. Selection compares the same two parts, coarser: loss within
    /// `LOAD_TIE_PCT` and rates within what the window can tell apart are ties there.
    pub fn compare(&self, other: &Score) -> Ordering {
        (self.lost_pct().total_cmp(&other.lost_pct())).then(self.rate.total_cmp(&other.rate))
    }

    /// Whether nothing was measured against this CPU.
    pub fn is_quiet(&self) -> bool {
        self.lost_pct() == 0.0 && self.rate == 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(rate: f64, load: f64) -> Score {
        Score {
            rate,
            load_pct: load,
            ..Score::default()
        }
    }

    #[test]
    fn lost_time_orders_before_any_rate_and_rate_breaks_its_ties() {
        let stormy = score(50_000.0, 0.0);
        let light = score(0.0, 2.0);
        assert_eq!(light.compare(&stormy), Ordering::Greater);
        assert_eq!(score(10.0, 2.0).compare(&light), Ordering::Greater);
        assert_eq!(light.compare(&light), Ordering::Equal);
        // Irq time and steal are lost time too.
        let irq = Score {
            irq_pct: 3.0,
            ..Score::default()
        };
        let stolen = Score {
            steal_pct: 3.0,
            ..Score::default()
        };
        assert_eq!((irq.lost_pct(), stolen.lost_pct()), (3.0, 3.0));
        assert_eq!(irq.compare(&light), Ordering::Greater);
    }

    #[test]
    fn one_tick_is_forgiven_and_a_fraction_of_a_percent_is_none() {
        let tick = Score {
            load_pct: 4.0,
            tick_pct: 4.0,
            ..Score::default()
        };
        assert_eq!(tick.lost_pct(), 0.0);
        assert!(tick.is_quiet());
        assert_eq!(score(0.0, 0.9).lost_pct(), 0.0);
        assert_eq!(score(0.0, 7.9).lost_pct(), 7.0);
    }

    #[test]
    fn the_probe_adds_what_the_counters_missed_and_never_lowers_them() {
        let probed = |load: f64, probe: f64| Score {
            probe_lost_pct: Some(probe),
            ..score(0.0, load)
        };
        assert_eq!(probed(0.0, 10.4).lost_pct(), 10.4);
        assert_eq!(probed(60.0, 0.3).lost_pct(), 60.0);
        assert_eq!(
            probed(0.0, 10.4).compare(&probed(0.0, 0.5)),
            Ordering::Greater
        );
        assert!(!probed(0.0, 0.5).is_quiet());
    }
}
