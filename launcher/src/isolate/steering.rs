//! IRQ steering shared by every `--steer` run of the node: while any runs, each IRQ keeps
//! clear of the union of their CPUs; irqbalance is held from the first run's start to the last
//! run's end; when the last run ends, every IRQ and irqbalance are as they were found.
//!
//! Owns: the node's steering state in the journals directory, under an exclusive `flock` on
//! `steering.lock`: `steering.runs` (the runs that steer, by pid and start time, with their
//! CPUs) and `steering.journal` (the node journal: every IRQ's original affinity and each
//! write since, irqbalance's hold). A run records in its own journal that it joined
//! ([`Change::SteerJoined`]) before it joins, so that its end, a signal or `goset restore`
//! after a crash makes it leave. A run that joins or leaves also drops the runs whose launcher
//! is gone. Must not: undo another run's share (a run leaving puts back only what no run left
//! needs).

use super::irq::{self, Steering};
use super::irqbalance::{self, Held};
use super::journal::{Change, Journal};
use crate::fsroot::FsRoot;
use crate::procfs::ProcessId;
use goset_plan::CpuSet;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The node journal's name (`steering.journal`: not a launcher's, so never swept as one).
const NODE: &str = "steering";
const RUNS: &str = "steering.runs";
const LOCK: &str = "steering.lock";

/// One steering run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its launcher's pid.
    pub pid: u32,
    /// Its start time.
    pub start: u64,
    /// The CPUs IRQs must leave for it.
    pub away: String,
    /// Where its IRQs may go.
    pub onto: String,
}

impl Member {
    fn alive(&self) -> bool {
        ProcessId {
            pid: self.pid,
            start: self.start,
        }
        .is_alive(&FsRoot::default())
    }
}

fn set(text: &str) -> CpuSet {
    goset_plan::cpulist::parse_set(text.as_bytes()).unwrap_or_default()
}

/// The lock on the node's steering state, held while it is read and changed.
struct Locked {
    _file: File,
}

fn lock(dir: &Path) -> std::io::Result<Locked> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(LOCK);
    loop {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        // The last run to leave removes the lock file: a lock taken on the file it removed
        // is no lock, so take it again on the one at the name now.
        let held = file.metadata()?;
        let named = std::fs::symlink_metadata(&path);
        if named.is_ok_and(|n| (n.dev(), n.ino()) == (held.dev(), held.ino())) {
            return Ok(Locked { _file: file });
        }
    }
}

/// Removes the node's steering state once no run steers (the lock last, while held).
fn remove_state(dir: &Path) {
    for name in [RUNS, LOCK] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

/// The runs that steer, whose launchers are alive.
fn load(dir: &Path) -> Vec<Member> {
    let text = crate::bounded::read_regular(&dir.join(RUNS), 1 << 20).unwrap_or_default();
    let runs: Vec<Member> = serde_json::from_slice(&text).unwrap_or_default();
    runs.into_iter().filter(Member::alive).collect()
}

fn save(dir: &Path, runs: &[Member]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{RUNS}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(runs).expect("runs serialise"))?;
    std::fs::rename(&tmp, dir.join(RUNS))
}

/// The CPUs every run keeps free, and where their IRQs may go.
fn union(runs: &[Member]) -> (CpuSet, CpuSet) {
    let away = runs
        .iter()
        .fold(CpuSet::new(), |u, r| u.union(&set(&r.away)));
    let onto = runs
        .iter()
        .fold(CpuSet::new(), |u, r| u.union(&set(&r.onto)));
    let onto: CpuSet = onto.iter().filter(|&c| !away.contains(c)).collect();
    (away, onto)
}

/// What irqbalance's hold is, from the node journal.
fn held(node: &Journal) -> Held {
    let mut pids = Vec::new();
    for c in node.changes() {
        match c {
            Change::UnitStopped { unit } => return Held::Systemd(unit.clone()),
            Change::ProcessStopped { pid, .. } => pids.push(*pid),
            _ => {}
        }
    }
    if pids.is_empty() {
        Held::Absent
    } else {
        Held::Stopped(pids)
    }
}

/// Joins the node's steering for run `me` (journaled in `run` first): the first run holds
/// irqbalance; every IRQ is steered off every run's CPUs. Returns what steering did for this
/// run's CPUs and how irqbalance is held.
pub fn join(
    root: &FsRoot,
    dir: &Path,
    me: Member,
    run: &mut Journal,
) -> Result<(Steering, Held), String> {
    let _locked = lock(dir).map_err(|e| format!("--steer: cannot lock {}: {e}", dir.display()))?;
    let cannot = |e: std::io::Error| format!("--steer: cannot write the steering state: {e}");
    // Journaled before anything of the node changes: a launcher killed from here on is made
    // to leave, which puts back what it held (irqbalance too) when no other run steers.
    let joined = Change::SteerJoined {
        dir: dir.to_path_buf(),
        pid: me.pid,
        start: me.start,
    };
    run.make(joined, || Ok(())).map_err(|e| match e {
        super::journal::Failed::Journal(e) | super::journal::Failed::Change(e) => cannot(e),
    })?;
    let mut runs = load(dir);
    let first = runs.is_empty();
    if first {
        // What runs that are gone left: put back before this run starts afresh.
        let left = Journal::open(dir, NODE).map_err(cannot)?;
        let undone = left.undo();
        if let Some(why) = undone.failed.first() {
            return Err(format!("--steer: {why}"));
        }
    }
    let mut node = Journal::open(dir, NODE).map_err(cannot)?;
    let hold = if first {
        match irqbalance::hold(root, &mut node) {
            Ok(h) => h,
            Err(why) => {
                // Nothing is held: the state of this first run goes with it.
                let _ = node.undo();
                remove_state(dir);
                return Err(why);
            }
        }
    } else {
        held(&node)
    };
    let mine = set(&me.away);
    runs.push(me);
    save(dir, &runs).map_err(cannot)?;
    let (away, onto) = union(&runs);
    let steering = irq::steer(root, &away, &onto, &mine, &mut node)?;
    Ok((steering, hold))
}

