//! `--near gpu:local-rank`: each local rank's share of the machine near its GPU, and its block
//! of slots chosen inside that share by the whole selection rule.
//!
//! Owns: the shares, as torchrun's `--numa-binding` modes define them
//! (`torch/numa/binding.py`), and the order blocks are chosen in. Rank `r` drives GPU
//! `gpus[r % G]` (the GPUs the ranks see, in their visible order). Its share:
//! - `node`: the usable CPUs of the GPU's node (a GPU on no node: every usable CPU);
//! - `socket`: those of the package of the node's lowest CPU (a GPU on no node: every one);
//! - `exclusive`: the node's physical cores (ordered by lowest CPU) split evenly among the
//!   GPUs on that node in index order, the first GPUs one core more where they do not divide;
//! - `cache`: one last-level cache of the node, the caches ordered by most CPUs then lowest
//!   CPU, the k-th GPU of the node taking cache `k mod caches`.
//!
//! Blocks are chosen rank by rank, each among the CPUs no earlier rank took, by
//! [`super::plan`] (kinds, noise, compactness). Where a rank's share has too few CPUs left
//! (ranks outnumber GPUs, a small cache), its block is chosen in the GPU's node, then its
//! package, then anywhere, and the block says how far it went: never a failure while the
//! machine has the CPUs. Must not: read anything (the GPUs come from `topology::gpus`).

use super::{plan, NumaChoice, Options, SelectError, Selection};
use crate::noise::Score;
use crate::topology::gpus::Gpu;
use crate::topology::Topology;
use std::collections::BTreeMap;
use std::ops::Range;

/// How a rank's share is cut (`--near-share`), named as torchrun's `--numa-binding` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareMode {
    /// The GPU's NUMA node.
    #[default]
    Node,
    /// The GPU's package (socket).
    Socket,
    /// The node's physical cores split evenly among its GPUs.
    Exclusive,
    /// One last-level cache of the node (torchrun's `core-complex`).
    Cache,
}

impl ShareMode {
    /// Every mode, as `--near-share` spells it.
    pub const NAMES: [(&'static str, ShareMode); 4] = [
        ("node", ShareMode::Node),
        ("socket", ShareMode::Socket),
        ("exclusive", ShareMode::Exclusive),
        ("cache", ShareMode::Cache),
    ];
}

/// What the ranks ask for.
#[derive(Debug, Clone)]
pub struct RankRequest {
    /// The GPUs the ranks see, in their visible order (rank `r` drives `gpus[r % len]`).
    pub gpus: Vec<Gpu>,
    /// The local ranks whose blocks are chosen: every one (`0..ranks`) under goset-run; one
    /// Slurm task's (`srun --goset`, where each task of the node is a rank and plans its own).
    pub ranks: Range<usize>,
    /// CPUs other ranks' blocks hold already (the step's earlier tasks): not chosen again,
    /// and still counted in the shares, so that each task's block is the one goset-run would
    /// give its rank.
    pub held: Vec<usize>,
    /// Slots of each rank's block.
    pub per_rank: usize,
    /// How a share is cut.
    pub mode: ShareMode,
}

/// One rank's block.
#[derive(Debug, Clone, PartialEq)]
pub struct RankBlock {
    /// The local rank.
    pub rank: usize,
    /// Its GPU.
    pub gpu: Gpu,
    /// Its share by the mode, before other ranks took from it.
    pub share: Vec<usize>,
    /// Its block: the slots its process keeps to, best first.
    pub cpus: Vec<usize>,
    /// Where the block was chosen instead, when the share had too few CPUs left: `node`,
    /// `package` or `machine`.
    pub widened: Option<&'static str>,
}

/// The selection for ranks: each rank's block near its GPU, then the task (the blocks in
/// rank order, slot 0 rank 0's best CPU), housekeeper, fence and spares by [`super::plan`].
pub fn plan_ranks(
    topo: &Topology,
    noise: &BTreeMap<usize, Score>,
    opts: &Options,
    req: &RankRequest,
) -> Result<Selection, SelectError> {
    let usable: Vec<usize> = (topo.candidates().into_iter())
        .filter(|c| !opts.exclude.contains(c))
        .collect();
    let mut taken: Vec<usize> = req.held.clone();
    let mut blocks = Vec::new();
    let mut passed_over = Vec::new();
    let machine = Machine {
        topo,
        noise,
        opts,
        usable: &usable,
    };
    for rank in req.ranks.clone() {
        let gpu = &req.gpus[rank % req.gpus.len()];
        let share = share(topo, &usable, &req.gpus, gpu, req.mode);
        let (chosen, widened) = choose_block(&machine, req, &share, gpu, &taken)?;
        passed_over.extend(chosen.passed_over.iter().filter(|c| !taken.contains(c)));
        taken.extend(&chosen.task_cpus);
        blocks.push(RankBlock {
            rank,
            gpu: gpu.clone(),
            share,
            cpus: chosen.task_cpus,
            widened,
        });
    }
    let chosen: Vec<usize> = taken[req.held.len()..].to_vec();
    let whole = Options {
        count: chosen.len(),
        include: chosen.clone(),
        // The housekeeper and spares keep off the other ranks' blocks too.
        exclude: (opts.exclude.iter().chain(&req.held).copied()).collect(),
        numa: NumaChoice::Off,
        near: None,
        block: None,
        ..opts.clone()
    };
    let mut selection = plan(topo, noise, &whole)?;
    passed_over.retain(|c| !taken.contains(c));
    passed_over.sort();
    passed_over.dedup();
    selection.passed_over = passed_over;
    selection.ranks = blocks;
    Ok(selection)
}

/// What every rank's block is chosen from.
struct Machine<'a> {
    topo: &'a Topology,
    noise: &'a BTreeMap<usize, Score>,
    opts: &'a Options,
    /// The candidates less `--exclude`.
    usable: &'a [usize],
}

