//! `--near gpu:local-rank` at launch: the GPUs the ranks see, how many ranks, and each one's
//! block size.
//!
//! The GPUs are those this environment's visible-devices variable lists (the task inherits
//! it), else all of the machine's; the ranks are `-n / --per-process` (or `--instances`),
//! else one a GPU, with `-n` split evenly among them. A variable that names GPUs by UUID
//! cannot be resolved from sysfs: one warning, and the whole-run rule (no rank blocks).
//!
//! Under `srun --goset` ([`StepTask`]) the GPUs are those the task's own variable lists, and
//! where the node runs several tasks each task is one local rank (`SLURM_LOCALID`): its block
//! alone is chosen, of `-n` CPUs, by the same rule and in the same shares.

use crate::cli::RunOptions;
use crate::error::{Error, Result};
use crate::output;
use crate::select::ranks::RankRequest;
use crate::topology::{self, Topology};
use goset_plan::ranks::{self, RankGpu, MAX_RANK_BLOCKS};

/// A Slurm task's part in the rank request (`srun --goset`).
#[derive(Debug, Clone, Default)]
pub(super) struct StepTask {
    /// Its local id, where each task of the node is a rank; `None` where the node runs one
    /// task, whose processes are the ranks (torchrun, mpirun inside it), as under goset-run.
    pub rank: Option<usize>,
    /// The CPUs the step's other tasks on the node hold.
    pub held: Vec<usize>,
    /// The task's visible-devices variable and its value, where it has one set.
    pub visible: Option<(String, Vec<u8>)>,
}

/// The rank request, `None` without `--near gpu:local-rank` or when the GPUs cannot be told
/// (warned about). `get` reads this process's environment; `task`: a Slurm task's part,
/// whose own variable replaces it.
pub(super) fn request(
    opts: &RunOptions,
    topo: &Topology,
    get: impl Fn(&str) -> Option<Vec<u8>>,
    task: Option<&StepTask>,
) -> Result<Option<RankRequest>> {
    let Some(mode) = opts.ranks else {
        return Ok(None);
    };
    let get = |v: &str| match task {
        Some(t) => (t.visible.as_ref())
            .filter(|(name, _)| name == v)
            .map(|(_, value)| value.clone()),
        None => get(v),
    };
    let all = topology::gpus::gpus(&opts.fsroot, topo);
    if all.is_empty() {
        return Err(Error::Usage(
            "--near gpu:local-rank: this machine has no GPU (no PCI display controller or \
             processing accelerator)"
                .into(),
        ));
    }
    let Some(gpus) = seen_gpus(opts, &all, get)? else {
        return Ok(None);
    };
    let n = opts.select.count;
    let held = task.map(|t| t.held.clone()).unwrap_or_default();
    if let Some(rank) = task.and_then(|t| t.rank) {
        return Ok(Some(RankRequest {
            gpus,
            ranks: rank..rank + 1,
            held,
            per_rank: n,
            mode,
        }));
    }
    let (ranks, per_rank) = match opts.per_process {
        Some(t) => (n / t, t),
        None if n < gpus.len() || !n.is_multiple_of(gpus.len()) => {
            return Err(Error::Usage(format!(
                "-n {n} with --near gpu:local-rank: one rank a GPU ({} GPUs) needs -n a multiple \
                 of {}; or give --per-process T (ranks = -n / T)",
                gpus.len(),
                gpus.len()
            )))
        }
        None => (gpus.len(), n / gpus.len()),
    };
    if ranks > MAX_RANK_BLOCKS {
        return Err(Error::Usage(format!(
            "--near gpu:local-rank: {ranks} ranks, more than the {MAX_RANK_BLOCKS} blocks a plan holds"
        )));
    }
    Ok(Some(RankRequest {
        gpus,
        ranks: 0..ranks,
        held,
        per_rank,
        mode,
    }))
}

/// The GPUs the ranks see: the visible-devices variable's, in its order, else all; `None`
/// (warned) when the variable names a GPU by UUID.
fn seen_gpus(
    opts: &RunOptions,
    all: &[topology::gpus::Gpu],
    get: impl Fn(&str) -> Option<Vec<u8>>,
) -> Result<Option<Vec<topology::gpus::Gpu>>> {
    let values: Vec<(&str, Vec<u8>)> = (ranks::VISIBLE_VARS.iter())
        .filter_map(|&v| Some((v, get(v)?)))
        .collect();
    let lookup = |name: &str| {
        values
            .iter()
            .find(|(v, _)| *v == name)
            .map(|(_, x)| x.as_slice())
    };
    let Some((var, list)) = ranks::visible(lookup) else {
        return Ok(Some(all.to_vec()));
    };
    let entries = list.split(|&c| c == b',').count();
    let mut seen = Vec::new();
    for r in 0..entries {
        match ranks::gpu_of_rank(r, all.len(), lookup) {
            RankGpu::Gpu { gpu, .. } => match all.get(gpu) {
                Some(g) => seen.push(g.clone()),
                None => {
                    return Err(Error::Usage(format!(
                        "--near gpu:local-rank: {var}={} names GPU {gpu}, but this machine has {} \
                         (gpu0-gpu{})",
                        String::from_utf8_lossy(list),
                        all.len(),
                        all.len() - 1
                    )))
                }
            },
            RankGpu::NotAnIndex { .. } | RankGpu::NoRank => {
                if !opts.quiet {
                    output::to_stderr(&format!(
                        "goset-run: warning: --near gpu:local-rank: {var}={} names GPUs by UUID, \
                         which sysfs cannot resolve: no rank blocks, the task's CPUs are chosen \
                         for the whole run\n",
                        String::from_utf8_lossy(list)
                    ));
                }
                return Ok(None);
            }
        }
    }
    Ok(Some(seen))
}
