//! Selection on synthetic machines: spread and pack, noisy siblings, include and exclude, the
//! housekeeper, NUMA.

use super::*;
use crate::topology::synthetic::machine;
use crate::topology::Device;

fn opts(count: usize) -> Options {
    Options {
        count,
        ..Default::default()
    }
}

fn quiet() -> BTreeMap<usize, Score> {
    BTreeMap::new()
}

/// A score of `per_s` interrupt events a second and nothing else.
pub(super) fn rate(per_s: f64) -> Score {
    Score {
        rate: per_s,
        ..Score::default()
    }
}

/// A score of `pct` percent of the CPU taken by another task.
pub(super) fn busy(pct: f64) -> Score {
    Score {
        load_pct: pct,
        ..Score::default()
    }
}

#[test]
fn spread_uses_every_core_before_a_sibling_and_pack_fills_cores() {
    let topo = machine(4, 2, 1);
    let spread = plan(&topo, &quiet(), &opts(5)).unwrap();
    // Cores without CPU 0 first, then CPU 0's core; the fifth CPU is a sibling, on the core
    // handed out last (CPU 0's), so that slot 0's core stays the main thread's own.
    assert_eq!(spread.task_cpus, vec![1, 2, 3, 0, 4]);
    let pack = plan(
        &topo,
        &quiet(),
        &Options {
            smt: SmtPolicy::Pack,
            ..opts(5)
        },
    )
    .unwrap();
    assert_eq!(pack.task_cpus, vec![1, 5, 2, 6, 3]);
}

#[test]
fn a_noisy_sibling_makes_its_core_rank_lower() {
    let topo = machine(2, 2, 1);
    // CPU 1 itself is quiet, but its sibling 3 is busy: core {0,2} wins despite CPU 0.
    let noise: BTreeMap<usize, Score> = [
        (1, rate(0.0)),
        (3, busy(5.0)),
        (0, rate(10.0)),
        (2, rate(10.0)),
    ]
    .into();
    let sel = plan(&topo, &noise, &opts(1)).unwrap();
    assert_eq!(sel.task_cpus, vec![0]);
    assert_eq!(sel.core_cost[&1], 5e6);
    assert_eq!(
        sel.housekeeper_cpu, 1,
        "housekeeper prefers a core the task does not use"
    );
}

#[test]
fn include_comes_first_and_counts_as_using_its_core() {
    let topo = machine(4, 2, 1);
    let sel = plan(
        &topo,
        &quiet(),
        &Options {
            include: vec![6, 6],
            ..opts(3)
        },
    )
    .unwrap();
    assert_eq!(
        sel.task_cpus,
        vec![6, 1, 3],
        "6's core (2) is taken, so 2 is not next"
    );
    let err = plan(
        &topo,
        &quiet(),
        &Options {
            include: vec![1, 2],
            ..opts(1)
        },
    )
    .unwrap_err();
    assert_eq!(
        err,
        SelectError::IncludeTooMany {
            listed: 2,
            requested: 1
        }
    );
    let err = plan(
        &topo,
        &quiet(),
        &Options {
            include: vec![1],
            exclude: vec![1],
            ..opts(1)
        },
    )
    .unwrap_err();
    assert_eq!(err, SelectError::IncludeNotCandidate { cpus: vec![1] });
}

#[test]
fn excluding_everything_says_so() {
    let topo = machine(2, 1, 1);
    let err = plan(
        &topo,
        &quiet(),
        &Options {
            exclude: vec![0, 1],
            ..opts(1)
        },
    )
    .unwrap_err();
    assert_eq!(err, SelectError::NoCandidates);
}

#[test]
fn excluded_cpus_serve_neither_task_nor_housekeeper() {
    let topo = machine(4, 1, 1);
    let sel = plan(
        &topo,
        &quiet(),
        &Options {
            exclude: vec![1, 2],
            ..opts(1)
        },
    )
    .unwrap();
    assert_eq!(sel.task_cpus, vec![3]);
    assert_eq!(sel.housekeeper_cpu, 0);
    assert_eq!(
        plan(
            &topo,
            &quiet(),
            &Options {
                exclude: vec![1, 2],
                ..opts(3)
            }
        )
        .unwrap_err(),
        SelectError::CountOutOfRange {
            requested: 3,
            available: 2
        }
    );
}

#[test]
fn housekeeper_avoids_isolated_cpus_and_shares_when_nothing_is_left() {
    let mut topo = machine(4, 1, 1);
    topo.cpus[0].isolated = true;
    let sel = plan(&topo, &quiet(), &opts(2)).unwrap();
    assert_eq!(sel.task_cpus, vec![1, 2]);
    assert_eq!((sel.housekeeper_cpu, sel.housekeeper_shared), (3, false));
    let all = plan(&topo, &quiet(), &opts(4)).unwrap();
    assert_eq!(
        (all.housekeeper_cpu, all.housekeeper_shared),
        (*all.task_cpus.last().unwrap(), true)
    );
}

