//! The shim never writes into a descriptor it does not own (`programs/descriptors.c`): a
//! program that closes every descriptor and opens its own file on the lowest number, one that
//! puts its file on every descriptor number the shim might hold, a shell's `exec 3>file`, and
//! `GOSET_LOG=stderr` with fd 2 reopened onto a file: the program's file holds only what the
//! program wrote, and the placement log still has every decision. goset-run itself places and
//! reads a task under descriptor limits down to 12, and below what it can work with says so in
//! a line naming the limit.

use serde_json::Value;
use shim_tests::*;
use std::os::unix::process::CommandExt;
use std::path::Path;

/// What the program writes into its own file.
const OWN_TEXT: &str = "before\nafter\n";

fn file_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The JSON records in `text` (every line must be one).
fn records(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a record ({e}): {l}")))
        .collect()
}

fn has(records: &[Value], event: &str, tid: u32) -> bool {
    records
        .iter()
        .any(|r| r["event"] == event && r["tid"].as_u64() == Some(tid as u64))
}

/// The log has both workers' births and requests, and the main thread's request at the end.
fn assert_complete(log: &str, reports: &[Report], how: &str) {
    let recs = records(log);
    let workers = with_role(reports, "worker");
    assert_eq!(workers.len(), 2, "{how}: two workers reported");
    for w in workers {
        for event in ["create", "set"] {
            assert!(
                has(&recs, event, w.tid),
                "{how}: no '{event}' record for worker {}:\n{log}",
                w.tid
            );
        }
    }
    let main = one(reports, "main", 0);
    assert!(
        has(&recs, "set", main.tid),
        "{how}: no 'set' record for the main thread:\n{log}"
    );
}

/// Sets `RLIMIT_NOFILE` (soft and hard) to `n` in `cmd`'s process before it execs.
fn limit_descriptors(cmd: &mut std::process::Command, n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Runs `descriptors <mode> FILE` by hand with the log in a file; `limit`: RLIMIT_NOFILE.
fn by_hand_run(prog: &Program, mode: &str, limit: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let (own, log) = (dir.path().join("own.txt"), dir.path().join("placement.log"));
    let mut cmd = by_hand(prog.path(), "0,1");
    cmd.arg(mode).arg(&own).env("GOSET_LOG", &log);
    if let Some(n) = limit {
        limit_descriptors(&mut cmd, n);
    }
    let outcome = run(cmd);
    outcome.expect_code(0);
    let how = format!("{mode} by hand (RLIMIT_NOFILE {limit:?})");
    assert_eq!(file_text(&own), OWN_TEXT, "{how}: the program's own file");
    let reports = reports(&outcome);
    if mode == "takeover" {
        let taken = one(&reports, "main", 0).field("taken");
        assert_ne!(taken, "0", "{how}: the shim held no descriptor to take");
    }
    assert_complete(&file_text(&log), &reports, &how);
}

#[test]
fn a_program_that_closes_every_descriptor_keeps_its_file() {
    let Some(prog) = Program::c("descriptors.c") else {
        return;
    };
    by_hand_run(&prog, "closeall", None);
}

#[test]
fn a_program_that_takes_every_descriptor_number_keeps_its_file() {
    let Some(prog) = Program::c("descriptors.c") else {
        return;
    };
    by_hand_run(&prog, "takeover", None);
    // Below the shim's usual floor of 512, its descriptor is still the log's own.
    by_hand_run(&prog, "takeover", Some(64));
    by_hand_run(&prog, "closeall", Some(64));
}

#[test]
fn under_goset_run_the_programs_file_stays_its_own() {
    let Some(prog) = Program::c("descriptors.c") else {
        return;
    };
    for mode in ["closeall", "takeover"] {
        let dir = tempfile::tempdir().unwrap();
        let (own, log) = (dir.path().join("own.txt"), dir.path().join("placement.log"));
        let log_arg = log.to_str().expect("UTF-8 temp path");
        let own_arg = own.to_str().expect("UTF-8 temp path");
        let run = prog.run(
            Mode::GosetRun(2, &["--log", log_arg]),
            &[mode, own_arg],
            &[],
        );
        run.outcome.expect_code(0);
        let how = format!("{mode} under goset-run");
        assert_eq!(file_text(&own), OWN_TEXT, "{how}: the program's own file");
        assert_complete(&file_text(&log), &run.reports(), &how);
    }
}

#[test]
fn goset_run_places_and_reads_the_task_under_low_descriptor_limits() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    if !two_online_cpus() {
        return;
    }
    // 12 is the lowest at which the report still reads every thread (at 9 the task still runs
    // placed, its telemetry n/a and the reason in Errors; at 8 goset-run cannot start it).
    for limit in [512, 64, 16, 12] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("report.json");
        let mut cmd = goset_run(2, &json, &[], prog.path());
        cmd.arg("1");
        limit_descriptors(&mut cmd, limit);
        let outcome = run(cmd);
        let selection = Selection::read(&json, &outcome);
        check_threads(&outcome, &selection.task_cpus, 1);
        let report = std::fs::read_to_string(&json).unwrap();
        assert!(
            !report.contains("Too many open files"),
            "ulimit -n {limit}: {report}"
        );
    }
}

