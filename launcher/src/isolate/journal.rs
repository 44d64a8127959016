//! The journal: every change a run makes to the machine, written down before it is made.
//!
//! One file per launcher, `<base>/journals/<pid>-<start>.journal` (the run directory's naming,
//! see [`crate::rundir`]), one JSON object per line, each line `fsync`'ed before the change it
//! names is made. The launcher undoes its own journal when it ends; a journal whose launcher
//! is dead (SIGKILL, OOM kill) is undone by `goset restore` or by the next `goset-run`.
//!
//! Owns: the file format, appending, reading back (a half-written last line is ignored) and
//! finding the journals of dead launchers. Must not: decide what to change, or undo one
//! (that is [`super::undo`]'s, which knows every kind of change; the format must not import
//! the modules that make the changes).

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

/// Why [`Journal::make`] failed.
#[derive(Debug)]
pub enum Failed {
    /// The journal could not be written: the change was not tried.
    Journal(std::io::Error),
    /// The change itself failed.
    Change(std::io::Error),
}

/// Journal `name`'s file in `dir`.
pub fn path_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.journal"))
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
    /// empty. A file left under that name is an error here: [`Journal::create`] undoes it
    /// first, since undoing is not this module's.
    pub fn create_new(dir: &Path, name: &str) -> std::io::Result<Journal> {
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
        let path = path_of(dir, name);
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
        let path = path_of(dir, name);
        if !path.exists() {
            return Journal::create_new(dir, name);
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

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The changes recorded, oldest first.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Appends `change` and makes it durable; only then may the change be made. Visible to
    /// `isolate` for tests that write a journal a dead launcher left.
    pub(super) fn record(&mut self, change: Change) -> std::io::Result<()> {
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
pub(super) fn keep_only(path: &Path, kept: &[Change]) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_live_launchers_journal_is_not_stale() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let start =
            crate::procfs::pid_stat::start_ticks(&crate::fsroot::FsRoot::default(), me).unwrap();
        std::fs::write(dir.path().join(format!("{me}-{start}.journal")), "").unwrap();
        assert!(stale(dir.path()).is_empty());
    }
}
