//! Who answers for a thread while others act on it: the shim (its record came), the program or
//! another tool (the mask the housekeeper set changed), or nobody yet (a mask that changed
//! between the housekeeper's read and its pin).
//!
//! Owns: handing a thread over to the shim ([`Placer::hand_over`]), giving up a thread someone
//! else moved ([`Placer::moved_by_someone_else`]), choosing which threads nobody claims are
//! placed this poll ([`Placer::placeable`]: not while their masks settle), and not placing a
//! thread whose mask changed since the poll read it ([`Placer::changed_since_read`]), with the
//! state of all that ([`HandOver`]). Must not: decide where a thread goes (the policy does).

use super::{Groups, Live, MoveReason, Owned, Placer};
use crate::housekeeper::policy::claims::{leave_alone, pending_claims, Mask, Unclaimed};
use crate::housekeeper::policy::thresholds::Policy;
use crate::housekeeper::policy::unplaced::{settled, Spot, View};
use goset_plan::log::Event;
use std::collections::BTreeMap;

/// The hand-over rule's state.
#[derive(Default)]
pub(super) struct HandOver {
    /// Threads seen unplaced at the previous poll, with the mask and the name they had.
    pending: BTreeMap<i32, (Mask, String)>,
    /// The mask of each thread nobody claims that this poll may place, as read for the
    /// decision (see [`Placer::changed_since_read`]).
    read_masks: BTreeMap<i32, Mask>,
}

impl HandOver {
    /// Forgets a thread that ended.
    pub(super) fn forget(&mut self, tid: i32) {
        self.pending.remove(&tid);
        self.read_masks.remove(&tid);
    }
}

impl Placer {
    /// The threads nobody claims that are to be placed now, as [`View`]s: not those someone
    /// else placed ([`leave_alone`]), nor one whose mask changed since the last poll (kept
    /// pending until it holds still, see [`settled`]). `assigned`: as [`Answered::assigned`].
    pub(super) fn placeable(
        &mut self,
        unclaimed: Vec<&Live>,
        live: &[Live],
        assigned: &[usize],
        policy: &Policy,
        groups: &mut Groups,
        comm_of: &dyn Fn(i32) -> String,
    ) -> Vec<View> {
        let masks: Vec<Unclaimed> = unclaimed
            .iter()
            .map(|t| Unclaimed {
                tid: t.tid,
                pid: t.pid,
                mask: self.affinity.get(t.tid),
                kin: t.kin,
            })
            .collect();
        let pending = if masks.is_empty() {
            BTreeMap::new()
        } else {
            let own: Vec<(i32, usize)> = (self.owned.iter())
                .filter_map(|(&tid, o)| Some((tid, o.claim?.slot)))
                .collect();
            let logged = logged_claims(live, &self.task_cpus);
            pending_claims(self.table.records(), &own, &logged, &self.task_cpus)
        };
        let left = leave_alone(&masks, &pending, assigned, &self.task_cpus, self.park_cpu);
        self.handover.read_masks.clear();
        let mut views = Vec::new();
        let mut pending = BTreeMap::new();
        for ((t, left), seen) in unclaimed.into_iter().zip(left).zip(masks) {
            if left {
                continue;
            }
            // A mask that changed since the last poll is being set now: by the shim, whose
            // record may lag a poll (a thread it sends to the housekeeper CPU waits there
            // until the housekeeper sleeps), or by the program. Placed once it holds still.
            let comm = comm_of(t.tid);
            let before = (self.handover.pending.get(&t.tid)).map(|(m, c)| (m, c.as_str()));
            if settled(before, (&seen.mask, &comm), t.age_s) {
                self.handover.read_masks.insert(t.tid, seen.mask);
                views.push(View {
                    tid: t.tid,
                    demand: t.wanted(policy),
                    spot: None,
                    idle_polls: 0,
                    busy_polls: 0,
                    group: self.group_of(t.pid, groups),
                });
            } else {
                pending.insert(t.tid, (seen.mask, comm));
            }
        }
        self.handover.pending = pending;
        views
    }

