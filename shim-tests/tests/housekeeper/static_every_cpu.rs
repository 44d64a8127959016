//! A static program under `goset-run -n` = every CPU: no CPU is left outside the plan, so the
//! housekeeper shares the last slot's CPU, and the threads it sends there (sleepers) sit on a
//! task CPU. Such a thread takes a share of that slot, so a busy thread beside it moves to the
//! slot it left: two task threads are never left on one CPU.

use shim_tests::*;

#[test]
fn a_main_thread_that_starts_busy_then_waits_leaves_every_worker_a_cpu_of_its_own() {
    let Some(prog) = Program::c_static("placed_threads.c") else {
        return;
    };
    let cpus = own_allowed();
    if cpus.len() < 2 {
        skip_note("needs 2 CPUs");
        return;
    }
    let n = cpus.len();
    // "warm": the main thread burns half a second first, so the housekeeper gives it a slot;
    // then it waits in join and is sent to the housekeeper CPU, beside a worker's slot. The
    // program exits 3 unless every thread, main included, holds a CPU no other one has.
    let workers = (n - 1).to_string();
    let run = prog.run(
        Mode::GosetRun(n, &["--interval", "20"]),
        &[&workers, "20", "0.5", "main,warm"],
        &[],
    );
    let outcome = &run.outcome;
    outcome.expect_code(0);
    let held: Vec<usize> = run
        .reports()
        .iter()
        .map(|r| r.field("held").parse().expect("held a CPU"))
        .collect();
    let mut distinct = held.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), n, "{held:?}\n{}", outcome.dump());
    assert!(
        held.iter().all(|c| run.plan.contains(c)),
        "{held:?} outside the plan {:?}",
        run.plan
    );
    let selection = run.selection.as_ref().unwrap();
    assert_eq!(
        held.last(),
        selection.housekeeper.as_ref(),
        "the waiting main thread is on the housekeeper CPU"
    );
}
