//! Placement that follows demand: busy threads the shim placed by count alone and
//! that doubled up on one CPU while a planned CPU had no busy thread are spread by the
//! housekeeper, once, and stay; `--no-adapt` leaves them. A Go program's threads, placed by
//! the housekeeper, stay where their demand put them.

use shim_tests::runtimes::go;
use shim_tests::*;
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
            // Doubled up on a slot, or born roaming (every slot ran a thread: the waiting
            // main thread its creator, busy 0 a newborn) and given the main thread's slot.
            .starts_with("demand: "),
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
/// each thread is placed once: the two spinning ones (those that ran longest, by the report)
/// on a slot each. Another thread may take a slot too: on a machine another program keeps
/// busy, a runtime thread that waits for a CPU at two polls in a row (the Go runtime's start)
/// wants one, and counts as busy.
#[test]
fn go_threads_are_placed_once_and_stay() {
    let Some(prog) = go("go_spin.go", false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (log, report) = (dir.path().join("place.log"), dir.path().join("report.json"));
    let task = [prog.path.as_os_str(), "2".as_ref(), "4".as_ref()];
    let flags = ["-n", "2", "--log", log.to_str().unwrap()];
    let out = shim_tests::launch::goset_run(&flags, &report, &task, &[]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("spun 2"), "{}", out.stderr);
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
    let report = shim_tests::launch::json(&report);
    let mut threads: Vec<(f64, i64)> = (report["threads"].as_array().unwrap().iter())
        .map(|t| {
            (
                t["cpu_s"].as_f64().unwrap_or(0.0),
                t["tid"].as_i64().unwrap(),
            )
        })
        .collect();
    threads.sort_by(|x, y| y.0.total_cmp(&x.0));
    let slots: Vec<Option<u64>> = (threads.iter().take(2))
        .map(|(_, tid)| placements.get(tid).and_then(|p| p[0]["slot"].as_u64()))
        .collect();
    assert!(
        slots.len() == 2 && slots[0].is_some() && slots[1].is_some() && slots[0] != slots[1],
        "the two spinning threads {threads:?} on a slot each: {slots:?}\n{records:#?}"
    );
}

/// `sort --parallel=2 | md5sum` under `-n 2`: sort's main thread and md5sum each take a slot,
/// then sort's workers take the slot with fewer live threads, by count alone: in runs where
/// md5sum (asleep on its pipe) holds slot 1, each worker lands beside sort's busy main thread.
/// Whatever order the processes started in, every worker that lives a second ends on a CPU
/// without sort's main thread, no thread moves twice, and the output is sort's.
/// One reading of a thread in `/proc`.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Seconds since the watch started.
    at: f64,
    pid: i32,
    tid: i32,
    /// Field 39: the CPU it last ran on.
    cpu: usize,
    /// Fields 14 + 15: its CPU time, in ticks.
    ticks: u64,
}

/// Reads every thread of every process named `comm` in `/proc` every 20 ms, in a thread of this
/// test, until [`ProcWatch::stop`].
struct ProcWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Seen>>,
}

impl ProcWatch {
    fn start(comm: &'static str) -> ProcWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let begin = std::time::Instant::now();
            let mut seen = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let at = begin.elapsed().as_secs_f64();
                let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
                for pid in pids.filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()) {
                    let named = std::fs::read_to_string(format!("/proc/{pid}/comm"));
                    if named.map(|c| c.trim() != comm).unwrap_or(true) {
                        continue;
                    }
                    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter();
                    for e in tasks.flatten().flatten() {
                        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse().ok()) else {
                            continue;
                        };
                        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                            continue;
                        };
                        let Some((_, rest)) = stat.rsplit_once(')') else {
                            continue;
                        };
                        let f: Vec<&str> = rest.split_whitespace().collect();
                        // f[0] is field 3.
                        let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
                        if let (Some(u), Some(s), Some(cpu)) = (num(14), num(15), num(39)) {
                            seen.push(Seen {
                                at,
                                pid,
                                tid,
                                cpu: cpu as usize,
                                ticks: u + s,
                            });
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            seen
        });
        ProcWatch { stop, handle }
    }

    fn stop(self) -> Vec<Seen> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// The readings of `seen` at which a thread other than its process's main thread had run since
