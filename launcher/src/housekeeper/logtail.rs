//! Following the placement log while the task runs.
//!
//! Owns: remembering which threads the shim placed and on which CPU, from the records appended
//! since the last poll (read by [`crate::placement_log::Follower`], at most [`MAX_POLL`] bytes a
//! poll, so that a task appending without end cannot hold up a poll; a torn last line waits
//! for the next poll). The log is followed to its end, however long: a thread the tail missed
//! would look unplaced, and the housekeeper would move it away from the shim's CPU. A line in
//! the shim's own layout is read by the contract's scanner beside the shim's writer
//! ([`scan::shim_line`]), a few times faster than a JSON parse (a task that churns threads
//! writes tens of thousands of records a second); any other line is parsed in full. Must not:
//! write.

use crate::fsroot::ReadError;
use crate::placement_log::{self, Follower, MAX_BYTES, MAX_LINE};
use goset_plan::log::{scan, Event, Role};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The most bytes one poll reads of the log: a few milliseconds of reading.
pub const MAX_POLL: u64 = 4 << 20;

/// What the shim said about one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShimThread {
    /// The CPU it applied last (`None`: a mask of several CPUs, or none).
    pub cpu: Option<usize>,
    /// The slot its last record held (a helper on the housekeeper CPU holds none).
    pub slot: Option<usize>,
    /// Its last record has it on the whole reservation, born while every slot had a running
    /// thread.
    pub roams: bool,
    /// Its last record's role is [`Role::Launcher`]: parked on the housekeeper CPU, with a
    /// record in the table the housekeeper moves if it computes.
    pub launcher: bool,
    /// An exit record was seen.
    pub exited: bool,
}

/// The placement log, read incrementally.
#[derive(Debug)]
pub struct LogTail {
    follower: Follower,
    /// Threads the shim (not the housekeeper) wrote records for; one that logged its exit is
    /// kept through the next poll (it may still be seen alive, exiting), then forgotten, so
    /// that a task churning threads does not grow the map.
    pub shim: BTreeMap<i32, ShimThread>,
    /// The executable of each process the shim wrote records for, as its latest record says.
    pub exes: BTreeMap<i32, String>,
    /// Threads whose exit the last poll read.
    exited: Vec<i32>,
    /// `(pid, tid)` of the threads whose first record the last poll read.
    fresh: Vec<(i32, i32)>,
    /// What the report reads of the log (its first bytes); past it, what the tail has read is
    /// freed ([`LogTail::free_after`]), `None`: kept whole.
    kept: Option<u64>,
    /// Where the freed part of the log ends.
    freed_to: u64,
    /// Records read past `kept` (freed once read).
    freed_records: u64,
}

/// How much read past the kept part accumulates before it is freed: a hole-punch each.
const FREE_EVERY: u64 = 1 << 20;

impl LogTail {
    /// Follows the log at `path` (which may not exist yet).
    pub fn new(path: PathBuf) -> LogTail {
        LogTail {
            follower: Follower::new(path),
            shim: BTreeMap::new(),
            exes: BTreeMap::new(),
            exited: Vec::new(),
            fresh: Vec::new(),
            kept: None,
            freed_to: 0,
            freed_records: 0,
        }
    }

    /// Past its first `kept` bytes (what the report reads), the log is freed as soon as the
    /// tail has read it (`FALLOC_FL_PUNCH_HOLE`: the file keeps its size and the appends their
    /// offsets, the filesystem gets the space back), so that a task that churns threads does
    /// not fill the run directory's filesystem. Only for the run directory's own log: a log
    /// the user keeps (`--log`) is theirs, whole.
    pub fn free_after(&mut self, kept: u64) {
        self.kept = Some(kept);
        self.freed_to = kept;
    }

