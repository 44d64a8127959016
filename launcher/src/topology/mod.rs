//! Machine topology read from sysfs and procfs under an [`FsRoot`].
//!
//! Owns: which CPUs exist, are online and allowed to the launcher, how they group into SMT
//! cores, dies, clusters, packages and NUMA nodes, their kinds, and the kernel's isolation
//! parameters.
//! Must not: rank, select or print anything.
//!
//! Two layers: pure parsers over `&str` (hex masks, cpulists, the kernel command line,
//! `/proc/self/status`, `/proc/mounts`), unit-tested on captured text, and [`Topology::read`],
//! which walks the files and is tested on real machines' dumps (`tests/topology_fixtures/`).
//!
//! How the groupings are made, so that they agree with hwloc on every shared fixture:
//! - **Possible CPUs**: `cpu/possible`, else `cpu/present`, else the `cpuN` directories (plus any
//!   `cpuN` directory outside the list). One [`CpuInfo`] per possible CPU, ascending.
//! - **Online**: the `cpu/online` list. Old kernels have none: then `cpuN/online` (`1`/`0`); a CPU
//!   without that file (cpu0 usually cannot be unplugged) is online unless other CPUs have a
//!   `topology` directory and it has none (the kernel removes it while a CPU is offline).
//! - **Cores** (`siblings`): the thread-sibling mask (`thread_siblings_list`, `core_cpus_list`,
//!   or the hex masks `thread_siblings`/`core_cpus`) restricted to CPUs with the same package,
//!   die and `core_id`. AMD Bulldozer reports both cores of a compute unit as thread siblings
//!   although their `core_id`s differ: those are separate cores (as hwloc makes them), not SMT.
//!   The result is closed into a partition, so `siblings` is the same set for every CPU of a core.
//!   Online and offline CPUs never share a core.
//! - **Packages**: by `physical_package_id`; where that is -1 (POWER7) by the package mask
//!   (`package_cpus_list`, `core_siblings_list` or the masks), as hwloc does. `package` keeps the
//!   kernel's number (so `Some(-1)`); `package_index` is the grouping to use.
//! - **NUMA nodes**: `node/nodeN/cpulist`, else `cpumap`, else the `cpuM` links in the node
//!   directory, else the `cpu/cpuM/nodeN` links. A node is online per `node/online` (when missing:
//!   when its directory exists). A kernel without NUMA support (no `node` directory and no
//!   `cpuM/nodeN` links) has one node 0 of every possible CPU, as hwloc has it, marked
//!   [`NodeInfo::synthetic`]. A CPU whose node is offline has `node: None`, like hwloc (its
//!   node has no memory to bind to); [`NodeInfo`] still lists it under the offline node.
//! - **Allowed**: on the live root the launcher's own affinity (`sched_getaffinity`); on a dump
//!   `Cpus_allowed_list` of `/proc/self/status`, else the cgroup cpuset of `/proc/self/cpuset`,
//!   else every online CPU. An offline CPU is never allowed.
//! - **Isolation**: `cpu/isolated` and `cpu/nohz_full` (absent, empty or `(null)`); where a file is
//!   missing, the kernel command line (`isolcpus=`, `nohz_full=`). `rcu_nocbs=` comes from the
//!   command line; `nohz_full` CPUs count as `rcu_nocbs` too, as the kernel offloads them.
//!
//! Layout (every public item is re-exported here, so callers name `crate::topology::X`):
//! - `parse.rs`: the pure parsers;
//! - `sysfs.rs`: the file reader and the sysfs steps (possible, per-CPU ids, online, nodes);
//! - `group.rs`: packages and cores, from what `sysfs.rs` read;
//! - `kinds.rs`: CPU kinds (performance and efficiency cores) as hwloc reads them, their
//!   classes and each core's favour;
//! - `allowed.rs`: the allowed CPUs; `kernel_isolation.rs`: the kernel's isolation settings;
//! - `expr.rs`: CPU lists and likwid-pin expressions (`S0:0-3`, `E:N:4:1:2`), resolved on a
//!   topology already read (callers name `topology::expr::CpuExpr`: the module reads the
//!   [`Topology`] this file defines, so this file re-exports nothing of it);
//! - `device.rs`: `--near`'s device and its locality (NUMA node, local CPUs) in sysfs;
//! - `gpus.rs`: every GPU with its node and nearest NIC (named `topology::gpus::Gpu`, as
//!   `expr.rs`'s items are);
//! - `synthetic.rs` (tests only): made-up machines for the unit tests of code that takes a
//!   topology;
//! - this file: the types and [`Topology::read`], which runs the steps and puts each CPU
//!   together. Must not: read a file itself.

