//! The placement log (one JSON line per decision) and the one-time warning on stderr.
//!
//! Owns: the log's descriptor and the identity of its file; the identity of stderr at start;
//! the local rank `crate::rank` read, which goes on the process's `init` record.
//! The record's schema and its formatting are the contract's ([`goset_plan::log`]), so that
//! the launcher's reader is tested against this very writer. A record is formatted into a
//! small stack buffer ([`LINE_MAX`]), the executable path (escaped once at start, in static
//! memory) is spliced in, and the whole line goes out with one `writev(2)` on an `O_APPEND`
//! descriptor, so that lines from many threads and processes never interleave.
//!
//! The shim never writes into a descriptor it does not own. The log's descriptor is kept high
//! (see [`sys::dup_high`]), and before each record one `fstat` checks it is still the file
//! opened at start (device and inode): a program that closed it and got the number back for a
//! file of its own keeps its file untouched; the log path is reopened (`O_APPEND`), or, for
//! `GOSET_LOG=stderr` (a copy of fd 2 made at start), logging stops with one warning. The
//! warning itself goes to fd 2 only while fd 2 is the file it was at start. The log is opened
//! `O_NONBLOCK`: a FIFO without a reader fails at once, a full pipe drops records.
//!
//! Must not: allocate, lock, use std I/O, or make a system call on a hook path that does not
//! log; it never writes to stdout.

use crate::buf::{Buf, Exclusive};
use crate::sys::{self, Identity};
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use goset_plan::log::LocalRank;
use goset_plan::ranks::LOCAL_RANK_VARS;
use goset_plan::{raw, vars};

pub use goset_plan::log::{escape, format, Event, Record};

/// Size of a record's stack buffer, the executable path not included. A requested mask whose
/// cpulist does not fit in what is left is logged as `"(too long)"`.
pub const LINE_MAX: usize = 640;
/// Longest escaped executable path; a longer one is logged as `(too long)`.
const EXE_JSON_MAX: usize = 1024;
/// Longest log path (with its NUL).
const PATH_MAX: usize = 600;

/// The descriptor records go to, -1 for none.
static FD: AtomicI32 = AtomicI32::new(-1);
/// The identity of [`FD`]'s file (stored before `FD`, Release; read after it, Acquire).
static DEV: AtomicU64 = AtomicU64::new(0);
static INO: AtomicU64 = AtomicU64::new(0);
/// Whether the log has a path to reopen (false for `stderr`).
static REOPENABLE: AtomicBool = AtomicBool::new(false);
/// Held by the one thread that replaces a descriptor found not to be the log's any more.
static REPLACING: AtomicBool = AtomicBool::new(false);
/// The log path, NUL-terminated, and the escaped executable path: written at initialisation.
static PATH: Exclusive<Buf<PATH_MAX>> = Exclusive::new(Buf::new());
static EXE: Exclusive<Buf<EXE_JSON_MAX>> = Exclusive::new(Buf::new());
/// The log's directory and where the file's name starts in [`PATH`]: root opens the log in
/// the directory it walked to (see [`goset_plan::rootfile`]). Written at
/// initialisation.
static DIR: Exclusive<Buf<PATH_MAX>> = Exclusive::new(Buf::new());
static NAME_AT: AtomicUsize = AtomicUsize::new(0);
/// What fd 2 was at start; the warning is written there only while it still is.
static STDERR_KNOWN: AtomicBool = AtomicBool::new(false);
static STDERR_DEV: AtomicU64 = AtomicU64::new(0);
static STDERR_INO: AtomicU64 = AtomicU64::new(0);

fn install(fd: i32, id: Identity) {
    DEV.store(id.dev, Ordering::Relaxed);
    INO.store(id.ino, Ordering::Relaxed);
    FD.store(fd, Ordering::Release);
}

/// Records what fd 2 is (first thing at initialisation, before any warning).
#[cold]
pub fn note_stderr() {
    if let Some(id) = sys::identity(2) {
        STDERR_DEV.store(id.dev, Ordering::Relaxed);
        STDERR_INO.store(id.ino, Ordering::Relaxed);
        STDERR_KNOWN.store(true, Ordering::Release);
    }
}

