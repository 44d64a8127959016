//! Unit tests of the run options: parsing each flag's value and the checks across flags.

use super::*;
use crate::cli::{normalize_args, RunCli};
use clap::Parser;

fn parse(args: &[&str]) -> std::result::Result<RunOptions, String> {
    let cli = RunCli::try_parse_from(normalize_args(args.iter().map(OsString::from)))
        .map_err(|e| e.to_string())?;
    cli.run.validate().map_err(|e| e.to_string())
}

#[test]
fn validates_values_with_one_clear_message() {
    let o = parse(&[
        "goset-run",
        "-n",
        "3",
        "--numa",
        "-1",
        "-exclude",
        "0-4:2",
        "--",
        "true",
    ])
    .unwrap();
    assert_eq!(o.select.numa, NumaChoice::Auto);
    let plain = crate::topology::Topology::default();
    assert_eq!(o.exclude.resolve(&plain).unwrap(), vec![0, 2, 4]);
    assert_eq!(
        parse(&["goset-run", "--numa", "-2", "--dry-run"])
            .unwrap()
            .select
            .numa,
        NumaChoice::Off
    );
    assert_eq!(
        parse(&["goset-run", "--include", "1-x", "--", "true"]).unwrap_err(),
        "--include '1-x': expected a cpu list such as 0,2-4 or 0-10:2 (numbers, ranges, strides)"
    );
    assert_eq!(
        parse(&["goset-run", "--numa", "x", "--dry-run"]).unwrap_err(),
        "--numa 'x': expected a node number, auto (-1) or off (-2)"
    );
    assert!(parse(&["goset-run", "-n", "1"])
        .unwrap_err()
        .starts_with("no command given"));
    assert_eq!(
        parse(&["goset-run", "--skip", "0x3", "--", "x"])
            .unwrap()
            .skip,
        3
    );
    assert!(parse(&["goset-run", "--skip", "zz", "--", "x"]).is_err());
    for conflict in [["--no-adapt", "--adapt"], ["--no-adapt", "--spare=1"]] {
        let mut args = vec!["goset-run"];
        args.extend(conflict);
        args.extend(["--", "x"]);
        let e = parse(&args).unwrap_err();
        assert!(e.starts_with("--no-adapt with --"), "{e}");
    }
    let moves = |args: &[&str]| parse(args).unwrap().noise_moves;
    assert_eq!(moves(&["goset-run", "--", "x"]), NoiseMoves::Off);
    assert_eq!(
        moves(&["goset-run", "-adapt", "--", "x"]),
        NoiseMoves::Unused
    );
    assert_eq!(
        moves(&["goset-run", "--spare", "2", "--adapt", "--", "x"]),
        NoiseMoves::Spares
    );
    assert!(parse(&["goset-run", "--fsroot", "/tmp", "--", "x"]).is_err());
    assert!(
        parse(&["goset-run", "--fsroot", "/", "--", "x"]).is_ok(),
        "/ is the live machine"
    );
    assert!(
        parse(&["goset-run", "--fsroot", "/etc/passwd", "--dry-run"])
            .unwrap_err()
            .starts_with("--fsroot /etc/passwd: not a directory")
    );
    assert!(
        parse(&["goset-run", "-steer", "-cgroup", "--", "x"])
            .unwrap()
            .isolation
            .steer
    );
    assert!(parse(&["goset-run", "-fence", "--", "x"])
        .unwrap_err()
        .starts_with("--fence needs --cgroup"));
}

