//! The topology reader against real machines: every shared fixture must agree with hwloc's
//! reading of the same dump (`truth.csv`): the same online CPUs, the same partition of online
//! CPUs into cores, packages and NUMA nodes. Then one test per trap of the fixtures' README,
//! a synthetic root for the command-line fallbacks, and the live machine.

#[path = "../common/mod.rs"]
mod common;
mod truth;

use goset::fsroot::FsRoot;
use goset::topology::Topology;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn read(name: &str) -> Topology {
    let root = common::fixture_root(name);
    Topology::read(&FsRoot::new(root)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The partition of `cpus` by `label` (CPUs with equal labels in one part).
fn partition<L: Ord>(cpus: &[usize], label: impl Fn(usize) -> L) -> BTreeSet<BTreeSet<usize>> {
    let mut parts: BTreeMap<L, BTreeSet<usize>> = BTreeMap::new();
    for &c in cpus {
        parts.entry(label(c)).or_default().insert(c);
    }
    parts.into_values().collect()
}

#[test]
fn old_mask_only_kernel_with_offline_cpus() {
    let name = "16em64t-4s2c2t-offlines";
    let root = common::fixture_root(name);
    let cpu = root.join("sys/devices/system/cpu");
    assert!(
        !cpu.join("online").exists() && !cpu.join("possible").exists(),
        "the trap: no online/possible list"
    );
    assert!(
        !cpu.join("cpu0/topology/thread_siblings_list").exists(),
        "the trap: masks only"
    );
    let topo = read(name);
    assert_eq!(topo.cpus.len(), 16);
    let offline: Vec<usize> = topo
        .cpus
        .iter()
        .filter(|c| !c.online)
        .map(|c| c.cpu)
        .collect();
    assert_eq!(offline, vec![2, 5, 13, 14]);
    for &c in &offline {
        let info = topo.cpu(c).unwrap();
        assert!(
            !info.allowed && info.siblings.is_empty() && info.package_index.is_none(),
            "{info:?}"
        );
    }
    assert_eq!(topo.cpu(0).unwrap().siblings, vec![0, 8]);
    assert_eq!(topo.cpu(1).unwrap().siblings, vec![1, 9]);
    // CPU 6's thread sibling (14) is offline: its core has one thread left.
    assert_eq!(topo.cpu(6).unwrap().siblings, vec![6]);
    let packages: BTreeSet<usize> = topo.cpus.iter().filter_map(|c| c.package_index).collect();
    assert_eq!(packages.len(), 4);
    // Node 0's cpumap (a mask) lists all 16.
    assert_eq!(topo.node(0).unwrap().cpus, (0..16).collect::<Vec<_>>());
    assert!(
        topo.errors
            .iter()
            .any(|e| e.file == "/sys/devices/system/cpu/online"),
        "{:?}",
        topo.errors
    );
}

#[test]
fn bulldozer_compute_units_are_not_smt() {
    let name = "64amd64-4s2n4ca2co";
    let root = common::fixture_root(name);
    let ts = std::fs::read_to_string(
        root.join("sys/devices/system/cpu/cpu0/topology/thread_siblings_list"),
    )
    .unwrap();
    assert_eq!(
        ts.trim(),
        "0-1",
        "the trap: the kernel calls 0 and 1 thread siblings"
    );
    let topo = read(name);
    assert_eq!(topo.online().len(), 64);
    for c in &topo.cpus {
        assert_eq!(
            c.siblings,
            vec![c.cpu],
            "cpu {} is a core of its own",
            c.cpu
        );
    }
    // core_id repeats within a package (0-7 twice): cores must not be grouped by id alone.
    assert_eq!(topo.cpu(0).unwrap().core, topo.cpu(8).unwrap().core);
    assert_eq!(
        topo.cpu(0).unwrap().package_index,
        topo.cpu(8).unwrap().package_index
    );
    let packages: BTreeSet<usize> = topo.cpus.iter().filter_map(|c| c.package_index).collect();
    assert_eq!(packages.len(), 4);
    assert_eq!(topo.nodes.len(), 8);
    assert!(topo.nodes.iter().all(|n| n.online && n.cpus.len() == 8));
}

#[test]
fn power7_package_id_minus_one() {
    let name = "256ppc-8n8s4t";
    let topo = read(name);
    assert_eq!(topo.cpus.len(), 256);
    assert!(
        topo.cpus.iter().all(|c| c.package == Some(-1)),
        "the kernel's -1 is kept"
    );
    // hwloc makes one package per package mask: 64 of 4 CPUs, not one of 256.
    let packages = partition(&topo.online(), |c| topo.cpu(c).unwrap().package_index);
    assert_eq!(packages.len(), 64);
    assert!(packages.iter().all(|p| p.len() == 4));
    assert!(topo.cpus.iter().all(|c| c.siblings.len() == 4), "SMT4");
    // Node directories without cpulist: cpumap masks.
    let root = common::fixture_root(name);
    assert!(!root.join("sys/devices/system/node/node0/cpulist").exists());
    let ids: Vec<usize> = topo.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 1, 4, 5, 8, 9, 12, 13]);
    assert!(topo.nodes.iter().all(|n| n.online && n.cpus.len() == 32));
    assert_eq!(topo.node(4).unwrap().cpus.first(), Some(&64));
}

