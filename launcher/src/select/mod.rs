//! CPU selection: which CPUs the task gets, in slot order, and where the housekeeper goes.
//!
//! A pure function of the topology, the per-CPU noise scores and the options: no I/O, no
//! printing, deterministic on ties. The whole rule, with an example, is `docs/selection.md`;
//! in short:
//! - candidates are online ∩ allowed − `exclude`, restricted to `--near`'s device's local CPUs
//!   (its `local_cpulist`, else its node's CPUs), to one NUMA node with `--numa` and to one
//!   CPU kind with `--cpu-kind N`;
//! - with `--near`, `--numa`'s default and `auto` are the device's node; where the device has
//!   none, the default is off and `auto` as without `--near`; `--numa N` must be the device's
//!   node; `--numa off` binds no memory (the CPUs stay near the device);
//! - every candidate thread is worth what the task would get from it ([`rank`]): its kind's
//!   speed × the share of its core other work leaves (× a quarter for a core's second
//!   thread with `--smt spread`), then its core's noise tier (interrupt rates within what the
//!   window can tell apart are one tier). The task takes the best; of equally good threads,
//!   the fewest domains ([`compact`]), or the most with `--scatter`; remaining ties go to
//!   favoured cores, away from CPU 0's core, the lower CPU number (never to noise the window
//!   cannot tell apart);
//! - `include` CPUs are taken first, in the order given, and count as using their cores;
//! - slots are in order of worth: slot 0 (the main thread) gets the fastest;
//! - the housekeeper is a CPU left, preferring one that shares no core with the task, is no
//!   spare, is neither isolated nor nohz_full, then the least performant kind, then one that
//!   shares no cluster with the task, then the quietest;
//!   with no CPU left it shares the last task CPU;
//! - `spare` books the next K CPUs by the same rule (near the task) idle (outside the task
//!   and its fence): the housekeeper moves a slot there when its CPU turns noisy mid-run;
//! - `fence` books the online SMT siblings of the task CPUs idle (outside the slots) while one
//!   CPU stays free for the housekeeper: siblings are given back from the last slot's core
//!   when none would be, and with no CPU outside the task at all, fencing is refused.

// Layout: this file the decision, `plan` and the candidates (near, node, kind, fence);
// `options.rs` what the user asks; `rank.rs` what a thread is worth; `compact.rs` the domains;
// `team.rs` the team and its slot order; `error.rs` the usage errors; `ranks.rs` the blocks of
// `--near gpu:local-rank`.
mod compact;
mod error;
mod options;
mod rank;
pub(crate) mod ranks;
mod team;

pub use error::SelectError;
pub use options::{KindChoice, NumaChoice, Options, SmtPolicy};
pub use rank::{significant, LOAD_TIE_PCT};
use team::{candidate_items, choose, cpus_of, take_team};

use crate::noise::Score;
use crate::topology::{Device, Topology};
use rank::Item;
use std::collections::{BTreeMap, BTreeSet};

/// The decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Task CPUs in slot order: slot 0 (the first process's main thread) first.
    pub task_cpus: Vec<usize>,
    /// The housekeeper's CPU.
    pub housekeeper_cpu: usize,
    /// No CPU was left: the housekeeper shares a task CPU.
    pub housekeeper_shared: bool,
    /// The NUMA node the task is bound to.
    pub node: Option<usize>,
    /// SMT siblings of task CPUs booked idle (`--fence`).
    pub fenced: Vec<usize>,
    /// SMT siblings of task CPUs that could not be fenced: the housekeeper needed a CPU.
    pub unfenced: Vec<usize>,
    /// CPUs booked idle for moves off a task CPU that turns noisy (`--spare`), chosen by the
    /// task's own rule beside the task, best first.
    pub spares: Vec<usize>,
    /// Core cost of every candidate CPU (its own noise plus its siblings').
    pub core_cost: BTreeMap<usize, f64>,
    /// Every candidate CPU in the order the policy would hand them out.
    pub ranking: Vec<usize>,
    /// The device the task CPUs are near (`--near`).
    pub near: Option<Device>,
    /// CPUs the selection would have given the task had every CPU been quiet, passed over for
    /// their noise (or other work's load).
    pub passed_over: Vec<usize>,
    /// Each local rank's block near its GPU (`--near gpu:local-rank`), in rank order; the task
    /// CPUs are these blocks one after the other.
    pub ranks: Vec<ranks::RankBlock>,
    /// The speed of every usable CPU's kind class, in permille of the fastest (1000 on a
    /// machine without kinds, and for every CPU unless `--cpu-kind performance`): the
    /// housekeeper moves a busy thread to a faster free slot.
    pub perf: BTreeMap<usize, u32>,
}

