//! The rule that moves a slot off a task CPU that turns noisy mid-run, onto a quieter spare.
//!
//! Owns: the thresholds ([`NoiseRule`]), the memory between polls ([`NoiseStreaks`]) and the
//! decision ([`noise_moves`]). Pure: the figures come from [`super::super::noisewatch`], the moves are
//! carried out by the placer.

use std::collections::BTreeMap;

/// Thresholds of the noise rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseRule {
    /// How much noisier than the quietest spare a task CPU must be (percentage points of the
    /// CPU that are not the task's: other tasks' load, steal, interrupts).
    pub margin_pct: f64,
    /// Polls in a row it must stay that much noisier.
    pub polls: u32,
    /// Polls after a move during which that slot does not move again.
    pub dwell_polls: u32,
}

impl Default for NoiseRule {
    fn default() -> Self {
        NoiseRule {
            margin_pct: 20.0,
            polls: 3,
            dwell_polls: 10,
        }
    }
}

/// What the rule remembers between polls, per slot.
#[derive(Debug, Default, Clone)]
pub struct NoiseStreaks {
    /// Polls in a row the slot's CPU was noisier than the quietest spare by the margin.
    above: BTreeMap<usize, u32>,
    /// The highest noise of the slot's CPU over that streak.
    peak: BTreeMap<usize, f64>,
    /// Polls since the slot last moved (absent: never moved).
    since_move: BTreeMap<usize, u32>,
    /// The slot's last move, not judged yet: the CPU it left and that CPU's noise then.
    judged_by: BTreeMap<usize, (usize, f64)>,
    /// Noise the slot takes along (see [`noise_moves`]): not counted against its CPU.
    carried: BTreeMap<usize, f64>,
    /// Moves of the slot that did not help, and the CPUs they left (never its target again).
    futile: BTreeMap<usize, Vec<usize>>,
}

/// A slot's CPU and that CPU's noise at one poll (percent of the CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlotNoise {
    /// The slot.
    pub slot: usize,
    /// Its CPU now.
    pub cpu: usize,
    /// That CPU's noise, percent.
    pub pct: f64,
}

/// A spare CPU and its noise at one poll (percent of the CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpareNoise {
    /// The spare CPU.
    pub cpu: usize,
    /// Its noise, percent.
    pub pct: f64,
}

/// A slot due to move at this poll, before a spare is found for it.
struct Due {
    slot: usize,
    /// Its CPU.
    from: usize,
    /// Its CPU's noise less what the slot carries along.
    excess: f64,
    /// Its CPU's noise.
    from_pct: f64,
    /// Polls in a row above the margin.
    polls: u32,
}

/// One move of a slot off its noisy CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseMove {
    /// The slot.
    pub slot: usize,
    /// Its noisy CPU, which becomes a spare.
    pub from: usize,
    /// The spare it moves to.
    pub to: usize,
    /// The noisy CPU's noise this poll, percent.
    pub from_pct: f64,
    /// The spare's noise this poll, percent.
    pub to_pct: f64,
    /// Polls in a row the slot was above the margin.
    pub polls: u32,
}

