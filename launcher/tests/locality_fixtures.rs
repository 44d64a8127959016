//! Blocks and nearness on real machines' topologies (the dumps of `tests/fixtures/topology`):
//! what each process of a multi-process task (`--per-process`, `--instances`) gets there.
//! The expected groupings are written from the machines' hwloc reading (`truth.csv`).

mod common;

use goset::fsroot::FsRoot;
use goset::topology::Topology;
use goset_plan::locality::{self, NO_BLOCK};
use goset_plan::{CpuSet, Plan, MAX_SLOTS};
use std::collections::BTreeSet;

/// A plan of every online, allowed CPU of `fixture` in ascending order, with its places.
fn plan_of(fixture: &str) -> (Topology, Plan) {
    let topo = Topology::read(&FsRoot::new(common::fixture_root(fixture))).unwrap();
    let cpus = topo.candidates();
    let reservation: CpuSet = cpus.iter().copied().collect();
    let mut plan = Plan::new(&cpus, None, reservation).unwrap();
    let places: Vec<_> = cpus.iter().map(|&c| topo.place_of(c)).collect();
    plan.set_places(&places);
    (topo, plan)
}

/// The CPUs of each block of `size`.
fn blocks(plan: &Plan, size: usize) -> Vec<Vec<usize>> {
    let mut out = [NO_BLOCK; MAX_SLOTS];
    let count = locality::partition(plan, size, &mut out);
    let mut all: Vec<Vec<usize>> = (0..count as u16)
        .map(|b| {
            let mut cpus: Vec<usize> = (0..plan.slot_count())
                .filter(|&s| out[s] == b)
                .map(|s| plan.cpu_of_slot(s).unwrap())
                .collect();
            cpus.sort();
            cpus
        })
        .collect();
    all.sort();
    all
}

/// The blocks processes take one after another, as the shim chooses them.
fn taken_in_order(plan: &Plan, size: usize) -> Vec<Vec<usize>> {
    let mut out = [NO_BLOCK; MAX_SLOTS];
    let count = locality::partition(plan, size, &mut out);
    let mut taken: BTreeSet<u16> = BTreeSet::new();
    let mut order = Vec::new();
    while let Some(b) = locality::choose_block(
        plan,
        &out,
        count,
        None,
        |s| taken.contains(&out[s]),
        |_| false,
    ) {
        taken.insert(b);
        let cpus: Vec<usize> = (0..plan.slot_count())
            .filter(|&s| out[s] == b)
            .map(|s| plan.cpu_of_slot(s).unwrap())
            .collect();
        order.push(cpus);
    }
    order
}

#[test]
fn amd_opteron_blocks_are_nodes_and_processes_fill_packages_evenly() {
    // 4 packages x 2 nodes of 8 CPUs (0-7, 8-15, ...), an L3 a node, an L2 a pair.
    let (topo, plan) = plan_of("64amd64-4s2n4ca2co");
    let node = |c: usize| topo.cpu(c).unwrap().node.unwrap();
    let b8 = blocks(&plan, 8);
    assert_eq!(b8.len(), 8);
    for b in &b8 {
        assert_eq!(
            b.iter().map(|&c| node(c)).collect::<BTreeSet<_>>().len(),
            1,
            "{b:?}"
        );
    }
    // Blocks of 4: two a node, each an L3's half on two whole L2 pairs.
    let b4 = blocks(&plan, 4);
    assert_eq!(b4[0], [0, 1, 2, 3]);
    assert_eq!(b4[1], [4, 5, 6, 7]);
    // Four processes of 8: each on a node of its own, one a package before any package gets
    // a second (the node, then the package, with the most room).
    let order = taken_in_order(&plan, 8);
    let packages: Vec<usize> = (order.iter().take(4))
        .map(|b| topo.cpu(b[0]).unwrap().package_index.unwrap())
        .collect();
    assert_eq!(
        packages.iter().collect::<BTreeSet<_>>().len(),
        4,
        "{order:?}"
    );
    // A process's next thread: the other CPU of its L2 pair before the rest of its node.
    let slot = |c: usize| (0..plan.slot_count()).find(|&s| plan.cpu_of_slot(s) == Some(c));
    let near = |c: usize| locality::near_key(&plan, slot(c).unwrap(), slot(0), true);
    assert!(near(1) < near(2) && near(2) < near(8) && near(8) < near(16));
}

#[test]
fn four_sockets_with_offline_cpus_give_blocks_of_whole_cores_in_one_package() {
    // CPUs 2, 5, 13 and 14 offline: packages 0 = {0,8,4,12}, 1 = {1,9}, 2 = {6,10},
    // 3 = {3,11,7,15}; one node.
    let (topo, plan) = plan_of("16em64t-4s2c2t-offlines");
    assert_eq!(plan.slot_count(), 12);
    let package = |c: usize| topo.cpu(c).unwrap().package_index.unwrap();
    let b2 = blocks(&plan, 2);
    assert_eq!(b2.len(), 6);
    for b in &b2 {
        assert_eq!(package(b[0]), package(b[1]), "{b:?}");
    }
    // The cores that kept both threads are blocks of their own.
    for core in [[0, 8], [4, 12], [1, 9], [3, 11], [7, 15]] {
        assert!(b2.contains(&core.to_vec()), "{core:?} in {b2:?}");
    }
    // Blocks of 4: the two whole packages.
    let b4 = blocks(&plan, 4);
    assert!(
        b4.contains(&vec![0, 4, 8, 12]) && b4.contains(&vec![3, 7, 11, 15]),
        "{b4:?}"
    );
}

#[test]
fn hybrid_intel_gives_an_instance_two_p_cores_or_an_e_core_cluster() {
    // 6 P-cores with SMT (0-11), 8 E-cores (12-19), one package and node.
    let (_, plan) = plan_of("20em64t-hybrid-1p6c2t+2ca4co1t");
    let b4 = blocks(&plan, 4);
    assert_eq!(
        b4,
        [
            vec![0, 1, 2, 3],
            vec![4, 5, 6, 7],
            vec![8, 9, 10, 11],
            vec![12, 13, 14, 15],
            vec![16, 17, 18, 19]
        ]
    );
}
