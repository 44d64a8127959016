//! Undoing journals: this run's when it ends, a dead launcher's on `goset restore` or at the
//! next run's start.
//!
//! Owns: undoing each kind of [`Change`] (it calls the modules that made them), in reverse
//! order, and rewriting a dead launcher's journal down to what could not be undone. Every undo
//! sets a state rather than reverting a step, so undoing twice is the same as once. Must not:
//! change the journal's format (that is [`super::journal`]'s) or decide what a run changes.

use super::journal::{keep_only, path_of, read, stale, Change, Journal};
use super::{cgroup, irqbalance, steering};
use std::path::Path;

/// What undoing a journal did.
#[derive(Debug, Default, Clone, PartialEq)]
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

impl Journal {
    /// Creates this launcher's journal `<dir>/<name>.journal` (0600, the directory 0700),
    /// empty; a file left by an earlier boot under the same name is undone first.
    pub fn create(dir: &Path, name: &str) -> std::io::Result<Journal> {
        let path = path_of(dir, name);
        if path.exists() {
            undo(&read(&path)?);
            std::fs::remove_file(&path)?;
        }
        Journal::create_new(dir, name)
    }

    /// Undoes every change, newest first, and removes the journal when all were undone (one
    /// that failed keeps it, for `goset restore` to try again).
    pub fn undo(self) -> Undone {
        let done = undo(self.changes());
        if done.failed.is_empty() {
            let _ = std::fs::remove_file(self.path());
        }
        done
    }
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
        Change::UnitStopped { unit } => irqbalance::start_unit(unit),
        Change::ProcessStopped { pid, start } => {
            irqbalance::resume(*pid, *start);
            Ok(Vec::new())
        }
        Change::SteerJoined { dir, pid, start } => {
            steering::leave(dir, *pid, *start).map(|()| Vec::new())
        }
        Change::NotMade => Ok(Vec::new()),
    }
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
    use super::super::journal::{dir_in, Failed};
    use super::*;
    use std::path::PathBuf;

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
}
