//! goset-run as a whole, for the tests that read its report: runs with a longer deadline than
//! [`super::run`]'s (they sample, report and run the housekeeper too), ptrace holds on the
//! task's new threads, and what the programs and the report say.

use super::{goset_run_bin, launcher_lock, run_within, Build, Outcome};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Longest a whole goset-run (its task, housekeeper and report) may take before its group is
/// killed: one of these tasks runs up to 80 s under its own `timeout`.
pub const RUN_DEADLINE: Duration = Duration::from_secs(90);

/// Runs `cmd` (goset-run, mostly) with stdin closed, in its own process group, for up to
/// [`RUN_DEADLINE`].
pub fn run(cmd: Command) -> Outcome {
    run_within(cmd, RUN_DEADLINE)
}

/// Holds the next `count` tasks (threads or forked processes) that `pid`'s main thread
/// creates stopped under ptrace from their birth, before they first run, for `hold`, then
/// lets them go; `go` makes the process create them. Returns their tids, or `None` (skipped,
/// or failed under `CI=true`) when this process may not trace `pid`.
pub fn hold_new_tasks(
    pid: i32,
    count: usize,
    hold: Duration,
    go: impl FnOnce(),
) -> Option<Vec<i32>> {
    let options = libc::PTRACE_O_TRACECLONE | libc::PTRACE_O_TRACEFORK | libc::PTRACE_O_TRACEVFORK;
    // SAFETY: PTRACE_SEIZE takes no memory from this process.
    if unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, options as libc::c_ulong) } != 0 {
        let msg = format!(
            "cannot trace pid {pid}: {}",
            std::io::Error::last_os_error()
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg} (required under CI=true: run as root)");
        }
        eprintln!("skipped: {msg}");
        return None;
    }
    go();
    let mut born = Vec::new();
    while born.len() < count {
        let mut status = 0;
        // SAFETY: waitpid writes the status word only.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
        assert!(
            libc::WIFSTOPPED(status),
            "pid {pid} ended (status {status:#x}) before it created {count} tasks"
        );
        let event = status >> 16;
        let mut signal = 0;
        if [
            libc::PTRACE_EVENT_CLONE,
            libc::PTRACE_EVENT_FORK,
            libc::PTRACE_EVENT_VFORK,
        ]
        .contains(&event)
        {
            let mut tid: libc::c_ulong = 0;
            // SAFETY: PTRACE_GETEVENTMSG writes one unsigned long to the pointer.
            unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, pid, 0, &mut tid) };
            born.push(tid as i32);
        } else if event == 0 {
            // A signal on its way to the process: deliver it.
            signal = libc::WSTOPSIG(status);
        }
        let request = if born.len() < count {
            libc::PTRACE_CONT
        } else {
            libc::PTRACE_DETACH
        };
        // SAFETY: the tracee is stopped; the data argument is a signal number.
        unsafe { libc::ptrace(request, pid, 0, signal as libc::c_ulong) };
    }
    for &tid in &born {
        let mut status = 0;
        // SAFETY: as above; a new task reports its first stop before it runs.
        unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
    }
    std::thread::sleep(hold);
    for &tid in &born {
        // SAFETY: the task is in its first stop.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0 as libc::c_ulong) };
    }
    Some(born)
}

/// Runs `goset-run ARGS --json JSON -- TASK...` with `env` added, within [`RUN_DEADLINE`].
pub fn goset_run(
    args: &[&str],
    json: &Path,
    task: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> Outcome {
    let mut cmd = Command::new(goset_run_bin());
    cmd.args(args).arg("--json").arg(json).arg("--").args(task);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd)
}

/// Builds the C test program `src`, runs `goset-run FLAGS --json R -- program ARGS` (one run at
/// a time) and checks it exited 0; its output, its report and a context for messages, or
/// `None` (skipped) without gcc.
pub fn run_c_program(src: &str, flags: &[&str], args: &[&str]) -> Option<(Outcome, Value, String)> {
    let build = Build::new();
    let prog = build.c(src, src.trim_end_matches(".c"))?;
    let _serial = launcher_lock();
    let report = build.dir().join("report.json");
    let mut task = vec![prog.as_os_str()];
    task.extend(args.iter().map(std::ffi::OsStr::new));
    let out = goset_run(flags, &report, &task, &[]);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    let v = json(&report);
    Some((out, v, ctx))
}

/// The report's task CPUs, in slot order.
pub fn planned_cpus(report: &Value) -> Vec<i64> {
    report["selection"]["task_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_i64().unwrap())
        .collect()
}

/// The JSON report goset-run wrote to `path`.
pub fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("--json file written")).expect("valid JSON")
}

/// One `busy <i> tid <tid> allowed <list> processor <cpu>` line.
#[derive(Debug)]
pub struct Busy {
    /// The thread.
    pub tid: i64,
    /// Its `Cpus_allowed_list`.
    pub allowed: String,
    /// The CPU it last ran on (`processor` of its stat).
    pub processor: i64,
}

/// The `busy` lines of `stdout`.
pub fn busy_lines(stdout: &str) -> Vec<Busy> {
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
