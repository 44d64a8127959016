//! The demand rule carried out ([`super::super::policy::demand`] decides): each slot's running
//! count published for the shim's births, threads that take turns widened, busy threads moved to
//! a slot with no busy thread.

use super::{Live, Owned, Placer};
use crate::housekeeper::policy::claims::Mask;
use crate::housekeeper::policy::demand::{
    computes, ran_there, rebalance, rested, steady, takes_turns, turn_reservation, Busy, Move,
};
use crate::housekeeper::policy::placement::Spot;
use crate::housekeeper::policy::thresholds::Policy;
use goset_plan::log::Event;
use std::collections::{BTreeMap, BTreeSet};

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
    }

    /// The slot on whose CPU `t` runs, as the shim's records and the housekeeper's moves say
    /// (no system call); `None` for a thread on no slot's CPU (a helper, one that roams).
    fn slot_of(&self, t: &Live) -> Option<usize> {
        let cpu = if t.shim_placed {
            let slotless = t.shim_slot.is_none() && !t.shim_launcher;
            if slotless || self.widened.contains_key(&t.tid) {
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
            if let Some(&(slot, _)) = self.widened.get(&t.tid) {
                self.rewiden(t.tid, slot, &computing);
                continue;
            }
            if !self.turns_before.contains(&t.tid)
                || !rested(self.moved_at.get(&t.tid).copied(), now_s)
            {
                continue;
            }
            if let Some(slot) = self.slot_of(t) {
                self.widen(t, slot, &computing, now_s, comm_of);
            }
        }
        self.turns_before = turns;
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
        self.widened.insert(t.tid, (slot, t.shim_cpu));
        self.relocated.remove(&t.tid);
        self.moved_at.insert(t.tid, now_s);
        self.moves += 1;
        let a = &t.activity;
        let switches = (a.voluntary + a.involuntary).max(1);
        let mut cpus = String::new();
        let _ = goset_plan::cpulist::write_ranges(&mut cpus, &reservation);
        let reason = format!(
            "takes turns: {} runs of {} us on average since the last poll, {}% of its \
             switches voluntary: runs on cpus {cpus}",
            a.runs,
            a.run_ns / a.runs.max(1) / 1000,
            a.voluntary * 100 / switches
        );
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
    /// itself. The housekeeper's own threads are spread by [`crate::housekeeper::policy::placement::decide`].
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
            let ran_on =
                (t.activity.ran_on).and_then(|c| self.task_cpus.iter().position(|&x| x == c));
            busy.push(Busy {
                tid: t.tid,
                slot,
                roams,
                // A thread that roams holds no CPU a move could take from it: the dwell that
                // keeps a pinned thread from moving back and forth does not hold it (a rank
                // widened while it waited in MPI_Init computed a whole second unpinned beside
                // its own worker).
                movable: t.shim_placed
                    && (roams || rested(self.moved_at.get(&t.tid).copied(), now_s)),
                ran_on,
                // A roaming thread that computes needs no second poll: it holds no CPU, and
                // a move costs it nothing it had. A launcher does: it is seated on a slot of
                // the task's only when it computes at two polls (firejail's or a shell's
                // moment of work at start is no job).
                steady: (roams && !t.shim_launcher)
                    || steady(self.busy_before.get(&t.tid).copied(), slot),
            });
        }
        self.busy_before = now_busy;
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
                self.widened.remove(&t.tid);
                Some((s, false))
            }
            // On the reservation: it holds its record's slot, and gets a CPU of its own only
            // when it computes.
            _ if !computes(true, &t.activity) => None,
            _ => Some((self.widened.get(&t.tid).map_or(record_slot, |w| w.0), true)),
        }
    }

    /// The slot a busy launcher counts on: the one the housekeeper moved it to, else, while it
    /// computes parked on the housekeeper CPU, as a thread that roams (it holds no CPU of the
    /// task's, and gets a free slot before a doubled thread does).
    fn busy_launcher_slot(&self, t: &Live) -> Option<(usize, bool)> {
        if let Some(cpu) = self.relocated(t.tid, t.shim_cpu) {
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
        self.widened.remove(&t.tid);
        self.moved_at.insert(t.tid, now_s);
        self.relocate(t, cpu);
        self.moves += 1;
        let moved = Owned::moved(t.pid, comm_of(t.tid), m.to, cpu);
        let (left, reason) = if m.roamed && t.shim_launcher {
            let why = format!(
                "demand: a launcher computes on the housekeeper cpu {}, no busy thread on \
                 slot {} (cpu {cpu})",
                self.park_cpu, m.to
            );
            (Some(self.park_cpu), why)
        } else if m.roamed {
            let why = format!(
                "demand: computes on the reservation, no busy thread on slot {} (cpu {cpu})",
                m.to
            );
            (None, why)
        } else if crowd < 2 {
            let speed = |c: usize| self.speed.get(&c).copied().unwrap_or(1000) as f64 / 1000.0;
            let why = format!(
                "demand: busy on slot {} (cpu {from_cpu}, speed {:.2}), slot {} free on a faster kind (cpu {cpu}, speed {:.2})",
                m.from,
                speed(from_cpu),
                m.to,
                speed(cpu)
            );
            (Some(from_cpu), why)
        } else {
            let why = format!(
                "demand: {crowd} busy threads on slot {} (cpu {from_cpu}), none on slot {} (cpu {cpu})",
                m.from, m.to
            );
            (Some(from_cpu), why)
        };
        self.write(t.tid, &moved, Event::Move, Some(cpu), Some((left, reason)));
    }
}

