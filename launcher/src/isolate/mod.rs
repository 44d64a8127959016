//! Isolation of the task CPUs (`--cgroup`, `--fence`, `--steer`) and the journal that undoes it.
//!
//! Owns: checking before anything changes that the launcher may make the changes asked for
//! ([`preflight`]), making them in order (irqbalance held, IRQs steered, cgroup), each one
//! journaled first, the drift check while the task runs, and undoing them all at the end or
//! on any failure half-way ([`Isolation`]'s `Drop`). Must not: choose CPUs (the selection does,
//! fenced siblings included) or start the task.

pub mod cgroup;
pub mod irq;
pub mod irqbalance;
pub mod journal;
pub mod steering;
pub mod undo;

use crate::error::{Error, Result};
use crate::fsroot::FsRoot;
use crate::privilege;
use goset_plan::CpuSet;
use journal::{Change, Journal};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use undo::Undone;

/// The isolation flags of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request {
    /// `--cgroup`.
    pub cgroup: bool,
    /// `--fence` (needs `--cgroup`).
    pub fence: bool,
    /// `--steer`.
    pub steer: bool,
}

/// Checks what `request` needs before anything changes: a cpuset hierarchy the launcher may
/// write to for `--cgroup`, IRQ affinity files it may write for `--steer`. Returns the
/// hierarchy the group goes in.
pub fn preflight(root: &FsRoot, request: Request) -> Result<Option<cgroup::Hierarchy>> {
    let mut hierarchy = None;
    if request.cgroup {
        let h = cgroup::cpuset_hierarchies(root).into_iter().next().ok_or_else(|| {
            Error::System(
                "--cgroup: no cpuset controller (neither the cgroup2 root's cgroup.controllers nor a v1 hierarchy offers cpuset)".into(),
            )
        })?;
        privilege::require_writable("--cgroup", &h.mount)?;
        hierarchy = Some(h);
    }
    if request.steer {
        let first = root
            .list("/proc/irq")
            .into_iter()
            .find(|n| n.parse::<u32>().is_ok());
        if let Some(irq) = first {
            let file = root.path(&format!("/proc/irq/{irq}/smp_affinity_list"));
            privilege::require_writable("--steer", &file)?;
        }
    }
    Ok(hierarchy)
}

/// Where the changes go and what they are about.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The directory of journals.
    pub journals: PathBuf,
    /// This launcher's journal name (`<pid>-<start>`).
    pub name: String,
    /// The group's name (`goset-<task>`).
    pub group_name: String,
    /// The group's CPUs: the task CPUs, fenced siblings, and where slots may move (spares,
    /// `--adapt` candidates).
    pub cpus: CpuSet,
    /// The group's memory nodes.
    pub mems: CpuSet,
    /// The CPUs IRQs must leave: the task CPUs, fenced siblings and spares.
    pub away: CpuSet,
    /// Where IRQs that had only task CPUs go: the online CPUs outside `away`.
    pub onto: CpuSet,
}

/// The changes made for a run, undone when it is dropped.
#[derive(Debug)]
pub struct Isolation {
    root: FsRoot,
    journal: Option<Journal>,
    group: Option<cgroup::Group>,
    procs: Option<std::fs::File>,
    /// The group's directory (cgroup v2), for `clone3(CLONE_INTO_CGROUP)`.
    group_dir: Option<std::fs::File>,
    steering: Option<irq::Steering>,
    irqbalance: Option<irqbalance::Held>,
    away: CpuSet,
    checked: Instant,
}

/// What the isolation of a run did, for the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IsolationOutcome {
    /// The cgroup the task ran in.
    pub cgroup: Option<cgroup::Group>,
    /// IRQ steering (`--steer`).
    pub steer: Option<irq::Steering>,
    /// What was done with irqbalance (`--steer`).
    pub irqbalance: Option<String>,
    /// Undoing the changes at the end.
    pub undone: Undone,
}

/// How often the housekeeper looks for IRQs that came back.
const DRIFT_EVERY: Duration = Duration::from_secs(1);

impl Isolation {
    fn empty(root: &FsRoot, away: CpuSet) -> Isolation {
        Isolation {
            root: root.clone(),
            journal: None,
            group: None,
            procs: None,
            group_dir: None,
            steering: None,
            irqbalance: None,
            away,
            checked: Instant::now(),
        }
    }

