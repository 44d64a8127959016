//! The thresholds every placement rule reads ([`Policy`]): what counts as burning and as idle,
//! how many polls a streak needs, and whether the housekeeper places and spreads at all.

/// Thresholds of the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Demand from which a thread burns CPU and deserves a slot.
    pub burn: f64,
    /// Demand under which a poll counts as idle.
    pub idle: f64,
    /// Idle polls after which a slotted thread gives its slot back.
    pub demote_after: u32,
    /// Busy polls in a row after which a parked thread gets a slot again: a
    /// thread that wakes for one busy poll now and then stays put rather than going back and
    /// forth.
    pub promote_after: u32,
    /// Busy threads the shim placed are moved off a crowded slot ([`super::demand::rebalance`]).
    pub spread_busy: bool,
    /// Threads are placed at all; `false` under `--placement mask`, where the task keeps one
    /// shared mask and the housekeeper only watches.
    pub place: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            burn: 0.25,
            idle: 0.05,
            demote_after: 3,
            promote_after: 2,
            spread_busy: true,
            place: true,
        }
    }
}
