//! C pthreads: busy threads, as many as there are slots and more, each on its planned CPU.

use shim_tests::*;

/// `pthreads <workers>` for each count, checked with [`check_threads`].
fn pthreads(mode: Mode, workers: &[usize]) {
    if let Some(prog) = Program::c("pthreads.c") {
        threads_on_plan(&prog, mode, workers);
    }
}

#[test]
fn as_many_threads_as_slots_by_hand() {
    pthreads(Mode::ByHand("1,0"), &[1]);
}

#[test]
fn more_threads_than_slots_by_hand() {
    pthreads(Mode::ByHand("1,0"), &[2, 3, 6]);
}

#[test]
fn one_slot_by_hand() {
    pthreads(Mode::ByHand("0"), &[2]);
}

#[test]
fn as_many_threads_as_slots_under_goset_run() {
    pthreads(Mode::goset_run(2), &[1]);
}

#[test]
fn more_threads_than_slots_under_goset_run() {
    pthreads(Mode::goset_run(2), &[3]);
}

#[test]
fn exit_status_passes_through_goset_run() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let run = prog.run(Mode::goset_run(2), &["1", "3"], &[]);
    run.outcome.expect_code(3);
    assert_distinct(&run.reports(), &run.plan);
}
