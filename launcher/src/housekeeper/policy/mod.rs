//! The placement policy for threads the shim could not place: a pure function of observed
//! thread demand and slot loads ([`decide`]), and which threads someone else already placed
//! ([`leave_alone`]).
//!
//! Owns: the rules. Must not: read `/proc`, call `sched_*`, or touch the slot table; the
//! [`super::placer::Placer`] carries the decisions out.
//!
//! Policy: threads that burn CPU get the least-loaded slots, the hungriest first; threads that
//! mostly sleep (a runtime's sysmon, GC or I/O threads) are parked (on the park CPU: the
//! housekeeper CPU, or a task CPU under `--cgroup`) and move to a slot once they burn CPU; a
//! slotted thread that has slept for a few polls gives its slot back (a runtime's main thread
//! burns while it starts, then waits), and a burning thread that shares a slot moves when a slot
//! is emptier by two or more. When the park CPU is a task CPU (no CPU was left outside the
//! plan, or `--cgroup`), the sleepers parked there sit on that slot's CPU:
//! a burner goes beside them only when no slot is empty, and one there moves to an empty slot.

use std::collections::BTreeMap;

pub mod demand;
pub use demand::*;

/// How often, at most, a process's threads are listed because its thread count did not add up
/// with the threads read (one listing costs a `/proc` entry per live thread). In a program that
/// churns threads the count never adds up (threads born and ended between the reads), and
/// listing at every poll made the housekeeper's cost grow with the threads that exist; the
/// polls between look up the tids born since the last poll, a cost that grows with the threads
/// that ran. What a listing catches (a sleeping thread that ended unread, a tid not yet in
/// `/proc` when looked up) waits at most this long, or for the once-a-second poll that lists.
pub const MISMATCH_LISTING: std::time::Duration = std::time::Duration::from_millis(100);

/// While the shim defers the records of brief threads (the task churns them: see
/// [`adds_up`]), a process whose thread count does not add up is listed at most this often:
/// the count is off by the threads being born and ending at that moment, which no listing
/// would catch alive. A thread nobody accounts for waits at most this long to be found.
pub const CHURN_LISTING: std::time::Duration = std::time::Duration::from_secs(1);

/// What a listing costs, counted in the wait before the next (see [`listing_every`]).
pub const LISTING_PER_THREAD: std::time::Duration = std::time::Duration::from_millis(1);

/// How long after a listing of a process with `threads` threads the next waits, while the
/// task churns and at the once-a-second poll's net: [`CHURN_LISTING`], or
/// [`LISTING_PER_THREAD`] a thread when that is longer. A listing builds or looks up a `/proc`
/// entry per thread (about 2 µs each here), so listings cost a process at most about 0.2% of a
/// CPU however many threads it has; what only a listing finds (a thread nobody accounts for)
/// waits that long (3000 threads: 3 s).
pub fn listing_every(threads: usize) -> std::time::Duration {
    let threads = u32::try_from(threads).unwrap_or(u32::MAX);
    CHURN_LISTING.max(LISTING_PER_THREAD.saturating_mul(threads))
}

/// How long after a listing a process of `threads` threads whose count does not add up waits
/// for the next: [`listing_every`] while the task `churning` brief threads, else
/// [`MISMATCH_LISTING`].
pub fn listing_wait(churning: bool, threads: usize) -> std::time::Duration {
    if churning {
        listing_every(threads)
    } else {
        MISMATCH_LISTING
    }
}

/// Whether a process's thread `count` adds up with the `known` threads the housekeeper found:
/// equal, or more by at most the `deferring` threads whose records the shim deferred (children
/// of a creator that churns brief ones: most end within a millisecond, and listing or looking
/// up each of them was the cost that grew with churn). `deferring` counts the whole
/// task's; a thread it hides is found by the once-a-second listing.
pub fn adds_up(count: usize, known: usize, deferring: usize) -> bool {
    count >= known && count - known <= deferring
}

/// Where a thread the housekeeper placed is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spot {
    /// On the CPU of this slot.
    Slot(usize),
    /// On the park CPU ([`crate::housekeeper::Settings::park_cpu`]), holding no slot.
    Parked,
}

