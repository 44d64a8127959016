//! Locality: which slots are near a thread's process, and the blocks a task of several
//! processes is cut into.
//!
//! Owns: the order of slots by nearness ([`near_key`]), the partition of a plan's slots into
//! blocks of one size, and the choice of the block a new process takes (the levels and the
//! distance they rest on are [`crate::level`]'s). Both sides use it: the launcher to
//! report the blocks and to give instances theirs, the shim to take a block when a process
//! starts. Must not: allocate (the shim computes a partition at process start, on small
//! stacks), read the slot table itself (callers pass what they read from it).

use crate::level::{distance, Level, LEVELS};
use crate::plan::Plan;

/// A block index for a slot in no block (see [`partition`]); the same as a rank block's.
pub use crate::ranks::NO_BLOCK;

/// The order of a slot among its plan's slots when cutting blocks: by node, package, cache,
/// cluster and core, so that a block holds whole cores of one cache where it can, then by
/// slot (the plan's order of quiet CPUs).
fn block_order(plan: &Plan, slot: usize) -> ([u16; LEVELS], usize) {
    (plan.place(slot), slot)
}

/// Cuts the plan's slots into blocks of `size` slots, from the finest group up: each core,
/// then each cluster, cache, package and node gives as many whole blocks as its slots not yet
/// in a block allow, in [`block_order`]; what is left of every node last, across nodes. So a
/// block lies in one core, cluster, cache, package or node wherever it fits in one, and holds
/// whole cores where it can. A group at one level is taken within every coarser one (a cache
/// that spans two nodes is cut at the node). Writes each slot's block into `out` (slots past
/// the last whole block: [`NO_BLOCK`]) and returns the number of blocks. O(levels x slots²),
/// no allocation: `out` is the only storage.
pub fn partition(plan: &Plan, size: usize, out: &mut [u16]) -> usize {
    let n = plan.slot_count().min(out.len());
    out[..n].fill(NO_BLOCK);
    if size == 0 || n < size {
        return 0;
    }
    let before = |a: usize, b: usize| block_order(plan, a) < block_order(plan, b);
    let mut blocks = 0usize;
    // depth: how many levels, coarsest first, a group shares (LEVELS: one core; 0: all).
    for depth in (0..=LEVELS).rev() {
        let same = |a: usize, b: usize| plan.place(a)[..depth] == plan.place(b)[..depth];
        for s in 0..n {
            if out[s] != NO_BLOCK {
                continue;
            }
            // Once a group, from its first slot not yet in a block.
            let first = (0..n).all(|t| out[t] != NO_BLOCK || !same(t, s) || !before(t, s));
            if !first {
                continue;
            }
            // Members: the group's slots in no block before this group was cut.
            let member = |t: usize, out: &[u16]| {
                same(t, s) && (out[t] == NO_BLOCK || out[t] as usize >= blocks)
            };
            let whole = (0..n).filter(|&t| member(t, out)).count() / size;
            for t in 0..n {
                if !member(t, out) {
                    continue;
                }
                let rank = (0..n).filter(|&u| member(u, out) && before(u, t)).count();
                if rank < whole * size {
                    out[t] = (blocks + rank / size) as u16;
                }
            }
            blocks += whole;
        }
    }
    blocks
}

/// The block a new process takes among `count` blocks of `blocks` (from [`partition`]):
/// the one holding `own` (the slot the process already runs on) if that block is free;
/// else, of the free blocks (none of their slots `taken`: in another live process's block),
/// the one whose node has the most slots in no block, then its package, then its cache, then
/// the one with the fewest `busy` slots (holding threads of processes without a block: the
/// task's first process, a static shell the housekeeper placed for a moment), then the one
/// holding the earliest slot of the plan (the quietest CPU). `None`: no block is free.
pub fn choose_block(
    plan: &Plan,
    blocks: &[u16],
    count: usize,
    own: Option<usize>,
    taken: impl Fn(usize) -> bool,
    busy: impl Fn(usize) -> bool,
) -> Option<u16> {
    let n = plan.slot_count().min(blocks.len());
    let free = |b: u16| (0..n).all(|s| blocks[s] != b || !taken(s));
    if let Some(b) = own.and_then(|s| blocks.get(s).copied()) {
        if b != NO_BLOCK && free(b) {
            return Some(b);
        }
    }
    let free_at = |level: Level, group: u16| {
        (0..n)
            .filter(|&s| plan.place(s)[level as usize] == group && !taken(s))
            .count()
    };
    (0..count.min(NO_BLOCK as usize) as u16)
        .filter(|&b| free(b))
        .filter_map(|b| {
            let first = (0..n).find(|&s| blocks[s] == b)?;
            let place = plan.place(first);
            let room = [Level::Node, Level::Package, Level::Llc]
                .map(|l| usize::MAX - free_at(l, place[l as usize]));
            let busy = (0..n).filter(|&s| blocks[s] == b && busy(s)).count();
            Some((room, busy, first, b))
        })
        .min()
        .map(|(_, _, _, b)| b)
}

