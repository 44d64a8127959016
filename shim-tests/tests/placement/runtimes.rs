//! Runtimes that size their pools from the affinity mask see the task's CPUs, and
//! their busy threads still run one to a planned CPU: OpenBLAS (`programs/openblas_dgemm.c`,
//! which loads it late, as numpy does; `openblas_get_num_threads()` and its threads from /proc), rayon (`src/bin/rayon_pool.rs`,
//! `current_num_threads()` and each busy worker from inside), and Go with cgo
//! (`runtime.GOMAXPROCS(0)`, which comes from goset-run's `GOMAXPROCS`: Go reads the mask
//! with a raw system call no preload sees).

use shim_tests::runtimes::{go, workspace_bin};
use shim_tests::*;
use std::path::Path;

/// Runs `program` by hand with `cpus` or under `goset-run -n <n>`; the outcome and the plan.
fn run_mode(mode: Mode, program: &Path, env: &[(&str, &str)]) -> (Outcome, Vec<usize>) {
    match mode {
        Mode::ByHand(cpus) => {
            let mut cmd = by_hand(program, cpus);
            cmd.envs(env.iter().copied());
            (run(cmd), cpulist(cpus))
        }
        Mode::GosetRun(n, extra) => {
            let (outcome, selection) = run_under_goset(n, extra, program, &[], env);
            (outcome, selection.task_cpus)
        }
    }
}

fn openblas_pool(mode: Mode, env: &[(&str, &str)]) {
    let Some(prog) = Program::c("openblas_dgemm.c") else {
        return;
    };
    let (outcome, plan) = run_mode(mode, prog.path(), env);
    if outcome.code() == 77 {
        missing("OpenBLAS", "apt-get install -y libopenblas-dev");
        return;
    }
    outcome.expect_code(0);
    let reports = reports(&outcome);
    pool_sized_to(&reports, &plan, "OpenBLAS");
    let threads = with_role(&reports, "task");
    assert_eq!(
        threads.len(),
        plan.len(),
        "the main thread and one OpenBLAS thread per further CPU\n{}",
        outcome.dump()
    );
    for t in &threads {
        assert_ne!(
            t.field("ticks"),
            "0",
            "every thread did its share of dgemm: {}",
            t.line
        );
    }
    assert_distinct(threads.iter().copied(), &plan);
}

#[test]
fn openblas_uses_every_task_cpu_by_hand() {
    openblas_pool(Mode::ByHand("0,1"), &[]);
}

#[test]
fn openblas_uses_every_task_cpu_with_openblas_num_threads() {
    openblas_pool(Mode::ByHand("0,1"), &[("OPENBLAS_NUM_THREADS", "2")]);
}

#[test]
fn openblas_uses_every_task_cpu_under_goset_run() {
    openblas_pool(Mode::goset_run(2), &[]);
}

/// The main thread's report says `runtime` sized its pool to the task's CPUs (`plan`).
fn pool_sized_to(reports: &[Report], plan: &[usize], runtime: &str) {
    let main = one(reports, "main", 0);
    assert_eq!(
        main.field("pool"),
        plan.len().to_string(),
        "{runtime} sizes its pool to the task's CPUs: {}",
        main.line
    );
}

fn rayon_pool(mode: Mode) {
    let (outcome, plan) = run_mode(mode, &workspace_bin("rayon_pool"), &[]);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    pool_sized_to(&reports, &plan, "rayon");
    let workers = with_role(&reports, "worker");
    assert_eq!(workers.len(), plan.len(), "{}", outcome.dump());
    // All busy at once, each on its own planned CPU.
    assert_distinct(workers.iter().copied(), &plan);
}

#[test]
fn openblas_does_not_count_the_housekeeper_under_goset_run_n1() {
    openblas_pool(Mode::goset_run(1), &[]);
}

#[test]
fn rayon_uses_every_task_cpu_by_hand() {
    rayon_pool(Mode::ByHand("0,1"));
}

#[test]
fn rayon_uses_every_task_cpu_under_goset_run() {
    rayon_pool(Mode::goset_run(2));
}

#[test]
fn go_with_cgo_gets_gomaxprocs_under_goset_run() {
    let Some(prog) = go("gomaxprocs_cgo.go", true) else {
        return;
    };
    let (outcome, plan) = run_mode(Mode::goset_run(2), &prog.path, &[]);
    outcome.expect_code(0);
    let line = outcome.stdout.trim();
    assert!(
        line.starts_with(&format!("gomaxprocs={} ", plan.len())),
        "Go under goset-run -n {} (GOMAXPROCS from goset-run)\n{}",
        plan.len(),
        outcome.dump()
    );
}
