//! A local rank's block (`--near gpu:local-rank`): at a process's birth, the block the plan
//! gives its GPU, read from its own environment before its code runs.
//!
//! Owns: which rank block a process takes ([`goset_plan::ranks`] reads the variables and
//! chooses; the slot table records the owner). Its local rank is the first of
//! [`goset_plan::ranks::LOCAL_RANK_VARS`], its GPU the rank's entry of its visible-devices
//! variable, else GPU number = local rank. A child of a rank (its slot inside the rank's live
//! block) keeps to the rank's block. Must not: allocate (the environment is read in place).

use crate::block::{block_of, gone};
use crate::log::note_rank as note;
use crate::log::warn_once;
use goset_plan::ranks::{self, RankGpu};
use goset_plan::{CpuSet, Plan, SlotTable};

/// How many times a rank tries again when another process took the block it chose.
const TRIES: usize = 8;

/// The block process `pid` keeps to as a local rank (the plan gives rank blocks): `None` when
/// the plan gives none or its environment holds no local rank (`crate::block`'s rule applies); `Some(None)`
/// when it is a rank without a block (its GPU cannot be told, has no block in the plan, or
/// every block of it is held: one warning, and the task's slots as without rank blocks).
/// The rank read is kept for the process's log record ([`crate::log::note_rank`]) either way.
pub fn take(plan: &Plan, table: &SlotTable, pid: i32) -> Option<Option<CpuSet>> {
    if !plan.ranks.given() {
        return None;
    }
    let get = |name: &str| crate::env::get(name.as_bytes());
    let (rank, var) = ranks::local_rank(get)?;
    // A slot of another's block this process merely sits on is no parent's block.
    let own = (table.find(pid).map(|(_, slot)| slot))
        .filter(|&s| !crate::block::sits_in_anothers(table, pid, s));
    let gpu = match ranks::gpu_of_rank(rank, plan.ranks.gpus(), get) {
        RankGpu::Gpu { gpu, .. } => gpu,
        RankGpu::NotAnIndex { var: visible, .. } => {
            note(rank, var, None);
            warn_once(format_args!(
                "local rank {rank}: {visible} holds a GPU UUID or MIG name, not an index: sysfs \
                 cannot tell which GPU it is; this process takes the task's slots as without \
                 --near gpu:local-rank"
            ));
            return Some(None);
        }
        RankGpu::NoRank => return None,
    };
    note(rank, var, Some(gpu));
    Some(claim(plan, table, pid, rank, gpu, own))
}

/// Takes (or, for a rank's child, keeps) a block of `gpu` for local rank `rank`.
fn claim(
    plan: &Plan,
    table: &SlotTable,
    pid: i32,
    rank: usize,
    gpu: usize,
    own: Option<usize>,
) -> Option<CpuSet> {
    let slots = plan.slot_count();
    let me = pid as u32;
    let holder = |b: u16| {
        (0..slots)
            .filter(|&s| plan.ranks.of_slot(s) == b)
            .find_map(|s| table.owner(s).filter(|&o| o != me && !gone(o)))
    };
    for _ in 0..TRIES {
        // The exec'd image of a process that took its block before.
        if let Some(b) = own.map(|s| plan.ranks.of_slot(s)) {
            let mine = (0..slots).any(|s| plan.ranks.of_slot(s) == b && table.owner(s) == Some(me));
            if mine {
                return Some(block_of(plan, table, me));
            }
        }
        let Some(b) = plan.ranks.choose(rank, gpu, own, |b| holder(b).is_some()) else {
            warn_once(format_args!(
                "local rank {rank}: GPU {gpu} has no free block in the plan (goset-run planned \
                 {} blocks); this process takes the task's slots as without --near \
                 gpu:local-rank",
                plan.ranks.count()
            ));
            return None;
        };
        if let Some(parent) = holder(b) {
            return Some(block_of(plan, table, parent));
        }
        if table.take_block(me, slots, |s| plan.ranks.of_slot(s) == b, gone) {
            return Some(block_of(plan, table, me));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_take_their_gpus_blocks_and_children_keep_them() {
        let cpus = [0, 1, 2, 3, 4, 5, 6, 7];
        let mut plan = Plan::new(&cpus, None, cpus.iter().copied().collect()).unwrap();
        // GPU 0 near CPUs 4-7, GPU 1 near 0-3 (the blocks need not follow slot order).
        assert!(plan
            .ranks
            .set(2, &[(0, vec![4, 5, 6, 7]), (1, vec![0, 1, 2, 3])]));
        let table = goset_plan::slots::map(None).unwrap();
        table.init(8);
        let set = |c: &[usize]| Some(c.iter().copied().collect::<CpuSet>());
        let me = crate::sys::getpid();
        assert_eq!(claim(&plan, table, me, 0, 0, None), set(&[4, 5, 6, 7]));
        // Rank 1 (pid 1: always alive) on GPU 1.
        assert_eq!(claim(&plan, table, 1, 1, 1, None), set(&[0, 1, 2, 3]));
        // A child of rank 1, on a slot of its block, keeps to it.
        table.claim_at(4242, 2).unwrap();
        assert_eq!(claim(&plan, table, 4242, 1, 1, Some(2)), set(&[0, 1, 2, 3]));
        // A second rank for GPU 1 finds none free.
        assert_eq!(claim(&plan, table, 4243, 3, 1, None), None);
        // This process, exec'd again, keeps its block.
        assert_eq!(claim(&plan, table, me, 0, 0, Some(4)), set(&[4, 5, 6, 7]));
    }
}
