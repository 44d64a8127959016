//! Threads whose placement records are deferred: the child of a creator whose last children
//! each ended briefly (the shim's `thread::Birth::churning`), born beside its creator or on a
//! CPU of its own, most likely ends within a millisecond too. Logging a `create` and an `exit`
//! record for each was most of what churning threads cost under goset-run: two writes in the
//! task, and reading and parsing them in the housekeeper. Such a child writes nothing while it lives: its creator counts it
//! ([`SlotTable::deferring`]) before it exists, and once it runs it lists itself here, so that
//! the housekeeper can tell a thread count that adds up without listing the task's threads,
//! and can find the few that live on. When it ends briefly it is counted
//! ([`SlotTable::brief`]), else it writes its records when it ends.
//!
//! Owns: the list's entries and the counts. Must not: know the log.

use super::entry::{decode, encode, Deferred, DEFERRED};
use super::table::SlotTable;
use core::sync::atomic::Ordering;

impl SlotTable {
    /// Lists `d`, its records deferred; the entry's index, to [`SlotTable::undefer`] it, or
    /// `None` when the list is full (the thread logs as any other). Starts at an index drawn
    /// from the tid, so that concurrent children rarely contend for one entry.
    pub fn defer(&self, d: &Deferred) -> Option<usize> {
        let v = encode(d);
        let start = d.tid as u32 as usize % DEFERRED;
        (0..DEFERRED).map(|i| (start + i) % DEFERRED).find(|&i| {
            self.deferred[i]
                .compare_exchange(0, v, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Takes thread `tid` off the list at `index`: true for the one caller that took it (the
    /// ending thread, or its process's exit handler), which then writes or counts it.
    pub fn undefer(&self, index: usize, tid: i32) -> bool {
        let Some(e) = self.deferred.get(index) else {
            return false;
        };
        let v = e.load(Ordering::Acquire);
        decode(v).is_some_and(|d| d.tid == tid)
            && e.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// The listed threads, with their entries' indexes; entries that do not decode are
    /// skipped (any process of the task can write anything here).
    pub fn deferred(&self) -> impl Iterator<Item = (usize, Deferred)> + '_ {
        (self.deferred.iter().enumerate())
            .filter_map(|(i, e)| Some((i, decode(e.load(Ordering::Acquire))?)))
    }

    /// Counts a thread about to be born with its records deferred (in its creator, before the
    /// thread exists).
    pub fn deferring_born(&self) {
        self.deferring.fetch_add(1, Ordering::AcqRel);
    }

    /// Uncounts a thread counted by [`SlotTable::deferring_born`]: it was not born, it ended,
    /// or its records were written.
    pub fn deferring_done(&self) {
        let _ = (self.deferring)
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Live threads whose records are deferred, listed or about to be.
    pub fn deferring(&self) -> u32 {
        self.deferring.load(Ordering::Acquire)
    }

    /// Counts a thread that ended briefly, its records never written.
    pub fn count_brief(&self) {
        self.brief.fetch_add(1, Ordering::Relaxed);
    }

    /// Threads counted by [`SlotTable::count_brief`].
    pub fn brief(&self) -> u64 {
        self.brief.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_thread_is_listed_until_one_caller_takes_it() {
        let t = super::super::map(None).unwrap();
        t.init(2);
        let d = Deferred {
            tid: 4242,
            slot: Some(1),
            roams: false,
        };
        let i = t.defer(&d).unwrap();
        assert_eq!(t.deferred().collect::<Vec<_>>(), [(i, d)]);
        // Another tid cannot take it, the same one only once.
        assert!(!t.undefer(i, 4243));
        assert!(t.undefer(i, 4242));
        assert!(!t.undefer(i, 4242));
        assert_eq!(t.deferred().count(), 0);
        t.count_brief();
        assert_eq!(t.brief(), 1);
        t.deferring_born();
        t.deferring_born();
        t.deferring_done();
        assert_eq!(t.deferring(), 1);
        t.deferring_done();
        t.deferring_done();
        assert_eq!(t.deferring(), 0, "never below zero");
    }

    #[test]
    fn a_full_list_defers_no_more_and_garbage_is_skipped() {
        let t = super::super::map(None).unwrap();
        t.init(1);
        for tid in 1..=DEFERRED as i32 {
            let roams = tid % 2 == 0;
            assert!(t
                .defer(&Deferred {
                    tid,
                    slot: None,
                    roams
                })
                .is_some());
        }
        let extra = Deferred {
            tid: 9999,
            slot: Some(0),
            roams: false,
        };
        assert_eq!(t.defer(&extra), None);
        let listed: Vec<Deferred> = t.deferred().map(|(_, d)| d).collect();
        assert_eq!(listed.len(), DEFERRED);
        assert!(listed
            .iter()
            .all(|d| d.slot.is_none() && d.roams == (d.tid % 2 == 0)));
        // A negative tid written by a task is no thread.
        t.deferred[0].store(u64::MAX, Ordering::Relaxed);
        assert_eq!(t.deferred().count(), DEFERRED - 1);
    }
}
