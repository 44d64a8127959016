//! LLVM OpenMP (libomp): `KMP_AFFINITY`, `OMP_PROC_BIND` and the `kmp_set_affinity` API all
//! end with each OpenMP thread on its own planned CPU. libomp binds through libc's
//! `syscall(SYS_sched_setaffinity)` and aborts on affinity errors, so these runs also show that
//! the shim answers its requests with success.
//!
//! By hand the plan is `1,0`: libomp's compact and scatter orders both put thread 0 on CPU 0.

use shim_tests::*;

const BY_HAND: Mode = Mode::ByHand("1,0");
const UNDER_GOSET_RUN: Mode = Mode::goset_run(2);

/// Runs `omp` with a team of one thread per slot and `env`, checked with [`check_team`].
fn omp(mode: Mode, env: &[(&str, &str)]) {
    if let Some(prog) = Program::llvm_omp("omp.c") {
        omp_team(&prog, mode, env);
    }
}

/// Runs `kmp_affinity`, whose threads each ask `kmp_set_affinity` for another CPU than their
/// own: the team is checked with [`check_team`] and every call was told success.
fn kmp_set_affinity(mode: Mode) {
    let Some(prog) = Program::llvm_omp("kmp_affinity.c") else {
        return;
    };
    let (_, reports) = omp_team(&prog, mode, &[]);
    for r in with_role(&reports, "omp") {
        assert_asked_elsewhere(r, "kmp_set_affinity", r.single_cpu());
    }
}

#[test]
fn kmp_affinity_compact_by_hand() {
    omp(BY_HAND, &[("KMP_AFFINITY", "compact")]);
}

#[test]
fn kmp_affinity_scatter_by_hand() {
    omp(BY_HAND, &[("KMP_AFFINITY", "scatter")]);
}

#[test]
fn proc_bind_true_by_hand() {
    omp(BY_HAND, &[("OMP_PROC_BIND", "true")]);
}

#[test]
fn no_binding_by_hand() {
    omp(BY_HAND, &[]);
}

#[test]
fn kmp_set_affinity_by_hand() {
    kmp_set_affinity(BY_HAND);
}

#[test]
fn kmp_affinity_compact_under_goset_run() {
    omp(UNDER_GOSET_RUN, &[("KMP_AFFINITY", "compact")]);
}

#[test]
fn kmp_affinity_scatter_under_goset_run() {
    omp(UNDER_GOSET_RUN, &[("KMP_AFFINITY", "scatter")]);
}

#[test]
fn proc_bind_true_under_goset_run() {
    omp(UNDER_GOSET_RUN, &[("OMP_PROC_BIND", "true")]);
}

#[test]
fn kmp_set_affinity_under_goset_run() {
    kmp_set_affinity(UNDER_GOSET_RUN);
}
