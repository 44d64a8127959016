//! The slot table: which task slots are taken, shared by every process of a task.
//!
//! The table is a fixed `repr(C)` block of atomics in a file of the run directory that every
//! process maps `MAP_SHARED` (or, without a launcher, an anonymous shared mapping inherited
//! across `fork`). There are no locks, so `fork` cannot leave one held: a claim is a
//! compare-and-swap on the live count of the slot chosen ([`birth_key`]: where nothing runs,
//! then the fewest live threads), retried if another thread won.
//! Thread records (tid -> slot) let an exec'd process find the slot its main thread already
//! holds, and let `sched_setaffinity` on another tid find that thread's CPU.
//!
//! Every process of the task can write anything into the table. The shim takes it as it is
//! (a task that corrupts its own table only hurts its own placement), but no reading may
//! panic; the launcher, which must outlive any task, reads through [`SlotTable::live_counts`]
//! and [`SlotTable::claim_among`], bounded by the plan it wrote rather than by the table, and
//! maps a file that cannot shrink under it ([`create_file`]).

use crate::clock::monotonic_us;
use crate::plan::MAX_SLOTS;
use core::sync::atomic::{AtomicU64, Ordering};

mod deferred;
mod entry;
mod file;
mod table;
pub use entry::{Deferred, DEFERRED};
pub use file::{create_file, create_sealed, link_file, map};
pub use table::{SlotTable, MAX_RECORDS};

/// The most threads a Linux system can have (`PID_MAX_LIMIT`, 2^22): no claims could have
/// made a live count above it, so such a count is garbage.
pub const MAX_THREADS: u32 = 1 << 22;
const MAGIC: u64 = u64::from_le_bytes(*b"GOSETSL7");

/// A claimed slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The slot index (plan order).
    pub slot: usize,
    /// Another live thread holds the same slot: there were more threads than slots.
    pub shared: bool,
    /// Index of the thread record, to release without a search; `None` when records ran out.
    pub record: Option<usize>,
}

/// Where a new thread is born (see [`SlotTable::claim_birth_within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Birth {
    /// The slot it holds (its record and live count).
    pub claim: Claim,
    /// Every slot had a running thread (its creator counted): the thread runs on the whole
    /// reservation, its slot only a place to count it, until the housekeeper gives it a CPU.
    pub roams: bool,
}

/// How long a thread born on a slot can count as running there when no housekeeper publishes
/// running counts (the shim by hand): about one of its polls. A thread that old may sleep.
pub const NEWBORN_US: u64 = 100_000;

/// The label a thread's records in the table carry: a main thread's is its pid (its tid), any
/// other thread's is `-pid`. Not the tid: the parent that claims a slot for a new thread does
/// not know its tid yet, and one label for all of a process's other threads lets an exec or
/// an exit release them together ([`SlotTable::release_all`]).
pub const fn label(pid: i32, main: bool) -> i32 {
    if main {
        pid
    } else {
        -pid
    }
}

/// The order in which a new thread takes slots; the smallest key wins. First the fewest
/// threads running there: `running` counts those the housekeeper saw run between its last two
/// polls and a thread born there since the first of them that is still alive (by hand, within
/// [`NEWBORN_US`]: a newborn runs, or is about to), and the creator counts on
/// its own slot (a thread that creates another runs by definition; it may be the newborn or
/// one the housekeeper counted already, so it makes the count at least 1). Then the nearest
/// to the new thread's process (`near`, [`crate::locality::near_key`]), then the fewest live
/// threads, then the slot the thread runs on already (`away` false: see [`Origin::here`]),
/// then the lowest index. A first field of 0 is a slot free of running threads.
pub fn birth_key(
    running: u32,
    creator_here: bool,
    near: u32,
    live: u32,
    away: bool,
    slot: usize,
) -> (u32, u32, u32, bool, usize) {
    (running.max(creator_here as u32), near, live, away, slot)
}

/// Where a new thread comes from, as [`SlotTable::claim_birth_within`] weighs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Origin {
    /// The slot of the thread that creates it, which runs: it counts there (`None`: the
    /// creator holds no slot, or the thread places itself).
    pub creator: Option<usize>,
    /// The slot whose CPU a process placing itself runs on now: among slots otherwise alike
    /// it takes that one, which moves nothing (a move costs a migration, and a wake-up across
    /// CPUs at every hand-over between a short program and its parent). `None`: no preference
    /// (the plan's order decides, as for a task's first process).
    pub here: Option<usize>,
    /// Its parent process's main thread holds `here` and sleeps while the new process starts
    /// there (make, a compiler driver waiting for the program it started): the new process
    /// carries on the parent's work, so the parent's thread does not count against that slot
    /// for it, in live threads or in running ones.
    pub parent_waits: bool,
}

