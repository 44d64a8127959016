//! The housekeeper on this machine: threads the shim cannot reach (a static binary, a Go
//! program) end on their own planned CPUs, as the threads themselves read it from their own
//! `/proc/self/task/<tid>/{status,stat}`; and the telemetry counts what a thread really did.
//!
//! Every run has a deadline and a guard that kills its whole process group. Tests that need a
//! compiler skip with the reason when it is missing, and fail instead under `CI=true`.

use serde_json::Value;
use shim_tests::launch::*;
use shim_tests::{
    goset_run_bin, is_root, launcher_lock, missing, runs, two_online_cpus, Build, Outcome, Started,
};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
/// Every busy thread is allowed one planned CPU, runs on it, and no two share one; the
/// housekeeper says it placed them.
fn assert_each_on_its_own_planned_cpu(out: &Outcome, report: &Value, n: usize) {
    let ctx = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the program timed out unpinned: {ctx}"
    );
    let planned = planned_cpus(report);
    let busy = busy_lines(&out.stdout);
    assert_eq!(busy.len(), n, "{ctx}");
    let mut cpus = Vec::new();
    for b in &busy {
        let cpu: i64 = b.allowed.parse().unwrap_or_else(|_| {
            panic!("tid {} allowed {:?}, not one CPU: {ctx}", b.tid, b.allowed)
        });
        assert!(
            planned.contains(&cpu),
            "tid {} on {cpu}, plan {planned:?}: {ctx}",
            b.tid
        );
        assert_eq!(
            b.processor, cpu,
            "tid {} runs on {} but is allowed {cpu}: {ctx}",
            b.tid, b.processor
        );
        cpus.push(cpu);
    }
    cpus.sort_unstable();
    cpus.dedup();
    assert_eq!(cpus.len(), n, "busy threads share a CPU: {ctx}");
    for b in &busy {
        let entry = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == b.tid)
            .unwrap_or_else(|| panic!("tid {} not in the report: {ctx}", b.tid));
        assert_eq!(entry["placed_by"], "housekeeper", "{entry}\n{ctx}");
    }
}

/// Two busy threads, a 30 s deadline, and the placement held for 0.2 s (ten polls) before
/// they end: a CPU one of them inherited by chance (a launcher's child inherits the
/// housekeeper CPU, which -n 2 on two CPUs shares with the task) must not end the run before
/// the housekeeper saw the thread.
const BUSY_ARGS: [&str; 3] = ["2", "30", "0.2"];

/// How the test program is started below goset-run.
#[derive(Debug, Clone, Copy)]
enum Wrap {
    /// As goset-run's own child.
    Direct,
    /// By a shell that sleeps first and stays the program's parent (it waits in `wait4`, never
    /// running again while the program does: `exit $?` keeps it from exec'ing the program).
    Shell,
    /// By `mpirun -np 1`, which stays the program's parent.
    Mpirun,
}

