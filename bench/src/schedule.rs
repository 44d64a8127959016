//! The order of an experiment's runs: interleaved rounds (each mode once per round, in an order
//! shuffled per round from a printed seed), warm-up rounds first; and the CPUs of each taskset
//! run, in rotation.
//!
//! Owns: the plan of runs, a pure function of its inputs.

use serde::Serialize;

/// How a run is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The bare command.
    Baseline,
    /// Pinned with a plain mask, as `taskset -c CPUS` would, to CPUs chosen in rotation.
    Taskset,
    /// Through `goset-run` with the experiment's goset flags.
    Goset,
}

impl Mode {
    /// Every mode, in table order.
    pub const ALL: [Mode; 3] = [Mode::Baseline, Mode::Taskset, Mode::Goset];

    /// Its name in `--modes`, tables and files.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Taskset => "taskset",
            Mode::Goset => "goset",
        }
    }

    /// The mode named `name`.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// One planned run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Planned {
    /// Round number, from 0; warm-up rounds come first.
    pub round: usize,
    /// The mode.
    pub mode: Mode,
    /// A warm-up run, discarded.
    pub warmup: bool,
}

/// `warmup` then `runs` rounds of every mode in `modes`, each round in its own shuffled order.
pub fn plan(modes: &[Mode], runs: usize, warmup: usize, seed: u64) -> Vec<Planned> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = Vec::new();
    for round in 0..warmup + runs {
        let mut order = modes.to_vec();
        rng.shuffle(&mut order);
        out.extend(order.into_iter().map(|mode| Planned {
            round,
            mode,
            warmup: round < warmup,
        }));
    }
    out
}

/// The CPUs of the `k`-th taskset run (from 0): `n` consecutive CPUs of `allowed`, starting one
/// window further each run, wrapping around (a user choosing a CPU by hand, a different one
/// each time).
pub fn taskset_cpus(allowed: &[usize], n: usize, k: usize) -> Vec<usize> {
    if allowed.is_empty() {
        return Vec::new();
    }
    let n = n.clamp(1, allowed.len());
    let mut cpus: Vec<usize> = (0..n)
        .map(|j| allowed[(k * n + j) % allowed.len()])
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_has_every_mode_once_and_the_seed_fixes_the_order() {
        let p = plan(&Mode::ALL, 5, 1, 42);
        assert_eq!(p.len(), 18);
        for round in 0..6 {
            let mut modes: Vec<Mode> = (p.iter())
                .filter(|r| r.round == round)
                .map(|r| r.mode)
                .collect();
            assert!(p
                .iter()
                .filter(|r| r.round == round)
                .all(|r| r.warmup == (round == 0)));
            modes.sort();
            assert_eq!(modes, Mode::ALL);
        }
        assert_eq!(p, plan(&Mode::ALL, 5, 1, 42));
        let orders = |seed| -> Vec<Mode> {
            plan(&Mode::ALL, 5, 1, seed)
                .iter()
                .map(|r| r.mode)
                .collect()
        };
        assert!(
            (0..20).any(|s| orders(s) != orders(42)),
            "the order is shuffled"
        );
    }

    #[test]
    fn taskset_rotates_over_the_allowed_cpus() {
        let allowed = [0, 1, 4, 5];
        let one: Vec<Vec<usize>> = (0..5).map(|k| taskset_cpus(&allowed, 1, k)).collect();
        assert_eq!(one, [vec![0], vec![1], vec![4], vec![5], vec![0]]);
        assert_eq!(taskset_cpus(&allowed, 2, 1), [4, 5]);
        assert_eq!(taskset_cpus(&allowed, 3, 1), [0, 1, 5]);
        assert_eq!(taskset_cpus(&allowed, 9, 0), [0, 1, 4, 5]);
    }
}
