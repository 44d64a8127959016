//! Birth placement that knows which threads run: a process with two thread pools, the second
//! computing with the main thread while the first sleeps (`programs/two_pools.c`). By live
//! counts alone, pool B's first worker was born on the main thread's CPU (every slot held one
//! live thread, lowest index first). Now the creator's slot is the last choice, and under
//! goset-run the housekeeper's published running counts come first: main and pool B's worker
//! each run on a CPU of their own from their first round, read from inside the threads.

use shim_tests::*;

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
    for adapt in [None, Some("--no-adapt")] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("place.log");
        let mut extra = vec!["--log", log.to_str().unwrap()];
        extra.extend(adapt);
        let (out, selection) = run_under_goset(2, &extra, program.path(), &[], &[]);
        each_alone_from_the_start(&out, &selection.task_cpus);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.lines().any(|l| l.contains("\"event\":\"create\"")),
            "the log holds the births: {text}"
        );
        assert!(
            !text.lines().any(|l| l.contains("\"event\":\"move\"")),
            "{adapt:?}: placed right at birth, nothing to repair\n{text}"
        );
    }
}

/// Two processes that take turns over a pipe (`programs/take_turns.c`, as `perf bench sched
/// pipe`): born on a CPU each, the housekeeper finds each running many short turns that end in
/// sleep, and lets both run on the whole reservation, where the kernel keeps a waker and its
/// wakee on one CPU. Read from each process's own mask at the end.
#[test]
fn processes_that_take_turns_run_on_the_reservation() {
    let Some(program) = Program::c("take_turns.c") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("place.log");
    let (out, selection) = run_under_goset(
        2,
        &["--log", log.to_str().unwrap()],
        program.path(),
        &["2"],
        &[],
    );
    out.expect_code(0);
    let reports = reports(&out);
    assert_eq!(reports.len(), 2, "{}", out.dump());
    let mut reservation = selection.task_cpus.clone();
    reservation.sort_unstable();
    for r in &reports {
        assert_eq!(
            r.allowed,
            reservation,
            "ends on the reservation: {}\n{}",
            r.line,
            out.dump()
        );
        assert!(r.field("turns").parse::<u64>().unwrap() > 100, "{}", r.line);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let widened: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["event"] == "move")
        .filter(|r| {
            r["reason"]
                .as_str()
                .unwrap_or("")
                .starts_with("takes turns")
        })
        .collect();
    let pids: std::collections::BTreeSet<u32> = reports.iter().map(|r| r.pid).collect();
    for pid in &pids {
        assert!(
            widened
                .iter()
                .any(|r| r["pid"] == *pid && r["roams"] == true),
            "process {pid} widened once it took turns: {widened:#?}"
        );
    }
}
