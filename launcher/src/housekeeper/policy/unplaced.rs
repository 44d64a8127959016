//! The unplaced-thread rule, for threads the shim could not place: a pure function of observed
//! thread demand and slot loads ([`decide`]), with its thresholds ([`Policy`]).
//!
//! Threads that burn CPU get the least-loaded slots, the hungriest first; threads that mostly
//! sleep (a runtime's sysmon, GC or I/O threads) are parked (on the park CPU: the housekeeper
//! CPU, or a task CPU under `--cgroup`) and move to a slot once they burn CPU; a slotted thread
//! that has slept for a few polls gives its slot back (a runtime's main thread burns while it
//! starts, then waits), and a burning thread that shares a slot moves when a slot is emptier by
//! two or more. When the park CPU is a task CPU (no CPU was left outside the plan, or
//! `--cgroup`), the sleepers parked there sit on that slot's CPU: a burner goes beside them
//! only when no slot is empty, and one there moves to an empty slot.

use super::activity::wanted;
use super::claims::Mask;
use super::thresholds::Policy;

/// Where a thread the housekeeper placed is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spot {
    /// On the CPU of this slot.
    Slot(usize),
    /// On the park CPU ([`crate::housekeeper::Settings::park_cpu`]), holding no slot.
    Parked,
}