/// One thread as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View {
    /// Thread id.
    pub tid: i32,
    /// CPU it wanted over the last interval (run time + run-queue wait over wall time; 1.0 =
    /// one CPU), so a busy thread on a contended CPU still counts as busy.
    pub demand: f64,
    /// Where the housekeeper put it; `None`: unplaced, to be placed now.
    pub spot: Option<Spot>,
    /// Consecutive reads with demand below [`Policy::idle`].
    pub idle_polls: u32,
    /// Consecutive reads with demand at or above [`Policy::burn`].
    pub busy_polls: u32,
    /// Its process's block (the pid whose block it keeps to; 0: none): it takes only slots of
    /// the same group ([`decide`]'s `group`).
    pub group: u32,
}

/// Thresholds of the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Demand from which a thread burns CPU and deserves a slot.
    pub burn: f64,
    /// Demand under which a poll counts as idle.
    pub idle: f64,
    /// Idle polls after which a slotted thread gives its slot back.
    pub demote_after: u32,
    /// Busy polls in a row after which a parked thread gets a slot again: a
    /// thread that wakes for one busy poll now and then stays put rather than going back and
    /// forth.
    pub promote_after: u32,
    /// Busy threads the shim placed are moved off a crowded slot ([`rebalance`]).
    pub spread_busy: bool,
    /// Threads are placed at all; `false` under `--placement mask`, where the task keeps one
    /// shared mask and the housekeeper only watches.
    pub place: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            burn: 0.25,
            idle: 0.05,
            demote_after: 3,
            promote_after: 2,
            spread_busy: true,
            place: true,
        }
    }
}

/// A placed thread's `(idle, busy)` streaks (see [`View::idle_polls`], [`View::busy_polls`])
/// after one more read that found `demand` and `runnable`. A runnable thread is never idle:
/// starved is not asleep.
pub fn streaks_after_read(
    (idle, busy): (u32, u32),
    demand: f64,
    runnable: bool,
    policy: &Policy,
) -> (u32, u32) {
    let idle = if demand < policy.idle && !runnable {
        idle + 1
    } else {
        0
    };
    let busy = if wanted(demand, runnable, policy) >= policy.burn {
        busy + 1
    } else {
        0
    };
    (idle, busy)
}

/// Whether a thread holds a slot, and so follows it when the slot moves: the shim's helpers
/// (`shim_placed` with no `shim_slot`) and the threads parked by the housekeeper (`spot`) hold
/// none, and stay even on a CPU the slot leaves (the park CPU can be a task CPU or an
/// `--adapt` candidate).
pub fn holds_slot(shim_placed: bool, shim_slot: Option<usize>, spot: Option<Spot>) -> bool {
    !((shim_placed && shim_slot.is_none()) || spot == Some(Spot::Parked))
}

/// What to do with one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Claim this slot and move there, giving back any slot the thread held.
    Claim { tid: i32, slot: usize },
    /// Move to the park CPU without a slot.
    Park { tid: i32 },
    /// Give the slot back and move to the park CPU.
    Demote { tid: i32 },
}

/// The policy: actions for `threads` given the live count of each slot (`live[s]`, threads of
/// the shim and of the housekeeper alike). `parked_slot` is the slot whose CPU is the park CPU
/// when no CPU was left outside the plan: the threads parked then sit on that slot's CPU, so a
/// burner goes there only after the empty slots, and one beside them moves to a slot nobody is
/// on.
///
/// Demotions and new sleepers come first so that the burners see where they went; burners
/// claim in order of demand (then tid), each taking the least-loaded slot of its group (`group`
/// per slot, as [`View::group`]: a process keeps to its block, and no other comes in).
pub fn decide(
    threads: &[View],
    live: &[u32],
    group: &[u32],
    parked_slot: Option<usize>,
    policy: &Policy,
) -> Vec<Action> {
    let mut loads = Loads {
        load: live.to_vec(),
        parked: (threads.iter())
            .filter(|t| t.spot == Some(Spot::Parked))
            .count() as u32,
        group,
        parked_slot,
    };
    let mut actions = Vec::new();
    let evicted = evict(threads, &mut loads, policy, &mut actions);
    let threads: Vec<&View> = threads
        .iter()
        .filter(|t| !evicted.contains(&t.tid))
        .collect();
    demote_idle(&threads, &mut loads, policy, &mut actions);
    for &t in &threads {
        if t.spot.is_none() && t.demand < policy.burn {
            actions.push(Action::Park { tid: t.tid });
            loads.parked += 1;
        }
    }
    place_burners(&threads, &mut loads, policy, &mut actions);
    actions
}

