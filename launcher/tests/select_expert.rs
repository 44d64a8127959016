//! Selection as an expert pinning by hand would make it, on every real machine's topology:
//! the fastest CPU kinds first, the housekeeper on the slowest, the team inside one domain
//! (cluster, last-level cache, node, package) whenever it fits one, a few interrupts a
//! second a tie, real noise a reason. The domains come from hwloc's reading of each dump
//! (`truth.csv`), not from goset's; the noise is made up per CPU and given to the pure
//! selection, as the launcher gives it what it sampled.

mod common;

use goset::fsroot::FsRoot;
use goset::noise::Score;
use goset::select::{plan, Options, Selection};
use goset::topology::Topology;
use std::collections::{BTreeMap, BTreeSet};

/// A score of `per_s` interrupt events a second and nothing else.
fn rate(per_s: f64) -> Score {
    Score {
        rate: per_s,
        ..Score::default()
    }
}

/// hwloc's groups of each CPU: `(level name, column)`.
const LEVELS: [(&str, &str); 4] = [
    ("cluster", "l2_index"),
    ("llc", "l3_index"),
    ("node", "numa"),
    ("package", "package_index"),
];

struct Machine {
    name: &'static str,
    topo: Topology,
    /// hwloc's fields of each online CPU.
    truth: BTreeMap<usize, BTreeMap<String, String>>,
}

impl Machine {
    fn read(name: &'static str) -> Machine {
        let root = common::fixture_root(name);
        let topo = Topology::read(&FsRoot::new(root)).unwrap();
        let truth = (common::truth_rows(name).into_iter())
            .filter(|r| r["online"] == "1")
            .map(|r| (r["cpu"].parse().unwrap(), r))
            .collect();
        Machine { name, topo, truth }
    }

    fn group(&self, cpu: usize, column: &str) -> String {
        self.truth[&cpu][column].clone()
    }

    /// The first CPU of each candidate core of the fastest class.
    fn fast_cores(&self) -> Vec<usize> {
        let top = self.top_class();
        let mut seen = BTreeSet::new();
        (self.topo.candidates().into_iter())
            .filter(|&c| self.topo.class_of(c) == top)
            .filter(|&c| seen.insert(self.group(c, "core_siblings_smt")))
            .collect()
    }

    fn top_class(&self) -> usize {
        (self.topo.candidates().iter())
            .map(|&c| self.topo.class_of(c))
            .max()
            .unwrap()
    }

    /// The most fast cores one domain of `column` holds.
    fn biggest(&self, column: &str) -> usize {
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for c in self.fast_cores() {
            *count.entry(self.group(c, column)).or_default() += 1;
        }
        count.values().copied().max().unwrap_or(0)
    }

    fn select(&self, n: usize, noise: &BTreeMap<usize, Score>) -> Selection {
        self.select_over(n, noise, 250)
    }

    /// [`Machine::select`] with noise measured over `sample_ms`.
    fn select_over(&self, n: usize, noise: &BTreeMap<usize, Score>, sample_ms: u64) -> Selection {
        let opts = Options {
            count: n,
            sample_ms,
            ..Default::default()
        };
        plan(&self.topo, noise, &opts).unwrap_or_else(|e| panic!("{}: -n {n}: {e}", self.name))
    }

    /// -n 1, 2, half of each level's biggest domain and the whole of it, and every CPU.
    fn sizes(&self) -> BTreeSet<usize> {
        let mut sizes: BTreeSet<usize> = [1, 2, self.topo.candidates().len()].into();
        for (_, column) in LEVELS {
            let d = self.biggest(column);
            sizes.extend([d, d / 2].into_iter().filter(|&s| s >= 1));
        }
        sizes.retain(|&s| s <= self.topo.candidates().len());
        sizes
    }
}

fn machines() -> Vec<Machine> {
    common::FIXTURES.iter().map(|&n| Machine::read(n)).collect()
}

fn sorted(v: &[usize]) -> Vec<usize> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

