//! goset-bench end to end: a built-in benchmark through every mode with its table,
//! JSON, CSV and SVG; the modes really pin as they say (taskset in rotation, goset-run one CPU);
//! metrics extracted from the real outputs of third-party tools (sysbench, stress-ng, openssl);
//! output drift; discarded runs; bad input.
//!
//! Needs `sysbench`, `stress-ng` and `openssl` for the third-party test (skipped without them,
//! failed under `CI=true`).

use shim_tests::*;
use std::path::Path;
use std::process::Command;

fn bench() -> Command {
    clean_command(goset_bench_bin())
}

fn json_of(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The CPUs this test may run on (its `Cpus_allowed_list`).
fn own_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = (status.lines())
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    cpulist(list)
}

/// The table: each mode's row, goset's two comparisons with their intervals, the seed.
fn check_table(out: &Outcome) {
    let table = &out.stdout;
    assert!(
        table.starts_with("matmul (MFLOP/s, higher is better)"),
        "{}",
        out.dump()
    );
    for mode in ["baseline", "taskset", "goset"] {
        assert!(
            table
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{mode} "))
                    && l.trim_end().ends_with('%')),
            "no {mode} row\n{table}"
        );
    }
    for against in ["baseline", "taskset"] {
        let line = (table.lines())
            .find(|l| l.trim_start().starts_with(&format!("goset vs {against}")))
            .unwrap_or_else(|| panic!("no comparison with {against}\n{table}"));
        assert!(line.contains("95% CI [") && line.contains("]: "), "{line}");
    }
    assert!(table.contains("bootstrap 300 resamples; seed 5"), "{table}");
}

/// The JSON: every planned run, rounds of each mode once, the warm-up round marked.
fn check_json(json: &Path) {
    let j = json_of(json);
    assert_eq!(j["experiment"]["seed"], 5);
    let runs = j["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 12, "(1 warm-up + 3) rounds x 3 modes");
    for round in 0..4 {
        let mut modes: Vec<&str> = (runs.iter())
            .filter(|r| r["round"] == round)
            .map(|r| r["mode"].as_str().unwrap())
            .collect();
        modes.sort();
        assert_eq!(modes, ["baseline", "goset", "taskset"], "round {round}");
        assert!((runs.iter())
            .filter(|r| r["round"] == round)
            .all(|r| r["warmup"] == (round == 0)));
    }
    let metric = &j["metrics"][0];
    assert_eq!(metric["key"], "matmul");
    assert_eq!(metric["better"], "higher");
    for m in metric["modes"].as_array().unwrap() {
        assert_eq!(m["summary"]["n"], 3, "{m}");
        assert!(m["summary"]["median"].as_f64().unwrap() > 0.0);
    }
    let comparisons = metric["comparisons"].as_array().unwrap();
    assert_eq!(comparisons.len(), 2);
    assert!(comparisons.iter().all(
        |c| c["resamples"] == 300 && c["low"].as_f64().unwrap() <= c["high"].as_f64().unwrap()
    ));
}

#[test]
fn a_builtin_benchmark_in_every_mode_gives_a_table_json_csv_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let (json, csv, svg) = (
        dir.path().join("r.json"),
        dir.path().join("r.csv"),
        dir.path().join("r.svg"),
    );
    let noise_cpu = own_cpus()[0];
    let _one_launcher = launcher_lock();
    let mut cmd = bench();
    cmd.args([
        "--bench", "matmul", "--runs", "3", "--warmup", "1", "--seed", "5",
    ])
    .args(["--resamples", "300", "--goset-arg=--sample=0"])
    .arg(format!("--noise={noise_cpu}:30%"))
    .arg(format!("--json={}", json.display()))
    .arg(format!("--csv={}", csv.display()))
    .arg(format!("--plot={}", svg.display()));
    let out = run(cmd);
    out.expect_code(0);
    check_table(&out);
    check_json(&json);
    // CSV: one row per run (warm-up ones included, marked).
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 13, "{csv}");
    assert_eq!(csv.lines().filter(|l| l.contains(",true,")).count(), 3);
    // The plot: an SVG naming the metric and every mode.
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    for word in ["matmul", "baseline", "taskset", "goset", "spread"] {
        assert!(svg.contains(word), "{word} not in the plot");
    }
}

#[test]
fn taskset_runs_rotate_and_goset_runs_are_pinned_to_one_cpu() {
    let cpus = own_cpus();
    if cpus.len() < 2 {
        skip_note("needs two CPUs: with one, every mode is pinned alike");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let _one_launcher = launcher_lock();
    let mut cmd = bench();
    cmd.args([
        "--runs",
        "4",
        "--seed",
        "2",
        "--match",
        "^Cpus_allowed_list$",
    ])
    .args(["--goset-arg=--sample=0"])
    .arg(format!("--json={}", json.display()))
    .args(["--", "grep", "Cpus_allowed_list", "/proc/self/status"]);
    run(cmd).expect_code(0);
    let j = json_of(&json);
    let modes = j["metrics"][0]["modes"].as_array().unwrap();
    let values = |mode: &str| -> Vec<usize> {
        (modes.iter())
            .find(|m| m["mode"] == mode)
            .map(|m| {
                (m["values"].as_array().unwrap().iter())
                    .map(|v| v.as_f64().unwrap() as usize)
                    .collect()
            })
            .unwrap_or_default()
    };
    // Bare, the mask is every CPU (a list, not one number): no value.
    assert!(values("baseline").is_empty(), "{modes:?}");
    let rotation: Vec<usize> = (0..4).map(|k| cpus[k % cpus.len()]).collect();
    assert_eq!(values("taskset"), rotation);
    let goset = values("goset");
    assert_eq!(
        goset.len(),
        4,
        "each goset run pinned to one CPU: {modes:?}"
    );
    assert!(goset.iter().all(|c| cpus.contains(c)));
}

/// goset-bench --dump of a real tool's output.
fn dump(args: &[&str]) -> String {
    let mut cmd = bench();
    cmd.arg("--dump").args(args);
    let out = run(cmd);
    out.expect_code(0);
    out.stdout
}

/// The value of `key` in a `--dump`, with its unit and direction.
fn dumped<'a>(dump: &'a str, key: &str) -> Option<Vec<&'a str>> {
    (dump.lines())
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .find(|f| f[0] == key)
}