/// Run `pid` (started at `start`) leaves the node's steering: the IRQs follow what the runs
/// left keep free; after the last run, every IRQ and irqbalance are put back as they were
/// found. Idempotent: a run that already left (or never joined) changes nothing.
pub fn leave(dir: &Path, pid: u32, start: u64) -> Result<(), String> {
    let _locked = lock(dir).map_err(|e| format!("cannot lock {}: {e}", dir.display()))?;
    let runs: Vec<Member> = (load(dir).into_iter())
        .filter(|r| (r.pid, r.start) != (pid, start))
        .collect();
    let mut node = Journal::open(dir, NODE).map_err(|e| format!("steering state: {e}"))?;
    if runs.is_empty() {
        let undone = node.undo();
        if undone.failed.is_empty() {
            remove_state(dir);
        }
        return match undone.failed.first() {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        };
    }
    save(dir, &runs).map_err(|e| format!("steering state: {e}"))?;
    let (away, onto) = union(&runs);
    match irq::follow(&away, &onto, &mut node).first() {
        Some(why) => Err(why.clone()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_irqs(irqs: &[(u32, &str)]) -> (tempfile::TempDir, FsRoot) {
        let dir = tempfile::tempdir().unwrap();
        for &(n, aff) in irqs {
            let d = dir.path().join(format!("proc/irq/{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("smp_affinity_list"), aff).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let root = FsRoot::new(dir.path());
        (dir, root)
    }

    fn member(child: &std::process::Child, away: &str, onto: &str) -> Member {
        let pid = child.id();
        Member {
            pid,
            start: crate::procfs::pid_stat::start_ticks(&crate::fsroot::FsRoot::default(), pid)
                .unwrap(),
            away: away.into(),
            onto: onto.into(),
        }
    }

    fn read(root: &FsRoot) -> Vec<String> {
        (1..=3)
            .map(|n| {
                (root.read_opt(&format!("/proc/irq/{n}/smp_affinity_list")))
                    .unwrap()
                    .trim()
                    .to_string()
            })
            .collect()
    }

    /// Two runs (live processes standing for their launchers) join, then leave in `order`.
    fn two_runs(order: [usize; 2]) {
        let (dir, root) = fake_irqs(&[(1, "0-3"), (2, "2-3"), (3, "3")]);
        let state = dir.path().join("journals");
        let mut procs: Vec<std::process::Child> = (0..2)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap()
            })
            .collect();
        let runs = [member(&procs[0], "2", "0-1"), member(&procs[1], "3", "0-1")];
        let mut journals: Vec<Journal> = (0..2)
            .map(|i| Journal::create(&state, &format!("{i}-1")).unwrap())
            .collect();
        let (a, held) = join(&root, &state, runs[0].clone(), &mut journals[0]).unwrap();
        assert_eq!(held, Held::Absent);
        assert_eq!(a.applied, 2);
        assert_eq!(read(&root), ["0-1,3", "3", "3"]);
        join(&root, &state, runs[1].clone(), &mut journals[1]).unwrap();
        assert_eq!(
            read(&root),
            ["0-1", "0-1", "0-1"],
            "clear of both runs' CPUs"
        );
        let first = order[0];
        let (j, r) = (journals.remove(first), &runs[first]);
        assert!(j.undo().failed.is_empty());
        // The run left still has its CPU kept clear; IRQs come back to the other.
        let expected: [&str; 3] = if first == 0 {
            ["0-2", "2", "0-1"]
        } else {
            ["0-1,3", "3", "3"]
        };
        assert_eq!(read(&root), expected, "after {} left", r.pid);
        assert!(journals.pop().unwrap().undo().failed.is_empty());
        assert_eq!(read(&root), ["0-3", "2-3", "3"], "as found");
        for name in [RUNS, LOCK, "steering.journal"] {
            assert!(!state.join(name).exists(), "{name} left");
        }
        for p in &mut procs {
            let _ = p.kill();
            let _ = p.wait();
        }
    }

    #[test]
    fn two_runs_leave_the_irqs_as_found_in_either_order() {
        two_runs([0, 1]);
        two_runs([1, 0]);
    }

    #[test]
    fn a_dead_run_is_dropped_and_the_last_leaver_puts_everything_back() {
        let (dir, root) = fake_irqs(&[(1, "0-3"), (2, "2-3"), (3, "3")]);
        let state = dir.path().join("journals");
        let mut dying = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let (d, l) = (member(&dying, "2", "0-1"), member(&live, "3", "0-1"));
        let mut jd = Journal::create(&state, "1-1").unwrap();
        let mut jl = Journal::create(&state, "2-1").unwrap();
        join(&root, &state, d.clone(), &mut jd).unwrap();
        join(&root, &state, l, &mut jl).unwrap();
        // The first launcher dies without leaving (kill -9).
        std::mem::forget(jd);
        let _ = dying.kill();
        let _ = dying.wait();
        assert!(jl.undo().failed.is_empty());
        assert_eq!(read(&root), ["0-3", "2-3", "3"]);
        // goset restore of the dead run's journal now changes nothing.
        assert_eq!(leave(&state, d.pid, d.start), Ok(()));
        assert_eq!(read(&root), ["0-3", "2-3", "3"]);
        let _ = live.kill();
        let _ = live.wait();
    }
}
