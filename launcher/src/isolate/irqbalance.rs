//! Holding irqbalance for the run: it would move the steered IRQs back on its next pass.
//!
//! A daemon that systemd manages (systemd is running and the process sits in
//! `irqbalance.service`) is stopped with `systemctl stop` and started again; systemd would
//! restart a process it owns that was merely signalled. Any other irqbalance is stopped with
//! SIGSTOP and continued with SIGCONT, checked by pid and start time so that a reused pid is
//! never signalled.

use super::journal::{Change, Failed, Journal};
use crate::fsroot::FsRoot;
use crate::procfs::{pid_stat, ProcessId};
use serde::Serialize;

/// What was done with irqbalance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// Not running.
    Absent,
    /// Its systemd unit was stopped.
    Systemd(String),
    /// These processes were stopped with SIGSTOP.
    Stopped(Vec<i32>),
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Absent => f.write_str("absent"),
            Held::Systemd(_) => f.write_str("held (systemd)"),
            Held::Stopped(pids) => {
                let pids: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
                write!(f, "held (SIGSTOP pid {})", pids.join(","))
            }
        }
    }
}

/// The systemd unit held.
pub const UNIT: &str = "irqbalance.service";

/// The running irqbalance processes: `(pid, start time, in its systemd unit)`.
fn running(root: &FsRoot) -> Vec<(i32, u64, bool)> {
    root.list("/proc")
        .iter()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|pid| root.read_opt(&format!("/proc/{pid}/comm")).as_deref() == Some("irqbalance"))
        .filter_map(|pid| {
            let start = pid_stat::start_ticks(root, pid as u32)?;
            let unit = (root.read_opt(&format!("/proc/{pid}/cgroup")))
                .is_some_and(|c| c.lines().any(|l| l.ends_with(&format!("/{UNIT}"))));
            Some((pid, start, unit))
        })
        .collect()
}

fn state(pid: i32) -> Option<char> {
    pid_stat::read(&FsRoot::default(), pid as u32).map(|s| s.state)
}

fn systemctl(verb: &str, unit: &str) -> Result<(), String> {
    let out = std::process::Command::new("systemctl")
        .args([verb, unit])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| format!("systemctl {verb} {unit}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "systemctl {verb} {unit}: {}",
        why.lines().next().unwrap_or("failed")
    ))
}

/// Holds every running irqbalance, journaling each hold first.
pub fn hold(root: &FsRoot, journal: &mut Journal) -> Result<Held, String> {
    let found = running(root);
    if found.is_empty() {
        return Ok(Held::Absent);
    }
    let failed = |e: Failed| match e {
        Failed::Journal(e) => format!("--steer: cannot write the journal: {e}"),
        Failed::Change(e) => format!("--steer: irqbalance cannot be held: {e}"),
    };
    if found.iter().any(|p| p.2) && root.exists("/run/systemd/system") {
        let change = Change::UnitStopped { unit: UNIT.into() };
        journal
            .make(change, || {
                systemctl("stop", UNIT).map_err(std::io::Error::other)
            })
            .map_err(failed)?;
        return Ok(Held::Systemd(UNIT.into()));
    }
    let mut stopped = Vec::new();
    for &(pid, start, _) in &found {
        let stop = || {
            // SAFETY: kill takes a pid and a signal.
            if unsafe { libc::kill(pid, libc::SIGSTOP) } == 0 {
                return Ok(true);
            }
            match std::io::Error::last_os_error() {
                // It ended meanwhile: nothing to hold.
                e if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
                e => Err(std::io::Error::other(format!("pid {pid}: {e}"))),
            }
        };
        if !journal
            .make(Change::ProcessStopped { pid, start }, stop)
            .map_err(failed)?
        {
            continue;
        }
        // SIGSTOP takes effect when the process is next scheduled.
        for _ in 0..200 {
            if matches!(state(pid), Some('T') | None) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stopped.push(pid);
    }
    Ok(Held::Stopped(stopped))
}

/// Starts a unit stopped by [`hold`]; without a running systemd there is nothing to start.
pub fn start_unit(unit: &str) -> Result<Vec<(i32, String)>, String> {
    if !std::path::Path::new("/run/systemd/system").exists() {
        return Ok(Vec::new());
    }
    systemctl("start", unit).map(|()| Vec::new())
}

/// Continues a process stopped by [`hold`], if `pid` is still that process.
pub fn resume(pid: i32, start: u64) {
    if pid > 0
        && (ProcessId {
            pid: pid as u32,
            start,
        })
        .is_alive(&FsRoot::default())
    {
        // SAFETY: kill takes a pid and a signal.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }
}
