//! The demand rule carried out ([`super::super::policy::demand`] decides): each slot's running
//! count published for the shim's births, threads that take turns widened, busy threads moved to
//! a slot with no busy thread.

use super::{Live, MoveReason, Owned, Placer};
use crate::housekeeper::policy::activity::ran_there;
use crate::housekeeper::policy::claims::Mask;
use crate::housekeeper::policy::demand::{rebalance, rested, steady, Busy, Move};
use crate::housekeeper::policy::thresholds::Policy;
use crate::housekeeper::policy::turns::{computes, takes_turns, turn_reservation};
use crate::housekeeper::policy::unplaced::Spot;
use goset_plan::log::Event;
use goset_plan::CpuSet;
use std::collections::{BTreeMap, BTreeSet};

/// The demand rule's state.
#[derive(Default)]
pub(super) struct Demand {
    /// When each thread the demand rule moved last moved, in seconds of the run's clock.
    moved_at: BTreeMap<i32, f64>,
    /// Threads the shim placed on a slot that the housekeeper let run on the whole reservation
    /// (they take turns): the slot their record holds, and the CPU of the shim's record they
    /// stand for.
    widened: BTreeMap<i32, (usize, Option<usize>)>,
    /// Threads found taking turns at the previous poll.
    turns_before: BTreeSet<i32>,
    /// The slot of each thread found busy at the previous poll.
    busy_before: BTreeMap<i32, usize>,
}

impl Demand {
    /// Forgets a thread that ended.
    pub(super) fn forget(&mut self, tid: i32) {
        self.widened.remove(&tid);
        self.moved_at.remove(&tid);
    }
}

impl Placer {
    /// The demand rule ([`crate::housekeeper::policy::demand`]) on the task's threads, at every poll: each
    /// slot's count of threads that ran there is published for the shim's next births; unless
    /// `--no-adapt`, a thread that takes turns runs on the whole reservation, and a busy thread
    /// moves to a slot with no busy thread, a roaming one first.
    pub(super) fn follow_demand(
        &mut self,
        live: &[Live],
        policy: &Policy,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        let mut running = vec![0u32; self.task_cpus.len()];
        for t in live.iter().filter(|t| t.read && ran_there(&t.activity)) {
            if let Some(slot) = self.slot_of(t) {
                running[slot] += 1;
            }
        }
        self.table.publish_running(&running);
        if !policy.spread_busy {
            return;
        }
        let now_s = self.clock.elapsed().as_secs_f64();
        self.widen_turn_takers(live, policy, now_s, comm_of);
        self.spread_busy(live, policy, now_s, comm_of);
        self.unseat_waiting_launchers(live, policy, comm_of);
    }

    /// A launcher the housekeeper seated that no longer computes goes back to the housekeeper
    /// CPU and gives its record back: it holds a slot only while it computes. Left seated,
    /// mpirun's record (it computed through its start-up) made its slot look taken, and the
    /// housekeeper put both threads of the static program it started on the other slot.
    fn unseat_waiting_launchers(
        &mut self,
        live: &[Live],
        policy: &Policy,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        for t in live
            .iter()
            .filter(|t| t.shim_launcher && t.shim_slot.is_none())
        {
            let Some(cpu) = self.seated_on(t.tid) else {
                continue;
            };
            if t.busy(policy) {
                continue;
            }
            // Back where the shim put it: the housekeeper CPU when that is not the task's,
            // else every slot's CPU (see the shim's `Config::launcher_set`).
            let park = self.park_cpu;
            let shared = self.task_cpus.contains(&park);
            let home: CpuSet = if shared {
                self.task_cpus.iter().copied().collect()
            } else {
                CpuSet::single(park)
            };
            if let Err(why) = self.pin_set(t.tid, &home) {
                self.failures.extend(why);
                continue;
            }
            self.table.release_all(t.label_as_other());
            self.follow.forget(t.tid);
            let slot = self.task_cpus.iter().position(|&c| c == cpu).unwrap_or(0);
            let parked = Owned {
                spot: Spot::Parked,
                ..Owned::moved(t.pid, comm_of(t.tid), slot, park)
            };
            let back = (!shared).then_some(park);
            let why = MoveReason::LauncherWaits { cpu, back };
            self.write(t.tid, &parked, Event::Move, back, Some((Some(cpu), why)));
        }
    }