impl SlotTable {
    /// Size in bytes of the table, for creating and mapping its file.
    pub const SIZE: usize = core::mem::size_of::<SlotTable>();

    /// Makes a zero-filled table usable with `slot_count` slots. Idempotent for the same count.
    pub fn init(&self, slot_count: usize) {
        self.slot_count
            .store(slot_count.min(MAX_SLOTS) as u32, Ordering::Relaxed);
        self.magic.store(MAGIC, Ordering::Release);
    }

    /// Whether [`SlotTable::init`] has run on this mapping.
    pub fn is_ready(&self) -> bool {
        self.magic.load(Ordering::Acquire) == MAGIC
    }

    /// Records which plan's CPUs the table is for (see [`crate::Plan::cpus_hash`]).
    pub fn stamp(&self, cpus_hash: u32) {
        self.cpus_hash.store(cpus_hash, Ordering::Release);
    }

    /// Whether the table was stamped for a plan with `cpus_hash`.
    pub fn is_stamped(&self, cpus_hash: u32) -> bool {
        self.cpus_hash.load(Ordering::Acquire) == cpus_hash
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.slot_count.load(Ordering::Relaxed) as usize
    }

    /// Live threads holding `slot`.
    pub fn live(&self, slot: usize) -> u32 {
        self.live.get(slot).map_or(0, |l| l.load(Ordering::Relaxed))
    }

    /// The next thread creation index (0 for the first thread created after the main thread).
    pub fn next_creation_index(&self) -> u32 {
        self.created.fetch_add(1, Ordering::Relaxed)
    }