/// The slots' loads as [`decide`] goes: the live count of each slot, and the parked threads,
/// which count as neighbours on `parked_slot` only.
struct Loads<'a> {
    load: Vec<u32>,
    parked: u32,
    /// Each slot's block (as [`View::group`]).
    group: &'a [u32],
    parked_slot: Option<usize>,
}

impl Loads<'_> {
    fn group_of(&self, s: usize) -> u32 {
        self.group.get(s).copied().unwrap_or(0)
    }

    /// The parked threads that sit on slot `s`'s CPU.
    fn sleepers(&self, s: usize) -> u32 {
        if self.parked_slot == Some(s) {
            self.parked
        } else {
            0
        }
    }

    /// A burner's slot in block `g`: the fewest live threads, then the fewest sleepers (a
    /// sleeper is a better neighbour than a burner, nobody better than either), then the
    /// lowest index.
    fn least_loaded(&self, g: u32) -> Option<usize> {
        (0..self.load.len())
            .filter(|&s| self.group_of(s) == g)
            .min_by_key(|&s| (self.load[s], self.sleepers(s), s))
    }

    /// One thread fewer on slot `s`.
    fn leave(&mut self, s: usize) {
        if let Some(l) = self.load.get_mut(s) {
            *l = l.saturating_sub(1);
        }
    }
}

/// A thread on a slot that a process's block took since (it was placed before the block was: a
/// shell of the task, a static program) leaves it for a slot of its own group, else the park
/// CPU: no other process's thread stays in a block. Returns the threads moved.
fn evict(
    threads: &[View],
    loads: &mut Loads,
    policy: &Policy,
    actions: &mut Vec<Action>,
) -> Vec<i32> {
    let mut evicted = Vec::new();
    for t in threads {
        let Some(Spot::Slot(s)) = t.spot else {
            continue;
        };
        if loads.group_of(s) == t.group {
            continue;
        }
        loads.leave(s);
        evicted.push(t.tid);
        match loads.least_loaded(t.group) {
            Some(best) if t.demand >= policy.burn => {
                loads.load[best] += 1;
                actions.push(Action::Claim {
                    tid: t.tid,
                    slot: best,
                });
            }
            _ => {
                loads.parked += 1;
                actions.push(Action::Demote { tid: t.tid });
            }
        }
    }
    evicted
}

/// A slotted thread idle for [`Policy::demote_after`] reads, and not burning, gives its slot
/// back.
fn demote_idle(threads: &[&View], loads: &mut Loads, policy: &Policy, actions: &mut Vec<Action>) {
    for &t in threads {
        if let Some(Spot::Slot(s)) = t.spot {
            if t.idle_polls >= policy.demote_after && t.demand < policy.burn {
                actions.push(Action::Demote { tid: t.tid });
                loads.leave(s);
                loads.parked += 1;
            }
        }
    }
}

/// Burners claim in order of demand (then tid): an unplaced one, or a parked one busy for
/// [`Policy::promote_after`] polls, takes the least-loaded slot of its group; a slotted one
/// moves only to a slot emptier by two, or by one with no sleeper there either when a sleeper
/// shares its own (with one fewer thread there, moving would just swap which slot is shared).
fn place_burners(threads: &[&View], loads: &mut Loads, policy: &Policy, actions: &mut Vec<Action>) {
    let mut burners: Vec<&View> = (threads.iter().copied())
        .filter(|t| t.demand >= policy.burn)
        .filter(|t| t.spot != Some(Spot::Parked) || t.busy_polls >= policy.promote_after)
        .collect();
    burners.sort_by(|a, b| b.demand.total_cmp(&a.demand).then(a.tid.cmp(&b.tid)));
    for t in burners {
        if t.spot == Some(Spot::Parked) {
            loads.parked -= 1;
        }
        let Some(best) = loads.least_loaded(t.group) else {
            continue;
        };
        match t.spot {
            Some(Spot::Slot(s)) => {
                let here = (loads.load.get(s).copied().unwrap_or(0), loads.sleepers(s));
                if (loads.load[best] + 1, loads.sleepers(best)) < here {
                    loads.load[s] -= 1;
                    loads.load[best] += 1;
                    // Claiming anew gives the old slot back first.
                    actions.push(Action::Claim {
                        tid: t.tid,
                        slot: best,
                    });
                }
            }
            _ => {
                loads.load[best] += 1;
                actions.push(Action::Claim {
                    tid: t.tid,
                    slot: best,
                });
            }
        }
    }
}