#[test]
fn quiet_machines_get_the_fastest_kind_in_one_domain_and_the_housekeeper_on_the_slowest() {
    for m in machines() {
        let fast = m.fast_cores().len();
        let slowest = (m.topo.candidates().iter())
            .map(|&c| m.topo.class_of(c))
            .min()
            .unwrap();
        for n in m.sizes() {
            let sel = m.select(n, &BTreeMap::new());
            let what = format!("{} -n {n}: {:?}", m.name, sel.task_cpus);
            assert_eq!(sel.task_cpus.len(), n, "{what}");
            if n <= fast {
                let top = m.top_class();
                assert!(
                    sel.task_cpus.iter().all(|&c| m.topo.class_of(c) == top),
                    "{what}: a slower kind while a faster core was idle"
                );
                let cores: BTreeSet<String> = (sel.task_cpus.iter())
                    .map(|&c| m.group(c, "core_siblings_smt"))
                    .collect();
                assert_eq!(
                    cores.len(),
                    n,
                    "{what}: a second thread before an idle core"
                );
                for (level, column) in LEVELS {
                    if n > m.biggest(column) || m.truth.values().any(|r| r[column].is_empty()) {
                        continue;
                    }
                    let groups: BTreeSet<String> =
                        sel.task_cpus.iter().map(|&c| m.group(c, column)).collect();
                    assert_eq!(groups.len(), 1, "{what}: straddles {level}s {groups:?}");
                }
            }
            // Slot 0 is on the fastest class the task has.
            let best = (sel.task_cpus.iter())
                .map(|&c| m.topo.class_of(c))
                .max()
                .unwrap();
            assert_eq!(m.topo.class_of(sel.task_cpus[0]), best, "{what}: slot 0");
            let task_cores: BTreeSet<String> = (sel.task_cpus.iter())
                .map(|&c| m.group(c, "core_siblings_smt"))
                .collect();
            let free_slow = (m.topo.candidates().into_iter()).any(|c| {
                m.topo.class_of(c) == slowest
                    && !task_cores.contains(&m.group(c, "core_siblings_smt"))
            });
            if free_slow {
                assert_eq!(
                    m.topo.class_of(sel.housekeeper_cpu),
                    slowest,
                    "{what}: housekeeper on cpu {}",
                    sel.housekeeper_cpu
                );
            }
        }
    }
}

#[test]
fn a_few_interrupts_a_second_change_nothing() {
    for m in machines() {
        // 0 to 6 events a second, made up per CPU: what idle CPUs differ by.
        let stray: BTreeMap<usize, Score> = (m.topo.candidates().into_iter())
            .map(|c| (c, rate(((c * 5 + 3) % 7) as f64)))
            .collect();
        for n in m.sizes() {
            let quiet = m.select(n, &BTreeMap::new());
            let noisy = m.select(n, &stray);
            assert_eq!(
                sorted(&noisy.task_cpus),
                sorted(&quiet.task_cpus),
                "{} -n {n}",
                m.name
            );
            assert!(noisy.passed_over.is_empty(), "{} -n {n}", m.name);
        }
    }
}

#[test]
fn a_busy_fast_core_loses_and_the_report_says_so() {
    for m in machines() {
        let first = m.select(1, &BTreeMap::new()).task_cpus[0];
        let core: Vec<usize> = (m.topo.cpu(first).unwrap().siblings.iter().copied())
            .filter(|&c| m.topo.cpu(c).unwrap().online)
            .collect();
        // Another task keeps the core 60% busy: 0.4 of a fast core is less than any idle one.
        let busy: BTreeMap<usize, Score> = core
            .iter()
            .map(|&c| {
                let busy = Score {
                    load_pct: 60.0,
                    ..Score::default()
                };
                (c, busy)
            })
            .collect();
        let sel = m.select(1, &busy);
        assert!(
            !core.contains(&sel.task_cpus[0]),
            "{}: {:?}",
            m.name,
            sel.task_cpus
        );
        assert_eq!(sel.passed_over, [first], "{}", m.name);
    }
}

