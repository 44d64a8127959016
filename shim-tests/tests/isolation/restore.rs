//! What puts the machine back when the launcher does not end normally: `kill -9` followed by
//! `goset restore`, and a SIGTERM.

use crate::irqbalance::*;
use crate::machine::*;
use crate::running::*;
use shim_tests::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// `goset-run -n 1 --cgroup --steer` of the probe, ready: the bench, the run, what the probe
/// said and the group it is in.
fn fully_isolated() -> Option<(Bench, Running, Ready, PathBuf)> {
    let bench = bench("--cgroup --steer", true, false)?;
    let mut run = start(
        &["-n", "1", "--cgroup", "--steer"],
        bench.probe.path(),
        &[],
        &[],
    );
    let ready = run.ready();
    let group = cpuset_group_of(ready.pid).expect("the task is in a cpuset group");
    Some((bench, run, ready, group))
}

#[test]
fn after_kill_9_of_the_launcher_goset_restore_puts_the_machine_back() {
    let Some((bench, mut run, ready, group)) = fully_isolated() else {
        return;
    };
    let snapshot = &bench.snapshot;
    let launcher = run.child.id() as i32;
    // SAFETY: kill takes a pid and a signal; the launcher only, not its task.
    unsafe { libc::kill(launcher, libc::SIGKILL) };
    let _ = run.child.wait();
    assert!(group.exists(), "the dead launcher's group stays");
    assert_ne!(
        read_irqs(),
        snapshot.0,
        "the dead launcher's IRQs stay steered"
    );

    let bare = Command::new(goset_bin()).output().unwrap();
    let bare_err = String::from_utf8_lossy(&bare.stderr);
    assert!(
        bare_err.contains(&format!(
            "launcher (pid {launcher}) died: run goset restore"
        )),
        "{bare_err}"
    );
    let restore = Command::new(goset_bin()).arg("restore").output().unwrap();
    let restore_err = String::from_utf8_lossy(&restore.stderr);
    assert_eq!(restore.status.code(), Some(0), "{restore_err}");
    assert!(
        restore_err.contains(&format!("pid {} (isolation_probe)", ready.pid)),
        "the task that outlived its launcher is named: {restore_err}"
    );
    assert_eq!(read_irqs(), snapshot.0, "every IRQ's affinity is as before");
    assert!(!group.exists(), "the group is removed");
    assert_eq!(
        cpuset_group_of(ready.pid),
        None,
        "the task is back in the root group"
    );
    assert!(
        std::fs::metadata(format!("/proc/{}", ready.pid)).is_ok(),
        "restore moves the task, it does not kill it"
    );
    let again = Command::new(goset_bin()).arg("restore").output().unwrap();
    let again_err = String::from_utf8_lossy(&again.stderr);
    assert!(
        again.status.success() && again_err.contains("0 change(s) undone from 0 journal(s)"),
        "restore is idempotent: {again_err}"
    );
    drop(run);
}

#[test]
fn sigterm_to_the_launcher_reaches_the_task_and_the_machine_is_put_back() {
    let Some((bench, run, ready, group)) = fully_isolated() else {
        return;
    };
    let snapshot = &bench.snapshot;
    assert_ne!(read_irqs(), snapshot.0, "steered during the run");
    // SAFETY: kill takes a pid and a signal; the launcher only.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGTERM) };
    // The task ends by the forwarded signal, not by its stdin closing (finish closes it).
    let deadline = Instant::now() + TIMEOUT;
    while !matches!(state_of(ready.pid as u32), None | Some('Z')) {
        assert!(Instant::now() < deadline, "the task outlived the SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, stdout, stderr) = run.finish();
    assert_eq!(
        code,
        128 + libc::SIGTERM,
        "the task's own death: {stdout:?}\n{stderr}"
    );
    assert_eq!(read_irqs(), snapshot.0, "every IRQ's affinity is as before");
    assert!(!group.exists(), "the group is removed");
    assert!(
        stderr.contains("Isolation\n"),
        "the report is finished\n{stderr}"
    );
}