/// Chooses the task CPUs and the housekeeper. `noise` maps a CPU to its noise score (a CPU
/// missing from it counts as quiet, as with `--sample 0`).
pub fn plan(
    topo: &Topology,
    noise: &BTreeMap<usize, Score>,
    opts: &Options,
) -> Result<Selection, SelectError> {
    let Restricted {
        usable,
        candidates,
        node,
    } = restrict(topo, opts)?;
    let include = checked_include(&candidates, opts)?;
    let paths = compact::paths(topo, &usable);
    let items = candidate_items(topo, &candidates, &include, noise, opts);
    let anchors: Vec<compact::Path> = include.iter().map(|c| paths[c]).collect();
    let taken = take_team(&items, &anchors, opts, &paths);
    let task_cpus: Vec<usize> = include.iter().copied().chain(cpus_of(&taken)).collect();
    let passed_over = if noise.values().any(|s| !s.is_quiet()) {
        let calm = candidate_items(topo, &candidates, &include, &BTreeMap::new(), opts);
        let calm = take_team(&calm, &anchors, opts, &paths);
        cpus_of(&calm).filter(|c| !task_cpus.contains(c)).collect()
    } else {
        Vec::new()
    };
    let (fenced, unfenced) = if opts.fence {
        fence(topo, &task_cpus, &usable)?
    } else {
        (Vec::new(), Vec::new())
    };
    let left: Vec<Item> = (items.iter().copied())
        .filter(|i| !task_cpus.contains(&i.cpu))
        .collect();
    let spares = choose_spares(&left, &fenced, &task_cpus, &paths, opts)?;
    let mut rest: Vec<Item> = (left.into_iter())
        .filter(|i| !spares.contains(&i.cpu))
        .collect();
    rest.sort_by_key(Item::key);
    let ranking: Vec<usize> = (task_cpus.iter().chain(&spares).copied())
        .chain(rest.iter().map(|i| i.cpu))
        .collect();
    let room = Room {
        usable: &usable,
        task_cpus: &task_cpus,
        fenced: &fenced,
        spares: &spares,
    };
    let (housekeeper_cpu, housekeeper_shared) = match choose_housekeeper(topo, noise, &paths, &room)
    {
        Some(c) => (c, false),
        None => (*task_cpus.last().expect("count >= 1"), true),
    };
    Ok(Selection {
        core_cost: core_costs(topo, &usable, noise),
        perf: (usable.iter())
            .map(|&c| match opts.cpu_kind {
                KindChoice::Performance => (c, topo.perf_of(c)),
                _ => (c, 1000),
            })
            .collect(),
        task_cpus,
        housekeeper_cpu,
        housekeeper_shared,
        node,
        fenced,
        unfenced,
        spares,
        ranking,
        near: opts.near.clone(),
        passed_over,
        ranks: Vec::new(),
    })
}

/// The CPUs the options leave.
struct Restricted {
    /// The machine's candidates less `--exclude`: the housekeeper's and the spares' pool.
    usable: Vec<usize>,
    /// The task's pool among them: near the device, on the node, of the kind asked for.
    candidates: Vec<usize>,
    /// The node to bind memory to.
    node: Option<usize>,
}

