//! Following the placement log while the task runs.
//!
//! Owns: remembering which threads the shim placed and on which CPU, from the records appended
//! since the last poll (read by [`crate::placement::Follower`], within its caps; a torn last
//! line waits for the next poll). Must not: write.

use crate::fsroot::ReadError;
use crate::placement::{Follower, Record, MAX_LINE};
use std::collections::BTreeMap;
use std::path::PathBuf;

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
        self.follower.poll(|r| note(shim, &r));
    }

    /// What could not be read of the log, for the Errors table.
    pub fn errors(&self) -> Vec<ReadError> {
        let error = |reason: String| ReadError {
            file: self.follower.path().display().to_string(),
            reason,
        };
        let mut errors: Vec<ReadError> = self.follower.problem.iter().cloned().map(error).collect();
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
}