#[test]
fn near_binds_its_node_by_default_and_expressions_are_checked_before_the_machine() {
    let numa = |args: &[&str]| parse(args).unwrap().select.numa;
    assert_eq!(numa(&["goset-run", "--dry-run"]), NumaChoice::Off);
    assert_eq!(
        numa(&["goset-run", "--near", "gpu0", "--dry-run"]),
        NumaChoice::Near
    );
    assert_eq!(
        numa(&["goset-run", "--near", "gpu0", "--numa", "auto", "--dry-run"]),
        NumaChoice::Auto
    );
    assert_eq!(
        numa(&["goset-run", "--near", "eth0", "--numa", "off", "--dry-run"]),
        NumaChoice::Off
    );
    assert_eq!(
        numa(&["goset-run", "--near=eth0", "-numa", "1", "--dry-run"]),
        NumaChoice::Node(1)
    );
    let o = parse(&["goset-run", "--near", "eth0", "--dry-run"]).unwrap();
    assert_eq!(o.near.as_deref(), Some("eth0"));
    let e = parse(&["goset-run", "--exclude", "S0:0@T1:0", "--dry-run"]).unwrap_err();
    assert!(
        e.starts_with("--exclude 'S0:0@T1:0': 'T1:0': expected a cpu list (0,2-4 or 0-10:2) or a likwid expression"),
        "{e}"
    );
    assert!(parse(&["goset-run", "--include", "E:S0:4:1:2@N:0", "--dry-run"]).is_ok());
}

#[test]
fn placement_mask_keeps_selection_and_isolation_but_refuses_thread_moves() {
    assert_eq!(
        parse(&["goset-run", "--", "x"]).unwrap().placement,
        PlacementMode::Thread
    );
    let o = parse(&[
        "goset-run",
        "--placement",
        "mask",
        "-n",
        "2",
        "--include=1",
        "--numa=auto",
        "--cgroup",
        "--steer",
        "--fence",
        "--no-adapt",
        "--",
        "x",
    ])
    .unwrap();
    assert_eq!(o.placement, PlacementMode::Mask);
    assert_eq!(
        (
            o.include.resolve(&Default::default()).unwrap(),
            o.isolation.fence
        ),
        (vec![1], true)
    );
    assert_eq!(
        parse(&["goset-run", "--placement=thread", "--dry-run"])
            .unwrap()
            .placement,
        PlacementMode::Thread
    );
    for (flag, args) in [
        ("--skip", &["--skip", "0x1"][..]),
        ("--main-on-housekeeper", &["--main-on-housekeeper"]),
        ("--spare", &["--spare", "1"]),
        ("--adapt", &["--adapt"]),
        ("--log", &["--log", "/tmp/x.log"]),
    ] {
        let mut all = vec!["goset-run", "--placement", "mask"];
        all.extend(args);
        all.extend(["--", "x"]);
        let e = parse(&all).unwrap_err();
        assert_eq!(
            e,
            format!(
                "{flag} with --placement mask: one shared mask places and moves no thread \
                 (and logs no placement); drop {flag}, or use --placement thread"
            )
        );
        // The same flags are fine with per-thread placement.
        all.drain(1..3);
        assert!(parse(&all).is_ok(), "{all:?}");
    }
    // A bad mode is clap's usage error (exit 2), naming the accepted values.
    let e = RunCli::try_parse_from(["goset-run", "--placement", "core", "--", "x"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    assert!(e.to_string().contains("thread, mask"), "{e}");
    assert_eq!(e.exit_code(), 2);
    // New: no Go spelling with one dash.
    assert!(RunCli::try_parse_from(normalize_args(
        ["goset-run", "-placement", "mask", "--", "x"].map(OsString::from)
    ))
    .is_err());
}

#[test]
fn probe_is_bounded_and_only_for_this_machine() {
    let o = parse(&["goset-run", "--probe", "500", "--", "true"]).unwrap();
    assert_eq!(o.probe, Duration::from_millis(500));
    assert!(parse(&["goset-run", "--", "true"]).unwrap().probe.is_zero());
    assert_eq!(
        parse(&["goset-run", "--probe", "10001", "--", "true"]).unwrap_err(),
        "--probe 10001: at most 10000 ms (each candidate CPU is kept busy that long)"
    );
    let dump = tempfile::TempDir::new().unwrap();
    let dir = dump.path().to_str().unwrap();
    let e = parse(&["goset-run", "--probe", "100", "--fsroot", dir, "--dry-run"]).unwrap_err();
    assert_eq!(
        e,
        format!("--probe 100 with --fsroot {dir}: the probe measures this machine, not a dump")
    );
}
