//! goset-run's placement options as a program sees them: `--main-on-housekeeper`, `--skip`,
//! and that the placement log (`--log FILE`, `GOSET_LOG=stderr`) never reaches stdout.

mod common;
use common::*;

#[test]
fn main_on_housekeeper_leaves_the_slots_to_workers() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let (outcome, selection) = run_under_goset(2, &["--main-on-housekeeper"], &prog, &["2"], &[]);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let housekeeper = selection
        .housekeeper
        .expect("the selection names a housekeeper");
    let main = one(&reports, "main", 0);
    assert_eq!(
        main.single_cpu(),
        housekeeper,
        "the main thread runs on the housekeeper: {}",
        main.line
    );
    let workers = with_role(&reports, "worker");
    assert_eq!(workers.len(), 2, "{}", outcome.dump());
    assert_distinct(workers.iter().copied(), &selection.task_cpus);
    assert_eq!(
        one(&reports, "worker", 0).single_cpu(),
        selection.task_cpus[0],
        "the first worker takes slot 0"
    );
}

#[test]
fn skipped_thread_takes_no_slot() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    // Bit 0: the first thread created after the main thread takes no slot.
    let (outcome, selection) = run_under_goset(2, &["--skip", "0x1"], &prog, &["2"], &[]);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let housekeeper = selection
        .housekeeper
        .expect("the selection names a housekeeper");
    let plan = &selection.task_cpus;
    assert_eq!(
        one(&reports, "main", 0).single_cpu(),
        plan[0],
        "the main thread holds slot 0"
    );
    let skipped = one(&reports, "worker", 0);
    assert_eq!(
        skipped.single_cpu(),
        housekeeper,
        "the skipped thread runs on the housekeeper: {}",
        skipped.line
    );
    let next = one(&reports, "worker", 1);
    assert_eq!(
        next.single_cpu(),
        plan[1],
        "the next thread takes the free slot 1: {}",
        next.line
    );
}

#[test]
fn placement_log_file_stays_off_stdout() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("placement.log");
    let log_arg = log.to_str().expect("UTF-8 temp path");
    let (outcome, selection) = run_under_goset(2, &["--log", log_arg], &prog, &["1"], &[]);
    outcome.expect_code(0);
    assert_distinct(&reports(&outcome), &selection.task_cpus);
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("--log {log_arg} was not written: {e}"));
    assert!(!text.trim().is_empty(), "--log {log_arg} is empty");
}

#[test]
fn log_to_stderr_stays_off_stdout_by_hand() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let mut cmd = by_hand(&prog, "1,0");
    cmd.env("GOSET_LOG", "stderr").arg("3");
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert_even(&reports(&outcome), &[1, 0]);
    assert!(
        !outcome.stderr.trim().is_empty(),
        "GOSET_LOG=stderr logged nothing\n{}",
        outcome.dump()
    );
}
