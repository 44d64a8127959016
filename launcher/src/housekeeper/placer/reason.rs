//! Why the housekeeper moved a thread: one [`MoveReason`] for each rule that moves, with the
//! figures it decided on, written to the placement log's `reason` as its [`Display`] text.
//!
//! Owns: the words of every move's reason, in one place. Must not: decide a move.

use std::fmt::{self, Display};

/// Why a thread moved, with the figures behind it.
#[derive(Debug, Clone, PartialEq)]
pub enum MoveReason {
    /// The noise rule moved a slot off its CPU (see [`crate::housekeeper::policy::noise`]).
    Noise {
        /// The CPU the slot left, and its load then (%).
        from: usize,
        from_pct: f64,
        /// Of that: other tasks' load, steal (%), and interrupts a second.
        other_pct: f64,
        steal_pct: f64,
        irq_per_s: f64,
        /// Polls it stayed noisy.
        polls: u32,
        /// The spare CPU the slot took, and its load (%).
        to: usize,
        to_pct: f64,
    },
    /// A thread found on a CPU a slot left follows the slot.
    SlotMoved { slot: usize, from: usize, to: usize },
    /// A thread takes turns with another and runs on `cpus` (a CPU list) from now on.
    TakesTurns {
        runs: u64,
        avg_run_us: u64,
        voluntary_pct: u64,
        cpus: String,
    },
    /// A launcher computing where it was parked gets a slot with no busy thread.
    LauncherComputes {
        park: usize,
        slot: usize,
        cpu: usize,
    },
    /// A seated launcher waits again and goes back: to the housekeeper CPU, or (`None`) the
    /// slots' CPUs.
    LauncherWaits { cpu: usize, back: Option<usize> },
    /// A thread that computes on the reservation gets a slot with no busy thread.
    Roams { slot: usize, cpu: usize },
    /// A busy thread alone on its slot moves to a free slot of a faster CPU kind (speeds as
    /// fractions of the fastest).
    FasterKind {
        from_slot: usize,
        from_cpu: usize,
        from_speed: f64,
        slot: usize,
        cpu: usize,
        speed: f64,
    },
    /// One of `crowd` busy threads on a slot moves to a slot with none.
    Crowded {
        crowd: usize,
        from_slot: usize,
        from_cpu: usize,
        slot: usize,
        cpu: usize,
    },
    /// The shim placed the thread on `cpu` before the housekeeper's pin to `pinned` landed: it
    /// goes back to the shim's CPU.
    HandOver { cpu: usize, pinned: usize },
}

impl Display for MoveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveReason::Noise {
                from,
                from_pct,
                other_pct,
                steal_pct,
                irq_per_s,
                polls,
                to,
                to_pct,
            } => write!(
                f,
                "noise: cpu {from} at {from_pct:.0}% (other load {other_pct:.0}%, steal \
                 {steal_pct:.0}%, {irq_per_s:.0} irq/s) for {polls} polls, spare cpu {to} at \
                 {to_pct:.0}%"
            ),
            MoveReason::SlotMoved { slot, from, to } => {
                write!(f, "slot {slot} moved from cpu {from} to cpu {to}")
            }
            MoveReason::TakesTurns {
                runs,
                avg_run_us,
                voluntary_pct,
                cpus,
            } => write!(
                f,
                "takes turns: {runs} runs of {avg_run_us} us on average since the last poll, \
                 {voluntary_pct}% of its switches voluntary: runs on cpus {cpus}"
            ),
            MoveReason::LauncherComputes { park, slot, cpu } => write!(
                f,
                "demand: a launcher computes on the housekeeper cpu {park}, no busy thread on \
                 slot {slot} (cpu {cpu})"
            ),
            MoveReason::LauncherWaits { cpu, back } => {
                write!(f, "demand: a launcher waits again on cpu {cpu}: back to ")?;
                match back {
                    Some(park) => write!(f, "the housekeeper cpu {park}"),
                    None => write!(f, "the slots' cpus"),
                }
            }
            MoveReason::Roams { slot, cpu } => write!(
                f,
                "demand: computes on the reservation, no busy thread on slot {slot} (cpu {cpu})"
            ),
            MoveReason::FasterKind {
                from_slot,
                from_cpu,
                from_speed,
                slot,
                cpu,
                speed,
            } => write!(
                f,
                "demand: busy on slot {from_slot} (cpu {from_cpu}, speed {from_speed:.2}), slot \
                 {slot} free on a faster kind (cpu {cpu}, speed {speed:.2})"
            ),
            MoveReason::Crowded {
                crowd,
                from_slot,
                from_cpu,
                slot,
                cpu,
            } => write!(
                f,
                "demand: {crowd} busy threads on slot {from_slot} (cpu {from_cpu}), none on slot \
                 {slot} (cpu {cpu})"
            ),
            MoveReason::HandOver { cpu, pinned } => write!(
                f,
                "hand over: the shim placed it on cpu {cpu} before this housekeeper's pin to \
                 cpu {pinned} landed"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_names_its_rule_and_figures() {
        let waits = |back| MoveReason::LauncherWaits { cpu: 3, back }.to_string();
        assert_eq!(
            waits(Some(0)),
            "demand: a launcher waits again on cpu 3: back to the housekeeper cpu 0"
        );
        assert_eq!(
            waits(None),
            "demand: a launcher waits again on cpu 3: back to the slots' cpus"
        );
        let noise = MoveReason::Noise {
            from: 1,
            from_pct: 52.4,
            other_pct: 50.0,
            steal_pct: 0.0,
            irq_per_s: 12.0,
            polls: 3,
            to: 2,
            to_pct: 1.0,
        };
        assert_eq!(
            noise.to_string(),
            "noise: cpu 1 at 52% (other load 50%, steal 0%, 12 irq/s) for 3 polls, spare cpu 2 \
             at 1%"
        );
    }
}
