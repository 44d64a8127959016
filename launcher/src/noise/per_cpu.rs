//! Noise of one CPU over a window, and the difference of two snapshots that makes it.
//!
//! Owns: [`CpuNoise`], its interrupt rate and its [`Score`], and
//! [`delta`] / [`delta_for`]. Must not: read files, sleep or parse (`snapshot.rs`, `sample`).

use super::interrupts::IrqKind;
use super::score::Score;
use super::snapshot::Snapshot;
use super::stat::{ProcStat, USER_HZ};
use super::table::row_deltas;
use serde::Serialize;
use std::collections::BTreeMap;

/// Noise of one CPU over a window: counts are deltas, times are shares of the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuNoise {
    /// Device IRQs (numbered rows that steering can move).
    pub irq_steerable: u64,
    /// Non-steerable interrupts (named rows and per-CPU numbered rows).
    pub irq_nonsteerable: u64,
    /// Softirqs, all types.
    pub softirq: u64,
    /// Share of the CPU's accounted time spent in user + nice + system + irq + softirq, in
    /// percent (0-100).
    pub busy_pct: f64,
    /// Share stolen by the hypervisor, in percent (0-100).
    pub steal_pct: f64,
    /// The part of `busy_pct` the kernel accounted to irq and softirq, in percent.
    pub irq_time_pct: f64,
    /// [`USER_HZ`] ticks the CPU accounted over the window (busy + idle + iowait + steal): the
    /// resolution of `busy_pct` and `steal_pct` is `100 / ticks` percent.
    pub ticks: u64,
    /// Delta of each non-steerable row: `LOC`, `RES`, `CAL`, `TLB`, `NMI`, ... on x86,
    /// `IPI0`... on arm64, and per-CPU numbered rows (arm64's arch timer) by their number.
    pub rows: BTreeMap<String, u64>,
    /// Delta of each softirq type (`TIMER`, `NET_RX`, `SCHED`, `RCU`, ...).
    pub softirqs: BTreeMap<String, u64>,
}

impl CpuNoise {
    /// Interrupts and softirqs per second that count against this CPU: non-steerable IRQs and
    /// softirqs always, steerable IRQs only when `steer` is false (with `--steer` they are moved
    /// away). 0 for a zero window.
    pub fn irq_rate(&self, steer: bool, window_ms: u64) -> f64 {
        if window_ms == 0 {
            return 0.0;
        }
        let steerable = if steer { 0 } else { self.irq_steerable };
        let events = self
            .irq_nonsteerable
            .saturating_add(self.softirq)
            .saturating_add(steerable);
        events as f64 * 1000.0 / window_ms as f64
    }

    /// The noise score ([`Score`]): its interrupt rate ([`CpuNoise::irq_rate`]), and the
    /// time that is not the task's: other work (user, nice, system), irq and softirq time,
    /// and hypervisor steal.
    ///
    /// One `USER_HZ` tick (10 ms) is forgiven (`tick_pct`, `100 × (1000 / USER_HZ) /
    /// window_ms` percent): `/proc/stat` counts in whole ticks, so a CPU that only ran the
    /// sampler or a stray daemon for an instant can show one tick of busy time (4% of a 250 ms
    /// window) by quantisation alone; a load above one tick is measured, not noise. A zero
    /// window has no measurement: a quiet score (rank by topology).
    pub fn score(&self, steer: bool, window_ms: u64) -> Score {
        if window_ms == 0 {
            return Score::default();
        }
        Score {
            load_pct: (self.busy_pct - self.irq_time_pct).max(0.0),
            irq_pct: self.irq_time_pct,
            steal_pct: self.steal_pct,
            tick_pct: 100.0 * (1000.0 / USER_HZ as f64) / window_ms as f64,
            rate: self.irq_rate(steer, window_ms),
            probe_lost_pct: None,
        }
    }
}

/// Per-CPU noise between two snapshots, for every CPU seen in both (in any of the files).
/// A part missing from either snapshot leaves its fields 0 (the snapshots' errors say which).
pub fn delta(before: &Snapshot, after: &Snapshot) -> BTreeMap<usize, CpuNoise> {
    delta_inner(before, after, None)
}

/// [`delta`] restricted to `cpus` (cheaper for the housekeeper on a large machine).
pub fn delta_for(before: &Snapshot, after: &Snapshot, cpus: &[usize]) -> BTreeMap<usize, CpuNoise> {
    delta_inner(before, after, Some(cpus))
}

