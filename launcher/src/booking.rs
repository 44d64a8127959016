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

use crate::output::escape;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    /// Housekeeper CPU (housekeepers may share one; `housekeeper` in the booking file).
    #[serde(rename = "housekeeper")]
    pub housekeeper_cpu: usize,
}

impl Booking {
    /// `pid 123 (./bench)` for messages, the command (another user's, perhaps) escaped.
    pub fn who(&self) -> String {
        who(self.pid, &self.command, self.slurm.as_deref())
    }
}

/// How a booking names its run: `pid 12 (./app)`, `pid 12 (./app, Slurm 7.0 task 1)`, the
/// other user's strings escaped.
pub fn who(pid: u32, command: &str, slurm: Option<&str>) -> String {
    let command = escape(command);
    match slurm {
        Some(step) => format!("pid {pid} ({command}, Slurm {})", escape(step)),
        None => format!("pid {pid} ({command})"),
    }
}

/// `dir` opened without following a link, and its metadata, checked as a registry's is
/// ([`check_dir`]): the bookings' directory, and the noise record's beside them.
pub(crate) fn open_dir(dir: &Path) -> std::io::Result<(OwnedFd, std::fs::Metadata)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    let meta = file.metadata()?;
    check_dir(dir, &meta)?;
    Ok((OwnedFd::from(file), meta))
}

/// The shared registry, when this user may write to it.
pub(crate) const SHARED: &str = "/run/goset/bookings";

/// How long a launcher waits for the registry's lock without `--wait`: selecting and booking
/// take milliseconds, so a lock held this long is held by something else.
pub const LOCK_BOUND: Duration = Duration::from_secs(10);

/// The registry: its directory (open, so that every file is made relative to it, never through
/// a path a user could redirect) and the open lock file.
#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    dir_fd: OwnedFd,
    lock: File,
}