mod allowed;
mod device;
pub mod expr;
pub(crate) mod gpus;
mod group;
mod kernel_isolation;
mod kinds;
mod parse;
#[cfg(test)]
pub(crate) mod synthetic;
mod sysfs;

pub use device::{Device, DeviceError, DeviceKind};
pub use kinds::CpuKind;
pub use parse::{
    cgroup_cpuset_path, cmdline_param, cpuset_mount, parse_cmdline, parse_cpulist, parse_id,
    parse_mask, parse_nohz_full, parse_param_cpulist, split_isolcpus, status_allowed_list,
    MaskError,
};

use crate::fsroot::{FsRoot, ReadError};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use sysfs::{RawCpu, Reader};

/// One possible CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuInfo {
    /// Kernel CPU number.
    pub cpu: usize,
    /// Online now.
    pub online: bool,
    /// In the launcher's allowed mask (taskset, cgroup cpuset, Slurm); never true when offline.
    pub allowed: bool,
    /// CPUs sharing this CPU's physical core (SMT threads), itself included, ascending.
    /// Empty for an offline CPU whose topology the kernel hides.
    pub siblings: Vec<usize>,
    /// Kernel `core_id`.
    pub core: Option<i64>,
    /// Kernel `physical_package_id` (-1 on some POWER machines: group by `package_index`).
    pub package: Option<i64>,
    /// NUMA node, `None` when the CPU belongs to none (or only to an offline node).
    pub node: Option<usize>,
    /// Kernel `die_id`, where the kernel has it (-1, "no die", is `None`).
    pub die: Option<i64>,
    /// Kernel `cluster_id`, where the kernel has it (-1 is `None`).
    pub cluster: Option<i64>,
    /// The last-level cache this CPU shares, named by its lowest CPU; `None` where sysfs
    /// describes no caches.
    pub llc: Option<usize>,
    /// The level-2 cache this CPU shares, named by its lowest CPU (a cluster where the kernel
    /// has no `cluster_id`: Bulldozer's compute units, hybrid Intel's E-core modules).
    pub l2: Option<usize>,
    /// Logical package number (0, 1, ... in order of each package's lowest CPU): CPUs with the
    /// same value share a package. Agrees with hwloc also where `package` is -1.
    pub package_index: Option<usize>,
    /// In `cpu/present` (the CPU exists in hardware, even if offline).
    pub present: bool,
    /// In the kernel's `isolated` list (isolcpus=).
    pub isolated: bool,
    /// In `nohz_full`.
    pub nohz_full: bool,
    /// In `rcu_nocbs` on the kernel command line (or nohz_full, which implies it).
    pub rcu_nocbs: bool,
    /// Its CPU kind ([`Topology::kinds`] index: 0 the least performant); `None` where the
    /// machine describes no kinds, or for an offline CPU.
    pub kind: Option<usize>,
    /// How the firmware ranks its core among cores of its kind (`acpi_cppc/highest_perf`,
    /// AMD's `amd_pstate_prefcore_ranking`): higher boosts higher. `None` where every core is
    /// ranked alike or none is.
    pub favour: Option<u64>,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    /// Kernel node number.
    pub id: usize,
    /// In `node/online`.
    pub online: bool,
    /// Possible CPUs the kernel places on this node, online or not, ascending.
    pub cpus: Vec<usize>,
    /// Made up for a kernel without NUMA support (no `/sys/devices/system/node`): node 0 of
    /// every possible CPU, as hwloc reports it. Memory cannot be bound to it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub synthetic: bool,
}

/// The kernel's isolation settings: the raw command-line parameters, the sysfs lists, and the
/// effective CPU lists the per-CPU flags come from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KernelIsolation {
    /// `isolcpus=` as written (flags included); `None` when absent.
    pub isolcpus: Option<String>,
    /// `nohz_full=` as written.
    pub nohz_full_param: Option<String>,
    /// `rcu_nocbs=` as written (`Some("")` for a bare `rcu_nocbs`).
    pub rcu_nocbs_param: Option<String>,
    /// `irqaffinity=` as written.
    pub irqaffinity_param: Option<String>,
    /// `cpu/isolated`, `None` when the file is missing or unreadable.
    pub sysfs_isolated: Option<Vec<usize>>,
    /// `cpu/nohz_full` (`(null)` reads as empty), `None` when missing.
    pub sysfs_nohz_full: Option<Vec<usize>>,
    /// Isolated CPUs: sysfs, else `isolcpus=` when it isolates scheduler domains.
    pub isolated: Vec<usize>,
    /// nohz_full CPUs: sysfs, else `nohz_full=`.
    pub nohz_full: Vec<usize>,
    /// `rcu_nocbs=` CPUs.
    pub rcu_nocbs: Vec<usize>,
    /// `irqaffinity=` CPUs (the default IRQ affinity), `None` when not given.
    pub irqaffinity: Option<Vec<usize>>,
}