/// What `sched_getaffinity` said about a thread nobody claims yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mask {
    /// The CPUs it may run on.
    Cpus(Vec<usize>),
    /// It could not be read (the thread is gone, or not ours): nothing to place.
    Unknown,
}

/// How a thread's process stands with the shim, from the kernel's view of it (its executable,
/// its parent) and the shim's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kin {
    /// The shim logged a thread of this process while it ran its current executable.
    Shim,
    /// A fork of such a process that still runs its parent's executable: the shim's fork
    /// handler places it when it first runs.
    Fork,
    /// Neither: a static program, or one that dropped the shim.
    Other,
}

/// What [`kin_of`] knows of the task's processes.
pub struct Lineage<'a> {
    /// Processes with a live thread the shim logged, and the executable it logged for each.
    pub logged: &'a BTreeMap<i32, Option<String>>,
    /// Each process's parent.
    pub parents: &'a BTreeMap<i32, i32>,
}

/// How process `pid` stands with the shim: the shim's as long as it runs the executable the
/// shim logged for it; a fork of one (or of a fork of one) while it runs its parent's
/// executable and has logged nothing itself. `exe` reads the executable a process runs now.
pub fn kin_of(pid: i32, lineage: &Lineage, exe: &mut dyn FnMut(i32) -> Option<String>) -> Kin {
    let is_shims = |p: i32, exe: &mut dyn FnMut(i32) -> Option<String>| {
        lineage
            .logged
            .get(&p)
            .is_some_and(|logged| logged.is_some() && exe(p) == *logged)
    };
    if is_shims(pid, exe) {
        return Kin::Shim;
    }
    if lineage.logged.contains_key(&pid) {
        return Kin::Other;
    }
    let mut child = pid;
    // A chain of forks is as deep as the tree; a cycle (pid reuse) ends here.
    for _ in 0..lineage.parents.len() {
        let Some(&parent) = lineage.parents.get(&child) else {
            break;
        };
        let child_exe = exe(child);
        if child_exe.is_none() || child_exe != exe(parent) || lineage.logged.contains_key(&child) {
            break;
        }
        if is_shims(parent, exe) {
            return Kin::Fork;
        }
        child = parent;
    }
    Kin::Other
}

/// CPU time after which a fork of the shim's process that wrote no record is not the shim's.
pub const FORK_RUN_NS: u64 = 10_000_000;

/// The standing of a thread whose process is `kin` ([`kin_of`]) once the thread has run
/// `ran_ns`: the shim's fork handler runs first thing in a child, so a [`Kin::Fork`] thread that
/// has run [`FORK_RUN_NS`] without a record was made behind libc's back (a raw clone, `_Fork`).
pub fn kin_after_run(kin: Kin, ran_ns: u64) -> Kin {
    if kin == Kin::Fork && ran_ns >= FORK_RUN_NS {
        Kin::Other
    } else {
        kin
    }
}

/// A thread that neither the shim logged nor the housekeeper owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unclaimed {
    /// Thread id.
    pub tid: i32,
    /// Its process.
    pub pid: i32,
    /// Its affinity mask.
    pub mask: Mask,
    /// Its process's standing with the shim.
    pub kin: Kin,
}

