//! IRQ steering: every steerable IRQ's affinity moved off the task (and fenced) CPUs.
//!
//! An IRQ is steerable when `/proc/irq/N/smp_affinity_list` exists; the kernel may still
//! refuse a write (a managed IRQ answers EIO, some interrupt controllers EINVAL). Each write is
//! journaled with the affinity before it. Where `effective_affinity_list` exists it says where
//! the IRQ is really delivered, which is what "remaining" counts.

use super::journal::{Change, Failed, Journal};
use crate::fsroot::FsRoot;
use goset_plan::CpuSet;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What steering did, and the drift the housekeeper found while the task ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Steering {
    /// IRQs moved off the task CPUs.
    pub applied: usize,
    /// IRQs whose write the kernel refused, with the reason (`EIO`, `EINVAL`, ...).
    pub refused: Vec<(u32, String)>,
    /// IRQs already off the task CPUs.
    pub already_off: usize,
    /// IRQs still delivered to a task CPU at the end of the run (effective affinity where the
    /// kernel shows it, else the affinity).
    pub remaining: usize,
    /// IRQs that were off the task CPUs and came back while the task ran.
    pub drift: usize,
    /// The IRQs that were off the task CPUs after steering (applied or already off).
    off: Vec<u32>,
    /// IRQs already counted in `drift`.
    drifted: Vec<u32>,
}

fn parse(text: &str) -> Option<CpuSet> {
    goset_plan::cpulist::parse_set(text.trim().as_bytes()).ok()
}

/// The IRQ numbers with an affinity file, in order.
fn irqs(root: &FsRoot) -> Vec<u32> {
    let mut found: Vec<u32> = root
        .list("/proc/irq")
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    found.sort_unstable();
    found
}

fn affinity(root: &FsRoot, irq: u32) -> Option<CpuSet> {
    parse(&root.read_opt(&format!("/proc/irq/{irq}/smp_affinity_list"))?)
}

/// Where the IRQ is delivered: its effective affinity where the kernel shows one.
fn delivered(root: &FsRoot, irq: u32) -> Option<CpuSet> {
    root.read_opt(&format!("/proc/irq/{irq}/effective_affinity_list"))
        .and_then(|t| parse(&t))
        .filter(|s| !s.is_empty())
        .or_else(|| affinity(root, irq))
}

/// The errno's name, as the report prints it.
fn errno_name(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EIO) => "EIO".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::ENOSPC) => "ENOSPC".into(),
        _ => e.to_string(),
    }
}

/// Each IRQ's affinity before any steering run of the node changed it, and what the latest
/// change wrote: from the node's shared journal (see [`super::steering`]).
pub fn originals(node: &Journal) -> BTreeMap<u32, (PathBuf, String, String)> {
    let mut out: BTreeMap<u32, (PathBuf, String, String)> = BTreeMap::new();
    for c in node.changes() {
        if let Change::IrqAffinity {
            irq,
            file,
            before,
            after,
        } = c
        {
            let e = out
                .entry(*irq)
                .or_insert_with(|| (file.clone(), before.clone(), after.clone()));
            e.2.clone_from(after);
        }
    }
    out
}

/// Where an IRQ whose affinity was `original` goes while the node's steering runs keep
/// `away` free: the rest of its own affinity, or `onto` when nothing of it is left.
fn target(original: &CpuSet, away: &CpuSet, onto: &CpuSet) -> CpuSet {
    let kept: CpuSet = original.iter().filter(|&c| !away.contains(c)).collect();
    if kept.is_empty() {
        *onto
    } else {
        kept
    }
}

/// Steers every steerable IRQ off `away` (every steering run's CPUs), each from its original
/// affinity (the node journal's, else its affinity now), journaling each write in `node`
/// first. `mine` (this run's CPUs) is what the returned counts are about.
pub fn steer(
    root: &FsRoot,
    away: &CpuSet,
    onto: &CpuSet,
    mine: &CpuSet,
    node: &mut Journal,
) -> Result<Steering, String> {
    let mut s = Steering::default();
    let known = originals(node);
    for irq in irqs(root) {
        let Some(now) = affinity(root, irq) else {
            continue;
        };
        let original = known
            .get(&irq)
            .and_then(|(_, before, _)| parse(before))
            .unwrap_or(now);
        let target = target(&original, away, onto);
        if target == now {
            if now.iter().all(|c| !mine.contains(c)) {
                s.already_off += 1;
                s.off.push(irq);
            }
            continue;
        }
        let file = root.path(&format!("/proc/irq/{irq}/smp_affinity_list"));
        let change = Change::IrqAffinity {
            irq,
            file: file.clone(),
            before: original.to_string(),
            after: target.to_string(),
        };
        match node.make(change, || std::fs::write(&file, target.to_string())) {
            Ok(()) => {
                s.applied += 1;
                s.off.push(irq);
            }
            Err(Failed::Change(e)) => s.refused.push((irq, errno_name(&e))),
            Err(Failed::Journal(e)) => {
                return Err(format!("--steer: cannot write the journal: {e}"))
            }
        }
    }
    s.count_remaining(root, mine);
    Ok(s)
}