#[test]
fn a_quiet_cpu_0_among_timer_noise_wins_and_a_storm_on_a_cluster_moves_the_team_whole() {
    for m in machines() {
        let top = m.top_class();
        // Every CPU takes 1000 timer interrupts a second, CPU 0 none.
        let timers: BTreeMap<usize, Score> = (m.topo.candidates().into_iter())
            .map(|c| (c, rate(if c == 0 { 0.0 } else { 1000.0 })))
            .collect();
        let sel = m.select(1, &timers);
        let zero_alone = m
            .topo
            .cpu(0)
            .is_some_and(|i| i.siblings == [0] || i.siblings.is_empty());
        if m.topo.candidates().contains(&0) && m.topo.class_of(0) == top && zero_alone {
            assert_eq!(sel.task_cpus, [0], "{}", m.name);
        }
        // A storm on the cluster (or cache) the quiet team takes moves the team off it, into
        // one other such domain when there is one as big.
        let domains = |col: &str| -> usize {
            let set: BTreeSet<String> = m.fast_cores().iter().map(|&c| m.group(c, col)).collect();
            set.len()
        };
        let Some((level, column)) = LEVELS.iter().find(|(_, col)| {
            m.biggest(col) >= 2
                && domains(col) >= 2
                && m.truth.values().all(|r| !r[*col].is_empty())
        }) else {
            continue;
        };
        let n = m.biggest(column);
        let quiet = m.select(n, &BTreeMap::new());
        let hit = m.group(quiet.task_cpus[0], column);
        let storm: BTreeMap<usize, Score> = (m.topo.candidates().into_iter())
            .filter(|&c| m.group(c, column) == hit)
            .map(|c| (c, rate(20000.0)))
            .collect();
        let sel = m.select(n, &storm);
        let what = format!("{} -n {n} ({level}): {:?}", m.name, sel.task_cpus);
        let others = (m.fast_cores().into_iter())
            .filter(|&c| m.group(c, column) != hit)
            .fold(BTreeMap::<String, usize>::new(), |mut acc, c| {
                *acc.entry(m.group(c, column)).or_default() += 1;
                acc
            });
        if others.values().sum::<usize>() >= n {
            assert!(
                sel.task_cpus.iter().all(|&c| m.group(c, column) != hit),
                "{what}"
            );
        }
        if others.values().any(|&k| k >= n) {
            let groups: BTreeSet<String> =
                sel.task_cpus.iter().map(|&c| m.group(c, column)).collect();
            assert_eq!(groups.len(), 1, "{what}");
            assert!(!sel.passed_over.is_empty(), "{what}");
        }
    }
}

#[test]
fn a_core_with_an_offline_sibling_is_no_quieter_per_thread() {
    // The i7-14700K case on every machine: one fast core's SMT sibling offline, every CPU idle
    // at the same 35 events a second, measured over a second (35 and 70 a second are told
    // apart over it). Summed per core, the one-thread core looked quieter and won -n 1 over
    // the favoured core; per hardware thread every core is the same, and favour decides.
    for m in machines() {
        let quiet = m.select(1, &BTreeMap::new()).task_cpus;
        let smt_core = |c: &usize| m.topo.cpu(*c).unwrap().siblings.len() > 1;
        // Another fast core's sibling offline, and the chosen core's own.
        let other = (m.fast_cores().into_iter())
            .filter(smt_core)
            .find(|&c| !m.topo.cpu(c).unwrap().siblings.contains(&quiet[0]));
        let own = Some(quiet[0]).filter(smt_core);
        for core in [other, own].into_iter().flatten() {
            let sibs = &m.topo.cpu(core).unwrap().siblings;
            let offline = *sibs.iter().filter(|&&s| s != quiet[0]).max().unwrap();
            let mut edited = Machine::read(m.name);
            let at = edited
                .topo
                .cpus
                .iter()
                .position(|c| c.cpu == offline)
                .unwrap();
            edited.topo.cpus[at].online = false;
            let even: BTreeMap<usize, Score> = (edited.topo.candidates().into_iter())
                .map(|c| (c, rate(35.0)))
                .collect();
            let sel = edited.select_over(1, &even, 1000);
            assert_eq!(
                sel.task_cpus, quiet,
                "{}: CPU {offline} offline, all at 35/s: -n 1 left the quiet choice",
                m.name
            );
            assert!(
                sel.passed_over.is_empty(),
                "{}: {:?}",
                m.name,
                sel.passed_over
            );
        }
    }
}

