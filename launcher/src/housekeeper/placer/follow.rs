//! Following moved slots: when a slot leaves a CPU that turned noisy, the threads allowed only
//! that CPU go with it, and the placer remembers where it moved threads the shim placed.
//!
//! Owns: [`Placer::move_slot`] and what follows from it at later polls (a thread found on a CPU
//! a slot left), and where the housekeeper moved threads the shim placed ([`Follow`]). Must
//! not: decide which slot moves (the noise rule does, [`crate::housekeeper::policy::noise`]).

use super::{Live, MoveReason, Owned, Placer};
use crate::housekeeper::policy::claims::Mask;
use crate::housekeeper::policy::noise::NoiseMove;
use crate::housekeeper::policy::unplaced::holds_slot;
use goset_plan::log::Event;
use std::collections::BTreeMap;

/// The follow rule's state.
#[derive(Default)]
pub struct Follow {
    /// CPUs a slot moved off when they turned noisy, with the slot: a thread found there
    /// later (placed as the slot moved) follows it.
    retired: BTreeMap<usize, usize>,
    /// Threads the shim placed that the housekeeper moved since: their CPU now, and the CPU
    /// of the shim's record it stands for (a later record of the shim's is newer).
    relocated: BTreeMap<i32, (usize, Option<usize>)>,
}

impl Follow {
    /// Notes that the housekeeper moved `t`, which the shim placed, to `cpu`.
    pub(super) fn relocate(&mut self, t: &Live, cpu: usize) {
        // Moved before: `t.shim_cpu` already is where it moved; the record's CPU is kept.
        let record = self.relocated.get(&t.tid).map_or(t.shim_cpu, |r| r.1);
        self.relocated.insert(t.tid, (cpu, record));
    }

    /// Where the housekeeper moved `tid` since the shim's record that placed it on
    /// `record_cpu`; `None` if it did not, or the shim placed it again since.
    pub fn relocated(&self, tid: i32, record_cpu: Option<usize>) -> Option<usize> {
        (self.relocated.get(&tid)).and_then(|&(cpu, record)| (record == record_cpu).then_some(cpu))
    }

    /// The CPU the housekeeper last moved `tid` to, whatever the shim's record says.
    pub(super) fn moved_to(&self, tid: i32) -> Option<usize> {
        self.relocated.get(&tid).map(|r| r.0)
    }

    /// Forgets where `tid` was moved: it ended, or the shim's record stands for it again.
    pub(super) fn forget(&mut self, tid: i32) {
        self.relocated.remove(&tid);
    }
}

impl Placer {
    /// See [`Follow::relocated`].
    pub(super) fn relocated(&self, tid: i32, record_cpu: Option<usize>) -> Option<usize> {
        self.follow.relocated(tid, record_cpu)
    }

    /// Each slot's CPU now, in slot order (a slot moves off a CPU that turns noisy).
    pub fn task_cpus(&self) -> &[usize] {
        &self.task_cpus
    }