impl Spot {
    /// The role the report shows for a thread the housekeeper placed here.
    pub fn role(self) -> goset_plan::log::Role {
        match self {
            Spot::Slot(_) => goset_plan::log::Role::Worker,
            Spot::Parked => goset_plan::log::Role::Helper,
        }
    }
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

/// A thread younger than this at first sight is given until the next poll: the shim places its
/// threads within microseconds of their birth, and must not find a slot claimed twice.
pub const GRACE_S: f64 = 0.02;

/// Whether the housekeeper may place a thread nobody claims: its mask and its name are the
/// ones seen at the poll before (`before`; a mask being set is the shim's or the program's
/// doing, and a name that changed may be an `execve` whose new image's shim is about to place
/// the thread: a static shell's child between its exec and the new image's constructor), or,
/// at first sight, it is older than [`GRACE_S`].
pub fn settled(before: Option<(&Mask, &str)>, now: (&Mask, &str), age_s: f64) -> bool {
    match before {
        Some(b) => b == now,
        None => age_s >= GRACE_S,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_placed_once_its_mask_holds_still() {
        let one = Mask::Cpus(vec![1]);
        let two = Mask::Cpus(vec![0, 1]);
        assert!(!settled(None, (&one, "sh"), GRACE_S / 2.0));
        assert!(settled(None, (&one, "sh"), GRACE_S));
        assert!(!settled(Some((&two, "sh")), (&one, "sh"), 5.0));
        assert!(settled(Some((&one, "sh")), (&one, "sh"), 0.0));
        // The same mask under a new name: an exec, whose shim may be placing the thread now.
        assert!(!settled(Some((&one, "sh")), (&one, "omp_gomp"), 5.0));
    }

    /// A thread whose demand held for the polls the policy waits for.
    fn v(tid: i32, demand: f64, spot: Option<Spot>, idle_polls: u32) -> View {
        let held = Policy::default().promote_after;
        View {
            tid,
            demand,
            spot,
            idle_polls,
            busy_polls: if demand >= Policy::default().burn {
                held
            } else {
                0
            },
            group: 0,
        }
    }

    #[test]
    fn a_thread_left_on_a_slot_a_block_took_leaves_it() {
        let p = Policy::default();
        // Slot 0 in process 7's block now; a sleeper and a burner of no block still on it.
        let sleeper = v(5, 0.0, Some(Spot::Slot(0)), 0);
        let burner = v(6, 0.9, Some(Spot::Slot(0)), 0);
        let a = decide(&[sleeper, burner], &[2, 0], &[7, 0], None, &p);
        assert_eq!(
            a,
            [Action::Demote { tid: 5 }, Action::Claim { tid: 6, slot: 1 }]
        );
        // With no slot outside blocks, the burner goes to the housekeeper CPU too.
        let a = decide(&[burner], &[1, 0], &[7, 7], None, &p);
        assert_eq!(a, [Action::Demote { tid: 6 }]);
    }

    #[test]
    fn a_burner_takes_a_slot_of_its_own_block_only() {
        let p = Policy::default();
        // Slots 0-1: process 7's block, slot 2 in none. Process 7's burner takes slot 1 (the
        // emptier slot 2 is not its own); a burner of no block takes slot 2.
        let mut mine = v(5, 0.9, None, 0);
        mine.group = 7;
        let other = v(6, 0.9, None, 0);
        let a = decide(&[mine, other], &[2, 1, 0], &[7, 7, 0], None, &p);
        assert_eq!(
            a,
            [
                Action::Claim { tid: 5, slot: 1 },
                Action::Claim { tid: 6, slot: 2 }
            ]
        );
    }

    #[test]
    fn a_parked_thread_busy_for_one_poll_stays_parked() {
        let p = Policy::default();
        let once = View {
            busy_polls: 1,
            ..v(10, 0.9, Some(Spot::Parked), 0)
        };
        assert!(decide(&[once], &[0, 0], &[], None, &p).is_empty());
        let held = v(10, 0.9, Some(Spot::Parked), 0);
        assert_eq!(
            decide(&[held], &[0, 0], &[], None, &p),
            [Action::Claim { tid: 10, slot: 0 }]
        );
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
        let a = decide(&threads, &[1, 0, 0], &[], None, &p);
        assert_eq!(
            a,
            vec![
                Action::Park { tid: 10 },
                Action::Park { tid: 13 },
                Action::Claim { tid: 12, slot: 1 },
                Action::Claim { tid: 11, slot: 2 },
            ]
        );
        // More burners than slots: they share, the least loaded first.
        let a = decide(&threads, &[0, 0], &[], None, &p);
        assert_eq!(
            &a[2..],
            &[
                Action::Claim { tid: 12, slot: 0 },
                Action::Claim { tid: 11, slot: 1 }
            ]
        );
        assert!(decide(&[], &[0], &[], None, &p).is_empty());
    }

    #[test]
    fn a_sleeper_that_starts_burning_moves_to_a_slot() {
        let p = Policy::default();
        let a = decide(&[v(5, 0.9, Some(Spot::Parked), 0)], &[1, 0], &[], None, &p);
        assert_eq!(a, vec![Action::Claim { tid: 5, slot: 1 }]);
        let a = decide(&[v(5, 0.1, Some(Spot::Parked), 0)], &[1, 0], &[], None, &p);
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
        let a = decide(&threads, &[2, 1], &[], None, &p);
        assert_eq!(a, vec![Action::Demote { tid: 1 }]);
        // Not idle for long enough: it keeps the slot.
        let threads = [v(1, 0.0, Some(Spot::Slot(0)), 2), threads[1], threads[2]];
        assert!(decide(&threads, &[2, 1], &[], None, &p).is_empty());
    }

    #[test]
    fn a_burner_sharing_a_slot_moves_only_when_another_is_emptier_by_two() {
        let p = Policy::default();
        let threads = [v(7, 1.0, Some(Spot::Slot(0)), 0)];
        assert_eq!(
            decide(&threads, &[2, 0], &[], None, &p),
            vec![Action::Claim { tid: 7, slot: 1 }]
        );
        assert!(decide(&threads, &[2, 1], &[], None, &p).is_empty());
        assert!(decide(&threads, &[1, 0], &[], None, &p).is_empty());
    }

    #[test]
    fn with_the_housekeeper_on_a_task_cpu_a_burner_goes_beside_a_sleeper_only_when_it_must() {
        let p = Policy::default();
        // -n 3 on three CPUs, the housekeeper on slot 2's: a static program's main thread held
        // slot 0 while it started and now waits in join; its workers hold slots 1 and 2.
        let threads = [
            v(1, 0.0, Some(Spot::Slot(0)), 3),
            v(2, 1.0, Some(Spot::Slot(1)), 0),
            v(3, 1.0, Some(Spot::Slot(2)), 0),
        ];
        // Parked beside worker 3, the main thread leaves slot 0 empty: 3 moves there.
        assert_eq!(
            decide(&threads, &[1, 1, 1], &[], Some(2), &p),
            vec![Action::Demote { tid: 1 }, Action::Claim { tid: 3, slot: 0 }]
        );
        // Without the shared CPU the parked thread is nobody's neighbour.
        assert_eq!(
            decide(&threads, &[1, 1, 1], &[], None, &p),
            vec![Action::Demote { tid: 1 }]
        );
        // A new sleeper parks first: the burners take the empty slot, then the sleeper's
        // rather than a burner's.
        let fresh = [v(4, 0.0, None, 0), v(5, 1.0, None, 0), v(6, 0.9, None, 0)];
        assert_eq!(
            decide(&fresh, &[0, 0], &[], Some(1), &p),
            vec![
                Action::Park { tid: 4 },
                Action::Claim { tid: 5, slot: 0 },
                Action::Claim { tid: 6, slot: 1 }
            ]
        );
        // Beside a sleeper with every other slot taken, a burner stays.
        let settled = [
            v(4, 0.0, Some(Spot::Parked), 0),
            v(5, 1.0, Some(Spot::Slot(0)), 0),
            v(6, 0.9, Some(Spot::Slot(1)), 0),
        ];
        assert!(decide(&settled, &[1, 1], &[], Some(1), &p).is_empty());
        // A parked burner leaves its share before it looks for the least-loaded slot.
        let parked = [v(7, 1.0, Some(Spot::Parked), 0)];
        assert_eq!(
            decide(&parked, &[1, 0], &[], Some(1), &p),
            vec![Action::Claim { tid: 7, slot: 1 }]
        );
    }
}
