//! The task's cpuset cgroup: where it can be made, the steps that make it, and its removal.
//!
//! The unified (v2) hierarchy is used when its root offers the cpuset controller; otherwise a
//! v1 hierarchy that has it (a hybrid host: v1 cpuset beside a v2 tree without it). The group
//! sits at the top of the hierarchy, named `goset-<task>` (the Go goset's name), or
//! `goset-<task>-<pid>` when that name is taken. [`steps`] is the pure plan of what is
//! written, in order; [`create`] carries it out, journaling each change first.

use super::journal::{Change, Failed, Journal};
use crate::fsroot::FsRoot;
use std::path::{Path, PathBuf};

/// Which cgroup interface a hierarchy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// cgroup v1, a hierarchy with the cpuset controller.
    V1,
    /// The unified hierarchy.
    V2,
}

/// A hierarchy that can hold a cpuset group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Its interface.
    pub version: Version,
    /// Its mount point (under the [`FsRoot`]).
    pub mount: PathBuf,
}

/// The hierarchies with a cpuset controller, the unified one first.
pub fn cpuset_hierarchies(root: &FsRoot) -> Vec<Hierarchy> {
    let mut found: Vec<Hierarchy> = crate::procfs::mounts::read(root)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| {
            let version = if m.version == 2 {
                Version::V2
            } else {
                Version::V1
            };
            let has_cpuset = match version {
                Version::V1 => m.controllers.iter().any(|c| c == "cpuset"),
                Version::V2 => root
                    .read_opt(&format!("{}/cgroup.controllers", m.path))
                    .is_some_and(|l| l.split_whitespace().any(|c| c == "cpuset")),
            };
            has_cpuset.then(|| Hierarchy {
                version,
                mount: root.path(&m.path),
            })
        })
        .collect();
    found.sort_by_key(|h| h.version != Version::V2);
    found.dedup_by(|a, b| a.mount == b.mount);
    found
}

/// The group's name for a task whose command is `command`: `goset-<basename>`, with every
/// byte a cgroup name or a shell would trip on replaced by `_`.
pub fn group_name(command: &std::ffi::OsStr) -> String {
    let base = Path::new(command)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("goset-{}", if clean.is_empty() { "task" } else { &clean })
}

/// One write of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write `+cpuset` to this `cgroup.subtree_control` (journaled).
    EnableCpuset(PathBuf),
    /// Create the group (journaled).
    Create {
        /// The group.
        dir: PathBuf,
        /// Its parent.
        parent: PathBuf,
    },
    /// Write `text` to `file`.
    Write {
        /// The file.
        file: PathBuf,
        /// Its new contents.
        text: String,
    },
}

/// The writes that make group `dir` (a child of the hierarchy's root) with `cpus` and `mems`
/// (cpulists), in order. v2: the root's `cgroup.subtree_control` gets `+cpuset` unless
/// `subtree_has_cpuset`; v1 needs `cpuset.cpus` and `cpuset.mems` set before a task joins.
pub fn steps(
    h: &Hierarchy,
    dir: &Path,
    cpus: &str,
    mems: &str,
    subtree_has_cpuset: bool,
) -> Vec<Step> {
    let mut out = Vec::new();
    if h.version == Version::V2 && !subtree_has_cpuset {
        out.push(Step::EnableCpuset(h.mount.join("cgroup.subtree_control")));
    }
    out.push(Step::Create {
        dir: dir.to_path_buf(),
        parent: h.mount.clone(),
    });
    for (file, text) in [("cpuset.cpus", cpus), ("cpuset.mems", mems)] {
        out.push(Step::Write {
            file: dir.join(file),
            text: text.to_string(),
        });
    }
    out
}

/// A group this run made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its directory.
    pub path: PathBuf,
    /// Its interface.
    pub version: Version,
    /// `cpuset.cpus` as written.
    pub cpus: String,
    /// `cpuset.mems` as written.
    pub mems: String,
}