/// The order in which a process's thread takes slots by locality; the smallest wins (after
/// the busy rule, see [`crate::slots::birth_key`]). `anchor` is the slot of the process's
/// main thread: a slot nearer it comes first ([`distance`]). With SMT spread (the default),
/// a sibling of the anchor counts as under its cache, where a core no live thread holds
/// (`core_free`) comes first; with `smt_pack`, siblings come first. Without an anchor every
/// slot is as near.
pub fn near_key(plan: &Plan, slot: usize, anchor: Option<usize>, core_free: bool) -> u32 {
    let Some(anchor) = anchor else { return 0 };
    let d = distance(&plan.place(slot), &plan.place(anchor));
    if plan.smt_pack {
        2 * d
    } else {
        2 * if d == 0 { 2 } else { d } + u32::from(!core_free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::Place;
    use crate::CpuSet;

    /// 2 nodes x 1 package x 2 cores x 2 SMT: node 0 = CPUs 0-3, node 1 = 4-7; the plan in
    /// `order` (the tests' spread order, 2 4 6 0 3 5 7 1, is the one selection gave on such a
    /// guest).
    fn guest(order: &[usize]) -> Plan {
        let reservation: CpuSet = order.iter().copied().collect();
        let mut plan = Plan::new(order, None, reservation).unwrap();
        let places: Vec<Place> = order
            .iter()
            .map(|&c| {
                let node = (c / 4) as u16;
                [node, node, node, (c / 2) as u16 + 10, (c / 2) as u16 + 10]
            })
            .collect();
        plan.set_places(&places);
        plan
    }

    /// Every block's CPUs, ascending, the blocks in order of their lowest CPU.
    fn all_blocks(plan: &Plan, blocks: &[u16], count: usize) -> Vec<Vec<usize>> {
        let mut all: Vec<Vec<usize>> = (0..count as u16)
            .map(|b| cpus_of(plan, blocks, b))
            .collect();
        all.sort();
        all
    }

    fn cpus_of(plan: &Plan, blocks: &[u16], b: u16) -> Vec<usize> {
        let mut cpus: Vec<usize> = (0..plan.slot_count())
            .filter(|&s| blocks[s] == b)
            .map(|s| plan.cpu_of_slot(s).unwrap())
            .collect();
        cpus.sort();
        cpus
    }

    #[test]
    fn distance_is_the_finest_level_shared() {
        let plan = guest(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let d = |a: usize, b: usize| distance(&plan.place(a), &plan.place(b));
        assert_eq!(d(0, 1), 0, "SMT siblings");
        assert_eq!(d(0, 2), 2, "one cache (no clusters given apart from cores)");
        assert_eq!(d(0, 4), 5, "other node");
        // A plan without places: every slot its own core, all else shared.
        let bare = Plan::new(&[0, 1], None, [0, 1].into_iter().collect()).unwrap();
        assert_eq!(distance(&bare.place(0), &bare.place(1)), 1);
    }

    #[test]
    fn blocks_are_whole_cores_of_one_node() {
        let plan = guest(&[2, 4, 6, 0, 3, 5, 7, 1]);
        let mut blocks = [0u16; 8];
        assert_eq!(partition(&plan, 4, &mut blocks), 2);
        assert_eq!(all_blocks(&plan, &blocks, 2), [[0, 1, 2, 3], [4, 5, 6, 7]]);
        assert_eq!(partition(&plan, 2, &mut blocks), 4);
        for b in 0..4 {
            let cpus = cpus_of(&plan, &blocks, b);
            assert_eq!(cpus[0] / 2, cpus[1] / 2, "block {b} is one core: {cpus:?}");
        }
        // 3 does not divide a node: one block per node, the rest (a core each) left over.
        assert_eq!(partition(&plan, 3, &mut blocks), 2);
        assert_eq!(blocks.iter().filter(|&&b| b == NO_BLOCK).count(), 2);
        // 8: one block across both nodes.
        assert_eq!(partition(&plan, 8, &mut blocks), 1);
        assert_eq!(partition(&plan, 9, &mut blocks), 0);
    }

    #[test]
    fn a_new_process_takes_the_emptiest_node() {
        let plan = guest(&[2, 4, 6, 0, 3, 5, 7, 1]);
        let mut blocks = [0u16; 8];
        let count = partition(&plan, 2, &mut blocks);
        let none = |_| false;
        let first = choose_block(&plan, &blocks, count, None, none, none).unwrap();
        assert_eq!(cpus_of(&plan, &blocks, first), [2, 3], "the quietest CPU's");
        let held = |b: u16| move |s: usize| blocks[s] == b;
        let second = choose_block(&plan, &blocks, count, None, held(first), none).unwrap();
        assert_eq!(
            cpus_of(&plan, &blocks, second),
            [4, 5],
            "node 1 has more room"
        );
        // The block of the slot a process already runs on, when free.
        let own = (0..8).find(|&s| plan.cpu_of_slot(s) == Some(7));
        let b = choose_block(&plan, &blocks, count, own, held(first), none).unwrap();
        assert_eq!(cpus_of(&plan, &blocks, b), [6, 7]);
        assert_eq!(
            choose_block(&plan, &blocks, count, None, |_| true, none),
            None
        );
        // A slot busy with a thread of no block (a static shell) makes its block the last
        // choice, not an impossible one.
        let on_4 = |s: usize| plan.cpu_of_slot(s) == Some(4);
        let b = choose_block(&plan, &blocks, count, None, held(first), on_4).unwrap();
        assert_ne!(cpus_of(&plan, &blocks, b), [4, 5]);
        let all_but = |keep: u16| move |s: usize| blocks[s] != keep;
        let four = blocks[(0..8).find(|&s| on_4(s)).unwrap()];
        assert_eq!(
            choose_block(&plan, &blocks, count, None, all_but(four), on_4),
            Some(four)
        );
    }

    #[test]
    fn a_busy_slot_does_not_send_a_process_off_its_node() {
        // Nodes of 1, 2 and 3 CPUs (0 | 1-2 | 3-5), no SMT; plan order 5 4 3 2 1 0.
        let order = [5, 4, 3, 2, 1, 0];
        let mut plan = Plan::new(&order, None, order.iter().copied().collect()).unwrap();
        let node = |c: usize| match c {
            0 => 0,
            1 | 2 => 1,
            _ => 2,
        };
        let places: Vec<Place> = (order.iter())
            .map(|&c| [node(c), 0, 0, c as u16 + 10, c as u16 + 10])
            .collect();
        plan.set_places(&places);
        let mut blocks = [0u16; 6];
        let count = partition(&plan, 2, &mut blocks);
        assert_eq!(count, 3, "1-2, 3-4 and what is left, 0 and 5");
        let slot = |c: usize| order.iter().position(|&o| o == c).unwrap();
        let first = blocks[slot(3)];
        // A shell the housekeeper placed for a moment runs on CPU 1.
        let taken = |s: usize| blocks[s] == first;
        let busy = |s: usize| s == slot(1);
        let b = choose_block(&plan, &blocks, count, None, taken, busy).unwrap();
        assert_eq!(
            cpus_of(&plan, &blocks, b),
            [1, 2],
            "the node with room, busy or not"
        );
    }

    #[test]
    fn near_key_orders_by_distance_and_smt_policy() {
        let mut plan = guest(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let key = |p: &Plan, s: usize, free: bool| near_key(p, s, Some(0), free);
        // Spread: another free core of the node before the anchor's sibling.
        assert!(key(&plan, 2, true) < key(&plan, 1, false));
        assert!(key(&plan, 1, false) < key(&plan, 4, true));
        plan.smt_pack = true;
        assert!(key(&plan, 1, false) < key(&plan, 2, true));
        assert_eq!(near_key(&plan, 5, None, true), 0);
    }
}
