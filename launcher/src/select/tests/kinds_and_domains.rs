//! Selection by CPU kind, compactness and significant noise, on made-up machines.

use super::super::*;
use super::{busy, rate};
use crate::topology::synthetic::machine;
use crate::topology::CpuKind;

fn opts(count: usize) -> Options {
    Options {
        count,
        sample_ms: 250,
        ..Default::default()
    }
}

/// A hybrid laptop: 4 P-cores with SMT (CPUs 0-3, siblings 4-7; kind 1) and 4 E-cores in one
/// module (CPUs 8-11, kind 0, 0.7 of a P-core), one package. P-core 2 is favoured.
fn hybrid() -> Topology {
    let mut topo = machine(12, 1, 1);
    for c in &mut topo.cpus {
        let cpu = c.cpu;
        c.siblings = match cpu {
            0..=3 => vec![cpu, cpu + 4],
            4..=7 => vec![cpu - 4, cpu],
            _ => vec![cpu],
        };
        c.kind = Some(if cpu < 8 { 1 } else { 0 });
        c.l2 = Some(if cpu < 8 { cpu % 4 } else { 8 });
        c.favour = (cpu < 8).then_some(if cpu % 4 == 2 { 67 } else { 64 });
    }
    let kind = |index: usize, cpus: Vec<usize>, perf: u32| CpuKind {
        index,
        cpus,
        core_type: None,
        capacity: None,
        max_mhz: None,
        base_mhz: None,
        class: index,
        perf,
    };
    topo.kinds = vec![
        kind(0, (8..12).collect(), 700),
        kind(1, (0..8).collect(), 1000),
    ];
    topo
}

#[test]
fn the_task_takes_performance_cores_and_the_housekeeper_an_efficiency_core() {
    let topo = hybrid();
    let sel = plan(&topo, &BTreeMap::new(), &opts(4)).unwrap();
    assert_eq!(sel.task_cpus, [2, 1, 3, 0], "the favoured core is slot 0");
    assert!(
        sel.housekeeper_cpu >= 8,
        "housekeeper {}",
        sel.housekeeper_cpu
    );
    // -n 1 runs on the core that boosts highest.
    assert_eq!(
        plan(&topo, &BTreeMap::new(), &opts(1)).unwrap().task_cpus,
        [2]
    );
}

#[test]
fn an_e_core_comes_before_a_p_cores_second_thread_but_not_with_pack() {
    let topo = hybrid();
    let sel = plan(&topo, &BTreeMap::new(), &opts(6)).unwrap();
    assert_eq!(sel.task_cpus[..4], [2, 1, 3, 0]);
    assert!(
        sel.task_cpus[4..].iter().all(|&c| c >= 8),
        "{:?}",
        sel.task_cpus
    );
    let pack = Options {
        smt: SmtPolicy::Pack,
        ..opts(6)
    };
    let sel = plan(&topo, &BTreeMap::new(), &pack).unwrap();
    assert!(sel.task_cpus.iter().all(|&c| c < 8), "{:?}", sel.task_cpus);
    // Every E-core before the second P thread.
    let sel = plan(&topo, &BTreeMap::new(), &opts(10)).unwrap();
    assert_eq!(sel.task_cpus[4..8], [8, 9, 10, 11]);
}

#[test]
fn a_p_core_another_task_keeps_busy_loses_to_an_idle_e_core_and_a_little_load_does_not() {
    let topo = hybrid();
    // 40% busy: 0.6 of a P-core is less than an idle E-core's 0.7.
    let noise = BTreeMap::from([(1, busy(40.0))]);
    let sel = plan(&topo, &noise, &opts(4)).unwrap();
    assert!(!sel.task_cpus.contains(&1), "{:?}", sel.task_cpus);
    assert_eq!(sel.task_cpus.iter().filter(|&&c| c >= 8).count(), 1);
    assert_eq!(sel.passed_over, [1]);
    // 10% busy: 0.9 of a P-core still beats the E-core. Its quiet sibling 5 is the thread
    // taken there, last.
    let noise = BTreeMap::from([(1, busy(10.0))]);
    let sel = plan(&topo, &noise, &opts(4)).unwrap();
    assert_eq!(sel.task_cpus, [2, 3, 0, 5]);
}

#[test]
fn cpu_kind_efficient_any_and_a_number() {
    let topo = hybrid();
    let eff = Options {
        cpu_kind: KindChoice::Efficient,
        ..opts(2)
    };
    let sel = plan(&topo, &BTreeMap::new(), &eff).unwrap();
    assert!(sel.task_cpus.iter().all(|&c| c >= 8), "{:?}", sel.task_cpus);
    let only = |k| Options {
        cpu_kind: KindChoice::Kind(k),
        ..opts(4)
    };
    let sel = plan(&topo, &BTreeMap::new(), &only(0)).unwrap();
    assert_eq!(sel.task_cpus, [8, 9, 10, 11]);
    assert_eq!(
        plan(
            &topo,
            &BTreeMap::new(),
            &Options {
                count: 5,
                ..only(0)
            }
        )
        .unwrap_err()
        .to_string(),
        "--cpu-kind 0: kind 0 holds 4 candidate CPUs, fewer than -n 5"
    );
    assert_eq!(
        plan(&topo, &BTreeMap::new(), &only(2))
            .unwrap_err()
            .to_string(),
        "--cpu-kind 2: no such CPU kind; kinds are 0 (the least performant) to 1"
    );
    // any: an E-core is as good as a P-core, so the first threads of all 8 cores come first.
    let any = Options {
        cpu_kind: KindChoice::Any,
        ..opts(8)
    };
    let sel = plan(&topo, &BTreeMap::new(), &any).unwrap();
    let mut got = sel.task_cpus.clone();
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2, 3, 8, 9, 10, 11]);
}