/// What the options leave of the machine's CPUs (see [`Restricted`]).
fn restrict(topo: &Topology, opts: &Options) -> Result<Restricted, SelectError> {
    let excluded: BTreeSet<usize> = opts.exclude.iter().copied().collect();
    let usable: Vec<usize> = topo
        .candidates()
        .into_iter()
        .filter(|c| !excluded.contains(c))
        .collect();
    if usable.is_empty() {
        return Err(SelectError::NoCandidates);
    }
    // The housekeeper may use a CPU away from the device, as it may one off the node.
    let (near, numa) = keep_near(topo, &usable, opts)?;
    let (node, candidates) = restrict_to_node(topo, &near, numa, opts)?;
    let candidates = restrict_to_kind(topo, candidates, opts)?;
    // A kernel without NUMA has nothing to bind memory to: its one node only restricts CPUs.
    let node = node.filter(|&n| !topo.node(n).is_some_and(|info| info.synthetic));
    Ok(Restricted {
        usable,
        candidates,
        node,
    })
}

/// `--include`'s CPUs, each once, in the order given, checked against the candidates and the
/// count asked for.
fn checked_include(candidates: &[usize], opts: &Options) -> Result<Vec<usize>, SelectError> {
    let outside: Vec<usize> = opts
        .include
        .iter()
        .copied()
        .filter(|c| !candidates.contains(c))
        .collect();
    if !outside.is_empty() {
        return Err(SelectError::IncludeNotCandidate { cpus: outside });
    }
    if opts.count == 0 || opts.count > candidates.len() {
        return Err(SelectError::CountOutOfRange {
            requested: opts.count,
            available: candidates.len(),
        });
    }
    let mut include: Vec<usize> = Vec::new();
    for &c in &opts.include {
        if !include.contains(&c) {
            include.push(c);
        }
    }
    if include.len() > opts.count {
        return Err(SelectError::IncludeTooMany {
            listed: include.len(),
            requested: opts.count,
        });
    }
    Ok(include)
}

/// CPU `c`'s core: its SMT siblings, itself among them (itself alone when the topology does
/// not say).
fn siblings(topo: &Topology, c: usize) -> Vec<usize> {
    match topo.cpu(c) {
        Some(info) if !info.siblings.is_empty() => info.siblings.clone(),
        _ => vec![c],
    }
}

fn online(topo: &Topology, c: usize) -> bool {
    topo.cpu(c).is_some_and(|i| i.online)
}

/// The noise of each usable CPU's core, summed over its online siblings, as the report's one
/// figure: the event rate plus a million per whole percent of lost time (so a loaded core
/// reads as such at a glance). Only the report reads it; [`Score::compare`] orders scores.
fn core_costs(
    topo: &Topology,
    usable: &[usize],
    noise: &BTreeMap<usize, Score>,
) -> BTreeMap<usize, f64> {
    let cpu_noise = |c: usize| {
        let s = noise.get(&c).copied().unwrap_or_default();
        s.rate.min(1e6 - 1.0) + 1e6 * s.lost_pct()
    };
    (usable.iter())
        .map(|&c| {
            let core = siblings(topo, c).into_iter().filter(|&s| online(topo, s));
            (c, core.map(cpu_noise).sum())
        })
        .collect()
}

/// `--spare`'s CPUs: among those `left` after the task's and not fenced, the best near the
/// task CPUs.
fn choose_spares(
    left: &[Item],
    fenced: &[usize],
    task_cpus: &[usize],
    paths: &BTreeMap<usize, compact::Path>,
    opts: &Options,
) -> Result<Vec<usize>, SelectError> {
    let spare_room: Vec<Item> = (left.iter().copied())
        .filter(|i| !fenced.contains(&i.cpu))
        .collect();
    if spare_room.len() < opts.spare {
        return Err(SelectError::NoRoomForSpares {
            requested: opts.count,
            spare: opts.spare,
            left: spare_room.len(),
        });
    }
    let anchors = compact::Anchors {
        hard: task_cpus.iter().map(|c| paths[c]).collect(),
        near: Vec::new(),
    };
    Ok(cpus_of(&choose(&spare_room, opts.spare, &anchors, false, paths)).collect())
}

