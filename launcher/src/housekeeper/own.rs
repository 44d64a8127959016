//! Which records of the placement log are of the task's own threads. The task holds the log's
//! descriptor, so a record may name any pid and tid: one naming another process's thread would
//! put that thread in the report's Threads table.
//!
//! Owns: the rule ([`own_records`]). Pure but for [`Procs`], the view of live processes (the
//! machine's `/proc`, or a fake in tests). Must not: read the log or print.

use crate::fsroot::FsRoot;
use crate::placement_log::Record;
use std::collections::{BTreeMap, BTreeSet};

/// Live processes and threads, as the report is made.
pub trait Procs {
    /// The parent process of process or thread `id`; `None` once it is gone.
    fn parent(&self, id: i32) -> Option<i32>;
    /// Whether thread `tid` is one of process `pid`'s now.
    fn member(&self, pid: i32, tid: i32) -> bool;
}

/// The machine's processes under `/proc` of a root.
pub struct LiveProcs<'a>(pub &'a FsRoot);

impl Procs for LiveProcs<'_> {
    fn parent(&self, id: i32) -> Option<i32> {
        let id = u32::try_from(id).ok()?;
        crate::procfs::pid_stat::read(self.0, id).map(|s| s.ppid)
    }

    fn member(&self, pid: i32, tid: i32) -> bool {
        self.0.exists(&format!("/proc/{pid}/task/{tid}"))
    }
}

/// Deepest chain of parents followed from a process up to the launcher.
const MAX_DEPTH: usize = 4096;

/// The records of `records` that are of the task's own threads, and how many were not (left
/// out). `seen` maps each thread the housekeeper found in the task's tree to its process; the
/// task's processes descend from `launcher`. A record counts when:
/// - its thread was seen, under the same process;
/// - else, its thread lives: when it is a thread of the record's process, and that process
///   was seen or descends from the launcher;
/// - else, its process lives: when it was seen or descends from the launcher;
/// - else (both gone and never seen: born and ended between two polls) it counts, since
///   nothing of another process is left to show.
pub fn own_records(
    records: Vec<Record>,
    seen: &BTreeMap<i32, i32>,
    launcher: i32,
    procs: &impl Procs,
) -> (Vec<Record>, usize) {
    let seen_pids: BTreeSet<i32> = seen.values().copied().collect();
    let descends = |pid: i32| {
        let mut id = pid;
        for _ in 0..MAX_DEPTH {
            match procs.parent(id) {
                Some(p) if p == launcher => return true,
                Some(p) if p > 1 => id = p,
                _ => return false,
            }
        }
        false
    };
    let of_task = |pid: i32| seen_pids.contains(&pid) || descends(pid);
    let counts = |r: &Record| {
        if r.pid <= 0 || r.tid <= 0 {
            return false;
        }
        if let Some(&pid) = seen.get(&r.tid) {
            return pid == r.pid;
        }
        if procs.parent(r.tid).is_some() {
            return procs.member(r.pid, r.tid) && of_task(r.pid);
        }
        procs.parent(r.pid).is_none() || of_task(r.pid)
    };
    let total = records.len();
    let own: Vec<Record> = records.into_iter().filter(|r| counts(r)).collect();
    let left_out = total - own.len();
    (own, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes by pid: parent and threads.
    struct Fake(BTreeMap<i32, (i32, Vec<i32>)>);

    impl Procs for Fake {
        fn parent(&self, id: i32) -> Option<i32> {
            (self.0.iter())
                .find(|(&pid, (_, tids))| pid == id || tids.contains(&id))
                .map(|(_, (ppid, _))| *ppid)
        }

        fn member(&self, pid: i32, tid: i32) -> bool {
            self.0
                .get(&pid)
                .is_some_and(|(_, tids)| tid == pid || tids.contains(&tid))
        }
    }

    fn record(pid: i32, tid: i32) -> Record {
        crate::placement_log::parse_line(
            format!(r#"{{"time":1,"pid":{pid},"tid":{tid},"event":"set"}}"#).as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn only_threads_of_the_tasks_tree_count() {
        // The launcher 100 (under a shell, 50, under init), its task 200 with thread 201 and
        // child 300, which was never seen; an unrelated daemon 900 with thread 901.
        let procs = Fake(BTreeMap::from([
            (1, (0, vec![])),
            (50, (1, vec![])),
            (100, (50, vec![])),
            (200, (100, vec![201])),
            (300, (200, vec![])),
            (900, (1, vec![901])),
        ]));
        let seen = BTreeMap::from([(200, 200), (201, 200)]);
        let cases = [
            ((200, 201), true),  // seen
            ((200, 202), true),  // a brief thread of a seen process
            ((300, 300), true),  // an unseen child of the task
            ((400, 401), true),  // gone, never seen: nothing to tell
            ((900, 901), false), // another process's thread
            ((900, 999), false), // a gone thread of another live process
            ((200, 901), false), // another process's thread under the task's pid
            ((900, 201), false), // a seen thread under another pid
            ((100, 100), false), // the launcher itself
            ((1, 1), false),
            ((0, 5), false),
            ((-1, -1), false),
        ];
        let records = cases.iter().map(|&((p, t), _)| record(p, t)).collect();
        let (own, left_out) = own_records(records, &seen, 100, &procs);
        let kept: Vec<(i32, i32)> = own.iter().map(|r| (r.pid, r.tid)).collect();
        let want: Vec<(i32, i32)> = (cases.iter()).filter(|c| c.1).map(|c| c.0).collect();
        assert_eq!(kept, want);
        assert_eq!(left_out, cases.len() - want.len());
    }

    #[test]
    fn this_process_is_of_its_parents_tree_on_the_live_machine() {
        let root = FsRoot::default();
        let me = std::process::id() as i32;
        // SAFETY: getppid cannot fail.
        let parent = unsafe { libc::getppid() };
        let live = LiveProcs(&root);
        assert!(live.member(me, me));
        let (own, left_out) = own_records(vec![record(me, me)], &BTreeMap::new(), parent, &live);
        assert_eq!((own.len(), left_out), (1, 0));
        let (own, left_out) = own_records(vec![record(1, 1)], &BTreeMap::new(), parent, &live);
        assert_eq!((own.len(), left_out), (0, 1));
    }
}
