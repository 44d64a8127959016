//! Per-thread `/proc` reading: parsers for the four per-thread files and a reader that keeps
//! them open between polls.
//!
//! Owns: parsing `/proc/<pid>/task/<tid>/{stat,schedstat,sched,status}` and `children`, and
//! reading them cheaply (`pread` at offset 0 on a file kept open, so a poll is one syscall per
//! file, not open + read + close) within a process-wide budget of descriptors, past which a
//! file is opened for each read: a task's thread count must not exhaust the launcher's
//! descriptors. Only a regular file of at most [`MAX_FILE`] bytes is read. Must not: decide
//! placement or print.
//!
//! Why these files are silent: each is generated from fields of the thread's `task_struct`
//! (`se.sum_exec_runtime`, `sched_info.run_delay`, `nvcsw`, `se.nr_migrations`, `task_cpu()`)
//! that the reading CPU loads directly; none of them asks the CPU the thread runs on for
//! anything (no `smp_call_function`, no remote run-queue lock). Files that would, and are never
//! read: `/proc/<pid>/stack` and `wchan` (stack walks), `/dev/cpu/*/msr`, perf counters of a
//! running thread, and `clock_gettime` on another thread's CPU-time clock (it locks the remote
//! run queue to bring the running time up to date).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `/proc/<pid>/task/<tid>/schedstat`: three numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on a CPU, ns.
    pub runtime_ns: u64,
    /// Time runnable but waiting on a run queue, ns.
    pub run_delay_ns: u64,
    /// Times it was scheduled in.
    pub timeslices: u64,
}

/// Parses `schedstat`.
pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(SchedStat {
        runtime_ns: it.next()??,
        run_delay_ns: it.next()??,
        timeslices: it.next()??,
    })
}

/// Counters of `/proc/<pid>/task/<tid>/sched` (needs `CONFIG_SCHED_DEBUG`) or, for the
/// switches alone, of `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switches {
    /// `se.nr_migrations`; `None` from `status`, which does not have it.
    pub migrations: Option<u64>,
    /// Voluntary context switches (the thread blocked).
    pub voluntary: u64,
    /// Involuntary context switches (it was preempted).
    pub involuntary: u64,
}

fn key_value(line: &str) -> Option<(&str, u64)> {
    let (k, v) = line.split_once(':')?;
    Some((k.trim(), v.trim().parse().ok()?))
}

/// Parses `sched`: `key : value` lines. Only the three wanted lines are split (the file has
/// some thirty; this runs for every thread that ran, every poll).
pub fn parse_sched(text: &str) -> Option<Switches> {
    let (mut mig, mut vol, mut invol) = (None, None, None);
    for line in text.lines() {
        let slot = match line.as_bytes().first() {
            Some(b's') if line.starts_with("se.nr_migrations") => &mut mig,
            Some(b'n') if line.starts_with("nr_voluntary_switches") => &mut vol,
            Some(b'n') if line.starts_with("nr_involuntary_switches") => &mut invol,
            _ => continue,
        };
        *slot = key_value(line).map(|(_, v)| v);
    }
    Some(Switches {
        migrations: Some(mig?),
        voluntary: vol?,
        involuntary: invol?,
    })
}

/// Parses the context switch lines of `status` (the fallback without `sched`).
pub fn parse_status_switches(text: &str) -> Option<Switches> {
    let (mut vol, mut invol) = (None, None);
    for (k, v) in text.lines().filter_map(key_value) {
        match k {
            "voluntary_ctxt_switches" => vol = Some(v),
            "nonvoluntary_ctxt_switches" => invol = Some(v),
            _ => {}
        }
    }
    Some(Switches {
        migrations: None,
        voluntary: vol?,
        involuntary: invol?,
    })
}

/// Parses `children`: process ids separated by spaces.
pub fn parse_children(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// How a read ended.
#[derive(Debug)]
pub enum Read<'a> {
    /// The file's text (borrowed from the handle's buffer when it is valid UTF-8).
    Text(std::borrow::Cow<'a, str>),
    /// The thread (or process) is gone: not an error, it ended.
    Gone,
    /// The file does not exist for a live thread (a kernel option is off).
    Missing,
    /// Another failure, with the reason.
    Failed(String),
}

/// The longest per-thread file read (`children` of a thread with 100,000 children is
/// 700 KB; the others are a few KB).
pub const MAX_FILE: usize = 1 << 20;

/// How many descriptors the handles may keep open, process-wide (descriptors are): past it a
/// file is opened, read and closed at each read, so that every thread is still read and the
/// housekeeper keeps descriptors to list `/proc/<pid>/task` and follow the log with.
static KEEP_LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_KEEP);
/// Half of the usual soft limit of 1024, until [`set_descriptor_limit`] is called.
const DEFAULT_KEEP: usize = 512;
/// Descriptors the handles hold.
static KEPT: AtomicUsize = AtomicUsize::new(0);
/// Held by a test that sets [`KEEP_LIMIT`], and by one that counts on it.
#[cfg(test)]
pub static LIMIT_SET: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Descriptors left free beside the handles for everything else the housekeeper opens at
/// once: a `/proc/<pid>/task` listing, the log it follows, a file read without keeping it.
const SPARE: u64 = 8;

