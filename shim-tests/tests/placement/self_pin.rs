//! A program that pins its threads itself, with `sched_setaffinity`, `pthread_setaffinity_np`
//! and libc's `syscall(SYS_sched_setaffinity)`, to a CPU outside its slot: each call returns
//! success and the thread stays on its planned CPU.

use shim_tests::*;

/// `plan[0]` for the main thread; the workers run one at a time beside it, so each takes the
/// next slot (or slot 0 again with a single slot).
fn check(outcome: &Outcome, plan: &[usize]) {
    outcome.expect_code(0);
    let reports = reports(outcome);
    assert_eq!(
        reports.len(),
        3,
        "main and two workers report\n{}",
        outcome.dump()
    );
    let worker_cpu = plan[1 % plan.len()];
    for (role, id, call, expected) in [
        ("main", 0, "sched_setaffinity", plan[0]),
        ("worker", 1, "pthread_setaffinity_np", worker_cpu),
        ("worker", 2, "syscall", worker_cpu),
    ] {
        let r = one(&reports, role, id);
        assert_eq!(r.field("call"), call);
        assert_asked_elsewhere(r, call, expected);
        assert_eq!(
            r.single_cpu(),
            expected,
            "{call} must not move the thread off its planned CPU: {}",
            r.line
        );
    }
}

/// Runs `self_pin` the way `mode` says and checks it.
fn self_pin(mode: Mode) {
    if let Some(prog) = Program::c("self_pin.c") {
        let run = prog.run(mode, &[], &[]);
        check(&run.outcome, &run.plan);
    }
}

#[test]
fn pins_to_a_cpu_outside_the_plan_by_hand() {
    // Plan = CPU 1 only; the program asks for CPU 0.
    self_pin(Mode::ByHand("1"));
}

#[test]
fn pins_to_another_slots_cpu_by_hand() {
    self_pin(Mode::ByHand("0,1"));
}

#[test]
fn pins_to_the_housekeeper_under_goset_run_n1() {
    // -n 1 on two CPUs: the other CPU is the housekeeper, in the reservation but no slot.
    self_pin(Mode::goset_run(1));
}

#[test]
fn pins_to_another_slots_cpu_under_goset_run() {
    self_pin(Mode::goset_run(2));
}