fn delta_inner(
    before: &Snapshot,
    after: &Snapshot,
    only: Option<&[usize]>,
) -> BTreeMap<usize, CpuNoise> {
    let wanted = |cpu: usize| match only {
        None => true,
        Some(o) => o.contains(&cpu),
    };
    let mut out: BTreeMap<usize, CpuNoise> = BTreeMap::new();

    if let (Some(b), Some(a)) = (&before.interrupts, &after.interrupts) {
        row_deltas(b, a, wanted, &mut out, |n, row, d| match row.kind {
            IrqKind::Device => n.irq_steerable = n.irq_steerable.saturating_add(d),
            IrqKind::PerCpu | IrqKind::Named => {
                n.irq_nonsteerable = n.irq_nonsteerable.saturating_add(d);
                n.rows.insert(row.name.clone(), d);
            }
        });
    }

    if let (Some(b), Some(a)) = (&before.softirqs, &after.softirqs) {
        row_deltas(b, a, wanted, &mut out, |n, row, d| {
            n.softirq = n.softirq.saturating_add(d);
            n.softirqs.insert(row.name.clone(), d);
        });
    }

    if let (Some(b), Some(a)) = (&before.stat, &after.stat) {
        stat_deltas(b, a, wanted, &mut out);
    }
    out
}

