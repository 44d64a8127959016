//! Selection on real machines' topologies, through `goset-run --dry-run --fsroot`, checked
//! against hwloc's reading of the same dumps (truth.csv), not against goset's own topology.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// hwloc's view of one CPU.
struct Truth {
    core: String,
    numa: String,
}

fn truth(name: &str) -> BTreeMap<usize, Truth> {
    (common::truth_rows(name).into_iter())
        .map(|r| {
            let t = Truth {
                core: r["core_siblings_smt"].clone(),
                numa: r["numa"].clone(),
            };
            (r["cpu"].parse().unwrap(), t)
        })
        .collect()
}

fn dry_run(fixture: &str, args: &[&str]) -> std::process::Output {
    let root = common::fixture_root(fixture);
    let json = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(common::bin("goset-run"))
        .args(["--dry-run", "--sample", "0", "--fsroot"])
        .arg(&root)
        .arg("--json")
        .arg(json.path())
        .args(args)
        .output()
        .unwrap();
    let mut out = out;
    if out.status.success() {
        out.stdout = std::fs::read(json.path()).unwrap();
    }
    out
}

fn task_cpus(out: &std::process::Output) -> Vec<usize> {
    assert!(
        out.status.success(),
        "goset-run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["selection"]["task_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap() as usize)
        .collect()
}

const XEON: &str = "32intel64-2p8co2t+8ve";

#[test]
fn spread_takes_one_cpu_per_physical_core() {
    let t = truth(XEON);
    let cpus = task_cpus(&dry_run(XEON, &["-n", "16", "--smt", "spread"]));
    assert_eq!(cpus.len(), 16);
    let cores: BTreeSet<&str> = cpus.iter().map(|c| t[c].core.as_str()).collect();
    assert_eq!(
        cores.len(),
        16,
        "spread put two threads on one core: {cpus:?}"
    );
}

#[test]
fn pack_fills_whole_cores() {
    let t = truth(XEON);
    let cpus = task_cpus(&dry_run(XEON, &["-n", "16", "--smt", "pack"]));
    let mut per_core: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &cpus {
        *per_core.entry(t[c].core.as_str()).or_default() += 1;
    }
    assert_eq!(
        per_core.len(),
        8,
        "pack used {} cores: {cpus:?}",
        per_core.len()
    );
    assert!(per_core.values().all(|&n| n == 2));
}

#[test]
fn numa_auto_stays_on_one_node() {
    let t = truth(XEON);
    let cpus = task_cpus(&dry_run(XEON, &["-n", "8", "--numa", "auto"]));
    let nodes: BTreeSet<&str> = cpus.iter().map(|c| t[c].numa.as_str()).collect();
    assert_eq!(nodes.len(), 1, "{cpus:?} spans nodes {nodes:?}");
    let go_spelling = task_cpus(&dry_run(XEON, &["-n", "8", "-numa", "-1"]));
    assert_eq!(go_spelling, cpus);
}

