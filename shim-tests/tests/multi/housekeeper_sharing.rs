//! Two runs on two CPUs: the second takes the first's housekeeper CPU as its task CPU
//! (bookings keep task CPUs apart, not housekeepers), and both reports say so: the second's
//! from the bookings it saw, the first's from the registry read as it ends (docs/slurm.md,
//! "Housekeepers where CPUs are short").

use shim_tests::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits up to [`TIMEOUT`] for `path` to hold text; returns it.
fn wait_for(path: &Path) -> String {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path).map(|t| t.trim().to_string()) {
            if !text.is_empty() {
                return text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_housekeeper_cpu_taken_by_another_run_shows_in_both_reports() {
    // Says why when it skips.
    let Some(pair) = first_two_allowed() else {
        return;
    };
    let _serial = launcher_lock();
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).display().to_string();
    let first_json = at("first.json");
    // Both runs on the same two CPUs: the second finds only the first's housekeeper CPU free.
    let goset_run = |json: &str, script: String| {
        let mut cmd = clean_command("taskset");
        cmd.args(["-c", &pair])
            .arg(goset_run_bin())
            .args(["-n", "1", "--sample", "0", "--json", json, "--", "sh", "-c"])
            .arg(script);
        cmd
    };
    let first = Started::new(goset_run(
        &first_json,
        format!(
            "echo $PPID > {r}.tmp && mv {r}.tmp {r}; while [ ! -e {go} ]; do sleep 0.05; done",
            r = at("first.pid"),
            go = at("go")
        ),
    ));
    let first_pid = wait_for(&dir.path().join("first.pid"));
    // The second's task lets the first end, then outlives its report.
    let second = run(goset_run(
        &at("second.json"),
        format!(
            "echo $PPID > {r}; touch {go}; while [ ! -s {first_json} ]; do sleep 0.05; done",
            r = at("second.pid"),
            go = at("go")
        ),
    ));
    let first = first.finish(TIMEOUT);
    first.expect_code(0);
    second.expect_code(0);
    let second_pid = wait_for(&dir.path().join("second.pid"));
    assert!(
        second.stderr.contains(&format!(
            "a task CPU here, the housekeeper of pid {first_pid} "
        )),
        "{}",
        second.dump()
    );
    assert!(
        first.stderr.contains(&format!(
            "this run's housekeeper, a task CPU of pid {second_pid} "
        )),
        "{}",
        first.dump()
    );
}
