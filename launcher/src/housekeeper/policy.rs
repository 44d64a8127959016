//! The placement policy for threads the shim could not place: a pure function of observed
//! thread demand and slot loads ([`decide`]), and which threads someone else already placed
//! ([`leave_alone`]).
//!
//! Owns: the rules. Must not: read `/proc`, call `sched_*`, or touch the slot table; the
//! [`super::placer::Placer`] carries the decisions out.
//!
//! Policy: threads that burn CPU get the least-loaded slots, the hungriest first; threads that
//! mostly sleep (a runtime's sysmon, GC or I/O threads) go to the housekeeper CPU and move to a
//! slot once they burn CPU; a slotted thread that has slept for a few polls gives its slot back
//! (a runtime's main thread burns while it starts, then waits), and a burning thread that
//! shares a slot moves when a slot is emptier by two or more.

use std::collections::BTreeMap;

/// Where a thread the housekeeper placed is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spot {
    /// On the CPU of this slot.
    Slot(usize),
    /// On the housekeeper CPU, holding no slot.
    Housekeeper,
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
    /// Consecutive polls with demand below [`Policy::idle`].
    pub idle_polls: u32,
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
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            burn: 0.25,
            idle: 0.05,
            demote_after: 3,
        }
    }
}

/// What to do with one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Claim a slot (the expected one: the least loaded) and move there, giving back any slot
    /// the thread held.
    Claim { tid: i32, slot: usize },
    /// Move to the housekeeper CPU without a slot.
    Housekeeper { tid: i32 },
    /// Give the slot back and move to the housekeeper CPU.
    Demote { tid: i32 },
}

fn least_loaded(load: &[u32]) -> Option<usize> {
    (0..load.len()).min_by_key(|&s| (load[s], s))
}

/// The policy: actions for `threads` given the live count of each slot (`live[s]`, threads of
/// the shim and of the housekeeper alike). Demotions come first so that their slots are free
/// for the burners; burners claim in order of demand (then tid), each taking the least-loaded
/// slot (lowest index on ties, as [`goset_plan::SlotTable::claim_among`] does).
pub fn decide(threads: &[View], live: &[u32], policy: &Policy) -> Vec<Action> {
    let mut load = live.to_vec();
    let mut actions = Vec::new();
    for t in threads {
        if let Some(Spot::Slot(s)) = t.spot {
            if t.idle_polls >= policy.demote_after && t.demand < policy.burn {
                actions.push(Action::Demote { tid: t.tid });
                if let Some(l) = load.get_mut(s) {
                    *l = l.saturating_sub(1);
                }
            }
        }
    }
    let mut burners: Vec<&View> = threads.iter().filter(|t| t.demand >= policy.burn).collect();
    burners.sort_by(|a, b| b.demand.total_cmp(&a.demand).then(a.tid.cmp(&b.tid)));
    for t in burners {
        let Some(best) = least_loaded(&load) else {
            break;
        };
        match t.spot {
            Some(Spot::Slot(s)) => {
                // Move only when the other slot is emptier by two: with one fewer thread
                // there, moving would just swap which slot is shared.
                let here = load.get(s).copied().unwrap_or(0);
                if load[best] + 1 < here {
                    load[s] -= 1;
                    load[best] += 1;
                    // Claiming anew gives the old slot back first.
                    actions.push(Action::Claim {
                        tid: t.tid,
                        slot: best,
                    });
                }
            }
            _ => {
                load[best] += 1;
                actions.push(Action::Claim {
                    tid: t.tid,
                    slot: best,
                });
            }
        }
    }
    for t in threads {
        if t.spot.is_none() && t.demand < policy.burn {
            actions.push(Action::Housekeeper { tid: t.tid });
        }
    }
    actions
}

/// What `sched_getaffinity` said about a thread nobody claims yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mask {
    /// The CPUs it may run on.
    Cpus(Vec<usize>),
    /// It could not be read (the thread is gone, or not ours): nothing to place.
    Unknown,
}