/// The time shares of each CPU in both `/proc/stat` readings that `wanted` keeps.
fn stat_deltas(
    before: &ProcStat,
    after: &ProcStat,
    wanted: impl Fn(usize) -> bool,
    out: &mut BTreeMap<usize, CpuNoise>,
) {
    for (&cpu, now) in &after.cpus {
        let Some(was) = before.cpus.get(&cpu).filter(|_| wanted(cpu)) else {
            continue;
        };
        let n = out.entry(cpu).or_default();
        let d = now.since(was);
        let total = d.total();
        n.ticks = total;
        if total > 0 {
            n.busy_pct = 100.0 * d.busy() as f64 / total as f64;
            n.steal_pct = 100.0 * d.steal as f64 / total as f64;
            n.irq_time_pct = 100.0 * d.irq.saturating_add(d.softirq) as f64 / total as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{
        snap, ARM64_INTERRUPTS, X86_KVM_INTERRUPTS, X86_KVM_SOFTIRQS, X86_KVM_STAT,
    };
    use super::*;

    #[test]
    fn delta_counts_per_cpu_and_saturates() {
        let before = snap(
            X86_KVM_INTERRUPTS,
            X86_KVM_SOFTIRQS,
            "cpu0 100 0 100 1000 0 0 0 0 0 0\ncpu1 100 0 100 1000 0 0 0 0 0 0\n",
        );
        let after_int = X86_KVM_INTERRUPTS
            .replace("LOC:      14523      14824", "LOC:      14773      14874")
            .replace("CAL:      41488      24310", "CAL:      41000      24410")
            .replace(" 36:          0      47877", " 36:          0      48877")
            // A new MSI allocated during the window.
            + " 44:          0         30 PCI-MSIX-0000:00:06.0   0-edge      new\n";
        let after_soft = X86_KVM_SOFTIRQS.replace("4466       3902", "4716       3952");
        // CPU 0: 20 busy ticks (user 10, system 5, softirq 5) + 5 steal of 50; CPU 1 all idle;
        // and CPU 1's idle went backwards by one (saturates).
        let after = snap(
            &after_int,
            &after_soft,
            "cpu0 110 0 105 1025 0 0 5 5 0 0\ncpu1 100 0 100 999 0 0 0 0 0 0\n",
        );
        let d = delta(&before, &after);
        assert_eq!(d.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        let (c0, c1) = (&d[&0], &d[&1]);
        assert_eq!(c0.rows["LOC"], 250);
        assert_eq!(c0.rows["CAL"], 0, "a counter that went backwards gives 0");
        assert_eq!(c0.irq_nonsteerable, 250);
        assert_eq!(c0.irq_steerable, 0);
        assert_eq!((c1.rows["LOC"], c1.rows["CAL"]), (50, 100));
        assert_eq!(c1.irq_steerable, 1000 + 30);
        assert_eq!(c1.irq_nonsteerable, 150);
        assert_eq!((c0.softirq, c0.softirqs["TIMER"]), (250, 250));
        assert_eq!(c1.softirq, 50);
        assert_eq!(c0.ticks, 50);
        assert!((c0.busy_pct - 40.0).abs() < 1e-9, "{}", c0.busy_pct);
        assert!((c0.steal_pct - 10.0).abs() < 1e-9);
        assert!((c0.irq_time_pct - 10.0).abs() < 1e-9, "{}", c0.irq_time_pct);
        assert_eq!((c1.ticks, c1.busy_pct, c1.steal_pct), (0, 0.0, 0.0));

        let only = delta_for(&before, &after, &[1]);
        assert_eq!(only.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(only[&1], d[&1]);
    }

    #[test]
    fn delta_ignores_cpus_not_in_both_snapshots() {
        let before = snap(
            "CPU0 CPU1\n 1: 5 5 IO-APIC 1-edge x\nLOC: 10 10 Local\n",
            "CPU0 CPU1\nTIMER: 1 1\n",
            "cpu0 1 0 1 10\ncpu1 1 0 1 10\n",
        );
        // CPU 1 went offline, CPU 2 came online.
        let after = snap(
            "CPU0 CPU2\n 1: 7 9 IO-APIC 1-edge x\nLOC: 20 30 Local\n",
            "CPU0 CPU2\nTIMER: 4 9\n",
            "cpu0 2 0 1 19\ncpu2 5 0 5 50\n",
        );
        let d = delta(&before, &after);
        assert_eq!(d.keys().copied().collect::<Vec<_>>(), vec![0]);
        assert_eq!(
            (d[&0].irq_steerable, d[&0].irq_nonsteerable, d[&0].softirq),
            (2, 10, 3)
        );
        assert!((d[&0].busy_pct - 10.0).abs() < 1e-9);
    }

    #[test]
    fn zero_delta_gives_zero_noise_for_every_cpu() {
        let s = snap(ARM64_INTERRUPTS, X86_KVM_SOFTIRQS, X86_KVM_STAT);
        let d = delta(&s, &s);
        assert_eq!(d.keys().copied().collect::<Vec<_>>(), vec![0, 1, 3]);
        assert!(d.values().all(|n| n.score(false, 250).is_quiet()));
        assert!(d
            .values()
            .all(|n| n.irq_steerable == 0 && n.busy_pct == 0.0));
    }

    fn noise(irq_steerable: u64, nonsteerable: u64, busy: f64, steal: f64) -> CpuNoise {
        CpuNoise {
            irq_steerable,
            irq_nonsteerable: nonsteerable,
            busy_pct: busy,
            steal_pct: steal,
            ..CpuNoise::default()
        }
    }

    #[test]
    fn load_ranks_below_any_interrupt_rate() {
        let w = 250;
        // 50k IRQ/s over 250 ms, split between steerable and not.
        let stormy = noise(10_000, 2_500, 0.0, 0.0);
        assert_eq!(stormy.irq_rate(false, w), 50_000.0);
        let busy = noise(0, 0, 100.0, 0.0);
        let stolen = noise(0, 0, 0.0, 30.0);
        let light = noise(0, 0, 12.0, 0.0);
        let absurd = noise(10_000_000, 10_000_000, 0.0, 0.0);
        for quiet_but_loaded in [&busy, &stolen, &light] {
            for idle in [&stormy, &absurd] {
                for steer in [false, true] {
                    assert!(
                        quiet_but_loaded
                            .score(steer, w)
                            .compare(&idle.score(steer, w))
                            .is_gt(),
                        "{quiet_but_loaded:?} must rank below {idle:?}"
                    );
                }
            }
        }
        // More load is worse; busy and steal add up.
        let worse =
            |a: &CpuNoise, b: &CpuNoise| a.score(false, w).compare(&b.score(false, w)).is_gt();
        assert!(worse(&busy, &light));
        assert!(worse(&noise(0, 0, 10.0, 10.0), &noise(0, 0, 15.0, 0.0)));
    }

    #[test]
    fn one_tick_of_load_is_quantisation_not_busy() {
        let w = 250; // one 10 ms tick = 4% of the window
        let stray_tick = noise(0, 100, 4.0, 0.0);
        let stray_steal = noise(0, 100, 0.0, 4.0);
        let stormy = noise(0, 12_500, 0.0, 0.0);
        let cmp = |a: &CpuNoise, b: &CpuNoise, w| a.score(false, w).compare(&b.score(false, w));
        assert!(cmp(&stray_tick, &stormy, w).is_lt());
        assert!(cmp(&stray_steal, &stormy, w).is_lt());
        let s = stray_tick.score(false, w);
        assert_eq!((s.rate, s.lost_pct()), (400.0, 0.0));
        // Two ticks are measured load.
        assert!(cmp(&noise(0, 100, 8.0, 0.0), &stormy, w).is_gt());
        // The allowance scales with the window: 4% is real load over 1 s.
        assert!(cmp(&noise(0, 100, 4.0, 0.0), &noise(0, 50_000, 0.0, 0.0), 1000).is_gt());
    }

    #[test]
    fn steer_drops_steerable_irqs() {
        let w = 500;
        let nic = noise(40_000, 500, 0.0, 0.0);
        let timer = noise(0, 5_000, 0.0, 0.0);
        assert!(nic.score(false, w).compare(&timer.score(false, w)).is_gt());
        assert!(nic.score(true, w).compare(&timer.score(true, w)).is_lt());
        assert_eq!(nic.score(true, w).rate, 1_000.0);
        assert_eq!(nic.score(false, w).rate, 81_000.0);
        let mut with_softirq = timer.clone();
        with_softirq.softirq = 500;
        assert_eq!(with_softirq.score(true, w).rate, 11_000.0);
        assert!(timer.score(false, 0).is_quiet());
    }
}
