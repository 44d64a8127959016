//! Each process of the task (the `processes` entries), built by [`crate::report::processes`]
//! from the threads.

use serde::Serialize;

/// One process of the task (and of its JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessReport {
    /// Process id.
    pub pid: i32,
    /// The copy it is with `--instances` (the copy's first process); `None` otherwise.
    pub instance: Option<usize>,
    /// Its main thread's name (else its first thread's).
    pub comm: String,
    /// Threads seen.
    pub threads: usize,
    /// The CPUs its threads were placed on (else seen running on), ascending.
    pub cpus: Vec<usize>,
    /// Those CPUs' NUMA nodes, ascending.
    pub nodes: Vec<usize>,
    /// How a copy ended (`--instances`); `None` for other processes.
    pub exit_code: Option<i32>,
    /// With `--near gpu:local-rank`: its local rank, as its shim logged it, else that whose
    /// block its threads kept to (the shim gives a process the block of its own local rank's
    /// GPU), see [`crate::report::processes::assign_ranks`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    /// The variable its shim read the rank from (`LOCAL_RANK`, `SLURM_LOCALID` ...); `None`
    /// where the rank is inferred from its block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_var: Option<&'static str>,
    /// That rank's GPU (`gpu3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// That rank's block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<Vec<usize>>,
}