#[test]
fn metrics_are_read_from_real_tools_output() {
    for (tool, install) in [
        ("sysbench", "apt-get install sysbench"),
        ("stress-ng", "apt-get install stress-ng"),
        ("openssl", "apt-get install openssl"),
    ] {
        if Command::new(tool).arg("--version").output().is_err() {
            missing(tool, install);
            return;
        }
    }
    let d = dump(&["--", "sysbench", "cpu", "--time=1", "run"]);
    let eps = dumped(&d, "CPU speed events per second").unwrap_or_else(|| panic!("{d}"));
    assert!(
        eps[1].parse::<f64>().unwrap() > 0.0 && eps[3] == "Higher",
        "{eps:?}"
    );
    let latency = dumped(&d, "Latency avg").unwrap_or_else(|| panic!("{d}"));
    assert_eq!(
        (latency[2], latency[3]),
        ("ms", "Lower"),
        "the heading's unit"
    );
    let total = dumped(&d, "General statistics total time").unwrap();
    assert_eq!(total[2], "s");
    // stress-ng writes its metrics to stderr, on log lines with a pid in brackets.
    let d = dump(&[
        "--from",
        "stderr",
        "--",
        "stress-ng",
        "--cpu",
        "1",
        "--timeout",
        "1",
        "--metrics-brief",
    ]);
    let rows: Vec<&str> = (d.lines())
        .filter(|l| l.starts_with("stress-ng metrc cpu#"))
        .collect();
    assert_eq!(
        rows.len(),
        6,
        "bogo ops, real, usr, sys time, two rates\n{d}"
    );
    assert!(!d.contains('['), "the pid is no part of a key\n{d}");
    let d = dump(&[
        "--", "openssl", "speed", "-seconds", "1", "-bytes", "64", "sha256",
    ]);
    let sha = dumped(&d, "sha256").unwrap_or_else(|| panic!("{d}"));
    assert!(
        sha[1].parse::<f64>().unwrap() > 0.0 && sha[2] == "k",
        "{sha:?}"
    );
}

#[test]
fn an_output_that_changes_its_lines_between_runs_is_drift() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("n");
    let script = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo \"x: $n ms\"; \
         if [ $n -gt 1 ]; then echo 'errors: 5'; fi",
        c = counter.display()
    );
    let mut cmd = bench();
    cmd.args([
        "--modes", "baseline", "--runs", "3", "--seed", "1", "--", "sh", "-c",
    ])
    .arg(script);
    let out = run(cmd);
    out.expect_code(0);
    let drift: Vec<&str> = (out.stderr.lines())
        .filter(|l| l.contains("output drift"))
        .collect();
    assert_eq!(drift.len(), 2, "{}", out.dump());
    assert!(drift[0].contains("2 numbers, were 1"), "{drift:?}");
    assert!(
        out.stdout.starts_with("x (ms, lower is better)"),
        "{}",
        out.dump()
    );
}

#[test]
fn failed_runs_are_discarded_and_bad_input_changes_nothing() {
    let mut cmd = bench();
    cmd.args(["--modes", "baseline", "--runs", "2", "--seed", "1", "--"])
        .args(["sh", "-c", "echo 'x: 1'; echo broke >&2; exit 3"]);
    let out = run(cmd);
    out.expect_code(1);
    assert_eq!(
        out.stderr
            .matches("discarded: exit status 3: broke")
            .count(),
        2,
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("no metric to compare"));
    for (args, code, says) in [
        (&["--bench", "nope"][..], 2, "--bench nope: not a benchmark"),
        (
            &["--noise", "0:150%", "--bench", "jitter"],
            2,
            "--noise 0:150%",
        ),
        (
            &["--settle", "soon", "--bench", "jitter"],
            2,
            "--settle soon",
        ),
        (
            &["--noise-at", "2s", "--bench", "jitter"],
            2,
            "--noise-at needs --noise",
        ),
        (
            &["--noise", "0", "--noise-at", "later", "--bench", "jitter"],
            2,
            "--noise-at later",
        ),
        (&["--", "/nonexistent/tool"], 127, "command not found"),
        (&["--", "/etc/passwd"], 126, "/etc/passwd"),
        (&[], 2, "nothing to measure"),
    ] {
        let mut cmd = bench();
        cmd.args(args);
        let out = run(cmd);
        out.expect_code(code);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.dump());
        assert!(out.stderr.contains(says), "{args:?}: {}", out.dump());
        assert!(out.stdout.is_empty());
    }
}
