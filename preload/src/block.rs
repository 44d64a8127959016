//! A process's block: the slots its threads keep to when the task runs several processes
//! (MPI ranks, instances, a shell's jobs), so that each process's team stays together, on one
//! node and on cores of its own.
//!
//! Owns: whether a process takes a block and which ([`goset_plan::locality`] cuts and
//! chooses; the slot table records whose block holds a slot). A process takes a block of
//! `per_process` slots when the plan gives that size (`--per-process`, `--instances`); else,
//! when its environment holds an `OMP_NUM_THREADS` smaller than the task (a user's team
//! size: goset-run sets it to the slot count), unless it is the task's first process (a
//! single-process task keeps the plan's order). A process that already runs inside a live
//! block (a forked child, an exec'd image) keeps to that block, if the block is its own or a
//! forebear's; launchers take none. Where the
//! plan gives rank blocks (`--near gpu:local-rank`), a local rank takes its GPU's
//! (`crate::rank`, asked first) and a process of no rank none. Must not:
//! allocate (the partition lives in the loader's static scratch).

use crate::claim;
use goset_plan::locality::{self, NO_BLOCK};
use goset_plan::{CpuSet, Plan, SlotTable, MAX_SLOTS};

/// How many times a process tries again when another process took the block it chose.
const TRIES: usize = 8;

/// The team size a process asks for in its environment (`OMP_NUM_THREADS`, its first
/// number: a nested list such as `4,2` gives the outer team), when below `slots`.
fn asked_size(slots: usize) -> Option<usize> {
    let value = crate::env::get(b"OMP_NUM_THREADS")?;
    let digits = value.split(|&c| c == b',').next()?.trim_ascii();
    let n = core::str::from_utf8(digits).ok()?.parse::<usize>().ok()?;
    (n > 0 && n < slots).then_some(n)
}

/// The CPUs of the block of live process `owner` (every slot it owns).
pub(crate) fn block_of(plan: &Plan, table: &SlotTable, owner: u32) -> CpuSet {
    (0..plan.slot_count())
        .filter(|&s| table.owner(s) == Some(owner))
        .filter_map(|s| plan.cpu_of_slot(s))
        .collect()
}

/// Whether another process's live block holds `slot` though process `pid` does not descend
/// from that process ([`claim::descends_from`]): `pid` merely sits there (the housekeeper
/// placed it before that block was taken), and a forked child's claim on its forebear's block
/// is not its to make.
pub(crate) fn sits_in_anothers(table: &SlotTable, pid: i32, slot: usize) -> bool {
    table
        .owner(slot)
        .is_some_and(|o| o != pid as u32 && !gone(o) && !claim::descends_from(o as i32))
}

/// Whether process `pid` has ended.
pub(crate) fn gone(pid: u32) -> bool {
    !claim::alive(pid as i32)
}

/// The block process `pid` keeps to, as CPUs; `None`: it takes the task's every slot. A
/// local rank's block is `crate::rank::take`'s, asked before this.
/// `first` says it is the task's first process; `scratch` holds the partition.
pub fn take(
    plan: &Plan,
    table: &SlotTable,
    pid: i32,
    first: bool,
    scratch: &mut [u16; MAX_SLOTS],
) -> Option<CpuSet> {
    let slots = plan.slot_count();
    // A slot of another's block this process merely sits on is left: it takes its own.
    let own = (table.find(pid).map(|(_, slot)| slot)).filter(|&s| !sits_in_anothers(table, pid, s));
    // Already inside a live block: the image before an exec took it, or the process that
    // forked this one (or a forebear) did (not so for a first process, whose slot goset-run
    // claimed).
    if let Some(owner) = own.and_then(|s| table.owner(s)) {
        if owner == pid as u32 || (!first && !gone(owner)) {
            return Some(block_of(plan, table, owner)).filter(|b| !b.is_empty());
        }
    }
    // Rank blocks are the ranks': a process of no rank (torchrun's agent, mpirun) takes none.
    if plan.ranks.given() {
        return None;
    }
    let size = match plan.per_process {
        0 if first => return None,
        0 => asked_size(slots)?,
        n => n,
    };
    let count = locality::partition(plan, size, scratch);
    let blocks = &scratch[..slots];
    for _ in 0..TRIES {
        let taken = |s: usize| Some(s) != own && table.owner(s).is_some_and(|o| !gone(o));
        let busy = |s: usize| Some(s) != own && table.live(s) > 0;
        let b = locality::choose_block(plan, blocks, count, own, taken, busy)?;
        debug_assert_ne!(b, NO_BLOCK);
        if table.take_block(pid as u32, slots, |s| blocks[s] == b, gone) {
            return Some(block_of(plan, table, pid as u32));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest() -> Plan {
        let order = [2, 4, 6, 0, 3, 5, 7, 1];
        let mut plan = Plan::new(&order, None, order.iter().copied().collect()).unwrap();
        let places: Vec<_> = order
            .iter()
            .map(|&c| {
                let node = c as u16 / 4;
                [node, node, node, c as u16 / 2, c as u16 / 2]
            })
            .collect();
        plan.set_places(&places);
        plan
    }

    #[test]
    fn processes_take_blocks_on_separate_nodes_and_children_keep_theirs() {
        let mut plan = guest();
        plan.per_process = 4;
        let table = goset_plan::slots::map(None).unwrap();
        table.init(8);
        let mut scratch = [0u16; MAX_SLOTS];
        let me = crate::sys::getpid();
        let a = take(&plan, table, me, false, &mut scratch).unwrap();
        assert_eq!(a.iter().collect::<Vec<_>>(), [0, 1, 2, 3]);
        // A second live process (pid 1, always alive) gets the other node.
        let b = take(&plan, table, 1, false, &mut scratch).unwrap();
        assert_eq!(b.iter().collect::<Vec<_>>(), [4, 5, 6, 7]);
        // No block left.
        assert_eq!(take(&plan, table, 2, false, &mut scratch), None);
        // A process whose main thread holds a slot of a live block keeps to that block when
        // it descends from the block's process (every process descends from pid 1)...
        let slot = (0..8).find(|&s| plan.cpu_of_slot(s) == Some(5)).unwrap();
        table.claim_at(4242, slot).unwrap();
        assert_eq!(take(&plan, table, 4242, false, &mut scratch), Some(b));
        // ... and not when it merely sits there: with every block taken it gets none.
        table.release_block(1);
        assert!(table.take_block(
            2,
            8,
            |s| b.contains(plan.cpu_of_slot(s).unwrap()),
            |_| false
        ));
        assert_eq!(take(&plan, table, 4242, false, &mut scratch), None);
        // Without a size in the plan, only a team size the environment asks for counts, and
        // never for the task's first process.
        plan.per_process = 0;
        table.release_block(me as u32);
        assert_eq!(take(&plan, table, me, true, &mut scratch), None);
    }
}
