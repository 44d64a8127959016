//! Pinning tools run inside goset: `numactl` reads its allowed CPUs from `/proc/self/status`
//! (libnuma), not through `sched_getaffinity`, so a main thread narrowed to one CPU before
//! `main()` made it refuse `--physcpubind` of the task's own CPUs ("cpu argument ... is out of
//! range") and never start its command. Such wrappers now keep the whole reservation until
//! they exec, and their command is placed.

mod common;
use common::*;
use std::path::Path;

/// Whether numactl is installed; prints the install line (fails under `CI=true`) otherwise.
fn have_numactl() -> bool {
    let found = std::process::Command::new("numactl")
        .arg("--show")
        .output()
        .is_ok();
    if !found {
        missing("numactl", "apt-get install -y numactl");
    }
    found
}

#[test]
fn numactl_inside_goset_run_runs_its_command_and_it_is_placed() {
    if !have_numactl() {
        return;
    }
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let planned = dry_run_selection(2).task_cpus;
    let cpus: Vec<String> = planned.iter().map(|c| c.to_string()).collect();
    let bind = format!("--physcpubind={}", cpus.join(","));
    let (outcome, selection) = run_under_goset(
        2,
        &[],
        Path::new("numactl"),
        &[&bind, prog.path_str(), "1"],
        &[],
    );
    check_threads(&outcome, &selection.task_cpus, 1);
}

#[test]
fn numactl_by_hand_binds_inside_the_set_and_its_command_is_placed() {
    if !have_numactl() {
        return;
    }
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let allowed = own_allowed();
    let [a, b, ..] = allowed[..] else {
        eprintln!("skipped: needs two CPUs");
        return;
    };
    // The second CPU of the set: the one the shim would not have left numactl's main thread.
    let mut cmd = by_hand("numactl", &format!("{a},{b}"));
    cmd.arg(format!("--physcpubind={b}"))
        .arg(prog.path())
        .arg("1");
    let outcome = run(cmd);
    check_threads(&outcome, &[a, b], 1);
}