/// Holds the registry's lock; dropping it unlocks.
pub struct Locked<'a>(&'a Registry);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocks the descriptor the registry owns.
        unsafe { libc::flock(self.0.lock.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Why the registry's lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Held past the deadline; the holder, as far as `/proc/locks` tells.
    Held(String),
    /// A handled signal arrived while waiting.
    Interrupted(i32),
    /// flock failed otherwise.
    Io(std::io::Error),
}

fn writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a NUL-terminated path.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

fn c_name(name: &str) -> std::io::Result<CString> {
    CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// Whether a registry directory owned by `uid` with `mode` is safe to book in: owned by root
/// (the shared one) or by this user, and writable by others only with the sticky bit (so that
/// nobody removes or replaces another user's files).
pub(crate) fn check_dir(dir: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    let bad = |why: String| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{}: {why}", dir.display()),
        ))
    };
    if !meta.is_dir() {
        return bad("not a directory".into());
    }
    if meta.uid() != 0 && meta.uid() != euid() {
        return bad(format!(
            "owned by uid {}, not by root or this user",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 && meta.mode() & libc::S_ISVTX == 0 {
        return bad(format!(
            "writable by others without the sticky bit (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

impl Registry {
    /// The registry this user books in (see the module doc), created if needed.
    pub fn open() -> std::io::Result<Registry> {
        let shared = Path::new(SHARED);
        if euid() == 0 || (shared.is_dir() && writable(shared)) {
            match Registry::at(shared) {
                Ok(r) => return Ok(r),
                Err(e) if euid() == 0 => return Err(e),
                // A shared registry that is not safe: this user's own, as without one.
                Err(_) => {}
            }
        }
        Registry::at(&crate::rundir::base_dir().join("bookings"))
    }

    /// A registry in `dir` (created 0755 with its parents, as `/run/goset` is), checked: owned
    /// by root or this user, writable by others only with the sticky bit. Its lock file is
    /// the directory owner's, open to the owner (and the directory's group, where the group may
    /// write the directory) alone, so that nobody else can hold it: an existing lock file of
    /// another owner is replaced when this user owns the directory.
    pub fn at(dir: &Path) -> std::io::Result<Registry> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
        let (dir_fd, meta) = open_dir(dir)?;
        let group_shares = meta.mode() & 0o020 != 0;
        let mode = if group_shares { 0o660 } else { 0o600 };
        let lock = open_lock(&dir_fd, "lock", meta.uid(), mode)?;
        Ok(Registry {
            dir: dir.to_path_buf(),
            dir_fd,
            lock,
        })
    }

    /// The registry's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the lock: waits for another launcher's select-and-book until `deadline` (else
    /// [`LOCK_BOUND`]), returning early when a handled signal arrives.
    pub fn lock(&self, deadline: Option<Instant>) -> Result<Locked<'_>, LockError> {
        let deadline = deadline.unwrap_or_else(|| Instant::now() + LOCK_BOUND);
        loop {
            // SAFETY: flock on the descriptor the registry owns.
            if unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Locked(self));
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
                _ => return Err(LockError::Io(e)),
            }
            if let Some(sig) = crate::signals::pending() {
                return Err(LockError::Interrupted(sig));
            }
            if Instant::now() >= deadline {
                return Err(LockError::Held(self.holder()));
            }
            crate::signals::sleep(Duration::from_millis(20));
        }
    }

    /// Who holds the lock, from `/proc/locks`: `pid N (comm, uid U)`, or `another process`.
    fn holder(&self) -> String {
        let Ok(meta) = self.lock.metadata() else {
            return "another process".into();
        };
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        let pid = holder_of(&locks, meta.ino());
        let Some(pid) = pid else {
            return "another process".into();
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let uid = std::fs::metadata(format!("/proc/{pid}")).map(|m| m.uid());
        match uid {
            Ok(uid) => format!("pid {pid} ({}, uid {uid})", escape(comm.trim())),
            Err(_) => format!("pid {pid}"),
        }
    }

    /// The live bookings of other launchers; stale ones, and the half-written files of dead
    /// launchers, are removed when the lock is held (`sweep`). A booking counts only when its file is a regular file owned by the uid it
    /// names, and its pid is a live goset launcher with the start time it names: a forged file
    /// (another user's, or naming a process that is no launcher) is skipped, and swept. A file
    /// that is not a booking is skipped, and so is the booking of a launcher this process runs
    /// under (a goset-run in a goset-run's task uses the CPUs the outer one gave it).
    pub fn live(&self, sweep: bool) -> Vec<Booking> {
        // Walked once, and only for another launcher's booking: this process's own is told by
        // its pid.
        let mut ancestors: Option<Vec<u32>> = None;
        let own = std::process::id();
        let mut mine =
            |pid: u32| pid == own || ancestors.get_or_insert_with(ancestry).contains(&pid);
        let mut found: Vec<Booking> = Vec::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some((stem, writing)) = name.to_str().and_then(booking_stem) else {
                continue;
            };
            let Some((pid, start)) = crate::rundir::parse_name(stem) else {
                continue;
            };
            let remove = || {
                if sweep {
                    let _ = std::fs::remove_file(entry.path());
                }
            };
            if !is_launcher(pid, start) {
                remove();
                continue;
            }
            if writing {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            let text = crate::bounded::read_regular(&entry.path(), 1 << 20).unwrap_or_default();
            let Ok(b) = serde_json::from_slice::<Booking>(&text) else {
                continue;
            };
            if !meta.is_file() || meta.uid() != b.uid {
                remove();
                continue;
            }
            if b.pid == pid && b.start == start && !mine(pid) {
                found.push(b);
            }
        }
        found.sort_by_key(|b| (b.pid, b.start));
        found
    }

    /// Writes `booking` complete under a fresh name made in the directory itself
    /// (`O_CREAT|O_EXCL|O_NOFOLLOW`: a link planted there is never written through), then
    /// renames it into place (a reader never sees half of it); the returned handle removes it
    /// when dropped.
    pub fn book(&self, booking: &Booking) -> std::io::Result<Booked> {
        let name = format!("{}-{}.booking", booking.pid, booking.start);
        let bytes = serde_json::to_vec(booking).expect("a booking serialises");
        let mut last = None;
        for attempt in 0..16u32 {
            let tmp = format!(".{name}.{:x}.tmp", random_u64() ^ u64::from(attempt));
            let c_tmp = c_name(&tmp)?;
            let flags =
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: a NUL-terminated name relative to the directory we hold open.
            let fd = unsafe { libc::openat(self.dir_fd.as_raw_fd(), c_tmp.as_ptr(), flags, 0o644) };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EEXIST) {
                    last = Some(e);
                    continue;
                }
                return Err(e);
            }
            // SAFETY: fd is a fresh descriptor we own.
            let mut file = unsafe { File::from_raw_fd(fd) };
            let c_final = c_name(&name)?;
            let written = file.write_all(&bytes).and_then(|_| {
                // SAFETY: both names are NUL-terminated and relative to our directory.
                let rc = unsafe {
                    libc::renameat(
                        self.dir_fd.as_raw_fd(),
                        c_tmp.as_ptr(),
                        self.dir_fd.as_raw_fd(),
                        c_final.as_ptr(),
                    )
                };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
            if let Err(e) = written {
                // SAFETY: a NUL-terminated name relative to our directory.
                unsafe { libc::unlinkat(self.dir_fd.as_raw_fd(), c_tmp.as_ptr(), 0) };
                return Err(e);
            }
            return Ok(Booked(self.dir.join(&name)));
        }
        Err(last.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EEXIST)))
    }
}

/// The `<pid>-<start>` of a booking file's name, and whether the file is one being written
/// (`.<pid>-<start>.booking.<hex>.tmp`, which a launcher killed half-way leaves).
fn booking_stem(name: &str) -> Option<(&str, bool)> {
    if let Some(stem) = name.strip_suffix(".booking") {
        return Some((stem, false));
    }
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    Some((rest.split_once(".booking.")?.0, true))
}

/// Opens (creating it if needed) the lock file `name` in `dir_fd` (the registry's `lock`, the
/// noise record's), owned by `owner` with `mode`: a lock file of another owner is replaced
/// when this user is `owner` (root in the shared registry), refused otherwise; a wider mode is
/// narrowed.
pub(crate) fn open_lock(
    dir_fd: &OwnedFd,
    name: &str,
    owner: u32,
    mode: u32,
) -> std::io::Result<File> {
    let name = c_name(name)?;
    let open = || {
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated name relative to the open directory.
        let fd = unsafe { libc::openat(dir_fd.as_raw_fd(), name.as_ptr(), flags, mode) };
        if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: fd is a fresh descriptor we own.
            Ok(unsafe { File::from_raw_fd(fd) })
        }
    };
    let replace = || {
        // SAFETY: a NUL-terminated name relative to the open directory.
        unsafe { libc::unlinkat(dir_fd.as_raw_fd(), name.as_ptr(), 0) };
        open()
    };
    let mut lock = match open() {
        // A link or some other file planted there: ours to replace if the directory is ours.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) && euid() == owner => replace()?,
        other => other?,
    };
    let meta = lock.metadata()?;
    if !meta.is_file() || meta.uid() != owner {
        if euid() != owner {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "the lock file is owned by uid {}, not by uid {owner}",
                    meta.uid()
                ),
            ));
        }
        lock = replace()?;
    }
    if lock.metadata()?.mode() & 0o777 != mode && euid() == owner {
        lock.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(lock)
}

