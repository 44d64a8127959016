//! likwid-pin expressions on real machines' topologies. The expected lists are written by
//! hand from likwid's documented rules (see `src/topology/expr.rs`) and each fixture's
//! `truth.csv` (hwloc's reading of the dump): not from goset's own resolution.

mod common;

use goset::fsroot::FsRoot;
use goset::topology::expr::CpuExpr;
use goset::topology::Topology;

fn resolve(fixture: &str, text: &str) -> Result<Vec<usize>, String> {
    let topo = Topology::read(&FsRoot::new(common::fixture_root(fixture))).unwrap();
    CpuExpr::parse(text)
        .and_then(|e| e.resolve(&topo))
        .map_err(|e| e.to_string())
}

fn range(r: std::ops::Range<usize>) -> Vec<usize> {
    r.collect()
}

/// 2 Xeon Silver 4108: package p, core c is CPU 8p+c with its sibling 8p+c+16; one node and
/// one L3 per package.
#[test]
fn smt_xeon_numbers_physical_cores_first() {
    let x = |t| resolve("32intel64-2p8co2t+8ve", t).unwrap();
    assert_eq!(x("N:0-3"), [0, 1, 2, 3]);
    assert_eq!(x("N:0-15"), range(0..16), "every physical core");
    assert_eq!(x("N:14-17"), [14, 15, 16, 17], "then the second threads");
    assert_eq!(x("S1:0-3"), [8, 9, 10, 11]);
    assert_eq!(x("S1:8-9"), [24, 25]);
    assert_eq!(x("M1:0-1"), [8, 9]);
    assert_eq!(x("C0:0-3"), [0, 1, 2, 3]);
    assert_eq!(x("C1:7-8"), [15, 24]);
    assert_eq!(x("D1:0"), [8]);
    // S0 core by core is 0,16,1,17,2,18,...
    assert_eq!(x("E:S0:4:1:2"), [0, 1, 2, 3], "one thread per core");
    assert_eq!(x("E:S0:4:2:4"), [0, 16, 2, 18]);
    assert_eq!(x("E:N:2"), [0, 16]);
    assert_eq!(x("S0:0-1@S1:0-1"), [0, 1, 8, 9]);
    assert_eq!(x("L:S1:0@L:1"), [8, 1]);
    assert_eq!(
        resolve("32intel64-2p8co2t+8ve", "S2:0").unwrap_err(),
        "S2: no socket 2 with CPUs goset-run may use (sockets: 0-1)"
    );
}

/// The 4-socket NetBurst Xeon with CPUs 2, 5, 13 and 14 offline. hwloc's packages, by lowest
/// CPU: 0 = {0,4,8,12}, 1 = {1,9}, 2 = {3,7,11,15}, 3 = {6,10}; cores {0,8} {1,9} {3,11}
/// {4,12} {6} {7,15} {10} (6 and 10 lost their siblings); one node; one L3 per package.
#[test]
fn offline_cpus_are_in_no_domain() {
    let x = |t| resolve("16em64t-4s2c2t-offlines", t).unwrap();
    assert_eq!(
        x("N:0-6"),
        [0, 1, 3, 4, 6, 7, 10],
        "a first thread of every core"
    );
    assert_eq!(x("N:7-11"), [8, 9, 11, 12, 15]);
    assert_eq!(x("S2:0-3"), [3, 7, 11, 15]);
    assert_eq!(x("S3:0-1"), [6, 10]);
    assert_eq!(x("S1:1"), [9]);
    assert_eq!(x("M0:0-1"), [0, 1]);
    assert_eq!(x("C2:0-3"), [3, 7, 11, 15]);
    assert_eq!(x("E:C3:2"), [6, 10]);
    // N core by core: 0,8,1,9,3,11,4,12,6,7,15,10.
    assert_eq!(x("E:N:4:1:2"), [0, 1, 3, 4]);
    assert_eq!(x("E:N:3:1:5"), [0, 11, 15]);
    assert_eq!(
        resolve("16em64t-4s2c2t-offlines", "S3:2").unwrap_err(),
        "S3:2: S3 holds 2 CPUs goset-run may use (positions 0-1)"
    );
    assert_eq!(
        resolve("16em64t-4s2c2t-offlines", "M1:0").unwrap_err(),
        "M1: no NUMA domain 1 with CPUs goset-run may use (NUMA domains: 0)"
    );
}

