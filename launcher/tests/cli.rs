//! The command-line surface of `goset` and `goset-run`: help, version, one-line usage errors,
//! and which stream each output goes to.

mod common;

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> std::process::Output {
    Command::new(common::bin(bin)).args(args).output().unwrap()
}

#[test]
fn help_and_version_go_to_stdout_and_exit_0() {
    for bin in ["goset", "goset-run"] {
        let help = run(bin, &["--help"]);
        assert!(help.status.success());
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("--include"),
            "{bin} --help"
        );
        let version = run(bin, &["--version"]);
        assert_eq!(
            String::from_utf8_lossy(&version.stdout),
            format!("{bin} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn an_unknown_flag_is_one_line_and_exit_2() {
    let out = run("goset-run", &["--frobnicate", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("goset-run: unexpected argument '--frobnicate'"),
        "{err}"
    );
    let out = run("goset-run", &["-n", "x", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'x'"));
    let out = run("goset-run", &["-n", "1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "goset-run: no command given: put it after -- (or use --dry-run)\n"
    );
}

#[test]
fn goset_runs_a_command_like_goset_run() {
    let out = run(
        "goset",
        &[
            "-n",
            "1",
            "--sample",
            "0",
            "--quiet",
            "--",
            "sh",
            "-c",
            "echo hello; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.is_empty() || err.starts_with("Errors\n"),
        "--quiet prints nothing but errors: {err}"
    );
}

#[test]
fn diagnostics_go_to_stderr_and_json_to_stdout() {
    let root = common::fixture_root("32intel64-2p8co2t+8ve");
    let root = root.to_str().unwrap();
    let out = run("goset", &["--fsroot", root]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("32 online"), "{text}");
    assert!(
        text.contains("2 packages, 16 cores, up to 2 threads per core, 2 NUMA nodes"),
        "{text}"
    );

    let out = run("goset", &["topology", "--json", "--fsroot", root]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu0 = &v["cpus"][0];
    assert_eq!(cpu0["cpu"], 0);
    assert_eq!(cpu0["siblings"], serde_json::json!([0, 16]));
    assert_eq!(cpu0["node"], 0);

    let out = run("goset", &["--json", "-"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["cgroups"]["mounts"].is_array());
    assert!(v["summary"]["online"].as_u64().unwrap() >= 1);
}

#[test]
fn a_dry_run_never_starts_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = run(
        "goset-run",
        &[
            "--dry-run",
            "--sample",
            "0",
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    assert!(out.status.success());
    assert!(!marker.exists());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Selection"));
}
