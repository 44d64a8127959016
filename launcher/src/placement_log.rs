//! The placement log that libgoset.so writes: one JSON object a line, one line a decision.
//!
//! Owns: reading the log ([`Follower`], incrementally, for the housekeeper during the run and
//! for the report at its end) and folding it into one entry per thread for the report.
//! The schema is documented in docs/placement-log.md.
//!
//! The task writes the log, so it is read as bytes under caps: a record with invalid UTF-8 is
//! repaired (U+FFFD), not lost; a line longer than [`MAX_LINE`] is skipped to its newline; a
//! read takes at most as many bytes as its caller allows (the report's, [`MAX_BYTES`]); and
//! only a regular file is read at all.

use goset_plan::log::{Event, PlacedBy, Role};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod ranks;

/// The longest line taken for a record. The shim's are a few hundred bytes; one with a path
/// of the kernel's longest (4096 bytes), every byte escaped, stays below it.
pub const MAX_LINE: usize = 64 * 1024;

/// The most bytes of the log read for the report (about 200,000 records, each kept in memory
/// until the report is written).
pub const MAX_BYTES: u64 = 64 << 20;

/// One decision of the shim (or of the housekeeper).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Record {
    /// Unix time in seconds.
    pub time: f64,
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// The thread's name when the record was written.
    #[serde(default)]
    pub comm: String,
    /// The process's executable.
    #[serde(default)]
    pub exe: String,
    /// What happened; a name no writer of goset uses makes the line no record.
    #[serde(with = "name")]
    pub event: Event,
    /// The intercepted call.
    #[serde(default)]
    pub call: String,
    /// The mask the program asked for, as a cpulist.
    #[serde(default)]
    pub requested: Option<String>,
    /// The CPU applied.
    #[serde(default)]
    pub cpu: Option<usize>,
    /// The slot held.
    #[serde(default)]
    pub slot: Option<usize>,
    /// The thread's role (`None`: the record leaves it out).
    #[serde(default, with = "optional_name")]
    pub role: Option<Role>,
    /// The slot is shared with another live thread.
    #[serde(default)]
    pub shared: bool,
    /// The thread runs on the whole reservation: born while every slot had a running thread,
    /// or, from the housekeeper, a thread that takes turns with another (see docs/placement.md).
    #[serde(default)]
    pub roams: bool,
    /// Who placed the thread (`None`: the record leaves it out, which reads as the shim).
    #[serde(default, with = "optional_name")]
    pub placed_by: Option<PlacedBy>,
    /// The CPU an [`Event::Move`] record's thread left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_cpu: Option<usize>,
    /// Why the housekeeper moved a thread (an [`Event::Move`] record), with the figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The process's local rank (its `init` record, `--near gpu:local-rank`), as written:
    /// checked by [`Log::ranks`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u64>,
    /// The variable the local rank came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_var: Option<String>,
    /// The local rank's GPU number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u64>,
}

impl Record {
    /// Whether its `event` is `event`.
    pub fn is(&self, event: Event) -> bool {
        self.event == event
    }

    /// Whether the housekeeper wrote it (the shim writes `shim`; an older or foreign writer
    /// may leave the field out, which reads as the shim's).
    pub fn by_housekeeper(&self) -> bool {
        self.placed_by == Some(PlacedBy::Housekeeper)
    }
}

/// A name of the contract's vocabulary ([`Event`], [`Role`], [`PlacedBy`]), read and written
/// as the log spells it.
trait LogName: Sized + Copy {
    /// What the name is of, for the error on a name no writer of goset uses.
    const WHAT: &'static str;
    fn as_str(self) -> &'static str;
    fn parse(s: &str) -> Option<Self>;
}

macro_rules! log_name {
    ($($t:ty: $what:literal),*) => {$(
        impl LogName for $t {
            const WHAT: &'static str = $what;
            fn as_str(self) -> &'static str {
                <$t>::as_str(self)
            }
            fn parse(s: &str) -> Option<Self> {
                <$t>::parse(s)
            }
        }
    )*};
}
log_name!(Event: "event", Role: "role", PlacedBy: "placed_by");

/// Serde for a [`LogName`] field: its spelling; an unknown one is an error, which makes the
/// line no record (as any line that is not one).
mod name {
    use super::LogName;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<T: LogName, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.as_str())
    }

    pub fn deserialize<'de, T: LogName, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        let s = String::deserialize(d)?;
        T::parse(&s).ok_or_else(|| D::Error::custom(format!("unknown {} {s:?}", T::WHAT)))
    }
}

