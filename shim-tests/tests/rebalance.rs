//! Placement that follows demand (issue 13): busy threads the shim placed by count alone and
//! that doubled up on one CPU while a planned CPU had no busy thread are spread by the
//! housekeeper, once, and stay.

mod common;
use common::*;

#[test]
fn busy_threads_doubled_up_by_count_are_spread_once() {
    let Some(program) = Program::c("placed_threads.c") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("place.log");
    // main (waits), busy 0, a sleeper, busy 1: by count, busy 1 lands beside busy 0. The
    // program waits until each busy thread is alone on its CPU for 2 s (RC 3 at 20 s).
    let (out, selection) = run_under_goset(
        2,
        &["--log", log.to_str().unwrap()],
        program.path(),
        &["2", "20", "2", "sleeper"],
        &[],
    );
    out.expect_code(0);
    let reports = reports(&out);
    let busy = with_role(&reports, "busy");
    assert_distinct(busy.iter().copied(), &selection.task_cpus);
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let moves: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "move").collect();
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