    /// Frees what was read past the kept part, in steps of [`FREE_EVERY`].
    fn free_read(&mut self) {
        let Some(kept) = self.kept else { return };
        let to = self.follower.offset() & !4095;
        let from = self.freed_to.max(kept).next_multiple_of(4096);
        if to < from + FREE_EVERY {
            return;
        }
        let Ok(file) = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.follower.path())
        else {
            return;
        };
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate on a descriptor we own, within the bytes already read.
        let rc =
            unsafe { libc::fallocate(file.as_raw_fd(), mode, from as i64, (to - from) as i64) };
        if rc == 0 {
            self.freed_to = to;
        }
    }

    /// Reads what was appended since the last call.
    pub fn poll(&mut self) {
        let past_kept = self.kept.is_some_and(|k| self.follower.offset() >= k);
        let before = self.follower.lines.records;
        self.read_appended();
        if past_kept {
            self.freed_records += self.follower.lines.records - before;
        }
        self.free_read();
    }

    fn read_appended(&mut self) {
        for tid in self.exited.drain(..) {
            if self.shim.get(&tid).is_some_and(|t| t.exited) {
                self.shim.remove(&tid);
            }
        }
        self.fresh.clear();
        let seen = &mut Seen {
            shim: &mut self.shim,
            exes: &mut self.exes,
            exited: &mut self.exited,
            fresh: &mut self.fresh,
        };
        self.follower.poll_lines(MAX_POLL, |line| {
            if let Some(b) = scan_shim_line(line) {
                note(seen, b);
                return true;
            }
            let Some(r) = placement_log::parse_line(line) else {
                return false;
            };
            if !r.by_housekeeper() {
                let exit = r.is(Event::Exit);
                let brief = Brief {
                    pid: r.pid,
                    tid: r.tid,
                    exe: &r.exe,
                    exit,
                    cpu: r.cpu,
                    slot: r.slot,
                    roams: r.roams,
                    launcher: r.role == Some(Role::Launcher),
                };
                note(seen, brief);
            }
            true
        });
    }

    /// `(pid, tid)` of the threads whose first record the last [`LogTail::poll`] read: a
    /// process whose thread count these account for need not be listed to find them.
    pub fn fresh(&self) -> &[(i32, i32)] {
        &self.fresh
    }

    /// What could not be read of the log, for the Errors table.
    pub fn errors(&self) -> Vec<ReadError> {
        let error = |reason: String| ReadError {
            file: self.follower.path().display().to_string(),
            reason,
        };
        let mut errors: Vec<ReadError> = self.follower.problem.iter().cloned().map(error).collect();
        let kept = self.kept.unwrap_or(MAX_BYTES);
        if self.follower.offset() > kept {
            let freed = match self.freed_records {
                0 => String::new(),
                n => format!(
                    "; about {n} records after them were read and freed as the run went, so that \
                     the run directory's filesystem does not fill (--log FILE keeps every record)"
                ),
            };
            errors.push(error(format!(
                "over {kept} bytes: the Threads table shows the records of the first {kept}{freed}"
            )));
        }
        let long = self.follower.lines.long_lines;
        if long > 0 {
            errors.push(error(format!(
                "{long} line(s) longer than {MAX_LINE} bytes skipped: not placement records"
            )));
        }
        errors
    }
}

/// What the tail keeps of one of the shim's records.
#[derive(Debug, PartialEq, Eq)]
struct Brief<'a> {
    pid: i32,
    tid: i32,
    exe: &'a str,
    exit: bool,
    cpu: Option<usize>,
    slot: Option<usize>,
    roams: bool,
    launcher: bool,
}

/// What [`note`] keeps up to date.
struct Seen<'a> {
    shim: &'a mut BTreeMap<i32, ShimThread>,
    exes: &'a mut BTreeMap<i32, String>,
    exited: &'a mut Vec<i32>,
    fresh: &'a mut Vec<(i32, i32)>,
}

fn note(seen: &mut Seen, r: Brief) {
    let exes = &mut *seen.exes;
    if !r.exe.is_empty() && exes.get(&r.pid).map(String::as_str) != Some(r.exe) {
        exes.insert(r.pid, r.exe.to_string());
    }
    let t = seen.shim.entry(r.tid).or_insert_with(|| {
        if !r.exit {
            seen.fresh.push((r.pid, r.tid));
        }
        ShimThread {
            cpu: None,
            slot: None,
            roams: false,
            launcher: false,
            exited: false,
        }
    });
    if r.exit {
        t.exited = true;
        seen.exited.push(r.tid);
    } else {
        t.cpu = r.cpu;
        t.slot = r.slot;
        t.roams = r.roams;
        t.launcher = r.launcher;
    }
}

/// A line in the shim's own layout ([`scan::shim_line`]) as the tail keeps it; `None` for any
/// other line, which is then parsed in full.
fn scan_shim_line(line: &[u8]) -> Option<Brief<'_>> {
    let r = scan::shim_line(line)?;
    Some(Brief {
        pid: r.pid,
        tid: r.tid,
        exe: r.exe,
        exit: r.event == Event::Exit,
        cpu: r.cpu,
        slot: r.slot,
        roams: r.roams,
        launcher: r.role == Role::Launcher,
    })
}

#[cfg(test)]
mod tests;
