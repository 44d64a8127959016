//! fork and fork + exec: a child's threads claim slots of their own, from the same table as
//! the parent. The parent's main thread holds slot 0 and stays single-threaded while it waits,
//! so the child's main thread takes slot 1, the other CPU.
//!
//! Fork + exec is checked under goset-run and plain fork by hand; by hand across exec (the table
//! handed on in `GOSET_SLOTS`) see `multi/by_hand_tree.rs`.
//!
//! A child started by `posix_spawn` or by `vfork` + exec runs no atfork handler, and starts
//! with the mask of its parent's thread, one CPU. It is a process like any other: its two
//! busy threads (`pthreads 1`) are on planned CPUs, distinct or roaming, not both left on the
//! parent's CPU; by hand and under goset-run.

use shim_tests::*;

/// The roles the child's two threads report under, and how it came to be, for messages.
struct Child {
    main: (&'static str, i64),
    worker: (&'static str, i64),
    how: &'static str,
}

/// One run of `fork_exec`: the parent's main thread on slot 0, the child's main thread (another
/// process) on the free slot 1, the child's worker in the child, all spread over the plan.
fn check(run: &Run, code: i32, child: Child) {
    run.outcome.expect_code(code);
    let plan = &run.plan;
    let reports = run.reports();
    assert_eq!(
        reports.len(),
        3,
        "parent, child main and child worker report\n{}",
        run.outcome.dump()
    );
    let parent = one(&reports, "parent", 0);
    let child_main = one(&reports, child.main.0, child.main.1);
    let worker = one(&reports, child.worker.0, child.worker.1);
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
        "the {} child's main thread takes the free slot 1: {}",
        child.how,
        child_main.line
    );
    assert_even([parent, child_main, worker], plan);
}

#[test]
fn forked_child_takes_the_free_slot_by_hand() {
    let Some(prog) = Program::c("fork_exec.c") else {
        return;
    };
    let run = prog.run(Mode::ByHand("1,0"), &["fork"], &[]);
    let child = Child {
        main: ("child-main", 0),
        worker: ("child-worker", 1),
        how: "forked",
    };
    check(&run, 0, child);
}

#[test]
fn exec_child_takes_the_free_slot_under_goset_run() {
    let (Some(prog), Some(pthreads)) = (Program::c("fork_exec.c"), Program::c("pthreads.c")) else {
        return;
    };
    // The exec'd child is `pthreads 1 3`: a main thread and one worker; it exits with 3.
    let args = ["exec", pthreads.path_str(), "1", "3"];
    let run = prog.run(Mode::goset_run(2), &args, &[]);
    let child = Child {
        main: ("main", 0),
        worker: ("worker", 0),
        how: "exec'd",
    };
    check(&run, 3, child);
}

/// `fork_exec HOW pthreads 1 3`: the child's main thread and its worker, both computing, on
/// distinct planned CPUs (or roaming), whatever CPU the parent holds.
fn spawned(how: &str, mode: Mode) {
    let (Some(prog), Some(pthreads)) = (Program::c("fork_exec.c"), Program::c("pthreads.c")) else {
        return;
    };
    let args = [how, pthreads.path_str(), "1", "3"];
    let run = prog.run(mode, &args, &[]);
    run.outcome.expect_code(3);
    let reports = run.reports();
    let parent = one(&reports, "parent", 0);
    let child = [one(&reports, "main", 0), one(&reports, "worker", 0)];
    assert!(
        child.iter().all(|r| r.pid != parent.pid),
        "the child is another process\n{}",
        run.outcome.dump()
    );
    assert_distinct(child, &run.plan);
}

#[test]
fn posix_spawn_child_spreads_its_threads_by_hand() {
    if let Some(cpus) = first_two_allowed() {
        spawned("spawn", Mode::ByHand(&cpus));
    }
}

#[test]
fn vfork_exec_child_spreads_its_threads_by_hand() {
    if let Some(cpus) = first_two_allowed() {
        spawned("vfork", Mode::ByHand(&cpus));
    }
}

#[test]
fn posix_spawn_child_spreads_its_threads_under_goset_run() {
    spawned("spawn", Mode::goset_run(2));
}

#[test]
fn vfork_exec_child_spreads_its_threads_under_goset_run() {
    spawned("vfork", Mode::goset_run(2));
}
