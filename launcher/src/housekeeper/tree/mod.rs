//! Walking the task's process tree at one poll: which threads each process has, which of them
//! are read, and which processes are new.
//!
//! Owns: [`Tree`], what is known of the tree between polls (its processes, their threads, the
//! files found missing), and one poll's walk ([`Tree::walk`]), in named steps for each process
//! ([`Tree::visit`]): its `stat` (thread count, start time), its threads listed or looked up
//! ([`listing`]), each read once (`read`), the reads reconciled with the thread
//! count, and the children of the threads that inherit an ended one's. Must not: place
//! anything (the placer does, after the walk, from what [`Walk`] hands it), or read a file that
//! interrupts a task CPU (see [`super::threads`]). What it needs of the shim's records and the
//! placer comes in a [`Seen`], read only.

mod listing;
mod read;
#[cfg(test)]
mod tests;

use super::logtail::LogTail;
use super::placer::{Live, Placed};
use super::policy::cadence::{self, rest_cap, ALL_CHILDREN_EVERY};
use super::threads;
use super::tracked::{Mode, Tracked};
use crate::fsroot::{FsRoot, ReadError};
use listing::{list_threads, probe_threads, Listing};
use read::Known;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

/// What is known of the task's process tree between polls.
pub struct Tree {
    /// Processes of the tree still in `/proc`, with their threads not known to have ended.
    procs: BTreeMap<i32, Known>,
    /// Each process's own `stat`, whose thread count says whether its task list changed.
    proc_stats: BTreeMap<i32, threads::Handle>,
    /// Each followed process's start time, as first seen.
    starts: BTreeMap<i32, Option<u64>>,
    /// When each process's threads were last listed (see [`cadence::listing_wait`]).
    listed_at: BTreeMap<i32, Instant>,
    /// Every thread seen, by tid (a hash map: a task that churns threads makes it large, and
    /// every poll looks up each live thread in it).
    pub threads: HashMap<i32, Tracked>,
    /// Tids in order of first sight.
    pub order: Vec<i32>,
    /// Files that could not be read, each once.
    pub errors: Vec<ReadError>,
    /// Per-thread files found missing (a kernel option is off), each noted once.
    missing: BTreeSet<&'static str>,
    mode: Mode,
    /// The most polls a sleeping thread is left unread (see [`cadence::idle_skip`]).
    idle_skip_cap: u32,
    /// The poll interval (how many sleepers a poll reads, [`rest_cap`]).
    interval: Duration,
    /// The last pid handed out as of the last poll: the tids born since lie above it.
    last_pid: Option<i32>,
}

/// What the walk needs of the rest of the housekeeper at one poll: the poll's clocks and
/// cadence, the shim's records, and where the placer put threads.
pub struct Seen<'a> {
    /// When the poll started.
    pub now: Instant,
    /// The boot clock then, in seconds (a thread's age).
    pub boot_s: f64,
    /// This poll reads every thread, lists every process and reads every thread's `children`.
    pub all_children: bool,
    /// The task churns brief threads (see [`cadence::listing_wait`]).
    pub churning: bool,
    /// The placement log as followed so far, when there is one.
    pub log: Option<&'a LogTail>,
    /// Live threads whose slot-table records are deferred ([`goset_plan::SlotTable::deferring`]).
    pub deferring: usize,
    /// Where the placer put threads.
    pub placed: Placed<'a>,
}

/// What one poll found as it walked the tree.
#[derive(Debug, Default)]
pub struct Walk {
    /// The live threads, as the placer sees them.
    pub live: Vec<Live>,
    /// The threads that ended since the last poll.
    pub ended: Vec<i32>,
    /// Every process visited.
    pub visited: BTreeSet<i32>,
}

/// One walk under way: what it reads, and what it has found so far.
struct Pass<'a> {
    root: &'a FsRoot,
    seen: &'a Seen<'a>,
    /// The tids handed out since the last poll, when that is a plain range (no wrap).
    born: Option<RangeInclusive<i32>>,
    /// The most polls a sleeping thread is left unread this poll ([`rest_cap`]).
    rest_cap: u32,
    /// Processes found in the `children` of the threads of the process visited.
    found: Vec<i32>,
    out: Walk,
}

/// One process's threads as this poll finds them.
struct Visit {
    pid: i32,
    /// Its live threads as of the last poll.
    known: Known,
    /// Its threads read, or left unread while they sleep, this poll.
    alive: Known,
    /// Its threads found ended this poll.
    lost: BTreeSet<i32>,
    /// Where its threads start in [`Walk::live`].
    first: usize,
    /// The task's threads whose records the shim deferred, when its thread count was read.
    deferring: usize,
}

