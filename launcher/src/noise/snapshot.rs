//! One reading of the three counter files at one instant.
//!
//! Owns: [`Snapshot`], reading `/proc/interrupts`, `/proc/softirqs` and `/proc/stat` under an
//! [`FsRoot`] and recording (never failing on) a file that is missing or unparsable, and the
//! cumulative per-CPU lookups. Must not: difference snapshots (`per_cpu.rs`) or sleep
//! (`sample` in `mod.rs`).

use super::interrupts::{parse_interrupts, parse_softirqs, Interrupts, Softirqs};
use super::stat::{parse_proc_stat, ProcStat};
use crate::fsroot::{FsRoot, ReadError};
use std::collections::BTreeSet;
use std::time::Instant;

/// The files a snapshot reads, as the kernel names them.
pub const INTERRUPTS: &str = "/proc/interrupts";
/// See [`INTERRUPTS`].
pub const SOFTIRQS: &str = "/proc/softirqs";
/// See [`INTERRUPTS`].
pub const STAT: &str = "/proc/stat";

/// Cumulative counters of every online CPU at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When the reading started.
    pub taken: Instant,
    /// `/proc/interrupts`; `None` when it could not be read or parsed (see `errors`).
    pub interrupts: Option<Interrupts>,
    /// `/proc/softirqs`; `None` when it could not be read or parsed.
    pub softirqs: Option<Softirqs>,
    /// `/proc/stat`; `None` when it could not be read or parsed.
    pub stat: Option<ProcStat>,
    /// Files that could not be read or parsed, once each.
    pub errors: Vec<ReadError>,
}

impl Snapshot {
    /// Reads the three files under `root`. Never fails: a missing or unparsable file leaves its
    /// part `None` and is recorded in `errors`.
    pub fn read(root: &FsRoot) -> Snapshot {
        let taken = Instant::now();
        Snapshot::from_texts(
            taken,
            root.read(INTERRUPTS),
            root.read(SOFTIRQS),
            root.read(STAT),
        )
    }

    /// Builds a snapshot from file contents (or the errors of reading them), as
    /// [`Snapshot::read`] does.
    pub fn from_texts(
        taken: Instant,
        interrupts: Result<String, ReadError>,
        softirqs: Result<String, ReadError>,
        stat: Result<String, ReadError>,
    ) -> Snapshot {
        let mut errors = Vec::new();
        let interrupts = parsed(INTERRUPTS, interrupts, parse_interrupts, &mut errors);
        let softirqs = parsed(SOFTIRQS, softirqs, parse_softirqs, &mut errors);
        let stat = parsed(STAT, stat, parse_proc_stat, &mut errors);
        Snapshot {
            taken,
            interrupts,
            softirqs,
            stat,
            errors,
        }
    }

    /// Every CPU that appears in any of the three files.
    pub fn cpus(&self) -> BTreeSet<usize> {
        let mut set = BTreeSet::new();
        if let Some(i) = &self.interrupts {
            set.extend(i.cpus.iter().copied());
        }
        if let Some(s) = &self.softirqs {
            set.extend(s.cpus.iter().copied());
        }
        if let Some(s) = &self.stat {
            set.extend(s.cpus.keys().copied());
        }
        set
    }
}

fn parsed<T>(
    file: &str,
    text: Result<String, ReadError>,
    parse: fn(&str) -> Result<T, String>,
    errors: &mut Vec<ReadError>,
) -> Option<T> {
    match text {
        Err(e) => {
            errors.push(e);
            None
        }
        Ok(t) => match parse(&t) {
            Ok(v) => Some(v),
            Err(why) => {
                errors.push(ReadError {
                    file: file.to_string(),
                    reason: format!("unparsable: {why}"),
                });
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(file: &str) -> Result<String, ReadError> {
        Err(ReadError {
            file: file.to_string(),
            reason: "missing".to_string(),
        })
    }

    #[test]
    fn records_unparsable_and_missing_files() {
        let s = Snapshot::from_texts(
            Instant::now(),
            Ok("nonsense".into()),
            missing(SOFTIRQS),
            Ok("cpu0 1 2 3 4\n".into()),
        );
        assert!(s.interrupts.is_none() && s.softirqs.is_none());
        assert_eq!(s.errors.len(), 2);
        assert_eq!(s.errors[0].file, INTERRUPTS);
        assert!(
            s.errors[0].reason.starts_with("unparsable"),
            "{}",
            s.errors[0]
        );
        assert_eq!(s.errors[1].to_string(), "/proc/softirqs: missing");
        assert_eq!(s.cpus(), BTreeSet::from([0]));
    }
}