/// [`name`] for a field a record may leave out.
mod optional_name {
    use super::LogName;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: LogName, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(v.as_str()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: LogName, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        #[derive(Deserialize)]
        struct Named<T: LogName>(#[serde(with = "super::name")] T);
        Ok(Option::<Named<T>>::deserialize(d)?.map(|n| n.0))
    }
}

/// What the log says about one thread.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadPlacement {
    /// Thread id.
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// Latest name.
    pub comm: String,
    /// Role.
    pub role: String,
    /// Slot, if it held one.
    pub slot: Option<usize>,
    /// The CPU last applied.
    pub cpu: Option<usize>,
    /// It shared its slot.
    pub shared: bool,
    /// It ends on the whole reservation, no CPU of its own: born while every slot had a
    /// running thread, or it takes turns with another thread (see [`Record::roams`]).
    pub roams: bool,
    /// Affinity calls the shim answered for it.
    pub set_calls: usize,
    /// The last mask it asked for (an affinity call, or its attr mask at creation), as a
    /// cpulist: what a runtime or a nested pinning tool wanted, where `cpu` is what it got.
    pub asked: Option<String>,
    /// An exit record was seen.
    pub exited: bool,
    /// Who placed it last.
    pub placed_by: String,
}

/// Parsed log plus the lines that did not parse.
#[derive(Debug, Default)]
pub struct Log {
    /// Records in file order.
    pub records: Vec<Record>,
    /// Lines that were not valid records (a torn last line after a crash, say).
    pub bad_lines: usize,
}

/// Splits log bytes, fed in chunks as they arrive, into records. Holds at most [`MAX_LINE`]
/// bytes of an unfinished line.
#[derive(Debug, Default)]
pub struct Lines {
    partial: Vec<u8>,
    /// Inside a line longer than [`MAX_LINE`], dropped up to its newline.
    skipping: bool,
    /// Lines that were not records (a torn last line after a crash, say), long ones included.
    pub bad_lines: usize,
    /// Lines longer than [`MAX_LINE`].
    pub long_lines: usize,
    /// Lines that were records.
    pub records: u64,
}

impl Lines {
    /// Takes the next bytes of the log, handing each complete record to `each`: the tests'
    /// way in ([`Follower`] and [`read`] feed lines, which also tell records from the rest).
    #[cfg(test)]
    pub fn feed(&mut self, bytes: &[u8], each: &mut impl FnMut(Record)) {
        self.feed_lines(bytes, &mut as_records(each));
    }

    /// The log ended: an unfinished last line is a bad one.
    pub fn finish(&mut self, each: &mut impl FnMut(Record)) {
        self.finish_lines(&mut as_records(each));
    }

    /// Takes the next bytes of the log, handing each complete non-blank line to `each`, which
    /// says whether it was a record.
    pub fn feed_lines(&mut self, mut bytes: &[u8], each: &mut impl FnMut(&[u8]) -> bool) {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            if self.skipping {
                self.skipping = false;
            } else if self.partial.is_empty() && end <= MAX_LINE {
                // The whole line is in this chunk: no copy.
                self.take_line(&bytes[..end], each);
            } else if self.partial.len() + end > MAX_LINE {
                self.long_line();
            } else {
                self.partial.extend_from_slice(&bytes[..end]);
                let line = std::mem::take(&mut self.partial);
                self.take_line(&line, each);
                self.partial = line;
            }
            self.partial.clear();
            bytes = &bytes[end + 1..];
        }
        if self.skipping {
            return;
        }
        if self.partial.len() + bytes.len() > MAX_LINE {
            self.partial.clear();
            self.skipping = true;
            self.long_line();
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }

    /// [`Lines::finish`] for [`Lines::feed_lines`].
    pub fn finish_lines(&mut self, each: &mut impl FnMut(&[u8]) -> bool) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.take_line(&line, each);
        }
    }

    fn long_line(&mut self) {
        self.bad_lines += 1;
        self.long_lines += 1;
    }

    fn take_line(&mut self, line: &[u8], each: &mut impl FnMut(&[u8]) -> bool) {
        if line.trim_ascii().is_empty() {
            return;
        }
        if each(line) {
            self.records += 1;
        } else {
            self.bad_lines += 1;
        }
    }
}

/// A line handler that parses each line as a [`Record`] for `each`.
fn as_records(each: &mut impl FnMut(Record)) -> impl FnMut(&[u8]) -> bool + '_ {
    move |line| match parse_line(line) {
        Some(r) => {
            each(r);
            true
        }
        None => false,
    }
}

/// One record from one line; a line of invalid UTF-8 (a thread's name is any bytes) is read
/// with the bad bytes replaced, so the record still counts.
pub fn parse_line(line: &[u8]) -> Option<Record> {
    match std::str::from_utf8(line) {
        Ok(text) => serde_json::from_str(text).ok(),
        Err(_) => serde_json::from_str(&String::from_utf8_lossy(line)).ok(),
    }
}

