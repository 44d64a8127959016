//! Dynamic musl programs under goset-run. musl's loader cannot load libgoset.so (it needs
//! glibc-only symbols) and treats a preload it cannot load as fatal, so goset-run names the
//! shim `<run dir>/lib/$PLATFORM/libgoset.so`: glibc's loader expands `$PLATFORM`, musl's finds
//! no such file and skips it. The program runs and the housekeeper places its busy threads,
//! started directly or exec'd by a glibc shell that has the shim loaded.

use shim_tests::*;
use std::path::{Path, PathBuf};

/// Two busy threads, a 30 s deadline, and the placement held for 0.2 s (see
/// `programs/placed_threads.c`).
const BUSY_ARGS: [&str; 3] = ["2", "30", "0.2"];

/// How the program is started below goset-run.
#[derive(Debug, Clone, Copy)]
enum Start {
    /// As goset-run's own child.
    Direct,
    /// By `sh -c`, which execs it (the program is `$0`, its arguments `$1...`).
    Shell,
}

/// Runs the musl build of `placed_threads` under `goset-run -n 2` as `start` says and checks
/// that each busy thread held a planned CPU of its own, placed by the housekeeper.
fn busy_threads_placed(start: Start) {
    let build = Build::new();
    let Some(prog) = build.musl("placed_threads.c", "placed_threads") else {
        return;
    };
    if own_allowed().len() < 2 {
        skip_note("needs 2 CPUs");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("report.json");
    let mut cmd = match start {
        Start::Direct => goset_run(2, &json, &[], &prog),
        Start::Shell => {
            let mut cmd = goset_run(2, &json, &[], "sh");
            cmd.args(["-c", r#""$0" "$@""#]).arg(&prog);
            cmd
        }
    };
    cmd.args(BUSY_ARGS);
    let _serial = launcher_lock();
    let outcome = run(cmd);
    outcome.expect_code(0);
    let selection = Selection::read(&json, &outcome);
    let reports = reports(&outcome);
    assert_eq!(
        with_role(&reports, "busy").len(),
        2,
        "both busy threads report\n{}",
        outcome.dump()
    );
    // Each held a planned CPU of its own for the hold (the program's copy, taken at one
    // moment): what they report later may come after the housekeeper moved one as they stop.
    let held: Vec<usize> = (with_role(&reports, "busy").iter())
        .map(|r| r.field("held").parse().expect("held a CPU"))
        .collect();
    let mut distinct = held.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() == held.len() && held.iter().all(|c| selection.task_cpus.contains(c)),
        "busy threads held {held:?}, plan {:?}\n{}",
        selection.task_cpus,
        outcome.dump()
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for r in &reports {
        let entry = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == r.tid)
            .unwrap_or_else(|| panic!("tid {} not in the report\n{}", r.tid, outcome.dump()));
        assert_eq!(entry["placed_by"], "housekeeper", "{entry}\n{}", r.line);
    }
    if let Start::Direct = start {
        let note = format!("goset-run: {}: loaded by /", prog.display());
        assert!(
            outcome.stderr.contains(&note) && outcome.stderr.contains("musl"),
            "goset-run names the musl program once\n{}",
            outcome.dump()
        );
    }
}

#[test]
fn unplaced_threads_time_out() {
    // The check above can fail: without goset the threads share the process mask until the
    // deadline.
    let build = Build::new();
    let Some(prog): Option<PathBuf> = build.musl("placed_threads.c", "placed_threads") else {
        return;
    };
    if own_allowed().len() < 2 {
        skip_note("needs 2 CPUs");
        return;
    }
    let mut cmd = clean_command(Path::new(&prog));
    cmd.args(["2", "0.5"]);
    run(cmd).expect_code(3);
}

#[test]
fn musl_program_runs_with_its_busy_threads_on_their_own_cpus() {
    busy_threads_placed(Start::Direct);
}

#[test]
fn musl_program_exec_d_by_a_shell_runs_with_its_busy_threads_on_their_own_cpus() {
    busy_threads_placed(Start::Shell);
}
