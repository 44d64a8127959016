//! The housekeeper on this machine: threads the shim cannot reach (a static binary, a Go
//! program) end on their own planned CPUs, as the threads themselves read it from their own
//! `/proc/self/task/<tid>/{status,stat}`; and the telemetry counts what a thread really did.
//!
//! Every run has a deadline and a guard that kills its whole process group. Tests that need a
//! compiler skip with the reason when it is missing, and fail instead under `CI=true`.

mod common;

use serde_json::Value;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One goset-run at a time: on 2 CPUs, two runs would only measure each other.
static SERIAL: Mutex<()> = Mutex::new(());

const RUN_DEADLINE: Duration = Duration::from_secs(90);

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// A missing tool: skip with how to install it, or fail under CI.
fn missing(tool: &str, install: &str) -> bool {
    let found = Command::new(tool)
        .arg(if tool == "go" { "version" } else { "--version" })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return false;
    }
    let msg = format!("{tool} not found: install it with `{install}`");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg} (required under CI=true)");
    }
    eprintln!("skipped: {msg}");
    true
}

/// Compiles a C test program; `None` (skipped) without gcc or a static libc.
fn gcc(dir: &Path, src: &str, extra: &[&str]) -> Option<PathBuf> {
    if missing("gcc", "apt-get install -y gcc") {
        return None;
    }
    let out = dir.join(src.trim_end_matches(".c"));
    let res = Command::new("gcc")
        .args(["-O2", "-Wall", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(programs().join(src))
        .output()
        .expect("run gcc");
    assert!(
        res.status.success(),
        "gcc {src}: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    Some(out)
}

/// Builds the Go test program with caches inside `dir`; `None` (skipped) without golang-go.
fn go_build(dir: &Path) -> Option<PathBuf> {
    if missing("go", "apt-get install -y golang-go") {
        return None;
    }
    let src = dir.join("spin_go.go");
    std::fs::copy(programs().join("spin_go.go"), &src).unwrap();
    let out = dir.join("spin_go");
    let res = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .current_dir(dir)
        .env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOTOOLCHAIN", "local")
        .env("GO111MODULE", "off")
        .env_remove("GOFLAGS")
        .output()
        .expect("run go build");
    assert!(
        res.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    Some(out)
}

/// Kills the whole process group of a run (goset-run and its task) unless it ended.
struct Guard(Option<std::process::Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            // SAFETY: kill with a negative pid signals the group the child leads.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` in its own process group with a deadline; the guard kills the group if the
/// deadline passes or the test panics.
fn run(mut cmd: Command) -> Output {
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut guard = Guard(Some(cmd.spawn().expect("spawn")));
    let child = guard.0.as_mut().unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < RUN_DEADLINE,
            "{cmd:?} still running after {RUN_DEADLINE:?}: killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    guard.0 = None;
    Output {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn goset_run(
    args: &[&str],
    json: &Path,
    task: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(common::bin("goset-run"));
    cmd.args(args).arg("--json").arg(json).arg("--").args(task);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd)
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("--json file written")).expect("valid JSON")
}

/// One `busy <i> tid <tid> allowed <list> processor <cpu>` line.
#[derive(Debug)]
struct Busy {
    tid: i64,
    allowed: String,
    processor: i64,
}

fn busy_lines(stdout: &str) -> Vec<Busy> {
    stdout
        .lines()
        .filter(|l| l.starts_with("busy "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 8, "bad line {l:?}");
            Busy {
                tid: w[3].parse().unwrap(),
                allowed: w[5].to_string(),
                processor: w[7].parse().unwrap(),
            }
        })
        .collect()
}

/// Every busy thread is allowed one planned CPU, runs on it, and no two share one; the
/// housekeeper says it placed them.
fn assert_each_on_its_own_planned_cpu(out: &Output, report: &Value, n: usize) {
    let ctx = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "the program timed out unpinned: {ctx}");
    let planned: Vec<i64> = report["selection"]["task_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_i64().unwrap())
        .collect();
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
        assert_eq!(entry["placed_by"], "housekeeper", "{entry}");
    }
}

fn two_cpus() -> bool {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        eprintln!("skipped: needs 2 CPUs");
    }
    n >= 2
}

#[test]
fn static_pthread_program_busy_threads_end_on_their_own_cpus() {
    if !two_cpus() {
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let Some(prog) = gcc(dir.path(), "spin_static.c", &["-static"]) else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The check can fail: without goset the threads share the process mask until the deadline.
    let alone = run({
        let mut c = Command::new(&prog);
        c.args(["2", "0.5"]);
        c
    });
    assert_eq!(
        alone.code,
        Some(3),
        "unpinned threads must time out: {}",
        alone.stdout
    );

    let report = dir.path().join("report.json");
    let out = goset_run(
        &["-n", "2", "--interval", "20"],
        &report,
        &[prog.as_os_str(), "2".as_ref()],
        &[],
    );
    assert_each_on_its_own_planned_cpu(&out, &json(&report), 2);
}

#[test]
fn go_program_busy_threads_end_on_their_own_cpus() {
    if !two_cpus() {
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let Some(prog) = go_build(dir.path()) else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = dir.path().join("report.json");
    let out = goset_run(
        &["-n", "2", "--interval", "20"],
        &report,
        &[prog.as_os_str(), "2".as_ref()],
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
fn context_switches_of_a_thread_are_counted() {
    let dir = tempfile::TempDir::new().unwrap();
    let Some(prog) = gcc(dir.path(), "ctxsw.c", &[]) else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = dir.path().join("report.json");
    // After its 200 sleeps the thread idles 500 ms: 50 polls at 10 ms to read it.
    let out = goset_run(
        &["-n", "1", "--interval", "10"],
        &report,
        &[prog.as_os_str(), "500".as_ref()],
        &[],
    );
    let ctx = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "{ctx}");
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("sleeper "))
        .expect(&ctx);
    let w: Vec<&str> = line.split_whitespace().collect();
    let (tid, own): (i64, u64) = (w[2].parse().unwrap(), w[4].parse().unwrap());
    // 200 nanosleeps are 200 voluntary switches; a few more for the thread's start.
    assert!((200..=210).contains(&own), "the thread's own count: {line}");
    let v = json(&report);
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

#[test]
fn report_keeps_its_keys_and_never_shows_a_fake_zero() {
    let dir = tempfile::TempDir::new().unwrap();
    let report = dir.path().join("report.json");
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = goset_run(
        &["-n", "1", "--quiet"],
        &report,
        &["sleep".as_ref(), "0.3".as_ref()],
        &[],
    );
    assert_eq!(out.code, Some(0));
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