/// One poll of the rule. `slots`: each slot's CPU and its noise this poll (percent of the
/// CPU); `spares`: each spare CPU and its noise. A slot whose CPU stays noisier than the
/// quietest spare by [`NoiseRule::margin_pct`] for [`NoiseRule::polls`] polls in a row (and
/// did not move within its dwell) moves to that spare, the noisiest slot first, each spare
/// taken once; the CPU it leaves is a spare from then on (the caller swaps them).
///
/// A move is judged when the slot is due to move again: if its new CPU is then within the
/// margin as noisy as the one it left, the noise went with it (its own interrupts, steal that
/// shows only on a busy vCPU) and moving on would only carry it further. The slot stays; the
/// highest noise of that streak is counted as its own from then on, its dwell doubles, and
/// the CPU it left is never its target again. A slot whose new CPU stays quiet through its
/// dwell was helped, and its move is not judged.
pub fn noise_moves(
    streaks: &mut NoiseStreaks,
    slots: &[SlotNoise],
    spares: &[SpareNoise],
    rule: &NoiseRule,
) -> Vec<NoiseMove> {
    for n in streaks.since_move.values_mut() {
        *n = n.saturating_add(1);
    }
    let quietest = spares.iter().map(|s| s.pct).min_by(f64::total_cmp);
    let mut due = Vec::new();
    for &SlotNoise {
        slot,
        cpu,
        pct: noise,
    } in slots
    {
        let own = streaks.carried.get(&slot).copied().unwrap_or(0.0);
        let above = quietest.is_some_and(|q| noise - own > q + rule.margin_pct);
        let streak = streaks.above.entry(slot).or_default();
        let peak = streaks.peak.entry(slot).or_insert(0.0);
        if above {
            *streak += 1;
            *peak = peak.max(noise);
        } else {
            *streak = 0;
            *peak = 0.0;
        }
        let futile = streaks.futile.get(&slot).map_or(0, Vec::len);
        let dwell = rule.dwell_polls.saturating_mul(1 << futile.min(16));
        let rested = streaks.since_move.get(&slot).is_none_or(|&n| n >= dwell);
        if rested && !above {
            streaks.judged_by.remove(&slot);
        }
        if *streak < rule.polls || !rested {
            continue;
        }
        match streaks.judged_by.remove(&slot) {
            Some((left, left_pct)) if noise >= left_pct - rule.margin_pct => {
                streaks.carried.insert(slot, own.max(*peak));
                streaks.futile.entry(slot).or_default().push(left);
                *streak = 0;
                *peak = 0.0;
            }
            _ => due.push(Due {
                slot,
                from: cpu,
                excess: noise - own,
                from_pct: noise,
                polls: *streak,
            }),
        }
    }
    due.sort_by(|a, b| b.excess.total_cmp(&a.excess).then(a.slot.cmp(&b.slot)));
    let mut free: Vec<SpareNoise> = spares.to_vec();
    free.sort_by(|a, b| a.pct.total_cmp(&b.pct).then(a.cpu.cmp(&b.cpu)));
    let mut moves = Vec::new();
    for Due {
        slot,
        from,
        excess,
        from_pct,
        polls,
    } in due
    {
        let left = streaks.futile.get(&slot);
        let Some(i) = free.iter().position(|s| {
            excess > s.pct + rule.margin_pct && !left.is_some_and(|l| l.contains(&s.cpu))
        }) else {
            continue;
        };
        let SpareNoise {
            cpu: to,
            pct: to_pct,
        } = free.remove(i);
        streaks.above.insert(slot, 0);
        streaks.peak.insert(slot, 0.0);
        streaks.since_move.insert(slot, 0);
        streaks.judged_by.insert(slot, (from, from_pct));
        moves.push(NoiseMove {
            slot,
            from,
            to,
            from_pct,
            to_pct,
            polls,
        });
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`noise_moves`] with slots as `(slot, cpu, pct)` and spares as `(cpu, pct)`.
    fn moves_of(
        s: &mut NoiseStreaks,
        slots: &[(usize, usize, f64)],
        spares: &[(usize, f64)],
        rule: &NoiseRule,
    ) -> Vec<NoiseMove> {
        let slots: Vec<SlotNoise> = (slots.iter())
            .map(|&(slot, cpu, pct)| SlotNoise { slot, cpu, pct })
            .collect();
        let spares: Vec<SpareNoise> = (spares.iter())
            .map(|&(cpu, pct)| SpareNoise { cpu, pct })
            .collect();
        noise_moves(s, &slots, &spares, rule)
    }

    #[test]
    fn a_cpu_noisy_for_the_stated_polls_moves_to_the_quietest_spare_once() {
        let rule = NoiseRule::default();
        let mut s = NoiseStreaks::default();
        let spares = [(3, 4.0), (2, 1.0)];
        // Slot 0 on cpu 1 turns noisy (a busy loop takes half of it); slot 1 stays quiet.
        for _ in 1..rule.polls {
            assert!(moves_of(&mut s, &[(0, 1, 50.0), (1, 0, 2.0)], &spares, &rule).is_empty());
        }
        let moves = moves_of(&mut s, &[(0, 1, 50.0), (1, 0, 2.0)], &spares, &rule);
        assert_eq!(
            moves,
            [NoiseMove {
                slot: 0,
                from: 1,
                to: 2,
                from_pct: 50.0,
                to_pct: 1.0,
                polls: rule.polls
            }]
        );
        // Now on cpu 2, with cpu 1 a spare: quiet, nothing moves.
        let spares = [(3, 4.0), (1, 100.0)];
        for _ in 0..2 * rule.dwell_polls {
            assert!(moves_of(&mut s, &[(0, 2, 1.0), (1, 0, 2.0)], &spares, &rule).is_empty());
        }
    }

    #[test]
    fn a_streak_is_broken_by_one_quiet_poll_and_the_margin_is_strict() {
        let rule = NoiseRule::default();
        let mut s = NoiseStreaks::default();
        let spares = [(2, 5.0)];
        let noisy = [(0, 1, 40.0)];
        for _ in 1..rule.polls {
            assert!(moves_of(&mut s, &noisy, &spares, &rule).is_empty());
        }
        // Exactly the margin above the spare: not above it.
        assert!(moves_of(&mut s, &[(0, 1, 25.0)], &spares, &rule).is_empty());
        for _ in 1..rule.polls {
            assert!(moves_of(&mut s, &noisy, &spares, &rule).is_empty());
        }
        assert_eq!(moves_of(&mut s, &noisy, &spares, &rule).len(), 1);
        // No spare at all: nothing to compare with.
        let mut t = NoiseStreaks::default();
        for _ in 0..2 * rule.polls {
            assert!(moves_of(&mut t, &noisy, &[], &rule).is_empty());
        }
    }

    /// Polls until `slots` make a move (at most 1000), and that move.
    fn polls_to_move(
        s: &mut NoiseStreaks,
        slots: &[(usize, usize, f64)],
        spares: &[(usize, f64)],
    ) -> Option<(u32, NoiseMove)> {
        (1..=1000).find_map(|n| {
            let m = moves_of(s, slots, spares, &NoiseRule::default());
            m.first().map(|&m| (n, m))
        })
    }

    #[test]
    fn a_slot_that_moved_waits_its_dwell_and_spares_are_taken_once() {
        let rule = NoiseRule::default();
        let mut s = NoiseStreaks::default();
        // Two noisy slots, one spare: the noisier one moves.
        let two = [(0, 1, 40.0), (1, 0, 60.0)];
        let mut moves = Vec::new();
        for _ in 0..rule.polls {
            moves = moves_of(&mut s, &two, &[(2, 0.0)], &rule);
        }
        assert_eq!(moves.iter().map(|m| m.slot).collect::<Vec<_>>(), [1]);
        // It was helped (quiet on cpu 2 for its dwell); then cpu 2 turns noisy: it moves
        // again, once its streak is long enough, to the cpu it left (quiet by now).
        for _ in 0..rule.dwell_polls {
            assert!(moves_of(&mut s, &[(1, 2, 1.0)], &[(0, 0.0)], &rule).is_empty());
        }
        let (polls, m) = polls_to_move(&mut s, &[(1, 2, 60.0)], &[(0, 0.0)]).unwrap();
        assert_eq!((polls, m.from, m.to), (rule.polls, 2, 0));
    }

    #[test]
    fn noise_that_goes_with_the_slot_moves_it_once_and_never_back() {
        let rule = NoiseRule::default();
        let mut s = NoiseStreaks::default();
        // The slot's own noise (its interrupts, steal on a busy vCPU): 50 % wherever it runs,
        // while the cpu it is not on reads quiet.
        let (_, first) = polls_to_move(&mut s, &[(0, 1, 50.0)], &[(2, 0.0)]).unwrap();
        assert_eq!((first.from, first.to), (1, 2));
        for _ in 0..10 * rule.dwell_polls {
            assert!(moves_of(&mut s, &[(0, 2, 50.0)], &[(1, 0.0)], &rule).is_empty());
        }
        // Only noise the margin above what it carries counts now, and never towards cpu 1;
        // a new spare is tried, after a doubled dwell (counted from its move).
        assert!(moves_of(&mut s, &[(0, 2, 90.0)], &[(1, 0.0)], &rule).is_empty());
        let mut t = s.clone();
        for _ in 0..100 {
            assert!(moves_of(&mut t, &[(0, 2, 90.0)], &[(1, 0.0)], &rule).is_empty());
        }
        let (_, next) = polls_to_move(&mut s, &[(0, 2, 90.0)], &[(1, 0.0), (3, 5.0)]).unwrap();
        assert_eq!((next.from, next.to), (2, 3));
        // A fresh slot on a CPU whose noise is not its own still moves in its polls, and
        // the dwell doubles with each move that did not help.
        let mut u = NoiseStreaks::default();
        polls_to_move(&mut u, &[(0, 1, 50.0)], &[(2, 0.0)]).unwrap();
        let mut since = 0;
        while !u.futile.contains_key(&0) {
            assert!(moves_of(&mut u, &[(0, 2, 50.0)], &[(1, 0.0)], &rule).is_empty());
            since += 1;
            assert!(since < 100);
        }
        assert_eq!((since, u.carried[&0]), (rule.dwell_polls, 50.0));
        let (polls, m) = polls_to_move(&mut u, &[(0, 2, 75.0)], &[(3, 0.0)]).unwrap();
        assert_eq!((since + polls, m.to), (2 * rule.dwell_polls, 3));
    }
}