    /// Makes the changes `request` asks for, in order: irqbalance held, the IRQs steered, the
    /// cgroup. A failure undoes what was done (the returned error is the first failure).
    pub fn setup(
        root: &FsRoot,
        request: Request,
        hierarchy: Option<&cgroup::Hierarchy>,
        setup: &Setup,
    ) -> Result<Isolation> {
        let mut iso = Isolation::empty(root, setup.away);
        if !request.cgroup && !request.steer {
            return Ok(iso);
        }
        let journal = Journal::create(&setup.journals, &setup.name).map_err(|e| {
            Error::System(format!(
                "cannot create the journal in {}: {e}",
                setup.journals.display()
            ))
        })?;
        let journal = iso.journal.insert(journal);
        if request.steer {
            let pid = std::process::id();
            let me = steering::Member {
                pid,
                start: crate::procfs::pid_stat::start_ticks(&crate::fsroot::FsRoot::default(), pid)
                    .unwrap_or(0),
                away: setup.away.to_string(),
                onto: setup.onto.to_string(),
            };
            let (steered, held) =
                steering::join(root, &setup.journals, me, journal).map_err(Error::System)?;
            iso.irqbalance = Some(held);
            iso.steering = Some(steered);
        }
        if let Some(h) = hierarchy.filter(|_| request.cgroup) {
            let group = cgroup::create_free(
                h,
                &setup.group_name,
                &setup.cpus.to_string(),
                &setup.mems.to_string(),
                journal,
            )
            .map_err(Error::System)?;
            let procs = group.path.join("cgroup.procs");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&procs)
                .map_err(|e| {
                    Error::System(format!("--cgroup: cannot open {}: {e}", procs.display()))
                })?;
            if group.version == cgroup::Version::V2 {
                let dir = std::fs::File::open(&group.path).map_err(|e| {
                    Error::System(format!(
                        "--cgroup: cannot open {}: {e}",
                        group.path.display()
                    ))
                })?;
                iso.group_dir = Some(dir);
            }
            iso.procs = Some(file);
            iso.group = Some(group);
        }
        Ok(iso)
    }

    /// How the task joins the group: `cgroup.procs` open for the child to write `0` to, and on
    /// v2 the group's directory, for the child to be born in it.
    pub fn cgroup_join(&self) -> Option<crate::task::CgroupJoin> {
        use std::os::fd::AsRawFd;
        Some(crate::task::CgroupJoin {
            procs: self.procs.as_ref()?.as_raw_fd(),
            dir: self.group_dir.as_ref().map(|f| f.as_raw_fd()),
        })
    }

    /// While the task runs: about once a second, counts steered IRQs that came back.
    pub fn check_drift(&mut self) {
        if self.checked.elapsed() < DRIFT_EVERY {
            return;
        }
        self.checked = Instant::now();
        if let Some(s) = self.steering.as_mut() {
            s.check_drift(&self.root, &self.away);
        }
    }

    /// Undoes every change (after a last drift check) and says what the run did.
    pub fn finish(mut self) -> IsolationOutcome {
        if let Some(s) = self.steering.as_mut() {
            s.check_drift(&self.root, &self.away);
            s.count_remaining(&self.root, &self.away);
        }
        self.procs = None;
        self.group_dir = None;
        IsolationOutcome {
            cgroup: self.group.take(),
            steer: self.steering.take(),
            irqbalance: self.irqbalance.take().map(|h| h.to_string()),
            undone: self.journal.take().map(Journal::undo).unwrap_or_default(),
        }
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        self.procs = None;
        self.group_dir = None;
        if let Some(j) = self.journal.take() {
            let undone = j.undo();
            for why in &undone.failed {
                crate::output::to_stderr(&format!("goset-run: {why}\n"));
            }
        }
    }
}

/// Undoes the journals of launchers that are gone (`goset restore`, and each `goset-run` as
/// root before it selects). Returns what was undone and how many journals.
pub fn restore(base: &Path) -> (Undone, usize) {
    let root = FsRoot::default();
    undo::restore_dead(&journal::dir_in(base), &|c| accepted(&root, c))
}

