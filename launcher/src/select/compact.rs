//! Which of equally good threads the task takes: the fewest domains at every level (package,
//! NUMA node, last-level cache, cluster, core), or with `--scatter` as many as it can.
//!
//! The domains are the machine's groups of CPUs ([`Topology::place_of`]), outermost first:
//! packages then nodes where every node lies in one package (most machines, and Opteron's
//! two nodes per package), nodes then packages where a node holds several packages. A domain
//! one level down is the part of its parent that shares the next group, so domains always nest.
//!
//! Pure: a function of the items, the topology and the anchors.

use super::rank::Item;
use crate::topology::Topology;
use goset_plan::level::LEVELS;
use std::collections::BTreeMap;

/// A CPU's group at each level, outermost first; a domain at depth `d` is the CPUs sharing
/// the first `d + 1` entries.
pub type Path = [u16; LEVELS];

/// The path of every CPU in `cpus`.
pub fn paths(topo: &Topology, cpus: &[usize]) -> BTreeMap<usize, Path> {
    // place_of is [node, package, llc, cluster, core].
    let places: BTreeMap<usize, Path> = cpus.iter().map(|&c| (c, topo.place_of(c))).collect();
    let mut package_of_node: BTreeMap<u16, u16> = BTreeMap::new();
    let nodes_in_packages = places
        .values()
        .all(|p| *package_of_node.entry(p[0]).or_insert(p[1]) == p[1]);
    places
        .into_iter()
        .map(|(c, mut p)| {
            if nodes_in_packages {
                p.swap(0, 1);
            }
            (c, p)
        })
        .collect()
}

/// The tie-break between two ways of taking the same number of equally good threads: higher
/// favour, then not CPU 0's core, then the lower CPU numbers.
fn set_key(picks: &[Item]) -> (std::cmp::Reverse<u64>, bool, usize) {
    (
        std::cmp::Reverse(picks.iter().map(|i| i.fine.favour.0).sum()),
        picks.iter().any(|i| i.fine.cpu0),
        picks.iter().map(|i| i.cpu).min().unwrap_or(usize::MAX),
    )
}

/// The children of a domain at `depth`: its items grouped by their group at that level.
fn children<'a>(
    pool: &[&'a Item],
    depth: usize,
    paths: &BTreeMap<usize, Path>,
) -> Vec<Vec<&'a Item>> {
    let mut groups: BTreeMap<u16, Vec<&Item>> = BTreeMap::new();
    for &i in pool {
        groups.entry(paths[&i.cpu][depth]).or_default().push(i);
    }
    groups.into_values().collect()
}

/// CPUs a take is measured against: `hard` ones are the team's own threads taken before (the
/// children holding them are filled first: they cost no new domain); `near` ones are other
/// blocks' (of a task of several processes: among children that hold the whole take, those
/// nearest them first).
#[derive(Debug, Clone, Default)]
pub struct Anchors {
    /// The team's threads taken before.
    pub hard: Vec<Path>,
    /// Other blocks' threads.
    pub near: Vec<Path>,
}

impl Anchors {
    /// The anchors inside the domain of `here` at `depth`.
    fn within(&self, here: &Path, depth: usize) -> Anchors {
        let keep = |v: &[Path]| -> Vec<Path> {
            (v.iter().copied())
                .filter(|a| a[..=depth] == here[..=depth])
                .collect()
        };
        Anchors {
            hard: keep(&self.hard),
            near: keep(&self.near),
        }
    }
}

/// Takes `need` of `pool` (threads of one coarse key) in as few domains as it can, top down:
/// in each domain, first the children that already hold a hard anchor, then the best child
/// that holds all that is left (one near a near anchor first), else the child that holds the
/// most, and so on.
pub fn fill(
    pool: &[&Item],
    need: usize,
    anchors: &Anchors,
    paths: &BTreeMap<usize, Path>,
) -> Vec<Item> {
    fill_at(pool, need, 0, anchors, paths)
}