impl Tree {
    /// Nothing followed yet; polls every `interval`, a sleeping thread left unread at most
    /// `idle_skip_cap` polls.
    pub fn new(interval: Duration, idle_skip_cap: u32) -> Tree {
        Tree {
            procs: BTreeMap::new(),
            proc_stats: BTreeMap::new(),
            starts: BTreeMap::new(),
            listed_at: BTreeMap::new(),
            threads: HashMap::new(),
            order: Vec::new(),
            errors: Vec::new(),
            missing: BTreeSet::new(),
            mode: Mode::default(),
            idle_skip_cap,
            interval,
            last_pid: None,
        }
    }

    /// Follows process `pid` from the next walk on.
    pub fn follow(&mut self, pid: i32) {
        self.procs.entry(pid).or_default();
    }

    /// The processes followed.
    pub fn pids(&self) -> impl Iterator<Item = i32> + '_ {
        self.procs.keys().copied()
    }

    /// One poll's walk: from the processes followed so far, breadth first, each process once,
    /// following the children found on the way; without `children` files, the processes whose
    /// parent is in the tree join it for the next walk.
    pub fn walk(&mut self, root: &FsRoot, seen: &Seen) -> Walk {
        let threads = self.procs.values().map(Known::len).sum();
        let mut p = Pass {
            root,
            seen,
            born: self.born_since_last_poll(root),
            rest_cap: rest_cap(self.idle_skip_cap, threads, self.interval),
            found: Vec::new(),
            out: Walk::default(),
        };
        let mut queue: VecDeque<i32> = self.procs.keys().copied().collect();
        while let Some(pid) = queue.pop_front() {
            if !p.out.visited.insert(pid) {
                continue;
            }
            self.visit(pid, &mut p);
            for child in p.found.drain(..) {
                self.procs.entry(child).or_default();
                queue.push_back(child);
            }
        }
        p.out.ended.sort_unstable();
        p.out.ended.dedup();
        if self.mode.no_children {
            self.scan_for_children(root, &p.out.visited);
        }
        p.out
    }

    /// Marks ended every thread whose directory is gone (the task was reaped after the last
    /// poll: whatever is gone now ended), and closes every thread's files.
    pub fn close(&mut self, root: &FsRoot) {
        for (tid, t) in self.threads.iter_mut() {
            if !t.ended && !root.exists(&format!("/proc/{}/task/{tid}", t.pid)) {
                t.ended = true;
            }
            t.close();
        }
    }

    /// The threads of process `pid` as of the last poll (`known`) with those born since: looked
    /// up among the tids `probe` when given, else listed (noted at `now`).
    fn list_or_probe(
        &mut self,
        root: &FsRoot,
        pid: i32,
        known: &Known,
        probe: Option<RangeInclusive<i32>>,
        now: Instant,
    ) -> Listing {
        match probe {
            Some(born) => {
                let mut tids: BTreeSet<i32> = known.tids().collect();
                tids.extend(probe_threads(root, pid, born));
                Listing::Tids(tids.into_iter().collect())
            }
            None => {
                self.listed_at.insert(pid, now);
                list_threads(root, pid)
            }
        }
    }

    /// Whether process `pid` was listed less than `wait` before `now`.
    fn listed_within(&self, pid: i32, now: Instant, wait: Duration) -> bool {
        (self.listed_at.get(&pid)).is_some_and(|at| now.duration_since(*at) < wait)
    }

    /// The tids handed out since the last poll, when that is a plain range (no wrap).
    fn born_since_last_poll(&mut self, root: &FsRoot) -> Option<RangeInclusive<i32>> {
        let last = listing::last_pid(root);
        let born = match (self.last_pid, last) {
            (Some(prev), Some(now)) if now >= prev => Some(prev + 1..=now),
            _ => None,
        };
        self.last_pid = last;
        born
    }

    /// One process: its thread count and start time, its threads found (listed, looked up, or
    /// as known while the count holds) and read, the reads reconciled with the count, and the
    /// children that its ended threads left to another.
    fn visit(&mut self, pid: i32, p: &mut Pass) {
        let known = self.procs.remove(&pid).unwrap_or_default();
        // Listing /proc/<pid>/task builds a dentry per thread: skip it while the thread
        // count is what we know (a thread that ends shows as a failed read below, and the
        // once-a-second poll lists anyway).
        let (count, start) = self.process_stat(p.root, pid);
        if self.pid_reused(pid, start) {
            // The pid was reused by an unrelated process: ours is gone.
            self.forget_process(pid, &known, &mut p.out.ended);
            return;
        }
        let deferring = p.seen.deferring;
        // The threads the log named since the last poll are looked up by their tids.
        let logged = fresh_logged(p.seen, pid, &known);
        let unchanged = self.count_holds(pid, &known, count, logged.len(), deferring, p);
        let probe = probe_range(p, &known);
        let listing = if unchanged {
            let mut tids: Vec<i32> = known.tids().chain(logged).collect();
            tids.sort_unstable();
            Listing::Tids(tids)
        } else {
            self.list_or_probe(p.root, pid, &known, probe.clone(), p.seen.now)
        };
        let tids = match listing {
            Listing::Tids(t) => t,
            Listing::Gone => {
                self.forget_process(pid, &known, &mut p.out.ended);
                return;
            }
            Listing::Unreadable(why) => {
                // Not gone: its threads are neither read nor ended this time.
                self.note_failed("/proc/<pid>/task", why);
                self.procs.insert(pid, known);
                return;
            }
        };
        let mut v = Visit {
            pid,
            known,
            alive: Known::default(),
            lost: BTreeSet::new(),
            first: p.out.live.len(),
            deferring,
        };
        self.read_listed(&mut v, tids, p);
        let mut listed = !unchanged && probe.is_none();
        if unchanged && v.lost.iter().any(|&t| v.known.contains(t)) {
            // A known thread ended while the count held, so another was born: look up or
            // list, and read only the threads not read above.
            if let Listing::Tids(now_listed) =
                self.list_or_probe(p.root, pid, &v.known, probe.clone(), p.seen.now)
            {
                self.read_new(&mut v, now_listed, p);
            }
            listed = probe.is_none();
        }
        if let Some(count) = count.filter(|_| !listed) {
            self.reconcile_count(&mut v, count, p);
        }
        v.lost
            .extend(v.known.tids().filter(|&t| !v.alive.contains(t)));
        self.children_of_heirs(&v, p);
        self.end(std::mem::take(&mut v.lost), &mut p.out.ended);
        self.procs.insert(pid, v.alive);
    }

    /// Whether the threads of process `pid` are taken to be the `known` ones with the
    /// `logged` new ones, unlisted: its thread `count` adds up with them, or the task churns
    /// and the process was listed lately; never at the once-a-second poll's net.
    fn count_holds(
        &self,
        pid: i32,
        known: &Known,
        count: Option<usize>,
        logged: usize,
        deferring: usize,
        p: &Pass,
    ) -> bool {
        let found = known.len() + logged;
        let adds_up = count.is_some_and(|c| cadence::adds_up(c, found, deferring));
        // While the task churns, a count off by the threads being born and ending waits for
        // the next listing (see cadence::listing_every); so does the once-a-second poll's net,
        // for a process with more than a thousand threads.
        let every = cadence::listing_every(known.len());
        let waits = p.seen.churning && self.listed_within(pid, p.seen.now, every);
        let net = p.seen.all_children
            && !self.listed_within(pid, p.seen.now, every.saturating_sub(ALL_CHILDREN_EVERY));
        !net && !known.is_empty() && (adds_up || waits)
    }

    /// Whether `pid` names another process than the one followed: its start time changed
    /// since first seen.
    fn pid_reused(&mut self, pid: i32, start: Option<u64>) -> bool {
        let recorded = self.starts.entry(pid).or_insert(start);
        let reused = matches!((*recorded, start), (Some(a), Some(b)) if a != b);
        if recorded.is_none() {
            *recorded = start;
        }
        reused
    }

    /// Stops following process `pid`, gone: its `known` threads ended.
    fn forget_process(&mut self, pid: i32, known: &Known, ended: &mut Vec<i32>) {
        self.starts.remove(&pid);
        self.proc_stats.remove(&pid);
        self.listed_at.remove(&pid);
        self.end(known.tids().collect(), ended);
    }

    /// What a lookup found, with the sleeping threads taken as alive, must add up to the
    /// thread `count`; when it does not (a tid handed out before the last poll but not yet in
    /// /proc then, a sleeping thread that ended), list: threads no longer listed ended, and the
    /// new ones are read. At most once per [`cadence::listing_wait`]: in a program that
    /// churns threads the count never adds up.
    fn reconcile_count(&mut self, v: &mut Visit, count: usize, p: &mut Pass) {
        let wait = cadence::listing_wait(p.seen.churning, v.known.len());
        let listed_lately = self.listed_within(v.pid, p.seen.now, wait);
        let deferring = p.seen.deferring;
        if cadence::adds_up(count, v.alive.len(), deferring) || listed_lately {
            return;
        }
        self.listed_at.insert(v.pid, p.seen.now);
        let Listing::Tids(now_listed) = list_threads(p.root, v.pid) else {
            return;
        };
        let in_listing: BTreeSet<i32> = now_listed.iter().copied().collect();
        let gone: BTreeSet<i32> = v.alive.tids().filter(|t| !in_listing.contains(t)).collect();
        if !gone.is_empty() {
            v.alive.0.retain(|(t, _)| !gone.contains(t));
            let mine = p.out.live.split_off(v.first);
            p.out
                .live
                .extend(mine.into_iter().filter(|l| !gone.contains(&l.tid)));
            v.lost.extend(gone);
        }
        self.read_new(v, now_listed, p);
    }

    /// A thread's children move to the first live thread of its process when it ends
    /// (kernel/exit.c, find_alive_thread): the leader while it lives, which may sleep; without
    /// it, any. Their `children` are read when `v` lost a thread, unless this poll reads every
    /// thread's anyway.
    fn children_of_heirs(&mut self, v: &Visit, p: &mut Pass) {
        if v.lost.is_empty() || p.seen.all_children || self.mode.no_children {
            return;
        }
        let heirs: Vec<i32> = if v.alive.contains(v.pid) {
            vec![v.pid]
        } else {
            p.out.live[v.first..].iter().map(|l| l.tid).collect()
        };
        for tid in heirs {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.children(&mut p.found);
            }
        }
    }

    /// Process `pid`'s thread count and start time (clock ticks after boot), from its leader's
    /// `stat`; the start time tells a reused pid from the process we followed.
    fn process_stat(&mut self, root: &FsRoot, pid: i32) -> (Option<usize>, Option<u64>) {
        let handle = self
            .proc_stats
            .entry(pid)
            // The leader thread's stat, not the process's: both give the thread count and the
            // start time, but the process's adds up the time of every thread.
            .or_insert_with(|| {
                threads::Handle::new(root.path(&format!("/proc/{pid}/task/{pid}/stat")))
            });
        match handle.read() {
            threads::Read::Text(text) => (
                crate::procfs::pid_stat::parse_num_threads(&text),
                crate::procfs::pid_stat::parse_pid_stat(&text).map(|s| s.start_ticks),
            ),
            _ => (None, None),
        }
    }

    /// Marks `tids` ended (their files gone without a read noticing) and adds them to `ended`.
    fn end(&mut self, tids: BTreeSet<i32>, ended: &mut Vec<i32>) {
        for tid in tids {
            if let Some(t) = self.threads.get_mut(&tid) {
                if !t.ended {
                    t.ended = true;
                    t.close();
                }
            }
            ended.push(tid);
        }
    }

    /// Without `children` files: processes whose parent is in the tree.
    fn scan_for_children(&mut self, root: &FsRoot, known: &BTreeSet<i32>) {
        for name in root.list("/proc") {
            let Ok(pid) = name.parse::<i32>() else {
                continue;
            };
            if known.contains(&pid) {
                continue;
            }
            let Ok(text) = root.read(&format!("/proc/{pid}/stat")) else {
                continue;
            };
            if crate::procfs::pid_stat::parse_pid_stat(&text)
                .is_some_and(|s| known.contains(&s.ppid))
            {
                self.procs.entry(pid).or_default();
            }
        }
    }
}

/// The threads of process `pid` whose first record the log's last poll read, that are not
/// `known` and did not log their exit.
fn fresh_logged(seen: &Seen, pid: i32, known: &Known) -> Vec<i32> {
    let Some(log) = seen.log else {
        return Vec::new();
    };
    let exited = |tid: &i32| log.shim.get(tid).is_some_and(|t| t.exited);
    (log.fresh().iter())
        .filter(|&&(p, t)| p == pid && !known.contains(t) && !exited(&t))
        .map(|&(_, t)| t)
        .collect()
}

/// The tids to look up instead of listing a process with the `known` threads: those born since
/// the last poll, when they are few next to its threads (its threads that ended show as failed
/// reads, and the once-a-second poll lists anyway).
fn probe_range(p: &Pass, known: &Known) -> Option<RangeInclusive<i32>> {
    p.born.clone().filter(|b| {
        let born_count = (i64::from(*b.end()) - i64::from(*b.start()) + 1).max(0);
        !p.seen.all_children && (born_count as usize) < known.len() / 2
    })
}
