//! Concurrent goset-runs on this machine never take the same task CPUs: runs started
//! back to back (within a few milliseconds), each holding its CPUs until all have selected, get
//! disjoint CPUs, or one line naming the runs that
//! hold them (exit 1), another run's command escaped in it; `kill -9` of a launcher frees its booking for the next run. The CPUs
//! are read from each task's own `/proc/self/status`, not from goset's report.

use shim_tests::{goset_bin, goset_run_bin, is_root, launcher_lock};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// `goset-run -q -n 1 --sample 0 --` a task that writes its CPUs to `<dir>/<id>`, then waits
/// for `<dir>/go`: every run that got CPUs is still running when the next one selects.
fn holder(dir: &Path, id: usize) -> Command {
    let d = dir.display();
    let mut cmd = Command::new(goset_run_bin());
    cmd.args(["-q", "-n", "1", "--sample", "0", "--", "sh", "-c"])
        .arg(format!(
            "grep Cpus_allowed_list /proc/self/status > {d}/{id}.tmp && mv {d}/{id}.tmp {d}/{id}; \
             while [ ! -e {d}/go ]; do sleep 0.02; done"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// What one run got: its task's CPUs, or goset-run's exit code and error line.
type Got = Result<String, (i32, String)>;

/// Starts `n` holders back to back, lets them go once each has its CPUs or has failed, and
/// collects what each got.
fn round(n: usize) -> Vec<Got> {
    let dir = tempfile::tempdir().unwrap();
    let mut started = Started(
        (0..n)
            .map(|i| holder(dir.path(), i).spawn().unwrap())
            .collect(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ended: Vec<Option<std::process::ExitStatus>> = vec![None; n];
    while (0..n).any(|i| ended[i].is_none() && !dir.path().join(i.to_string()).exists()) {
        for (i, child) in started.0.iter_mut().enumerate() {
            if ended[i].is_none() {
                ended[i] = child.try_wait().unwrap();
            }
        }
        assert!(Instant::now() < deadline, "the runs did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(dir.path().join("go"), "").unwrap();
    let children = std::mem::take(&mut started.0);
    children
        .into_iter()
        .enumerate()
        .map(|(i, child)| {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
            match out.status.code() {
                Some(0) => Ok(std::fs::read_to_string(dir.path().join(i.to_string()))
                    .unwrap()
                    .trim_start_matches("Cpus_allowed_list:")
                    .trim()
                    .to_string()),
                code => Err((code.unwrap_or(-1), err)),
            }
        })
        .collect()
}

fn cpus_online() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) as usize }
}

/// The runs that got CPUs have distinct ones; each of the others is one line, exit 1, naming
/// the runs that hold the CPUs.
fn check_round(results: &[Got]) -> usize {
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
    // These tests book this machine's CPUs: one at a time.
    let _machine = launcher_lock();
    for _ in 0..50 {
        let results = round(2);
        assert_eq!(check_round(&results), 2.min(cpus_online()), "{results:?}");
    }
}

#[test]
fn four_runs_together_get_disjoint_cpus_or_a_clear_error() {
    let _machine = launcher_lock();
    let results = round(4);
    let placed = check_round(&results);
    assert_eq!(placed, 4.min(cpus_online()), "{results:?}");
}

#[test]
fn kill_9_of_a_launcher_frees_its_booking() {
    let _machine = launcher_lock();
    let n = cpus_online().to_string();
    let mut all = Command::new(goset_run_bin());
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
        let bare = Command::new(goset_bin()).output().unwrap();
        if String::from_utf8_lossy(&bare.stderr).contains(&format!("pid {pid} (sleep 60)")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run was never listed as booked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let once = |dir: &Path| {
        std::fs::write(dir.join("go"), "").unwrap();
        let out = holder(dir, 0).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let blocked = once(dir.path());
    assert_eq!(blocked.0, Some(1), "{blocked:?}");
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
    let freed = once(dir.path());
    assert_eq!(freed.0, Some(0), "{freed:?}");
    started.0.clear();
}

#[test]
fn another_runs_command_reaches_the_refusal_escaped() {
    let _machine = launcher_lock();
    let n = cpus_online().to_string();
    // The holder's command, as another user could have named it: a title change and a clear.
    let evil = "\x1b]0;pwned\x07\x1b[2J";
    let mut all = Command::new(goset_run_bin());
    // --wait: another checkout's suite may hold the CPUs for a while.
    all.args(["-q", "-n", &n, "--sample", "0", "--wait", "60", "--"])
        .args(["sh", "-c", "exec sleep 60", evil])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    /// SIGTERM to the launcher, which passes it on to its task and ends (SIGKILL after 10 s),
    /// when the test ends.
    struct Term(Child);
    impl Drop for Term {
        fn drop(&mut self) {
            // SAFETY: kill takes a pid and a signal.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(10);
            while self.0.try_wait().ok().flatten().is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let launcher = Term(all.spawn().unwrap());
    let pid = launcher.0.id();
    let shown = format!("pid {pid} (sh -c exec sleep 60 \\x1b]0;pwned\\x07\\x1b[2J)");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let bare = Command::new(goset_bin()).output().unwrap();
        let listed = String::from_utf8_lossy(&bare.stderr).into_owned();
        assert!(
            !listed.contains('\x1b'),
            "raw ESC in goset's list: {listed:?}"
        );
        if listed.contains(&shown) {
            break;
        }
        assert!(Instant::now() < deadline, "never listed: {listed:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(goset_run_bin())
        .args(["-q", "-n", "1", "--sample", "0", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains('\x1b'), "raw ESC in the refusal: {err:?}");
    assert!(err.contains(&format!("by {shown}")), "{err}");
}

/// The shared registry's lock, made by a first run.
fn shared_lock() -> &'static Path {
    let ok = Command::new(goset_run_bin())
        .args(["-q", "-n", "1", "--sample", "0", "--", "true"])
        .status()
        .unwrap();
    assert!(ok.success());
    Path::new("/run/goset/bookings/lock")
}

#[test]
fn another_user_cannot_hold_the_registrys_lock() {
    if !is_root() {
        eprintln!("skipped: needs root (the shared registry, and another user to run as)");
        return;
    }
    let _machine = launcher_lock();
    let lock = shared_lock();
    // As nobody: the lock cannot even be opened (it was 0644: flock -x held every run).
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--", "flock", "-n", "-x"])
        .arg(lock)
        .arg("true")
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "nobody took the registry's lock: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_held_lock_is_waited_for_within_a_bound_and_signals_end_the_wait() {
    if !is_root() {
        eprintln!("skipped: needs root (the shared registry)");
        return;
    }
    let _machine = launcher_lock();
    let lock = shared_lock();
    // flock and its sleep in a group of their own, ended together (SIGKILL to the group)
    // however the test ends.
    use std::os::unix::process::CommandExt;
    let holder = Command::new("flock")
        .arg("-x")
        .arg(lock)
        .args(["sleep", "60"])
        .process_group(0)
        .spawn()
        .unwrap();
    struct Group(i32);
    impl Drop for Group {
        fn drop(&mut self) {
            // SAFETY: kill takes a process group and a signal.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
    let _held = (Group(holder.id() as i32), Started(vec![holder]));
    // Wait for the holder to have it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("flock")
        .args(["-n", "-x"])
        .arg(lock)
        .arg("true")
        .status()
        .unwrap()
        .success()
    {
        assert!(Instant::now() < deadline, "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    // --wait 1: one line naming the holder, exit 1, in about a second.
    let started = Instant::now();
    let out = Command::new(goset_run_bin())
        .args([
            "-q", "-n", "1", "--sample", "0", "--wait", "1", "--", "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("flock") && err.contains("--wait 1"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // Without --wait, SIGTERM while waiting ends the run at once (128 + 15).
    let mut run = Command::new(goset_run_bin())
        .args(["-q", "-n", "1", "--sample", "0", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill takes a pid and a signal.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let asked = Instant::now();
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
}
