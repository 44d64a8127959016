//! Placing the threads the shim could not see: static binaries (Go by default), raw `clone()`,
//! a child that dropped `LD_PRELOAD`.
//!
//! Owns: carrying out the policy of [`super::policy`] ([`Placer`]: `sched_setaffinity` on the
//! tid, a claim in the shared [`SlotTable`] so that the shim and the housekeeper agree on which
//! slots are taken, and a record with `placed_by: "housekeeper"` in the placement log). Must
//! not: read `/proc`, or decide anything itself: the decisions are the pure functions
//! [`decide`] and [`leave_alone`].
//!
//! Here: placing and demoting the threads nobody answers for, one poll at a time
//! ([`Placer::step`]). Beside it: who answers for a thread as the shim and others act on it
//! (`handover`), spreading busy threads the shim placed (`demand`), following a slot that moved
//! off a noisy CPU (`follow`), writing records (`records`), and the kernel calls on a thread's
//! mask (`affinity`, [`Affinity`]).

use crate::placement_log::Record;
use goset_plan::log::Event;
use goset_plan::slots::{self, Claim};
use goset_plan::{CpuSet, SlotTable};
use std::collections::BTreeMap;
use std::time::Instant;

use super::policy::activity::{is_busy, wanted, Activity};
use super::policy::kinship::Kin;
use super::policy::thresholds::Policy;
use super::policy::unplaced::{decide, streaks_after_read, Action, Spot, View};

mod affinity;
mod demand;
mod follow;
mod handover;
mod reason;
mod records;
use demand::Demand;
use follow::Follow;
use handover::HandOver;
use records::Records;
#[cfg(test)]
pub(in crate::housekeeper) mod testing;
pub use affinity::{Affinity, Kernel};
pub use reason::MoveReason;

/// A thread the housekeeper placed.
#[derive(Debug, Clone)]
pub struct Owned {
    /// Its process.
    pub pid: i32,
    /// Its name when last placed.
    pub comm: String,
    /// Where it is.
    pub spot: Spot,
    /// The CPU it was moved to.
    pub cpu: usize,
    /// The slot claim, when it holds one.
    pub claim: Option<Claim>,
    /// Consecutive reads that found it idle (a poll that leaves it unread counts none).
    pub idle_polls: u32,
    /// Reads in a row that found it busy (see [`View::busy_polls`]).
    pub busy_polls: u32,
    /// Its claim shared a slot with another live thread.
    pub shared: bool,
}

impl Owned {
    /// A thread the housekeeper moved onto slot `slot`'s CPU `cpu` without a claim of its own
    /// (the shim's record, or its own earlier claim, stands for it).
    fn moved(pid: i32, comm: String, slot: usize, cpu: usize) -> Owned {
        Owned {
            pid,
            comm,
            spot: Spot::Slot(slot),
            cpu,
            claim: None,
            idle_polls: 0,
            busy_polls: 0,
            shared: false,
        }
    }
}

/// Carries out the policy on live threads.
pub struct Placer {
    table: &'static SlotTable,
    task_cpus: Vec<usize>,
    /// Where slotless threads are parked (see [`super::Settings::park_cpu`]).
    park_cpu: usize,
    /// The speed of each CPU's kind (see [`super::Settings::speed`]).
    speed: BTreeMap<usize, u32>,
    /// The slot whose CPU is the park CPU, when no CPU was left outside the plan.
    parked_slot: Option<usize>,
    /// Its kernel calls.
    affinity: Box<dyn Affinity>,
    /// The records it wrote.
    records: Records,
    /// Threads the housekeeper placed, live or ended, by tid.
    pub owned: BTreeMap<i32, Owned>,
    /// `sched_setaffinity` failures (the reason, once each).
    pub failures: Vec<String>,
    /// Polls so far.
    polls: u64,
    /// When the run's clock started (moves are timed from it).
    clock: Instant,
    /// The hand-over rule's state: threads whose masks are settling.
    handover: HandOver,
    /// The demand rule's state: threads it moved or widened, and what it saw last poll.
    demand: Demand,
    /// The follow rule's state: CPUs slots left, and threads moved off their shim records.
    follow: Follow,
}

