//! What each candidate hardware thread is worth to the task: its [`Item`], with a coarse key
//! that selection never trades away (the CPU kind's speed times the share other work leaves,
//! then the noise tier) and a fine key that only breaks ties (favoured cores, CPU 0's core,
//! the CPU number; never noise the window cannot tell apart).
//!
//! Pure: a function of the topology, the noise scores and the options.

use super::options::{KindChoice, Options, SmtPolicy};
use crate::noise::Score;
use crate::topology::Topology;
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// What a second (third, ...) hardware thread of a core adds to the task, in permille of the
/// core: SMT gives a core's threads together some 15-30% more throughput than one alone, so a
/// sibling is worth about a quarter of a core. A slower kind's idle core (an Intel E-core:
/// about 780 permille of a P-core) therefore comes before a faster core's sibling.
pub const SIBLING_SHARE: u64 = 250;

/// Loads (percent of a core another task or the hypervisor takes, beyond the one tick every
/// CPU is forgiven) closer than this are one: at the default 250 ms window a tick is 4%.
pub const LOAD_TIE_PCT: f64 = 5.0;

/// Interrupt rates closer than this many events per second are never told apart: a few
/// interrupts a second is what an idle CPU's timers and IPIs vary by.
pub const FEW_PER_S: f64 = 5.0;

/// Two counts over the window differ significantly when they are this many standard
/// deviations apart (interrupt arrivals counted over a window vary as a Poisson count: the
/// deviation of a difference is the square root of the sum).
pub const SIGNIFICANCE: f64 = 3.0;

/// The key selection never trades for compactness: lower is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Coarse {
    /// `--cpu-kind efficient`: the kind (hwloc's order, the least performant first); 0
    /// otherwise.
    pub class: usize,
    /// The share of a core of the fastest kind the task gets from this thread, in units of
    /// 10^-8: the kind's speed (permille) × the percent other work and steal leave
    /// ([`counted_loads`]) × 1000, or [`SIBLING_SHARE`] for a second thread.
    pub value: Reverse<u64>,
    /// The noise tier of its core's interrupt rate: 0 for every core not significantly
    /// noisier than the quietest ([`tiers`]).
    pub tier: u32,
}

/// The tie-breaks among threads of equal [`Coarse`] key: lower is better; a core's second
/// thread with `--smt spread` has its core's fields reversed ([`Fine::of`]). Raw noise is none
/// of them: a difference the window cannot tell apart must not move the task, so that the
/// same machine gives the same CPUs run after run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fine {
    /// The core's favour (`acpi_cppc/highest_perf`, AMD's preferred-core ranking): the core
    /// that boosts highest first.
    pub favour: Reverse<u64>,
    /// Its core holds CPU 0, which takes most of the kernel's housekeeping.
    pub cpu0: bool,
    /// The lowest CPU of its core.
    pub core: usize,
    /// Which of its core's threads it is (0: the first handed out).
    pub thread: usize,
    /// The CPU itself.
    pub cpu: usize,
}

/// Above any favour a core has (`highest_perf` and AMD's ranking are 0-255): a second
/// thread's favour is counted as `MAX_FAVOUR - favour` (see [`Fine::of`]).
const MAX_FAVOUR: u64 = 1 << 16;

impl Fine {
    /// The tie-breaks of `cpu`, the `thread`-th handed out of its core (the lowest CPU
    /// `core`, with `favour`, holding CPU 0 or not). A `late` thread (a core's second with
    /// `--smt spread`) goes the other way round the cores: to the least favoured, CPU 0's,
    /// the highest numbered core first, so that the first threads' best cores (slot 0's, the
    /// main thread's, above all) keep a core of their own as long as any core can give one.
    pub fn of(favour: u64, cpu0: bool, core: usize, thread: usize, cpu: usize, late: bool) -> Fine {
        if !late {
            return Fine {
                favour: Reverse(favour),
                cpu0,
                core,
                thread,
                cpu,
            };
        }
        Fine {
            favour: Reverse(MAX_FAVOUR.saturating_sub(favour)),
            cpu0: !cpu0,
            core: usize::MAX - core,
            thread,
            cpu,
        }
    }
}

/// One candidate hardware thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    /// CPU number.
    pub cpu: usize,
    /// Coarse key.
    pub coarse: Coarse,
    /// Fine key.
    pub fine: Fine,
}