#[test]
fn offline_cpus_and_offline_node_zero() {
    let name = "offline-cpu0-node0";
    let topo = read(name);
    // possible is 0-191, present 0-23: one entry per possible CPU.
    assert_eq!(topo.cpus.len(), 192);
    assert_eq!(topo.cpus.iter().filter(|c| c.present).count(), 24);
    assert!(topo
        .cpus
        .iter()
        .filter(|c| c.cpu >= 24)
        .all(|c| !c.online && !c.allowed && c.siblings.is_empty()));
    assert_eq!(topo.online(), (4..=20).collect::<Vec<_>>());
    for c in [0, 1, 2, 3, 21, 22, 23] {
        assert!(!topo.cpu(c).unwrap().online && !topo.candidates().contains(&c));
    }
    let n0 = topo.node(0).expect("node 0 is listed although offline");
    assert!(!n0.online);
    assert!(n0.cpus.contains(&4) && n0.cpus.contains(&0), "{n0:?}");
    let n1 = topo.node(1).unwrap();
    assert!(n1.online);
    assert_eq!(n1.cpus, (1..24).step_by(2).collect::<Vec<_>>());
    for c in (4..=20).step_by(2) {
        assert_eq!(
            topo.cpu(c).unwrap().node,
            None,
            "cpu {c} is on the offline node 0"
        );
    }
    for c in (5..=19).step_by(2) {
        assert_eq!(topo.cpu(c).unwrap().node, Some(1));
    }
    // The cgroup cpuset (4-20) of the dump.
    assert_eq!(topo.candidates(), (4..=20).collect::<Vec<_>>());
}

#[test]
fn kunpeng_package_ids_36_and_8442() {
    let topo = read("128arm-2pa2n8cluster4co");
    let ids: BTreeSet<i64> = topo.cpus.iter().filter_map(|c| c.package).collect();
    assert_eq!(ids, BTreeSet::from([36, 8442]));
    let packages = partition(&topo.online(), |c| topo.cpu(c).unwrap().package_index);
    assert_eq!(
        packages,
        BTreeSet::from([(0..64).collect(), (64..128).collect()])
    );
    // 32 clusters of 4 cores; no SMT; die_id -1 reads as no die.
    let clusters = partition(&topo.online(), |c| {
        let i = topo.cpu(c).unwrap();
        (i.package_index, i.cluster)
    });
    assert_eq!(clusters.len(), 32);
    assert!(clusters.iter().all(|c| c.len() == 4));
    assert!(topo
        .cpus
        .iter()
        .all(|c| c.siblings == vec![c.cpu] && c.die.is_none()));
    assert_eq!(topo.nodes.len(), 4);
}

#[test]
fn hybrid_mixed_smt_widths() {
    let topo = read("20em64t-hybrid-1p6c2t+2ca4co1t");
    let packages: BTreeSet<Option<usize>> = topo.cpus.iter().map(|c| c.package_index).collect();
    assert_eq!(packages.len(), 1);
    let cores = partition(&topo.online(), |c| topo.cpu(c).unwrap().siblings.clone());
    let widths: Vec<usize> = cores.iter().map(BTreeSet::len).collect();
    assert_eq!(
        widths.iter().filter(|&&w| w == 2).count(),
        6,
        "six P-cores with SMT2"
    );
    assert_eq!(
        widths.iter().filter(|&&w| w == 1).count(),
        8,
        "eight E-cores"
    );
    assert_eq!(topo.cpu(0).unwrap().siblings, vec![0, 1]);
    assert_eq!(topo.cpu(12).unwrap().siblings, vec![12]);
}

#[test]
fn nohz_full_null_means_none() {
    let name = "nvidia-dgx-gb10";
    let root = common::fixture_root(name);
    let raw = std::fs::read_to_string(root.join("sys/devices/system/cpu/nohz_full")).unwrap();
    assert_eq!(raw.trim(), "(null)", "the trap");
    let topo = read(name);
    assert_eq!(topo.isolation.sysfs_nohz_full, Some(vec![]));
    assert!(topo.isolation.nohz_full.is_empty());
    assert!(topo
        .cpus
        .iter()
        .all(|c| !c.nohz_full && !c.isolated && !c.rcu_nocbs));
    assert!(
        !topo.errors.iter().any(|e| e.file.ends_with("nohz_full")),
        "{:?}",
        topo.errors
    );
    assert_eq!(topo.online().len(), 20);
}