/// The group's directories to try, in order: `<mount>/<name>`, then `<mount>/<name>-<pid>`
/// (the first taken by a live run, or left behind: never reused, never removed here).
fn candidates(h: &Hierarchy, name: &str) -> [PathBuf; 2] {
    [
        h.mount.join(name),
        h.mount.join(format!("{name}-{}", std::process::id())),
    ]
}

/// Makes the group at the first of [`candidates`] that can be created: a name another run
/// creates between the look and the make (two runs of one command started together) is
/// passed over for the next, as one that existed before.
pub fn create_free(
    h: &Hierarchy,
    name: &str,
    cpus: &str,
    mems: &str,
    journal: &mut Journal,
) -> Result<Group, String> {
    let [first, second] = candidates(h, name);
    for dir in [&first, &second] {
        match create(h, dir, cpus, mems, journal) {
            Err(Creating::Taken) => continue,
            Err(Creating::Failed(why)) => return Err(why),
            Ok(group) => return Ok(group),
        }
    }
    Err(format!(
        "--cgroup: {} and {} both exist (goset rm-cgroup removes a left-over group)",
        first.display(),
        second.display()
    ))
}

/// Why [`create`] made no group.
#[derive(Debug)]
pub enum Creating {
    /// The group's directory exists already (nothing was made).
    Taken,
    /// A step failed, as the message says.
    Failed(String),
}

/// Makes the group: each step in order, the journaled ones recorded first.
pub fn create(
    h: &Hierarchy,
    dir: &Path,
    cpus: &str,
    mems: &str,
    journal: &mut Journal,
) -> Result<Group, Creating> {
    let subtree =
        std::fs::read_to_string(h.mount.join("cgroup.subtree_control")).unwrap_or_default();
    let enabled = subtree.split_whitespace().any(|c| c == "cpuset");
    let fail =
        |what: &Path, e: std::io::Error| format!("--cgroup: cannot write {}: {e}", what.display());
    let failed = |what: &Path, e: Failed| match e {
        Failed::Journal(e) => format!("--cgroup: cannot write the journal: {e}"),
        Failed::Change(e) => fail(what, e),
    };
    for step in steps(h, dir, cpus, mems, enabled) {
        match step {
            Step::EnableCpuset(file) => {
                let change = Change::ControllerEnabled {
                    file: file.clone(),
                    controller: "cpuset".into(),
                };
                journal
                    .make(change, || std::fs::write(&file, "+cpuset"))
                    .map_err(|e| Creating::Failed(failed(&file, e)))?;
            }
            Step::Create { dir: made, parent } => {
                // A name taken already gets no journal line: a line for another run's group
                // would have `goset restore` remove that group if this launcher died before
                // marking it not made. Only a name taken in between still needs that mark.
                if made == dir && made.exists() {
                    return Err(Creating::Taken);
                }
                let change = Change::CgroupCreated {
                    path: made.clone(),
                    parent,
                };
                match journal.make(change, || std::fs::create_dir(&made)) {
                    Ok(()) => {}
                    Err(Failed::Change(e))
                        if made == dir && e.kind() == std::io::ErrorKind::AlreadyExists =>
                    {
                        return Err(Creating::Taken)
                    }
                    Err(e) => return Err(Creating::Failed(failed(&made, e))),
                }
            }
            Step::Write { file, text } => {
                std::fs::write(&file, &text).map_err(|e| Creating::Failed(fail(&file, e)))?
            }
        }
    }
    Ok(Group {
        path: dir.to_path_buf(),
        version: h.version,
        cpus: cpus.to_string(),
        mems: mems.to_string(),
    })
}

/// The pids in a group's `cgroup.procs`.
pub fn procs(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default()
}

