//! Concurrent goset-runs on this machine never take the same task CPUs (issue 11): runs started
//! within a few milliseconds of each other get disjoint CPUs, or one line naming the runs that
//! hold them (exit 1); `kill -9` of a launcher frees its booking for the next run. The CPUs
//! are read from each task's own `/proc/self/status`, not from goset's report.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// These tests book this machine's CPUs: one at a time.
static MACHINE: Mutex<()> = Mutex::new(());

/// Kills what a test started even when it fails.
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `goset-run -q -n 1 --sample 0 -- sh -c '<print my CPUs>; sleep HOLD'`.
fn holder(hold_s: &str) -> Command {
    let mut cmd = Command::new(common::bin("goset-run"));
    cmd.args(["-q", "-n", "1", "--sample", "0", "--", "sh", "-c"])
        .arg(format!(
            "grep Cpus_allowed_list /proc/self/status; sleep {hold_s}"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What one run reported: its task's CPUs, or goset-run's error line.
fn outcome(child: Child) -> Result<String, (i32, String)> {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    match out.status.code() {
        Some(0) => Ok(stdout
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or_else(|| panic!("no mask printed: {stdout}"))
            .trim()
            .to_string()),
        code => Err((code.unwrap_or(-1), stderr)),
    }
}

/// Starts `n` holders back to back (a few milliseconds for all) and collects what each got.
fn round(n: usize, hold_s: &str) -> Vec<Result<String, (i32, String)>> {
    let started = Instant::now();
    let mut children: Vec<Child> = (0..n).map(|_| holder(hold_s).spawn().unwrap()).collect();
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "the runs must start together"
    );
    let results = children.drain(..).map(outcome).collect();
    results
}

fn cpus_online() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) as usize }
}

/// The runs that got CPUs have distinct ones; each of the others is one line, exit 1, naming
/// the runs that hold the CPUs.
fn check_round(results: &[Result<String, (i32, String)>]) -> usize {
    let got: Vec<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let mut distinct = got.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        got.len(),
        "two runs share a CPU: {results:?}"
    );
    for r in results {
        if let Err((code, err)) = r {
            assert_eq!(*code, 1, "{err}");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            assert!(
                err.contains("other runs hold the CPUs needed") && err.contains("by pid "),
                "names the runs: {err}"
            );
        }
    }
    got.len()
}

#[test]
fn runs_started_together_get_disjoint_cpus_fifty_times() {
    let _machine = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..50 {
        let results = round(2, "0.3");
        assert_eq!(check_round(&results), 2.min(cpus_online()), "{results:?}");
    }
}

#[test]
fn four_runs_together_get_disjoint_cpus_or_a_clear_error() {
    let _machine = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    let results = round(4, "1");
    let placed = check_round(&results);
    assert_eq!(placed, 4.min(cpus_online()), "{results:?}");
}

#[test]
fn kill_9_of_a_launcher_frees_its_booking() {
    let _machine = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    let n = cpus_online().to_string();
    let mut all = Command::new(common::bin("goset-run"));
    all.args(["-q", "-n", &n, "--sample", "0", "--", "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let launcher = all.spawn().unwrap();
    let pid = launcher.id();
    let mut started = Started(vec![launcher]);
    // Booked once bare goset lists it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let bare = Command::new(common::bin("goset")).output().unwrap();
        if String::from_utf8_lossy(&bare.stderr).contains(&format!("pid {pid} (sleep 60)")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run was never listed as booked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let blocked = outcome(holder("0").spawn().unwrap()).unwrap_err();
    assert!(
        blocked.1.contains(&format!("by pid {pid} (sleep 60)")),
        "{blocked:?}"
    );
    let task: Vec<i32> = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    /// Its task, which outlives it, ended by pid when the test ends.
    struct Orphans(Vec<i32>);
    impl Drop for Orphans {
        fn drop(&mut self) {
            for &p in &self.0 {
                // SAFETY: kill takes a pid and a signal.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
    }
    let _orphans = Orphans(task);
    // SAFETY: kill takes a pid and a signal.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = started.0[0].wait();
    // Its task goes on alone; the booking was the launcher's and is swept.
    let freed = outcome(holder("0").spawn().unwrap());
    assert!(freed.is_ok(), "{freed:?}");
    started.0.clear();
}
