//! Checks that several test files make on the same kind of program: busy threads (C pthreads,
//! Rust `std::thread`), an OpenMP team (libgomp, libomp) and a thread that pins itself.

use super::{assert_distinct, assert_even, one, with_role, Mode, Outcome, Program, Report, Run};

/// Runs `prog <workers>` (a main thread and `workers` busy threads, each reporting once) for
/// each count in `workers`, and checks every run with [`check_threads`].
pub fn threads_on_plan(prog: &Program, mode: Mode, workers: &[usize]) {
    for &count in workers {
        let run = prog.run(mode, &[&count.to_string()], &[]);
        check_threads(&run.outcome, &run.plan, count);
    }
}

/// The main thread holds slot 0 and every thread is on a planned CPU: distinct CPUs while there
/// are fewer workers than slots, an even spread otherwise.
pub fn check_threads(outcome: &Outcome, plan: &[usize], workers: usize) {
    outcome.expect_code(0);
    let reports = super::reports(outcome);
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

/// Runs the OpenMP program `prog` with a team of one thread per slot and `env`, checks the
/// team with [`check_team`] and returns the run and its reports. By hand the team size is
/// `OMP_NUM_THREADS`; under goset-run that stays unset: goset-run sets it to `-n`.
pub fn omp_team(prog: &Program, mode: Mode, env: &[(&str, &str)]) -> (Run, Vec<Report>) {
    let team_size = mode.slots().to_string();
    let mut env = env.to_vec();
    if let Mode::ByHand(_) = mode {
        env.push(("OMP_NUM_THREADS", &team_size));
    }
    let run = prog.run(mode, &[], &env);
    let reports = check_team(&run.outcome, &run.plan);
    (run, reports)
}

/// Checks the OpenMP threads (role `omp`) of one run with a team of `plan.len()` threads:
/// each on its own planned CPU, thread 0 (the main thread) on slot 0.
pub fn check_team(outcome: &Outcome, plan: &[usize]) -> Vec<Report> {
    outcome.expect_code(0);
    let reports = super::reports(outcome);
    let team = with_role(&reports, "omp");
    assert_eq!(
        team.len(),
        plan.len(),
        "one report per OpenMP thread\n{}",
        outcome.dump()
    );
    for r in &team {
        assert_eq!(
            r.field("team"),
            plan.len().to_string(),
            "team size: {}",
            r.line
        );
    }
    assert_distinct(team.iter().copied(), plan);
    let master = one(&reports, "omp", 0);
    assert_eq!(
        master.single_cpu(),
        plan[0],
        "OpenMP thread 0 is the main thread, slot 0: {}",
        master.line
    );
    reports
}

/// The thread of `r` asked `call` to move it off `cpu`, its planned CPU, and was told success
/// (`rc=0`). Asking for `cpu` itself would show nothing: the programs ask for a CPU other than
/// the one they are on, so that means the thread was off its plan before the call.
pub fn assert_asked_elsewhere(r: &Report, call: &str, cpu: usize) {
    assert_eq!(r.field("rc"), "0", "{call} must return success: {}", r.line);
    assert_ne!(
        r.field("asked").parse::<usize>().ok(),
        Some(cpu),
        "{call} asked for the planned CPU {cpu}: the thread was not on it before the call: {}",
        r.line
    );
}
