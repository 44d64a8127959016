//! The cadence of the tree walk: how often a process's threads are listed, when a thread
//! count is trusted, and how often the once-a-second poll and a sleeping thread's reads come.
//! Pure: the walk (`tree`) and the reads ([`super::super::tracked`]) follow it.

use std::time::Duration;

/// How often, at most, a process's threads are listed because its thread count did not add up
/// with the threads read (one listing costs a `/proc` entry per live thread). In a program that
/// churns threads the count never adds up (threads born and ended between the reads), and
/// listing at every poll made the housekeeper's cost grow with the threads that exist; the
/// polls between look up the tids born since the last poll, a cost that grows with the threads
/// that ran. What a listing catches (a sleeping thread that ended unread, a tid not yet in
/// `/proc` when looked up) waits at most this long, or for the once-a-second poll that lists.
pub const MISMATCH_LISTING: Duration = Duration::from_millis(100);

/// While the shim defers the records of brief threads (the task churns them: see
/// [`adds_up`]), a process whose thread count does not add up is listed at most this often:
/// the count is off by the threads being born and ending at that moment, which no listing
/// would catch alive. A thread nobody accounts for waits at most this long to be found.
pub const CHURN_LISTING: Duration = Duration::from_secs(1);

/// What a listing costs, counted in the wait before the next (see [`listing_every`]).
pub const LISTING_PER_THREAD: Duration = Duration::from_millis(1);

/// How long after a listing of a process with `threads` threads the next waits, while the
/// task churns and at the once-a-second poll's net: [`CHURN_LISTING`], or
/// [`LISTING_PER_THREAD`] a thread when that is longer. A listing builds or looks up a `/proc`
/// entry per thread (about 2 µs each here), so listings cost a process at most about 0.2% of a
/// CPU however many threads it has; what only a listing finds (a thread nobody accounts for)
/// waits that long (3000 threads: 3 s).
pub fn listing_every(threads: usize) -> Duration {
    let threads = u32::try_from(threads).unwrap_or(u32::MAX);
    CHURN_LISTING.max(LISTING_PER_THREAD.saturating_mul(threads))
}

/// How long after a listing a process of `threads` threads whose count does not add up waits
/// for the next: [`listing_every`] while the task `churning` brief threads, else
/// [`MISMATCH_LISTING`].
pub fn listing_wait(churning: bool, threads: usize) -> Duration {
    if churning {
        listing_every(threads)
    } else {
        MISMATCH_LISTING
    }
}

/// Whether a process's thread `count` adds up with the `known` threads the housekeeper found:
/// equal, or more by at most the `deferring` threads whose records the shim deferred (children
/// of a creator that churns brief ones: most end within a millisecond, and listing or looking
/// up each of them was the cost that grew with churn). `deferring` counts the whole
/// task's; a thread it hides is found by the once-a-second listing.
pub fn adds_up(count: usize, known: usize, deferring: usize) -> bool {
    count >= known && count - known <= deferring
}

/// How often every live thread's `children` is read, whether it ran or not: the net under
/// the rule that only a thread that ran can have forked (a `CLONE_PARENT` child joins a
/// parent that did not run; a nohz_full CPU may not update a running thread's run time).
pub const ALL_CHILDREN_EVERY: Duration = Duration::from_secs(1);
/// A thread that keeps sleeping is read at least this often (and at every all-children poll).
pub const IDLE_READ_EVERY: Duration = Duration::from_millis(250);

/// How many polls at `interval` come in an [`ALL_CHILDREN_EVERY`] (at least one).
pub fn all_children_polls(interval: Duration) -> u64 {
    let polls = ALL_CHILDREN_EVERY.as_nanos() / interval.as_nanos().max(1);
    polls.clamp(1, u64::MAX as u128) as u64
}

/// The most polls at `interval` a sleeping thread is left unread ([`idle_skip`]'s cap): one
/// read every [`IDLE_READ_EVERY`]; none when every thread is read every poll (`read_all`).
pub fn idle_skip_cap(interval: Duration, read_all: bool) -> u32 {
    if read_all {
        return 0;
    }
    (IDLE_READ_EVERY.as_nanos() / interval.as_nanos().max(1))
        .saturating_sub(1)
        .min(u32::MAX as u128) as u32
}

/// How many polls a thread is left unread after `idle_reads` reads in a row found it asleep:
/// none after one, then doubling (1, 3, 7, 15, ...) up to `cap`. The housekeeper's cost then
/// grows with the threads that run, not with those that exist; a thread that wakes is seen
/// again within `cap` polls.
pub fn idle_skip(idle_reads: u32, cap: u32) -> u32 {
    if idle_reads < RESTS_AFTER {
        return 0;
    }
    let doubling = (1u32 << (idle_reads - 1).min(20)) - 1;
    doubling.min(cap)
}