fn fill_at(
    pool: &[&Item],
    need: usize,
    depth: usize,
    anchors: &Anchors,
    paths: &BTreeMap<usize, Path>,
) -> Vec<Item> {
    if need == 0 {
        return Vec::new();
    }
    if pool.len() <= need {
        return pool.iter().map(|&&i| i).collect();
    }
    if depth == LEVELS {
        let mut sorted: Vec<Item> = pool.iter().map(|&&i| i).collect();
        sorted.sort_by_key(Item::key);
        sorted.truncate(need);
        return sorted;
    }
    let mut rest: Vec<Vec<&Item>> = children(pool, depth, paths);
    let inside = |g: &Vec<&Item>| anchors.within(&paths[&g[0].cpu], depth);
    let mut picks: Vec<Item> = Vec::new();
    let mut left = need;
    // Children holding a hard anchor first, the best of them first.
    let (mut with_anchor, others): (Vec<_>, Vec<_>) =
        rest.drain(..).partition(|g| !inside(g).hard.is_empty());
    rest = others;
    while left > 0 && !with_anchor.is_empty() {
        let (best, taken) = best_child(&with_anchor, left, depth, anchors, paths);
        left -= taken.len();
        picks.extend(taken);
        with_anchor.remove(best);
    }
    while left > 0 && !rest.is_empty() {
        let holders: Vec<Vec<&Item>> = (rest.iter()).filter(|g| g.len() >= left).cloned().collect();
        if !holders.is_empty() {
            let near: Vec<Vec<&Item>> = (holders.iter())
                .filter(|g| !inside(g).near.is_empty())
                .cloned()
                .collect();
            let holders = if near.is_empty() { holders } else { near };
            let (_, taken) = best_child(&holders, left, depth, anchors, paths);
            picks.extend(taken);
            break;
        }
        let most = rest.iter().map(Vec::len).max().unwrap_or(0);
        let largest: Vec<Vec<&Item>> = (rest.iter()).filter(|g| g.len() == most).cloned().collect();
        let (best, taken) = best_child(&largest, left, depth, anchors, paths);
        let cpu = largest[best][0].cpu;
        left -= taken.len();
        picks.extend(taken);
        rest.retain(|g| g[0].cpu != cpu);
    }
    picks
}

/// Of `candidates` (children at `depth`), the one whose take of `min(left, its size)` threads
/// has the best [`set_key`], with that take.
fn best_child(
    candidates: &[Vec<&Item>],
    left: usize,
    depth: usize,
    anchors: &Anchors,
    paths: &BTreeMap<usize, Path>,
) -> (usize, Vec<Item>) {
    let mut best: Option<(usize, Vec<Item>)> = None;
    for (n, g) in candidates.iter().enumerate() {
        let inside = anchors.within(&paths[&g[0].cpu], depth);
        let take = fill_at(g, left.min(g.len()), depth + 1, &inside, paths);
        let better = match &best {
            None => true,
            Some((_, b)) => (set_key(&take), take.len()) < (set_key(b), b.len()),
        };
        if better {
            best = Some((n, take));
        }
    }
    best.expect("candidates is not empty")
}

/// `--scatter`: takes `need` of `pool` spread over as many domains as it can, at every level
/// in turn: the children of a domain give one thread each in turn, best child first.
pub fn scatter(pool: &[&Item], need: usize, paths: &BTreeMap<usize, Path>) -> Vec<Item> {
    let mut order = interleaved(pool, 0, paths);
    order.truncate(need);
    order
}

fn interleaved(pool: &[&Item], depth: usize, paths: &BTreeMap<usize, Path>) -> Vec<Item> {
    if depth == LEVELS || pool.len() <= 1 {
        let mut sorted: Vec<Item> = pool.iter().map(|&&i| i).collect();
        sorted.sort_by_key(Item::key);
        return sorted;
    }
    let mut lists: Vec<Vec<Item>> = (children(pool, depth, paths).iter())
        .map(|g| interleaved(g, depth + 1, paths))
        .collect();
    lists.sort_by_key(|l| l.first().map(Item::key));
    let mut out = Vec::with_capacity(pool.len());
    for round in 0.. {
        let before = out.len();
        out.extend(lists.iter().filter_map(|l| l.get(round)).copied());
        if out.len() == before {
            break;
        }
    }
    out
}