/// What the housekeeper's CPU is chosen among and kept from.
struct Room<'a> {
    usable: &'a [usize],
    task_cpus: &'a [usize],
    fenced: &'a [usize],
    spares: &'a [usize],
}

/// The housekeeper's CPU: a usable CPU outside the task's cores, the spares and the fence, not
/// isolated, of the slowest class, off the task's clusters, then the quietest; `None` when no
/// CPU is left outside the task's.
fn choose_housekeeper(
    topo: &Topology,
    noise: &BTreeMap<usize, Score>,
    paths: &BTreeMap<usize, compact::Path>,
    room: &Room,
) -> Option<usize> {
    let cpu_noise = |c: usize| noise.get(&c).copied().unwrap_or_default();
    let task_cores: BTreeSet<usize> = (room.task_cpus.iter())
        .flat_map(|&c| siblings(topo, c))
        .collect();
    let quiet_flags = |c: usize| topo.cpu(c).is_some_and(|i| i.isolated || i.nohz_full);
    // The cluster (the L2 an E-core module shares) is the finest domain above the core.
    let cluster_of = |c: usize| paths[&c][..goset_plan::level::LEVELS - 1].to_vec();
    let task_clusters: BTreeSet<Vec<u16>> = room.task_cpus.iter().map(|&c| cluster_of(c)).collect();
    (room.usable.iter().copied())
        .filter(|c| !room.task_cpus.contains(c) && !room.fenced.contains(c))
        .min_by(|&a, &b| {
            let key = |c: usize| {
                (
                    task_cores.contains(&c),
                    room.spares.contains(&c),
                    quiet_flags(c),
                    topo.class_of(c),
                    task_clusters.contains(&cluster_of(c)),
                )
            };
            key(a)
                .cmp(&key(b))
                .then(cpu_noise(a).compare(&cpu_noise(b)))
                .then(a.cmp(&b))
        })
}

/// `--cpu-kind N`: the candidates of kind N only.
fn restrict_to_kind(
    topo: &Topology,
    candidates: Vec<usize>,
    opts: &Options,
) -> Result<Vec<usize>, SelectError> {
    let KindChoice::Kind(kind) = opts.cpu_kind else {
        return Ok(candidates);
    };
    let kinds = topo.kinds.len();
    if kind >= kinds.max(1) {
        return Err(SelectError::UnknownKind { kind, kinds });
    }
    let of_kind: Vec<usize> = (candidates.into_iter())
        .filter(|&c| topo.kinds.is_empty() || topo.cpu(c).and_then(|i| i.kind) == Some(kind))
        .collect();
    if !topo.kinds.is_empty() && of_kind.len() < opts.count {
        return Err(SelectError::KindTooSmall {
            kind,
            holds: of_kind.len(),
            requested: opts.count,
        });
    }
    Ok(of_kind)
}

