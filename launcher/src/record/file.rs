//! The record on disk: where it lives, whose it may be, reading it (bounded, checked) and
//! replacing it (merged under its own lock, written whole and renamed into place).
//!
//! Where: beside the bookings ([`crate::booking`]). Root keeps the node's record in the shared
//! registry, `/run/goset/bookings/noise.record`; a user keeps their own in their own registry
//! (`<run base>/bookings/noise.record`) and also reads root's, taking whichever was updated
//! last. `GOSET_NOISE_DIR` names another directory instead of both (tests; a private record).
//!
//! Trust: a record is read only from a directory owned by root or this user and writable by
//! no one else (or only with the sticky bit), and only when the file is a regular file (opened
//! with `O_NOFOLLOW`, one link) owned by the directory's owner, writable by no one else, at most
//! [`MAX_BYTES`], of this machine and its CPUs, with no time in the future and every number in
//! range ([`Record::check`]). Anything else is ignored, with one line saying why. A process
//! writes only into a directory it owns: root the shared one, a user their own; nobody can
//! write what another user's runs read.

use super::decay::{Record, MAX_CPUS};
use crate::booking;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The record's file name in its directory.
pub const FILE: &str = "noise.record";
/// The lock file that serialises its updates (not the registry's: a run's selection need not
/// wait for another run's record update).
pub const LOCK: &str = "noise.lock";
/// Largest record read: 8192 CPUs of three horizons fit in well under this.
pub const MAX_BYTES: u64 = 8 << 20;
/// Names the record's directory instead of the registry's.
pub const DIR_VAR: &str = "GOSET_NOISE_DIR";
/// How long an update waits for another's lock before giving up (an update takes milliseconds).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// What a record must match to be believed: this machine, its CPUs, the time now.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    /// `/etc/machine-id`, else the host name.
    pub machine: String,
    /// Possible CPUs (the highest possible CPU plus one), at most [`MAX_CPUS`].
    pub cpus: usize,
    /// Unix seconds.
    pub now: f64,
}

impl Context {
    /// This machine now.
    pub fn here() -> Context {
        let machine = std::fs::read_to_string("/etc/machine-id")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s.len() <= 64)
            .unwrap_or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_default()
            });
        let possible = std::fs::read("/sys/devices/system/cpu/possible").unwrap_or_default();
        let mut highest = 0;
        let _ =
            goset_plan::cpulist::parse(possible.trim_ascii(), &mut |c| highest = highest.max(c));
        Context {
            machine,
            cpus: (highest + 1).min(MAX_CPUS),
            now: super::feed::unix_now(),
        }
    }
}

/// The value of [`DIR_VAR`] that turns the record off: nothing read, nothing written (the
/// end-to-end tests use it, so that their runs neither learn from each other nor teach the
/// node's record their deliberate noise).
pub const OFF: &str = "none";

/// [`DIR_VAR`], where set and not empty.
fn dir_var() -> Option<std::ffi::OsString> {
    std::env::var_os(DIR_VAR).filter(|d| !d.is_empty())
}

/// The directory this process writes its record in; `None` where [`DIR_VAR`] is [`OFF`].
pub fn own_dir() -> Option<PathBuf> {
    match dir_var() {
        Some(d) if d == OFF => None,
        Some(d) => Some(PathBuf::from(d)),
        None if booking::euid() == 0 => Some(PathBuf::from(booking::SHARED)),
        None => Some(crate::rundir::base_dir().join("bookings")),
    }
}

/// The directories this process reads a record from: its own, and for a user (unless
/// [`DIR_VAR`] is set) root's shared one.
pub fn read_dirs() -> Vec<PathBuf> {
    let shared = PathBuf::from(booking::SHARED);
    match own_dir() {
        None => Vec::new(),
        Some(own) if dir_var().is_some() || own == shared => vec![own],
        Some(own) => vec![own, shared],
    }
}

/// A record found, and the lines saying which were ignored and why.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The trusted record updated last, and its file.
    pub record: Option<(PathBuf, Record)>,
    /// One line per record ignored.
    pub warnings: Vec<String>,
}

/// Reads the record of each of [`read_dirs`]; keeps the one updated last.
pub fn load(ctx: &Context) -> Loaded {
    load_from(&read_dirs(), ctx)
}

/// [`load`] over `dirs`.
pub fn load_from(dirs: &[PathBuf], ctx: &Context) -> Loaded {
    let mut out = Loaded::default();
    for dir in dirs {
        match read_in(dir, ctx) {
            Ok(Some(r)) => {
                if out
                    .record
                    .as_ref()
                    .is_none_or(|(_, o)| r.updated > o.updated)
                {
                    out.record = Some((dir.join(FILE), r));
                }
            }
            Ok(None) => {}
            Err(why) => out.warnings.push(format!(
                "noise record {} ignored: {why}",
                dir.join(FILE).display()
            )),
        }
    }
    out
}

