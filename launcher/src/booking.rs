//! Node-local bookings: concurrent goset-runs never take the same task CPUs.
//!
//! A registry directory holds one file per live run, `<pid>-<start>.booking` (JSON: the run's
//! pid and start time, user, command, Slurm step, task CPUs and housekeeper CPU). Selecting and
//! booking happen under an exclusive `flock` on the registry's `lock` file, so two launchers
//! started together see each other. A booking dies with its launcher: the file is removed when
//! the run ends, and one whose pid is gone (or names a later process: the start time differs)
//! is swept at the next selection. No daemon.
//!
//! Where: root uses `/run/goset/bookings`, which every user shares when it is group-writable
//! by a group they are in (an administrator's choice: `install -d -m 3775 -g goset
//! /run/goset/bookings`); without that a user books in a registry of their own, beside their
//! run directories, and sees only their own runs.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};

/// One run's booking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Booking {
    /// The launcher's pid.
    pub pid: u32,
    /// Its start time (`stat` field 22), telling it from a later process with the same pid.
    pub start: u64,
    /// Its user.
    pub uid: u32,
    /// The task's command line, for messages.
    pub command: String,
    /// The Slurm job and step (`SLURM_JOB_ID.SLURM_STEP_ID`, task `SLURM_PROCID`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<String>,
    /// Task CPUs.
    pub cpus: Vec<usize>,
    /// Housekeeper CPU (housekeepers may share one).
    pub housekeeper: usize,
}

impl Booking {
    /// `pid 123 (./bench)` for messages.
    pub fn who(&self) -> String {
        match &self.slurm {
            Some(step) => format!("pid {} ({}, Slurm {step})", self.pid, self.command),
            None => format!("pid {} ({})", self.pid, self.command),
        }
    }
}

/// The shared registry, when this user may write to it.
const SHARED: &str = "/run/goset/bookings";

/// The registry: its directory and the open lock file.
#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    lock: File,
}

/// Holds the registry's lock; dropping it unlocks.
pub struct Locked<'a>(&'a Registry);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: unlocks the descriptor the registry owns.
        unsafe { libc::flock(self.0.lock.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a NUL-terminated path.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

impl Registry {
    /// The registry this user books in (see the module doc), created if needed.
    pub fn open() -> std::io::Result<Registry> {
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let shared = Path::new(SHARED);
        let dir = if root || (shared.is_dir() && writable(shared)) {
            shared.to_path_buf()
        } else {
            crate::rundir::base_dir().join("bookings")
        };
        Registry::at(&dir)
    }

    /// A registry in `dir` (created 0755 with its parents, as `/run/goset` is).
    pub fn at(dir: &Path) -> std::io::Result<Registry> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join("lock"))?;
        Ok(Registry {
            dir: dir.to_path_buf(),
            lock,
        })
    }

    /// The registry's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the lock (waits for another launcher's select-and-book).
    pub fn lock(&self) -> std::io::Result<Locked<'_>> {
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: flock on the descriptor the registry owns.
            if unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Locked(self));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// The live bookings of other launchers; stale ones (their launcher gone) are removed
    /// when the lock is held (`sweep`). A file that is not a booking is skipped, and so is the
    /// booking of a launcher this process runs under (a goset-run in a goset-run's task uses
    /// the CPUs the outer one gave it).
    pub fn live(&self, sweep: bool) -> Vec<Booking> {
        let mine = ancestry();
        let mut found: Vec<Booking> = Vec::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".booking")) else {
                continue;
            };
            let Some((pid, start)) = crate::rundir::parse_name(stem) else {
                continue;
            };
            if crate::rundir::start_ticks(pid) != Some(start) {
                if sweep {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            let text = crate::bounded::read_regular(&entry.path(), 1 << 20).unwrap_or_default();
            let Ok(b) = serde_json::from_slice::<Booking>(&text) else {
                continue;
            };
            if b.pid == pid && b.start == start && !mine.contains(&pid) {
                found.push(b);
            }
        }
        found.sort_by_key(|b| (b.pid, b.start));
        found
    }

    /// Writes `booking` (complete, then renamed into place: a reader never sees half of it);
    /// the returned handle removes it when dropped.
    pub fn book(&self, booking: &Booking) -> std::io::Result<Booked> {
        let name = format!("{}-{}.booking", booking.pid, booking.start);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(
            &tmp,
            serde_json::to_vec(booking).expect("a booking serialises"),
        )?;
        std::fs::rename(&tmp, &path)?;
        Ok(Booked(path))
    }
}

