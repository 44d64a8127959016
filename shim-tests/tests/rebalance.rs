//! Placement that follows demand (issue 13): busy threads the shim placed by count alone and
//! that doubled up on one CPU while a planned CPU had no busy thread are spread by the
//! housekeeper, once, and stay; `--no-adapt` leaves them. A Go program's threads, placed by
//! the housekeeper, stay where their demand put them.

mod common;
use common::runtimes::go;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;

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

/// `sort --parallel=2 | md5sum` under `-n 2`: sort's main thread and md5sum each take a slot,
/// then sort's workers take the slot with fewer live threads, by count alone: in runs where
/// md5sum (asleep on its pipe) holds slot 1, each worker lands beside sort's busy main thread.
/// Whatever order the processes started in, every worker that lives a second ends on a CPU
/// without sort's main thread, no thread moves twice, and the output is sort's.
#[test]
fn sort_parallel_workers_end_alone() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("numbers");
    // 3 million shuffled numbers (about 23 MB): sort's workers live a second or more each.
    let mut text = String::new();
    let mut x: u64 = 88172645463325252;
    for _ in 0..3_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!("{}\n", x % 1_000_000_000));
    }
    std::fs::write(&input, text).unwrap();
    let script = format!(
        "sort --parallel=2 -S 200M {} | md5sum",
        input.to_str().unwrap()
    );
    let expected = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    let log = dir.path().join("place.log");
    let (out, _) = run_under_goset(
        2,
        &["--log", log.to_str().unwrap()],
        Path::new("sh"),
        &["-c", &script],
        &[],
    );
    out.expect_code(0);
    assert_eq!(out.stdout, String::from_utf8_lossy(&expected.stdout));
    let records: Vec<serde_json::Value> = (std::fs::read_to_string(&log).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |tid: i64| records.iter().filter(move |r| r["tid"] == tid);
    let time = |r: &serde_json::Value| r["time"].as_f64().unwrap();
    let sort_main = (records.iter())
        .find(|r| r["comm"] == "sort" && r["role"] == "main" && r["event"] == "init")
        .unwrap_or_else(|| panic!("no sort main thread: {records:#?}"));
    let main_cpu = |at: f64| {
        (of(sort_main["tid"].as_i64().unwrap()))
            .rfind(|r| r["event"] != "exit" && time(r) <= at)
            .map(|r| r["cpu"].clone())
    };
    let workers: Vec<i64> = (records.iter())
        .filter(|r| r["comm"] == "sort" && r["event"] == "create")
        .map(|r| r["tid"].as_i64().unwrap())
        .collect();
    let mut long_lived = 0;
    for tid in workers {
        let placed: Vec<&serde_json::Value> = of(tid).filter(|r| r["event"] != "exit").collect();
        let moves = placed.iter().filter(|r| r["event"] == "move").count();
        assert!(moves <= 1, "worker {tid} moved {moves} times: {records:#?}");
        let Some(exit) = of(tid).find(|r| r["event"] == "exit") else {
            continue;
        };
        if time(exit) - time(placed[0]) < 1.0 {
            continue;
        }
        long_lived += 1;
        let last = placed.last().unwrap();
        assert_ne!(
            Some(last["cpu"].clone()),
            main_cpu(time(exit)),
            "worker {tid} ended beside sort's main thread: {records:#?}"
        );
    }
    assert!(long_lived > 0, "no worker lived a second: {records:#?}");
}