#[cfg(test)]
mod tests {
    use super::super::affinity::{Affinity, Fake};
    use super::super::testing::{ran, table, unplaced};
    use super::*;
    use crate::housekeeper::policy::claims::Mask;
    use crate::housekeeper::policy::demand::Activity;

    #[test]
    fn a_compute_thread_on_a_slower_kind_takes_a_free_slot_of_a_faster_one() {
        // Slot 0 on a P-core (CPU 0), slot 1 on an E-core (CPU 1, 0.7 of it); park on CPU 2.
        let t = table(2);
        let fake = Fake::default();
        let speed = BTreeMap::from([(0, 1000), (1, 700)]);
        let mut p = Placer::new(t, vec![0, 1], 2, speed, None, Box::new(fake.clone()));
        let pid = std::process::id() as i32;
        let tid = pid + 1;
        // The shim placed a worker on slot 1; slot 0's thread has ended.
        t.claim_at(goset_plan::slots::label(pid, false), 1).unwrap();
        fake.put(tid, &[1]);
        let worker = Live {
            shim_placed: true,
            shim_slot: Some(1),
            shim_cpu: Some(1),
            ..unplaced(tid, 1.0)
        };
        let policy = Policy {
            spread_busy: true,
            ..Policy::default()
        };
        // Busy at one poll only: it stays (a change of demand, not one reading).
        p.step(&[worker], &[], &policy, &|_| "w".into());
        assert_eq!(fake.get(tid), Mask::Cpus(vec![1]), "{:?}", p.failures);
        // Busy at the next too: it takes the P-core's slot, and the log says why.
        p.step(&[worker], &[], &policy, &|_| "w".into());
        assert_eq!(fake.get(tid), Mask::Cpus(vec![0]), "{:?}", p.failures);
        let why = p
            .records
            .last()
            .and_then(|r| r.reason.clone())
            .unwrap_or_default();
        assert!(why.contains("faster kind"), "{why}");
        p.release_all();
    }