/// Whether a journal line names a change goset makes, where it makes it: an IRQ's
/// `/proc/irq/<n>/smp_affinity_list`, the cpuset controller of a cpuset hierarchy's
/// `cgroup.subtree_control`, a `goset-*` group at the top of such a hierarchy, the irqbalance
/// unit, an irqbalance process. A journal only root can write says nothing else; a crafted
/// one is refused line by line (`..` in a path, another file, another unit).
pub fn accepted(root: &FsRoot, change: &Change) -> std::result::Result<(), String> {
    use std::path::Component;
    let plain = |p: &Path| {
        p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    };
    let mounts: Vec<PathBuf> = (cgroup::cpuset_hierarchies(root).into_iter())
        .map(|h| h.mount)
        .collect();
    let ok = match change {
        Change::IrqAffinity { irq, file, .. } => {
            *file == root.path(&format!("/proc/irq/{irq}/smp_affinity_list"))
        }
        Change::ControllerEnabled { file, controller } => {
            controller == "cpuset"
                && plain(file)
                && file
                    .file_name()
                    .is_some_and(|n| n == "cgroup.subtree_control")
                && file.parent().is_some_and(|d| mounts.iter().any(|m| m == d))
        }
        Change::CgroupCreated { path, parent } => {
            plain(path)
                && path.parent() == Some(parent.as_path())
                && mounts.iter().any(|m| m == parent)
                && (path.file_name().and_then(|n| n.to_str()))
                    .is_some_and(|n| n.starts_with("goset-"))
        }
        Change::UnitStopped { unit } => unit == irqbalance::UNIT,
        Change::ProcessStopped { pid, .. } => {
            let comm = root
                .read_opt(&format!("/proc/{pid}/comm"))
                .unwrap_or_default();
            // A process gone since has nothing left to continue.
            comm.trim() == "irqbalance" || !root.exists(&format!("/proc/{pid}"))
        }
        Change::SteerJoined { dir, .. } => {
            plain(dir) && dir.file_name().is_some_and(|n| n == "journals")
        }
        Change::NotMade => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("not a change goset makes ({change:?})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake machine: a cgroup2 root offering cpuset (or not) and two IRQs on CPUs 0-3.
    fn fake(cpuset: bool) -> (tempfile::TempDir, FsRoot) {
        let dir = tempfile::tempdir().unwrap();
        let p = |rel: &str| dir.path().join(rel);
        std::fs::create_dir_all(p("sys/fs/cgroup")).unwrap();
        std::fs::create_dir_all(p("proc")).unwrap();
        std::fs::write(p("proc/mounts"), "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n").unwrap();
        let controllers = if cpuset { "cpuset memory" } else { "memory" };
        std::fs::write(p("sys/fs/cgroup/cgroup.controllers"), controllers).unwrap();
        std::fs::write(p("sys/fs/cgroup/cgroup.subtree_control"), "memory").unwrap();
        for irq in [5, 9] {
            std::fs::create_dir_all(p(&format!("proc/irq/{irq}"))).unwrap();
            std::fs::write(p(&format!("proc/irq/{irq}/smp_affinity_list")), "0-3").unwrap();
        }
        let root = FsRoot::new(dir.path());
        (dir, root)
    }

    /// IRQ `n`'s mask narrowed from 0-3 to 0, written through `file`.
    fn irq_change(n: u32, file: PathBuf) -> Change {
        Change::IrqAffinity {
            irq: n,
            file,
            before: "0-3".into(),
            after: "0".into(),
        }
    }

    /// One change of each kind goset makes on the fake machine `root` (cgroup root `cg`).
    fn changes_goset_makes(root: &FsRoot, cg: &Path) -> Vec<Change> {
        vec![
            irq_change(5, root.path("/proc/irq/5/smp_affinity_list")),
            Change::CgroupCreated {
                path: cg.join("goset-app"),
                parent: cg.to_path_buf(),
            },
            Change::ControllerEnabled {
                file: cg.join("cgroup.subtree_control"),
                controller: "cpuset".into(),
            },
            Change::UnitStopped {
                unit: "irqbalance.service".into(),
            },
        ]
    }

    /// Changes a crafted journal could spell that goset never makes: files out of their
    /// place (through `..`, another IRQ's, `dir`'s own), cgroups not goset's, a controller and
    /// a unit it leaves alone. The third writes `dir/victim`.
    fn changes_goset_never_makes(dir: &Path, root: &FsRoot, cg: &Path) -> Vec<Change> {
        let hostname = root.path("/proc/irq/24/../../sys/kernel/hostname");
        vec![
            irq_change(24, hostname),
            irq_change(5, root.path("/proc/irq/9/smp_affinity_list")),
            irq_change(5, dir.join("victim")),
            Change::CgroupCreated {
                path: cg.join("goset-app/../../../../tmp"),
                parent: cg.to_path_buf(),
            },
            Change::CgroupCreated {
                path: dir.join("etc/goset-x"),
                parent: dir.join("etc"),
            },
            Change::CgroupCreated {
                path: cg.join("system.slice"),
                parent: cg.to_path_buf(),
            },
            Change::ControllerEnabled {
                file: cg.join("cgroup.subtree_control"),
                controller: "memory".into(),
            },
            Change::UnitStopped {
                unit: "sshd.service".into(),
            },
        ]
    }

    /// Writes the journal `name` of `changes` under `journals`, as a launcher that died left it.
    fn write_journal(journals: &Path, name: &str, changes: &[Change]) {
        std::fs::create_dir_all(journals).unwrap();
        let lines: Vec<String> = (changes.iter())
            .map(|c| serde_json::to_string(c).unwrap() + "\n")
            .collect();
        std::fs::write(journals.join(format!("{name}.journal")), lines.concat()).unwrap();
    }

    #[test]
    fn a_journal_replays_only_changes_goset_makes() {
        let (dir, root) = fake(true);
        let cg = dir.path().join("sys/fs/cgroup");
        let good = changes_goset_makes(&root, &cg);
        for c in &good {
            assert_eq!(accepted(&root, c), Ok(()), "{c:?}");
        }
        let bad = changes_goset_never_makes(dir.path(), &root, &cg);
        for c in &bad {
            assert!(accepted(&root, c).is_err(), "{c:?}");
        }
        // A crafted journal of a dead launcher: its good line is undone, the bad ones refused
        // and never touched.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "0").unwrap();
        std::fs::write(root.path("/proc/irq/5/smp_affinity_list"), "0").unwrap();
        let journals = dir.path().join("journals");
        write_journal(&journals, "1-1", &[good[0].clone(), bad[2].clone()]);
        let (done, count) = undo::restore_dead(&journals, &|c| accepted(&root, c));
        assert_eq!((done.restored, count), (1, 1));
        assert_eq!(done.failed.len(), 1, "{:?}", done.failed);
        assert!(done.failed[0].contains("refused"), "{:?}", done.failed);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "0");
        let irq5 = std::fs::read_to_string(root.path("/proc/irq/5/smp_affinity_list")).unwrap();
        assert_eq!(irq5, "0-3");
        // A FIFO in a journal's place is named as one.
        let fifo = journals.join("1-2.journal");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (done, _) = undo::restore_dead(&journals, &|c| accepted(&root, c));
        assert!(
            done.failed
                .iter()
                .any(|f| f.contains("a FIFO, not a journal")),
            "{:?}",
            done.failed
        );
    }

    fn setup_in(dir: &Path) -> Setup {
        let set = |c: &[usize]| c.iter().copied().collect::<CpuSet>();
        Setup {
            journals: dir.join("journals"),
            name: "1-1".into(),
            group_name: "goset-app".into(),
            cpus: set(&[2, 3]),
            mems: set(&[0]),
            away: set(&[2, 3]),
            onto: set(&[0, 1]),
        }
    }

    /// Every file under `dir` with its contents (directories as `/`).
    fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    out.insert(p.clone(), "/".into());
                    todo.push(p);
                } else {
                    out.insert(p.clone(), std::fs::read_to_string(&p).unwrap_or_default());
                }
            }
        }
        out
    }

    use std::collections::BTreeMap;

    const CGROUP_AND_STEER: Request = Request {
        cgroup: true,
        fence: false,
        steer: true,
    };

    /// The tree under `dir` is `before` but for the journals directory, which stays, empty.
    fn assert_unchanged(dir: &Path, before: BTreeMap<PathBuf, String>) {
        let mut after = tree(dir);
        assert_eq!(after.remove(&dir.join("journals")).as_deref(), Some("/"));
        assert_eq!(after, before, "nothing left changed, no journal left");
    }

    #[test]
    fn no_cpuset_controller_is_one_line_before_anything_changes() {
        let (dir, root) = fake(false);
        let before = tree(dir.path());
        let request = Request {
            cgroup: true,
            ..Default::default()
        };
        let e = preflight(&root, request).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(
            e.to_string().starts_with("--cgroup: no cpuset controller"),
            "{e}"
        );
        assert_eq!(tree(dir.path()), before);
    }

    #[test]
    fn a_failure_half_way_undoes_what_was_done() {
        let (dir, root) = fake(true);
        let request = CGROUP_AND_STEER;
        let h = preflight(&root, request).unwrap().unwrap();
        assert_eq!(h.version, cgroup::Version::V2);
        // The controller cannot be enabled (its file is a directory here): the journaled
        // change is recorded, the write fails, and nothing is left changed.
        let control = dir.path().join("sys/fs/cgroup/cgroup.subtree_control");
        std::fs::remove_file(&control).unwrap();
        std::fs::create_dir(&control).unwrap();
        let before = tree(dir.path());
        let e = Isolation::setup(&root, request, Some(&h), &setup_in(dir.path())).unwrap_err();
        assert!(e.to_string().starts_with("--cgroup: cannot write"), "{e}");
        assert_unchanged(dir.path(), before);
    }

    #[test]
    fn an_irqbalance_that_cannot_be_held_changes_nothing() {
        if Path::new("/run/systemd/system").exists() {
            // systemctl would stop this machine's real irqbalance.
            eprintln!("SKIPPED: systemd runs here; the fake systemd unit would be real");
            return;
        }
        let (dir, root) = fake(true);
        // A systemd-managed irqbalance on a machine without systemctl to stop it.
        let p = |rel: &str| dir.path().join(rel);
        std::fs::create_dir_all(p("run/systemd/system")).unwrap();
        std::fs::create_dir_all(p("proc/4242")).unwrap();
        std::fs::write(p("proc/4242/comm"), "irqbalance\n").unwrap();
        let stat = "4242 (irqbalance) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0";
        std::fs::write(p("proc/4242/stat"), stat).unwrap();
        std::fs::write(
            p("proc/4242/cgroup"),
            "0::/system.slice/irqbalance.service\n",
        )
        .unwrap();
        let request = CGROUP_AND_STEER;
        let h = preflight(&root, request).unwrap();
        let before = tree(dir.path());
        let e = Isolation::setup(&root, request, h.as_ref(), &setup_in(dir.path())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--steer: irqbalance cannot be held: systemctl stop"),
            "{e}"
        );
        assert_unchanged(dir.path(), before);
    }

    #[test]
    fn steer_and_cgroup_are_undone_when_the_isolation_ends() {
        let (dir, root) = fake(true);
        let request = CGROUP_AND_STEER;
        let h = preflight(&root, request).unwrap();
        let before = tree(dir.path());
        let iso = Isolation::setup(&root, request, h.as_ref(), &setup_in(dir.path())).unwrap();
        let irq = dir.path().join("proc/irq/5/smp_affinity_list");
        assert_eq!(std::fs::read_to_string(&irq).unwrap(), "0-1");
        let group = dir.path().join("sys/fs/cgroup/goset-app");
        assert_eq!(
            std::fs::read_to_string(group.join("cpuset.cpus")).unwrap(),
            "2-3"
        );
        assert!(
            iso.cgroup_join().is_some_and(|j| j.dir.is_some()),
            "v2: born in the group"
        );
        // A real group's files vanish with it; the fake one's must go first.
        for f in ["cpuset.cpus", "cpuset.mems", "cgroup.procs"] {
            let _ = std::fs::remove_file(group.join(f));
        }
        let report = iso.finish();
        assert_eq!(report.steer.as_ref().unwrap().applied, 2);
        assert_eq!(report.irqbalance.as_deref(), Some("absent"));
        assert!(
            report.undone.failed.is_empty(),
            "{:?}",
            report.undone.failed
        );
        let mut after = tree(dir.path());
        assert_eq!(
            after.remove(&dir.path().join("journals")).as_deref(),
            Some("/")
        );
        let mut before = before;
        // Only the controller is written back as "-cpuset" (the kernel's file reads "memory").
        let control = dir.path().join("sys/fs/cgroup/cgroup.subtree_control");
        assert_eq!(after.remove(&control).as_deref(), Some("-cpuset"));
        before.remove(&control);
        assert_eq!(after, before);
    }
}