/// Lets the handles keep at most half of `nofile` descriptors (`RLIMIT_NOFILE`'s soft limit)
/// open, and never more than what `open` (the descriptors the launcher holds now) and
/// [`SPARE`] leave: under a low limit every file is then opened for each read, and read.
pub fn set_descriptor_limit(nofile: u64, open: u64) {
    KEEP_LIMIT.store(keep_limit(nofile, open), Ordering::Relaxed);
}

/// How many descriptors the handles may keep: see [`set_descriptor_limit`].
fn keep_limit(nofile: u64, open: u64) -> usize {
    let free = nofile.saturating_sub(open.saturating_add(SPARE));
    (nofile / 2).min(free).min(usize::MAX as u64) as usize
}

/// One per-thread file, opened on first use and re-read with `pread` at offset 0: a `/proc`
/// file regenerates its text on every read from offset 0, so keeping it open saves the path
/// walk of every poll, as long as the descriptor limit allows (see [`set_descriptor_limit`]);
/// past it the file is opened for each read. The buffer is kept too, so a poll allocates
/// nothing for a thread it reads.
#[derive(Debug)]
pub struct Handle {
    path: PathBuf,
    file: Option<File>,
    buf: Vec<u8>,
}

impl Handle {
    /// A handle for `path` (a real path, under the fsroot).
    pub fn new(path: PathBuf) -> Handle {
        Handle {
            path,
            file: None,
            buf: Vec::new(),
        }
    }

    /// Reads the whole file, if it is a regular file of at most [`MAX_FILE`] bytes.
    pub fn read(&mut self) -> Read<'_> {
        let opened;
        let file = match &self.file {
            Some(f) => f,
            None => {
                let mut read = std::fs::OpenOptions::new();
                let f = match crate::bounded::open_regular(&self.path, read.read(true)) {
                    Ok(f) => f,
                    Err(e) => return classify(e, &self.path),
                };
                let limit = KEEP_LIMIT.load(Ordering::Relaxed);
                let kept = KEPT
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        (n < limit).then_some(n + 1)
                    })
                    .is_ok();
                if kept {
                    &*self.file.insert(f)
                } else {
                    opened = f;
                    &opened
                }
            }
        };
        if self.buf.len() < 1024 {
            self.buf.resize(1024, 0);
        }
        let mut len = 0;
        let result = loop {
            if len == self.buf.len() {
                if len >= MAX_FILE {
                    break Err(crate::bounded::too_long(MAX_FILE as u64));
                }
                self.buf.resize(self.buf.len() * 2, 0);
            }
            match file.read_at(&mut self.buf[len..], len as u64) {
                Ok(0) => break Ok(()),
                // A short read is the whole file: a /proc file is generated whole on each
                // read and handed out as far as the buffer goes. Asking again at the end
                // would generate it all a second time just to learn that nothing is left.
                Ok(n) if len + n < self.buf.len() => {
                    len += n;
                    break Ok(());
                }
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        match result {
            // A thread that ended reads as empty or fails with ESRCH.
            Ok(()) if len == 0 => Read::Gone,
            Ok(()) => Read::Text(String::from_utf8_lossy(&self.buf[..len])),
            Err(e) => classify(e, &self.path),
        }
    }
}

impl Handle {
    /// Closes the file if it is kept open (it is opened again at the next read).
    pub fn close(&mut self) {
        if self.file.take().is_some() {
            KEPT.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.close();
    }
}

fn classify(e: io::Error, path: &std::path::Path) -> Read<'static> {
    match e.raw_os_error() {
        Some(libc::ESRCH) => Read::Gone,
        Some(libc::ENOENT) => {
            // The thread's directory still there: the file itself does not exist.
            if path.parent().is_some_and(|d| d.exists()) {
                Read::Missing
            } else {
                Read::Gone
            }
        }
        Some(libc::EACCES) | Some(libc::EPERM) => Read::Failed("permission denied".into()),
        _ => Read::Failed(e.to_string()),
    }
}

/// The files of one thread.
#[derive(Debug)]
pub struct ThreadFiles {
    /// `stat`.
    pub stat: Handle,
    /// `schedstat`.
    pub schedstat: Handle,
    /// `sched`.
    pub sched: Handle,
    /// `status` (only read when `sched` is missing).
    pub status: Handle,
    /// `children`.
    pub children: Handle,
}