#[test]
fn json_has_the_documented_shape() {
    let topo = read("32intel64-2p8co2t+8ve");
    let v: serde_json::Value =
        serde_json::from_str(&serde_json::to_string_pretty(&topo).unwrap()).unwrap();
    let cpus = v["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), 112, "one entry per possible CPU");
    let c0 = &cpus[0];
    assert_eq!(c0["cpu"], 0);
    assert_eq!(c0["online"], true);
    assert_eq!(c0["allowed"], true);
    assert_eq!(c0["siblings"], serde_json::json!([0, 16]));
    assert_eq!(c0["core"], 0);
    assert_eq!(c0["package"], 0);
    assert_eq!(c0["node"], 0);
    assert_eq!(cpus[8]["node"], 1);
    assert_eq!(cpus[8]["package"], 1);
    assert_eq!(cpus[40]["online"], false);
    assert!(cpus[40]["node"].is_null(), "node is null when none");
    assert_eq!(cpus[40]["siblings"], serde_json::json!([]));
    assert!(v["nodes"].is_array() && v["isolation"].is_object());
    // Empty isolated and nohz_full files.
    assert_eq!(topo.isolation.sysfs_isolated, Some(vec![]));
    assert_eq!(topo.isolation.sysfs_nohz_full, Some(vec![]));
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn synthetic_root_uses_the_command_line_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "sys/devices/system/cpu/online", "0-3\n");
    write(r, "sys/devices/system/cpu/possible", "0-3\n");
    for c in 0..4 {
        let t = format!("sys/devices/system/cpu/cpu{c}/topology");
        write(r, &format!("{t}/core_id"), &format!("{}\n", c % 2));
        write(r, &format!("{t}/physical_package_id"), "0\n");
        // Masks only: CPUs c and c^2 share a core (0+2, 1+3).
        let mask = (1u32 << c) | (1u32 << (c ^ 2));
        write(r, &format!("{t}/thread_siblings"), &format!("{mask:08x}\n"));
    }
    // No isolated/nohz_full files: the command line decides. Quoted values, flags, and init's
    // arguments after `--` that must be ignored.
    write(
        r,
        "proc/cmdline",
        "ro isolcpus=nohz,domain,2-3 nohz_full=3 rcu_nocbs=1 irqaffinity=0 x=\"a b\" -- nohz_full=0\n",
    );
    write(r, "proc/self/status", "Name:\tx\nCpus_allowed_list:\t1-3\n");
    let topo = Topology::read(&FsRoot::new(r)).unwrap();
    assert_eq!(topo.cpu(0).unwrap().siblings, vec![0, 2]);
    assert_eq!(topo.cpu(3).unwrap().siblings, vec![1, 3]);
    assert_eq!(topo.candidates(), vec![1, 2, 3]);
    assert_eq!(topo.isolation.isolcpus.as_deref(), Some("nohz,domain,2-3"));
    assert_eq!(topo.isolation.isolated, vec![2, 3]);
    assert_eq!(topo.isolation.nohz_full, vec![3]);
    assert_eq!(topo.isolation.rcu_nocbs, vec![1]);
    assert_eq!(topo.isolation.irqaffinity, Some(vec![0]));
    let flags: Vec<(bool, bool, bool)> = topo
        .cpus
        .iter()
        .map(|c| (c.isolated, c.nohz_full, c.rcu_nocbs))
        .collect();
    assert_eq!(
        flags,
        vec![
            (false, false, false),
            (false, false, true),
            (true, false, false),
            (true, true, true)
        ]
    );
    // No node directory (a kernel without NUMA): one node of every CPU, as hwloc has it.
    assert_eq!(topo.nodes.len(), 1, "{:?}", topo.nodes);
    assert!(topo.nodes[0].synthetic && topo.nodes[0].cpus == vec![0, 1, 2, 3]);
    assert!(topo.cpus.iter().all(|c| c.node == Some(0)));

    // Nothing at all is fatal.
    let empty = tempfile::tempdir().unwrap();
    assert!(Topology::read(&FsRoot::new(empty.path())).is_err());
}

