//! `/proc/<pid>/stat` and `/proc/<pid>/task/<tid>/stat`: one line of fields after a name in
//! parentheses.
//!
//! Owns: the parsers of that line (fields counted from the last `)`, since the name may hold
//! spaces and parentheses), reading it under an [`FsRoot`], and [`ProcessId`], a pid with the
//! start time that tells a process from an earlier one that had the same pid. Must not: keep
//! files open (the housekeeper's per-thread reader does, and hands the text here) or decide
//! whether a process is goset's.

use crate::fsroot::FsRoot;

/// What `/proc/<pid>/task/<tid>/stat` says (field numbers as in proc(5)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PidStat {
    /// Field 2, without the parentheses.
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z`, ...
    pub state: char,
    /// Field 4: the parent's process id.
    pub ppid: i32,
    /// Fields 14 + 15: user and system time in clock ticks (`USER_HZ`).
    pub cpu_ticks: u64,
    /// Field 22: start time in clock ticks after boot.
    pub start_ticks: u64,
    /// Field 39: the CPU the thread last ran on.
    pub processor: Option<usize>,
}

/// Parses a `stat` line. The name may hold spaces and parentheses, so the fields are counted
/// from the last `)`.
pub fn parse_pid_stat(text: &str) -> Option<PidStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3.
    let field = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|v| v.parse::<u64>().ok());
    Some(PidStat {
        comm,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        cpu_ticks: num(14)?.saturating_add(num(15)?),
        start_ticks: num(22)?,
        processor: num(39).map(|c| c as usize),
    })
}

/// Fields 14-17 of a process's `/proc/<pid>/stat`, in clock ticks: the user and system time
/// of all its threads, the ended ones too, and of the children it reaped.
pub fn parse_process_ticks(text: &str) -> Option<u64> {
    let close = text.rfind(')')?;
    let fields: Vec<u64> = (text.get(close + 1..)?.split_whitespace())
        .skip(14 - 3)
        .take(4)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    (fields.len() == 4).then(|| fields.iter().fold(0u64, |a, &b| a.saturating_add(b)))
}

/// Field 20 of a process's `stat`: how many threads it has.
pub fn parse_num_threads(text: &str) -> Option<usize> {
    let close = text.rfind(')')?;
    // The first field after the name is field 3.
    text.get(close + 1..)?
        .split_whitespace()
        .nth(20 - 3)?
        .parse()
        .ok()
}

/// The `stat` of process `pid` under `root`, if it is alive and the line parses.
pub fn read(root: &FsRoot, pid: u32) -> Option<PidStat> {
    parse_pid_stat(&root.read(&format!("/proc/{pid}/stat")).ok()?)
}

/// The start time of process `pid` under `root`, if it is alive.
pub fn start_ticks(root: &FsRoot, pid: u32) -> Option<u64> {
    read(root, pid).map(|s| s.start_ticks)
}

/// A process as it is told apart from an earlier one with the same pid: its pid and start time
/// (field 22 of its `stat`, clock ticks after boot). Run directories, journals and bookings are
/// named by it, so that a dead launcher's files are found even once its pid is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId {
    /// The process id.
    pub pid: u32,
    /// Its start time in clock ticks after boot.
    pub start: u64,
}

impl ProcessId {
    /// This process as it is now under `root`, or why its `stat` did not say (the read's
    /// errno: under a descriptor limit it cannot even be opened).
    pub fn this(root: &FsRoot) -> Result<ProcessId, crate::fsroot::ReadError> {
        let pid = std::process::id();
        let file = format!("/proc/{pid}/stat");
        let stat = parse_pid_stat(&root.read(&file)?).ok_or_else(|| crate::fsroot::ReadError {
            file,
            reason: "no start time in it".into(),
        })?;
        Ok(ProcessId {
            pid,
            start: stat.start_ticks,
        })
    }

    /// Whether this very process is still alive under `root` (its pid not reused since).
    pub fn is_alive(&self, root: &FsRoot) -> bool {
        start_ticks(root, self.pid) == Some(self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_thread_count_of_a_process() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 64 0 777 0 0";
        assert_eq!(parse_num_threads(line), Some(64));
        assert_eq!(parse_num_threads("42 (x) S 1"), None);
        assert_eq!(parse_process_ticks(line), Some(11));
        assert_eq!(
            parse_process_ticks("42 (a) b) S 1 1 1 0 -1 0 0 0 0 0 7 3 20 1 20"),
            Some(31)
        );
        assert_eq!(
            parse_process_ticks("42 (x) S 1 1 1 0 -1 0 0 0 0 0 7 3 20"),
            None
        );
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_num_threads(&own).is_some_and(|n| n >= 1));
    }

    // Captured on this machine (kernel 6.18) from a busy thread.
    const STAT: &str = "4242 (we ird) (x)) R 4200 4242 4200 34816 4242 4194304 105 0 0 0 \
        250 17 0 0 20 0 2 0 101234 5726208 344 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 \
        17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn parses_stat_with_a_hostile_name() {
        let s = parse_pid_stat(STAT).unwrap();
        assert_eq!(s.comm, "we ird) (x)");
        assert_eq!((s.state, s.ppid), ('R', 4200));
        assert_eq!(
            (s.cpu_ticks, s.start_ticks, s.processor),
            (267, 101234, Some(1))
        );
        assert!(parse_pid_stat("12 (x) R").is_none());
    }

    #[test]
    fn this_process_is_alive_under_the_live_root_and_not_under_a_fixture() {
        let root = FsRoot::default();
        let me = ProcessId::this(&root).unwrap();
        assert!(me.is_alive(&root));
        let later = ProcessId {
            start: me.start + 1,
            ..me
        };
        assert!(!later.is_alive(&root), "a reused pid is another process");

        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/42")).unwrap();
        std::fs::write(dir.path().join("proc/42/stat"), STAT).unwrap();
        let fixture = FsRoot::new(dir.path());
        assert_eq!(start_ticks(&fixture, 42), Some(101234));
        assert_eq!(start_ticks(&fixture, 43), None);
    }
}