    /// The slot on whose CPU `t` runs, as the shim's records and the housekeeper's moves say
    /// (no system call); `None` for a thread on no slot's CPU (a helper, one that roams).
    fn slot_of(&self, t: &Live) -> Option<usize> {
        let cpu = if t.shim_placed {
            let slotless = t.shim_slot.is_none() && !t.shim_launcher;
            if slotless || self.demand.widened.contains_key(&t.tid) {
                return None;
            }
            self.relocated(t.tid, t.shim_cpu).or(t.shim_cpu)?
        } else {
            match self.owned.get(&t.tid)?.spot {
                Spot::Slot(s) => return Some(s),
                Spot::Parked => return None,
            }
        };
        self.task_cpus.iter().position(|&c| c == cpu)
    }

    /// A thread the shim placed on a slot that takes turns at two reads in a row (see
    /// [`takes_turns`]) runs on the reservation from now on: its own CPU and those of the slots
    /// where no thread computes (compute threads keep their CPUs to themselves). Its partner's
    /// wakeups then stay on one CPU, as the kernel's wake-affine logic keeps them. Its record
    /// keeps its slot. With no such other slot it stays where it is.
    fn widen_turn_takers(
        &mut self,
        live: &[Live],
        policy: &Policy,
        now_s: f64,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        let mut turns = BTreeSet::new();
        let computing: BTreeSet<usize> = (live.iter())
            .filter(|t| computes(t.busy(policy), &t.activity))
            .filter_map(|t| self.slot_of(t))
            .collect();
        for t in live.iter().filter(|t| t.read && t.shim_placed) {
            if !takes_turns(&t.activity) {
                continue;
            }
            turns.insert(t.tid);
            if let Some(&(slot, _)) = self.demand.widened.get(&t.tid) {
                self.rewiden(t.tid, slot, &computing);
                continue;
            }
            if !self.demand.turns_before.contains(&t.tid)
                || !rested(self.demand.moved_at.get(&t.tid).copied(), now_s)
            {
                continue;
            }
            if let Some(slot) = self.slot_of(t) {
                self.widen(t, slot, &computing, now_s, comm_of);
            }
        }
        self.demand.turns_before = turns;
    }

    /// Keeps a widened thread's CPUs those of the slots where no thread computes now: a set
    /// made before a thread began to compute on one of them (a rank's OpenMP worker started
    /// while the rank waited in `MPI_Init`) let the rank run beside it.
    fn rewiden(&mut self, tid: i32, slot: usize, computing: &BTreeSet<usize>) {
        let Some(set) = turn_reservation(slot, &self.task_cpus, computing) else {
            return;
        };
        if self.affinity.get(tid) != Mask::Cpus(set.iter().collect()) {
            if let Err(why) = self.pin_set(tid, &set) {
                self.failures.extend(why);
            }
        }
    }

    /// Lets `t`, on slot `slot`, run on its [`turn_reservation`], with a `move` record.
    fn widen(
        &mut self,
        t: &Live,
        slot: usize,
        computing: &BTreeSet<usize>,
        now_s: f64,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        let Some(reservation) = turn_reservation(slot, &self.task_cpus, computing) else {
            return;
        };
        let from = self.task_cpus[slot];
        if let Err(why) = self.pin_set(t.tid, &reservation) {
            self.failures.extend(why);
            return;
        }
        self.demand.widened.insert(t.tid, (slot, t.shim_cpu));
        self.follow.forget(t.tid);
        self.demand.moved_at.insert(t.tid, now_s);
        let a = &t.activity;
        let switches = (a.voluntary + a.involuntary).max(1);
        let mut cpus = String::new();
        let _ = goset_plan::cpulist::write_ranges(&mut cpus, &reservation);
        let reason = MoveReason::TakesTurns {
            runs: a.runs,
            avg_run_us: a.run_ns / a.runs.max(1) / 1000,
            voluntary_pct: a.voluntary * 100 / switches,
            cpus,
        };
        let widened = Owned::moved(t.pid, comm_of(t.tid), slot, from);
        self.write(
            t.tid,
            &widened,
            Event::Move,
            None,
            Some((Some(from), reason)),
        );
    }