/// The task's argv: `prog args` as `wrap` starts it; `None` (skipped) without mpirun.
fn wrapped(wrap: Wrap, prog: &Path, args: &[&str]) -> Option<Vec<std::ffi::OsString>> {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    match wrap {
        Wrap::Direct => {}
        Wrap::Shell => {
            // The program is $0 and its arguments $1..: no quoting of paths.
            argv.extend(["sh", "-c", r#"sleep 0.3; "$0" "$@"; exit $?"#].map(Into::into));
        }
        Wrap::Mpirun => {
            if !runs("mpirun") {
                missing("mpirun", "apt-get install -y openmpi-bin");
                return None;
            }
            argv.extend(["mpirun", "-np", "1"].map(Into::into));
            if is_root() {
                argv.push("--allow-run-as-root".into());
            }
            argv.extend(["--oversubscribe", "--mca", "btl", "self,vader"].map(Into::into));
        }
    }
    argv.push(prog.into());
    argv.extend(args.iter().map(Into::into));
    Some(argv)
}

/// The static program's two busy threads, started as `wrap` says, end on their own CPUs.
fn static_program(wrap: Wrap) {
    if !two_online_cpus() {
        return;
    }
    let build = Build::new();
    let Some(prog) = build.c_static("spin_static.c", "spin_static") else {
        return;
    };
    let Some(task) = wrapped(wrap, &prog, &BUSY_ARGS) else {
        return;
    };
    let _serial = launcher_lock();
    if matches!(wrap, Wrap::Direct) {
        // The check can fail: without goset the threads share the process mask until the
        // deadline.
        let alone = run({
            let mut c = Command::new(&prog);
            c.args(["2", "0.5"]);
            c
        });
        assert_eq!(
            alone.status.code(),
            Some(3),
            "unpinned threads must time out: {}",
            alone.stdout
        );
    }
    let report = build.dir().join("report.json");
    let task: Vec<&std::ffi::OsStr> = task.iter().map(|a| a.as_os_str()).collect();
    let out = goset_run(&["-n", "2", "--interval", "20"], &report, &task, &[]);
    assert_each_on_its_own_planned_cpu(&out, &json(&report), 2);
}

/// The Go program's two busy threads, started as `wrap` says, end on their own CPUs.
fn go_program(wrap: Wrap) {
    if !two_online_cpus() {
        return;
    }
    let Some(go) = shim_tests::runtimes::go("spin_go.go", false) else {
        return;
    };
    let Some(task) = wrapped(wrap, &go.path, &BUSY_ARGS) else {
        return;
    };
    let _serial = launcher_lock();
    let dir = tempfile::TempDir::new().unwrap();
    let report = dir.path().join("report.json");
    let task: Vec<&std::ffi::OsStr> = task.iter().map(|a| a.as_os_str()).collect();
    let out = goset_run(
        &["-n", "2", "--interval", "20"],
        &report,
        &task,
        &[("GOMAXPROCS", "2")],
    );
    let v = json(&report);
    assert_each_on_its_own_planned_cpu(&out, &v, 2);
    // The runtime's other threads (sysmon, idle Ms) were noticed too.
    let by_hk = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["placed_by"] == "housekeeper")
        .count();
    assert!(by_hk >= 3, "{}", out.stderr);
}

#[test]
fn static_pthread_program_busy_threads_end_on_their_own_cpus() {
    static_program(Wrap::Direct);
}

#[test]
fn static_program_below_a_waiting_shell_ends_on_its_own_cpus() {
    static_program(Wrap::Shell);
}

#[test]
fn static_program_below_mpirun_ends_on_its_own_cpus() {
    static_program(Wrap::Mpirun);
}

#[test]
fn go_program_busy_threads_end_on_their_own_cpus() {
    go_program(Wrap::Direct);
}

#[test]
fn go_program_below_a_waiting_shell_ends_on_its_own_cpus() {
    go_program(Wrap::Shell);
}

#[test]
fn context_switches_of_a_thread_are_counted() {
    // After its 200 sleeps the thread idles 500 ms: 50 polls at 10 ms to read it.
    let Some((out, v, ctx)) = run_c_program("ctxsw.c", &["-n", "1", "--interval", "10"], &["500"])
    else {
        return;
    };
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("sleeper "))
        .expect(&ctx);
    let w: Vec<&str> = line.split_whitespace().collect();
    let (tid, own): (i64, u64) = (w[2].parse().unwrap(), w[4].parse().unwrap());
    // 200 nanosleeps are about 200 voluntary switches (one whose timer expired before the
    // thread slept is none), a few more for the thread's start.
    assert!((190..=210).contains(&own), "the thread's own count: {line}");
    let t = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("tid {tid} not in the report: {ctx}"));
    let seen = t["voluntary_ctxsw"]
        .as_u64()
        .unwrap_or_else(|| panic!("{t}"));
    // The housekeeper reads it during the last sleep: the thread's count plus that sleep's.
    assert!(
        (own..=own + 2).contains(&seen),
        "report {seen}, thread {own}: {t}"
    );
    assert!(
        t["polls"].as_u64().unwrap() >= 1 && t["cpu_s"].as_f64().unwrap() > 0.0,
        "{t}"
    );
    assert!(t["run_delay_s"].is_f64() && t["migrations"].is_u64(), "{t}");
}