/// Slot claims no logged thread accounts for, by `(pid, CPU)`: the shim claims a slot (labelled
/// with the pid, or `-pid` for a thread whose tid does not exist yet) before the thread is born
/// with that slot's CPU as its mask, and the launcher claims for the task's main thread before
/// it execs; the thread's record in the log comes only once it runs, which under load can be
/// long after. `records`: the table's `(label, slot)`s; `own`: the housekeeper's claims among
/// them; `logged`: `(pid, CPU)` of each live thread the shim logged.
pub fn pending_claims(
    records: impl Iterator<Item = (i32, usize)>,
    own: &[(i32, usize)],
    logged: &[(i32, usize)],
    task_cpus: &[usize],
) -> BTreeMap<(i32, usize), u32> {
    let mut pending: BTreeMap<(i32, usize), u32> = BTreeMap::new();
    let key = |label: i32, slot: usize| Some((label.checked_abs()?, *task_cpus.get(slot)?));
    for (label, slot) in records {
        if let Some(k) = key(label, slot) {
            *pending.entry(k).or_default() += 1;
        }
    }
    let own = own.iter().filter_map(|&(label, slot)| key(label, slot));
    for k in own.chain(logged.iter().copied()) {
        if let Some(n) = pending.get_mut(&k) {
            *n = n.saturating_sub(1);
        }
    }
    pending.retain(|_, n| *n > 0);
    pending
}

/// Which unclaimed threads are left alone: the kernel's view of a thread (its mask) decides
/// whether it is placed, never how long its record takes to come. Left alone are:
/// - a thread allowed one planned CPU on which its process holds a claim that no logged thread
///   accounts for (`pending`, see [`pending_claims`]): the shim placed it, its record is yet
///   to come; the main thread takes its process's claim first, then the oldest thread;
/// - a thread allowed every planned CPU (more than one) whose process holds a claim no logged
///   thread accounts for, on any slot: the shim let it roam (born while every slot had a
///   running thread), its record is yet to come;
/// - every thread of a [`Kin::Fork`] process: the shim's fork handler places it;
/// - a thread allowed the park CPU only, in a [`Kin::Shim`] process: a helper or launcher
///   thread the shim put there;
/// - a thread allowed a single planned CPU that is not the park CPU and that no other
///   thread of the tree has (`assigned`: the CPU of each live thread the shim logged or the
///   housekeeper owns): the program pinned it itself;
/// - a thread whose mask cannot be read: nothing to place.
///
/// A mask inherited from a creator is no placement: a launcher's children (moved to the
/// park CPU by the shim) inherit `{park_cpu}`, every thread of a static program
/// inherits its main thread's CPU, and a thread born by raw `clone` its creator's, so a CPU two
/// threads share without a pending claim is nobody's placement.
pub fn leave_alone(
    unclaimed: &[Unclaimed],
    pending: &BTreeMap<(i32, usize), u32>,
    assigned: &[usize],
    task_cpus: &[usize],
    park_cpu: usize,
) -> Vec<bool> {
    let single = |t: &Unclaimed| match &t.mask {
        Mask::Cpus(c) if c.len() == 1 => Some(c[0]),
        _ => None,
    };
    let mut holders: BTreeMap<usize, usize> = BTreeMap::new();
    for &cpu in assigned {
        *holders.entry(cpu).or_default() += 1;
    }
    for cpu in unclaimed.iter().filter_map(single) {
        *holders.entry(cpu).or_default() += 1;
    }
    // Main threads first, then by age (tids grow with age, short of wrapping).
    let mut order: Vec<usize> = (0..unclaimed.len()).collect();
    order.sort_by_key(|&i| (unclaimed[i].tid != unclaimed[i].pid, unclaimed[i].tid));
    let mut planned = task_cpus.to_vec();
    planned.sort_unstable();
    let roams = |t: &Unclaimed| matches!(&t.mask, Mask::Cpus(c) if c.len() > 1 && *c == planned);
    let mut pending = pending.clone();
    let mut left = vec![false; unclaimed.len()];
    for i in order {
        let t = &unclaimed[i];
        left[i] = match (t.kin, &t.mask, single(t)) {
            (_, Mask::Unknown, _) => true,
            (Kin::Fork, _, _) => true,
            (_, _, Some(cpu)) => {
                let claim = pending.get_mut(&(t.pid, cpu)).filter(|n| **n > 0);
                let claimed = claim.map(|n| *n -= 1).is_some();
                claimed
                    || (cpu == park_cpu && t.kin == Kin::Shim)
                    || (cpu != park_cpu && task_cpus.contains(&cpu) && holders[&cpu] == 1)
            }
            (_, _, None) if roams(t) => {
                let claim = (pending.iter_mut())
                    .find(|((pid, _), n)| *pid == t.pid && **n > 0)
                    .map(|(_, n)| n);
                claim.map(|n| *n -= 1).is_some()
            }
            _ => false,
        };
    }
    left
}

#[cfg(test)]
mod tests;
