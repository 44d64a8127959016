//! C pthreads: busy threads, as many as there are slots and more, each on its planned CPU.

mod common;
use common::*;

/// Runs `pthreads <workers>` and checks the main thread and every worker against `plan`.
fn check(outcome: &Outcome, plan: &[usize], workers: usize) {
    outcome.expect_code(0);
    let reports = reports(outcome);
    assert_eq!(
        reports.len(),
        workers + 1,
        "one report per thread\n{}",
        outcome.dump()
    );
    let main = one(&reports, "main", 0);
    assert_eq!(
        main.single_cpu(),
        plan[0],
        "the main thread holds slot 0: {}",
        main.line
    );
    if workers < plan.len() {
        assert_distinct(&reports, plan);
    } else {
        assert_even(&reports, plan);
    }
}

#[test]
fn as_many_threads_as_slots_by_hand() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let mut cmd = by_hand(&prog, "1,0");
    cmd.arg("1");
    check(&run(cmd), &[1, 0], 1);
}

#[test]
fn more_threads_than_slots_by_hand() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    for workers in [2, 3, 6] {
        let mut cmd = by_hand(&prog, "1,0");
        cmd.arg(workers.to_string());
        check(&run(cmd), &[1, 0], workers);
    }
}

#[test]
fn one_slot_by_hand() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let mut cmd = by_hand(&prog, "0");
    cmd.arg("2");
    check(&run(cmd), &[0], 2);
}

#[test]
fn as_many_threads_as_slots_under_goset_run() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let (outcome, selection) = run_under_goset(2, &[], &prog, &["1"], &[]);
    check(&outcome, &selection.task_cpus, 1);
}

#[test]
fn more_threads_than_slots_under_goset_run() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let (outcome, selection) = run_under_goset(2, &[], &prog, &["3"], &[]);
    check(&outcome, &selection.task_cpus, 3);
}

#[test]
fn exit_status_passes_through_goset_run() {
    let build = Build::new();
    let Some(prog) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let (outcome, selection) = run_under_goset(2, &[], &prog, &["1", "3"], &[]);
    outcome.expect_code(3);
    assert_distinct(&reports(&outcome), &selection.task_cpus);
}