/// Which of the threads that neither the shim logged nor the housekeeper owns were placed by
/// someone else and are left alone: those allowed a single planned CPU that is not the
/// housekeeper's and that no other thread of the tree has (`masks`: the unclaimed threads;
/// `assigned`: the CPU of each live thread the shim logged or the housekeeper owns). The
/// program pinned such a thread itself, or the shim did before an exec into a static binary.
/// A mask inherited from a parent is no placement: a launcher's children (moved to the
/// housekeeper CPU by the shim) inherit `{housekeeper}`, and every thread of a static program
/// inherits its main thread's CPU, so a CPU two threads share is nobody's placement.
pub fn leave_alone(
    masks: &[(i32, Mask)],
    assigned: &[usize],
    task_cpus: &[usize],
    housekeeper: usize,
) -> Vec<bool> {
    let mut holders: BTreeMap<usize, usize> = BTreeMap::new();
    for &cpu in assigned {
        *holders.entry(cpu).or_default() += 1;
    }
    for (_, m) in masks {
        if let Mask::Cpus(c) = m {
            if let [cpu] = c[..] {
                *holders.entry(cpu).or_default() += 1;
            }
        }
    }
    masks
        .iter()
        .map(|(_, m)| match m {
            Mask::Unknown => true,
            Mask::Cpus(c) => match c[..] {
                [cpu] => cpu != housekeeper && task_cpus.contains(&cpu) && holders[&cpu] == 1,
                _ => false,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(tid: i32, demand: f64, spot: Option<Spot>, idle_polls: u32) -> View {
        View {
            tid,
            demand,
            spot,
            idle_polls,
        }
    }

    #[test]
    fn burners_take_least_loaded_slots_hungriest_first_sleepers_go_home() {
        let p = Policy::default();
        // Slot 0 holds a shim thread; a Go program: two spinning threads, sysmon, an idle M.
        let threads = [
            v(10, 0.01, None, 0),
            v(11, 0.6, None, 0),
            v(12, 1.0, None, 0),
            v(13, 0.0, None, 0),
        ];
        let a = decide(&threads, &[1, 0, 0], &p);
        assert_eq!(
            a,
            vec![
                Action::Claim { tid: 12, slot: 1 },
                Action::Claim { tid: 11, slot: 2 },
                Action::Housekeeper { tid: 10 },
                Action::Housekeeper { tid: 13 },
            ]
        );
        // More burners than slots: they share, the least loaded first.
        let a = decide(&threads, &[0, 0], &p);
        assert_eq!(
            &a[..2],
            &[
                Action::Claim { tid: 12, slot: 0 },
                Action::Claim { tid: 11, slot: 1 }
            ]
        );
        assert!(decide(&[], &[0], &p).is_empty());
    }

    #[test]
    fn a_sleeper_that_starts_burning_moves_to_a_slot() {
        let p = Policy::default();
        let a = decide(&[v(5, 0.9, Some(Spot::Housekeeper), 0)], &[1, 0], &p);
        assert_eq!(a, vec![Action::Claim { tid: 5, slot: 1 }]);
        let a = decide(&[v(5, 0.1, Some(Spot::Housekeeper), 0)], &[1, 0], &p);
        assert!(a.is_empty(), "{a:?}");
    }

    #[test]
    fn an_idle_slot_holder_gives_its_slot_to_a_burner() {
        let p = Policy::default();
        // A static program's main thread took slot 0 while it started, then waits in join;
        // its two workers burn, one of them sharing slot 0.
        let threads = [
            v(1, 0.0, Some(Spot::Slot(0)), 3),
            v(2, 1.0, Some(Spot::Slot(1)), 0),
            v(3, 1.0, Some(Spot::Slot(0)), 0),
        ];
        let a = decide(&threads, &[2, 1], &p);
        assert_eq!(a, vec![Action::Demote { tid: 1 }]);
        // Not idle for long enough: it keeps the slot.
        let threads = [v(1, 0.0, Some(Spot::Slot(0)), 2), threads[1], threads[2]];
        assert!(decide(&threads, &[2, 1], &p).is_empty());
    }

    #[test]
    fn a_burner_sharing_a_slot_moves_only_when_another_is_emptier_by_two() {
        let p = Policy::default();
        let threads = [v(7, 1.0, Some(Spot::Slot(0)), 0)];
        assert_eq!(
            decide(&threads, &[2, 0], &p),
            vec![Action::Claim { tid: 7, slot: 1 }]
        );
        assert!(decide(&threads, &[2, 1], &p).is_empty());
        assert!(decide(&threads, &[1, 0], &p).is_empty());
    }

    #[test]
    fn an_inherited_mask_is_no_placement() {
        let one = |c: usize| Mask::Cpus(vec![c]);
        // -n 2 on 2 CPUs: task CPUs 1 and 0, the housekeeper shares CPU 0. A static program
        // run by `sh` (moved to CPU 0 by the shim): every thread inherited {0}.
        let masks = [(10, one(0)), (11, one(0)), (12, one(0))];
        assert_eq!(leave_alone(&masks, &[0], &[1, 0], 0), [false; 3]);
        // Even alone, {housekeeper} is not a placement without a shim record.
        assert_eq!(leave_alone(&[(10, one(0))], &[], &[1, 0], 0), [false]);
        // Two threads inheriting the planned CPU of a main thread the shim placed before it
        // exec'd a static binary: the CPU is the main thread's.
        assert_eq!(
            leave_alone(&[(11, one(1)), (12, one(1))], &[1], &[1, 0], 0),
            [false, false]
        );
        assert_eq!(leave_alone(&[(11, one(1))], &[1], &[1, 0], 0), [false]);
        // A thread the program pinned itself on a planned CPU of its own is left; a mask of
        // several CPUs, or one outside the plan, is not a placement; an unreadable one is
        // nothing to place.
        let masks = [
            (20, one(1)),
            (21, Mask::Cpus(vec![0, 1])),
            (22, one(5)),
            (23, Mask::Unknown),
        ];
        assert_eq!(
            leave_alone(&masks, &[], &[1, 2], 0),
            [true, false, false, true]
        );
    }
}
