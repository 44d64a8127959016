//! The demand rule: busy threads the shim placed never double up while a slot has none, and
//! move to faster CPUs. A pure function of what the housekeeper read ([`rebalance`]); the
//! placer observes and carries the answers out. What counts as busy is [`super::activity`]'s.
//!
//! - Busy threads never double up while a slot has none ([`rebalance`]), within two polls of
//!   both being busy (*steady*: busy on the same slot at the poll before, [`steady`]; a
//!   roaming thread that computes counts at its first busy poll), and a thread moves at most
//!   once a [`DWELL_S`] ([`rested`]).
//! - A busy thread alone on a slot of a slower CPU kind moves to a free slot of a faster one
//!   ([`rebalance`]), under the same limits: steady, movable, one move a [`DWELL_S`].

/// Seconds after a move during which the thread is not moved again: a thread follows a change
/// of demand, never the noise of one reading.
pub const DWELL_S: f64 = 1.0;

/// Busy on `slot` now, and on the same slot at the poll before (`before`).
pub fn steady(before: Option<usize>, slot: usize) -> bool {
    before == Some(slot)
}

/// Whether a thread last moved at `moved_at_s` (seconds into the run) may move at `now_s`.
pub fn rested(moved_at_s: Option<f64>, now_s: f64) -> bool {
    moved_at_s.is_none_or(|at| now_s - at >= DWELL_S)
}

/// A busy thread as [`rebalance`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// Thread id.
    pub tid: i32,
    /// The slot whose CPU it runs on; for a thread that roams, the slot its record holds.
    pub slot: usize,
    /// It runs on the whole reservation, on no slot's CPU of its own (born while every slot
    /// had a running thread, or it took turns): it neither crowds its slot nor keeps it from
    /// being a target, and it gets a slot before a doubled thread does.
    pub roams: bool,
    /// It may be moved (the shim placed it, and it is [`rested`]).
    pub movable: bool,
    /// Busy at the poll before too, on the same slot ([`steady`]), or roaming: only such
    /// threads crowd a slot or move (a thread that only just turned busy keeps its slot from
    /// being a target all the same).
    pub steady: bool,
    /// The slot whose CPU it last ran on, if any: where a move keeps it when that slot is a
    /// target (a move that swaps two threads' CPUs costs both their caches for nothing).
    pub ran_on: Option<usize>,
    /// A slot it goes to last: a parked launcher's, whose CPU the housekeeper shares, where
    /// the next launcher is parked too.
    pub last: Option<usize>,
}

/// One move of a busy thread to a slot with no busy thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Thread id.
    pub tid: i32,
    /// The slot it leaves (its record's slot, for a thread that roams).
    pub from: usize,
    /// A slot with no busy thread.
    pub to: usize,
    /// It left the whole reservation, not a crowded slot.
    pub roamed: bool,
}

