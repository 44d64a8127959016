//! The task's threads: the candidates as [`Item`]s, the team taken from them (a block at a time
//! for a task of several processes), and the slot order.

use super::{compact, rank, Options};
use crate::noise::Score;
use crate::topology::Topology;
use rank::Item;
use std::collections::BTreeMap;

/// Every candidate thread but the `include` CPUs, as [`rank::items`] values them: the
/// included count as their cores' first threads.
pub(super) fn candidate_items(
    topo: &Topology,
    candidates: &[usize],
    include: &[usize],
    noise: &BTreeMap<usize, Score>,
    opts: &Options,
) -> Vec<Item> {
    let mut cores: Vec<rank::Core> = Vec::new();
    // One queue of candidate threads per core.
    let mut queues: Vec<Vec<usize>> = Vec::new();
    for &c in candidates {
        let core_of = |x: usize| topo.cpu(x).map_or(vec![x], |i| i.siblings.clone());
        match queues.iter_mut().find(|q| core_of(q[0]).contains(&c)) {
            Some(q) => q.push(c),
            None => queues.push(vec![c]),
        }
    }
    for mut queue in queues {
        let used = queue.iter().filter(|c| include.contains(c)).count();
        queue.retain(|c| !include.contains(c));
        rank::thread_order(
            &mut queue,
            noise,
            rank::window_s(opts),
            rank::load_tie(opts),
        );
        if !queue.is_empty() {
            cores.push(rank::Core { queue, used });
        }
    }
    rank::items(topo, &cores, noise, opts)
}

/// The task's threads beyond `include` (whose paths are `include`), in slot order: one
/// [`choose`] of them all, or with [`Options::block`] one a block at a time, the first block
/// holding the included CPUs, each later one near the blocks before it.
pub(super) fn take_team(
    items: &[Item],
    include: &[compact::Path],
    opts: &Options,
    paths: &BTreeMap<usize, compact::Path>,
) -> Vec<Item> {
    let mut need = opts.count - include.len();
    let block = (opts.block).filter(|&t| t > 0 && t < opts.count && include.len() <= t);
    let Some(size) = block else {
        let anchors = compact::Anchors {
            hard: include.to_vec(),
            near: Vec::new(),
        };
        return choose(items, need, &anchors, opts.scatter, paths);
    };
    let mut left: Vec<Item> = items.to_vec();
    let mut taken: Vec<Item> = Vec::new();
    let mut anchors = compact::Anchors {
        hard: include.to_vec(),
        near: Vec::new(),
    };
    let mut first = size - include.len();
    while need > 0 {
        let k = first.min(need);
        let chosen = choose(&left, k, &anchors, opts.scatter, paths);
        if chosen.len() < k {
            break;
        }
        left.retain(|i| !chosen.iter().any(|c| c.cpu == i.cpu));
        anchors.near.append(&mut anchors.hard);
        anchors.near.extend(chosen.iter().map(|i| paths[&i.cpu]));
        need -= k;
        taken.extend(chosen);
        first = size;
    }
    taken
}

/// The best `need` of `items`, in slot order: every item strictly better than the `need`-th
/// best (by the coarse key) is taken; of those equal to it, as many as are still needed, in
/// as few domains as can be (near `anchors`), or as many with `scatter`.
pub(super) fn choose(
    items: &[Item],
    need: usize,
    anchors: &compact::Anchors,
    scatter: bool,
    paths: &BTreeMap<usize, compact::Path>,
) -> Vec<Item> {
    if need == 0 || items.is_empty() {
        return Vec::new();
    }
    let mut sorted: Vec<Item> = items.to_vec();
    sorted.sort_by_key(Item::key);
    let Some(threshold) = sorted.get(need - 1).map(|i| i.coarse) else {
        return sorted;
    };
    let mut taken: Vec<Item> = (sorted.iter().copied())
        .filter(|i| i.coarse < threshold)
        .collect();
    let pool: Vec<&Item> = sorted.iter().filter(|i| i.coarse == threshold).collect();
    let more = need - taken.len();
    let mut anchored = anchors.clone();
    anchored.hard.extend(taken.iter().map(|i| paths[&i.cpu]));
    taken.extend(if scatter {
        compact::scatter(&pool, more, paths)
    } else {
        compact::fill(&pool, more, &anchored, paths)
    });
    slot_order(taken, scatter, paths)
}

/// The order of the slots: what each gives the task first (the fastest kind, a core's first
/// thread before a second; slot 0 is the main thread); then, among equals, so that
/// a task running fewer threads than `-n` still keeps together (or, with `scatter`, still
/// spreads), the team's domains in turn: the domain holding most of the team first, its
/// CPUs by their key; with `scatter` one CPU of each domain in turn.
fn slot_order(
    taken: Vec<Item>,
    scatter: bool,
    paths: &BTreeMap<usize, compact::Path>,
) -> Vec<Item> {
    let mut classes: BTreeMap<(usize, std::cmp::Reverse<u64>), Vec<Item>> = BTreeMap::new();
    for i in taken {
        classes
            .entry((i.coarse.class, i.coarse.value))
            .or_default()
            .push(i);
    }
    let mut out = Vec::new();
    for (_, items) in classes {
        let refs: Vec<&Item> = items.iter().collect();
        if scatter {
            out.extend(compact::scatter(&refs, refs.len(), paths));
            continue;
        }
        // Each domain's share of the team, and its best thread (domains holding as many of
        // the team go in the order of their best).
        let mut count: BTreeMap<Vec<u16>, usize> = BTreeMap::new();
        let mut best: BTreeMap<Vec<u16>, (rank::Coarse, rank::Fine)> = BTreeMap::new();
        for i in &items {
            for d in 1..=2 {
                let domain = paths[&i.cpu][..d].to_vec();
                *count.entry(domain.clone()).or_default() += 1;
                let b = best.entry(domain).or_insert(i.key());
                *b = (*b).min(i.key());
            }
        }
        let mut items = items;
        items.sort_by_key(|i| {
            let p = paths[&i.cpu];
            (
                std::cmp::Reverse(count[&p[..1].to_vec()]),
                best[&p[..1].to_vec()],
                std::cmp::Reverse(count[&p[..2].to_vec()]),
                best[&p[..2].to_vec()],
                i.key(),
            )
        });
        out.extend(items);
    }
    out
}

pub(super) fn cpus_of(items: &[Item]) -> impl Iterator<Item = usize> + '_ {
    items.iter().map(|i| i.cpu)
}