#[test]
fn too_low_a_descriptor_limit_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (json, marker) = (dir.path().join("report.json"), dir.path().join("ran"));
    for limit in [4, 6, 8] {
        let mut cmd = goset_run(1, &json, &[], "touch");
        cmd.arg(&marker);
        limit_descriptors(&mut cmd, limit);
        let outcome = run(cmd);
        outcome.expect_code(1);
        let lines: Vec<&str> = outcome.stderr.lines().collect();
        let named = format!("Too many open files (os error 24); the descriptor limit (ulimit -n) {limit} is too low");
        assert!(
            lines.len() == 1 && lines[0].contains(&named),
            "{}",
            outcome.dump()
        );
        assert!(!marker.exists(), "the task ran at ulimit -n {limit}");
    }
}

#[test]
fn a_shells_exec_3_keeps_its_file() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (own, log) = (dir.path().join("own.txt"), dir.path().join("placement.log"));
    let mut cmd = by_hand("sh", "0,1");
    cmd.arg("-c")
        .arg(r#"exec 3>"$0"; echo before >&3; "$1" 2; echo after >&3"#)
        .arg(&own)
        .arg(prog.path())
        .env("GOSET_LOG", &log);
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert_eq!(file_text(&own), OWN_TEXT, "the shell's fd 3 file");
    let recs = records(&file_text(&log));
    let reports = reports(&outcome);
    let workers = with_role(&reports, "worker");
    assert_eq!(workers.len(), 2, "{}", outcome.dump());
    for w in workers {
        assert!(
            has(&recs, "create", w.tid),
            "no create record for {}",
            w.line
        );
    }
}

#[test]
fn a_log_on_stderr_does_not_follow_fd_2_into_a_file() {
    let Some(prog) = Program::c("descriptors.c") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("own.txt");
    let mut cmd = by_hand(prog.path(), "0,1");
    cmd.arg("stderr").arg(&own).env("GOSET_LOG", "stderr");
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert_eq!(file_text(&own), OWN_TEXT, "the program's fd 2 file");
    // The records went to the stderr the program started with.
    assert_complete(&outcome.stderr, &reports(&outcome), "GOSET_LOG=stderr");

    // The program also takes the shim's copy of stderr: logging stops, and the warning about it
    // must not land in the file on fd 2 either.
    let own = dir.path().join("own2.txt");
    let mut cmd = by_hand(prog.path(), "0,1");
    cmd.arg("stderr_takeover")
        .arg(&own)
        .env("GOSET_LOG", "stderr");
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert_eq!(file_text(&own), OWN_TEXT, "the program's fd 2 file");
    let reports = reports(&outcome);
    assert_ne!(one(&reports, "main", 0).field("taken"), "0");
    let recs = records(&outcome.stderr);
    assert!(
        recs.iter().any(|r| r["event"] == "init"),
        "the records before the takeover reached stderr\n{}",
        outcome.dump()
    );
}
