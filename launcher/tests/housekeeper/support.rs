//! Helpers of the housekeeper tests: building the test programs (skipping with an install
//! hint when a tool is missing, failing under `CI=true`), running goset-run with a deadline
//! and a guard that kills its whole process group, and reading what the programs print.

use super::common;
use serde_json::Value;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One goset-run at a time: on 2 CPUs, two runs would only measure each other.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

pub(crate) const RUN_DEADLINE: Duration = Duration::from_secs(90);

pub(crate) fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// A missing tool: skip with how to install it, or fail under CI.
pub(crate) fn missing(tool: &str, install: &str) -> bool {
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
pub(crate) fn gcc(dir: &Path, src: &str, extra: &[&str]) -> Option<PathBuf> {
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
pub(crate) fn go_build(dir: &Path) -> Option<PathBuf> {
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
pub(crate) struct Guard(Option<std::process::Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            // SAFETY: kill with a negative pid signals the group the child leads.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

pub(crate) struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` in its own process group with a deadline; the guard kills the group if the
/// deadline passes or the test panics.
pub(crate) fn run(mut cmd: Command) -> Output {
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

pub(crate) fn goset_run(
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

pub(crate) fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("--json file written")).expect("valid JSON")
}

/// One `busy <i> tid <tid> allowed <list> processor <cpu>` line.
#[derive(Debug)]
pub(crate) struct Busy {
    pub tid: i64,
    pub allowed: String,
    pub processor: i64,
}

pub(crate) fn busy_lines(stdout: &str) -> Vec<Busy> {
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
