//! The machine left as found whatever ends the launcher: every signal it can catch whose
//! default action would end it, sent to a `--cgroup --steer --fence` run while a real
//! irqbalance runs, and `kill -9` at offsets from 0 to 50 ms after its start, followed by
//! `goset restore`.

use crate::irqbalance::*;
use crate::machine::*;
use crate::running::*;
use shim_tests::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The signals whose default action is not to end the process (signal(7): ignore, continue,
/// stop), and the two no process can catch.
const NOT_ENDING: [libc::c_int; 9] = [
    libc::SIGCHLD,
    libc::SIGCONT,
    libc::SIGURG,
    libc::SIGWINCH,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGKILL,
    libc::SIGSTOP,
];

/// Every signal from 1 to SIGRTMAX that would end goset-run and that a program can catch:
/// less [`NOT_ENDING`] and those the C library keeps for itself (its `sigaction` refuses them).
fn ending_signals() -> Vec<libc::c_int> {
    (1..=libc::SIGRTMAX())
        .filter(|s| !NOT_ENDING.contains(s))
        .filter(|&s| {
            // SAFETY: a null new action only reads the current one.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            unsafe { libc::sigaction(s, std::ptr::null(), &mut old) == 0 }
        })
        .collect()
}

/// What a run changes and must put back, as read from the machine.
#[derive(Debug, PartialEq)]
struct Found {
    irqs: BTreeMap<String, String>,
    /// irqbalance's state is `T`.
    irqbalance_stopped: bool,
    /// The probe's groups at the top of every cpuset hierarchy, and each hierarchy's
    /// `cgroup.subtree_control` (v2).
    cgroups: Vec<(String, String)>,
    /// The booking files in root's registry whose launcher is gone, half-written ones too (a
    /// live one may be another user's run on a shared machine).
    bookings: Vec<String>,
    /// Launchers' journals (`<pid>-<start>.journal`).
    journals: Vec<String>,
}

fn names_in(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut names: Vec<String> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| keep(n))
        .collect();
    names.sort();
    names
}

impl Found {
    fn read(irqbalance: u32) -> Found {
        let mut cgroups = Vec::new();
        for mount in cpuset_mounts() {
            let control = std::fs::read_to_string(mount.join("cgroup.subtree_control"));
            let groups = names_in(&mount, |n| n.starts_with("goset-isolation_probe"));
            cgroups.push((control.unwrap_or_default(), groups.join(" ")));
        }
        Found {
            irqs: read_irqs(),
            irqbalance_stopped: state_of(irqbalance) == Some('T'),
            cgroups,
            bookings: names_in(Path::new("/run/goset/bookings"), |n| {
                // `<pid>-<start>.booking`, or `.<pid>-<start>.booking.<hex>.tmp` half-written.
                let stem = (n.strip_suffix(".booking"))
                    .or_else(|| Some(n.strip_prefix('.')?.split_once(".booking.")?.0));
                let pid = stem.and_then(|n| n.split('-').next());
                pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists())
            }),
            journals: names_in(Path::new("/run/goset/journals"), |n| {
                n.ends_with(".journal") && n != "steering.journal"
            }),
        }
    }

    /// Waits (10 s at most) until the machine reads as `self`, and says what it read last.
    fn settled(&self, irqbalance: u32) -> Found {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = Found::read(irqbalance);
            if now == *self || Instant::now() >= deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A real irqbalance that moves none of the IRQs (each one banned), so that what moves them
/// is goset alone; the hold still stops it.
fn irqbalance_moving_nothing() -> Option<Irqbalance> {
    let Some(program) = irqbalance_program() else {
        missing("irqbalance", "apt-get install irqbalance");
        return None;
    };
    let bans: Vec<String> = read_irqs()
        .keys()
        .map(|irq| format!("--banirq={irq}"))
        .collect();
    Some(Irqbalance::start_with(program, &bans))
}

/// The signals a live launcher catches, from its `SigCgt`.
fn caught_by(pid: u32) -> Vec<libc::c_int> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = (status.lines())
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap();
    (1..=64).filter(|s| mask & (1 << (s - 1)) != 0).collect()
}

/// The run: full isolation; `--share`, since on a shared machine another run may hold a CPU.
const ISOLATED: [&str; 6] = ["-n", "1", "--cgroup", "--steer", "--fence", "--share"];

#[test]
fn every_caught_signal_and_kill_9_at_any_moment_leave_the_machine_as_found() {
    if !irq_affinity_shown() {
        return;
    }
    let Some(bench) = bench("--cgroup --steer --fence", true, false) else {
        return;
    };
    let Some(daemon) = irqbalance_moving_nothing() else {
        return;
    };
    let irqbalance = daemon.0.id();
    // The tasks killed by SIGQUIT, SIGSEGV ... dump no core into the tests' directory.
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: lowers this process's soft limit, which its children inherit.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let before = Found::read(irqbalance);
    assert!(!before.irqbalance_stopped, "irqbalance runs");
    let signals = ending_signals();
    for (i, &sig) in signals.iter().enumerate() {
        let mut run = start(&ISOLATED, bench.probe.path(), &[], &[]);
        let ready = run.ready();
        let during = Found::read(irqbalance);
        assert!(during.irqbalance_stopped, "held during the run");
        assert_ne!(during.cgroups, before.cgroups, "the run has its group");
        if i == 0 {
            assert_eq!(caught_by(run.child.id()), signals, "what goset-run catches");
        }
        // SAFETY: kill takes a pid and a signal; the launcher only, not its task.
        unsafe { libc::kill(run.child.id() as i32, sig) };
        // The task ends by the forwarded signal, not by its stdin closing (finish closes it).
        let deadline = Instant::now() + TIMEOUT;
        while !matches!(state_of(ready.pid as u32), None | Some('Z')) {
            assert!(
                Instant::now() < deadline,
                "signal {sig} never reached the task"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let (code, stdout, stderr) = run.finish();
        assert_eq!(code, 128 + sig, "signal {sig}: {stdout:?}\n{stderr}");
        let after = before.settled(irqbalance);
        assert_eq!(after, before, "after signal {sig}\n{stderr}");
    }
    for offset in (0..=50).step_by(5) {
        kill_9_then_restore(&bench, &before, irqbalance, &format!("{offset} ms"), || {
            std::thread::sleep(Duration::from_millis(offset))
        });
    }
    // The moment the run holds irqbalance, before it records anything else: 5 times, as
    // soon as irqbalance reads stopped.
    for _ in 0..5 {
        kill_9_then_restore(&bench, &before, irqbalance, "the hold", || {
            let deadline = Instant::now() + TIMEOUT;
            while state_of(irqbalance) != Some('T') && Instant::now() < deadline {
                std::hint::spin_loop();
            }
        });
    }
}

/// Starts a run, kills it with SIGKILL once `when` returns, runs `goset restore` and checks
/// that the machine is `before` again.
fn kill_9_then_restore(bench: &Bench, before: &Found, irqbalance: u32, at: &str, when: impl Fn()) {
    let mut run = start(&ISOLATED, bench.probe.path(), &[], &[]);
    when();
    // SAFETY: the launcher only; its task, if started, is killed with the run's process
    // group when `run` is dropped, after goset restore.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGKILL) };
    let _ = run.child.wait();
    let restore = Command::new(goset_bin())
        .arg("restore")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&restore.stderr);
    assert!(restore.status.success(), "kill -9 at {at}: {said}");
    let after = before.settled(irqbalance);
    assert_eq!(
        after, *before,
        "kill -9 at {at}, then goset restore\n{said}"
    );
}