#[test]
fn past_the_physical_cores_the_main_thread_keeps_a_core_and_siblings_go_to_the_least_favoured() {
    for m in machines() {
        let core_of = |c: usize| m.group(c, "core_siblings_smt");
        let cores: BTreeSet<String> = m.topo.candidates().into_iter().map(core_of).collect();
        let n = cores.len() + 1;
        if n > m.topo.candidates().len() {
            continue; // no SMT: no second thread to place
        }
        let sel = m.select(n, &BTreeMap::new());
        let what = format!("{} -n {n}: {:?}", m.name, sel.task_cpus);
        let on_core = |core: &String| {
            sel.task_cpus
                .iter()
                .filter(|&&c| core_of(c) == *core)
                .count()
        };
        assert_eq!(
            on_core(&core_of(sel.task_cpus[0])),
            1,
            "{what}: slot 0 shares its core"
        );
        let favour = |c: usize| {
            (m.topo.cpu(c).unwrap().siblings.iter())
                .filter_map(|&s| m.topo.cpu(s).and_then(|i| i.favour))
                .max()
                .unwrap_or(0)
        };
        let doubled: Vec<usize> = (sel.task_cpus.iter().copied())
            .filter(|&c| on_core(&core_of(c)) > 1)
            .collect();
        // Among the cores of its kind class that have a second thread to give.
        let smt = |c: usize| {
            (m.topo.candidates().into_iter())
                .filter(|&x| core_of(x) == core_of(c))
                .count()
                > 1
        };
        for &c in &doubled {
            let class = m.topo.class_of(c);
            let least = (sel.task_cpus.iter().copied())
                .filter(|&x| smt(x) && m.topo.class_of(x) == class)
                .map(favour)
                .min()
                .unwrap();
            assert_eq!(
                favour(c),
                least,
                "{what}: a second thread on CPU {c}'s core, more favoured than the least of its class"
            );
        }
    }
}

#[test]
fn cpu_kind_efficient_takes_whole_kinds_in_hwlocs_order() {
    for m in machines() {
        let kind = |c: usize| m.topo.cpu(c).and_then(|i| i.kind).unwrap_or(0);
        let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
        for c in m.topo.candidates() {
            *sizes.entry(kind(c)).or_default() += 1;
        }
        if sizes.len() < 2 {
            continue;
        }
        for n in 1..=m.topo.candidates().len() {
            let opts = Options {
                count: n,
                sample_ms: 250,
                cpu_kind: goset::select::KindChoice::Efficient,
                ..Default::default()
            };
            let sel = plan(&m.topo, &BTreeMap::new(), &opts).unwrap();
            let mut got: BTreeMap<usize, usize> = BTreeMap::new();
            for &c in &sel.task_cpus {
                *got.entry(kind(c)).or_default() += 1;
            }
            // The least performant kind fills first, then the next, as hwloc orders them.
            let mut left = n;
            let want: BTreeMap<usize, usize> = (sizes.iter())
                .map(|(&k, &size)| {
                    let take = size.min(left);
                    left -= take;
                    (k, take)
                })
                .filter(|&(_, t)| t > 0)
                .collect();
            assert_eq!(
                got, want,
                "{} --cpu-kind efficient -n {n}: {:?}",
                m.name, sel.task_cpus
            );
        }
    }
}

#[test]
fn a_cluster_is_a_domain_where_the_last_level_cache_is_per_core() {
    // The RK3588-like dump and its copy without the L3 (each core's L2 is then the last
    // level): with CPU 4 stormy, -n 2 of the A76s keeps to one cluster (6-7), never 5 and 6.
    for name in ["8arm-4a55+4a76", "8arm-4a55+4a76-nol3"] {
        let m = Machine::read(name);
        let storm: BTreeMap<usize, Score> = [(4, rate(20000.0))].into();
        let sel = m.select(2, &storm);
        assert_eq!(
            sorted(&sel.task_cpus),
            [6, 7],
            "{name}: {:?}",
            sel.task_cpus
        );
    }
}