impl ThreadFiles {
    /// For a thread that sleeps: closes every file but the one a read of it takes
    /// (`schedstat`, or `stat` without it: `no_schedstat`), so that the descriptors kept open
    /// go to the threads that run. Without this, a task's first thousands of sleepers held the
    /// whole budget, and the busy threads it created after them had their four files opened
    /// and closed at every poll.
    pub fn rest(&mut self, no_schedstat: bool) {
        self.sched.close();
        self.status.close();
        self.children.close();
        if !no_schedstat {
            self.stat.close();
        }
    }

    /// The names of the files kept open.
    #[cfg(test)]
    pub fn kept(&self) -> Vec<&'static str> {
        let all = [
            (&self.stat, "stat"),
            (&self.schedstat, "schedstat"),
            (&self.sched, "sched"),
            (&self.status, "status"),
            (&self.children, "children"),
        ];
        (all.into_iter())
            .filter(|(h, _)| h.file.is_some())
            .map(|(_, name)| name)
            .collect()
    }

    /// The files of thread `tid` of process `pid` under `root`.
    pub fn new(root: &crate::fsroot::FsRoot, pid: i32, tid: i32) -> ThreadFiles {
        let p = |f: &str| Handle::new(root.path(&format!("/proc/{pid}/task/{tid}/{f}")));
        ThreadFiles {
            stat: p("stat"),
            schedstat: p("schedstat"),
            sched: p("sched"),
            status: p("status"),
            children: p("children"),
        }
    }
}

/// The name of a per-thread file in the Errors table: one line for all threads.
pub fn pattern(file: &str) -> String {
    format!("/proc/<pid>/task/<tid>/{file}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_schedstat_sched_status_children() {
        assert_eq!(
            parse_schedstat("108453 110485 2\n"),
            Some(SchedStat {
                runtime_ns: 108453,
                run_delay_ns: 110485,
                timeslices: 2
            })
        );
        let sched = "cat (19811, #threads: 1)\n---------\n\
            se.sum_exec_runtime                          :             0.685226\n\
            se.nr_migrations                             :                    3\n\
            nr_switches                                  :                    9\n\
            nr_voluntary_switches                        :                    7\n\
            nr_involuntary_switches                      :                    2\n";
        let s = parse_sched(sched).unwrap();
        assert_eq!((s.migrations, s.voluntary, s.involuntary), (Some(3), 7, 2));
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t4\n";
        let s = parse_status_switches(status).unwrap();
        assert_eq!((s.migrations, s.voluntary, s.involuntary), (None, 12, 4));
        assert_eq!(parse_children("19830 19831 \n"), vec![19830, 19831]);
        assert!(parse_children("").is_empty());
    }

    #[test]
    fn a_file_that_is_no_proc_file_is_refused_not_read() {
        let failed = |h: &mut Handle| match h.read() {
            Read::Failed(why) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            failed(&mut Handle::new("/dev/zero".into())),
            "not a regular file"
        );
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("stat");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(2 * MAX_FILE as u64)
            .unwrap();
        let why = failed(&mut Handle::new(big));
        assert_eq!(why, format!("longer than {MAX_FILE} bytes: not read"));
    }

    #[test]
    fn the_handles_keep_half_the_limit_and_leave_room_beside_what_is_open() {
        assert_eq!(keep_limit(1024, 10), 512);
        assert_eq!(keep_limit(64, 40), 16);
        assert_eq!(keep_limit(16, 9), 0);
        assert_eq!(keep_limit(0, 3), 0);
    }

    #[test]
    fn past_the_descriptor_limit_a_file_is_read_without_keeping_it_open() {
        let own = format!("/proc/self/task/{}/stat", nix::unistd::gettid());
        let _set = LIMIT_SET.lock().unwrap_or_else(|e| e.into_inner());
        set_descriptor_limit(0, 0);
        let mut h = Handle::new(own.into());
        let read = matches!(h.read(), Read::Text(_));
        // Other tests may run meanwhile: with the limit at 0 they too just open each time.
        KEEP_LIMIT.store(DEFAULT_KEEP, Ordering::Relaxed);
        assert!(read);
        assert!(h.file.is_none(), "kept open past the limit");
        assert!(matches!(h.read(), Read::Text(_)));
        assert!(h.file.is_some(), "kept open within the limit");
    }

    #[test]
    fn reads_own_files_and_sees_a_gone_thread() {
        let root = crate::fsroot::FsRoot::default();
        let pid = std::process::id() as i32;
        let mut f = ThreadFiles::new(&root, pid, pid);
        for _ in 0..2 {
            let Read::Text(t) = f.stat.read() else {
                panic!("stat")
            };
            assert_eq!(
                crate::procfs::pid_stat::parse_pid_stat(&t).unwrap().ppid,
                nix::unistd::getppid().as_raw()
            );
            assert!(matches!(f.schedstat.read(), Read::Text(_)));
        }
        let tid = std::thread::spawn(|| nix::unistd::gettid().as_raw())
            .join()
            .unwrap();
        let mut gone = ThreadFiles::new(&root, pid, tid);
        assert!(matches!(gone.stat.read(), Read::Gone));
    }
}
