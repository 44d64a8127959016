//! LLVM OpenMP (libomp): `KMP_AFFINITY`, `OMP_PROC_BIND` and the `kmp_set_affinity` API all
//! end with each OpenMP thread on its own planned CPU. libomp binds through libc's
//! `syscall(SYS_sched_setaffinity)` and aborts on affinity errors, so these runs also show that
//! the shim answers its requests with success.
//!
//! By hand the plan is `1,0`: libomp's compact and scatter orders both put thread 0 on CPU 0.

mod common;
use common::*;

/// Checks the OpenMP threads of one run with a team of `plan.len()` threads.
fn check_team(outcome: &Outcome, plan: &[usize]) -> Vec<Report> {
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
    reports
}

fn by_hand_with(env: &[(&str, &str)]) {
    let build = Build::new();
    let Some(prog) = build.llvm_omp("omp.c", "omp") else {
        return;
    };
    let mut cmd = by_hand(&prog, "1,0");
    cmd.env("OMP_NUM_THREADS", "2").envs(env.iter().copied());
    check_team(&run(cmd), &[1, 0]);
}

fn under_goset_run_with(env: &[(&str, &str)]) {
    let build = Build::new();
    let Some(prog) = build.llvm_omp("omp.c", "omp") else {
        return;
    };
    let (outcome, selection) = run_under_goset(2, &[], &prog, &[], env);
    check_team(&outcome, &selection.task_cpus);
}

/// Every thread asked kmp_set_affinity for another CPU than its own and was told success.
fn check_kmp_calls(reports: &[Report]) {
    for r in with_role(reports, "omp") {
        assert_eq!(
            r.field("rc"),
            "0",
            "kmp_set_affinity must succeed: {}",
            r.line
        );
        assert_ne!(
            r.field("asked").parse::<usize>().ok(),
            Some(r.single_cpu()),
            "asked for another CPU: {}",
            r.line
        );
    }
}

#[test]
fn kmp_affinity_compact_by_hand() {
    by_hand_with(&[("KMP_AFFINITY", "compact")]);
}

#[test]
fn kmp_affinity_scatter_by_hand() {
    by_hand_with(&[("KMP_AFFINITY", "scatter")]);
}

#[test]
fn proc_bind_true_by_hand() {
    by_hand_with(&[("OMP_PROC_BIND", "true")]);
}

#[test]
fn no_binding_by_hand() {
    by_hand_with(&[]);
}

#[test]
fn kmp_set_affinity_by_hand() {
    let build = Build::new();
    let Some(prog) = build.llvm_omp("kmp_affinity.c", "kmp_affinity") else {
        return;
    };
    let mut cmd = by_hand(&prog, "1,0");
    cmd.env("OMP_NUM_THREADS", "2");
    check_kmp_calls(&check_team(&run(cmd), &[1, 0]));
}

#[test]
fn kmp_affinity_compact_under_goset_run() {
    under_goset_run_with(&[("KMP_AFFINITY", "compact")]);
}

#[test]
fn kmp_affinity_scatter_under_goset_run() {
    under_goset_run_with(&[("KMP_AFFINITY", "scatter")]);
}

#[test]
fn proc_bind_true_under_goset_run() {
    under_goset_run_with(&[("OMP_PROC_BIND", "true")]);
}

#[test]
fn kmp_set_affinity_under_goset_run() {
    let build = Build::new();
    let Some(prog) = build.llvm_omp("kmp_affinity.c", "kmp_affinity") else {
        return;
    };
    let (outcome, selection) = run_under_goset(2, &[], &prog, &[], &[]);
    check_kmp_calls(&check_team(&outcome, &selection.task_cpus));
}