    /// Moves busy threads the shim placed to a slot with no busy thread ([`rebalance`]): a
    /// thread on the reservation that computes (born roaming, or that took turns) first, then
    /// one of a slot that holds two or more. The thread's record moves in the table (the shim
    /// answers its later affinity calls from there, and releases it there), then the thread
    /// itself. The housekeeper's own threads are spread by [`crate::housekeeper::policy::unplaced::decide`].
    fn spread_busy(
        &mut self,
        live: &[Live],
        policy: &Policy,
        now_s: f64,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        let busy = self.busy_threads(live, policy, now_s);
        if busy.is_empty() {
            return;
        }
        let crowd = |slot: usize| busy.iter().filter(|b| b.slot == slot && !b.roams).count();
        let newborn: Vec<bool> = (0..self.task_cpus.len())
            .map(|s| self.table.newborn_on(s))
            .collect();
        let speed = self.slot_speeds();
        for m in rebalance(&busy, &self.live_counts(), &self.groups(), &newborn, &speed) {
            let Some(t) = live.iter().find(|t| t.tid == m.tid) else {
                continue;
            };
            self.move_busy(t, &m, crowd(m.from), now_s, comm_of);
        }
    }

    /// Each slot's speed (its CPU's kind), for [`rebalance`].
    fn slot_speeds(&self) -> Vec<u32> {
        (self.task_cpus.iter())
            .map(|c| self.speed.get(c).copied().unwrap_or(1000))
            .collect()
    }

    /// The busy threads of `live` as [`rebalance`] sees them, each on the slot it counts on
    /// (remembered for the next poll's [`steady`]).
    fn busy_threads(&mut self, live: &[Live], policy: &Policy, now_s: f64) -> Vec<Busy> {
        let mut busy = Vec::new();
        let mut now_busy = BTreeMap::new();
        for t in live.iter().filter(|t| t.busy(policy)) {
            let Some((slot, roams)) = self.busy_slot(t) else {
                continue;
            };
            now_busy.insert(t.tid, slot);
            // Where it runs now, to stay there; not for a parked launcher, which runs on the
            // housekeeper CPU, where the next launcher is parked too.
            let ran_on = (t.activity.ran_on)
                .filter(|_| !(roams && t.shim_launcher))
                .and_then(|c| self.task_cpus.iter().position(|&x| x == c));
            busy.push(Busy {
                tid: t.tid,
                slot,
                roams,
                // A thread that roams holds no CPU a move could take from it: the dwell that
                // keeps a pinned thread from moving back and forth does not hold it (a rank
                // widened while it waited in MPI_Init computed a whole second unpinned beside
                // its own worker).
                movable: t.shim_placed
                    && (roams || rested(self.demand.moved_at.get(&t.tid).copied(), now_s)),
                ran_on,
                last: (roams && t.shim_launcher)
                    .then(|| self.task_cpus.iter().position(|&c| c == self.park_cpu))
                    .flatten(),
                // A roaming thread that computes needs no second poll: it holds no CPU, and
                // a move costs it nothing it had. A launcher does: seated, its record takes a
                // slot from the task's next process, so a moment of work (a shell's start, mpirun's
                // topology discovery) does not seat it.
                steady: (roams && !t.shim_launcher)
                    || steady(self.demand.busy_before.get(&t.tid).copied(), slot),
            });
        }
        self.demand.busy_before = now_busy;
        busy
    }

    /// The slot busy thread `t` counts on, and whether it roams the reservation; `None`: it
    /// neither counts nor moves.
    fn busy_slot(&mut self, t: &Live) -> Option<(usize, bool)> {
        if !t.shim_placed {
            return match self.owned.get(&t.tid)?.spot {
                Spot::Slot(s) => Some((s, false)),
                Spot::Parked => None,
            };
        }
        if t.shim_slot.is_none() && t.shim_launcher {
            return self.busy_launcher_slot(t);
        }
        // Slotless threads (helpers, `--skip`ped ones) are where the plan wants them: they
        // neither count nor move.
        let record_slot = t.shim_slot?;
        let Mask::Cpus(cpus) = self.affinity.get(t.tid) else {
            return None;
        };
        match cpus[..] {
            [cpu] => {
                let s = self.task_cpus.iter().position(|&c| c == cpu)?;
                // Back on one CPU (the program asked again): no longer widened.
                self.demand.widened.remove(&t.tid);
                Some((s, false))
            }
            // On the reservation: it holds its record's slot, and gets a CPU of its own only
            // when it computes.
            _ if !computes(true, &t.activity) => None,
            _ => Some((
                self.demand.widened.get(&t.tid).map_or(record_slot, |w| w.0),
                true,
            )),
        }
    }