/// Busy threads never double up while a planned CPU has none: while a slot has no busy thread,
/// a movable steady thread moves there. Roaming threads first (they have no CPU of their own),
/// then one of a slot with two or more busy threads (the youngest: the highest tid, the least
/// likely to be a main thread whose memory is already where it is), then one alone on a slot
/// slower than a free one (`speed[s]`, its CPU kind's speed; a slot past `speed` counts
/// 1000), the slowest first: a compute thread on an E-core takes a P-core a sleeper left. The
/// target is the slot with no busy thread, the fastest, then the one it runs on now (two
/// Open MPI ranks let roam while waiting in `MPI_Init` were once re-pinned crosswise, each
/// to the CPU the other had to itself), then the fewest live threads (`live[s]`), then the
/// lowest index. Sleepers stay where they are. A thread moves only among slots of its slot's `group` (the process
/// whose block holds the slot, 0 for none; a slot past `group` is in none): a process that
/// keeps to a block keeps its threads there, and no other process's threads come in. A slot
/// where a thread was born that the housekeeper has not watched for a whole poll (`newborn[s]`;
/// a slot past `newborn` has none) is no target either: the newborn may not have run yet, and
/// a pool's workers are born asleep and compute together a moment later.
pub fn rebalance(
    busy: &[Busy],
    live: &[u32],
    group: &[u32],
    newborn: &[bool],
    speed: &[u32],
) -> Vec<Move> {
    let group_of = |s: usize| group.get(s).copied().unwrap_or(0);
    let speed_of = |s: usize| speed.get(s).copied().unwrap_or(1000);
    let slots = live.len();
    let mut count = vec![0u32; slots];
    let mut target: Vec<bool> = (0..slots)
        .map(|s| !newborn.get(s).copied().unwrap_or(false))
        .collect();
    for b in busy.iter().filter(|b| b.slot < slots && !b.roams) {
        target[b.slot] = false;
        if b.steady {
            count[b.slot] += 1;
        }
    }
    let busy: Vec<&Busy> = busy
        .iter()
        .filter(|b| b.steady && b.movable && b.slot < slots)
        .collect();
    let mut live = live.to_vec();
    let mut moved: Vec<i32> = Vec::new();
    let mut moves = Vec::new();
    loop {
        let free =
            |s: usize, of: &Busy| count[s] == 0 && target[s] && group_of(s) == group_of(of.slot);
        let faster_free =
            |b: &Busy| (0..slots).any(|s| free(s, b) && speed_of(s) > speed_of(b.slot));
        let mut movers: Vec<&&Busy> = (busy.iter())
            .filter(|b| b.roams || count[b.slot] >= 2 || faster_free(b))
            .filter(|b| !moved.contains(&b.tid))
            .collect();
        movers.sort_by_key(|b| {
            let slower = std::cmp::Reverse(speed_of(b.slot));
            std::cmp::Reverse((b.roams, count[b.slot], slower, b.tid))
        });
        let chosen = movers.into_iter().find_map(|m| {
            let to = (0..slots)
                .filter(|&s| free(s, m))
                .filter(|&s| m.roams || count[m.slot] >= 2 || speed_of(s) > speed_of(m.slot))
                .min_by_key(|&s| {
                    let (last, elsewhere) = (m.last == Some(s), m.ran_on != Some(s));
                    (std::cmp::Reverse(speed_of(s)), last, elsewhere, live[s], s)
                })?;
            Some((to, m))
        });
        let Some((to, m)) = chosen else {
            return moves;
        };
        if !m.roams {
            count[m.slot] -= 1;
        }
        count[to] += 1;
        if m.slot != to {
            live[to] += 1;
            live[m.slot] = live[m.slot].saturating_sub(1);
        }
        moved.push(m.tid);
        moves.push(Move {
            tid: m.tid,
            from: m.slot,
            to,
            roamed: m.roams,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(tid: i32, slot: usize) -> Busy {
        Busy {
            tid,
            slot,
            roams: false,
            movable: true,
            steady: true,
            ran_on: None,
            last: None,
        }
    }

    fn moved(moves: &[Move]) -> Vec<(i32, usize)> {
        moves.iter().map(|m| (m.tid, m.to)).collect()
    }

    #[test]
    fn a_thread_moves_only_within_its_block() {
        // Slots 0-1: process 7's block; slots 2-3: process 9's. Two busy threads on slot 0,
        // the free slots in the other block: nothing moves until a slot of its own is free.
        let moves = rebalance(
            &[b(11, 0), b(12, 0), b(13, 1)],
            &[2, 1, 0, 0],
            &[7, 7, 9, 9],
            &[],
            &[],
        );
        assert!(moves.is_empty(), "{moves:?}");
        let moves = rebalance(
            &[b(11, 0), b(12, 0)],
            &[2, 1, 0, 0],
            &[7, 7, 9, 9],
            &[],
            &[],
        );
        assert_eq!(moved(&moves), [(12, 1)]);
    }

    #[test]
    fn two_busy_threads_on_one_slot_spread_to_the_slot_with_none() {
        // Slot 0: a waiting main and two workers; slot 1: an idle logger.
        let moves = rebalance(&[b(11, 0), b(12, 0)], &[3, 1], &[], &[], &[]);
        assert_eq!(
            moves,
            [Move {
                tid: 12,
                from: 0,
                to: 1,
                roamed: false,
            }]
        );
        // Spread already: nothing moves.
        assert!(rebalance(&[b(11, 0), b(12, 1)], &[2, 2], &[], &[], &[]).is_empty());
        // Every slot busy: doubling is all there is, nothing moves.
        assert!(rebalance(&[b(11, 0), b(12, 0), b(13, 1)], &[2, 1], &[], &[], &[]).is_empty());
        // Three on one slot, three slots: one to each empty slot, the emptiest first.
        let moves = rebalance(&[b(1, 0), b(2, 0), b(3, 0)], &[3, 2, 0], &[], &[], &[]);
        assert_eq!(moved(&moves), [(3, 2), (2, 1)]);
    }

    #[test]
    fn a_busy_thread_on_a_slower_kind_moves_to_a_free_faster_slot() {
        // Slots 0-1 on P-cores (1000), 2-3 on E-cores (700). The P-core thread of slot 1 went
        // to sleep: slot 2's compute thread takes its CPU; slot 3's stays (no faster slot left).
        let speed = [1000, 1000, 700, 700];
        let moves = rebalance(
            &[b(10, 0), b(12, 2), b(13, 3)],
            &[1, 1, 1, 1],
            &[],
            &[],
            &speed,
        );
        assert_eq!(
            moves,
            [Move {
                tid: 13,
                from: 3,
                to: 1,
                roamed: false,
            }]
        );
        // Never from a faster slot to a slower one, nor between equals.
        assert!(rebalance(&[b(10, 0)], &[1, 1, 1, 1], &[], &[], &speed).is_empty());
        assert!(rebalance(&[b(12, 2)], &[1, 1, 1, 1], &[], &[], &[700, 700, 700, 700]).is_empty());
        // Within its dwell it stays; a doubled-up pair goes to the fastest free slot first.
        let pinned = Busy {
            movable: false,
            ..b(12, 2)
        };
        assert!(rebalance(&[pinned], &[1, 0, 1, 0], &[], &[], &speed).is_empty());
        let moves = rebalance(&[b(10, 2), b(11, 2)], &[0, 0, 2, 0], &[], &[], &speed);
        assert_eq!(moved(&moves), [(11, 0), (10, 1)]);
    }

    #[test]
    fn a_thread_within_its_dwell_stays() {
        let pinned = Busy {
            movable: false,
            ..b(12, 0)
        };
        let moves = rebalance(&[b(11, 0), pinned], &[2, 0], &[], &[], &[]);
        assert_eq!(moves.iter().map(|m| m.tid).collect::<Vec<_>>(), [11]);
        let both = Busy {
            movable: false,
            ..b(11, 0)
        };
        assert!(rebalance(&[both, pinned], &[2, 0], &[], &[], &[]).is_empty());
        // A second is not enough: the dwell is a whole DWELL_S.
        assert!(!rested(Some(3.0), 3.0 + DWELL_S - 0.01));
        assert!(rested(Some(3.0), 3.0 + DWELL_S));
        assert!(rested(None, 0.0));
    }

    #[test]
    fn a_thread_that_only_just_turned_busy_neither_crowds_nor_is_landed_beside() {
        let new = |tid, slot| Busy {
            steady: false,
            ..b(tid, slot)
        };
        // Slot 1's thread woke this poll: slot 0's second worker waits for slot 2.
        let moves = rebalance(&[b(11, 0), b(12, 0), new(13, 1)], &[2, 1, 3], &[], &[], &[]);
        assert_eq!(moved(&moves), [(12, 2)]);
        assert!(rebalance(&[b(11, 0), b(12, 0), new(13, 1)], &[2, 1], &[], &[], &[]).is_empty());
        // Nor does it crowd its own slot.
        assert!(rebalance(&[b(11, 0), new(12, 0)], &[2, 0], &[], &[], &[]).is_empty());
        assert!(steady(Some(1), 1) && !steady(Some(0), 1) && !steady(None, 1));
    }

    #[test]
    fn a_roaming_thread_gets_a_slot_with_no_busy_thread_first() {
        let roam = |tid, slot| Busy {
            roams: true,
            ..b(tid, slot)
        };
        // Slot 0's main computes; slot 1's pool worker sleeps; a second pool's worker roams
        // with its record on slot 0. It takes slot 1, before slot 0's doubled thread.
        let moves = rebalance(&[b(10, 0), b(11, 0), roam(12, 0)], &[3, 1], &[], &[], &[]);
        assert_eq!(
            moves,
            [Move {
                tid: 12,
                from: 0,
                to: 1,
                roamed: true,
            }]
        );
        // Its own record's slot is a target too, when nothing busy is there.
        let moves = rebalance(&[b(10, 0), roam(12, 1)], &[1, 1], &[], &[], &[]);
        assert_eq!(moved(&moves), [(12, 1)]);
        // Every slot busy: it stays on the reservation.
        assert!(rebalance(&[b(10, 0), b(11, 1), roam(12, 0)], &[2, 1], &[], &[], &[]).is_empty());
    }

    #[test]
    fn a_slot_with_a_newborn_is_no_target_until_a_poll_watched_it() {
        let roam = |tid, slot| Busy {
            roams: true,
            ..b(tid, slot)
        };
        // A pool's first worker was just born on slot 1 and has not run yet; its second
        // roams and computes beside the busy main thread's slot 0. It stays on the
        // reservation rather than join the first.
        assert!(rebalance(&[b(10, 0), roam(12, 0)], &[2, 1], &[], &[false, true], &[]).is_empty());
        // Two busy threads on slot 0 do not move onto the newborn's slot 1 either, but onto
        // slot 2 where nothing was born.
        let moves = rebalance(&[b(10, 0), b(11, 0)], &[2, 1, 1], &[], &[false, true], &[]);
        assert_eq!(moved(&moves), [(11, 2)]);
        // A poll later the newborn sleeps: its slot is a target again.
        let moves = rebalance(&[b(10, 0), roam(12, 0)], &[2, 1], &[], &[false, false], &[]);
        assert_eq!(moved(&moves), [(12, 1)]);
    }

    #[test]
    fn a_roaming_thread_is_pinned_where_it_runs_when_that_slot_is_free() {
        // Two ranks let roam, each running alone: rank 10 on slot 0's CPU, rank 11 on slot 1's
        // (the youngest moves first, and by index alone it would take slot 0).
        let roaming = |tid, ran_on| Busy {
            roams: true,
            ran_on: Some(ran_on),
            ..b(tid, 0)
        };
        let moves = rebalance(&[roaming(10, 0), roaming(11, 1)], &[0, 0], &[], &[], &[]);
        let mut got = moved(&moves);
        got.sort_unstable();
        assert_eq!(
            got,
            vec![(10, 0), (11, 1)],
            "each stays where it runs: {moves:?}"
        );
    }
}