#[test]
fn a_node_too_small_is_a_usage_error() {
    let out = dry_run(XEON, &["-n", "17", "--numa", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "goset-run: --numa 0: node 0 holds 16 candidate CPUs, fewer than -n 17\n"
    );
}

#[test]
fn offline_and_excluded_cpus_are_never_selected() {
    let t = truth("offline-cpu0-node0");
    let online: Vec<usize> = t
        .iter()
        .filter(|(_, v)| !v.core.is_empty())
        .map(|(c, _)| *c)
        .collect();
    let cpus = task_cpus(&dry_run(
        "offline-cpu0-node0",
        &["-n", &online.len().to_string()],
    ));
    assert_eq!(
        cpus.iter().copied().collect::<BTreeSet<_>>(),
        online.iter().copied().collect()
    );
    let cpus = task_cpus(&dry_run(
        "offline-cpu0-node0",
        &["-n", "2", "-exclude", "4-10", "--include", "12"],
    ));
    assert_eq!(cpus[0], 12);
    assert!(cpus.iter().all(|c| !(4..=10).contains(c)));
}

#[test]
fn bad_requests_fail_with_one_line_and_exit_2() {
    for (args, want) in [
        (&["-n", "0"][..], "goset-run: -n 0: must be at least 1\n"),
        (&["-n", "33"][..], "goset-run: -n 33: must be between 1 and 32 (the candidate CPUs: online, allowed and not excluded)\n"),
        (&["--numa", "5"][..], "goset-run: --numa 5: no such NUMA node with CPUs; nodes are 0,1\n"),
        (&["--include", "40"][..], "goset-run: --include 40: not candidate CPUs (offline, not allowed, excluded or outside the NUMA node)\n"),
        (&["--exclude", "3-1"][..], "goset-run: --exclude '3-1': a range must run upwards (A-B with A <= B) with a stride above 0\n"),
    ] {
        let out = dry_run(XEON, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
    }
}

#[test]
fn every_fixture_selects_within_its_online_cpus() {
    for name in common::FIXTURES {
        let t = truth(name);
        let out = dry_run(name, &["-n", "2"]);
        let cpus = task_cpus(&out);
        for c in &cpus {
            assert!(!t[c].core.is_empty(), "{name}: selected offline cpu {c}");
        }
        // --sample 0 samples nothing: the noise files (no dump holds /proc/interrupts) are
        // neither read nor missed.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let errors = v["errors"].to_string();
        for file in ["/proc/interrupts", "/proc/softirqs", "/proc/stat"] {
            assert!(!errors.contains(file), "{name}: {errors}");
        }
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!text.contains("/proc/interrupts"), "{name}: {text}");
    }
}

#[test]
fn fence_books_every_task_cpus_hwloc_sibling_and_keeps_one_cpu_free() {
    let t = truth(XEON);
    let out = dry_run(XEON, &["-n", "4", "--cgroup", "--fence"]);
    let cpus = task_cpus(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = |key: &str| -> BTreeSet<usize> {
        v["selection"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap() as usize)
            .collect()
    };
    let fenced = list("fenced");
    // hwloc's SMT siblings of the task CPUs, other than the task CPUs.
    let siblings: BTreeSet<usize> = cpus
        .iter()
        .flat_map(|c| t[c].core.split(',').map(|s| s.parse::<usize>().unwrap()))
        .filter(|c| !cpus.contains(c))
        .collect();
    assert_eq!(fenced, siblings, "task {cpus:?}");
    let hk = v["selection"]["housekeeper"].as_u64().unwrap() as usize;
    assert!(!fenced.contains(&hk) && !cpus.contains(&hk));
    let marks: Vec<&serde_json::Value> = (v["selection"]["cpus"].as_array().unwrap().iter())
        .filter(|row| row["sel"] == "!")
        .collect();
    assert_eq!(marks.len(), fenced.len(), "a ! for each fenced sibling");

    // Every candidate a task CPU: nothing left for the housekeeper, a usage error.
    let all = dry_run(XEON, &["-n", "32", "--cgroup", "--fence"]);
    assert_eq!(all.status.code(), Some(2));
    let err = String::from_utf8_lossy(&all.stderr);
    assert!(err.contains("-n 32 with --fence"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// hwloc's `column` of every CPU of fixture `name`.
fn column(name: &str, column: &str) -> BTreeMap<usize, String> {
    (common::truth_rows(name).into_iter())
        .map(|r| (r["cpu"].parse().unwrap(), r[column].clone()))
        .collect()
}

fn groups(name: &str, col: &str, cpus: &[usize]) -> BTreeSet<String> {
    let c = column(name, col);
    cpus.iter().map(|cpu| c[cpu].clone()).collect()
}

fn housekeeper(out: &std::process::Output) -> usize {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["selection"]["housekeeper"].as_u64().unwrap() as usize
}

#[test]
fn gb10_runs_a_team_on_the_x925_cores_of_one_cluster_and_the_housekeeper_on_an_a725() {
    const GB10: &str = "nvidia-dgx-gb10";
    let out = dry_run(GB10, &["-n", "4"]);
    let cpus = task_cpus(&out);
    let kind: BTreeMap<usize, u32> = (column(GB10, "cpukind").into_iter())
        .map(|(c, k)| (c, k.parse().unwrap()))
        .collect();
    // hwloc's kinds 2-4 are the X925s (capacity 997-1024), 0-1 the A725s.
    assert!(cpus.iter().all(|c| kind[c] >= 2), "{cpus:?}");
    assert_eq!(groups(GB10, "l3_index", &cpus).len(), 1, "{cpus:?}");
    assert_eq!(cpus[0], 19, "slot 0 on the core of capacity 1024");
    assert!(kind[&housekeeper(&out)] <= 1);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["selection"]["cpus"][0]["kind"], 4,
        "the JSON rows name the kind"
    );
    // Background work on the A725s instead, or kind 0 alone.
    let cpus = task_cpus(&dry_run(GB10, &["-n", "2", "--cpu-kind", "efficient"]));
    assert!(cpus.iter().all(|c| kind[c] <= 1), "{cpus:?}");
    let cpus = task_cpus(&dry_run(GB10, &["-n", "5", "--cpu-kind", "0"]));
    assert_eq!(sorted(&cpus), [0, 1, 2, 3, 4]);
}

fn sorted(v: &[usize]) -> Vec<usize> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

#[test]
fn intel_hybrid_puts_the_task_on_p_cores_and_the_housekeeper_on_an_e_core() {
    const HYBRID: &str = "20em64t-hybrid-1p6c2t+2ca4co1t";
    let kind = column(HYBRID, "cpukind");
    let out = dry_run(HYBRID, &["-n", "6"]);
    let cpus = task_cpus(&out);
    assert!(cpus.iter().all(|c| kind[c] == "1"), "{cpus:?}");
    assert_eq!(kind[&housekeeper(&out)], "0");
    // Two more: E-cores of one module, before any P-core's second thread.
    let cpus = task_cpus(&dry_run(HYBRID, &["-n", "8"]));
    assert_eq!(
        cpus[6..].iter().filter(|c| kind[c] == "0").count(),
        2,
        "{cpus:?}"
    );
    assert_eq!(groups(HYBRID, "l2_index", &cpus[6..]).len(), 1, "{cpus:?}");
}

#[test]
fn a_team_that_fits_one_domain_is_moved_whole_off_cpu_0s() {
    for (fixture, n, col) in [
        ("64amd64-4s2n4ca2co", "8", "numa"),
        (XEON, "8", "package_index"),
        ("128arm-2pa2n8cluster4co", "4", "cluster"),
    ] {
        let cpus = task_cpus(&dry_run(fixture, &["-n", n]));
        let g = groups(fixture, col, &cpus);
        assert_eq!(
            g.len(),
            1,
            "{fixture} -n {n}: {cpus:?} straddles {col} {g:?}"
        );
        let zero = column(fixture, col)[&0].clone();
        assert!(
            !g.contains(&zero),
            "{fixture} -n {n}: {cpus:?} shares CPU 0's {col}"
        );
    }
    // --scatter spreads the same team over both sockets.
    let cpus = task_cpus(&dry_run(XEON, &["-n", "8", "--scatter"]));
    assert_eq!(groups(XEON, "package_index", &cpus).len(), 2, "{cpus:?}");
}

#[test]
fn a_bad_cpu_kind_is_a_usage_error() {
    for (args, want) in [
        (
            &["--cpu-kind", "fast"][..],
            "goset-run: --cpu-kind 'fast': expected performance, efficient, any or a kind number (goset lists them)\n",
        ),
        (
            &["--cpu-kind", "7"][..],
            "goset-run: --cpu-kind 7: no such CPU kind; this machine has one kind, 0\n",
        ),
    ] {
        let out = dry_run(XEON, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
    }
    let out = dry_run("nvidia-dgx-gb10", &["--cpu-kind", "5"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "goset-run: --cpu-kind 5: no such CPU kind; kinds are 0 (the least performant) to 4\n"
    );
}