impl Item {
    /// The full order: coarse, then fine.
    pub fn key(&self) -> (Coarse, Fine) {
        (self.coarse, self.fine)
    }
}

/// The noise tier of each rate: rates sorted, a new tier starts at the first rate that is
/// significantly above the quietest of the current tier ([`significant`]). Comparing with the
/// tier's quietest, not the previous rate, keeps a long chain of small steps from joining the
/// quietest CPU to a noisy one.
pub fn tiers(rates: &[f64], window_s: f64) -> Vec<u32> {
    tiered(rates, |low, high| significant(low, high, window_s)).0
}

/// Groups `values` into tiers from the lowest up: a value `apart` from the lowest of the
/// current tier starts the next. Each value's tier, and the lowest value of its tier.
fn tiered(values: &[f64], apart: impl Fn(f64, f64) -> bool) -> (Vec<u32>, Vec<f64>) {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]).then(a.cmp(&b)));
    let mut tier = vec![0u32; values.len()];
    let mut base_of = vec![0.0; values.len()];
    let mut current = 0u32;
    let mut base: Option<f64> = None;
    for i in order {
        match base {
            Some(b) if apart(b, values[i]) => {
                current += 1;
                base = Some(values[i]);
            }
            Some(_) => {}
            None => base = Some(values[i]),
        }
        tier[i] = current;
        base_of[i] = base.unwrap_or(values[i]);
    }
    (tier, base_of)
}

/// Each core's load (whole percent of other work and steal) as selection counts it: loads
/// less than `tie` points ([`LOAD_TIE_PCT`] for a sample alone) above the lowest of their tier
/// count as that lowest, so that a stray tick of another process does not move a team.
pub fn counted_loads(loads: &[f64], tie: f64) -> Vec<f64> {
    tiered(loads, |low, high| high - low >= tie).1
}

/// The load tie of `opts` (see [`Options::load_tie_pct`]).
pub fn load_tie(opts: &Options) -> f64 {
    opts.load_tie_pct.unwrap_or(LOAD_TIE_PCT)
}

/// Whether interrupt rate `high` is measurably above `low` over a window of `window_s`
/// seconds: more than [`FEW_PER_S`] apart, and their counts more than [`SIGNIFICANCE`]
/// standard deviations apart.
pub fn significant(low: f64, high: f64, window_s: f64) -> bool {
    let (nl, nh) = (low * window_s, high * window_s);
    high - low > FEW_PER_S && nh - nl > SIGNIFICANCE * (nl + nh).sqrt()
}

/// The candidate CPUs of one physical core, in the order they are handed out.
pub struct Core {
    /// Its candidate CPUs not yet taken, quietest first ([`thread_order`]).
    pub queue: Vec<usize>,
    /// Its CPUs taken already (`--include`): the queue's first is its `used`-th thread.
    pub used: usize,
}

/// Orders the threads of one core: by their own load ([`counted_loads`]), then by their own
/// noise tier among them, then by number.
pub fn thread_order(cpus: &mut [usize], noise: &BTreeMap<usize, Score>, window_s: f64, tie: f64) {
    let parts: Vec<Score> = (cpus.iter())
        .map(|c| noise.get(c).copied().unwrap_or_default())
        .collect();
    let rates: Vec<f64> = parts.iter().map(|p| p.rate).collect();
    let tier = tiers(&rates, window_s);
    let loads = counted_loads(&parts.iter().map(Score::lost_pct).collect::<Vec<_>>(), tie);
    let key: BTreeMap<usize, (u64, u32)> = (cpus.iter().enumerate())
        .map(|(i, &c)| (c, (loads[i] as u64, tier[i])))
        .collect();
    cpus.sort_by_key(|c| (key[c], *c));
}

/// The window of `opts`, in seconds (a zero window counts as one second).
pub fn window_s(opts: &Options) -> f64 {
    if opts.sample_ms == 0 {
        1.0
    } else {
        opts.sample_ms as f64 / 1000.0
    }
}

