//! What a thread did between two reads, and what the rules make of it: whether it *ran* on its
//! slot, and whether it is *busy*.
//!
//! - A thread *ran* on its slot when it ran at all since the last poll ([`ran_there`]): each
//!   slot's count of such threads is published in the slot table, and the shim gives a new
//!   thread a slot where none ran (a pool thread that lives a few milliseconds runs all the
//!   same, and one that woke briefly may wake again).
//! - A thread is *busy* when it wanted at least [`Policy::burn`] of a CPU and ran
//!   ([`is_busy`]: a thread that did not run is never counted, runnable or not).

use super::thresholds::Policy;

/// What a thread did between its last two reads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    /// Share of a CPU it ran (run time over wall time).
    pub ran: f64,
    /// Times it was scheduled in.
    pub runs: u64,
    /// Its run time, in nanoseconds.
    pub run_ns: u64,
    /// Switches it made by sleeping.
    pub voluntary: u64,
    /// Switches it was made to make (preempted).
    pub involuntary: u64,
    /// The CPU it last ran on, when it ran since the last read (`stat` field 39).
    pub ran_on: Option<usize>,
}

/// The demand the rules see: a runnable thread wants at least [`Policy::burn`], whatever share
/// of its CPU it got (several threads on one CPU, or a starved vCPU, each get a small share
/// and would never look busy enough to be given a CPU of their own).
pub fn wanted(demand: f64, runnable: bool, policy: &Policy) -> f64 {
    if runnable {
        demand.max(policy.burn)
    } else {
        demand
    }
}

/// Busy: it wanted at least [`Policy::burn`] of a CPU, and it ran since the last read.
pub fn is_busy(demand: f64, runnable: bool, a: &Activity, policy: &Policy) -> bool {
    a.run_ns > 0 && wanted(demand, runnable, policy) >= policy.burn
}

/// It ran on its CPU since the last poll: it counts as running there for a new thread.
pub fn ran_there(a: &Activity) -> bool {
    a.run_ns > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_did_not_run_is_never_busy() {
        let policy = Policy::default();
        let ran = Activity {
            run_ns: 1,
            ..Activity::default()
        };
        assert!(is_busy(0.9, false, &ran, &policy));
        assert!(
            is_busy(0.0, true, &ran, &policy),
            "runnable: starved, wants"
        );
        assert!(!is_busy(0.9, true, &Activity::default(), &policy));
        assert!(!is_busy(0.1, false, &ran, &policy));
        assert!(ran_there(&ran));
        assert!(!ran_there(&Activity::default()));
    }
}
