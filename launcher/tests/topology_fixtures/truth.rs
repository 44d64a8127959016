//! Every shared fixture against hwloc's reading of the same dump (`truth.csv`): the same
//! online CPUs, the same partition of online CPUs into cores, packages, NUMA nodes and kinds;
//! and a check that the comparison can fail.

use super::{common, partition, read};
use goset::topology::Topology;
use std::collections::{BTreeMap, BTreeSet};

/// One row of `truth.csv`, fields by column name.
struct TruthRow(BTreeMap<String, String>);

impl TruthRow {
    fn get(&self, col: &str) -> &str {
        self.0
            .get(col)
            .unwrap_or_else(|| panic!("truth.csv has no column {col}"))
    }
    fn cpu(&self) -> usize {
        self.get("cpu").parse().unwrap()
    }
    fn online(&self) -> bool {
        self.get("online") == "1"
    }
}

fn truth(name: &str) -> Vec<TruthRow> {
    common::truth_rows(name).into_iter().map(TruthRow).collect()
}

fn cpulist(s: &str) -> BTreeSet<usize> {
    goset::topology::parse_cpulist(s)
        .unwrap()
        .into_iter()
        .collect()
}

/// hwloc's rows of a fixture by CPU.
type ByCpu<'a> = BTreeMap<usize, &'a TruthRow>;

/// Asserts that `topo` agrees with hwloc's reading of fixture `name`.
fn check_against_truth(name: &str, topo: &Topology) {
    let rows = truth(name);
    let by_cpu: ByCpu = rows.iter().map(|r| (r.cpu(), r)).collect();
    let online = check_cpus(name, topo, &rows);
    check_cores(name, topo, &online, &by_cpu);
    check_groupings(name, topo, &online, &by_cpu);
    check_candidates(name, topo, &rows);
    check_kinds(name, topo, &online, &by_cpu);
    check_nodes(name, topo);
}

/// Every CPU hwloc knows is there with the same online and allowed state; every other
/// possible CPU is offline. Returns the online CPUs.
fn check_cpus(name: &str, topo: &Topology, rows: &[TruthRow]) -> Vec<usize> {
    for r in rows {
        let c = topo
            .cpu(r.cpu())
            .unwrap_or_else(|| panic!("{name}: cpu {} missing", r.cpu()));
        assert_eq!(c.online, r.online(), "{name}: online of cpu {}", c.cpu);
        assert_eq!(
            c.allowed,
            r.get("allowed") == "1",
            "{name}: allowed of cpu {}",
            c.cpu
        );
    }
    let online: Vec<usize> = rows
        .iter()
        .filter(|r| r.online())
        .map(TruthRow::cpu)
        .collect();
    assert_eq!(topo.online(), online, "{name}: online set");
    let sorted: Vec<usize> = topo.cpus.iter().map(|c| c.cpu).collect();
    assert!(
        sorted.windows(2).all(|w| w[0] < w[1]),
        "{name}: cpus not ascending"
    );
    online
}

/// Cores: each online CPU's siblings are exactly hwloc's core.
fn check_cores(name: &str, topo: &Topology, online: &[usize], by_cpu: &ByCpu) {
    for &cpu in online {
        let want = cpulist(by_cpu[&cpu].get("core_siblings_smt"));
        let got: BTreeSet<usize> = topo.cpu(cpu).unwrap().siblings.iter().copied().collect();
        assert_eq!(got, want, "{name}: siblings of cpu {cpu}");
    }
}

/// Packages and NUMA nodes: the same partitions of the online CPUs.
fn check_groupings(name: &str, topo: &Topology, online: &[usize], by_cpu: &ByCpu) {
    let truth_pkg = partition(online, |c| by_cpu[&c].get("package_index").to_string());
    let our_pkg = partition(online, |c| topo.cpu(c).unwrap().package_index);
    assert!(
        online
            .iter()
            .all(|&c| topo.cpu(c).unwrap().package_index.is_some()),
        "{name}: online cpu without package"
    );
    assert_eq!(our_pkg, truth_pkg, "{name}: package grouping");

    let truth_numa = partition(online, |c| by_cpu[&c].get("numa").to_string());
    let our_numa = partition(online, |c| topo.cpu(c).unwrap().node);
    assert_eq!(our_numa, truth_numa, "{name}: NUMA grouping");
    for &c in online {
        assert_eq!(
            topo.cpu(c).unwrap().node.is_none(),
            by_cpu[&c].get("numa").is_empty(),
            "{name}: cpu {c} has a node exactly when hwloc gives it one"
        );
    }
}

/// Candidates are the online and allowed CPUs.
fn check_candidates(name: &str, topo: &Topology, rows: &[TruthRow]) {
    let allowed: Vec<usize> = rows
        .iter()
        .filter(|r| r.online() && r.get("allowed") == "1")
        .map(TruthRow::cpu)
        .collect();
    assert_eq!(topo.candidates(), allowed, "{name}: candidates");
}

/// CPU kinds: each online CPU's kind is hwloc's rank of it (0 the least performant), and a
/// CPU has none exactly where hwloc reports none.
fn check_kinds(name: &str, topo: &Topology, online: &[usize], by_cpu: &ByCpu) {
    for &cpu in online {
        let want = by_cpu[&cpu].get("cpukind");
        let got = topo.cpu(cpu).unwrap().kind;
        assert_eq!(
            got.map(|k| k.to_string()).unwrap_or_default(),
            want,
            "{name}: kind of cpu {cpu}"
        );
    }
    for k in &topo.kinds {
        assert!(
            k.cpus
                .iter()
                .all(|&c| topo.cpu(c).unwrap().kind == Some(k.index)),
            "{name}: kind {} lists a CPU of another kind",
            k.index
        );
    }
}

/// Nodes list their CPUs consistently with the per-CPU node.
fn check_nodes(name: &str, topo: &Topology) {
    for c in topo.cpus.iter().filter(|c| c.node.is_some()) {
        let n = topo.node(c.node.unwrap()).unwrap();
        assert!(
            n.online && n.cpus.contains(&c.cpu),
            "{name}: node {} does not list cpu {}",
            n.id,
            c.cpu
        );
    }
}

#[test]
fn every_fixture_agrees_with_hwloc() {
    for name in common::FIXTURES {
        let topo = read(name);
        check_against_truth(name, &topo);
    }
}

#[test]
fn the_truth_check_can_fail() {
    // Merging two cores of the dual-socket Xeon must be caught.
    let name = "32intel64-2p8co2t+8ve";
    let mut topo = read(name);
    topo.cpus[0].siblings = vec![0, 1, 16];
    let caught = std::panic::catch_unwind(|| check_against_truth(name, &topo));
    assert!(caught.is_err(), "a wrong core went unnoticed");
    // So must a CPU put on the wrong node.
    let mut topo = read(name);
    topo.cpus[3].node = Some(1);
    assert!(std::panic::catch_unwind(|| check_against_truth(name, &topo)).is_err());
    // And two kinds in the wrong order.
    let name = "nvidia-dgx-gb10";
    let mut topo = read(name);
    topo.cpus[0].kind = Some(1);
    assert!(std::panic::catch_unwind(|| check_against_truth(name, &topo)).is_err());
}