/// A process below a shell that waits is followed to its end: its CPU time in the report is
/// what `wait4` says the tree used, less the shell's and `sleep`'s few milliseconds.
#[test]
fn a_process_below_a_waiting_shell_is_counted_to_its_end() {
    if !runs("dd") {
        missing("dd", "apt-get install -y coreutils");
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let report = dir.path().join("report.json");
    let _serial = launcher_lock();
    let script = "sleep 0.1; dd if=/dev/zero of=/dev/null bs=1 count=2000000 2>/dev/null; exit $?";
    let out = goset_run(
        &["-n", "1", "--sample", "0", "--interval", "20"],
        &report,
        &["sh".as_ref(), "-c".as_ref(), script.as_ref()],
        &[],
    );
    let ctx = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    let v = json(&report);
    let ru = &v["run"]["rusage"];
    let tree_s = ru["user_s"].as_f64().unwrap() + ru["system_s"].as_f64().unwrap();
    let dd = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "dd")
        .unwrap_or_else(|| panic!("dd not in the report: {ctx}"));
    let cpu_s = dd["cpu_s"].as_f64().unwrap_or_else(|| panic!("{dd}"));
    let polls = dd["polls"].as_u64().unwrap();
    // Read at every poll of its life: every poll that read the shell (a main thread, read at
    // each), but those of the shell's first 0.1 s (at most 5 at 20 ms, and the two around
    // dd's start). Counted in polls, not in time: a loaded machine delays the polls of both.
    let sh = (v["threads"].as_array().unwrap().iter())
        .find(|t| t["comm"] == "sh")
        .unwrap_or_else(|| panic!("sh not in the report: {ctx}"));
    let sh_polls = sh["polls"].as_u64().unwrap_or_else(|| panic!("{sh}"));
    assert!(
        polls + 7 >= sh_polls,
        "dd read at {polls} polls, the shell at {sh_polls}: {dd}"
    );
    assert!(
        cpu_s > 0.8 * tree_s - 0.03 && cpu_s <= tree_s,
        "dd {cpu_s} s of the tree's {tree_s} s: {dd}"
    );
    let sh = &v["threads"][0];
    assert_eq!(sh["comm"], "sh", "{sh}");
    assert_eq!(sh["exited"], true, "the shell ended: {sh}");
}

#[test]
fn report_keeps_its_keys_and_never_shows_a_fake_zero() {
    let dir = tempfile::TempDir::new().unwrap();
    let report = dir.path().join("report.json");
    let _serial = launcher_lock();
    let out = goset_run(
        &["-n", "1", "--quiet"],
        &report,
        &["sleep".as_ref(), "0.3".as_ref()],
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty() || out.stderr.starts_with("Errors\n"),
        "--quiet prints nothing but errors: {}",
        out.stderr
    );
    assert!(!out.stderr.contains("Selection"));
    let v = json(&report);
    for key in ["selection", "run", "threads", "errors", "telemetry"] {
        assert!(v.get(key).is_some(), "no {key}: {v}");
    }
    let t = &v["telemetry"];
    let cpus = t["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), 1);
    assert_eq!(cpus[0]["cpu"], v["selection"]["task_cpus"][0]);
    assert!(
        cpus[0]["irq_nonsteerable"].is_u64() && cpus[0]["rows"]["LOC"].is_u64(),
        "{t}"
    );
    assert!(
        t["polls"].as_u64().unwrap() >= 1 && t["housekeeper"]["cpu_s"].is_f64(),
        "{t}"
    );
    let errors = v["errors"].to_string();
    let cpu = cpus[0]["cpu"].as_u64().unwrap();
    let cpufreq = Path::new("/sys/devices/system/cpu")
        .join(format!("cpu{cpu}"))
        .join("cpufreq/scaling_cur_freq");
    if !cpufreq.exists() {
        assert!(cpus[0]["freq_avg_khz"].is_null(), "{t}");
        assert!(errors.contains("scaling_cur_freq"), "{errors}");
    }
    let main = &v["threads"][0];
    for key in [
        "tid",
        "pid",
        "comm",
        "role",
        "slot",
        "cpu",
        "shared",
        "set_calls",
        "exited",
        "placed_by",
    ] {
        assert!(main.get(key).is_some(), "thread entry lacks {key}: {main}");
    }
    assert_eq!(main["comm"], "sleep");
    assert_eq!(main["seen_on"], serde_json::json!([cpu]), "{main}");
}

/// A process that keeps replacing a short-lived thread holds its thread count while its
/// threads change; the busy thread beside them, once placed, must stay placed (it is read
/// once per poll, so its demand is measured, not zero).
#[test]
fn a_busy_thread_stays_placed_while_other_threads_come_and_go() {
    let build = Build::new();
    let Some(prog) = build.c_static("churn.c", "churn") else {
        return;
    };
    let _serial = launcher_lock();
    let report = build.dir().join("report.json");
    let out = goset_run(
        &["-n", "1", "--interval", "20"],
        &report,
        &[prog.as_os_str(), "3".as_ref()],
        &[],
    );
    let ctx = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the busy thread was never placed: {ctx}"
    );
    let planned = json(&report)["selection"]["task_cpus"][0]
        .as_i64()
        .unwrap()
        .to_string();
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("busy "))
        .unwrap_or_else(|| panic!("{ctx}"));
    assert!(
        line.contains(&format!("allowed={planned} ")),
        "{line} (plan {planned}): {ctx}"
    );
    assert!(
        line.ends_with("moves=0"),
        "the busy thread was moved off its CPU: {line}\n{ctx}"
    );
}

