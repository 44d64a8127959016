//! goset-run's placement options as a program sees them: `--main-on-housekeeper`, `--skip`,
//! and that the placement log (`--log FILE`, `GOSET_LOG=stderr`) never reaches stdout.

use shim_tests::*;

#[test]
fn main_on_housekeeper_leaves_the_slots_to_workers() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let run = prog.run(Mode::GosetRun(2, &["--main-on-housekeeper"]), &["2"], &[]);
    run.outcome.expect_code(0);
    let reports = run.reports();
    let main = one(&reports, "main", 0);
    assert_eq!(
        main.single_cpu(),
        run.housekeeper(),
        "the main thread runs on the housekeeper: {}",
        main.line
    );
    let workers = with_role(&reports, "worker");
    assert_eq!(workers.len(), 2, "{}", run.outcome.dump());
    assert_distinct(workers.iter().copied(), &run.plan);
    assert_eq!(
        one(&reports, "worker", 0).single_cpu(),
        run.plan[0],
        "the first worker takes slot 0"
    );
}

#[test]
fn skipped_thread_takes_no_slot() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    // Bit 0: the first thread created after the main thread takes no slot.
    let run = prog.run(Mode::GosetRun(2, &["--skip", "0x1"]), &["2"], &[]);
    run.outcome.expect_code(0);
    let reports = run.reports();
    assert_eq!(
        one(&reports, "main", 0).single_cpu(),
        run.plan[0],
        "the main thread holds slot 0"
    );
    let skipped = one(&reports, "worker", 0);
    assert_eq!(
        skipped.single_cpu(),
        run.housekeeper(),
        "the skipped thread runs on the housekeeper: {}",
        skipped.line
    );
    let next = one(&reports, "worker", 1);
    assert_eq!(
        next.single_cpu(),
        run.plan[1],
        "the next thread takes the free slot 1: {}",
        next.line
    );
}

#[test]
fn placement_log_file_stays_off_stdout() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("placement.log");
    let log_arg = log.to_str().expect("UTF-8 temp path");
    let run = prog.run(Mode::GosetRun(2, &["--log", log_arg]), &["1"], &[]);
    run.outcome.expect_code(0);
    assert_distinct(&run.reports(), &run.plan);
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("--log {log_arg} was not written: {e}"));
    assert!(!text.trim().is_empty(), "--log {log_arg} is empty");
}

#[test]
fn log_to_stderr_stays_off_stdout_by_hand() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let run = prog.run(Mode::ByHand("1,0"), &["3"], &[("GOSET_LOG", "stderr")]);
    run.outcome.expect_code(0);
    assert_even(&run.reports(), &run.plan);
    assert!(
        !run.outcome.stderr.trim().is_empty(),
        "GOSET_LOG=stderr logged nothing\n{}",
        run.outcome.dump()
    );
}