    /// The task's slot table.
    pub fn table(&self) -> &'static goset_plan::slots::SlotTable {
        self.table
    }

    /// Moves slot `m.slot` off its noisy CPU: the slot table names the new CPU first (the shim
    /// answers and places from it from then on), then every live thread allowed only the old
    /// CPU moves, each with a `move` record giving `reason`.
    pub fn move_slot(
        &mut self,
        m: &NoiseMove,
        live: &[Live],
        reason: &MoveReason,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        self.table.move_slot(m.slot, m.to);
        if let Some(c) = self.task_cpus.get_mut(m.slot) {
            *c = m.to;
        }
        self.follow.retired.retain(|&cpu, _| cpu != m.to);
        self.follow.retired.insert(m.from, m.slot);
        self.follow_slot(m.from, m.slot, live.iter(), reason, comm_of);
    }

    /// Threads that ran on a CPU a slot left follow the slot: the shim may have placed one
    /// from the table as it changed.
    pub(super) fn follow_retired(&mut self, live: &[Live], comm_of: &dyn Fn(i32) -> String) {
        let retired: Vec<(usize, usize)> = (self.follow.retired.iter())
            .map(|(&c, &s)| (c, s))
            .collect();
        for (cpu, slot) in retired {
            let to = self.task_cpus.get(slot).copied().unwrap_or(cpu);
            let reason = MoveReason::SlotMoved {
                slot,
                from: cpu,
                to,
            };
            self.follow_slot(cpu, slot, live.iter().filter(|t| t.read), &reason, comm_of);
        }
    }

    /// Moves each of `threads` allowed only `from` to slot `slot`'s CPU.
    fn follow_slot<'a>(
        &mut self,
        from: usize,
        slot: usize,
        threads: impl Iterator<Item = &'a Live>,
        reason: &MoveReason,
        comm_of: &dyn Fn(i32) -> String,
    ) {
        let Some(&to) = self.task_cpus.get(slot) else {
            return;
        };
        for t in threads {
            let spot = self.owned.get(&t.tid).map(|o| o.spot);
            let holds_slot = holds_slot(t.shim_placed, t.shim_slot, spot);
            if !holds_slot || self.affinity.get(t.tid) != Mask::Cpus(vec![from]) {
                continue;
            }
            if let Err(why) = self.pin(t.tid, to) {
                self.failures.extend(why);
                continue;
            }
            let moved = match self.owned.get_mut(&t.tid) {
                Some(o) => {
                    o.cpu = to;
                    o.clone()
                }
                None => {
                    self.follow.relocate(t, to);
                    Owned::moved(t.pid, comm_of(t.tid), slot, to)
                }
            };
            self.write(
                t.tid,
                &moved,
                Event::Move,
                Some(to),
                Some((Some(from), reason.clone())),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::affinity::Affinity;
    use super::super::testing::{placer, table, unplaced};
    use super::*;
    use crate::housekeeper::policy::thresholds::Policy;

    #[test]
    fn a_slot_that_moves_takes_its_threads_and_leaves_the_helpers_parked_on_its_cpu() {
        let (c0, c1) = (0, 1);
        // The slot's CPU is also the park CPU (as with --cgroup on a small machine).
        let (mut p, fake) = placer(table(1), vec![c0], c0);
        let (worker, helper) = (101, 102);
        fake.put(worker, &[c0]);
        fake.put(helper, &[c0]);
        let shim = |tid: i32, slotted: bool| Live {
            shim_placed: true,
            shim_slot: slotted.then_some(0),
            shim_cpu: Some(c0),
            ..unplaced(tid, 0.0)
        };
        let m = NoiseMove {
            slot: 0,
            from: c0,
            to: c1,
            from_pct: 50.0,
            to_pct: 0.0,
            polls: 3,
        };
        let live = [shim(worker, true), shim(helper, false)];
        let why = MoveReason::SlotMoved {
            slot: 0,
            from: c0,
            to: c1,
        };
        p.move_slot(&m, &live, &why, &|_| "w".into());
        assert_eq!(p.task_cpus(), [c1]);
        assert_eq!(fake.get(worker), Mask::Cpus(vec![c1]), "{:?}", p.failures);
        assert_eq!(
            fake.get(helper),
            Mask::Cpus(vec![c0]),
            "a helper holds no slot"
        );
        assert_eq!(p.relocated(worker, Some(c0)), Some(c1));
        assert_eq!(p.relocated(helper, Some(c0)), None);
        // A newer record of the shim's (it placed the thread again) is the truth.
        assert_eq!(p.relocated(worker, Some(c1)), None);
        p.step(&[], &[worker], &Policy::default(), &|_| "w".into());
        assert_eq!(
            p.relocated(worker, Some(c0)),
            None,
            "forgotten when it ends"
        );
    }
}