/// i7-1370P: 6 P-cores with 2 threads (0-1, 2-3, ..., 10-11), 8 E-cores (12-19).
#[test]
fn hybrid_e_cores_have_no_second_round() {
    let x = |t| resolve("20em64t-hybrid-1p6c2t+2ca4co1t", t).unwrap();
    assert_eq!(
        x("N:0-5"),
        [0, 2, 4, 6, 8, 10],
        "the P-cores' first threads"
    );
    assert_eq!(x("N:6-13"), range(12..20), "the E-cores");
    assert_eq!(
        x("N:14-19"),
        [1, 3, 5, 7, 9, 11],
        "the P-cores' second threads"
    );
    assert_eq!(x("S0:0-19"), x("N:0-19"));
    assert_eq!(x("C0:0-1"), [0, 2]);
    // Core by core, N is 0..19 in order: positions count threads, not cores.
    assert_eq!(x("E:N:6:1:2"), [0, 2, 4, 6, 8, 10]);
    assert_eq!(x("E:N:8:1:2"), [0, 2, 4, 6, 8, 10, 12, 14]);
    assert_eq!(
        resolve("20em64t-hybrid-1p6c2t+2ca4co1t", "S0:20").unwrap_err(),
        "S0:20: S0 holds 20 CPUs goset-run may use (positions 0-19)"
    );
}

/// 4 Opteron 6276 (Bulldozer): 64 CPUs, no SMT (a compute unit's two cores are separate
/// cores), two nodes of 8 CPUs per package, one L3 per node.
#[test]
fn bulldozer_has_two_nodes_and_caches_per_socket() {
    let x = |t| resolve("64amd64-4s2n4ca2co", t).unwrap();
    assert_eq!(x("S1:0-3"), [16, 17, 18, 19]);
    assert_eq!(x("M3:0-1"), [24, 25]);
    assert_eq!(x("M1:0-7"), range(8..16));
    assert_eq!(x("C5:0-1"), [40, 41]);
    assert_eq!(x("E:S2:4:1:2"), [32, 34, 36, 38]);
    assert_eq!(x("E:M7:2:1:4"), [56, 60]);
    assert_eq!(x("N:63"), [63]);
    assert_eq!(x("S0:0-1@S3:0-1"), [0, 1, 48, 49]);
}

/// What goset-run takes: the expression resolved on `--fsroot`'s machine, in order.
#[test]
fn goset_run_takes_expressions_in_include_and_exclude() {
    let root = common::fixture_root("32intel64-2p8co2t+8ve");
    let run = |args: &[&str]| {
        std::process::Command::new(common::bin("goset-run"))
            .args(["--dry-run", "--sample", "0", "--json", "-", "--fsroot"])
            .arg(&root)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["-n", "3", "--include", "S1:0-1@S0:0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["selection"]["task_cpus"], serde_json::json!([8, 9, 0]));
    // Excluding socket 0 leaves socket 1.
    let out = run(&["-n", "16", "--exclude", "S0:0-15"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let task: Vec<u64> = (r["selection"]["task_cpus"].as_array().unwrap().iter())
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert!(
        task.iter().all(|&c| (8..16).contains(&c) || c >= 24),
        "{task:?}"
    );
    let out = run(&["--include", "S0:0@S7:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "goset-run: --include 'S0:0@S7:0': S7: no socket 7 with CPUs goset-run may use \
         (sockets: 0-1)\n"
    );
}