/// Everything the launcher knows about the machine's CPUs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Topology {
    /// One entry per possible CPU, ascending by CPU number. Possible CPUs may be sparse, so
    /// `cpus[i].cpu == i` is not guaranteed: look CPUs up with [`Topology::cpu`].
    pub cpus: Vec<CpuInfo>,
    /// NUMA nodes, ascending by id, offline ones included.
    pub nodes: Vec<NodeInfo>,
    /// `/proc/cmdline`, trimmed.
    pub cmdline: Option<String>,
    /// Isolation parameters.
    pub isolation: KernelIsolation,
    /// CPU kinds, the least performant first (hwloc's order); empty where the machine
    /// describes none.
    pub kinds: Vec<CpuKind>,
    /// Files that were missing or odd; none of them stopped the read.
    pub errors: Vec<ReadError>,
}

impl Topology {
    /// Reads the topology under `root`. Fails only when no CPU at all can be found.
    pub fn read(root: &FsRoot) -> Result<Topology, ReadError> {
        let mut r = Reader::new(root);
        let sets = r.possible_cpus()?;
        let raw = r.per_cpu_ids(&sets.dirs);
        let online = r.online(&sets, &raw);
        let packages = group::packages(&raw);
        let cores = group::cores(&raw, &online, &packages);
        let nodes = r.nodes(&sets.possible, &sets.dirs);
        let allowed = r.allowed(&online);
        let cmdline = r.cmdline();
        let possible: Vec<usize> = sets.possible.into_iter().collect();
        let isolation = r.isolation(cmdline.as_deref(), &possible);
        let kinds = r.kinds(&online.iter().copied().collect::<Vec<_>>());
        let facts = Facts {
            present: sets.present,
            raw,
            online,
            packages,
            cores,
            node_of: node_of(&nodes),
            allowed,
            isolated: isolation.isolated.iter().copied().collect(),
            nohz_full: isolation.nohz_full.iter().copied().collect(),
            rcu_nocbs: isolation
                .rcu_nocbs
                .iter()
                .chain(&isolation.nohz_full)
                .copied()
                .collect(),
            kind_of: kinds.kind_of,
            favour: kinds.favour,
        };
        Ok(Topology {
            cpus: possible.iter().map(|&cpu| facts.cpu(cpu)).collect(),
            nodes,
            cmdline,
            isolation,
            kinds: kinds.kinds,
            errors: r.errors,
        })
    }

    /// Where `cpu` sits at every locality level ([`goset_plan::level::Level`]): its NUMA
    /// node, package, last-level cache (its package where sysfs describes no caches), cluster
    /// (the kernel's, else its level-2 cache's, else its core) and core. Each group is named by a number
    /// that means nothing but equality; a CPU the topology does not know is a group of its own
    /// at every level.
    pub fn place_of(&self, cpu: usize) -> goset_plan::level::Place {
        let alone = (cpu as u16) | 0x8000;
        let Some(info) = self.cpu(cpu) else {
            return [alone; goset_plan::level::LEVELS];
        };
        let core = info.siblings.iter().min().copied().unwrap_or(cpu) as u16;
        let package = info.package_index.map_or(alone, |p| p as u16 | 0x4000);
        let cluster = match info.cluster {
            Some(id) => (self.cpus.iter())
                .filter(|c| {
                    (c.package_index, c.die, c.cluster) == (info.package_index, info.die, Some(id))
                })
                .map(|c| c.cpu)
                .min()
                .unwrap_or(cpu) as u16,
            None => info.l2.map_or(core, |l| l as u16),
        };
        // A last-level cache no wider than the core (Arm's private L2 without an L3) is no
        // domain: the cluster stands in its place, so that a team still keeps to one.
        let llc = match info.llc {
            Some(_) if !self.llc_spans_cores(info) => cluster,
            Some(l) => l as u16,
            None => package,
        };
        [
            info.node.map_or(alone, |n| n as u16),
            package,
            llc,
            cluster,
            core,
        ]
    }