/// After a steering run left: every IRQ the node's steering changed goes to its original
/// affinity less what the runs left keep free (`away`), where it still reads what steering
/// wrote (one changed since by someone else keeps their value). Returns the failures.
pub fn follow(away: &CpuSet, onto: &CpuSet, node: &mut Journal) -> Vec<String> {
    let mut failed = Vec::new();
    for (irq, (file, before, after)) in originals(node) {
        let now = std::fs::read_to_string(&file).unwrap_or_default();
        if now.trim() != after {
            continue;
        }
        let (Some(original), Some(written)) = (parse(&before), parse(&after)) else {
            continue;
        };
        let target = target(&original, away, onto);
        if target == written {
            continue;
        }
        let change = Change::IrqAffinity {
            irq,
            file: file.clone(),
            before,
            after: target.to_string(),
        };
        if let Err(e) = node.make(change, || std::fs::write(&file, target.to_string())) {
            let e = match e {
                Failed::Journal(e) | Failed::Change(e) => e,
            };
            failed.push(format!("irq {irq}: cannot set affinity {target}: {e}"));
        }
    }
    failed
}

impl Steering {
    /// Counts the IRQs still delivered to one of `away`. The kernel moves many IRQs only at
    /// their next interrupt, so this is counted again at the end of the run.
    pub fn count_remaining(&mut self, root: &FsRoot, away: &CpuSet) {
        self.remaining = irqs(root)
            .into_iter()
            .filter(|&irq| delivered(root, irq).is_some_and(|d| d.iter().any(|c| away.contains(c))))
            .count();
    }

    /// Re-reads the affinity of the IRQs that were off `away` and counts those that came back
    /// (each once).
    pub fn check_drift(&mut self, root: &FsRoot, away: &CpuSet) {
        for &irq in &self.off {
            if self.drifted.contains(&irq) {
                continue;
            }
            if affinity(root, irq).is_some_and(|a| a.iter().any(|c| away.contains(c))) {
                self.drifted.push(irq);
                self.drift += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_irqs(irqs: &[(u32, &str, Option<&str>)]) -> (tempfile::TempDir, FsRoot) {
        let dir = tempfile::tempdir().unwrap();
        for &(n, aff, eff) in irqs {
            let d = dir.path().join(format!("proc/irq/{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("smp_affinity_list"), aff).unwrap();
            if let Some(eff) = eff {
                std::fs::write(d.join("effective_affinity_list"), eff).unwrap();
            }
        }
        let root = FsRoot::new(dir.path());
        (dir, root)
    }

    #[test]
    fn irqs_leave_the_task_cpus_keeping_what_is_left_of_their_affinity() {
        let (dir, root) = fake_irqs(&[
            (1, "0-3", None),
            (2, "2", Some("2")),
            (3, "0", Some("0")),
            // A directory that is not a number is not an IRQ.
        ]);
        std::fs::create_dir_all(dir.path().join("proc/irq/default_smp_affinity")).unwrap();
        let away: CpuSet = [2, 3].into_iter().collect();
        let onto: CpuSet = [0, 1].into_iter().collect();
        let mut journal = Journal::create(&dir.path().join("j"), "1-1").unwrap();
        let s = steer(&root, &away, &onto, &away, &mut journal).unwrap();
        // IRQ 2's (fake) effective affinity still says CPU 2: it is "remaining".
        assert_eq!((s.applied, s.already_off, s.remaining), (2, 1, 1));
        assert!(s.refused.is_empty());
        let read = |n: u32| {
            root.read_opt(&format!("/proc/irq/{n}/smp_affinity_list"))
                .unwrap()
        };
        assert_eq!(
            (read(1), read(2), read(3)),
            ("0-1".into(), "0-1".into(), "0".into())
        );

        // Something puts IRQ 3 back on CPU 2: drift, counted once.
        let mut s = s;
        std::fs::write(dir.path().join("proc/irq/3/smp_affinity_list"), "2").unwrap();
        s.check_drift(&root, &away);
        s.check_drift(&root, &away);
        assert_eq!(s.drift, 1);

        assert!(journal.undo().failed.is_empty());
        assert_eq!((read(1), read(2)), ("0-3".into(), "2".into()));
    }
}
