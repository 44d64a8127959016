//! Pinning tools run inside goset: `numactl` reads its allowed CPUs from `/proc/self/status`
//! (libnuma), not through `sched_getaffinity`, so a main thread narrowed to one CPU before
//! `main()` made it refuse `--physcpubind` of the task's own CPUs ("cpu argument ... is out of
//! range") and never start its command. Such wrappers now keep the whole reservation until
//! they exec, and their command is placed.

use shim_tests::*;
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

/// A binding a nested tool asks for is not kept (each thread gets its own CPU) but reported:
/// `taskset -c <cpu>` inside goset-run shows its request in the Threads table's `asked` and the
/// JSON's `asked`, beside the CPU the thread got.
#[test]
fn a_nested_binding_is_reported_with_what_the_thread_got() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let planned = dry_run_selection(2).task_cpus;
    let asked = planned[1].to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut cmd = goset_run(2, &json, &[], "taskset");
    cmd.args(["-c", &asked]).arg(prog.path()).arg("1");
    let outcome = {
        let _serial = launcher_lock();
        run(cmd)
    };
    let selection = Selection::read(&json, &outcome);
    check_threads(&outcome, &selection.task_cpus, 1);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let main = (report["threads"].as_array().unwrap().iter())
        .find(|t| t["role"] == "main")
        .unwrap_or_else(|| panic!("no main row: {report}"));
    assert_eq!(main["asked"], asked.as_str(), "{main}");
    assert_eq!(
        main["cpu"], selection.task_cpus[0],
        "placed on its slot: {main}"
    );
    assert!(
        outcome.stderr.contains(" asked "),
        "the Threads table has the column\n{}",
        outcome.stderr
    );
}