/// The three sysfs shapes where hwloc's reading once differed from goset's, each a
/// minimal tree: packages from `core_siblings` masks where every `physical_package_id` is -1;
/// SMT cores from `thread_siblings` without any `core_id`; (no node directory: above).
#[test]
fn shapes_hwloc_reads_by_masks_agree() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "sys/devices/system/cpu/online", "0-7\n");
    write(r, "sys/devices/system/cpu/possible", "0-7\n");
    write(r, "sys/devices/system/node/online", "0\n");
    write(r, "sys/devices/system/node/node0/cpulist", "0-7\n");
    for c in 0..8 {
        let t = format!("sys/devices/system/cpu/cpu{c}/topology");
        // Packages 0-3 and 4-7 by mask only; SMT pairs (0,1), (2,3) ... by mask only.
        write(r, &format!("{t}/physical_package_id"), "-1\n");
        let package = if c < 4 { 0x0f } else { 0xf0 };
        write(r, &format!("{t}/core_siblings"), &format!("{package:x}\n"));
        let pair = 0b11u32 << (c & !1);
        write(r, &format!("{t}/thread_siblings"), &format!("{pair:x}\n"));
    }
    let topo = Topology::read(&FsRoot::new(r)).unwrap();
    let packages: Vec<Option<usize>> = topo.cpus.iter().map(|c| c.package_index).collect();
    assert_eq!(packages, [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
    let cores: BTreeSet<Vec<usize>> = topo.cpus.iter().map(|c| c.siblings.clone()).collect();
    let pairs: BTreeSet<Vec<usize>> = (0..4).map(|p| vec![2 * p, 2 * p + 1]).collect();
    assert_eq!(cores, pairs);
    assert!(topo.nodes.len() == 1 && !topo.nodes[0].synthetic);
}

#[test]
fn synthetic_old_kernel_fallbacks() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let cpu = "sys/devices/system/cpu";
    // No possible/present/online lists. cpu0: topology, no online file (not hot-pluggable);
    // cpu1: online=1; cpu2: no online file and no topology; cpu3: online=0.
    for c in [0, 1] {
        write(
            r,
            &format!("{cpu}/cpu{c}/topology/core_id"),
            &format!("{c}\n"),
        );
        write(
            r,
            &format!("{cpu}/cpu{c}/topology/physical_package_id"),
            "0\n",
        );
    }
    write(r, &format!("{cpu}/cpu1/online"), "1\n");
    std::fs::create_dir_all(r.join(format!("{cpu}/cpu2"))).unwrap();
    write(r, &format!("{cpu}/cpu3/online"), "0\n");
    // A node directory without cpulist, cpumap or cpu links: the cpuN/node0 links decide.
    write(r, "sys/devices/system/node/node0/meminfo", "");
    for c in [0, 1, 2] {
        std::os::unix::fs::symlink("../../node/node0", r.join(format!("{cpu}/cpu{c}/node0")))
            .unwrap();
    }
    // cgroup v2 cpuset: the process's cgroup has no cpuset files, its parent does.
    write(r, "proc/self/cgroup", "0::/job/step\n");
    write(r, "proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n");
    write(r, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory\n");
    write(r, "sys/fs/cgroup/job/cpuset.cpus.effective", "1-3\n");
    let topo = Topology::read(&FsRoot::new(r)).unwrap();
    assert_eq!(topo.cpus.len(), 4);
    assert_eq!(topo.online(), vec![0, 1]);
    assert_eq!(
        topo.cpu(0).unwrap().siblings,
        vec![0],
        "no sibling mask: a core of its own"
    );
    assert!(topo.cpu(2).unwrap().siblings.is_empty());
    assert_eq!(topo.candidates(), vec![1], "cpuset 1-3 of online 0-1");
    let n0 = topo.node(0).unwrap();
    assert!(n0.online);
    assert_eq!(n0.cpus, vec![0, 1, 2]);
    assert_eq!(topo.cpu(1).unwrap().node, Some(0));
    assert_eq!(topo.cpu(3).unwrap().node, None);
    assert!(
        topo.errors.iter().any(|e| e.file.ends_with("/cpu/online")),
        "{:?}",
        topo.errors
    );
}

#[test]
fn live_machine_is_sane() {
    let topo = Topology::read(&FsRoot::default()).unwrap();
    assert!(!topo.cpus.is_empty());
    let candidates = topo.candidates();
    assert!(!candidates.is_empty(), "the launcher runs somewhere");
    for c in topo.cpus.iter().filter(|c| c.online) {
        assert!(
            c.siblings.contains(&c.cpu),
            "cpu {} is in its own core: {:?}",
            c.cpu,
            c.siblings
        );
        for s in &c.siblings {
            assert_eq!(
                &topo.cpu(*s).unwrap().siblings,
                &c.siblings,
                "cores are a partition"
            );
        }
        assert!(c.package_index.is_some());
    }
    assert!(topo.cpus.iter().all(|c| c.online || !c.allowed));
    // The allowed set is this thread's affinity: compare with the kernel's own account.
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    let mut want: Vec<usize> = goset::topology::parse_cpulist(line.trim()).unwrap();
    want.retain(|c| topo.cpu(*c).is_some_and(|i| i.online));
    assert_eq!(candidates, want);
    let online_file = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_eq!(
        topo.online(),
        goset::topology::parse_cpulist(online_file.trim()).unwrap()
    );
    assert!(topo.cmdline.is_some());
}