/// Moves the processes in group `dir` to `parent` (a few rounds, for those that fork while
/// moved), adding each to `moved` once.
fn move_out(dir: &Path, parent: &Path, moved: &mut Vec<(i32, String)>) {
    for _ in 0..10 {
        let left = procs(dir);
        if left.is_empty() {
            return;
        }
        for pid in left {
            if std::fs::write(parent.join("cgroup.procs"), pid.to_string()).is_ok()
                && !moved.iter().any(|&(p, _)| p == pid)
            {
                moved.push((pid, comm(pid)));
            }
        }
    }
}

/// Moves every process left in group `dir` to `parent` and removes the group; returns the
/// processes moved (never killed). A group already gone is fine.
pub fn empty_and_remove(dir: &Path, parent: &Path) -> Result<Vec<(i32, String)>, String> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut moved = Vec::new();
    // Groups the task made inside its own keep it busy (EBUSY): they go first, depth first,
    // their processes to `parent` too.
    let children: Vec<PathBuf> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    for child in children {
        moved.extend(empty_and_remove(&child, parent)?);
    }
    // A task that just exited is still counted by the kernel for a moment, and a process
    // may fork while it is moved, or join late (the task a killed launcher was starting
    // writes to cgroup.procs before it execs): every try moves what is there first.
    let mut last = None;
    for attempt in 0..50 {
        move_out(dir, parent, &mut moved);
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(moved),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(moved),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last = Some(e),
            Err(e) => {
                last = Some(e);
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2 << attempt.min(5)));
    }
    Err(format!(
        "cannot remove cgroup {}: {}",
        dir.display(),
        last.expect("an attempt failed")
    ))
}

/// A group removed, with the processes moved out of it: `(pid, comm)`.
pub type Removed = (PathBuf, Vec<(i32, String)>);