/// `goset-run -n 2 --interval 20 -- held MODE pidfile 1` with two workers held stopped by
/// ptrace for 25 polls from their birth, before they first run: placed by the shim when they
/// were born (a claim and a mask), they write their records only once released. Every busy
/// worker then ends on a planned CPU of its own, and the housekeeper placed none (a `move` of
/// the demand rule comes after the record): it must decide from the kernel's view of a thread,
/// not from how long its record takes.
fn held_workers(mode: &str) {
    if !two_online_cpus() {
        return;
    }
    let build = Build::new();
    let Some(prog) = build.c("held.c", "held") else {
        return;
    };
    let _serial = launcher_lock();
    let (report, log, pidfile) = (
        build.dir().join("report.json"),
        build.dir().join("placement.log"),
        build.dir().join("pid"),
    );
    let mut cmd = Command::new(goset_run_bin());
    cmd.args(["-n", "2", "--interval", "20", "--json"])
        .arg(&report)
        .arg("--log")
        .arg(&log)
        .arg("--")
        .arg(&prog)
        .arg(mode)
        .arg(&pidfile)
        .arg("1");
    let run = Started::new(cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "no pid file: {:?}",
            run.finish(RUN_DEADLINE)
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let Some(held) = hold_new_tasks(pid, 2, Duration::from_millis(500), || run.go()) else {
        return;
    };
    let out = run.finish(RUN_DEADLINE);
    check_held_workers(&out, &held, pid, &report, &log);
}

/// What [`held_workers`] checks once the run is over: every busy worker on a planned CPU of
/// its own, none of them placed by the housekeeper.
fn check_held_workers(out: &Outcome, held: &[i32], pid: i32, report: &Path, log: &Path) {
    let ctx = format!(
        "held {held:?}\nstdout:\n{}\nstderr:\n{}\nlog:\n{}",
        out.stdout,
        out.stderr,
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    let planned = planned_cpus(&json(report));
    let busy = busy_lines(&out.stdout);
    assert_eq!(busy.len(), 2, "{ctx}");
    let mut cpus: Vec<i64> = busy
        .iter()
        .map(|b| {
            let cpu: i64 = b.allowed.parse().unwrap_or_else(|_| panic!("{b:?}: {ctx}"));
            assert!(planned.contains(&cpu) && b.processor == cpu, "{b:?}: {ctx}");
            cpu
        })
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    assert_eq!(cpus.len(), 2, "busy workers share a CPU: {ctx}");
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| panic!("--log: {e}: {ctx}"));
    // The main thread was born on slot 0 (claimed before exec), before the shim started.
    let main_slot = text.lines().find_map(|l| {
        let r: Value = serde_json::from_str(l).ok()?;
        (r["event"] == "init" && r["tid"] == pid).then(|| r["slot"].clone())
    });
    assert_eq!(main_slot, Some(Value::from(0)), "{ctx}");
    for b in &busy {
        assert!(held.contains(&(b.tid as i32)), "{b:?} was not held: {ctx}");
        let by_hk = text.lines().any(|l| {
            let r: Value = serde_json::from_str(l).unwrap_or_default();
            // A move is the demand rule's, on a thread whose record it read (the second
            // worker, born while the main thread and the first ran, roams until moved).
            r["tid"] == b.tid && r["placed_by"] == "housekeeper" && r["event"] != "move"
        });
        assert!(!by_hk, "the housekeeper placed the shim's {b:?}: {ctx}");
    }
}

#[test]
fn threads_the_shim_placed_are_left_alone_however_late_their_records() {
    held_workers("threads");
}

#[test]
fn forks_the_shim_places_are_left_alone_however_late_their_records() {
    held_workers("forks");
}

/// `goset-run -n 2 --interval 10 -- spawners 2 200 1`: 200 threads sleep while 2 create and join
/// threads. The housekeeper's cost grows with the threads that run, not with those that
/// exist: a sleeping thread is read a few times a second (at least every 250 ms, and at the
/// once-a-second pass), not at each of the ~100 polls, while a spawner is read whenever it ran.
#[test]
fn sleeping_threads_are_read_a_few_times_a_second_not_every_poll() {
    let flags = ["-n", "2", "--sample", "0", "--interval", "10"];
    let Some((_, v, ctx)) = run_c_program("spawners.c", &flags, &["2", "200", "1"]) else {
        return;
    };
    let polls = v["telemetry"]["polls"].as_u64().unwrap();
    assert!(polls >= 20, "{polls} polls in a 1 s run at 10 ms: {ctx}");
    let threads = v["threads"].as_array().unwrap();
    let pid = threads[0]["pid"].clone();
    // The two spawners are the threads that used CPU; how much depends on the machine's load,
    // so they are the two that used the most, and every sleeper used far less.
    let cpu_s = |t: &Value| t["cpu_s"].as_f64().unwrap_or(0.0);
    let mut workers: Vec<&Value> = threads
        .iter()
        .filter(|t| t["pid"] == pid && t["tid"] != pid && t["polls"].as_u64() > Some(0))
        .collect();
    workers.sort_by(|a, b| cpu_s(b).total_cmp(&cpu_s(a)));
    let (busy, asleep) = workers.split_at(2.min(workers.len()));
    let sleepers_max = asleep.iter().map(|t| cpu_s(t)).fold(0.0, f64::max);
    assert!(
        busy.iter().all(|t| cpu_s(t) > 10.0 * sleepers_max),
        "the spawners ran, the sleepers hardly: {busy:?}, sleepers up to {sleepers_max} s"
    );
    assert!(
        asleep.len() >= 190,
        "{} sleepers in the report: {ctx}",
        asleep.len()
    );
    for t in asleep {
        let read = t["polls"].as_u64().unwrap();
        assert!(
            read <= polls / 4 + 8,
            "a sleeper read {read} of {polls} polls: {t}"
        );
    }
    // The spawners ran throughout, so they were read more often than any sleeper (a thread
    // that waited to run for a few polls is read less often until it runs again).
    assert_eq!(busy.len(), 2, "{ctx}");
    let most_asleep = asleep
        .iter()
        .filter_map(|t| t["polls"].as_u64())
        .max()
        .unwrap();
    for t in busy {
        let read = t["polls"].as_u64().unwrap();
        assert!(
            read > most_asleep,
            "a spawner read {read} of {polls} polls: {t}"
        );
    }
}

/// A thread that names itself after its birth and is still alive when its process exits is
/// reported under its own name, not its creator's (the shim's create record is written before
/// the program renames it, and no exit record of its own comes).
#[test]
fn a_thread_is_reported_under_the_name_it_gave_itself() {
    let Some((_, v, ctx)) = run_c_program("renamed.c", &["-n", "2", "--sample", "0"], &[]) else {
        return;
    };
    let threads = v["threads"].as_array().unwrap();
    let pid = threads[0]["pid"].clone();
    let worker = threads
        .iter()
        .find(|t| t["pid"] == pid && t["tid"] != pid)
        .unwrap_or_else(|| panic!("no worker row: {ctx}"));
    assert_eq!(worker["comm"], "own-name", "{worker}: {ctx}");
}
