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
    /// Through `goset-run --placement mask` with the experiment's goset flags: goset's
    /// selection and isolation, one shared mask for every thread.
    Mask,
    /// The shim by hand, no goset-run: `LD_PRELOAD=libgoset.so GOSET_CPUS=<cpus>` with the
    /// process mask set to those CPUs (chosen as goset-run would choose them).
    Shim,
}

impl Mode {
    /// Every mode, in table order.
    pub const ALL: [Mode; 5] = [
        Mode::Baseline,
        Mode::Taskset,
        Mode::Goset,
        Mode::Mask,
        Mode::Shim,
    ];

    /// The modes run when `--modes` is not given.
    pub const DEFAULT: [Mode; 3] = [Mode::Baseline, Mode::Taskset, Mode::Goset];

    /// Its name in `--modes`, tables and files.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Taskset => "taskset",
            Mode::Goset => "goset",
            Mode::Mask => "mask",
            Mode::Shim => "shim",
        }
    }

    /// The names of every mode, as `--modes` lists them in messages.
    pub fn names() -> String {
        Mode::ALL.map(Mode::name).join(", ")
    }

    /// Runs through goset-run.
    pub fn uses_goset_run(self) -> bool {
        matches!(self, Mode::Goset | Mode::Mask)
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

/// The CPUs that `--include` fixes for every pinned mode: the list in its order (duplicates
/// dropped, as goset-run drops them) when it names exactly `n` CPUs; otherwise `None`, and
/// goset-run picks the rest.
pub fn fixed_cpus(include: &[usize], n: usize) -> Option<Vec<usize>> {
    let cpus = distinct(include);
    (cpus.len() == n).then_some(cpus)
}

/// `cpus` without repeats, in their order.
pub fn distinct(cpus: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for &c in cpus {
        if !out.contains(&c) {
            out.push(c);
        }
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
        assert_eq!(p.len(), 6 * Mode::ALL.len());
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
    fn include_fixes_the_cpus_only_when_it_names_all_of_them() {
        assert_eq!(fixed_cpus(&[5, 2, 5], 2), Some(vec![5, 2]));
        assert_eq!(fixed_cpus(&[5], 2), None);
        assert_eq!(fixed_cpus(&[], 1), None);
        assert_eq!(Mode::names(), "baseline, taskset, goset, mask, shim");
        assert_eq!(Mode::parse("shim"), Some(Mode::Shim));
        assert!(Mode::Mask.uses_goset_run() && !Mode::Shim.uses_goset_run());
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