/// The log file, read as it grows: what was appended since the last [`Follower::poll`].
/// Opened once, so a task that replaces the file is not followed.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: Option<File>,
    offset: u64,
    /// The read buffer, kept: a poll allocates nothing when the log did not grow (a large
    /// buffer freed every poll could make `free` trim the heap, and the trim flush the TLB).
    buf: Vec<u8>,
    /// The records so far, split.
    pub lines: Lines,
    /// Why the log was not read (not a regular file, a read error).
    pub problem: Option<String>,
}

impl Follower {
    /// Follows the log at `path` (which may not exist yet).
    pub fn new(path: PathBuf) -> Follower {
        Follower {
            path,
            file: None,
            offset: 0,
            buf: Vec::new(),
            lines: Lines::default(),
            problem: None,
        }
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads what was appended since the last call, at most `max` bytes, handing each
    /// complete record to `each`.
    pub fn poll(&mut self, max: u64, mut each: impl FnMut(Record)) {
        self.poll_lines(max, as_records(&mut each));
    }

    /// [`Follower::poll`], handing each complete line to `each`, which says whether it was a
    /// record.
    pub fn poll_lines(&mut self, max: u64, mut each: impl FnMut(&[u8]) -> bool) {
        if self.problem.is_some() {
            return;
        }
        if self.file.is_none() {
            let mut read = std::fs::OpenOptions::new();
            match crate::bounded::open_regular(&self.path, read.read(true)) {
                Ok(f) => self.file = Some(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => {
                    self.problem = Some(e.to_string());
                    return;
                }
            }
        }
        let Some(file) = &self.file else {
            return;
        };
        if self.buf.is_empty() {
            self.buf = vec![0u8; 64 * 1024];
        }
        let end = self.offset.saturating_add(max);
        loop {
            let room = (end - self.offset).min(self.buf.len() as u64) as usize;
            if room == 0 {
                break;
            }
            match file.read_at(&mut self.buf[..room], self.offset) {
                Ok(0) => break,
                Ok(n) => {
                    self.offset += n as u64;
                    self.lines.feed_lines(&self.buf[..n], &mut each);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.problem = Some(e.to_string());
                    break;
                }
            }
        }
    }
}

/// Reads the log file's first `max` bytes (at most [`MAX_BYTES`]); a missing file is an empty
/// log.
pub fn read(path: &Path, max: u64) -> Log {
    let mut records = Vec::new();
    let mut follower = Follower::new(path.to_path_buf());
    follower.poll(max.min(MAX_BYTES), |r| records.push(r));
    follower.lines.finish(&mut |r| records.push(r));
    Log {
        records,
        bad_lines: follower.lines.bad_lines,
    }
}

impl Log {
    /// One entry per thread, in order of first appearance.
    pub fn threads(&self) -> Vec<ThreadPlacement> {
        let mut order: Vec<i32> = Vec::new();
        let mut by_tid: BTreeMap<i32, ThreadPlacement> = BTreeMap::new();
        for r in &self.records {
            let t = by_tid.entry(r.tid).or_insert_with(|| {
                order.push(r.tid);
                ThreadPlacement {
                    tid: r.tid,
                    pid: r.pid,
                    comm: String::new(),
                    role: String::new(),
                    slot: None,
                    cpu: None,
                    shared: false,
                    roams: false,
                    set_calls: 0,
                    asked: None,
                    exited: false,
                    placed_by: String::new(),
                }
            });
            if !r.comm.is_empty() {
                t.comm = r.comm.clone();
            }
            if r.is(Event::Exit) {
                t.exited = true;
                continue;
            }
            if r.is(Event::Set) {
                t.set_calls += 1;
            }
            if let Some(asked) = &r.requested {
                t.asked = Some(asked.clone());
            }
            t.pid = r.pid;
            // A move changes where a thread runs, not what it is or who placed it; a move to
            // the housekeeper CPU (a launcher that waits again) leaves it no slot.
            if r.is(Event::Move) && !t.role.is_empty() {
                t.slot = r.slot;
                t.roams = r.roams;
                t.cpu = if r.roams { None } else { r.cpu.or(t.cpu) };
                continue;
            }
            t.role = r.role.map(|r| r.as_str().to_string()).unwrap_or_default();
            t.slot = if r.is(Event::Moved) {
                None
            } else {
                r.slot.or(t.slot)
            };
            t.roams = r.roams;
            t.cpu = if r.roams { None } else { r.cpu.or(t.cpu) };
            t.shared |= r.shared;
            t.placed_by = r.placed_by.unwrap_or(PlacedBy::Shim).as_str().into();
        }
        order
            .into_iter()
            .filter_map(|tid| by_tid.remove(&tid))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses a whole log as [`read`] does a file.
    pub(super) fn parse(bytes: &[u8]) -> Log {
        let mut records = Vec::new();
        let mut lines = Lines::default();
        let mut each = |r| records.push(r);
        lines.feed(bytes, &mut each);
        lines.finish(&mut each);
        Log {
            records,
            bad_lines: lines.bad_lines,
        }
    }

    fn record(tid: i32, comm: &str) -> String {
        format!(
            r#"{{"time":1.0,"pid":10,"tid":{tid},"comm":"{comm}","event":"create","cpu":1,"slot":0,"role":"worker"}}"#
        )
    }

    #[test]
    fn a_record_with_invalid_utf8_is_repaired_and_the_others_kept() {
        let mut bytes = format!("{}\n{}", record(10, "a"), record(11, "bX")).into_bytes();
        let x = bytes.iter().rposition(|&b| b == b'X').unwrap();
        bytes[x] = 0xff;
        bytes.extend(format!("\n{}\n", record(12, "c")).as_bytes());
        let log = parse(&bytes);
        assert_eq!(log.bad_lines, 0);
        let t = log.threads();
        let roles: Vec<(i32, &str)> = t.iter().map(|t| (t.tid, t.role.as_str())).collect();
        assert_eq!(roles, [(10, "worker"), (11, "worker"), (12, "worker")]);
        assert!(t[1].comm.contains('\u{fffd}'), "{:?}", t[1].comm);
    }

    #[test]
    fn a_name_no_writer_uses_makes_the_line_no_record_and_a_missing_one_reads_as_before() {
        let odd = record(1, "a").replace("\"create\"", "\"created\"");
        assert!(serde_json::from_str::<Record>(&odd)
            .unwrap_err()
            .to_string()
            .starts_with("unknown event \"created\""));
        let log = parse(format!("{odd}\n{}\n", record(2, "b")).as_bytes());
        assert_eq!((log.records.len(), log.bad_lines), (1, 1));
        let bare = r#"{"time":1.0,"pid":10,"tid":3,"event":"create"}"#;
        let t = parse(bare.as_bytes()).threads();
        assert_eq!((t[0].role.as_str(), t[0].placed_by.as_str()), ("", "shim"));
    }

    #[test]
    fn a_move_changes_a_threads_cpu_not_its_role_or_placer() {
        let init = r#"{"time":1.0,"pid":10,"tid":10,"event":"init","cpu":1,"slot":0,"role":"main","placed_by":"shim"}"#;
        let moved = r#"{"time":2.0,"pid":10,"tid":10,"event":"move","cpu":0,"slot":0,"role":"worker","placed_by":"housekeeper","from_cpu":1,"reason":"noise"}"#;
        let t = parse(format!("{init}\n{moved}\n").as_bytes()).threads();
        let t = &t[0];
        assert_eq!(
            (t.role.as_str(), t.placed_by.as_str(), t.cpu, t.slot),
            ("main", "shim", Some(0), Some(0))
        );
    }

    #[test]
    fn a_line_longer_than_the_cap_is_skipped_to_its_newline() {
        let mut lines = Lines::default();
        let mut got = Vec::new();
        let mut each = |r: Record| got.push(r.tid);
        lines.feed(format!("{}\n", record(1, "a")).as_bytes(), &mut each);
        // A line that grows past the cap over many feeds, then ends in a record's text.
        for _ in 0..40 {
            lines.feed(&[b'x'; 4096], &mut each);
        }
        lines.feed(
            format!("{}\n{}\n", record(2, "b"), record(3, "c")).as_bytes(),
            &mut each,
        );
        lines.finish(&mut each);
        assert_eq!(got, [1, 3]);
        assert_eq!((lines.bad_lines, lines.long_lines), (1, 1));
        assert!(lines.partial.capacity() <= 2 * MAX_LINE);
    }

    #[test]
    fn a_log_that_is_not_a_regular_file_is_not_read() {
        for path in ["/dev/zero", "/dev/full"] {
            let mut f = Follower::new(path.into());
            f.poll(MAX_BYTES, |_| panic!("a record from {path}"));
            assert_eq!(f.problem.as_deref(), Some("not a regular file"));
            assert!(read(Path::new(path), MAX_BYTES).records.is_empty());
        }
    }

    #[test]
    fn no_more_than_the_cap_is_read() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "{}", record(1, "a")).unwrap();
        // Sparse: megabytes of zeros that cost no disk.
        file.set_len(3 << 20).unwrap();
        let mut f = Follower::new(path.clone());
        let mut got = Vec::new();
        f.poll(1 << 20, |r| got.push(r.tid));
        assert_eq!(got, [1]);
        assert_eq!(f.offset(), 1 << 20);
        f.poll(1 << 20, |_| {});
        assert_eq!(f.offset(), 2 << 20);
        assert_eq!(f.problem, None);
    }
}
