//! gcc OpenMP (libgomp): whatever binding the user asks libgomp for, each OpenMP thread ends on
//! its own planned CPU, with its allowed list that single CPU.
//!
//! By hand the plan is chosen to contradict what libgomp would do on its own: with
//! `OMP_PROC_BIND` it puts thread 0 on the first place (CPU 0), so the plan is `1,0`; with
//! `GOMP_CPU_AFFINITY="1 0"` it puts thread 0 on CPU 1, so the plan is `0,1`.

mod common;
use common::*;

/// Checks one run of `omp` with a team of `plan.len()` threads.
fn check(outcome: &Outcome, plan: &[usize]) {
    outcome.expect_code(0);
    let reports = reports(outcome);
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
    let after = one(&reports, "main", 0);
    assert_eq!(
        after.single_cpu(),
        plan[0],
        "the main thread after the region: {}",
        after.line
    );
}

fn by_hand_with(plan: &str, env: &[(&str, &str)]) {
    let build = Build::new();
    let Some(prog) = build.gomp("omp.c", "omp") else {
        return;
    };
    let mut cmd = by_hand(&prog, plan);
    cmd.env("OMP_NUM_THREADS", "2").envs(env.iter().copied());
    check(&run(cmd), &cpulist(plan));
}

fn under_goset_run_with(env: &[(&str, &str)]) {
    let build = Build::new();
    let Some(prog) = build.gomp("omp.c", "omp") else {
        return;
    };
    // OMP_NUM_THREADS stays unset: goset-run sets it to -n.
    let (outcome, selection) = run_under_goset(2, &[], &prog, &[], env);
    check(&outcome, &selection.task_cpus);
}

#[test]
fn proc_bind_unset_by_hand() {
    by_hand_with("1,0", &[]);
}

#[test]
fn proc_bind_true_by_hand() {
    by_hand_with("1,0", &[("OMP_PROC_BIND", "true")]);
}

#[test]
fn proc_bind_spread_by_hand() {
    by_hand_with("1,0", &[("OMP_PROC_BIND", "spread")]);
}

#[test]
fn proc_bind_close_by_hand() {
    by_hand_with("1,0", &[("OMP_PROC_BIND", "close")]);
}

#[test]
fn places_cores_by_hand() {
    by_hand_with("1,0", &[("OMP_PLACES", "cores"), ("OMP_PROC_BIND", "true")]);
}

#[test]
fn gomp_cpu_affinity_by_hand() {
    by_hand_with("0,1", &[("GOMP_CPU_AFFINITY", "1 0")]);
}

#[test]
fn proc_bind_unset_under_goset_run() {
    under_goset_run_with(&[]);
}

#[test]
fn proc_bind_true_under_goset_run() {
    under_goset_run_with(&[("OMP_PROC_BIND", "true")]);
}

#[test]
fn proc_bind_spread_under_goset_run() {
    under_goset_run_with(&[("OMP_PROC_BIND", "spread")]);
}

#[test]
fn proc_bind_close_under_goset_run() {
    under_goset_run_with(&[("OMP_PROC_BIND", "close")]);
}

#[test]
fn places_cores_under_goset_run() {
    under_goset_run_with(&[("OMP_PLACES", "cores"), ("OMP_PROC_BIND", "true")]);
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
    under_goset_run_with(&[("GOMP_CPU_AFFINITY", &reversed.join(" "))]);
}
