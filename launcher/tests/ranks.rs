//! `--near gpu:local-rank`: each local rank's share and block, through `goset-run --dry-run
//! --fsroot` on the made-up GPU servers of `tests/fixtures/topology` (written by
//! `make_gpu_servers.py`, described in the fixtures' README), checked against what torchrun's
//! `--numa-binding` rule (`torch/numa/binding.py`) gives on the same machine, mode by mode.

mod common;

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Output};

fn run(fixture: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let root = common::fixture_root(fixture);
    let json = tempfile::NamedTempFile::new().unwrap();
    let mut cmd = Command::new(common::bin("goset-run"));
    cmd.args(["--dry-run", "--sample", "0", "--fsroot"])
        .arg(&root)
        .arg("--json")
        .arg(json.path())
        .args(args);
    for v in goset_plan::ranks::VISIBLE_VARS {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let report = std::fs::read(json.path()).ok();
    let value = report.and_then(|r| serde_json::from_slice(&r).ok());
    (out, value.unwrap_or(Value::Null))
}

fn set(v: &Value) -> BTreeSet<usize> {
    (v.as_array().unwrap().iter())
        .map(|c| c.as_u64().unwrap() as usize)
        .collect()
}

/// CPUs `lo..=hi` with their SMT siblings `+smt`.
fn cores(lo: usize, hi: usize, smt: usize) -> BTreeSet<usize> {
    (lo..=hi).flat_map(|c| [c, c + smt]).collect()
}

struct Rank {
    gpu: usize,
    share: BTreeSet<usize>,
    cpus: BTreeSet<usize>,
    widened: Option<String>,
    nic: Option<(String, String)>,
}

/// The ranks of a dry run of `-n n` in `mode` (more arguments in `extra`).
fn ranks(fixture: &str, n: usize, mode: &str, extra: &[&str]) -> Vec<Rank> {
    let n = n.to_string();
    let mut args = vec!["-n", &n, "--near", "gpu:local-rank", "--near-share", mode];
    args.extend(extra);
    let (out, report) = run(fixture, &args, &[]);
    assert!(
        out.status.success(),
        "{fixture} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Ranks (--near gpu:local-rank)"), "{stderr}");
    let ranks = report["selection"]["ranks"].as_array().unwrap();
    let task: Vec<usize> = (report["selection"]["task_cpus"].as_array().unwrap().iter())
        .map(|c| c.as_u64().unwrap() as usize)
        .collect();
    let by_rank: Vec<usize> = ranks.iter().flat_map(|r| set(&r["cpus"])).collect();
    assert_eq!(set_of(&task), set_of(&by_rank), "the task is the blocks");
    (ranks.iter().enumerate())
        .map(|(i, r)| {
            assert_eq!(r["rank"], i);
            let nic = &r["gpu"]["nic"];
            Rank {
                gpu: r["gpu"]["index"].as_u64().unwrap() as usize,
                share: set(&r["share"]),
                cpus: set(&r["cpus"]),
                widened: r["widened"].as_str().map(str::to_string),
                nic: nic.is_object().then(|| {
                    let s = |k: &str| nic[k].as_str().unwrap().to_string();
                    (s("name"), s("link"))
                }),
            }
        })
        .collect()
}

fn set_of(v: &[usize]) -> BTreeSet<usize> {
    v.iter().copied().collect()
}

/// Every rank's share is torchrun's set for its GPU, its block `per_rank` CPUs inside it, no
/// two blocks share a CPU; where `whole`, each block is its whole share.
fn check(
    fixture: &str,
    mode: &str,
    per_rank: usize,
    gpus: usize,
    torchrun: impl Fn(usize) -> BTreeSet<usize>,
    whole: bool,
) {
    let ranks = ranks(fixture, per_rank * gpus, mode, &[]);
    assert_eq!(ranks.len(), gpus, "{fixture} {mode}: one rank a GPU");
    let mut seen = BTreeSet::new();
    for (r, rank) in ranks.iter().enumerate() {
        let what = format!("{fixture} {mode} rank {r}");
        assert_eq!(rank.gpu, r, "{what}: GPU = local rank");
        assert_eq!(rank.share, torchrun(r), "{what}: torchrun's set");
        assert_eq!(rank.cpus.len(), per_rank, "{what}");
        assert!(rank.cpus.is_subset(&rank.share), "{what}: {:?}", rank.cpus);
        assert_eq!(rank.widened, None, "{what}");
        if whole {
            assert_eq!(rank.cpus, rank.share, "{what}");
        }
        assert!(seen.is_disjoint(&rank.cpus), "{what}: shares a CPU");
        seen.extend(&rank.cpus);
    }
}

#[test]
fn hgx_8_gpus_2_sockets_every_mode_as_torchrun() {
    const F: &str = "fake-hgx-8gpu-2s";
    // CPU c + 16t; socket and node c / 8; one L3 a socket.
    let node = |g: usize| {
        if g < 4 {
            cores(0, 7, 16)
        } else {
            cores(8, 15, 16)
        }
    };
    check(F, "node", 4, 8, node, false);
    check(F, "socket", 4, 8, node, false);
    // One cache a node: every GPU of the node gets it, as torchrun's core-complex.
    check(F, "cache", 4, 8, node, false);
    // 8 cores a node, 4 GPUs: 2 cores each, in GPU order.
    check(F, "exclusive", 4, 8, |g| cores(2 * g, 2 * g + 1, 16), true);
    // The NIC behind each GPU's switch: GPUs 2k and 2k+1 share ib<k>.
    for rank in ranks(F, 8, "node", &[]) {
        let nic = rank.nic.expect("every GPU has a NIC near it");
        assert_eq!(nic, (format!("ib{}", rank.gpu / 2), "PIX".to_string()));
    }
}