/// The pid holding the flock on inode `ino`, from `/proc/locks` text
/// (`1: FLOCK  ADVISORY  WRITE 1234 00:19:5678 0 EOF`).
fn holder_of(locks: &str, ino: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, dev_ino) = (words.get(1)?, words.get(4)?, words.get(5)?);
        let this = dev_ino.rsplit(':').next()?.parse::<u64>().ok()? == ino;
        (*kind == "FLOCK" && this)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// Whether `pid` is a live goset launcher (`goset-run`, or `goset` running a task) that
/// started at `start`.
fn is_launcher(pid: u32, start: u64) -> bool {
    crate::procfs::pid_stat::read(&crate::fsroot::FsRoot::default(), pid).is_some_and(|s| {
        s.start_ticks == start
            && goset_plan::plan::is_goset_program(s.comm.as_bytes())
            && !matches!(s.state, 'Z' | 'X')
    })
}

/// 64 random bits (`getrandom`), for names nobody can guess ahead.
fn random_u64() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into v.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), v.len(), 0) };
    if n != 8 {
        // No randomness: the time still differs between attempts.
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    }
    u64::from_ne_bytes(v)
}

/// This process and its ancestors, by pid.
fn ancestry() -> Vec<u32> {
    let mut pids = vec![std::process::id()];
    while let Some(&pid) = pids.last().filter(|&&p| p > 1 && pids.len() < 4096) {
        match crate::procfs::pid_stat::read(&crate::fsroot::FsRoot::default(), pid).map(|s| s.ppid)
        {
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

/// Removes the bookings whose launcher is gone from this user's registry (`goset restore`),
/// as the next selection would; returns how many. A registry held longer than the lock's
/// bound is left for the next selection.
pub fn sweep_dead() -> usize {
    let Ok(registry) = Registry::open() else {
        return 0;
    };
    let Ok(_locked) = registry.lock(None) else {
        return 0;
    };
    let files = |r: &Registry| {
        (std::fs::read_dir(r.dir()).into_iter().flatten().flatten())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".booking"))
            .count()
    };
    let before = files(&registry);
    registry.live(true);
    before.saturating_sub(files(&registry))
}

/// The task CPUs booked by `others`, each once.
pub fn booked_cpus(others: &[Booking]) -> Vec<usize> {
    let mut cpus: Vec<usize> = others.iter().flat_map(|b| b.cpus.iter().copied()).collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

#[cfg(test)]
mod tests;
