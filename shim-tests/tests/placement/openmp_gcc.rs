//! gcc OpenMP (libgomp): whatever binding the user asks libgomp for, each OpenMP thread ends on
//! its own planned CPU, with its allowed list that single CPU.
//!
//! By hand the plan is chosen to contradict what libgomp would do on its own: with
//! `OMP_PROC_BIND` it puts thread 0 on the first place (CPU 0), so the plan is `1,0`; with
//! `GOMP_CPU_AFFINITY="1 0"` it puts thread 0 on CPU 1, so the plan is `0,1`.

use shim_tests::*;

/// Runs `omp` with a team of one thread per slot and `env`: the team is checked with
/// [`check_team`], and the main thread is back on slot 0 after the parallel region.
fn omp(mode: Mode, env: &[(&str, &str)]) {
    let Some(prog) = Program::gomp("omp.c") else {
        return;
    };
    let (run, reports) = omp_team(&prog, mode, env);
    let after = one(&reports, "main", 0);
    assert_eq!(
        after.single_cpu(),
        run.plan[0],
        "the main thread after the region: {}",
        after.line
    );
}

#[test]
fn proc_bind_unset_by_hand() {
    omp(Mode::ByHand("1,0"), &[]);
}

#[test]
fn proc_bind_true_by_hand() {
    omp(Mode::ByHand("1,0"), &[("OMP_PROC_BIND", "true")]);
}

#[test]
fn proc_bind_spread_by_hand() {
    omp(Mode::ByHand("1,0"), &[("OMP_PROC_BIND", "spread")]);
}

#[test]
fn proc_bind_close_by_hand() {
    omp(Mode::ByHand("1,0"), &[("OMP_PROC_BIND", "close")]);
}

#[test]
fn places_cores_by_hand() {
    omp(
        Mode::ByHand("1,0"),
        &[("OMP_PLACES", "cores"), ("OMP_PROC_BIND", "true")],
    );
}

#[test]
fn gomp_cpu_affinity_by_hand() {
    omp(Mode::ByHand("0,1"), &[("GOMP_CPU_AFFINITY", "1 0")]);
}

#[test]
fn proc_bind_unset_under_goset_run() {
    omp(Mode::goset_run(2), &[]);
}

#[test]
fn proc_bind_true_under_goset_run() {
    omp(Mode::goset_run(2), &[("OMP_PROC_BIND", "true")]);
}

#[test]
fn proc_bind_spread_under_goset_run() {
    omp(Mode::goset_run(2), &[("OMP_PROC_BIND", "spread")]);
}

#[test]
fn proc_bind_close_under_goset_run() {
    omp(Mode::goset_run(2), &[("OMP_PROC_BIND", "close")]);
}

#[test]
fn places_cores_under_goset_run() {
    omp(
        Mode::goset_run(2),
        &[("OMP_PLACES", "cores"), ("OMP_PROC_BIND", "true")],
    );
}

#[test]
fn gomp_cpu_affinity_under_goset_run() {
    // Ask libgomp for the task CPUs in reverse slot order, so that it contradicts the plan.
    let mut reversed: Vec<String> = dry_run_selection(2)
        .task_cpus
        .iter()
        .map(|c| c.to_string())
        .collect();
    reversed.reverse();
    omp(
        Mode::goset_run(2),
        &[("GOMP_CPU_AFFINITY", &reversed.join(" "))],
    );
}
