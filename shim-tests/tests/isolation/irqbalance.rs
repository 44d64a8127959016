//! A real irqbalance, held for the run and running again after.

use crate::machine::*;
use crate::running::*;
use shim_tests::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A real irqbalance in the foreground, killed when dropped.
pub(crate) struct Irqbalance(pub(crate) Child);

/// The irqbalance program, where it is installed.
pub(crate) fn irqbalance_program() -> Option<&'static str> {
    ["/usr/sbin/irqbalance", "/sbin/irqbalance"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

impl Irqbalance {
    /// Starts irqbalance in the foreground and waits until it runs (its exec done).
    pub(crate) fn start(program: &str) -> Irqbalance {
        Irqbalance::start_with(program, &[])
    }

    /// [`Irqbalance::start`] with more arguments.
    pub(crate) fn start_with(program: &str, args: &[String]) -> Irqbalance {
        let daemon = Irqbalance(
            Command::new(program)
                .arg("--foreground")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let pid = daemon.0.id();
        let deadline = Instant::now() + TIMEOUT;
        while std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_or(true, |c| c.trim() != "irqbalance")
        {
            assert!(Instant::now() < deadline, "irqbalance did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }
}

impl Drop for Irqbalance {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn irqbalance_is_stopped_for_the_run_and_running_again_after() {
    let Some(irqbalance) = irqbalance_program() else {
        return missing("irqbalance", "apt-get install irqbalance");
    };
    let Some(bench) = bench("--steer", false, false) else {
        return;
    };
    let probe = &bench.probe;
    let daemon = Irqbalance::start(irqbalance);
    let pid = daemon.0.id();
    let mut run = start(&["-n", "1", "--steer"], probe.path(), &[], &[]);
    run.ready();
    let during = state_of(pid);
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    assert_eq!(
        during,
        Some('T'),
        "irqbalance is stopped during the run\n{stderr}"
    );
    let after = state_of(pid);
    assert!(
        matches!(after, Some('S' | 'R' | 'D')),
        "irqbalance runs again after: {after:?}"
    );
    // Every irqbalance is held: another one (a daemon the package started) is listed too.
    let held = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("irqbalance  held (SIGSTOP pid "))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no irqbalance line\n{stderr}"));
    assert!(held.split(',').any(|p| p == pid.to_string()), "{stderr}");
}