fn stderr_is_ours() -> bool {
    STDERR_KNOWN.load(Ordering::Acquire)
        && sys::identity(2)
            == Some(Identity {
                dev: STDERR_DEV.load(Ordering::Relaxed),
                ino: STDERR_INO.load(Ordering::Relaxed),
            })
}

/// Keeps the executable path, escaped, for every record.
///
/// # Safety
/// Only during initialisation, by the initialising thread (see [`Exclusive`]).
#[cold]
pub unsafe fn set_exe(exe: &[u8]) {
    // SAFETY: the caller is the initialising thread; records are written only after.
    let out = unsafe { EXE.get_mut() };
    out.truncate(0);
    if escape(out, exe).is_err() {
        out.truncate(0);
        out.push(b"(too long)");
    }
}

/// Opens the log at `path` (`stderr`: a copy of fd 2) for this process; false, after one
/// warning, when it cannot be opened.
///
/// # Safety
/// Only during initialisation, by the initialising thread (see [`Exclusive`]).
#[cold]
#[inline(never)]
pub unsafe fn open(path: &[u8]) -> bool {
    if path == b"stderr" {
        REOPENABLE.store(false, Ordering::Relaxed);
        let high = if STDERR_KNOWN.load(Ordering::Acquire) {
            sys::dup_high(2)
        } else {
            -1
        };
        match sys::identity(high).filter(|_| high >= 0) {
            Some(id) => install(high, id),
            None => warn_once(format_args!("stderr is closed; not logging")),
        }
        return enabled();
    }
    // SAFETY: the caller is the initialising thread; PATH is read only after.
    let stored = unsafe { PATH.get_mut() };
    stored.truncate(0);
    stored.push(path);
    let (dir, name) = goset_plan::rootfile::walk::split(path);
    // SAFETY: as PATH.
    let dir_stored = unsafe { DIR.get_mut() };
    dir_stored.truncate(0);
    dir_stored.push(dir);
    NAME_AT.store(path.len() - name.len(), Ordering::Relaxed);
    let opened = match stored.c_str() {
        Some(c_path) => open_file(c_path)
            .map(|(fd, id)| (fd, id, true))
            .or_else(|e| inherited_copy(c_path, e).map(|(fd, id)| (fd, id, false))),
        None => Err(libc::ENAMETOOLONG),
    };
    match opened {
        Ok((fd, id, reopenable)) => {
            REOPENABLE.store(reopenable, Ordering::Relaxed);
            install(fd, id);
        }
        Err(e) => warn_once(format_args!(
            "cannot open the placement log {} ({}){}; not logging",
            core::str::from_utf8(path).unwrap_or("(not utf-8)"),
            sys::ErrnoName(e),
            if sys::geteuid() == 0 && (e == libc::EPERM || e == libc::ELOOP) {
                ": as root, in a directory others can write to, the log must be a regular file \
                 of root's (or of the directory's owner) with one link, not a symbolic link, \
                 and the directory sticky"
            } else {
                ""
            }
        )),
    }
    enabled()
}

