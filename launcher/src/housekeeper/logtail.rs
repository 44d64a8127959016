//! Following the placement log while the task runs.
//!
//! Owns: remembering which threads the shim placed and on which CPU, from the records appended
//! since the last poll (read by [`crate::placement::Follower`], at most [`MAX_POLL`] bytes a
//! poll, so that a task appending without end cannot hold up a poll; a torn last line waits
//! for the next poll). The log is followed to its end, however long: a thread the tail missed
//! would look unplaced, and the housekeeper would move it away from the shim's CPU. Must not:
//! write.

use crate::fsroot::ReadError;
use crate::placement::{Follower, Record, MAX_BYTES, MAX_LINE};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The most bytes one poll reads of the log: a few milliseconds of reading.
pub const MAX_POLL: u64 = 4 << 20;

/// What the shim said about one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShimThread {
    /// The CPU it applied last (`None`: a mask of several CPUs, or none).
    pub cpu: Option<usize>,
    /// An exit record was seen.
    pub exited: bool,
}

/// The placement log, read incrementally.
#[derive(Debug)]
pub struct LogTail {
    follower: Follower,
    /// Threads the shim (not the housekeeper) wrote records for.
    pub shim: BTreeMap<i32, ShimThread>,
}

impl LogTail {
    /// Follows the log at `path` (which may not exist yet).
    pub fn new(path: PathBuf) -> LogTail {
        LogTail {
            follower: Follower::new(path),
            shim: BTreeMap::new(),
        }
    }

    /// Reads what was appended since the last call.
    pub fn poll(&mut self) {
        let shim = &mut self.shim;
        self.follower.poll(MAX_POLL, |r| note(shim, &r));
    }

    /// What could not be read of the log, for the Errors table.
    pub fn errors(&self) -> Vec<ReadError> {
        let error = |reason: String| ReadError {
            file: self.follower.path().display().to_string(),
            reason,
        };
        let mut errors: Vec<ReadError> = self.follower.problem.iter().cloned().map(error).collect();
        if self.follower.offset() > MAX_BYTES {
            errors.push(error(format!(
                "over {MAX_BYTES} bytes: the Threads table shows the records of the first {MAX_BYTES}"
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

fn note(shim: &mut BTreeMap<i32, ShimThread>, r: &Record) {
    if r.placed_by.as_deref() == Some("housekeeper") {
        return;
    }
    let t = shim.entry(r.tid).or_insert(ShimThread {
        cpu: None,
        exited: false,
    });
    if r.event == "exit" {
        t.exited = true;
    } else {
        t.cpu = r.cpu;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_appended_lines_and_waits_for_a_torn_one() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("log");
        let mut tail = LogTail::new(path.clone());
        tail.poll();
        assert!(tail.shim.is_empty());
        let mut f = std::fs::File::create(&path).unwrap();
        let rec = |tid: i32, event: &str, by: &str| {
            format!(
                r#"{{"time":1.0,"pid":1,"tid":{tid},"event":"{event}","cpu":1,"slot":0,"role":"worker","placed_by":"{by}"}}"#
            )
        };
        let line = rec(5, "create", "shim");
        write!(
            f,
            "{}\n{}\n{}",
            line,
            rec(6, "place", "housekeeper"),
            &line[..10]
        )
        .unwrap();
        tail.poll();
        assert_eq!(tail.shim.keys().copied().collect::<Vec<_>>(), vec![5]);
        assert_eq!(tail.shim[&5].cpu, Some(1));
        // The rest of the torn line, then an exit.
        write!(f, "{}\n{}\n", &line[10..], rec(5, "exit", "shim")).unwrap();
        tail.poll();
        assert!(tail.shim[&5].exited);
    }

    #[test]
    fn a_log_longer_than_the_reports_cap_is_followed_to_its_end() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("log");
        let rec = |tid: i32| {
            format!(
                r#"{{"time":1.0,"pid":1,"tid":{tid},"event":"create","cpu":1,"role":"worker"}}"#
            )
        };
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(f, "{}", rec(5)).unwrap();
        // A sparse run of zeros without a newline (one long line), then a record past the cap.
        f.set_len(MAX_BYTES + 100).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        write!(f, "\n{}\n", rec(6)).unwrap();
        let mut tail = LogTail::new(path.clone());
        let polls = MAX_BYTES / MAX_POLL + 2;
        for _ in 0..polls {
            tail.poll();
        }
        assert_eq!(tail.shim.keys().copied().collect::<Vec<_>>(), [5, 6]);
        let reasons: Vec<String> = tail.errors().into_iter().map(|e| e.reason).collect();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].starts_with(&format!("over {MAX_BYTES} bytes")));
        assert!(reasons[1].starts_with("1 line(s) longer than"));
    }
}