    /// Whether a live thread the housekeeper placed is no longer allowed just the CPU it was
    /// given (the program, another tool or the kernel changed its mask): it is then given up,
    /// its claim released and an [`Event::Moved`] record written, and looked at afresh as any
    /// thread nobody claims. The placer's view is the kernel's, never only its own memory: a
    /// thread believed moved that is not would hold a CPU beside another forever.
    pub(super) fn moved_by_someone_else(&mut self, tid: i32) -> bool {
        let Some(o) = self.owned.get(&tid) else {
            return false;
        };
        let Mask::Cpus(now) = self.affinity.get(tid) else {
            return false;
        };
        if now == [o.cpu] {
            return false;
        }
        let Some(mut o) = self.owned.remove(&tid) else {
            return false;
        };
        if let Some(c) = o.claim.take() {
            self.table.release(&c);
        }
        let single = match now[..] {
            [cpu] => Some(cpu),
            _ => None,
        };
        self.write(tid, &o, Event::Moved, single, None);
        true
    }

    /// The shim has a record for thread `t`, which the housekeeper placed (it was racing with
    /// ld.so): the shim owns it from now on. A main thread's claim was adopted by the shim (it
    /// looks its pid up in the table) when the shim came second, so it is left; any other claim
    /// is given back.
    ///
    /// When the housekeeper's pin came second (it read the thread before the shim placed it,
    /// and pinned it after: a busy machine can hold a poll that long), the thread is still
    /// allowed only the housekeeper's CPU while the shim's record names another, and the shim
    /// never saw the housekeeper's claim: the claim is given back and the thread goes back to
    /// the shim's CPU, with a `move` record. Seen in a loaded guest: a process's main thread
    /// pinned off its block, its team on two nodes.
    pub(super) fn hand_over(&mut self, t: &Live) {
        let Some(mut o) = self.owned.remove(&t.tid) else {
            return;
        };
        let shims = t.shim_cpu.filter(|&cpu| cpu != o.cpu);
        let ours_last = shims.is_some() && self.affinity.get(t.tid) == Mask::Cpus(vec![o.cpu]);
        if let Some(c) = o.claim.take() {
            if t.tid != o.pid || ours_last {
                self.table.release(&c);
            }
        }
        let Some(cpu) = shims.filter(|_| ours_last) else {
            return;
        };
        if self.pin(t.tid, cpu).is_ok() {
            let from = o.cpu;
            let why = MoveReason::HandOver { cpu, pinned: from };
            let back = Owned {
                spot: t.shim_slot.map_or(Spot::Parked, Spot::Slot),
                cpu,
                claim: None,
                ..o
            };
            self.write(
                t.tid,
                &back,
                Event::Move,
                Some(cpu),
                Some((Some(from), why)),
            );
        }
    }

    /// Whether thread `tid`, which nobody claims, has another mask now than when this poll read
    /// it for its decision: the shim or the program is placing it, and its record may lag. It
    /// is then not placed this poll; the next one looks at it afresh.
    pub(super) fn changed_since_read(&mut self, tid: i32, comm_of: &dyn Fn(i32) -> String) -> bool {
        let Some(read) = self.handover.read_masks.get(&tid) else {
            return false;
        };
        let now = self.affinity.get(tid);
        if now == *read {
            return false;
        }
        self.handover.pending.insert(tid, (now, comm_of(tid)));
        true
    }
}