/// What the tree walk reads of the placer at one poll: where it put threads.
#[derive(Clone, Copy)]
pub struct Placed<'a> {
    owned: &'a BTreeMap<i32, Owned>,
    follow: &'a Follow,
}

impl Placed<'_> {
    /// The CPU the housekeeper gave thread `tid`, one it placed.
    pub fn cpu_of(&self, tid: i32) -> Option<usize> {
        self.owned.get(&tid).map(|o| o.cpu)
    }

    /// See [`Follow::relocated`].
    pub fn relocated(&self, tid: i32, record_cpu: Option<usize>) -> Option<usize> {
        self.follow.relocated(tid, record_cpu)
    }
}

/// The blocks of one poll (see [`View::group`]): each slot's, and each process's as it is
/// first met.
struct Groups {
    slots: Vec<u32>,
    known: BTreeMap<i32, u32>,
}

/// The live threads of one poll by who answers for them (see [`Placer::answer_for`]).
struct Answered<'a> {
    /// The housekeeper's own threads, as [`decide`] sees them.
    views: Vec<View>,
    /// The CPU of each live thread the shim logged or the housekeeper owns.
    assigned: Vec<usize>,
    /// The threads nobody claims yet.
    unclaimed: Vec<&'a Live>,
}

/// A live thread as the placer needs it.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    /// Thread id.
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// Seconds since the thread started (from `stat` field 22: 10 ms resolution).
    pub age_s: f64,
    /// See [`View::demand`].
    pub demand: f64,
    /// Runnable at its last read (see [`super::tracked::Polled::runnable`]).
    pub runnable: bool,
    /// The shim wrote a record for it.
    pub shim_placed: bool,
    /// What it did since its last read.
    pub activity: Activity,
    /// The single CPU the shim last gave it, if any.
    pub shim_cpu: Option<usize>,
    /// The slot the shim gave it (`None`: a helper's place on the housekeeper CPU).
    pub shim_slot: Option<usize>,
    /// The shim has it on the whole reservation (born while every slot had a running thread).
    pub shim_roams: bool,
    /// It is the main thread of a process the shim parked as a launcher (see
    /// [`crate::housekeeper::logtail::ShimThread`]); a launcher's other threads stay parked.
    pub shim_launcher: bool,
    /// Its process's standing with the shim (only asked of threads the shim did not log).
    pub kin: Kin,
    /// Read this poll; `false`: left unread while it sleeps, as its last read found it.
    pub read: bool,
}

impl Live {
    /// The demand the policy sees (see [`wanted`]).
    fn wanted(&self, policy: &Policy) -> f64 {
        wanted(self.demand, self.runnable, policy)
    }

    /// Busy since its last read (see [`is_busy`]); a thread left unread did not run.
    fn busy(&self, policy: &Policy) -> bool {
        self.read && is_busy(self.demand, self.runnable, &self.activity, policy)
    }

    /// The label of its records in the slot table: a main thread's tid, `-pid` otherwise.
    fn label(&self) -> i32 {
        slots::label(self.pid, self.tid == self.pid)
    }

    /// The label a launcher's record carries, its main thread's too: `-pid`, so that an image
    /// its pid execs never adopts it.
    fn label_as_other(&self) -> i32 {
        slots::label(self.pid, false)
    }
}

impl Placer {
    /// A placer over `table`, writing records to `log` (the placement log, opened `O_APPEND`),
    /// setting and reading masks through `affinity` ([`Kernel`] but in tests).
    pub fn new(
        table: &'static SlotTable,
        task_cpus: Vec<usize>,
        park_cpu: usize,
        speed: BTreeMap<usize, u32>,
        log: Option<std::fs::File>,
        affinity: Box<dyn Affinity>,
    ) -> Placer {
        Placer {
            table,
            parked_slot: task_cpus.iter().position(|&c| c == park_cpu),
            task_cpus,
            park_cpu,
            speed,
            affinity,
            records: Records::new(log),
            owned: BTreeMap::new(),
            failures: Vec::new(),
            polls: 0,
            clock: Instant::now(),
            handover: HandOver::default(),
            demand: Demand::default(),
            follow: Follow::default(),
        }
    }