#[test]
fn numa_choices() {
    let topo = machine(8, 1, 2);
    let on = |numa| plan(&topo, &quiet(), &Options { numa, ..opts(3) });
    let one = on(NumaChoice::Node(1)).unwrap();
    assert!(one.task_cpus.iter().all(|&c| c >= 4), "{:?}", one.task_cpus);
    assert_eq!(one.node, Some(1));
    assert_eq!(
        plan(
            &topo,
            &quiet(),
            &Options {
                numa: NumaChoice::Node(0),
                ..opts(5)
            }
        )
        .unwrap_err(),
        SelectError::NodeTooSmall {
            node: 0,
            holds: 4,
            requested: 5
        }
    );
    // Auto with no node large enough names the biggest node and its size.
    assert_eq!(
        plan(
            &topo,
            &quiet(),
            &Options {
                numa: NumaChoice::Auto,
                ..opts(5)
            }
        )
        .unwrap_err(),
        SelectError::NoNodeLargeEnough {
            node: 0,
            holds: 4,
            requested: 5
        }
    );
    assert_eq!(
        on(NumaChoice::Node(7)).unwrap_err(),
        SelectError::UnknownNode {
            node: 7,
            known: vec![0, 1]
        }
    );
    // Node 0 loses a CPU to --exclude, so auto prefers node 1.
    let auto = plan(
        &topo,
        &quiet(),
        &Options {
            numa: NumaChoice::Auto,
            exclude: vec![3],
            ..opts(2)
        },
    )
    .unwrap();
    assert_eq!(auto.node, Some(1));
    let with_include = plan(
        &topo,
        &quiet(),
        &Options {
            numa: NumaChoice::Auto,
            include: vec![2],
            ..opts(2)
        },
    )
    .unwrap();
    assert_eq!(with_include.node, Some(0));
}

#[test]
fn a_busy_cpu_loses_to_a_quiet_one_and_ties_are_deterministic() {
    let topo = machine(2, 1, 1);
    let busy_one: BTreeMap<usize, Score> = [(0, rate(100.0)), (1, busy(96.0))].into();
    assert_eq!(plan(&topo, &busy_one, &opts(1)).unwrap().task_cpus, vec![0]);
    let a = plan(&topo, &quiet(), &opts(2)).unwrap();
    let b = plan(&topo, &quiet(), &opts(2)).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.task_cpus, vec![1, 0]);
}

#[test]
fn the_made_up_node_of_a_kernel_without_numa_binds_no_memory() {
    let mut topo = machine(4, 1, 1);
    topo.nodes[0].synthetic = true;
    for numa in [NumaChoice::Node(0), NumaChoice::Auto] {
        let sel = plan(&topo, &quiet(), &Options { numa, ..opts(2) }).unwrap();
        assert_eq!(sel.node, None, "{numa:?}");
        assert_eq!(sel.task_cpus.len(), 2);
    }
}

#[test]
fn fence_books_the_siblings_and_keeps_a_cpu_for_the_housekeeper() {
    // 4 cores x 2 threads: CPU c and c+4 are siblings.
    let topo = machine(4, 2, 1);
    let fence = |count: usize| {
        plan(
            &topo,
            &BTreeMap::new(),
            &Options {
                fence: true,
                ..opts(count)
            },
        )
    };
    let s = fence(2).unwrap();
    assert_eq!(s.task_cpus, vec![1, 2]);
    assert_eq!(s.fenced, vec![5, 6]);
    assert!(s.unfenced.is_empty());
    assert!(![1, 2, 5, 6].contains(&s.housekeeper_cpu));
    assert!(!s.housekeeper_shared);

    // -n 4 spreads over every core: fencing all four siblings leaves nothing for the
    // housekeeper, so the last slot's sibling is given back and becomes it.
    let s = fence(4).unwrap();
    assert_eq!(s.fenced.len(), 3);
    assert_eq!(s.unfenced.len(), 1);
    assert_eq!(s.housekeeper_cpu, s.unfenced[0]);

    // Every CPU a task CPU: no room at all.
    assert_eq!(
        fence(8).unwrap_err(),
        SelectError::NoRoomToFence {
            requested: 8,
            available: 8
        }
    );
    // Without --fence the same -n shares the housekeeper.
    assert!(
        plan(&topo, &BTreeMap::new(), &opts(8))
            .unwrap()
            .housekeeper_shared
    );
}