/// The directory `dir`, opened without following a link, and its metadata, checked as the
/// registry's is ([`booking::check_dir`]). `None` where it does not exist.
fn open_dir(dir: &Path) -> Result<Option<(OwnedFd, std::fs::Metadata)>, String> {
    match booking::open_dir(dir) {
        Ok(opened) => Ok(Some(opened)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e)
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            Err("its directory is a symbolic link or not a directory".into())
        }
        // The open's own failure; the check's say what is wrong themselves.
        Err(e) if e.raw_os_error().is_some() => Err(format!("its directory: {e}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The record in `dir`: `Ok(None)` where there is none, `Err` (why) where one is there but is
/// not to be believed (see the module doc).
pub fn read_in(dir: &Path, ctx: &Context) -> Result<Option<Record>, String> {
    let Some((dir_fd, dir_meta)) = open_dir(dir)? else {
        return Ok(None);
    };
    read_at(&dir_fd, &dir_meta, ctx)
}

fn read_at(
    dir_fd: &OwnedFd,
    dir_meta: &std::fs::Metadata,
    ctx: &Context,
) -> Result<Option<Record>, String> {
    let name = std::ffi::CString::new(FILE).expect("no NUL");
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated name relative to the open directory.
    let fd = unsafe { libc::openat(dir_fd.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            Some(libc::ELOOP) => Err("a symbolic link".into()),
            _ => Err(e.to_string()),
        };
    }
    // SAFETY: a fresh descriptor we own.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    // A second name is another file planted under this one (the record is only ever renamed
    // into place, never linked).
    if meta.nlink() != 1 {
        return Err(format!("a file of {} names (a hard link)", meta.nlink()));
    }
    if meta.uid() != dir_meta.uid() {
        return Err(format!(
            "owned by uid {}, not by its directory's owner (uid {})",
            meta.uid(),
            dir_meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "writable by others (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    if meta.len() > MAX_BYTES {
        return Err(format!("{} bytes, more than {MAX_BYTES}", meta.len()));
    }
    let mut bytes = Vec::new();
    (&file)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!("more than {MAX_BYTES} bytes"));
    }
    let record: Record =
        serde_json::from_slice(&bytes).map_err(|e| format!("not a record ({e})"))?;
    record.check(&ctx.machine, ctx.now, ctx.cpus)?;
    Ok(Some(record))
}

/// Merges `new` into the record in [`own_dir`] (made if missing) under its lock, and writes the
/// result back; returns the file written. A record there that is not to be believed is
/// replaced, and said so in the returned warnings.
pub fn save(ctx: &Context, new: &Record) -> Result<(PathBuf, Vec<String>), String> {
    match own_dir() {
        Some(dir) => save_in(&dir, ctx, new),
        None => Ok((PathBuf::new(), Vec::new())),
    }
}

/// [`save`] into `dir`.
pub fn save_in(dir: &Path, ctx: &Context, new: &Record) -> Result<(PathBuf, Vec<String>), String> {
    use std::os::unix::fs::DirBuilderExt;
    let path = dir.join(FILE);
    let fail = |why: String| format!("cannot update the noise record {}: {why}", path.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| fail(e.to_string()))?;
    let (dir_fd, dir_meta) = open_dir(dir)
        .map_err(&fail)?
        .ok_or_else(|| fail("its directory vanished".into()))?;
    let me = booking::euid();
    if dir_meta.uid() != me {
        return Err(fail(format!(
            "its directory is uid {}'s, not this user's",
            dir_meta.uid()
        )));
    }
    let lock = booking::open_lock(&dir_fd, LOCK, me, 0o600).map_err(|e| fail(e.to_string()))?;
    let deadline = Instant::now() + LOCK_WAIT;
    // SAFETY: flock on a descriptor we own.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if Instant::now() >= deadline {
            return Err(fail("its lock is held".into()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut warnings = Vec::new();
    let mut merged = match read_at(&dir_fd, &dir_meta, ctx) {
        Ok(Some(r)) => r,
        Ok(None) => Record::new(&ctx.machine, ctx.now),
        Err(why) => {
            warnings.push(format!("noise record {} replaced: {why}", path.display()));
            Record::new(&ctx.machine, ctx.now)
        }
    };
    merged.merge(new);
    merged.machine = ctx.machine.clone();
    merged.cpus.retain(|&c, _| c < ctx.cpus);
    let bytes = serde_json::to_vec(&merged).map_err(|e| fail(e.to_string()))?;
    // Root writes by the rule every root-written file follows: a fresh name made in the
    // directory, renamed over the record, never through a link.
    goset_plan::rootfile::os::open_dir(dir, None)
        .and_then(|d| d.replace(FILE.as_bytes(), &bytes, 0o644))
        .map_err(|e| fail(e.to_string()))?;
    drop(lock);
    Ok((path, warnings))
}
