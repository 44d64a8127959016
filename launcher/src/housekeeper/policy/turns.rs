//! The turn-taking rule: a thread that *takes turns* (many short runs, nearly all ended by
//! sleeping: [`takes_turns`]) gains nothing from a CPU of its own and loses a cross-CPU wakeup
//! at each turn: it runs on the whole reservation ([`turn_reservation`]), where the kernel
//! keeps a waker and its wakee together, until it computes again ([`computes`]).

use super::activity::Activity;
use goset_plan::CpuSet;
use std::collections::BTreeSet;

/// Runs between two reads from which a thread's runs tell whether it takes turns.
pub const TURN_RUNS: u64 = 20;
/// The longest average run of a thread that takes turns.
pub const TURN_RUN_NS: u64 = 200_000;
/// The share of a thread's switches it must have made itself (it slept) to take turns.
pub const TURN_VOLUNTARY: f64 = 0.9;
/// The most of a CPU a thread that takes turns uses: one that runs more overlaps its partner.
pub const TURN_RAN: f64 = 0.75;

/// A thread that takes turns with another: many short runs, nearly every one ended by going
/// to sleep, and less than [`TURN_RAN`] of a CPU in all. A pipe's two ends, a request and its
/// reply: the two never run at the same time, and one CPU serves both better than two.
pub fn takes_turns(a: &Activity) -> bool {
    let switches = a.voluntary + a.involuntary;
    a.runs >= TURN_RUNS
        && a.run_ns / a.runs < TURN_RUN_NS
        && switches > 0
        && a.voluntary as f64 >= TURN_VOLUNTARY * switches as f64
        && a.ran < TURN_RAN
}

/// The CPUs a thread that takes turns ([`takes_turns`]) on slot `slot` runs on from then on:
/// its slot's CPU and those of the slots where no thread computes (`computing`: compute threads
/// keep their CPUs to themselves); `None` when that is its own CPU alone (it stays where it is).
pub fn turn_reservation(
    slot: usize,
    task_cpus: &[usize],
    computing: &BTreeSet<usize>,
) -> Option<CpuSet> {
    let mut reservation = CpuSet::single(*task_cpus.get(slot)?);
    for (s, &cpu) in task_cpus.iter().enumerate() {
        if !computing.contains(&s) {
            reservation.insert(cpu);
        }
    }
    (reservation.count() >= 2).then_some(reservation)
}

/// A thread that computes: busy, in runs longer than a turn's ([`TURN_RUN_NS`] on average; a
/// thread that ran throughout was scheduled in once or not at all). A thread on the reservation
/// gets a CPU of its own only when it computes: two that take turns on one CPU preempt each
/// other at each wakeup and no longer look like they take turns, but their runs stay short.
pub fn computes(busy: bool, a: &Activity) -> bool {
    busy && a.run_ns / a.runs.max(1) >= TURN_RUN_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_of_many_short_sleeps_takes_turns_and_a_compute_thread_does_not() {
        // perf bench sched pipe: 7441 runs of 15 us in 0.3 s, all but 2 switches voluntary.
        let pipe = Activity {
            ran: 0.38,
            runs: 7441,
            run_ns: 115_753_259,
            voluntary: 7488,
            involuntary: 2,
            ran_on: None,
        };
        assert!(takes_turns(&pipe));
        assert!(!computes(true, &pipe));
        // A compute thread: long runs, preempted now and then.
        let compute = Activity {
            ran: 0.98,
            runs: 30,
            run_ns: 98_000_000,
            voluntary: 2,
            involuntary: 28,
            ran_on: None,
        };
        assert!(!takes_turns(&compute));
        assert!(computes(true, &compute));
        // Short runs but preempted: it competes, it does not take turns. Nor does it compute:
        // two that take turns on one CPU preempt each other at each wakeup.
        let shared = Activity {
            involuntary: 3000,
            ..pipe
        };
        assert!(!takes_turns(&shared));
        assert!(!computes(true, &shared));
        // A thread that ran throughout: never scheduled in again.
        let throughout = Activity { runs: 0, ..compute };
        assert!(computes(true, &throughout) && !computes(false, &throughout));
        // Short voluntary runs that fill a CPU: overlapping, not taking turns.
        assert!(!takes_turns(&Activity { ran: 0.9, ..pipe }));
        // Too few runs to tell.
        assert!(!takes_turns(&Activity {
            runs: 5,
            voluntary: 5,
            involuntary: 0,
            ..pipe
        }));
    }
}