/// The claims the shim's records account for, as [`pending_claims`] keys them: each logged
/// thread's pid and the CPU of its record's slot: where it runs, or, for a thread that roams
/// the slots' CPUs (and the housekeeper has not moved), its record's slot's CPU. Left out, a
/// roaming thread's claim stayed pending for good, and a thread without a record on that CPU
/// (one created behind the shim's back: jemalloc finds `pthread_create` with
/// `dlsym(RTLD_NEXT)`) was left alone beside a busy one, as if the shim had placed it.
pub(super) fn logged_claims(live: &[Live], task_cpus: &[usize]) -> Vec<(i32, usize)> {
    (live.iter())
        .filter(|t| t.shim_placed)
        .filter_map(|t| {
            let roaming = t.shim_slot.filter(|_| t.shim_roams);
            let cpu = t.shim_cpu.or_else(|| task_cpus.get(roaming?).copied())?;
            Some((t.pid, cpu))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::affinity::{Affinity, Fake};
    use super::super::testing::{placer, table, unplaced, WIDE};
    use super::*;
    use crate::housekeeper::policy::thresholds::Policy;
    use crate::housekeeper::policy::unplaced::Spot;

    /// A process's main thread (tid = pid), busy, on the test's wide mask.
    fn main_thread(fake: &Fake) -> Live {
        let mut t = unplaced(4242, 1.0);
        t.pid = t.tid;
        fake.put(t.tid, WIDE);
        t
    }

    #[test]
    fn a_thread_the_shim_places_between_the_read_and_the_pin_is_left_to_it() {
        let table = table(2);
        let (mut p, fake) = placer(table, vec![2, 3], 0);
        let t = main_thread(&fake);
        // The shim claims slot 1 and pins the thread to its CPU right after the poll read it.
        fake.put_after_read(t.tid, &[3]);
        table.claim_at(t.tid, 1).unwrap();
        p.step(&[t], &[], &Policy::default(), &|_| "m".into());
        assert_eq!(fake.get(t.tid), Mask::Cpus(vec![3]), "{:?}", p.records());
        assert!(
            p.records().is_empty() && p.owned.is_empty(),
            "{:?}",
            p.records()
        );
        assert_eq!((table.live(0), table.live(1)), (0, 1));
    }

    #[test]
    fn a_pin_that_landed_after_the_shims_gives_the_thread_back_to_the_shims_cpu() {
        let table = table(2);
        let (mut p, fake) = placer(table, vec![2, 3], 0);
        let mut t = main_thread(&fake);
        p.step(&[t], &[], &Policy::default(), &|_| "m".into());
        assert_eq!(p.owned[&t.tid].spot, Spot::Slot(0));
        assert_eq!(fake.get(t.tid), Mask::Cpus(vec![2]));
        // The shim had placed it on slot 1 (CPU 3) before that pin; its record comes now.
        table.claim_at(t.tid, 1).unwrap();
        (t.shim_placed, t.shim_cpu, t.shim_slot) = (true, Some(3), Some(1));
        p.step(&[t], &[], &Policy::default(), &|_| "m".into());
        assert_eq!(fake.get(t.tid), Mask::Cpus(vec![3]));
        assert_eq!(
            (table.live(0), table.live(1)),
            (0, 1),
            "the housekeeper's claim is given back"
        );
        let last = p.records().last().unwrap();
        assert_eq!(
            (last.event.as_str(), last.cpu),
            ("move", Some(3)),
            "{last:?}"
        );
        assert!(p.owned.is_empty());
    }

    #[test]
    fn a_main_thread_whose_claim_the_shim_adopted_keeps_it() {
        let table = table(2);
        let (mut p, fake) = placer(table, vec![2, 3], 0);
        let mut t = main_thread(&fake);
        p.step(&[t], &[], &Policy::default(), &|_| "m".into());
        // The shim came second: it found the claim under its pid and stayed on its CPU.
        (t.shim_placed, t.shim_cpu, t.shim_slot) = (true, Some(2), Some(0));
        p.step(&[t], &[], &Policy::default(), &|_| "m".into());
        assert_eq!(fake.get(t.tid), Mask::Cpus(vec![2]));
        assert_eq!((table.live(0), table.live(1)), (1, 0));
        assert_eq!(p.records().len(), 1, "{:?}", p.records());
    }
}