/// Reads in a row that found a thread idle, after which it rests (see [`idle_skip`]).
pub const RESTS_AFTER: u32 = 2;

/// About the most sleeping threads read in a second (256 a poll at the default 100 ms): a task
/// with more has them read in turns, and a shorter interval does not read them more often.
pub const SLEEPERS_PER_SECOND: u64 = 2560;

/// The most polls a sleeping thread is left unread (the `cap` of [`idle_skip`]): `time_cap`
/// (the polls in a quarter second), or more when the task has more threads than polls at
/// `interval` read in a second at [`SLEEPERS_PER_SECOND`], so that a second's polls read about
/// that many sleepers however many exist and however often they poll: their cost follows the
/// threads that run. A thread that wakes is seen within `threads / SLEEPERS_PER_SECOND`
/// seconds (3000 sleepers: 1.2 s). A `time_cap` of 0 (every thread read every poll, for
/// `--spare`) stays 0.
pub fn rest_cap(time_cap: u32, threads: usize, interval: Duration) -> u32 {
    if time_cap == 0 {
        return 0;
    }
    let per_poll = (u128::from(SLEEPERS_PER_SECOND) * interval.as_micros() / 1_000_000).max(1);
    let turns = (threads as u128).div_ceil(per_poll).saturating_sub(1);
    time_cap.max(turns.min(u128::from(u32::MAX)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_count_adds_up_with_the_deferred_threads_only() {
        assert!(adds_up(10, 10, 0));
        assert!(adds_up(12, 10, 2) && adds_up(11, 10, 2));
        // One more than the deferred ones: a thread nobody accounts for, to be listed.
        assert!(!adds_up(13, 10, 2));
        // Fewer than known: a known thread ended.
        assert!(!adds_up(9, 10, 5));
    }

    #[test]
    fn a_count_that_does_not_add_up_is_listed_less_often_while_the_task_churns() {
        assert_eq!(listing_wait(false, 3000), MISMATCH_LISTING);
        assert_eq!(listing_wait(true, 20), CHURN_LISTING);
        assert!(CHURN_LISTING > MISMATCH_LISTING);
    }

    #[test]
    fn a_process_with_many_threads_is_listed_less_often() {
        use std::time::Duration;
        assert_eq!(listing_every(0), CHURN_LISTING);
        assert_eq!(listing_every(1000), CHURN_LISTING);
        assert_eq!(listing_every(3000), Duration::from_secs(3));
        assert_eq!(listing_wait(true, 10_000), Duration::from_secs(10));
        assert_eq!(listing_every(usize::MAX), LISTING_PER_THREAD * u32::MAX);
    }

    #[test]
    fn a_sleeping_thread_is_read_half_as_often_each_time_up_to_the_cap() {
        let skips: Vec<u32> = (0..8).map(|idle| idle_skip(idle, 24)).collect();
        assert_eq!(skips, [0, 0, 1, 3, 7, 15, 24, 24]);
        assert_eq!(idle_skip(40, 24), 24);
        assert_eq!(idle_skip(5, 0), 0, "no cap: read every poll");
    }

    #[test]
    fn many_sleepers_are_read_in_turns_of_about_2560_a_second() {
        let ms = Duration::from_millis;
        // A quarter second at 100 ms: 1 poll left unread, while that reads at most 256.
        assert_eq!(rest_cap(1, 100, ms(100)), 1);
        assert_eq!(rest_cap(1, 512, ms(100)), 1);
        // 3000 sleepers: each read every 12th poll, 250 a poll.
        assert_eq!(rest_cap(1, 3000, ms(100)), 11);
        assert!(3000 / (rest_cap(1, 3000, ms(100)) as u64 + 1) <= SLEEPERS_PER_SECOND / 10);
        assert_eq!(
            rest_cap(24, 3000, ms(100)),
            24,
            "the time cap when it is longer"
        );
        // At 10 ms, 25 a poll: each read every 120th poll, every 1.2 s as at 100 ms, not
        // every quarter second.
        assert_eq!(rest_cap(24, 3000, ms(10)), 119);
        assert_eq!(rest_cap(24, 100, ms(10)), 24);
        assert_eq!(
            rest_cap(1, 3000, Duration::from_micros(100)),
            2999,
            "at least one a poll"
        );
        assert_eq!(
            rest_cap(0, 3000, ms(10)),
            0,
            "--spare reads every thread every poll"
        );
    }
}
