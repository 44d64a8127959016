//! Machine topology read from sysfs and procfs under an [`FsRoot`].
//!
//! Owns: which CPUs exist, are online and allowed to the launcher, how they group into SMT
//! cores, dies, clusters, packages and NUMA nodes, and the kernel's isolation parameters.
//! Must not: rank, select or print anything.

use crate::fsroot::{FsRoot, ReadError};
use serde::Serialize;

/// One possible CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuInfo {
    /// Kernel CPU number.
    pub cpu: usize,
    /// Online now.
    pub online: bool,
    /// In the launcher's allowed mask (taskset, cgroup cpuset, Slurm).
    pub allowed: bool,
    /// CPUs sharing this CPU's physical core (SMT threads), itself included, ascending.
    /// Empty for an offline CPU whose topology the kernel hides.
    pub siblings: Vec<usize>,
    /// Kernel `core_id`.
    pub core: Option<i64>,
    /// Kernel `die_id`, where the kernel has it.
    pub die: Option<i64>,
    /// Kernel `cluster_id`, where the kernel has it.
    pub cluster: Option<i64>,
    /// Kernel `physical_package_id` (-1 on some POWER machines).
    pub package: Option<i64>,
    /// NUMA node, `None` when the CPU belongs to none.
    pub node: Option<usize>,
    /// In the kernel's `isolated` list (isolcpus=).
    pub isolated: bool,
    /// In `nohz_full`.
    pub nohz_full: bool,
    /// In `rcu_nocbs` on the kernel command line.
    pub rcu_nocbs: bool,
}
