//! Following the placement log while the task runs.
//!
//! Owns: remembering which threads the shim placed and on which CPU, from the records appended
//! since the last poll (read by [`crate::placement_log::Follower`], at most [`MAX_POLL`] bytes a
//! poll, so that a task appending without end cannot hold up a poll; a torn last line waits
//! for the next poll). The log is followed to its end, however long: a thread the tail missed
//! would look unplaced, and the housekeeper would move it away from the shim's CPU. A line in
//! the shim's own layout is read by [`scan_shim_line`], a few times faster than a JSON parse
//! (a task that churns threads writes tens of thousands of records a second); any other line
//! is parsed in full. Must not: write.

use crate::fsroot::ReadError;
use crate::placement_log::{self, Follower, MAX_BYTES, MAX_LINE};
use goset_plan::log::{Event, PlacedBy};
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
    }
}

/// A line exactly as the shim writes it (`preload/src/log.rs`: every key in its order, every
/// value in the form the shim gives it, an executable path without escapes), read without a
/// JSON parser; `None` for anything else, which is then parsed in full.
fn scan_shim_line(line: &[u8]) -> Option<Brief<'_>> {
    let rest = line.strip_prefix(b"{\"time\":")?;
    let (_, rest) = number(rest)?;
    // The fraction: six digits, leading zeros included.
    let fraction = rest.strip_prefix(b".")?;
    let rest = fraction
        .get(6..)
        .filter(|_| fraction[..6].iter().all(u8::is_ascii_digit))?;
    let (pid, rest) = number(rest.strip_prefix(b",\"pid\":")?)?;
    let (tid, rest) = number(rest.strip_prefix(b",\"tid\":")?)?;
    let rest = skip_string(rest.strip_prefix(b",\"comm\":\"")?)?;
    let (exe, rest) = plain_string(rest.strip_prefix(b",\"exe\":\"")?)?;
    let (event, rest) = plain_string(rest.strip_prefix(b",\"event\":\"")?)?;
    let (_, rest) = plain_string(rest.strip_prefix(b",\"call\":\"")?)?;
    let rest = rest.strip_prefix(b",\"requested\":")?;
    let rest = match rest.strip_prefix(b"null") {
        Some(rest) => rest,
        None => plain_string(rest.strip_prefix(b"\"")?)?.1,
    };
    let (cpu, rest) = number_or_null(rest.strip_prefix(b",\"cpu\":")?)?;
    let (slot, rest) = number_or_null(rest.strip_prefix(b",\"slot\":")?)?;
    let (_, rest) = plain_string(rest.strip_prefix(b",\"role\":\"")?)?;
    let (_, rest) = boolean(rest.strip_prefix(b",\"shared\":")?)?;
    let (roams, rest) = boolean(rest.strip_prefix(b",\"roams\":")?)?;
    let rest = rest.strip_prefix(b",\"placed_by\":\"")?;
    if rest.strip_suffix(b"\"}")? != PlacedBy::Shim.as_str().as_bytes() {
        return None;
    }
    Some(Brief {
        pid: i32::try_from(pid).ok()?,
        tid: i32::try_from(tid).ok()?,
        exe: std::str::from_utf8(exe).ok()?,
        exit: event == Event::Exit.as_str().as_bytes(),
        cpu: match cpu {
            Some(c) => Some(usize::try_from(c).ok()?),
            None => None,
        },
        slot: match slot {
            Some(s) => Some(usize::try_from(s).ok()?),
            None => None,
        },
        roams,
    })
}

/// `true` or `false` at the start of `s`, and what follows it.
fn boolean(s: &[u8]) -> Option<(bool, &[u8])> {
    match s.strip_prefix(b"true") {
        Some(rest) => Some((true, rest)),
        None => Some((false, s.strip_prefix(b"false")?)),
    }
}

/// A decimal number at the start of `s` as JSON writes one (at most 18 digits, no leading
/// zero), and what follows it.
fn number(s: &[u8]) -> Option<(i64, &[u8])> {
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 18 || (digits > 1 && s[0] == b'0') {
        return None;
    }
    let n = s[..digits]
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    Some((n, &s[digits..]))
}

/// `null` or a [`number`].
fn number_or_null(s: &[u8]) -> Option<(Option<i64>, &[u8])> {
    match s.strip_prefix(b"null") {
        Some(rest) => Some((None, rest)),
        None => number(s).map(|(n, rest)| (Some(n), rest)),
    }
}

/// Past the end of a JSON string whose opening quote is already consumed; `None` for a raw
/// control character, which JSON does not allow in a string.
fn skip_string(s: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(&s[i + 1..]),
            b if b < 0x20 => return None,
            _ => i += 1,
        }
    }
    None
}

/// A JSON string without escapes or control characters (opening quote consumed), and what
/// follows its closing quote.
fn plain_string(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = s
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    (s[end] == b'"').then(|| (&s[..end], &s[end + 1..]))
}

#[cfg(test)]
mod tests;
