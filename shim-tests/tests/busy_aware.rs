//! Birth placement that knows which threads run: a process with two thread pools, the second
//! computing with the main thread while the first sleeps (`programs/two_pools.c`). By live
//! counts alone, pool B's first worker was born on the main thread's CPU (every slot held one
//! live thread, lowest index first). Now the creator's slot is the last choice, and under
//! goset-run the housekeeper's published running counts come first: main and pool B's worker
//! each run on a CPU of their own from their first round, read from inside the threads.

mod common;
use common::*;

/// The CPUs a two_pools report says its thread ran on while it computed.
fn seen(r: &Report) -> Vec<usize> {
    cpulist(r.field("seen"))
}

/// Main and every pool B worker ran on one CPU each, from the first round, no two the same,
/// all planned.
fn each_alone_from_the_start(out: &Outcome, plan: &[usize]) {
    out.expect_code(0);
    let reports = reports(out);
    let team: Vec<&Report> = reports
        .iter()
        .filter(|r| r.role == "main" || r.role == "b")
        .collect();
    assert_eq!(team.len(), 2, "main and one pool B worker\n{}", out.dump());
    let mut cpus = Vec::new();
    for r in &team {
        let seen = seen(r);
        assert_eq!(seen.len(), 1, "ran on one CPU throughout: {}", r.line);
        assert_eq!(
            r.field("first").parse::<usize>().ok(),
            Some(seen[0]),
            "{}",
            r.line
        );
        assert!(plan.contains(&seen[0]), "a planned CPU: {}", r.line);
        cpus.push(seen[0]);
    }
    assert_ne!(
        cpus[0],
        cpus[1],
        "pool B's worker beside the main thread\n{}",
        out.dump()
    );
}

#[test]
fn by_hand_pool_b_is_born_away_from_the_main_thread() {
    let Some(program) = Program::c("two_pools.c") else {
        return;
    };
    let plan = own_allowed();
    if plan.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let cpus = format!("{},{}", plan[0], plan[1]);
    let out = run(by_hand(program.path(), &cpus));
    each_alone_from_the_start(&out, &plan[..2]);
}

#[test]
fn under_goset_run_with_and_without_adapt() {
    let Some(program) = Program::c("two_pools.c") else {
        return;
    };
    for extra in [&[][..], &["--no-adapt"][..]] {
        let (out, selection) = run_under_goset(2, extra, program.path(), &[], &[]);
        each_alone_from_the_start(&out, &selection.task_cpus);
        assert!(
            !out.stderr.contains("moved 1") && !out.stderr.contains("demand:"),
            "{extra:?}: placed right at birth, nothing to repair\n{}",
            out.dump()
        );
    }
}
