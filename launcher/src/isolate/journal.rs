//! The journal: every change a run makes to the machine, written down before it is made.
//!
//! One file per launcher, `<base>/journals/<pid>-<start>.journal` (the run directory's naming,
//! see [`crate::rundir`]), one JSON object per line, each line `fsync`'ed before the change it
//! names is made. The launcher undoes its own journal when it ends; a journal whose launcher
//! is dead (SIGKILL, OOM kill) is undone by `goset restore` or by the next `goset-run`.
//!
//! Owns: the file format, appending, reading back (a half-written last line is ignored) and
//! undoing in reverse order. Every undo sets a state rather than reverting a step, so undoing
//! twice is the same as once. Must not: decide what to change.

use super::cgroup;
use crate::fsroot::FsRoot;
use crate::procfs::ProcessId;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One change to the machine and what undoes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// `+controller` was written to `file` (a `cgroup.subtree_control`): undone with
    /// `-controller`.
    ControllerEnabled {
        /// The `cgroup.subtree_control` written.
        file: PathBuf,
        /// The controller enabled.
        controller: String,
    },
    /// A cgroup was created: undone by moving what is left in it to `parent` and removing it.
    CgroupCreated {
        /// The group's directory.
        path: PathBuf,
        /// Its parent group, where left-over processes go.
        parent: PathBuf,
    },
    /// An IRQ's `smp_affinity_list` was `before` and was set to `after`: undone by writing
    /// `before` back while it still reads `after`. One that reads anything else was changed
    /// since by someone else (an administrator, another run), whose value stays.
    IrqAffinity {
        /// IRQ number.
        irq: u32,
        /// The `smp_affinity_list` written.
        file: PathBuf,
        /// Its text before.
        before: String,
        /// The text written.
        after: String,
    },
    /// A systemd unit was stopped: undone by starting it.
    UnitStopped {
        /// The unit.
        unit: String,
    },
    /// A process was stopped with SIGSTOP: undone by SIGCONT, if the pid still names the
    /// process with that start time.
    ProcessStopped {
        /// Its pid.
        pid: i32,
        /// Its start time (`stat` field 22).
        start: u64,
    },
    /// The run joined the node's shared IRQ steering ([`super::steering`]) whose state is in
    /// `dir`: undone by leaving it (the last run to leave puts the IRQs and irqbalance back).
    SteerJoined {
        /// The directory of journals holding the shared state.
        dir: PathBuf,
        /// The run's launcher.
        pid: u32,
        /// Its start time.
        start: u64,
    },
    /// The change on the line before was not made (its write failed): nothing to undo.
    NotMade,
}

/// What undoing a journal did.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Undone {
    /// Changes undone (or found already undone).
    pub restored: usize,
    /// Changes that could not be undone, one line each.
    pub failed: Vec<String>,
    /// Processes found in a group being removed, moved to its parent: `(pid, comm)`.
    pub outlived: Vec<(i32, String)>,
}

impl Undone {
    fn merge(&mut self, other: Undone) {
        self.restored += other.restored;
        self.failed.extend(other.failed);
        self.outlived.extend(other.outlived);
    }
}

/// Why [`Journal::make`] failed.
#[derive(Debug)]
pub enum Failed {
    /// The journal could not be written: the change was not tried.
    Journal(std::io::Error),
    /// The change itself failed.
    Change(std::io::Error),
}

/// The directory of journals under a run-directory base.
pub fn dir_in(base: &Path) -> PathBuf {
    base.join("journals")
}

/// An open journal of this launcher.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    changes: Vec<Change>,
}