/// `--near`: the usable CPUs local to the device, and the NUMA choice it makes of `--numa`.
fn keep_near(
    topo: &Topology,
    usable: &[usize],
    opts: &Options,
) -> Result<(Vec<usize>, NumaChoice), SelectError> {
    let Some(device) = &opts.near else {
        let numa = match opts.numa {
            NumaChoice::Near => NumaChoice::Off,
            choice => choice,
        };
        return Ok((usable.to_vec(), numa));
    };
    // A device without local_cpulist is near its node's CPUs; one without either, near all.
    let local = (device.local_cpus.clone()).or_else(|| {
        device
            .node
            .and_then(|n| topo.node(n))
            .map(|n| n.cpus.clone())
    });
    let near: Vec<usize> = match &local {
        Some(local) => usable
            .iter()
            .copied()
            .filter(|c| local.contains(c))
            .collect(),
        None => usable.to_vec(),
    };
    let far: Vec<usize> = (opts.include.iter().copied())
        .filter(|c| usable.contains(c) && !near.contains(c))
        .collect();
    if !far.is_empty() {
        return Err(SelectError::IncludeNotNear {
            cpus: far,
            device: device.name.clone(),
        });
    }
    if near.len() < opts.count {
        return Err(SelectError::TooFewNear {
            device: device.name.clone(),
            holds: near.len(),
            requested: opts.count,
        });
    }
    let numa = match (opts.numa, device.node) {
        (NumaChoice::Auto | NumaChoice::Near, Some(n)) => NumaChoice::Node(n),
        (NumaChoice::Near, None) => NumaChoice::Off,
        (NumaChoice::Node(numa), Some(n)) if numa != n => {
            return Err(SelectError::NearOtherNode {
                device: device.name.clone(),
                device_node: n,
                numa,
            })
        }
        (choice, _) => choice,
    };
    Ok((near, numa))
}

/// The siblings to fence and those given back: every online usable sibling of a task CPU that
/// is not one itself, in slot order of the task CPU; while that leaves no usable CPU free, the
/// last is given back.
fn fence(
    topo: &Topology,
    task_cpus: &[usize],
    usable: &[usize],
) -> Result<(Vec<usize>, Vec<usize>), SelectError> {
    let outside = usable.iter().filter(|c| !task_cpus.contains(c)).count();
    if outside == 0 {
        return Err(SelectError::NoRoomToFence {
            requested: task_cpus.len(),
            available: usable.len(),
        });
    }
    let mut fenced: Vec<usize> = Vec::new();
    for &t in task_cpus {
        for s in siblings(topo, t) {
            if online(topo, s)
                && usable.contains(&s)
                && !task_cpus.contains(&s)
                && !fenced.contains(&s)
            {
                fenced.push(s);
            }
        }
    }
    let mut unfenced = Vec::new();
    while fenced.len() >= outside {
        unfenced.push(fenced.pop().expect("fenced is not empty"));
    }
    Ok((fenced, unfenced))
}

fn restrict_to_node(
    topo: &Topology,
    usable: &[usize],
    numa: NumaChoice,
    opts: &Options,
) -> Result<(Option<usize>, Vec<usize>), SelectError> {
    let in_node = |node: usize| -> Vec<usize> {
        usable
            .iter()
            .copied()
            .filter(|&c| topo.cpu(c).and_then(|i| i.node) == Some(node))
            .collect()
    };
    let known: Vec<usize> = topo
        .nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.id)
        .collect();
    match numa {
        NumaChoice::Off | NumaChoice::Near => Ok((None, usable.to_vec())),
        NumaChoice::Node(node) => {
            if !known.contains(&node) {
                return Err(SelectError::UnknownNode { node, known });
            }
            let cpus = in_node(node);
            if cpus.len() < opts.count {
                return Err(SelectError::NodeTooSmall {
                    node,
                    holds: cpus.len(),
                    requested: opts.count,
                });
            }
            Ok((Some(node), cpus))
        }
        NumaChoice::Auto => {
            let best = known
                .iter()
                .map(|&n| (n, in_node(n)))
                .filter(|(_, cpus)| opts.include.iter().all(|c| cpus.contains(c)))
                .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)));
            match best {
                // Name the biggest node, as `--numa N` does, rather than a count of all CPUs.
                Some((node, cpus)) if cpus.len() < opts.count => {
                    Err(SelectError::NoNodeLargeEnough {
                        node,
                        holds: cpus.len(),
                        requested: opts.count,
                    })
                }
                Some((node, cpus)) => Ok((Some(node), cpus)),
                None if opts.include.is_empty() => Ok((None, usable.to_vec())),
                None => Err(SelectError::IncludeNotCandidate {
                    cpus: opts.include.clone(),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests;