/// After the log at `c_path` could not be opened (`e`, kept when this fails too): a copy of
/// the inherited descriptor [`vars::LOG_FD`] names, when it is that very file and open for
/// appending. Never reopened: the path is not this process's to open.
fn inherited_copy(c_path: &[u8], e: i32) -> Result<(i32, Identity), i32> {
    if e != libc::EACCES {
        return Err(e);
    }
    let fd = crate::env::get(vars::LOG_FD.as_bytes())
        .and_then(|v| core::str::from_utf8(v).ok()?.parse::<i32>().ok())
        .filter(|&fd| fd > 2)
        .ok_or(e)?;
    // O_PATH needs no permission on the file itself: its identity only.
    let flags = libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    let named = sys::open(c_path, flags, 0).map_err(|_| e)?;
    let same = sys::identity(named).is_some() && sys::identity(named) == sys::identity(fd);
    sys::close(named);
    // SAFETY: F_GETFL reads the descriptor's flags; no memory is passed.
    let fl = unsafe {
        raw::syscall6(
            libc::SYS_fcntl,
            [fd as i64, libc::F_GETFL as i64, 0, 0, 0, 0],
        )
    };
    let appends =
        fl >= 0 && fl as i32 & libc::O_APPEND != 0 && fl as i32 & libc::O_ACCMODE != libc::O_RDONLY;
    if !(same && appends) {
        return Err(e);
    }
    // A copy of the shim's own (dup_high hands back a descriptor already high as it is).
    // SAFETY: F_DUPFD_CLOEXEC reads no memory.
    let copy = unsafe {
        raw::syscall6(
            libc::SYS_fcntl,
            [fd as i64, libc::F_DUPFD_CLOEXEC as i64, 3, 0, 0, 0],
        )
    };
    if copy < 0 {
        return Err(e);
    }
    let copy = copy as i32;
    let high = sys::dup_high(copy);
    if high != copy {
        sys::close(copy);
    }
    sys::identity(high).map(|id| (high, id)).ok_or(e)
}

/// Opens the log file (appending, never blocking) on a high descriptor; as root, by
/// [`goset_plan::rootfile`]'s rule (EPERM when the rule refuses, ELOOP for a link).
fn open_file(c_path: &[u8]) -> Result<(i32, Identity), i32> {
    let flags = libc::O_WRONLY
        | libc::O_CREAT
        | libc::O_APPEND
        | libc::O_CLOEXEC
        | libc::O_NONBLOCK
        | libc::O_NOCTTY;
    let fd = if sys::geteuid() == 0 {
        // SAFETY: DIR was written at initialisation, before any open, and is read-only since.
        let dir = unsafe { DIR.get() }.as_bytes();
        let name = &c_path[NAME_AT.load(Ordering::Relaxed)..c_path.len() - 1];
        open_as_root(dir, name, flags)?
    } else {
        sys::open(c_path, flags, 0o644)?
    };
    let high = sys::dup_high(fd);
    if high != fd {
        sys::close(fd);
    }
    match sys::identity(high) {
        Some(id) => Ok((high, id)),
        None => Err(libc::EBADF),
    }
}

/// Opens `name` in `dir` by [`goset_plan::rootfile`]'s rule, walking every component of
/// `dir` (see [`goset_plan::rootfile::walk`]).
fn open_as_root(dir: &[u8], name: &[u8], flags: i32) -> Result<i32, i32> {
    use goset_plan::rootfile::walk;
    let at = walk::walk(&sys::Raw, dir, true, None).map_err(|r| r.errno())?;
    let opened = walk::open_in(&sys::Raw, &at, name, flags, 0o644).map_err(|r| r.errno());
    sys::close(at.fd);
    opened
}

/// This process's local rank as `crate::rank::take` read it, plus one (0: none), for its
/// `init` record; a forked child inherits it with the environment it came from.
static RANK: AtomicUsize = AtomicUsize::new(0);
/// The index in [`LOCAL_RANK_VARS`] of the variable [`RANK`] came from.
static RANK_VAR: AtomicUsize = AtomicUsize::new(0);
/// Its GPU's number plus one (0: its visible-devices variable names no index).
static RANK_GPU: AtomicUsize = AtomicUsize::new(0);

/// The local rank this process took its block by, for its `init` record.
fn logged() -> Option<LocalRank> {
    let rank = RANK.load(Ordering::Relaxed).checked_sub(1)?;
    Some(LocalRank {
        rank,
        var: LOCAL_RANK_VARS.get(RANK_VAR.load(Ordering::Relaxed))?,
        gpu: RANK_GPU.load(Ordering::Relaxed).checked_sub(1),
    })
}

/// Keeps the local rank `crate::rank` read (from `var`), and its GPU, for the process's
/// `init` record.
pub fn note_rank(rank: usize, var: &str, gpu: Option<usize>) {
    let index = LOCAL_RANK_VARS.iter().position(|&v| v == var).unwrap_or(0);
    RANK_VAR.store(index, Ordering::Relaxed);
    RANK_GPU.store(gpu.map_or(0, |g| g + 1), Ordering::Relaxed);
    RANK.store(rank + 1, Ordering::Relaxed);
}