impl Journal {
    /// Creates this launcher's journal `<dir>/<name>.journal` (0600, the directory 0700),
    /// empty; a file left by an earlier boot under the same name is undone first.
    pub fn create(dir: &Path, name: &str) -> std::io::Result<Journal> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(base) = dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(base)?;
        }
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        let path = dir.join(format!("{name}.journal"));
        if path.exists() {
            undo(&read(&path)?);
            std::fs::remove_file(&path)?;
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        // The name must survive a crash as well as the lines.
        File::open(dir)?.sync_all()?;
        Ok(Journal {
            path,
            file,
            changes: Vec::new(),
        })
    }

    /// Opens journal `<dir>/<name>.journal` to append to it, its changes read, or creates it
    /// empty (the node's shared steering state, kept across the runs that share it).
    pub fn open(dir: &Path, name: &str) -> std::io::Result<Journal> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(format!("{name}.journal"));
        if !path.exists() {
            return Journal::create(dir, name);
        }
        let changes = read(&path)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        Ok(Journal {
            path,
            file,
            changes,
        })
    }

    /// The changes recorded, oldest first.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Appends `change` and makes it durable; only then may the change be made.
    fn record(&mut self, change: Change) -> std::io::Result<()> {
        let mut line = serde_json::to_string(&change).expect("a change serialises");
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        self.changes.push(change);
        Ok(())
    }

    /// Records `change`, then makes it with `make`. When `make` fails, the change is marked
    /// not made (a refused write changed nothing, and its undo could be refused too).
    pub fn make<T>(
        &mut self,
        change: Change,
        make: impl FnOnce() -> std::io::Result<T>,
    ) -> Result<T, Failed> {
        self.record(change).map_err(Failed::Journal)?;
        make().map_err(|e| {
            if self.record(Change::NotMade).is_ok() {
                self.changes.pop();
                self.changes.pop();
            }
            Failed::Change(e)
        })
    }

    /// Undoes every change, newest first, and removes the journal when all were undone (one
    /// that failed keeps it, for `goset restore` to try again).
    pub fn undo(self) -> Undone {
        let done = undo(&self.changes);
        if done.failed.is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
        done
    }
}

/// Reads a journal: the changes of its complete lines. A line that does not parse (the last
/// one half-written when the launcher died, or garbage) is skipped: it names no change that
/// was made, since a change is made only after its line is complete on disk.
pub fn read(path: &Path) -> std::io::Result<Vec<Change>> {
    let bytes = crate::bounded::read_regular(path, crate::fsroot::MAX_TEXT)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut changes = Vec::new();
    let lines = text.split_inclusive('\n').filter(|l| l.ends_with('\n'));
    for change in lines.filter_map(|l| serde_json::from_str(l.trim_end()).ok()) {
        match change {
            Change::NotMade => {
                changes.pop();
            }
            change => changes.push(change),
        }
    }
    Ok(changes)
}

/// Undoes `changes`, newest first.
pub fn undo(changes: &[Change]) -> Undone {
    undo_keeping(changes).0
}

/// [`undo`], and the changes that could not be undone, oldest first: all a journal must keep
/// (a change undone once is never undone again: its file may be a live run's since).
fn undo_keeping(changes: &[Change]) -> (Undone, Vec<Change>) {
    let mut done = Undone::default();
    let mut kept = Vec::new();
    for change in changes.iter().rev() {
        match undo_one(change) {
            Ok(outlived) => {
                done.restored += 1;
                done.outlived.extend(outlived);
            }
            Err(why) => {
                done.failed.push(why);
                kept.insert(0, change.clone());
            }
        }
    }
    (done, kept)
}