/// Two packages of 4 cores, each its own node and cache; package 1 is CPUs 4-7.
fn two_sockets() -> Topology {
    machine(8, 1, 2)
}

#[test]
fn a_team_that_fits_one_package_never_straddles_two_to_avoid_cpu_0() {
    let topo = two_sockets();
    let sel = plan(&topo, &BTreeMap::new(), &opts(4)).unwrap();
    assert_eq!(sel.task_cpus, [4, 5, 6, 7]);
    // A few stray interrupts are no reason to leave the package either.
    let noise: BTreeMap<usize, Score> = [(4, 12.0), (5, 0.0), (6, 4.0), (7, 8.0), (1, 0.0)]
        .map(|(c, r)| (c, rate(r)))
        .into();
    let sel = plan(&topo, &noise, &opts(4)).unwrap();
    let mut got = sel.task_cpus.clone();
    got.sort_unstable();
    assert_eq!(got, [4, 5, 6, 7]);
    assert!(sel.passed_over.is_empty());
    // An interrupt storm on CPU 5 is: the team takes package 0's quiet CPUs and CPU 0's.
    let storm: BTreeMap<usize, Score> = [(5, rate(20000.0))].into();
    let sel = plan(&topo, &storm, &opts(4)).unwrap();
    let mut got = sel.task_cpus.clone();
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2, 3]);
    // Half a package stays in one.
    let sel = plan(&topo, &BTreeMap::new(), &opts(2)).unwrap();
    assert_eq!(sel.task_cpus, [1, 2]);
    // More than a package: one whole package, the rest beside it; slots fill the package
    // that holds most of the team first, so that slot 0 (the main thread) is among them.
    let sel = plan(&topo, &BTreeMap::new(), &opts(5)).unwrap();
    assert_eq!(sel.task_cpus[..4], [4, 5, 6, 7], "{:?}", sel.task_cpus);
    // A stray tick of another process's load is no reason to leave either.
    let tick: BTreeMap<usize, Score> = [(5, busy(3.0))].into();
    assert_eq!(
        sorted_cpus(&plan(&topo, &tick, &opts(4)).unwrap()),
        [4, 5, 6, 7]
    );
}

#[test]
fn scatter_spreads_the_team_over_the_packages() {
    let topo = two_sockets();
    let sel = plan(
        &topo,
        &BTreeMap::new(),
        &Options {
            scatter: true,
            ..opts(4)
        },
    )
    .unwrap();
    let in_pkg1 = sel.task_cpus.iter().filter(|&&c| c >= 4).count();
    assert_eq!(in_pkg1, 2, "{:?}", sel.task_cpus);
    // Its slots alternate, so that fewer threads than -n still spread.
    let pkg = |c: usize| c / 4;
    assert_ne!(
        pkg(sel.task_cpus[0]),
        pkg(sel.task_cpus[1]),
        "{:?}",
        sel.task_cpus
    );
}

fn sorted_cpus(sel: &Selection) -> Vec<usize> {
    let mut v = sel.task_cpus.clone();
    v.sort_unstable();
    v
}

#[test]
fn spares_are_booked_beside_the_task() {
    let topo = machine(8, 1, 2);
    let sel = plan(
        &topo,
        &BTreeMap::new(),
        &Options {
            spare: 1,
            ..opts(3)
        },
    )
    .unwrap();
    let pkg = |c: usize| c / 4;
    assert!(sel.task_cpus.iter().all(|&c| pkg(c) == pkg(sel.spares[0])));
}

#[test]
fn each_process_block_is_chosen_whole_by_the_same_rule() {
    // Two packages of 8 cores: 12 slots as 2 processes of 6. As one team, 8 + 4; as blocks,
    // each block in one package.
    let topo = machine(16, 1, 2);
    let pkg = |c: usize| c / 8;
    let team = plan(&topo, &BTreeMap::new(), &opts(12)).unwrap();
    let in_pkg1 = team.task_cpus.iter().filter(|&&c| pkg(c) == 1).count();
    assert_eq!(in_pkg1, 8, "{:?}", team.task_cpus);
    let blocks = Options {
        block: Some(6),
        ..opts(12)
    };
    let sel = plan(&topo, &BTreeMap::new(), &blocks).unwrap();
    for block in sel.task_cpus.chunks(6) {
        let pkgs: BTreeSet<usize> = block.iter().map(|&c| pkg(c)).collect();
        assert_eq!(pkgs.len(), 1, "{:?}", sel.task_cpus);
    }
    // Blocks of 3 stay beside the blocks before them: both in one package.
    let sel = plan(
        &topo,
        &BTreeMap::new(),
        &Options {
            block: Some(3),
            ..opts(6)
        },
    )
    .unwrap();
    let pkgs: BTreeSet<usize> = sel.task_cpus.iter().map(|&c| pkg(c)).collect();
    assert_eq!(pkgs.len(), 1, "{:?}", sel.task_cpus);
}