/// Whether records are written.
pub fn enabled() -> bool {
    FD.load(Ordering::Relaxed) >= 0
}

/// Writes `r` with one `writev(2)`, to the log's own file only.
pub fn emit(r: &Record) {
    let mut line = Buf::<LINE_MAX>::new();
    // A process's local rank goes on its init record alone: once per process.
    let rank = (r.event == Event::Init).then(logged).flatten();
    // Only a mask's list can be long, and format shortens that: an error cannot happen.
    let Ok(exe_at) = format(&mut line, r, rank.as_ref()) else {
        return;
    };
    let (head, tail) = line.as_bytes().split_at(exe_at);
    // SAFETY: EXE was written at initialisation, before any record.
    let exe = unsafe { EXE.get() }.as_bytes();
    for _ in 0..3 {
        let fd = FD.load(Ordering::Acquire);
        if fd < 0 {
            return;
        }
        let want = Identity {
            dev: DEV.load(Ordering::Relaxed),
            ino: INO.load(Ordering::Relaxed),
        };
        if sys::identity(fd) == Some(want) {
            sys::writev(fd, &[head, exe, tail]);
            return;
        }
        if !replace(fd) {
            return;
        }
    }
}

/// `stale` is not the log's file any more (the program closed it, and maybe reused the
/// number): reopen the log path, or stop logging with one warning. Never closes `stale`, which
/// is not ours. True when the record may be tried again on a new descriptor (another thread's
/// replacement included).
#[cold]
#[inline(never)]
fn replace(stale: i32) -> bool {
    if REPLACING.swap(true, Ordering::Acquire) {
        // Another thread is reopening the log: wait for it (briefly: a few system calls), then
        // try the record on its descriptor.
        for _ in 0..10_000 {
            if !REPLACING.load(Ordering::Acquire) {
                break;
            }
            // SAFETY: sched_yield has no arguments and no memory effects.
            unsafe { raw::syscall6(libc::SYS_sched_yield, [0; 6]) };
        }
        return true;
    }
    let retry = if FD.load(Ordering::Acquire) != stale {
        true
    } else if REOPENABLE.load(Ordering::Relaxed) {
        // SAFETY: PATH was written at initialisation and is read-only since.
        let path = unsafe { PATH.get() };
        let path = path.as_bytes();
        let mut c_path = Buf::<PATH_MAX>::new();
        c_path.push(path);
        match c_path.c_str().map(open_file) {
            Some(Ok((fd, id))) => {
                install(fd, id);
                true
            }
            _ => {
                FD.store(-1, Ordering::Release);
                warn_once(format_args!(
                    "the program took the placement log's descriptor and {} cannot be reopened; not logging",
                    core::str::from_utf8(path).unwrap_or("(not utf-8)")
                ));
                false
            }
        }
    } else {
        FD.store(-1, Ordering::Release);
        warn_once(format_args!(
            "the program closed the placement log's copy of stderr; not logging"
        ));
        false
    };
    REPLACING.store(false, Ordering::Release);
    retry
}

/// In a forked child: a replacement that another thread had begun is not going on there.
pub fn after_fork() {
    REPLACING.store(false, Ordering::Relaxed);
}

static WARNED: AtomicBool = AtomicBool::new(false);
/// The warning's line: only the thread that set [`WARNED`] touches it.
static WARNING: Exclusive<Buf<1024>> = Exclusive::new(Buf::new());