    /// The CPU the housekeeper seated launcher `tid` on, if it did. Not
    /// [`Placer::relocated`]: the tree walk already reports a moved thread's CPU as the shim's
    /// (`shim_cpu`), and a launcher's record never changes (the shim does not place it again).
    fn seated_on(&self, tid: i32) -> Option<usize> {
        self.follow.moved_to(tid)
    }

    /// The slot a busy launcher counts on: the one the housekeeper moved it to, else, while it
    /// computes parked on the housekeeper CPU, as a thread that roams (it holds no CPU of the
    /// task's, and gets a free slot before a doubled thread does).
    fn busy_launcher_slot(&self, t: &Live) -> Option<(usize, bool)> {
        if let Some(cpu) = self.seated_on(t.tid) {
            return Some((self.task_cpus.iter().position(|&c| c == cpu)?, false));
        }
        if !computes(true, &t.activity) {
            return None;
        }
        // Its record, where it has one (the housekeeper seated it before); else a slot in no
        // process's block, the launcher's own group.
        let home = (self.table.find(t.label_as_other()).map(|(_, s)| s))
            .or_else(|| (0..self.task_cpus.len()).find(|&s| self.table.owner(s).is_none()))?;
        Some((home, true))
    }

    /// Carries out move `m` of busy thread `t`: its record in the table, then the thread, with
    /// a `move` record (`crowd`: the busy threads on the slot it leaves).
    fn move_busy(
        &mut self,
        t: &Live,
        m: &Move,
        crowd: usize,
        now_s: f64,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        let (Some(&from_cpu), Some(&cpu)) = (self.task_cpus.get(m.from), self.task_cpus.get(m.to))
        else {
            return;
        };
        let launcher = t.shim_launcher && t.shim_slot.is_none();
        let label = if launcher {
            t.label_as_other()
        } else {
            t.label()
        };
        // A launcher the shim parked holds no record: the housekeeper makes it one, released
        // by the launcher's process when it execs or exits (or by the reaper).
        let seated = if launcher && self.table.find(label).is_none() {
            let Some(claim) = self.table.claim_at(label, m.to) else {
                return;
            };
            Some(claim)
        } else {
            None
        };
        let record_moves = seated.is_none() && m.from != m.to;
        if record_moves && self.table.move_record(label, m.from, m.to).is_none() {
            return;
        }
        if let Err(why) = self.pin(t.tid, cpu) {
            if record_moves {
                self.table.move_record(label, m.to, m.from);
            }
            if let Some(claim) = seated {
                self.table.release(&claim);
            }
            self.failures.extend(why);
            return;
        }
        self.demand.widened.remove(&t.tid);
        self.demand.moved_at.insert(t.tid, now_s);
        self.follow.relocate(t, cpu);
        let moved = Owned::moved(t.pid, comm_of(t.tid), m.to, cpu);
        let (park, slot) = (self.park_cpu, m.to);
        let (left, reason) = if m.roamed && t.shim_launcher {
            (Some(park), MoveReason::LauncherComputes { park, slot, cpu })
        } else if m.roamed {
            (None, MoveReason::Roams { slot, cpu })
        } else if crowd < 2 {
            let speed = |c: usize| self.speed.get(&c).copied().unwrap_or(1000) as f64 / 1000.0;
            let why = MoveReason::FasterKind {
                from_slot: m.from,
                from_cpu,
                from_speed: speed(from_cpu),
                slot,
                cpu,
                speed: speed(cpu),
            };
            (Some(from_cpu), why)
        } else {
            let why = MoveReason::Crowded {
                crowd,
                from_slot: m.from,
                from_cpu,
                slot,
                cpu,
            };
            (Some(from_cpu), why)
        };
        self.write(t.tid, &moved, Event::Move, Some(cpu), Some((left, reason)));
    }
}

#[cfg(test)]
mod tests;
