//! One entry of the list of deferred threads ([`Deferred`]) and how the list holds it in a
//! word; the list itself is [`super::SlotTable`]'s (`deferred.rs`).

/// Entries in the list of deferred threads: more than a task has alive at once among its brief
/// children (one per creator); a child that finds the list full logs as any other.
pub const DEFERRED: usize = 256;

/// A live thread whose records are deferred, as the list holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferred {
    /// Its tid.
    pub tid: i32,
    /// The slot it was born on (its creator's), if any.
    pub slot: Option<usize>,
    /// Born roaming the reservation, like its creator.
    pub roams: bool,
}

/// The bit of a word that says the thread roams.
const ROAMS: u64 = 1 << 31;

/// The word `d` is held as: its tid in the high half, [`ROAMS`], its slot + 1 (0: none) low.
pub(super) fn encode(d: &Deferred) -> u64 {
    let slot = d.slot.map_or(0, |s| (s as u64 + 1) & 0xffff);
    (d.tid as u32 as u64) << 32 | if d.roams { ROAMS } else { 0 } | slot
}

/// The entry a word holds; `None` for an empty one.
pub(super) fn decode(v: u64) -> Option<Deferred> {
    let tid = (v >> 32) as u32 as i32;
    (v != 0 && tid > 0).then(|| Deferred {
        tid,
        slot: ((v & 0xffff) as usize).checked_sub(1),
        roams: v & ROAMS != 0,
    })
}