    /// Live threads of each of the first `slots` slots, for a reader that trusts neither the
    /// table's slot count nor its counts (the launcher: the task can write anything here).
    /// `slots` is the plan's count (at most [`MAX_SLOTS`] are read); a count above
    /// [`MAX_THREADS`] is `None`, unknown.
    pub fn live_counts(&self, slots: usize) -> impl Iterator<Item = Option<u32>> + '_ {
        self.live[..slots.min(MAX_SLOTS)]
            .iter()
            .map(|l| Some(l.load(Ordering::Acquire)).filter(|&n| n <= MAX_THREADS))
    }

    /// Claims the slot with the fewest live threads (then the lowest index) for `tid`, among
    /// the first `slots` slots whatever the table says its count is (the launcher passes its
    /// plan's). A slot whose count is unknown (see [`SlotTable::live_counts`]) is never claimed;
    /// `None` when no slot is left.
    pub fn claim_among(&self, tid: i32, slots: usize) -> Option<Claim> {
        let (slot, before) = loop {
            let (best, load) = self
                .live_counts(slots)
                .enumerate()
                .filter_map(|(s, load)| Some((s, load?)))
                .min_by_key(|&(s, load)| (load, s))?;
            if self.live[best]
                .compare_exchange(load, load + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                break (best, load);
            }
        };
        let record = self.add_record(tid, slot);
        Some(Claim {
            slot,
            shared: before > 0,
            record,
        })
    }

    /// Claims a slot for a new thread labelled `tid`, coming from `origin`, in
    /// [`birth_key`] order among the first `slots` slots that `near` ranks (`None`: not this
    /// thread's to take; a process that keeps a binding or a block claims only the slots on its
    /// CPUs), nearer first; `None` when it ranks no slot with a known count (see
    /// [`SlotTable::live_counts`]). Without a housekeeper (by hand), a slot with live threads
    /// and no running count is asked `seen_running` (the shim looks whether a process holding
    /// it runs now: a thread older than [`NEWBORN_US`] may still compute).
    pub fn claim_birth_within(
        &self,
        tid: i32,
        origin: Origin,
        slots: usize,
        near: impl Fn(usize) -> Option<u32>,
        seen_running: impl Fn(usize) -> bool,
    ) -> Option<Birth> {
        let now = monotonic_us();
        let published = self.published_us.load(Ordering::Relaxed);
        let since = self.counted_since_us.load(Ordering::Relaxed);
        let (slot, before, roams) = loop {
            let (best, load, key) = self
                .live_counts(slots)
                .enumerate()
                .filter_map(|(s, load)| {
                    let near = near(s)?;
                    let parent = u32::from(origin.parent_waits && origin.here == Some(s));
                    let live = load?.saturating_sub(parent);
                    let mut running = (self.running(s)
                        + self.newborn(s, now, published, since) as u32)
                        .saturating_sub(parent);
                    if running == 0 && published == 0 && live > 0 && seen_running(s) {
                        running = 1;
                    }
                    let creator = origin.creator == Some(s);
                    let away = origin.here.is_some_and(|here| here != s);
                    let key = birth_key(running, creator, near, live, away, s);
                    Some((s, load?, key))
                })
                .min_by_key(|&(_, _, key)| key)?;
            if self.live[best]
                .compare_exchange(load, load + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // With a running thread on every slot, a single CPU would be one beside a
                // running thread: the thread roams, the kernel balancing it as under a plain
                // mask, until a housekeeper (if there is one) gives it a CPU of its own.
                break (best, load, key.0 > 0);
            }
        };
        let record = self.add_record(tid, slot);
        // A newborn runs: it counts as running where it was born until the housekeeper has
        // watched it for a whole poll interval (by hand, for NEWBORN_US), so that a burst of
        // births spreads out. Whether it will keep running cannot be told yet: a pool's
        // workers sleep at birth and compute together a moment later.
        let id = record.map_or(0xffff, |r| r as u64 + 1);
        self.born[slot].store(now << 16 | id, Ordering::Release);
        Some(Birth {
            claim: Claim {
                slot,
                shared: before > 0,
                record,
            },
            roams,
        })
    }

    /// Whether a live thread was born on `slot` that the housekeeper has not yet watched for a
    /// whole poll interval (see [`SlotTable::claim_birth_within`]): it may be about to run.
    pub fn newborn_on(&self, slot: usize) -> bool {
        let published = self.published_us.load(Ordering::Relaxed);
        let since = self.counted_since_us.load(Ordering::Relaxed);
        self.newborn(slot, monotonic_us(), published, since)
    }

    /// Whether a live thread was born on `slot` after the start of the interval the
    /// housekeeper's last counts cover (`since`; by hand, `published` 0: within
    /// [`NEWBORN_US`] of `now`). A thread born just before a poll may not have run yet when
    /// the housekeeper counted: only a whole interval watched tells that it sleeps (seen in
    /// CI: a loaded machine's rayon pool had its second worker put beside the first, both on
    /// one CPU, when a poll fell between their births).
    fn newborn(&self, slot: usize, now: u64, published: u64, since: u64) -> bool {
        let stamp = self.born.get(slot).map_or(0, |b| b.load(Ordering::Acquire));
        let at = stamp >> 16;
        match (stamp, published) {
            (0, _) => false,
            (_, 0) => now.saturating_sub(at) < NEWBORN_US,
            _ => at >= since,
        }
    }

    /// Threads that ran on `slot`'s CPU between the housekeeper's last two polls (0 without a
    /// housekeeper, and for a count no poll could have made).
    pub fn running(&self, slot: usize) -> u32 {
        (self.running.get(slot))
            .map(|r| r.load(Ordering::Relaxed))
            .filter(|&n| n <= MAX_THREADS)
            .unwrap_or(0)
    }

    /// Publishes each slot's count of threads that ran since the last poll (the housekeeper,
    /// at every poll); slots past `counts` keep theirs.
    pub fn publish_running(&self, counts: &[u32]) {
        for (r, &n) in self.running.iter().zip(counts) {
            r.store(n, Ordering::Relaxed);
        }
        let before = (self.published_us).swap(monotonic_us().max(1), Ordering::Relaxed);
        (self.counted_since_us).store(before.max(1), Ordering::Relaxed);
    }

    /// Whether it is time to look for the records of processes that died (killed, `_exit`):
    /// at most once every `every_us` for the whole task, not once per process, since every
    /// program a task execs is a new process and each such look reads `/proc`. True for the
    /// one caller that takes the turn.
    pub fn reap_due(&self, every_us: u64) -> bool {
        let now = monotonic_us();
        let last = self.reaped_us.load(Ordering::Relaxed);
        now.saturating_sub(last) >= every_us
            && (self.reaped_us)
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Claims slot `slot` itself for `tid`, however loaded: the launcher's policy chose it
    /// knowing more than the counts (which threads sleep). `None` when the slot does not exist
    /// or its count is unknown (see [`SlotTable::live_counts`]).
    pub fn claim_at(&self, tid: i32, slot: usize) -> Option<Claim> {
        let before = self
            .live
            .get(slot)?
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < MAX_THREADS).then(|| n + 1)
            })
            .ok()?;
        let record = self.add_record(tid, slot);
        Some(Claim {
            slot,
            shared: before > 0,
            record,
        })
    }

    fn add_record(&self, tid: i32, slot: usize) -> Option<usize> {
        let value = ((tid as u32 as u64) << 32) | (slot as u64 + 1);
        let take = |i: &usize| {
            let r = &self.records[*i];
            r.load(Ordering::Relaxed) == 0
                && r.compare_exchange(0, value, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
        };
        let start = self.first_free.load(Ordering::Relaxed);
        let from = (start as usize).min(MAX_RECORDS);
        let index = (from..MAX_RECORDS)
            .find(take)
            .or_else(|| (0..from).find(take))?;
        // Every record from `start` to `index` was taken when passed. A release below `start`
        // meanwhile lowered the hint and keeps it; one between them is passed over by later
        // searches until a release below it lowers the hint again (or nothing above is free).
        let _ = self.first_free.compare_exchange(
            start,
            index as u32 + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        self.records_used
            .fetch_max(index as u32 + 1, Ordering::AcqRel);
        Some(index)
    }

    fn records_in_use(&self) -> &[AtomicU64] {
        let used = (self.records_used.load(Ordering::Acquire) as usize).min(MAX_RECORDS);
        &self.records[..used]
    }

    /// The record index and slot held by `tid`.
    pub fn find(&self, tid: i32) -> Option<(usize, usize)> {
        self.records_in_use().iter().enumerate().find_map(|(i, r)| {
            let (label, slot) = decode(r.load(Ordering::Acquire))?;
            (label == tid).then_some((i, slot))
        })
    }

    /// Releases a claim: its slot has one live thread fewer and its record is free. The slot
    /// is the one its record holds now ([`SlotTable::move_record`] may have moved it since the
    /// claim), else the claim's.
    pub fn release(&self, claim: &Claim) {
        let moved_to = claim
            .record
            .and_then(|index| {
                let held = decode(self.records[index].swap(0, Ordering::AcqRel));
                self.first_free.fetch_min(index as u32, Ordering::Relaxed);
                held
            })
            .map(|(_, slot)| slot);
        let held = moved_to.unwrap_or(claim.slot);
        if let Some(live) = self.live.get(held) {
            // A slot never goes below zero even if a stale claim is released twice.
            let _ = live.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| v.checked_sub(1));
            // A thread that ends no longer runs: the slot's published count cannot stay above
            // the threads it still holds, or a thread born before the next poll would take an
            // emptied slot for a busy one. (Any further count was a roaming thread's, which the
            // kernel moves anyway.)
            let left = live.load(Ordering::Acquire);
            if let Some(running) = self.running.get(held) {
                let _ = running.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                    (r > left).then_some(left)
                });
            }
        }
        if let Some(r) = claim.record {
            self.forget_birth(claim.slot, r);
        }
    }

    /// A newborn that ends (or whose record is freed for it: an exec, a reap) no longer runs
    /// where it was born: `slot`'s birth stamp is cleared when it names `record`. Left, a
    /// launcher's claim for the task's main thread, freed by the launcher program it execs
    /// (`taskset`), made the next image take slot 1 for a newborn on slot 0.
    fn forget_birth(&self, slot: usize, record: usize) {
        if let Some(born) = self.born.get(slot) {
            let _ = born.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v != 0 && v & 0xffff == record as u64 + 1).then_some(0)
            });
        }
    }

    /// The pid of the process whose block holds `slot`; `None`: no block holds it.
    pub fn owner(&self, slot: usize) -> Option<u32> {
        let pid = self.owner.get(slot)?.load(Ordering::Acquire);
        (pid != 0).then_some(pid)
    }

    /// Makes the slots `member` accepts (of the first `slots`) process `pid`'s block, all or
    /// none: each must be in no block, or in the block of a process `gone` says has ended.
    /// False, and nothing taken, when another live process holds one of them.
    pub fn take_block(
        &self,
        pid: u32,
        slots: usize,
        member: impl Fn(usize) -> bool,
        gone: impl Fn(u32) -> bool,
    ) -> bool {
        let slots = slots.min(MAX_SLOTS);
        for s in (0..slots).filter(|&s| member(s)) {
            let was = self.owner[s].load(Ordering::Acquire);
            let free = was == 0 || (was != pid && gone(was));
            if !(free
                && self.owner[s]
                    .compare_exchange(was, pid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok())
            {
                // Give back what was taken so far.
                for t in (0..s).filter(|&t| member(t)) {
                    let _ =
                        self.owner[t].compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
                }
                return false;
            }
        }
        true
    }

    /// Frees the block of process `pid` (at its exit).
    pub fn release_block(&self, pid: u32) {
        for o in &self.owner {
            let _ = o.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The slot record `index` holds now, if it is in use.
    pub fn record_slot(&self, index: usize) -> Option<usize> {
        decode(self.records.get(index)?.load(Ordering::Acquire)).map(|(_, slot)| slot)
    }

    /// The CPU slot `slot` was moved to ([`SlotTable::move_slot`]); `None`: the plan's CPU.
    /// Unchecked: the task can write anything here, so a reader keeps it only inside the CPUs
    /// it may use.
    pub fn moved_cpu(&self, slot: usize) -> Option<usize> {
        let v = self.moved_to.get(slot)?.load(Ordering::Acquire);
        (v > 0).then(|| v as usize - 1)
    }

    /// Makes `cpu` slot `slot`'s CPU from now on, for every thread that holds it or claims it
    /// later (the launcher moving a slot off a CPU that turned noisy).
    pub fn move_slot(&self, slot: usize, cpu: usize) {
        if let (Some(m), Ok(v)) = (self.moved_to.get(slot), u32::try_from(cpu + 1)) {
            m.store(v, Ordering::Release);
        }
    }

    /// Moves one record labelled `label` from slot `from` to slot `to` (the launcher moving a
    /// busy thread off a crowded slot): the record says `to`, `from` has one live thread fewer
    /// and `to` one more. Returns the record's index; `None` when no such record exists or
    /// `to` does not (or its count is unknown).
    pub fn move_record(&self, label: i32, from: usize, to: usize) -> Option<usize> {
        let target = self.live.get(to)?;
        if target.load(Ordering::Acquire) >= MAX_THREADS || from == to {
            return None;
        }
        let old = ((label as u32 as u64) << 32) | (from as u64 + 1);
        let new = ((label as u32 as u64) << 32) | (to as u64 + 1);
        // `to` counts the thread before its record names `to`: a thread ending in between
        // releases the record from `to`, and must find its count there.
        target.fetch_add(1, Ordering::AcqRel);
        let Some(index) = self.records_in_use().iter().position(|r| {
            r.compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            let _ = target.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| v.checked_sub(1));
            return None;
        };
        if let Some(live) = self.live.get(from) {
            let _ = live.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| v.checked_sub(1));
        }
        // A newborn that moved is no longer about to run on `from`: a thread born there next
        // must not take the slot for a busy one.
        self.forget_birth(from, index);
        Some(index)
    }

    /// Releases every record labelled `tid`, each only if it still holds what this call read,
    /// so that processes reaping the same dead thread's record concurrently free it once (and
    /// never a record that was reused in between). Returns how many this call freed.
    pub fn release_all(&self, tid: i32) -> usize {
        let mut freed = 0;
        for (index, r) in self.records_in_use().iter().enumerate() {
            let v = r.load(Ordering::Acquire);
            let Some((label, slot)) = decode(v) else {
                continue;
            };
            if label != tid {
                continue;
            }
            if r.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.first_free.fetch_min(index as u32, Ordering::Relaxed);
                self.forget_birth(slot, index);
                if let Some(live) = self.live.get(slot) {
                    let _ = live
                        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |l| l.checked_sub(1));
                }
                freed += 1;
            }
        }
        freed
    }

    /// The pids whose main threads hold `slot` (their records carry the pid itself).
    pub fn main_holders(&self, slot: usize) -> impl Iterator<Item = i32> + '_ {
        self.records()
            .filter(move |&(label, s)| s == slot && label > 0)
            .map(|(label, _)| label)
    }

    /// Every `(tid, slot)` currently recorded.
    pub fn records(&self) -> impl Iterator<Item = (i32, usize)> + '_ {
        self.records_in_use()
            .iter()
            .filter_map(|r| decode(r.load(Ordering::Acquire)))
    }
}

/// A record's `(label, slot)`; `None` for a free record, or one no claim wrote (slot part 0).
fn decode(v: u64) -> Option<(i32, usize)> {
    let slot = ((v & 0xffff_ffff) as usize).checked_sub(1)?;
    Some(((v >> 32) as u32 as i32, slot))
}

#[cfg(test)]
mod tests;