fn undo_one(change: &Change) -> Result<Vec<(i32, String)>, String> {
    match change {
        Change::ControllerEnabled { file, controller } => {
            // Busy: another group below uses it now, and it stays enabled for that group.
            match std::fs::write(file, format!("-{controller}")) {
                Ok(()) => Ok(Vec::new()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(Vec::new()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(e) => Err(format!(
                    "{}: cannot write -{controller}: {e}",
                    file.display()
                )),
            }
        }
        Change::CgroupCreated { path, parent } => cgroup::empty_and_remove(path, parent),
        // Not what this run wrote: changed since by someone else, or a refused write whose
        // NotMade line a crash kept from the disk (writing it back would be refused again).
        Change::IrqAffinity { file, after, .. }
            if !std::fs::read_to_string(file).is_ok_and(|now| now.trim() == after) =>
        {
            Ok(Vec::new())
        }
        Change::IrqAffinity {
            irq, file, before, ..
        } => match std::fs::write(file, before) {
            Ok(()) => Ok(Vec::new()),
            // The IRQ is gone (its device was removed): nothing to restore.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(format!("irq {irq}: cannot restore affinity {before}: {e}")),
        },
        Change::UnitStopped { unit } => super::irqbalance::start_unit(unit),
        Change::ProcessStopped { pid, start } => {
            super::irqbalance::resume(*pid, *start);
            Ok(Vec::new())
        }
        Change::SteerJoined { dir, pid, start } => {
            super::steering::leave(dir, *pid, *start).map(|()| Vec::new())
        }
        Change::NotMade => Ok(Vec::new()),
    }
}

/// A journal whose launcher is gone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stale {
    /// The journal file.
    pub path: PathBuf,
    /// Its launcher's pid.
    pub pid: u32,
    /// Why it is refused: not a regular file, or owned by another user (its lines could name
    /// any file).
    pub refused: Option<String>,
}

/// Rewrites journal `path` with `kept` alone (complete, then renamed into place), so that the
/// changes undone are never replayed.
fn keep_only(path: &Path, kept: &[Change]) {
    let text: String = (kept.iter())
        .filter_map(|c| serde_json::to_string(c).ok())
        .map(|l| l + "\n")
        .collect();
    let tmp = path.with_extension("journal.tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// The journals in `dir` whose launcher is not alive (by pid and start time).
pub fn stale(dir: &Path) -> Vec<Stale> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut found: Vec<Stale> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (pid, start) = crate::rundir::parse_name(name.strip_suffix(".journal")?)?;
            if (ProcessId { pid, start }).is_alive(&FsRoot::default()) {
                return None;
            }
            let meta = std::fs::symlink_metadata(entry.path()).ok()?;
            let kind = meta.file_type();
            use std::os::unix::fs::FileTypeExt;
            let refused = if kind.is_symlink() {
                Some("a symbolic link, not a journal".to_string())
            } else if kind.is_fifo() {
                Some("a FIFO, not a journal".to_string())
            } else if !kind.is_file() {
                Some("not a regular file".to_string())
            } else if meta.uid() != uid {
                Some(format!("owned by uid {}, not by this user", meta.uid()))
            } else {
                None
            };
            Some(Stale {
                path: entry.path(),
                pid,
                refused,
            })
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Undoes every journal in `dir` whose launcher is dead, removing each that was undone whole.
/// A journal owned by another user (or not a regular file) is refused: its lines could name
/// any file. Each change must also pass `accept` (a change goset makes, on a file it makes it
/// to); one that does not is refused, never undone, and does not keep the journal. Returns what
/// was done and one line per refusal or failure.
pub fn restore_dead(dir: &Path, accept: &dyn Fn(&Change) -> Result<(), String>) -> (Undone, usize) {
    let mut done = Undone::default();
    let mut journals = 0;
    for s in stale(dir) {
        if let Some(why) = &s.refused {
            done.failed
                .push(format!("{}: {why}: refused", s.path.display()));
            continue;
        }
        journals += 1;
        match read(&s.path) {
            Ok(changes) => {
                let (changes, refused): (Vec<Change>, Vec<Change>) =
                    changes.into_iter().partition(|c| accept(c).is_ok());
                for c in &refused {
                    let why = accept(c).err().unwrap_or_default();
                    done.failed
                        .push(format!("{}: {why}: refused", s.path.display()));
                }
                let (one, kept) = undo_keeping(&changes);
                if kept.is_empty() {
                    let _ = std::fs::remove_file(&s.path);
                } else {
                    keep_only(&s.path, &kept);
                }
                done.merge(one);
            }
            Err(e) => done
                .failed
                .push(format!("{}: cannot read: {e}", s.path.display())),
        }
    }
    (done, journals)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An affinity file in `dir` reading `now`, and the change of it from `before` to `after`.
    fn affinity(dir: &Path, now: &str, before: &str, after: &str) -> (PathBuf, Change) {
        let file = dir.join("affinity");
        std::fs::write(&file, now).unwrap();
        let change = Change::IrqAffinity {
            irq: 9,
            file: file.clone(),
            before: before.into(),
            after: after.into(),
        };
        (file, change)
    }

    #[test]
    fn a_half_written_line_is_ignored_and_the_rest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1-2.journal");
        let irq = Change::IrqAffinity {
            irq: 24,
            file: dir.path().join("irq24"),
            before: "0-1".into(),
            after: "1".into(),
        };
        let whole = serde_json::to_string(&irq).unwrap();
        std::fs::write(
            &path,
            format!("{whole}\nnot json\n{}", &whole[..whole.len() / 2]),
        )
        .unwrap();
        assert_eq!(read(&path).unwrap(), vec![irq]);
    }

    #[test]
    fn a_change_that_was_not_made_is_not_undone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("affinity");
        std::fs::write(&file, "1").unwrap();
        let mut j = Journal::create(&dir.path().join("j"), "1-1").unwrap();
        let refused = j.make(
            Change::IrqAffinity {
                irq: 3,
                file: file.clone(),
                before: "0".into(),
                after: "1".into(),
            },
            || Err::<(), _>(std::io::Error::from_raw_os_error(libc::EIO)),
        );
        assert!(matches!(refused, Err(Failed::Change(_))));
        let path = dir.path().join("j/1-1.journal");
        assert_eq!(read(&path).unwrap(), vec![]);
        assert!(j.undo().failed.is_empty());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "1", "left alone");
    }

    #[test]
    fn an_affinity_changed_since_by_someone_else_is_left_as_they_set_it() {
        let dir = tempfile::tempdir().unwrap();
        let (file, change) = affinity(dir.path(), "3", "0-3", "0-1");
        let done = undo(&[change]);
        assert_eq!((done.restored, done.failed.len()), (1, 0));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "3");
    }

    #[test]
    fn undo_runs_newest_first_and_twice_is_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("smp_affinity_list");
        std::fs::write(&file, "1").unwrap();
        // Two changes to one file: the older value must win.
        let changes = vec![
            Change::IrqAffinity {
                irq: 7,
                file: file.clone(),
                before: "0-3".into(),
                after: "2".into(),
            },
            Change::IrqAffinity {
                irq: 7,
                file: file.clone(),
                before: "2".into(),
                after: "1".into(),
            },
        ];
        for _ in 0..2 {
            let done = undo(&changes);
            assert_eq!(done.restored, 2);
            assert!(done.failed.is_empty(), "{:?}", done.failed);
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "0-3");
        }
    }

    #[test]
    fn a_journal_is_removed_once_undone_and_a_dead_launchers_is_restored() {
        let base = tempfile::tempdir().unwrap();
        let dir = dir_in(base.path());
        let (file, change) = affinity(base.path(), "5", "0-1", "5");
        let mut j = Journal::create(&dir, "1-1").unwrap();
        j.record(change.clone()).unwrap();
        assert!(dir.join("1-1.journal").exists());
        assert!(j.undo().failed.is_empty());
        assert!(!dir.join("1-1.journal").exists());

        // pid 1 is alive but was not started at tick 1: its journal is a dead launcher's.
        std::fs::write(&file, "5").unwrap();
        let mut j = Journal::create(&dir, "1-1").unwrap();
        j.record(change).unwrap();
        std::mem::forget(j);
        assert_eq!(stale(&dir).len(), 1);
        let (done, journals) = restore_dead(&dir, &|_| Ok(()));
        assert_eq!((done.restored, journals), (1, 1));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "0-1");
        assert!(stale(&dir).is_empty());
        assert_eq!(
            restore_dead(&dir, &|_| Ok(())).1,
            0,
            "idempotent: nothing left to do"
        );
    }

    #[test]
    fn a_change_undone_once_is_never_replayed() {
        let base = tempfile::tempdir().unwrap();
        let dir = dir_in(base.path());
        let (file, irq) = affinity(base.path(), "5", "0-1", "5");
        // A group that cannot be removed (a plain directory with a file in it).
        let stuck = base.path().join("goset-stuck");
        std::fs::create_dir(&stuck).unwrap();
        std::fs::write(stuck.join("x"), "").unwrap();
        let group = Change::CgroupCreated {
            path: stuck.clone(),
            parent: base.path().to_path_buf(),
        };
        let mut j = Journal::create(&dir, "1-1").unwrap();
        j.record(irq).unwrap();
        j.record(group.clone()).unwrap();
        std::mem::forget(j);
        let (done, _) = restore_dead(&dir, &|_| Ok(()));
        assert_eq!(
            (done.restored, done.failed.len()),
            (1, 1),
            "{:?}",
            done.failed
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "0-1");
        // A live run writes the IRQ as this one did; the next replay leaves it alone.
        std::fs::write(&file, "5").unwrap();
        let (done, _) = restore_dead(&dir, &|_| Ok(()));
        assert_eq!(done.restored, 0);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "5");
        assert_eq!(read(&dir.join("1-1.journal")).unwrap(), vec![group]);
    }

    #[test]
    fn a_journal_owned_by_another_user_is_refused() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: chown to another user needs root (CI runs as root)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (file, change) = affinity(dir.path(), "5", "0-1", "5");
        let journal = dir.path().join("1-1.journal");
        std::fs::write(&journal, serde_json::to_string(&change).unwrap() + "\n").unwrap();
        std::os::unix::fs::chown(&journal, Some(65534), Some(65534)).unwrap();
        let (done, journals) = restore_dead(dir.path(), &|_| Ok(()));
        assert_eq!((done.restored, journals), (0, 0));
        assert!(done.failed[0].ends_with("owned by uid 65534, not by this user: refused"));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "5",
            "nothing undone"
        );
        assert!(journal.exists(), "and nothing removed");
    }

    #[test]
    fn a_live_launchers_journal_is_not_stale() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let start =
            crate::procfs::stat::start_ticks(&crate::fsroot::FsRoot::default(), me).unwrap();
        std::fs::write(dir.path().join(format!("{me}-{start}.journal")), "").unwrap();
        assert!(stale(dir.path()).is_empty());
    }
}