    #[test]
    fn a_launcher_that_computes_leaves_the_housekeeper_cpu_for_a_free_slot() {
        // Two slots on CPUs 0 and 1; the housekeeper on CPU 2, where the shim parks launchers.
        let t = table(2);
        let fake = Fake::default();
        let mut p = Placer::new(
            t,
            vec![0, 1],
            2,
            BTreeMap::new(),
            None,
            Box::new(fake.clone()),
        );
        let pid = std::process::id() as i32;
        // A compute thread busy on slot 0; a shell's main thread parked, its record on slot 0.
        let (worker, shell) = (pid + 1, pid);
        t.claim_at(goset_plan::slots::label(pid, false), 0).unwrap();
        let record = t
            .claim_among(goset_plan::slots::label(pid, false), 2)
            .unwrap();
        fake.put(worker, &[0]);
        fake.put(shell, &[2]);
        let computing = Live {
            shim_placed: true,
            shim_slot: Some(0),
            shim_cpu: Some(0),
            ..unplaced(worker, 1.0)
        };
        let launcher = Live {
            pid: shell,
            shim_placed: true,
            shim_cpu: Some(2),
            shim_launcher: true,
            ..unplaced(shell, 1.0)
        };
        let policy = Policy {
            spread_busy: true,
            ..Policy::default()
        };
        let idle = Live {
            activity: ran(0.0),
            demand: 0.0,
            ..launcher
        };
        // Parked and waiting: it stays.
        p.step(&[computing, idle], &[], &policy, &|_| "sh".into());
        assert_eq!(fake.get(shell), Mask::Cpus(vec![2]), "{:?}", p.failures);
        // Computing at one poll (a moment of work at start): it stays.
        p.step(&[computing, launcher], &[], &policy, &|_| "sh".into());
        assert_eq!(fake.get(shell), Mask::Cpus(vec![2]), "{:?}", p.failures);
        // Computing at the next too: it takes the slot no busy thread holds, record and thread.
        p.step(&[computing, launcher], &[], &policy, &|_| "sh".into());
        assert_eq!(fake.get(shell), Mask::Cpus(vec![1]), "{:?}", p.failures);
        assert_eq!(fake.get(worker), Mask::Cpus(vec![0]));
        let label = goset_plan::slots::label(pid, false);
        let slots: Vec<usize> = t.records().filter(|r| r.0 == label).map(|r| r.1).collect();
        assert!(
            slots.contains(&1),
            "the record moved to slot 1: {slots:?} (was {record:?})"
        );
        let why = p
            .records
            .last()
            .and_then(|r| r.reason.clone())
            .unwrap_or_default();
        assert!(why.contains("launcher computes"), "{why}");
        p.release_all();
    }

    #[test]
    fn a_widened_threads_cpus_follow_the_threads_that_compute() {
        // Three slots on CPUs 0-2, the housekeeper on CPU 3.
        let t = table(3);
        let fake = Fake::default();
        let mut p = Placer::new(
            t,
            vec![0, 1, 2],
            3,
            BTreeMap::new(),
            None,
            Box::new(fake.clone()),
        );
        let pid = std::process::id() as i32;
        let (rank, worker) = (pid + 1, pid + 2);
        t.claim_at(goset_plan::slots::label(pid, false), 0).unwrap();
        t.claim_at(goset_plan::slots::label(pid, false), 2).unwrap();
        fake.put(rank, &[0]);
        fake.put(worker, &[2]);
        // A rank's main thread yielding in MPI_Init: many short runs, all slept.
        let turns = Activity {
            ran: 0.3,
            runs: 3000,
            run_ns: 30_000_000,
            voluntary: 3000,
            involuntary: 0,
            ran_on: Some(0),
        };
        let waiting = Live {
            shim_placed: true,
            shim_slot: Some(0),
            shim_cpu: Some(0),
            activity: turns,
            demand: 0.3,
            ..unplaced(rank, 0.3)
        };
        let sleeping = Live {
            shim_placed: true,
            shim_slot: Some(2),
            shim_cpu: Some(2),
            activity: ran(0.0),
            demand: 0.0,
            ..unplaced(worker, 0.0)
        };
        let policy = Policy {
            spread_busy: true,
            ..Policy::default()
        };
        // Two polls of turns: it runs on every slot's CPU where nothing computes.
        p.step(&[waiting, sleeping], &[], &policy, &|_| "rank".into());
        p.step(&[waiting, sleeping], &[], &policy, &|_| "rank".into());
        assert_eq!(
            fake.get(rank),
            Mask::Cpus(vec![0, 1, 2]),
            "{:?}",
            p.failures
        );
        // Its worker starts computing on slot 2: that CPU leaves the rank's set.
        let computing = Live {
            activity: ran(1.0),
            demand: 1.0,
            ..sleeping
        };
        p.step(&[waiting, computing], &[], &policy, &|_| "rank".into());
        assert_eq!(fake.get(rank), Mask::Cpus(vec![0, 1]), "{:?}", p.failures);
        p.release_all();
    }
}
