//! The slot table's layout: the `repr(C)` block of atomics every process of a task maps. Its
//! operations are in `mod.rs` (claims, records, counts), `deferred.rs` (the list of deferred
//! threads) and `file.rs` (its file); the fields are open to them, and to nothing outside
//! `slots`.

use super::entry::DEFERRED;
use crate::plan::MAX_SLOTS;
use core::sync::atomic::{AtomicU32, AtomicU64};

/// Number of thread records; threads beyond this still claim slots but cannot be looked up.
pub const MAX_RECORDS: usize = 4096;

/// The shared table. All fields are atomics so that a zero-filled mapping is a valid, empty
/// table: [`SlotTable::init`] only sets the slot count and magic.
#[repr(C)]
pub struct SlotTable {
    pub(super) magic: AtomicU64,
    pub(super) slot_count: AtomicU32,
    pub(super) created: AtomicU32,
    pub(super) records_used: AtomicU32,
    /// No record below this index is free, as far as claims and releases have told (a hint:
    /// a search that finds nothing from here searches again from 0). A program churning
    /// threads beside thousands of live ones finds a free record in a few loads instead of
    /// passing every live one on every birth, and records stay packed at the low end.
    pub(super) first_free: AtomicU32,
    /// [`crate::Plan::cpus_hash`] of the plan the table was made for, where a process hands
    /// the table on through the environment (the shim by hand); 0: not stamped.
    pub(super) cpus_hash: AtomicU32,
    /// When the housekeeper last published running counts ([`crate::clock::monotonic_us`]); 0: no
    /// housekeeper publishes (the shim by hand).
    pub(super) published_us: AtomicU64,
    /// When the poll before that published (1 after the first poll): the start of the
    /// interval the running counts cover.
    pub(super) counted_since_us: AtomicU64,
    pub(super) live: [AtomicU32; MAX_SLOTS],
    /// Each slot's CPU once the launcher moved the slot off its planned CPU (that CPU turned
    /// noisy): `cpu + 1`, or 0 for the plan's CPU.
    pub(super) moved_to: [AtomicU32; MAX_SLOTS],
    /// Threads that ran on each slot's CPU between the housekeeper's last two polls, as it
    /// published them ([`SlotTable::publish_running`]); all 0 without a housekeeper.
    pub(super) running: [AtomicU32; MAX_SLOTS],
    /// The latest birth on each slot: `us << 16 | (record + 1)` ([`crate::clock::monotonic_us`]; record
    /// `0xffff` when it has none), cleared when that thread's claim is released; 0: none.
    pub(super) born: [AtomicU64; MAX_SLOTS],
    /// The pid of the process whose block holds each slot (see [`crate::locality`]); 0: in
    /// no process's block.
    pub(super) owner: [AtomicU32; MAX_SLOTS],
    /// `tid << 32 | (slot + 1)`, or 0 when free.
    pub(super) records: [AtomicU64; MAX_RECORDS],
    /// Live threads whose records are deferred (see [`super::deferred`]).
    pub(super) deferred: [AtomicU64; DEFERRED],
    /// Threads that ended briefly with their records deferred, never logged (see [`super::deferred`]).
    pub(super) brief: AtomicU64,
    /// Live threads whose records are deferred (see [`super::deferred`]).
    pub(super) deferring: AtomicU32,
    /// When a process of the task last looked for dead processes' records
    /// ([`SlotTable::reap_due`]); 0: never.
    pub(super) reaped_us: AtomicU64,
}
