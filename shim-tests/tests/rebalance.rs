//! Placement that follows demand (issue 13): busy threads the shim placed by count alone and
//! that doubled up on one CPU while a planned CPU had no busy thread are spread by the
//! housekeeper, once, and stay; `--no-adapt` leaves them. A Go program's threads, placed by
//! the housekeeper, stay where their demand put them.

mod common;
use common::runtimes::go;
use common::*;
use std::collections::BTreeMap;

/// `placed_threads 2 DEADLINE 2 sleeper` under `goset-run -n 2 --log ... EXTRA`: main (waits),
/// busy 0, a sleeper, busy 1, so that by count busy 1 lands beside busy 0; the program waits
/// until each busy thread is alone on its CPU for 2 s (RC 3 at the deadline). The outcome, the
/// selection and the placement log's records; `None` (skipped) without gcc.
fn sleeper_between_workers(
    extra: &[&str],
    deadline_s: &str,
) -> Option<(Outcome, Selection, Vec<serde_json::Value>)> {
    let program = Program::c("placed_threads.c")?;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("place.log");
    let mut args = vec!["--log", log.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (out, selection) = run_under_goset(
        2,
        &args,
        program.path(),
        &["2", deadline_s, "2", "sleeper"],
        &[],
    );
    let records = (std::fs::read_to_string(&log).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Some((out, selection, records))
}

fn moves(records: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    records.iter().filter(|r| r["event"] == "move").collect()
}

#[test]
fn busy_threads_doubled_up_by_count_are_spread_once() {
    let Some((out, selection, records)) = sleeper_between_workers(&[], "20") else {
        return;
    };
    out.expect_code(0);
    let reports = reports(&out);
    let busy = with_role(&reports, "busy");
    assert_distinct(busy.iter().copied(), &selection.task_cpus);
    let moves = moves(&records);
    assert_eq!(moves.len(), 1, "one move, then steady: {records:#?}");
    let moved = moves[0];
    assert_eq!(moved["placed_by"], "housekeeper");
    assert!(
        moved["reason"]
            .as_str()
            .unwrap()
            .starts_with("demand: 2 busy threads on slot"),
        "{moved}"
    );
    let tids: Vec<i64> = busy.iter().map(|r| i64::from(r.tid)).collect();
    assert!(
        tids.contains(&moved["tid"].as_i64().unwrap()),
        "a busy thread moved"
    );
    assert!(
        out.stderr.contains("moved"),
        "the Run table counts it\n{}",
        out.dump()
    );
}

#[test]
fn no_adapt_leaves_them_doubled_up() {
    // A 3 s deadline: without moves the workers never each get a CPU.
    let Some((out, _, records)) = sleeper_between_workers(&["--no-adapt"], "3") else {
        return;
    };
    out.expect_code(3);
    assert!(moves(&records).is_empty(), "{records:#?}");
}

/// Go's runtime threads wake for an instant now and then (sysmon every few milliseconds); one
/// caught runnable at a poll used to get a slot, then lose it three polls later, by turns. Now
/// each thread is placed once: the two spinning ones on a slot each, the rest on the
/// housekeeper CPU.
#[test]
fn go_threads_are_placed_once_and_stay() {
    let Some(prog) = go("go_spin.go", false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("place.log");
    let (out, selection) = run_under_goset(
        2,
        &["--log", log.to_str().unwrap()],
        &prog.path,
        &["2", "4"],
        &[],
    );
    out.expect_code(0);
    assert!(out.stderr.contains("spun 2"), "{}", out.dump());
    let records: Vec<serde_json::Value> = (std::fs::read_to_string(&log).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut placements: BTreeMap<i64, Vec<&serde_json::Value>> = BTreeMap::new();
    for r in records.iter().filter(|r| r["event"] != "exit") {
        placements
            .entry(r["tid"].as_i64().unwrap())
            .or_default()
            .push(r);
    }
    for (tid, placed) in &placements {
        assert_eq!(
            placed.len(),
            1,
            "thread {tid} placed more than once: {placed:#?}"
        );
    }
    let slots: Vec<u64> = (placements.values())
        .filter_map(|p| p[0]["slot"].as_u64())
        .collect();
    assert_eq!(
        slots.len(),
        selection.task_cpus.len(),
        "a slot for each spinning thread: {records:#?}"
    );
    assert_ne!(slots[0], slots[1], "{records:#?}");
}