    /// One poll: `live` are the threads alive now, `ended` those that ended since the last one.
    pub fn step(
        &mut self,
        live: &[Live],
        ended: &[i32],
        policy: &Policy,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        self.forget(ended);
        if !policy.place {
            self.polls += 1;
            return;
        }
        // The slots' blocks, read once a poll, and each process's as it is first met.
        let mut groups = Groups {
            slots: self.groups(),
            known: BTreeMap::new(),
        };
        let answered = self.answer_for(live, policy, &mut groups);
        let mut views = answered.views;
        views.extend(self.placeable(
            answered.unclaimed,
            live,
            &answered.assigned,
            policy,
            &mut groups,
            comm_of,
        ));
        let actions = decide(
            &views,
            &self.live_counts(),
            &groups.slots,
            self.parked_slot,
            policy,
        );
        self.carry_out(actions, live, comm_of);
        self.polls += 1;
        self.follow_retired(live, comm_of);
        self.follow_demand(live, policy, comm_of);
    }

    /// Forgets threads that ended; those the housekeeper placed give their claims back and get
    /// an exit record.
    fn forget(&mut self, ended: &[i32]) {
        for &tid in ended {
            self.handover.forget(tid);
            self.follow.forget(tid);
            self.demand.forget(tid);
            if let Some(o) = self.owned.get_mut(&tid) {
                if let Some(c) = o.claim.take() {
                    self.table.release(&c);
                }
                let o = o.clone();
                self.write(tid, &o, Event::Exit, None, None);
            }
        }
    }

