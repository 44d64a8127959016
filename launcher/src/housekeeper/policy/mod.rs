//! The housekeeper's rules, pure functions of what it read, one rule a file. Must not: read
//! `/proc`, call `sched_*`, or touch the slot table; the [`super::placer::Placer`] and the
//! tree walk carry the decisions out.
//!
//! - [`unplaced`]: threads nobody placed get a slot or are parked, by demand and slot load.
//! - [`activity`]: what a thread did, and whether it ran or was busy.
//! - [`demand`]: busy threads the shim placed spread out, and move to faster CPUs.
//! - [`turns`]: threads that take turns run on the whole reservation.
//! - [`claims`]: which threads someone else already placed are left alone.
//! - [`kinship`]: how a thread's process stands with the shim.
//! - [`noise`]: a slot moves off a task CPU that turns noisy.
//! - [`cadence`]: how often the tree walk lists, trusts a count, and reads a sleeper.
//!
//! [`thresholds`] holds the [`thresholds::Policy`] they share.

pub mod activity;
pub mod cadence;
pub mod claims;
pub mod demand;
pub mod kinship;
pub mod noise;
pub mod thresholds;
pub mod turns;
pub mod unplaced;
