//! fork and fork + exec: a child's threads claim slots of their own, from the same table as
//! the parent. The parent's main thread holds slot 0 and stays single-threaded while it waits,
//! so the child's main thread takes slot 1, the other CPU.
//!
//! Across exec the table is shared only under goset-run (by hand it need not be), so fork +
//! exec is checked under goset-run and plain fork by hand.

mod common;
use common::*;

#[test]
fn forked_child_takes_the_free_slot_by_hand() {
    let build = Build::new();
    let Some(prog) = build.c("fork_exec.c", "fork_exec") else {
        return;
    };
    let mut cmd = by_hand(&prog, "1,0");
    cmd.arg("fork");
    let outcome = run(cmd);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    assert_eq!(
        reports.len(),
        3,
        "parent, child main and child worker report\n{}",
        outcome.dump()
    );
    let parent = one(&reports, "parent", 0);
    let child = one(&reports, "child-main", 0);
    let worker = one(&reports, "child-worker", 1);
    assert_ne!(parent.pid, child.pid, "the child is another process");
    assert_eq!(
        parent.single_cpu(),
        1,
        "the parent's main thread holds slot 0: {}",
        parent.line
    );
    assert_eq!(
        child.single_cpu(),
        0,
        "the forked child's main thread claims the free slot 1: {}",
        child.line
    );
    assert_even([parent, child, worker], &[1, 0]);
}

#[test]
fn exec_child_takes_the_free_slot_under_goset_run() {
    let build = Build::new();
    let Some(prog) = build.c("fork_exec.c", "fork_exec") else {
        return;
    };
    let Some(child) = build.c("pthreads.c", "pthreads") else {
        return;
    };
    let child = child.to_str().expect("UTF-8 temp path").to_string();
    // The exec'd child has a main thread and one worker and exits with 3.
    let (outcome, selection) = run_under_goset(2, &[], &prog, &["exec", &child, "1", "3"], &[]);
    outcome.expect_code(3);
    let plan = &selection.task_cpus;
    let reports = reports(&outcome);
    assert_eq!(
        reports.len(),
        3,
        "parent, child main and child worker report\n{}",
        outcome.dump()
    );
    let parent = one(&reports, "parent", 0);
    let child_main = one(&reports, "main", 0);
    let worker = one(&reports, "worker", 0);
    assert_ne!(parent.pid, child_main.pid, "the child is another process");
    assert_eq!(child_main.pid, worker.pid);
    assert_eq!(
        parent.single_cpu(),
        plan[0],
        "the parent's main thread holds slot 0: {}",
        parent.line
    );
    assert_eq!(
        child_main.single_cpu(),
        plan[1],
        "the exec'd child's main thread takes the free slot 1: {}",
        child_main.line
    );
    assert_even([parent, child_main, worker], plan);
}
