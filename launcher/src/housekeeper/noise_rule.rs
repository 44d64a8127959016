//! The rule that moves a slot off a task CPU that turns noisy mid-run, onto a quieter spare.
//!
//! Owns: the thresholds ([`NoiseRule`]), the memory between polls ([`NoiseStreaks`]) and the
//! decision ([`noise_moves`]). Pure: the figures come from [`super::noisewatch`], the moves are
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
    /// Polls since the slot last moved (absent: never moved).
    since_move: BTreeMap<usize, u32>,
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
/// did not move within [`NoiseRule::dwell_polls`]) moves to that spare, the noisiest slot
/// first, each spare taken once; the CPU it leaves is a spare from then on (the caller swaps
/// them).
pub fn noise_moves(
    streaks: &mut NoiseStreaks,
    slots: &[(usize, usize, f64)],
    spares: &[(usize, f64)],
    rule: &NoiseRule,
) -> Vec<NoiseMove> {
    for n in streaks.since_move.values_mut() {
        *n = n.saturating_add(1);
    }
    let quietest = spares.iter().map(|&(_, n)| n).min_by(f64::total_cmp);
    let mut due = Vec::new();
    for &(slot, cpu, noise) in slots {
        let above = quietest.is_some_and(|q| noise > q + rule.margin_pct);
        let streak = streaks.above.entry(slot).or_default();
        *streak = if above { *streak + 1 } else { 0 };
        let rested = streaks
            .since_move
            .get(&slot)
            .is_none_or(|&n| n >= rule.dwell_polls);
        if *streak >= rule.polls && rested {
            due.push((slot, cpu, noise, *streak));
        }
    }
    due.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut free: Vec<(usize, f64)> = spares.to_vec();
    free.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut moves = Vec::new();
    for (slot, from, from_pct, polls) in due {
        let Some(i) = free
            .iter()
            .position(|&(_, n)| from_pct > n + rule.margin_pct)
        else {
            continue;
        };
        let (to, to_pct) = free.remove(i);
        streaks.above.insert(slot, 0);
        streaks.since_move.insert(slot, 0);
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

    #[test]
    fn a_cpu_noisy_for_the_stated_polls_moves_to_the_quietest_spare_once() {
        let rule = NoiseRule::default();
        let mut s = NoiseStreaks::default();
        let spares = [(3, 4.0), (2, 1.0)];
        // Slot 0 on cpu 1 turns noisy (a busy loop takes half of it); slot 1 stays quiet.
        for _ in 1..rule.polls {
            assert!(noise_moves(&mut s, &[(0, 1, 50.0), (1, 0, 2.0)], &spares, &rule).is_empty());
        }
        let moves = noise_moves(&mut s, &[(0, 1, 50.0), (1, 0, 2.0)], &spares, &rule);
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
            assert!(noise_moves(&mut s, &[(0, 2, 1.0), (1, 0, 2.0)], &spares, &rule).is_empty());
        }
    }

    #[test]
    fn a_streak_is_broken_by_one_quiet_poll_and_the_margin_is_strict() {
        let rule = NoiseRule::default();
        let mut s = NoiseStreaks::default();
        let spares = [(2, 5.0)];
        let noisy = [(0, 1, 40.0)];
        for _ in 1..rule.polls {
            assert!(noise_moves(&mut s, &noisy, &spares, &rule).is_empty());
        }
        // Exactly the margin above the spare: not above it.
        assert!(noise_moves(&mut s, &[(0, 1, 25.0)], &spares, &rule).is_empty());
        for _ in 1..rule.polls {
            assert!(noise_moves(&mut s, &noisy, &spares, &rule).is_empty());
        }
        assert_eq!(noise_moves(&mut s, &noisy, &spares, &rule).len(), 1);
        // No spare at all: nothing to compare with.
        let mut t = NoiseStreaks::default();
        for _ in 0..2 * rule.polls {
            assert!(noise_moves(&mut t, &noisy, &[], &rule).is_empty());
        }
    }

    #[test]
    fn a_slot_that_moved_waits_its_dwell_and_spares_are_taken_once() {
        let rule = NoiseRule::default();
        let mut s = NoiseStreaks::default();
        // Two noisy slots, one spare: the noisier one moves.
        let two = [(0, 1, 40.0), (1, 0, 60.0)];
        let mut moves = Vec::new();
        for _ in 0..rule.polls {
            moves = noise_moves(&mut s, &two, &[(2, 0.0)], &rule);
        }
        assert_eq!(moves.iter().map(|m| m.slot).collect::<Vec<_>>(), [1]);
        // The spare it reached turns noisy at once: slot 1 stays for its dwell.
        let after = [(1, 2, 60.0)];
        let mut polls = 0;
        loop {
            polls += 1;
            let m = noise_moves(&mut s, &after, &[(0, 0.0)], &rule);
            if m.iter().any(|m| m.slot == 1) {
                break;
            }
            assert!(polls < 100);
        }
        assert_eq!(polls, rule.dwell_polls);
    }
}