/// `goset rm-cgroup NAME`: empties and removes the goset group `NAME` in every cpuset
/// hierarchy that has it. `Err` with one line when NAME is not a goset group's name or no
/// hierarchy has it.
pub fn remove_named(root: &FsRoot, name: &str) -> Result<Vec<Removed>, crate::error::Error> {
    use crate::error::Error;
    if !name.starts_with("goset-") || name.contains('/') || name == "goset-" {
        return Err(Error::Usage(format!(
            "rm-cgroup '{name}': not a goset cgroup name (goset-<task>, as bare goset lists them)"
        )));
    }
    let mut removed = Vec::new();
    for h in cpuset_hierarchies(root) {
        let dir = h.mount.join(name);
        if dir.is_dir() {
            let moved = empty_and_remove(&dir, &h.mount).map_err(Error::System)?;
            removed.push((dir, moved));
        }
    }
    if removed.is_empty() {
        return Err(Error::System(format!(
            "rm-cgroup {name}: no such group in any cpuset hierarchy"
        )));
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake cgroup2 mount with the cpuset controller available but not enabled below.
    fn fake_v2() -> (tempfile::TempDir, FsRoot) {
        let dir = tempfile::tempdir().unwrap();
        let cg = dir.path().join("sys/fs/cgroup");
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(
            dir.path().join("proc/mounts"),
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n",
        )
        .unwrap();
        std::fs::write(cg.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        std::fs::write(cg.join("cgroup.subtree_control"), "memory pids\n").unwrap();
        std::fs::write(cg.join("cgroup.procs"), "").unwrap();
        let root = FsRoot::new(dir.path());
        (dir, root)
    }

    #[test]
    fn v2_enables_cpuset_then_creates_then_writes_cpus_and_mems() {
        let (dir, root) = fake_v2();
        let h = &cpuset_hierarchies(&root)[0];
        let cg = dir.path().join("sys/fs/cgroup");
        assert_eq!(h.version, Version::V2);
        let group = cg.join("goset-app");
        assert_eq!(candidates(h, "goset-app")[0], group);
        assert_eq!(
            steps(h, &group, "2-3", "0", false),
            vec![
                Step::EnableCpuset(cg.join("cgroup.subtree_control")),
                Step::Create {
                    dir: group.clone(),
                    parent: cg.clone()
                },
                Step::Write {
                    file: group.join("cpuset.cpus"),
                    text: "2-3".into()
                },
                Step::Write {
                    file: group.join("cpuset.mems"),
                    text: "0".into()
                },
            ]
        );
        assert_eq!(
            steps(h, &group, "2-3", "0", true).len(),
            3,
            "already enabled"
        );

        let jdir = dir.path().join("journals");
        let mut journal = Journal::create(&jdir, "1-1").unwrap();
        let made = create(h, &group, "2-3", "0", &mut journal).unwrap();
        assert_eq!(made.version, Version::V2);
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&cg.join("cgroup.subtree_control")), "+cpuset");
        assert_eq!(read(&group.join("cpuset.cpus")), "2-3");
        assert_eq!(read(&group.join("cpuset.mems")), "0");
        // The journal holds the two changes in the order they were made.
        let changes = super::super::journal::read(&jdir.join("1-1.journal")).unwrap();
        assert!(matches!(changes[0], Change::ControllerEnabled { .. }));
        assert!(matches!(changes[1], Change::CgroupCreated { .. }));
        // A second run of the same task gets the pid-suffixed name: the first is taken (made
        // by a run started together with it, after the look: the make itself tells).
        let second = create_free(h, "goset-app", "2-3", "0", &mut journal).unwrap();
        assert_eq!(
            second.path,
            cg.join(format!("goset-app-{}", std::process::id()))
        );
        // The name taken before got no line, not even one marked not made.
        let raw = read(&jdir.join("1-1.journal"));
        let first_group = format!("\"path\":\"{}\"", group.display());
        assert_eq!(raw.matches(&first_group).count(), 1, "{raw}");
        assert!(!raw.contains("not_made"), "{raw}");
        let e = create_free(h, "goset-app", "2-3", "0", &mut journal).unwrap_err();
        assert!(e.contains("both exist"), "{e}");
        for f in ["cpuset.cpus", "cpuset.mems"] {
            std::fs::remove_file(second.path.join(f)).unwrap();
        }
        // A real group has no files of its own to delete; the fake one does.
        for f in ["cpuset.cpus", "cpuset.mems"] {
            std::fs::remove_file(group.join(f)).unwrap();
        }
        let undone = journal.undo();
        assert!(undone.failed.is_empty(), "{:?}", undone.failed);
        assert!(!group.exists());
        assert_eq!(read(&cg.join("cgroup.subtree_control")), "-cpuset");
        assert!(!jdir.join("1-1.journal").exists());
    }

    #[test]
    fn v1_cpuset_is_used_when_the_unified_tree_has_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::create_dir_all(dir.path().join("sys/fs/cgroup/unified")).unwrap();
        std::fs::write(
            dir.path().join("sys/fs/cgroup/unified/cgroup.controllers"),
            "",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("proc/mounts"),
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
             cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n",
        )
        .unwrap();
        let found = cpuset_hierarchies(&FsRoot::new(dir.path()));
        assert_eq!(
            found,
            vec![Hierarchy {
                version: Version::V1,
                mount: dir.path().join("sys/fs/cgroup/cpuset")
            }]
        );
        let group = found[0].mount.join("goset-x");
        let s = steps(&found[0], &group, "1", "0", false);
        assert!(matches!(s[0], Step::Create { .. }), "v1 enables nothing");
    }

    #[test]
    fn names_are_the_gos_and_safe() {
        assert_eq!(group_name("./bench/my app".as_ref()), "goset-my_app");
        assert_eq!(group_name("/usr/bin/stress-ng".as_ref()), "goset-stress-ng");
        assert_eq!(group_name("".as_ref()), "goset-task");
    }

    #[test]
    fn rm_cgroup_refuses_other_names() {
        let (_dir, root) = fake_v2();
        for bad in ["system.slice", "goset-", "goset-a/../b"] {
            let e = remove_named(&root, bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
        assert_eq!(
            remove_named(&root, "goset-none").unwrap_err().exit_code(),
            1
        );
    }
}