/// A rank's block: `per_rank` CPUs of its share not `taken`, else of its GPU's node, package,
/// the machine (the name of the one used is returned).
fn choose_block(
    m: &Machine,
    req: &RankRequest,
    share: &[usize],
    gpu: &Gpu,
    taken: &[usize],
) -> Result<(Selection, Option<&'static str>), SelectError> {
    let (topo, noise, opts, usable) = (m.topo, m.noise, m.opts, m.usable);
    let node = in_node(topo, usable, gpu.node);
    let package = in_package(topo, usable, &node);
    let tiers: [(Option<&'static str>, &[usize]); 4] = [
        (None, share),
        (Some("node"), &node),
        (Some("package"), &package),
        (Some("machine"), usable),
    ];
    // With --smt spread, cores no earlier rank uses come before the siblings of its CPUs:
    // each rank's selection sees only its own pool, where such a sibling looks like a free core.
    let sibling_taken = |c: usize| {
        let info = topo.cpu(c);
        info.is_some_and(|i| i.siblings.iter().any(|s| taken.contains(s)))
    };
    let spread = opts.smt == super::SmtPolicy::Spread;
    let mut pools: Vec<(Option<&'static str>, Vec<usize>)> = Vec::new();
    for (name, pool) in tiers {
        let left: Vec<usize> = pool
            .iter()
            .copied()
            .filter(|c| !taken.contains(c))
            .collect();
        if spread {
            pools.push((
                name,
                left.iter()
                    .copied()
                    .filter(|&c| !sibling_taken(c))
                    .collect(),
            ));
        }
        pools.push((name, left));
    }
    let mut last = None;
    for (name, left) in pools {
        if left.len() < req.per_rank {
            continue;
        }
        let one = Options {
            count: req.per_rank,
            include: Vec::new(),
            exclude: (usable.iter().copied())
                .filter(|c| !left.contains(c))
                .chain(opts.exclude.iter().copied())
                .collect(),
            numa: NumaChoice::Off,
            near: None,
            block: None,
            fence: false,
            spare: 0,
            ..opts.clone()
        };
        match plan(topo, noise, &one) {
            Ok(s) => return Ok((s, name)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(SelectError::CountOutOfRange {
        requested: req.per_rank * req.ranks.len(),
        available: usable.len(),
    }))
}

/// The usable CPUs of `node`; every usable CPU for none.
fn in_node(topo: &Topology, usable: &[usize], node: Option<usize>) -> Vec<usize> {
    (usable.iter().copied())
        .filter(|&c| node.is_none() || topo.cpu(c).and_then(|i| i.node) == node)
        .collect()
}

/// The usable CPUs of the package of `cpus`'s lowest CPU; every usable CPU when it has none.
fn in_package(topo: &Topology, usable: &[usize], cpus: &[usize]) -> Vec<usize> {
    let package = cpus.iter().min().and_then(|&c| topo.cpu(c)?.package_index);
    (usable.iter().copied())
        .filter(|&c| package.is_none() || topo.cpu(c).and_then(|i| i.package_index) == package)
        .collect()
}

/// GPU `gpu`'s share by `mode` (see the module docs); `gpus` are the GPUs the ranks see.
pub fn share(
    topo: &Topology,
    usable: &[usize],
    gpus: &[Gpu],
    gpu: &Gpu,
    mode: ShareMode,
) -> Vec<usize> {
    let node = in_node(topo, usable, gpu.node);
    // This GPU's position among the GPUs of its node, in index order.
    let mut peers: Vec<usize> = (gpus.iter())
        .filter(|g| g.node == gpu.node)
        .map(|g| g.index)
        .collect();
    peers.sort();
    peers.dedup();
    let k = peers.iter().position(|&i| i == gpu.index).unwrap_or(0);
    match mode {
        ShareMode::Node => node,
        // A GPU on no node is near every package alike.
        ShareMode::Socket if gpu.node.is_none() => node,
        ShareMode::Socket => in_package(topo, usable, &node),
        ShareMode::Exclusive => {
            let cores = groups(&node, |c| {
                topo.cpu(c).and_then(|i| i.siblings.iter().min().copied())
            });
            let (each, extra) = (cores.len() / peers.len(), cores.len() % peers.len());
            if each == 0 {
                // More GPUs than cores: a core each, round the cores.
                return cores
                    .get(k % cores.len().max(1))
                    .cloned()
                    .unwrap_or_default();
            }
            let start = k * each + k.min(extra);
            let end = start + each + usize::from(k < extra);
            let mut cpus: Vec<usize> = cores[start..end].concat();
            cpus.sort();
            cpus
        }
        ShareMode::Cache => {
            let mut caches = groups(&node, |c| topo.cpu(c).and_then(|i| i.llc));
            caches.sort_by_key(|g| (usize::MAX - g.len(), g[0]));
            caches
                .get(k % caches.len().max(1))
                .cloned()
                .unwrap_or_default()
        }
    }
}

/// `cpus` grouped by `key` (a CPU without one is a group of its own), each group ascending,
/// the groups in order of their lowest CPU.
fn groups(cpus: &[usize], key: impl Fn(usize) -> Option<usize>) -> Vec<Vec<usize>> {
    let mut by: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    for &c in cpus {
        let k = key(c).map_or((1, c), |k| (0, k));
        by.entry(k).or_default().push(c);
    }
    let mut out: Vec<Vec<usize>> = by.into_values().collect();
    for g in &mut out {
        g.sort();
    }
    out.sort_by_key(|g| g[0]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::synthetic::machine;

    fn gpu(index: usize, node: Option<usize>) -> Gpu {
        Gpu {
            index,
            bus_id: String::new(),
            numa_node: node,
            node,
            nic: None,
            sysfs: String::new(),
        }
    }

    #[test]
    fn exclusive_gives_the_first_gpus_the_cores_left_over() {
        // One node of 8 cores, no SMT, 3 GPUs: 3, 3 and 2 cores, as torchrun splits them.
        let topo = machine(8, 1, 1);
        let usable: Vec<usize> = (0..8).collect();
        let gpus: Vec<Gpu> = (0..3).map(|i| gpu(i, Some(0))).collect();
        let shares: Vec<Vec<usize>> = (gpus.iter())
            .map(|g| share(&topo, &usable, &gpus, g, ShareMode::Exclusive))
            .collect();
        assert_eq!(shares, [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
        // More GPUs than cores: a core each, round the cores.
        let many: Vec<Gpu> = (0..10).map(|i| gpu(i, Some(0))).collect();
        assert_eq!(
            share(&topo, &usable, &many, &many[9], ShareMode::Exclusive),
            [1]
        );
    }

    #[test]
    fn a_gpu_on_no_node_shares_the_machine_and_blocks_never_overlap() {
        // 2 nodes of 4 cores x 2 threads; GPU 0 on node 1, GPU 1 on none.
        let topo = machine(8, 2, 2);
        let usable: Vec<usize> = (0..16).collect();
        let gpus = vec![gpu(0, Some(1)), gpu(1, None)];
        assert_eq!(
            share(&topo, &usable, &gpus, &gpus[1], ShareMode::Socket).len(),
            16
        );
        let node1 = share(&topo, &usable, &gpus, &gpus[0], ShareMode::Node);
        assert_eq!(node1, [4, 5, 6, 7, 12, 13, 14, 15]);
        let req = RankRequest {
            gpus,
            ranks: 0..4,
            held: Vec::new(),
            per_rank: 3,
            mode: ShareMode::Node,
        };
        let opts = Options {
            count: 12,
            ..Options::default()
        };
        let sel = plan_ranks(&topo, &BTreeMap::new(), &opts, &req).unwrap();
        let mut seen = Vec::new();
        for r in &sel.ranks {
            assert!(r.cpus.iter().all(|c| !seen.contains(c)), "{:?}", sel.ranks);
            seen.extend(&r.cpus);
        }
        // Ranks 0 and 2 drive GPU 0: 6 of node 1's 8 CPUs, its 4 cores first.
        assert!(sel.ranks[0]
            .cpus
            .iter()
            .chain(&sel.ranks[2].cpus)
            .all(|c| node1.contains(c)));
        assert_eq!(sel.task_cpus.len(), 12);
        assert_eq!(&sel.task_cpus[..3], &sel.ranks[0].cpus[..]);
    }
}