    /// Whether `info`'s last-level cache holds a CPU of another core.
    fn llc_spans_cores(&self, info: &CpuInfo) -> bool {
        (self.cpus.iter())
            .any(|c| c.llc == info.llc && !info.siblings.contains(&c.cpu) && c.cpu != info.cpu)
    }

    /// The CPU numbered `cpu`.
    pub fn cpu(&self, cpu: usize) -> Option<&CpuInfo> {
        self.cpus
            .binary_search_by_key(&cpu, |c| c.cpu)
            .ok()
            .map(|i| &self.cpus[i])
    }

    /// CPUs that are online and allowed, ascending.
    pub fn candidates(&self) -> Vec<usize> {
        self.cpus
            .iter()
            .filter(|c| c.online && c.allowed)
            .map(|c| c.cpu)
            .collect()
    }

    /// Online CPUs, ascending.
    pub fn online(&self) -> Vec<usize> {
        self.cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| c.cpu)
            .collect()
    }

    /// The kind of `cpu`, where the machine describes kinds.
    pub fn kind_of(&self, cpu: usize) -> Option<&CpuKind> {
        self.kinds.get(self.cpu(cpu)?.kind?)
    }

    /// The speed of `cpu`'s class in permille of the fastest ([`CpuKind::perf`]); 1000 where
    /// there are no kinds.
    pub fn perf_of(&self, cpu: usize) -> u32 {
        self.kind_of(cpu).map_or(1000, |k| k.perf)
    }

    /// `cpu`'s performance class, 0 the slowest ([`CpuKind::class`]); 0 where there are no
    /// kinds.
    pub fn class_of(&self, cpu: usize) -> usize {
        self.kind_of(cpu).map_or(0, |k| k.class)
    }

    /// The NUMA node numbered `id`.
    pub fn node(&self, id: usize) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

/// What the steps of [`Topology::read`] found, by CPU, before each CPU is put together.
struct Facts {
    present: BTreeSet<usize>,
    raw: BTreeMap<usize, RawCpu>,
    online: BTreeSet<usize>,
    /// Logical package of each CPU with a `topology` directory.
    packages: BTreeMap<usize, usize>,
    /// The core (its CPUs) of each CPU with a `topology` directory.
    cores: BTreeMap<usize, Vec<usize>>,
    node_of: BTreeMap<usize, usize>,
    allowed: BTreeSet<usize>,
    isolated: BTreeSet<usize>,
    nohz_full: BTreeSet<usize>,
    /// `rcu_nocbs` and `nohz_full` CPUs (the kernel offloads both).
    rcu_nocbs: BTreeSet<usize>,
    kind_of: BTreeMap<usize, usize>,
    favour: BTreeMap<usize, u64>,
}

impl Facts {
    fn cpu(&self, cpu: usize) -> CpuInfo {
        let none = RawCpu::default();
        let r = self.raw.get(&cpu).unwrap_or(&none);
        let online = self.online.contains(&cpu);
        let siblings = match self.cores.get(&cpu) {
            Some(core) => core.clone(),
            None if online => vec![cpu],
            None => Vec::new(),
        };
        CpuInfo {
            cpu,
            online,
            allowed: online && self.allowed.contains(&cpu),
            siblings,
            core: r.core,
            package: r.package,
            node: self.node_of.get(&cpu).copied(),
            die: r.die,
            cluster: r.cluster,
            llc: (r.llc_cpus.as_ref()).and_then(|l| l.iter().min().copied()),
            l2: (r.l2_cpus.as_ref()).and_then(|l| l.iter().min().copied()),
            package_index: self.packages.get(&cpu).copied(),
            present: self.present.contains(&cpu),
            isolated: self.isolated.contains(&cpu),
            nohz_full: self.nohz_full.contains(&cpu),
            rcu_nocbs: self.rcu_nocbs.contains(&cpu),
            kind: self.kind_of.get(&cpu).copied(),
            favour: self.favour.get(&cpu).copied(),
        }
    }
}

/// The node of each CPU: the first online node that lists it. A CPU only on offline nodes has
/// none.
fn node_of(nodes: &[NodeInfo]) -> BTreeMap<usize, usize> {
    let mut node_of = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.online) {
        for &c in &n.cpus {
            node_of.entry(c).or_insert(n.id);
        }
    }
    node_of
}