/// Writes `goset: <message>` on stderr, once per process, and only while fd 2 is still the
/// file it was at start (a program that reopened fd 2 onto a file of its own gets nothing).
#[cold]
#[inline(never)]
pub fn warn_once(message: core::fmt::Arguments) {
    if WARNED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: this thread alone swapped WARNED from false, so it alone ever gets here.
    let line = unsafe { WARNING.get_mut() };
    let _ = line.write_str("goset: ");
    let _ = line.write_fmt(message);
    if !line.fits() {
        line.push(b"...");
    }
    line.push(b"\n");
    if stderr_is_ours() {
        sys::write(2, line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use goset_plan::CpuSet;

    fn escaped(s: &[u8]) -> String {
        let mut out = String::new();
        escape(&mut out, s).unwrap();
        out
    }

    #[test]
    fn the_rank_read_is_kept_for_the_log() {
        note_rank(3, "SLURM_LOCALID", Some(5));
        let three = LocalRank {
            rank: 3,
            var: "SLURM_LOCALID",
            gpu: Some(5),
        };
        assert_eq!(logged(), Some(three));
        note_rank(0, "LOCAL_RANK", None);
        assert_eq!(
            logged().map(|l| (l.rank, l.var, l.gpu)),
            Some((0, "LOCAL_RANK", None))
        );
    }

    #[test]
    fn escapes_json_strings() {
        assert_eq!(escaped(b"a\"b\\c"), "a\\\"b\\\\c");
        assert_eq!(escaped(b"tab\there\n\x01"), "tab\\there\\n\\u0001");
        assert_eq!(escaped(b"caf\xc3\xa9"), "café");
        assert_eq!(escaped(b"bad\xff!"), "bad\u{fffd}!");
    }

    fn record(requested: Option<&CpuSet>) -> Record<'_> {
        Record {
            time: 1.5,
            pid: 10,
            tid: 11,
            comm: b"my \"app\"",
            event: Event::Set,
            call: "sched_setaffinity",
            requested,
            cpu: Some(2),
            slot: None,
            role: Role::Worker,
            shared: false,
            roams: false,
        }
    }

    /// The line as written, with `exe` spliced in.
    fn line(r: &Record, exe: &str) -> String {
        ranked(r, exe, None)
    }

    /// [`line`] with the process's local rank.
    fn ranked(r: &Record, exe: &str, rank: Option<&LocalRank>) -> String {
        let mut buf = Buf::<LINE_MAX>::new();
        let at = format(&mut buf, r, rank).unwrap();
        let text = String::from_utf8(buf.as_bytes().to_vec()).unwrap();
        format!("{}{exe}{}", &text[..at], &text[at..])
    }

    #[test]
    fn formats_one_line_of_json() {
        let req = goset_plan::cpulist::parse_set(b"0-3").unwrap();
        let out = line(&record(Some(&req)), "/bin/a.out");
        assert_eq!(
            out,
            "{\"time\":1.500000,\"pid\":10,\"tid\":11,\"comm\":\"my \\\"app\\\"\",\
             \"exe\":\"/bin/a.out\",\"event\":\"set\",\"call\":\"sched_setaffinity\",\
             \"requested\":\"0-3\",\"cpu\":2,\"slot\":null,\"role\":\"worker\",\
             \"shared\":false,\"roams\":false,\"placed_by\":\"shim\"}\n"
        );
        assert_eq!(out.matches('\n').count(), 1);
        let rank = LocalRank {
            rank: 3,
            var: "SLURM_LOCALID",
            gpu: Some(5),
        };
        let out = ranked(&record(None), "/x", Some(&rank));
        assert!(
            out.ends_with(
                "\"placed_by\":\"shim\",\"local_rank\":3,\"rank_var\":\"SLURM_LOCALID\",\"gpu\":5}\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_mask_too_long_for_the_line_is_named_so() {
        let scattered: CpuSet = (0..goset_plan::MAX_CPUS).step_by(2).collect();
        let out = line(&record(Some(&scattered)), "/x");
        assert!(
            out.contains("\"requested\":\"(too long)\",\"cpu\":2"),
            "{out}"
        );
        assert!(out.ends_with("\"placed_by\":\"shim\"}\n"), "{out}");
        let many: CpuSet = (0..200).step_by(2).collect();
        let out = line(&record(Some(&many)), "/x");
        assert!(out.contains("\"requested\":\"0,2,4,"), "{out}");
    }
}