#[test]
fn grace_hopper_gpu_memory_nodes_without_cpus_change_nothing() {
    const F: &str = "fake-gh200-2node";
    let grace = |g: usize| (8 * g..8 * g + 8).collect::<BTreeSet<usize>>();
    for mode in ["node", "socket", "exclusive", "cache"] {
        check(F, mode, 8, 2, grace, true);
    }
}

#[test]
fn mi300x_nps4_four_nodes_a_socket() {
    const F: &str = "fake-mi300x-nps4";
    // CPU c + 32t; node c / 4 (GPU i on node i); socket c / 16; L3 c / 2.
    let node = |g: usize| cores(4 * g, 4 * g + 3, 32);
    check(F, "node", 8, 8, node, true);
    check(F, "exclusive", 8, 8, node, true);
    check(
        F,
        "socket",
        8,
        8,
        |g| cores(16 * (g / 4), 16 * (g / 4) + 15, 32),
        false,
    );
    // The node's first L3 (two of 4 CPUs: ties by lowest CPU).
    check(F, "cache", 4, 8, |g| cores(4 * g, 4 * g + 1, 32), true);
}

#[test]
fn gpus_without_a_node_share_the_machine_as_torchruns_node_0() {
    const F: &str = "fake-gpu-nonuma";
    // CPU c + 8t; one node; L3 c / 2. torchrun counts numa_node -1 as node 0, the machine.
    check(F, "node", 4, 4, |_| (0..16).collect(), false);
    check(F, "socket", 4, 4, |_| (0..16).collect(), false);
    check(F, "exclusive", 4, 4, |g| cores(2 * g, 2 * g + 1, 8), true);
    check(F, "cache", 4, 4, |g| cores(2 * g, 2 * g + 1, 8), true);
}

#[test]
fn ranks_outnumbering_gpus_wrap_round_them_and_a_full_share_widens() {
    const F: &str = "fake-hgx-8gpu-2s";
    // 16 ranks of 2 on 8 GPUs: rank r drives GPU r mod 8, inside its exclusive share.
    let ranks = ranks(F, 32, "exclusive", &["--per-process", "2"]);
    assert_eq!(ranks.len(), 16);
    let mut seen = BTreeSet::new();
    for (r, rank) in ranks.iter().enumerate() {
        assert_eq!(rank.gpu, r % 8);
        assert_eq!(rank.share, cores(2 * (r % 8), 2 * (r % 8) + 1, 16));
        assert!(rank.cpus.is_subset(&rank.share) && seen.is_disjoint(&rank.cpus));
        seen.extend(&rank.cpus);
    }
    // 4 ranks of 8 on GPUs 0-3 (node 0, 16 CPUs) where a share holds 4: the first two go on
    // into the node, the others (node and package full) to the machine's next best CPUs.
    let wide = self::ranks(F, 32, "exclusive", &["--per-process", "8"]);
    let tiers: Vec<Option<&str>> = wide.iter().map(|r| r.widened.as_deref()).collect();
    assert_eq!(
        tiers,
        [Some("node"), Some("node"), Some("machine"), Some("machine")]
    );
    assert!(
        wide[0]
            .cpus
            .union(&wide[1].cpus)
            .copied()
            .collect::<BTreeSet<_>>()
            == cores(0, 7, 16)
    );
}

#[test]
fn visible_devices_pick_the_gpus_and_a_uuid_falls_back_to_the_whole_run() {
    const F: &str = "fake-hgx-8gpu-2s";
    let args = ["-n", "8", "--near", "gpu:local-rank"];
    let (out, report) = run(F, &args, &[("CUDA_VISIBLE_DEVICES", "4,5,6,7")]);
    assert!(out.status.success());
    let gpus: Vec<u64> = (report["selection"]["ranks"].as_array().unwrap().iter())
        .map(|r| r["gpu"]["index"].as_u64().unwrap())
        .collect();
    assert_eq!(gpus, [4, 5, 6, 7]);
    let uuid = [(
        "CUDA_VISIBLE_DEVICES",
        "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    )];
    let (out, report) = run(F, &args, &uuid);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.contains("warning")).count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("names GPUs by UUID"), "{stderr}");
    assert!(report["selection"].get("ranks").is_none());
    let (out, _) = run(F, &args, &[("HIP_VISIBLE_DEVICES", "9")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("names GPU 9, but this machine has 8"));
}

#[test]
fn bad_uses_are_usage_errors_naming_the_value() {
    const F: &str = "fake-hgx-8gpu-2s";
    let cases: [(&[&str], &str); 6] = [
        (
            &["-n", "8", "--near", "gpu:rank"],
            "--near 'gpu:rank': expected gpu:local-rank",
        ),
        (
            &[
                "-n",
                "8",
                "--near",
                "gpu:local-rank",
                "--near-share",
                "numa",
            ],
            "--near-share 'numa': expected node, socket, exclusive or cache",
        ),
        (
            &["-n", "8", "--near-share", "node"],
            "--near-share needs --near gpu:local-rank",
        ),
        (
            &["-n", "12", "--near", "gpu:local-rank"],
            "needs -n a multiple of 8",
        ),
        (
            &["-n", "8", "--near", "gpu:local-rank", "--numa", "0"],
            "--numa with --near gpu:local-rank",
        ),
        (
            &["-n", "8", "--near", "gpu:local-rank", "--include", "0"],
            "--include with --near gpu:local-rank",
        ),
    ];
    for (args, message) in cases {
        let (out, _) = run(F, args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    let (out, _) = run(
        "fake-2gpu-2node",
        &["-n", "2", "--near", "gpu:local-rank"],
        &[],
    );
    assert!(out.status.success(), "two GPUs, one CPU each");
}
