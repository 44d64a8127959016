//! More threads alive at once than the first chunk of the shim's thread registry holds
//! (1024): `programs/many_threads.c` with 1100 threads, each pinning itself and reading its
//! request back, then the main thread setting the affinity of the last one (past the first
//! chunk). Every thread stays on a planned CPU, or roams the planned CPUs (born while every
//! slot ran a thread); the last keeps its slot's CPU, or roams (an untracked thread would get
//! the main thread's request applied for real), and reads back the main thread's request.

use shim_tests::*;

const THREADS: usize = 1100;

fn many_threads(mode: Mode) {
    let Some(prog) = Program::c("many_threads.c") else {
        return;
    };
    let run = prog.run(mode, &[&THREADS.to_string()], &[]);
    let outcome = &run.outcome;
    outcome.expect_code(0);
    let reports = run.reports();
    let threads = with_role(&reports, "thread");
    assert_eq!(
        threads.len(),
        THREADS,
        "one report per thread\n{}",
        outcome.stderr
    );
    for r in &threads {
        assert_eq!(r.field("rc"), "0", "{}", r.line);
        assert_eq!(r.field("back_rc"), "0", "{}", r.line);
        assert_eq!(
            r.field("readback"),
            r.field("asked"),
            "a thread reads back the CPU it asked for: {}",
            r.line
        );
    }
    // Far more threads than CPUs: most are born while every slot runs one (their creator, a
    // newborn) and roam; the others are pinned on planned CPUs.
    assert_on_plan(pinned(threads.iter().copied(), &run.plan), &run.plan);
    let last = one(&reports, "last", THREADS as i64);
    let first_report = one(&reports, "thread", THREADS as i64 - 1);
    if first_report.roams(&run.plan) {
        // Born while every slot ran a thread: the main thread's request must not pin it. Under
        // goset-run the housekeeper may give it a CPU of its own meanwhile (a `move`).
        let moved = (run.selection.iter())
            .flat_map(|s| &s.moves)
            .any(|m| m["tid"] == last.tid);
        assert!(
            last.roams(&run.plan) || moved,
            "the main thread's request for thread {} must leave it roaming: {}",
            THREADS - 1,
            last.line
        );
    } else {
        assert_eq!(
            last.single_cpu(),
            first_report.single_cpu(),
            "the main thread's request for thread {} must not move it off its slot's CPU: {}",
            THREADS - 1,
            last.line
        );
        assert_ne!(
            last.field("asked").parse::<usize>().ok(),
            Some(last.single_cpu()),
            "the main thread asked for another CPU than the thread's slot: {}",
            last.line
        );
    }
    assert_eq!(
        last.field("other"),
        last.field("asked"),
        "the thread reads back what the main thread asked for it: {}",
        last.line
    );
    let main = one(&reports, "main", 0);
    assert_eq!(main.field("set_rc"), "0", "{}", main.line);
    assert!(
        !outcome.stderr.contains("goset:"),
        "no warning about untracked threads\n{}",
        outcome.stderr
    );
}

#[test]
fn eleven_hundred_threads_by_hand() {
    many_threads(Mode::ByHand("0,1"));
}

#[test]
fn eleven_hundred_threads_under_goset_run() {
    many_threads(Mode::goset_run(2));
}
