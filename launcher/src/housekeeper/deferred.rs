//! Threads whose records the shim deferred (see [`goset_plan::slots::Deferred`]): children of
//! a creator that churns brief ones, most of which end within a millisecond, counted and never
//! logged.
//!
//! Owns: what the housekeeper makes of the slot table's list at each poll. A thread listed at
//! two polls in a row lives on: it is taken as placed by the shim where the list says (as its
//! `create` record, written when it ends, will say), so that the demand rule can move it like
//! any other. An entry whose thread is gone (its process exec'd or was killed) is taken off
//! the list and uncounted. Must not: write the log.

use super::logtail::{LogTail, ShimThread};
use crate::fsroot::FsRoot;
use goset_plan::slots::{Deferred, SlotTable};
use std::collections::BTreeMap;

/// The housekeeper's view of the deferred list.
#[derive(Debug, Default)]
pub struct DeferredWatch {
    /// The tids listed at the last poll.
    listed: Vec<i32>,
    /// Threads taken as the shim's from the list, with what was assumed of them.
    assumed: BTreeMap<i32, ShimThread>,
}

/// What is assumed of a thread listed at two polls: the shim placed it on `slot`'s CPU now
/// (`task_cpus`), or on the reservation.
fn assumed(slot: Option<usize>, roams: bool, task_cpus: &[usize]) -> ShimThread {
    ShimThread {
        cpu: slot
            .and_then(|s| task_cpus.get(s).copied())
            .filter(|_| !roams),
        slot,
        roams,
        launcher: false,
        exited: false,
    }
}

impl DeferredWatch {
    /// Reads the list once a poll (after the log was read): adopts the threads listed at this
    /// poll and the last into `log`'s shim records, drops the assumptions about threads no
    /// longer listed that no record replaced, and takes gone threads off the list.
    pub fn poll(
        &mut self,
        table: &SlotTable,
        log: &mut LogTail,
        task_cpus: &[usize],
        root: &FsRoot,
    ) {
        let now: Vec<(usize, Deferred)> = table.deferred().collect();
        let mut listed: Vec<i32> = now.iter().map(|(_, d)| d.tid).collect();
        listed.sort_unstable();
        for (index, d) in &now {
            if self.listed.binary_search(&d.tid).is_err() {
                continue;
            }
            if !root.exists(&format!("/proc/{}", d.tid)) {
                if table.undefer(*index, d.tid) {
                    table.deferring_done();
                }
                continue;
            }
            let shim = assumed(d.slot, d.roams, task_cpus);
            if let std::collections::btree_map::Entry::Vacant(e) = log.shim.entry(d.tid) {
                e.insert(shim);
                self.assumed.insert(d.tid, shim);
            }
        }
        self.assumed.retain(|tid, shim| {
            let still = listed.binary_search(tid).is_ok();
            if !still && log.shim.get(tid) == Some(shim) {
                log.shim.remove(tid);
            }
            still
        });
        self.listed = listed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc` where thread `tid` lives, a table of `slots` slots, and a log not yet written.
    fn fixture(tid: i32, slots: usize) -> (tempfile::TempDir, FsRoot, &'static SlotTable, LogTail) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(format!("proc/{tid}"))).unwrap();
        let root = FsRoot::new(dir.path());
        let table = goset_plan::slots::map(None).unwrap();
        table.init(slots);
        let log = LogTail::new(dir.path().join("no.log"));
        (dir, root, table, log)
    }

    #[test]
    fn a_thread_listed_at_two_polls_is_taken_as_placed_and_a_gone_one_unlisted() {
        let (_dir, root, table, mut log) = fixture(100, 2);
        let cpus = [4, 6];
        for (tid, slot) in [(100, 1), (200, 0)] {
            table.deferring_born();
            table.defer(&Deferred {
                tid,
                slot: Some(slot),
                roams: false,
            });
        }
        let mut d = DeferredWatch::default();
        d.poll(table, &mut log, &cpus, &root);
        assert!(
            log.shim.is_empty(),
            "listed once: most end before the next poll"
        );
        d.poll(table, &mut log, &cpus, &root);
        assert_eq!(log.shim.get(&100), Some(&assumed(Some(1), false, &cpus)));
        assert_eq!(log.shim[&100].cpu, Some(6));
        // 200 is not in /proc: off the list, uncounted.
        assert!(!log.shim.contains_key(&200));
        let listed: Vec<i32> = table.deferred().map(|(_, l)| l.tid).collect();
        assert_eq!((listed, table.deferring()), (vec![100], 1));
        // 100 ends briefly (off the list, no record): the assumption goes.
        let (index, _) = table.deferred().next().unwrap();
        assert!(table.undefer(index, 100));
        d.poll(table, &mut log, &cpus, &root);
        assert!(log.shim.is_empty());
    }

    #[test]
    fn a_record_the_thread_wrote_is_kept_over_the_assumption() {
        let (_dir, root, table, mut log) = fixture(300, 1);
        let listed = Deferred {
            tid: 300,
            slot: None,
            roams: true,
        };
        let index = table.defer(&listed).unwrap();
        let mut d = DeferredWatch::default();
        d.poll(table, &mut log, &[2], &root);
        d.poll(table, &mut log, &[2], &root);
        assert_eq!(log.shim[&300].cpu, None, "roams: no CPU of its own");
        // It ended after a while: its records replace the assumption, and stay.
        table.undefer(index, 300);
        let written = ShimThread {
            cpu: Some(2),
            slot: Some(0),
            roams: false,
            launcher: false,
            exited: true,
        };
        log.shim.insert(300, written);
        d.poll(table, &mut log, &[2], &root);
        assert_eq!(log.shim.get(&300), Some(&written));
    }
}
