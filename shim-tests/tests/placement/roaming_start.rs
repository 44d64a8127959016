//! A thread born while every slot holds a running thread roams the reservation, and starts off
//! its creator's CPU: the `roam_start` program's main thread keeps computing while its first
//! thread spins in `sched_yield` and its second (the roamer) is born. Born on its creator's
//! CPU, the roamer would stay there beside the main thread for as long as the spinner kept the
//! other CPU busy; under a plain mask the kernel starts it on the least loaded CPU.

use shim_tests::*;

/// The main thread on `plan[0]`, the spinner on `plan[1]`; the roamer started on a planned CPU
/// other than the main thread's, and then either roams the plan (its mask widened once it ran)
/// or holds the other slot's CPU (when it was born after the spinner stopped counting as a
/// newborn).
fn check(outcome: &Outcome, plan: &[usize]) {
    outcome.expect_code(0);
    let reports = reports(outcome);
    assert_eq!(reports.len(), 3, "three threads report\n{}", outcome.dump());
    let main = one(&reports, "main", 0).single_cpu();
    assert_eq!(main, plan[0], "the main thread holds slot 0");
    let spinner = one(&reports, "spinner", 0).single_cpu();
    assert_eq!(spinner, plan[1], "the spinner holds slot 1");
    let roamer = one(&reports, "roamer", 0);
    let first: usize = roamer.field("first").parse().expect("first=<cpu>");
    assert!(
        first != main && plan.contains(&first),
        "the roamer started on CPU {first}, beside its creator (main on CPU {main}) or off the \
         plan {plan:?}: {}\n{}",
        roamer.line,
        outcome.dump()
    );
    assert!(
        roamer.roams(plan) || roamer.allowed == [plan[1]],
        "the roamer roams the plan or holds slot 1: {}",
        roamer.line
    );
}

/// Runs `roam_start` the way `mode` says and checks it.
fn roam_start(mode: Mode) {
    if let Some(prog) = Program::c("roam_start.c") {
        let run = prog.run(mode, &[], &[]);
        check(&run.outcome, &run.plan);
    }
}

#[test]
fn starts_off_its_creators_cpu_by_hand() {
    roam_start(Mode::ByHand("1,0"));
}

#[test]
fn starts_off_its_creators_cpu_under_goset_run() {
    roam_start(Mode::goset_run(2));
}