/// Builds the items of `cores` (grouped candidates, `--include` CPUs already out of their
/// queues). `noise` maps a CPU to its score; `window_s` is the sampling window.
pub fn items(
    topo: &Topology,
    cores: &[Core],
    noise: &BTreeMap<usize, Score>,
    opts: &Options,
) -> Vec<Item> {
    let window_s = window_s(opts);
    let score = |c: usize| noise.get(&c).copied().unwrap_or_default();
    let online_siblings = |c: usize| -> Vec<usize> {
        match topo.cpu(c) {
            Some(i) if !i.siblings.is_empty() => (i.siblings.iter().copied())
                .filter(|&s| topo.cpu(s).is_some_and(|x| x.online))
                .collect(),
            _ => vec![c],
        }
    };
    let whole = |k: &Core| -> Vec<usize> { online_siblings(k.queue[0]) };
    // Per hardware thread: a core whose sibling is offline, or that has no SMT, is not
    // quieter for having half the threads to take interrupts.
    let rates: Vec<f64> = (cores.iter())
        .map(|k| {
            let members = whole(k);
            let sum: f64 = members.iter().map(|&c| score(c).rate).sum();
            sum / members.len().max(1) as f64
        })
        .collect();
    let tier = tiers(&rates, window_s);
    let loads: Vec<f64> = (cores.iter())
        .map(|k| whole(k).into_iter().map(|c| score(c).lost_pct()).sum())
        .collect();
    let loads = counted_loads(&loads, load_tie(opts));
    let mut out = Vec::new();
    for (i, k) in cores.iter().enumerate() {
        let members = whole(k);
        let free = (100.0 - loads[i]).clamp(0.0, 100.0) as u64;
        let first = k.queue[0];
        let (class, perf) = match opts.cpu_kind {
            KindChoice::Performance => (0, topo.perf_of(first)),
            // hwloc's kind order, not the coarser classes: two A720 kinds at 3.15 and
            // 2.96 GHz are two steps, the slower first.
            KindChoice::Efficient => (topo.cpu(first).and_then(|i| i.kind).unwrap_or(0), 1000),
            KindChoice::Any | KindChoice::Kind(_) => (0, 1000),
        };
        let favour = (members.iter())
            .filter_map(|&c| topo.cpu(c).and_then(|x| x.favour))
            .max()
            .unwrap_or(0);
        for (j, &cpu) in k.queue.iter().enumerate() {
            let thread = k.used + j;
            let share = match opts.smt {
                SmtPolicy::Spread if thread > 0 => SIBLING_SHARE,
                _ => 1000,
            };
            out.push(Item {
                cpu,
                coarse: Coarse {
                    class,
                    value: Reverse(perf as u64 * free * share),
                    tier: tier[i],
                },
                fine: Fine::of(
                    favour,
                    members.contains(&0),
                    members.iter().copied().min().unwrap_or(cpu),
                    thread,
                    cpu,
                    share == SIBLING_SHARE,
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_interrupts_a_second_are_a_tie_and_a_storm_is_not() {
        // 250 ms: 0 and 8/s are 0 and 2 events; 40/s is 10 events, 3.2 deviations away.
        assert!(!significant(0.0, 8.0, 0.25));
        assert!(significant(0.0, 40.0, 0.25));
        // A timer's 1000/s against 1100/s over 250 ms: 250 and 275 events, within noise.
        assert!(!significant(1000.0, 1100.0, 0.25));
        assert!(significant(1000.0, 1400.0, 0.25));
        // The same difference measured over longer is told apart.
        assert!(significant(1000.0, 1100.0, 10.0));
        assert_eq!(
            tiers(&[8.0, 0.0, 4.0, 5000.0, 20.0, 60.0], 0.25),
            [0, 0, 0, 2, 0, 1]
        );
    }

    #[test]
    fn a_chain_of_small_steps_does_not_join_the_quietest_to_a_noisy_cpu() {
        let rates: Vec<f64> = (0..50).map(|i| i as f64 * 4.0).collect();
        let t = tiers(&rates, 1.0);
        assert_eq!(t[0], t[1]);
        assert!(t[49] > 2, "{t:?}");
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_stray_tick_of_load_is_no_load_and_a_real_one_is() {
        assert_eq!(
            counted_loads(&[0.0, 2.0, 4.0, 40.0, 43.0], LOAD_TIE_PCT),
            [0.0, 0.0, 0.0, 40.0, 40.0]
        );
        assert_eq!(counted_loads(&[3.0, 9.0], LOAD_TIE_PCT), [3.0, 9.0]);
        // A record resolves finer: 4 points apart is a difference.
        assert_eq!(counted_loads(&[0.0, 1.0, 4.0], 2.0), [0.0, 0.0, 4.0]);
    }
}
