//! Rust `std::thread`: a program built with rustc, its threads each on a planned CPU.

mod common;
use common::*;

fn check(outcome: &Outcome, plan: &[usize], workers: usize) {
    outcome.expect_code(0);
    let reports = reports(outcome);
    assert_eq!(
        reports.len(),
        workers + 1,
        "one report per thread\n{}",
        outcome.dump()
    );
    assert_eq!(
        one(&reports, "main", 0).single_cpu(),
        plan[0],
        "the main thread holds slot 0"
    );
    if workers < plan.len() {
        assert_distinct(&reports, plan);
    } else {
        assert_even(&reports, plan);
    }
}

#[test]
fn std_threads_by_hand() {
    let build = Build::new();
    let prog = build.rust("rust_threads.rs", "rust_threads");
    for workers in [1, 3] {
        let mut cmd = by_hand(&prog, "1,0");
        cmd.arg(workers.to_string());
        check(&run(cmd), &[1, 0], workers);
    }
}

#[test]
fn std_threads_under_goset_run() {
    let build = Build::new();
    let prog = build.rust("rust_threads.rs", "rust_threads");
    for workers in [1, 3] {
        let (outcome, selection) = run_under_goset(2, &[], &prog, &[&workers.to_string()], &[]);
        check(&outcome, &selection.task_cpus, workers);
    }
}
