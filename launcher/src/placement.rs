//! The placement log that libgoset.so writes: one JSON object a line, one line a decision.
//!
//! Owns: reading the log and folding it into one entry per thread for the report.
//! The schema is documented in the README ("Placement log").

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

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
    /// `init`, `create`, `set` or `exit`.
    pub event: String,
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
    /// `main`, `worker`, `helper` or `launcher`.
    #[serde(default)]
    pub role: String,
    /// The slot is shared with another live thread.
    #[serde(default)]
    pub shared: bool,
    /// `shim` or `housekeeper`.
    #[serde(default)]
    pub placed_by: Option<String>,
}

/// What the log says about one thread.
#[derive(Debug, Clone, Serialize, PartialEq)]
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
    /// Affinity calls the shim answered for it.
    pub set_calls: usize,
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

/// Parses log text.
pub fn parse(text: &str) -> Log {
    let mut log = Log::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str(line) {
            Ok(r) => log.records.push(r),
            Err(_) => log.bad_lines += 1,
        }
    }
    log
}

/// Reads the log file; a missing file is an empty log.
pub fn read(path: &Path) -> Log {
    std::fs::read_to_string(path)
        .map(|t| parse(&t))
        .unwrap_or_default()
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
                    set_calls: 0,
                    exited: false,
                    placed_by: String::new(),
                }
            });
            if !r.comm.is_empty() {
                t.comm = r.comm.clone();
            }
            if r.event == "exit" {
                t.exited = true;
                continue;
            }
            if r.event == "set" {
                t.set_calls += 1;
            }
            t.pid = r.pid;
            t.role = r.role.clone();
            t.slot = r.slot.or(t.slot);
            t.cpu = r.cpu.or(t.cpu);
            t.shared |= r.shared;
            t.placed_by = r.placed_by.clone().unwrap_or_else(|| "shim".into());
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

    #[test]
    fn folds_records_per_thread() {
        let text = r#"{"time":1.5,"pid":10,"tid":10,"comm":"app","exe":"/bin/app","event":"init","call":"init","requested":null,"cpu":1,"slot":0,"role":"main","shared":false,"placed_by":"shim"}
{"time":1.6,"pid":10,"tid":11,"comm":"app","exe":"/bin/app","event":"create","call":"pthread_create","requested":null,"cpu":0,"slot":1,"role":"worker","shared":false,"placed_by":"shim"}
{"time":1.7,"pid":10,"tid":11,"comm":"w1","exe":"/bin/app","event":"set","call":"sched_setaffinity","requested":"0-1","cpu":0,"slot":1,"role":"worker","shared":false,"placed_by":"shim"}
{"time":1.8,"pid":10,"tid":11,"comm":"w1","exe":"/bin/app","event":"exit","call":"exit","requested":null,"cpu":null,"slot":1,"role":"worker","shared":false,"placed_by":"shim"}
{"time":1.9,"pid":10,"tid":1
"#;
        let log = parse(text);
        assert_eq!(log.bad_lines, 1);
        let t = log.threads();
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].tid, t[0].role.as_str(), t[0].cpu, t[0].slot),
            (10, "main", Some(1), Some(0))
        );
        assert_eq!(
            (t[1].comm.as_str(), t[1].set_calls, t[1].exited, t[1].cpu),
            ("w1", 1, true, Some(0))
        );
    }
}
