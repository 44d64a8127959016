//! Following the placement log while the task runs.
//!
//! Owns: reading the lines appended since the last poll (a torn last line waits for the next
//! poll) and remembering which threads the shim placed and on which CPU. Must not: write.

use crate::placement::Record;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
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
    path: PathBuf,
    file: Option<File>,
    offset: u64,
    /// Bytes read but not yet parsed (a torn last line).
    partial: Vec<u8>,
    /// The read buffer, kept: a poll allocates nothing when the log did not grow (a large
    /// buffer freed every poll could make `free` trim the heap, and the trim flush the TLB).
    buf: Vec<u8>,
    /// Threads the shim (not the housekeeper) wrote records for.
    pub shim: BTreeMap<i32, ShimThread>,
}

impl LogTail {
    /// Follows the log at `path` (which may not exist yet).
    pub fn new(path: PathBuf) -> LogTail {
        LogTail {
            path,
            file: None,
            offset: 0,
            partial: Vec::new(),
            buf: Vec::new(),
            shim: BTreeMap::new(),
        }
    }

    /// Reads what was appended since the last call.
    pub fn poll(&mut self) {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let Some(file) = &self.file else {
            return;
        };
        if self.buf.is_empty() {
            self.buf = vec![0u8; 64 * 1024];
        }
        loop {
            match file.read_at(&mut self.buf, self.offset) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.offset += n as u64;
                    self.partial.extend_from_slice(&self.buf[..n]);
                }
            }
        }
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let partial = std::mem::take(&mut self.partial);
        for line in partial[..=end].split(|&b| b == b'\n') {
            // Lossy: a name of invalid UTF-8 must not cost the thread its record.
            if let Ok(r) = serde_json::from_str::<Record>(&String::from_utf8_lossy(line)) {
                self.note(&r);
            }
        }
        self.partial = partial;
        self.partial.drain(..=end);
    }

    fn note(&mut self, r: &Record) {
        if r.placed_by.as_deref() == Some("housekeeper") {
            return;
        }
        let t = self.shim.entry(r.tid).or_insert(ShimThread {
            cpu: None,
            exited: false,
        });
        if r.event == "exit" {
            t.exited = true;
        } else {
            t.cpu = r.cpu;
        }
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