/// This process and its ancestors, by pid.
fn ancestry() -> Vec<u32> {
    let mut pids = vec![std::process::id()];
    while let Some(&pid) = pids.last().filter(|&&p| p > 1 && pids.len() < 4096) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        match crate::housekeeper::threads::parse_stat(&stat).map(|s| s.ppid) {
            Some(ppid) if ppid > 0 => pids.push(ppid as u32),
            _ => break,
        }
    }
    pids
}

/// A booking on disk, removed when dropped.
#[derive(Debug)]
pub struct Booked(PathBuf);

impl Drop for Booked {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The Slurm step this process belongs to, from the variables srun sets.
pub fn slurm_step(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let job = env("SLURM_JOB_ID")?;
    let step = env("SLURM_STEP_ID").map_or(String::new(), |s| format!(".{s}"));
    let task = env("SLURM_PROCID").map_or(String::new(), |t| format!(" task {t}"));
    Some(format!("{job}{step}{task}"))
}

/// The task CPUs booked by `others`, each once.
pub fn booked_cpus(others: &[Booking]) -> Vec<usize> {
    let mut cpus: Vec<usize> = others.iter().flat_map(|b| b.cpus.iter().copied()).collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    fn booking(pid: u32, start: u64, cpus: &[usize]) -> Booking {
        Booking {
            pid,
            start,
            uid: 0,
            command: "bench".into(),
            slurm: None,
            cpus: cpus.to_vec(),
            housekeeper: 0,
        }
    }

    #[test]
    fn a_live_launchers_booking_is_seen_and_a_dead_ones_swept() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::at(dir.path()).unwrap();
        // Another live process (a child: not one this process runs under) with its own start
        // time is live; with another start time it is a dead launcher whose pid was reused.
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = other.id();
        let start = crate::rundir::start_ticks(pid).unwrap();
        let live = reg.book(&booking(pid, start, &[2, 3])).unwrap();
        std::mem::forget(reg.book(&booking(pid, start + 1, &[4])).unwrap());
        std::fs::write(dir.path().join("junk.booking"), "x").unwrap();
        let stale_file = dir.path().join(format!("{pid}-{}.booking", start + 1));
        let before_sweep = reg.live(false).len();
        let exists_before = stale_file.exists();
        let held = reg.lock().unwrap();
        let seen = reg.live(true);
        drop(held);
        drop(live);
        let after = reg.live(true);
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!((before_sweep, exists_before), (1, true));
        assert_eq!(seen, vec![booking(pid, start, &[2, 3])]);
        assert!(!stale_file.exists(), "swept");
        assert_eq!(booked_cpus(&seen), vec![2, 3]);
        assert!(after.is_empty(), "removed when the run ends");
    }

    #[test]
    fn the_booking_of_a_launcher_this_process_runs_under_is_not_another_runs() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::at(dir.path()).unwrap();
        // SAFETY: getppid cannot fail.
        let parent = unsafe { libc::getppid() } as u32;
        let start = crate::rundir::start_ticks(parent).unwrap();
        let _outer = reg.book(&booking(parent, start, &[1])).unwrap();
        assert!(reg.live(false).is_empty());
    }

    #[test]
    fn slurm_steps_are_named_from_sruns_variables() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
        };
        let step = slurm_step(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "1"),
        ]));
        assert_eq!(step.as_deref(), Some("42.0 task 1"));
        assert_eq!(slurm_step(env(&[])), None);
    }
}