/// its previous reading, on the CPU its main thread had also run on since, `settle_s` or more
/// after the thread was first seen: two busy threads doubled up.
fn doubled_up(seen: &[Seen], settle_s: f64) -> Vec<(Seen, Seen)> {
    let mut last: BTreeMap<i32, Seen> = BTreeMap::new();
    let mut first: BTreeMap<i32, f64> = BTreeMap::new();
    let mut ran: BTreeMap<i32, Seen> = BTreeMap::new();
    let mut found = Vec::new();
    for &s in seen {
        first.entry(s.tid).or_insert(s.at);
        let busy = last
            .get(&s.tid)
            .is_some_and(|l| s.ticks > l.ticks && l.at < s.at);
        last.insert(s.tid, s);
        // Only readings of the same sweep (the same `at`) are compared.
        ran.retain(|_, r| r.at == s.at);
        if !busy {
            continue;
        }
        ran.insert(s.tid, s);
        let pair = if s.tid == s.pid {
            ran.values()
                .find(|w| w.pid == s.pid && w.tid != w.pid)
                .map(|&w| (w, s))
        } else {
            ran.get(&s.pid).map(|&m| (s, m))
        };
        if let Some((worker, main)) = pair {
            if worker.cpu == main.cpu && worker.at - first[&worker.tid] >= settle_s {
                found.push((worker, main));
            }
        }
    }
    found
}

#[test]
fn sort_parallel_workers_end_alone() {
    // sort's workers must live a second (several polls) for the check to say anything: the
    // input grows until one does, however fast the machine.
    for numbers in [3_000_000, 8_000_000, 20_000_000] {
        if sort_parallel(numbers) {
            return;
        }
    }
    panic!("no sort worker lived a second, even with 20 million numbers");
}

/// Writes `numbers` shuffled numbers to `input`, one a line.
fn write_shuffled(input: &Path, numbers: usize) {
    // 3 million shuffled numbers are about 23 MB (sort takes about 64 bytes a line).
    let mut text = String::new();
    let mut x: u64 = 88172645463325252;
    for _ in 0..numbers {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!("{}\n", x % 1_000_000_000));
    }
    std::fs::write(input, text).unwrap();
}

/// From the placement `log`: no sort worker moved twice, and each that lived a second ended
/// on a CPU other than sort's main thread's. Returns whether one lived a second.
fn long_lived_workers_left_main(log: &Path) -> bool {
    let records: Vec<serde_json::Value> = (std::fs::read_to_string(log).unwrap().lines())
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
    long_lived > 0
}

/// `sort --parallel=2` of `numbers` shuffled numbers under goset-run: no worker ends beside
/// sort's main thread. Returns whether a worker lived a second.
fn sort_parallel(numbers: usize) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("numbers");
    write_shuffled(&input, numbers);
    // A buffer that holds the whole input: sort's workers sort it in one go (with a smaller
    // one they sort chunk by chunk, and each lives no longer than a chunk takes).
    let script = format!(
        "sort --parallel=2 -S {}M {} | md5sum",
        numbers * 64 / 1_000_000,
        input.to_str().unwrap()
    );
    let expected = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    let log = dir.path().join("place.log");
    let watch = ProcWatch::start("sort");
    let (out, _) = run_under_goset(
        2,
        &["--log", log.to_str().unwrap()],
        Path::new("sh"),
        &["-c", &script],
        &[],
    );
    let seen = watch.stop();
    out.expect_code(0);
    assert_eq!(out.stdout, String::from_utf8_lossy(&expected.stdout));
    // From /proc: half a second after a worker appears (two polls and more), it never runs on
    // the CPU sort's main thread runs on (with --no-adapt it did in 2 of 3 runs).
    assert!(
        seen.iter().any(|s| s.tid != s.pid),
        "no sort worker seen in /proc"
    );
    let doubled = doubled_up(&seen, 0.5);
    assert!(
        doubled.is_empty(),
        "busy beside sort's main thread: {doubled:?}"
    );
    long_lived_workers_left_main(&log)
}