    /// Sorts the live threads by who answers for them: the shim (a thread the housekeeper held
    /// is handed over), the housekeeper (its streaks counted, as a [`View`] for [`decide`]), or
    /// nobody (among them one the housekeeper placed that someone else moved since).
    fn answer_for<'a>(
        &mut self,
        live: &'a [Live],
        policy: &Policy,
        groups: &mut Groups,
    ) -> Answered<'a> {
        let mut out = Answered {
            views: Vec::new(),
            assigned: Vec::new(),
            unclaimed: Vec::new(),
        };
        for t in live {
            if t.shim_placed {
                self.hand_over(t);
                out.assigned.extend(t.shim_cpu);
                continue;
            }
            // Checked at every poll, read or not: a sleeper (left unread) is moved as easily.
            if self.moved_by_someone_else(t.tid) {
                out.unclaimed.push(t);
                continue;
            }
            let group = self.group_of(t.pid, groups);
            let Some(o) = self.owned.get_mut(&t.tid) else {
                out.unclaimed.push(t);
                continue;
            };
            // Idleness is counted in reads: a thread left unread is as it was.
            if t.read {
                (o.idle_polls, o.busy_polls) =
                    streaks_after_read((o.idle_polls, o.busy_polls), t.demand, t.runnable, policy);
            }
            out.views.push(View {
                tid: t.tid,
                demand: t.wanted(policy),
                spot: Some(o.spot),
                idle_polls: o.idle_polls,
                busy_polls: o.busy_polls,
                group,
            });
            out.assigned.push(o.cpu);
        }
        out
    }

    /// Carries out [`decide`]'s actions on `live` threads.
    fn carry_out(&mut self, actions: Vec<Action>, live: &[Live], comm_of: &dyn Fn(i32) -> String) {
        let by_tid: BTreeMap<i32, &Live> = live.iter().map(|t| (t.tid, t)).collect();
        for action in actions {
            match action {
                Action::Claim { tid, .. } | Action::Park { tid }
                    if self.changed_since_read(tid, comm_of) => {}
                Action::Claim { tid, slot } => self.claim(by_tid[&tid], slot, comm_of),
                Action::Park { tid } => {
                    let t = by_tid[&tid];
                    self.apply(t.tid, t.pid, &comm_of(t.tid), Spot::Parked, None);
                }
                Action::Demote { tid } => {
                    if let Some(c) = self.owned.get_mut(&tid).and_then(|o| o.claim.take()) {
                        self.table.release(&c);
                    }
                    let t = by_tid[&tid];
                    self.apply(t.tid, t.pid, &comm_of(t.tid), Spot::Parked, None);
                }
            }
        }
    }

    /// The block each planned slot is in: the pid of its process, 0 for none.
    fn groups(&self) -> Vec<u32> {
        (0..self.task_cpus.len())
            .map(|s| self.table.owner(s).unwrap_or(0))
            .collect()
    }

    /// The block process `pid` keeps to (see [`View::group`]), given the slots' blocks: its
    /// own, else the one its main thread's slot is in (a forked child's), else none (0).
    /// Looked up once a poll for each process, and not at all while no slot is in a block: the
    /// poll reads thousands of threads.
    fn group_of(&self, pid: i32, groups: &mut Groups) -> u32 {
        let slots = &groups.slots;
        if slots.iter().all(|&g| g == 0) {
            return 0;
        }
        *groups.known.entry(pid).or_insert_with(|| {
            if slots.contains(&(pid as u32)) {
                return pid as u32;
            }
            (self.table.find(pid))
                .and_then(|(_, slot)| slots.get(slot).copied())
                .unwrap_or(0)
        })
    }

    /// The live count of each planned slot. The plan's slots, not the table's count: the task
    /// can write anything into the table; a count no claims could have made looks full.
    fn live_counts(&self) -> Vec<u32> {
        self.table
            .live_counts(self.task_cpus.len())
            .map(|n| n.unwrap_or(goset_plan::slots::MAX_THREADS))
            .collect()
    }

    /// Pins `tid` to `cpu`. `Err(None)`: the thread is gone; `Err(Some(why))`: a failure to
    /// report (once).
    fn pin(&self, tid: i32, cpu: usize) -> Result<(), Option<String>> {
        self.pin_set(tid, &CpuSet::single(cpu))
    }

    /// Sets `tid`'s mask to `set`, as [`Placer::pin`].
    fn pin_set(&self, tid: i32, set: &CpuSet) -> Result<(), Option<String>> {
        let Err(e) = self.affinity.set(tid, set) else {
            return Ok(());
        };
        let mut cpus = String::new();
        let _ = goset_plan::cpulist::write_ranges(&mut cpus, set);
        let why = format!("cpu {cpus}: {e}");
        Err((e.raw_os_error() != Some(libc::ESRCH) && !self.failures.contains(&why)).then_some(why))
    }

    fn claim(&mut self, t: &Live, slot: usize, comm_of: &dyn Fn(i32) -> String) {
        let old = self.owned.get_mut(&t.tid).and_then(|o| o.claim.take());
        if let Some(c) = old {
            self.table.release(&c);
        }
        let Some(claim) = self.table.claim_at(t.tid, slot) else {
            return;
        };
        self.apply(
            t.tid,
            t.pid,
            &comm_of(t.tid),
            Spot::Slot(claim.slot),
            Some(claim),
        );
    }

    fn apply(&mut self, tid: i32, pid: i32, comm: &str, spot: Spot, claim: Option<Claim>) {
        let cpu = match spot {
            Spot::Slot(s) => self.task_cpus.get(s).copied().unwrap_or(self.park_cpu),
            Spot::Parked => self.park_cpu,
        };
        if let Err(why) = self.pin(tid, cpu) {
            if let Some(c) = claim {
                self.table.release(&c);
            }
            self.failures.extend(why);
            return;
        }
        let owned = Owned {
            pid,
            comm: comm.to_string(),
            spot,
            cpu,
            shared: claim.is_some_and(|c| c.shared),
            claim,
            idle_polls: 0,
            busy_polls: 0,
        };
        self.write(tid, &owned, Event::Place, Some(cpu), None);
        self.owned.insert(tid, owned);
    }

    /// Where it put threads, for the tree walk.
    pub fn placed(&self) -> Placed<'_> {
        Placed {
            owned: &self.owned,
            follow: &self.follow,
        }
    }

    /// Every record written, for tests (the run takes them at its end: [`Placer::take_records`]).
    #[cfg(test)]
    pub fn records(&self) -> &[Record] {
        self.records.written()
    }

    /// Takes the records written so far (the run ended).
    pub fn take_records(&mut self) -> Vec<Record> {
        self.records.take()
    }

    /// Gives back every claim still held (the task ended).
    pub fn release_all(&mut self) {
        for o in self.owned.values_mut() {
            if let Some(c) = o.claim.take() {
                self.table.release(&c);
            }
        }
    }
}

#[cfg(test)]
mod tests;