#[test]
fn spares_are_the_next_quietest_cpus_and_the_housekeeper_avoids_them() {
    let topo = machine(4, 1, 1);
    // CPU 2 is noisy: the task takes the quietest, the spare the next, the housekeeper what
    // is left.
    let noise = BTreeMap::from([(2, busy(5.0))]);
    let s = plan(
        &topo,
        &noise,
        &Options {
            spare: 1,
            ..opts(2)
        },
    )
    .unwrap();
    assert_eq!(s.task_cpus, [1, 3]);
    assert_eq!(s.spares, [0]);
    assert_eq!(s.housekeeper_cpu, 2, "a CPU that is no spare, noisy or not");
    // With nothing else left, the housekeeper shares a spare, not a task CPU.
    let s = plan(
        &topo,
        &quiet(),
        &Options {
            spare: 1,
            ..opts(3)
        },
    )
    .unwrap();
    assert_eq!(s.spares, [0]);
    assert_eq!((s.housekeeper_cpu, s.housekeeper_shared), (0, false));
    // No room: a clear error naming how many are left.
    let e = plan(
        &topo,
        &quiet(),
        &Options {
            spare: 2,
            ..opts(3)
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--spare 2: -n 3 leaves 1 candidate CPUs outside the task; use --spare 1 or less"
    );
}

fn device(node: Option<usize>, local_cpus: Option<Vec<usize>>) -> Device {
    Device {
        name: "gpu1".into(),
        kind: crate::topology::DeviceKind::Gpu,
        sysfs: "/sys/devices/pci0000:85/0000:85:00.0/0000:86:00.0".into(),
        bus_id: "0000:86:00.0".into(),
        node,
        local_cpus,
    }
}

/// Node 0: CPUs 0,1,4,5; node 1: 2,3,6,7 (cores 2 and 3 with their siblings).
fn two_node_machine() -> Topology {
    machine(4, 2, 2)
}

/// `plan` on `topo` for `count` CPUs near `gpu`, with `numa`.
fn near(
    topo: &Topology,
    numa: NumaChoice,
    count: usize,
    gpu: Device,
) -> Result<Selection, SelectError> {
    let o = Options {
        numa,
        near: Some(gpu),
        ..opts(count)
    };
    plan(topo, &quiet(), &o)
}

/// GPU 1, on node 1, local to its CPUs.
fn gpu1() -> Device {
    device(Some(1), Some(vec![2, 3, 6, 7]))
}

#[test]
fn near_keeps_to_the_devices_cpus_and_auto_is_its_node() {
    let topo = two_node_machine();
    let sel = near(&topo, NumaChoice::Near, 4, gpu1()).unwrap();
    // Slot 0's core (2, 6) gives its second thread last.
    assert_eq!(sel.task_cpus, [2, 3, 7, 6]);
    assert_eq!(sel.node, Some(1), "the default is the device's node");
    assert_eq!(
        near(&topo, NumaChoice::Auto, 4, gpu1()).unwrap().node,
        Some(1),
        "and auto"
    );
    assert_eq!(sel.near, Some(gpu1()), "the report names it");
    assert!(
        !sel.housekeeper_shared && [0, 1, 4, 5].contains(&sel.housekeeper_cpu),
        "the housekeeper may sit away from the device, as it may off the node"
    );
    let off = near(&topo, NumaChoice::Off, 2, gpu1()).unwrap();
    assert_eq!((off.task_cpus, off.node), (vec![2, 3], None));
    assert_eq!(
        near(&topo, NumaChoice::Node(1), 2, gpu1()).unwrap().node,
        Some(1)
    );
}

#[test]
fn near_refuses_another_node_too_few_local_cpus_and_a_cpu_far_from_the_device() {
    let topo = two_node_machine();
    let err = |r: Result<Selection, SelectError>| r.unwrap_err().to_string();
    assert_eq!(
        err(near(&topo, NumaChoice::Node(0), 2, gpu1())),
        "--numa 0 with --near gpu1: the device is on node 1; give --numa 1, auto or off"
    );
    assert_eq!(
        err(near(&topo, NumaChoice::Auto, 5, gpu1())),
        "--near gpu1: 4 candidate CPUs are local to it, fewer than -n 5"
    );
    let with_include = Options {
        include: vec![2, 0],
        near: Some(gpu1()),
        ..opts(2)
    };
    assert_eq!(
        err(plan(&topo, &quiet(), &with_include)),
        "--include 0: not local to --near gpu1"
    );
    let excluded = Options {
        exclude: vec![2, 3],
        near: Some(gpu1()),
        ..opts(3)
    };
    assert_eq!(
        err(plan(&topo, &quiet(), &excluded)),
        "--near gpu1: 2 candidate CPUs are local to it, fewer than -n 3"
    );
}

#[test]
fn near_a_device_of_unknown_locality_is_its_node_or_anywhere() {
    let topo = two_node_machine();
    // No local_cpulist: the node's CPUs.
    let node_only = near(&topo, NumaChoice::Auto, 4, device(Some(1), None)).unwrap();
    assert_eq!(node_only.task_cpus, [2, 3, 7, 6]);
    // No locality: every CPU; by default no node, and auto as without --near (the biggest
    // node, the lowest on ties).
    let nowhere = || device(None, Some((0..8).collect()));
    let unbound = near(&topo, NumaChoice::Near, 8, nowhere()).unwrap();
    assert_eq!((unbound.task_cpus.len(), unbound.node), (8, None));
    let auto = near(&topo, NumaChoice::Auto, 2, nowhere()).unwrap();
    assert_eq!((auto.task_cpus, auto.node), (vec![1, 0], Some(0)));
    let no_device = Options {
        numa: NumaChoice::Near,
        ..opts(8)
    };
    assert_eq!(
        plan(&topo, &quiet(), &no_device).unwrap().node,
        None,
        "the default without a device is off"
    );
}

mod kinds_and_domains;
