//! A thread pool that creates and ends 1000 threads: the live threads stay spread over the
//! slots, so slots are released when threads end.

use shim_tests::*;

const COUNT: usize = 1000;

/// Runs `pool COUNT width` checks: every thread on a planned CPU; with `width` 1 each pool
/// thread is alone beside the main thread, so it must take the slot the main thread does not
/// hold; with `width` 2 the three live threads are spread two and one: thread i never joins
/// thread i-1 on the main thread's CPU (it goes beside its creator only while thread i-1 is a
/// newborn, and beside thread i-1 otherwise), unless it roams (under goset-run, born while its
/// creator and the other ran).
fn check(outcome: &Outcome, plan: &[usize], width: usize) {
    outcome.expect_code(0);
    let reports = reports(outcome);
    assert_eq!(
        reports.len(),
        COUNT + 1,
        "one report per thread\n{}",
        outcome.command
    );
    let main_cpu = one(&reports, "main", 0).single_cpu();
    assert_eq!(main_cpu, plan[0], "the main thread holds slot 0");
    // usize::MAX - 1: the thread roams (see Report::roams), on no CPU of its own.
    let roaming = usize::MAX - 1;
    let mut cpus = vec![usize::MAX; COUNT];
    for r in with_role(&reports, "pool") {
        let cpu = if r.roams(plan) {
            roaming
        } else {
            assert_on_plan([r], plan)[0]
        };
        cpus[usize::try_from(r.id).expect("pool id")] = cpu;
    }
    assert!(
        cpus.iter().all(|&c| c != usize::MAX),
        "every pool thread reported once"
    );
    for i in 0..COUNT {
        if width == 1 {
            assert_ne!(
                cpus[i], main_cpu,
                "pool thread {i} stacked on the main thread's CPU while a slot was free"
            );
        } else if i > 0 && cpus[i] != roaming {
            // Thread i may go beside thread i-1 once that one is no newborn (it waits): never
            // beside it on the main thread's CPU, three threads on one CPU of two.
            assert!(
                cpus[i] != cpus[i - 1] || cpus[i] != main_cpu,
                "pool threads {} and {i}, alive together, share the main thread's CPU {}",
                i - 1,
                cpus[i]
            );
        }
    }
}

/// Runs `pool COUNT width` the way `mode` says and checks it.
fn pool(mode: Mode, width: usize) {
    if let Some(prog) = Program::c("pool.c") {
        let run = prog.run(mode, &[&COUNT.to_string(), &width.to_string()], &[]);
        check(&run.outcome, &run.plan, width);
    }
}

#[test]
fn two_alive_by_hand() {
    pool(Mode::ByHand("1,0"), 2);
}

#[test]
fn one_alive_by_hand() {
    pool(Mode::ByHand("1,0"), 1);
}

#[test]
fn two_alive_under_goset_run() {
    pool(Mode::goset_run(2), 2);
}

#[test]
fn one_alive_under_goset_run() {
    pool(Mode::goset_run(2), 1);
}
