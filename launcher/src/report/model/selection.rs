//! The selection as the report tells it: the decision ([`Decision`], from
//! [`crate::select::Selection`]) and one row per candidate CPU.

use crate::noise::Noise;
use crate::select::ranks::RankBlock;
use crate::select::Selection;
use crate::topology::gpus::{Gpu, Nic};
use crate::topology::{Device, DeviceKind, Topology};
use serde::Serialize;
use std::collections::BTreeMap;

/// One row of the Selection table (and of its JSON).
#[derive(Debug, Clone, Serialize)]
pub struct SelectionRow {
    /// CPU number.
    pub cpu: usize,
    /// `*` task, `&` housekeeper, `*&` both (shared), `+` spare (`+&` with the housekeeper),
    /// `!` fenced sibling, blank otherwise.
    pub sel: String,
    /// Slot index for task CPUs.
    pub slot: Option<usize>,
    /// Steerable interrupts in the sampling window (`None`: not measured).
    pub irq_steerable: Option<u64>,
    /// Non-steerable interrupts in the window.
    pub irq_nonsteerable: Option<u64>,
    /// Softirqs in the window.
    pub softirq: Option<u64>,
    /// Percent of the window busy with other work.
    pub busy_pct: Option<f64>,
    /// Percent of the window stolen by the hypervisor.
    pub steal_pct: Option<f64>,
    /// Core cost: this CPU's noise score plus its SMT siblings'.
    pub core_cost: f64,
    /// Its CPU kind (0 the least performant), where the machine has kinds.
    pub kind: Option<usize>,
    /// SMT siblings other than itself.
    pub siblings: Vec<usize>,
    /// NUMA node.
    pub node: Option<usize>,
    /// In `isolated`.
    pub isolated: bool,
    /// In `nohz_full`.
    pub nohz_full: bool,
    /// In `rcu_nocbs`.
    pub rcu_nocbs: bool,
}

/// The selection with its per-CPU rows, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SelectionReport {
    /// The decision.
    #[serde(flatten)]
    pub selection: Decision,
    /// Sampling window in milliseconds (0: ranked by topology alone).
    pub sample_ms: u64,
    /// One row per candidate CPU, in ranking order.
    pub cpus: Vec<SelectionRow>,
}

fn read_failed(noise: &Noise, file: &str) -> bool {
    noise.errors.iter().any(|e| e.file == file)
}

/// Builds the selection rows: candidates in ranking order.
pub fn selection_report(topo: &Topology, noise: &Noise, sel: &Selection) -> SelectionReport {
    let measured = noise.window_ms > 0;
    let irqs = measured && !read_failed(noise, "/proc/interrupts");
    let softirqs = measured && !read_failed(noise, "/proc/softirqs");
    let stat = measured && !read_failed(noise, "/proc/stat");
    let cpus = sel
        .ranking
        .iter()
        .map(|&cpu| {
            let info = topo.cpu(cpu);
            let n = noise.cpus.get(&cpu);
            let task = sel.task_cpus.iter().position(|&c| c == cpu);
            let hk = sel.housekeeper_cpu == cpu;
            let sel_mark = match (task.is_some(), hk) {
                (true, true) => "*&",
                (true, false) => "*",
                _ if sel.spares.contains(&cpu) && hk => "+&",
                _ if sel.spares.contains(&cpu) => "+",
                (false, true) => "&",
                _ if sel.fenced.contains(&cpu) => "!",
                _ => "",
            };
            SelectionRow {
                cpu,
                sel: sel_mark.to_string(),
                slot: task,
                irq_steerable: n.filter(|_| irqs).map(|n| n.irq_steerable),
                irq_nonsteerable: n.filter(|_| irqs).map(|n| n.irq_nonsteerable),
                softirq: n.filter(|_| softirqs).map(|n| n.softirq),
                busy_pct: n.filter(|_| stat).map(|n| n.busy_pct),
                steal_pct: n.filter(|_| stat).map(|n| n.steal_pct),
                core_cost: sel.core_cost.get(&cpu).copied().unwrap_or(0.0),
                kind: info.and_then(|i| i.kind),
                siblings: info
                    .map(|i| i.siblings.iter().copied().filter(|&s| s != cpu).collect())
                    .unwrap_or_default(),
                node: info.and_then(|i| i.node),
                isolated: info.is_some_and(|i| i.isolated),
                nohz_full: info.is_some_and(|i| i.nohz_full),
                rcu_nocbs: info.is_some_and(|i| i.rcu_nocbs),
            }
        })
        .collect();
    SelectionReport {
        selection: Decision::from(sel),
        sample_ms: noise.window_ms,
        cpus,
    }
}

/// The decision (see [`Selection`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Task CPUs in slot order: slot 0 (the first process's main thread) first.
    pub task_cpus: Vec<usize>,
    /// The housekeeper's CPU.
    pub housekeeper: usize,
    /// No CPU was left: the housekeeper shares a task CPU.
    pub housekeeper_shared: bool,
    /// The NUMA node the task is bound to.
    pub node: Option<usize>,
    /// SMT siblings of task CPUs booked idle (`--fence`).
    pub fenced: Vec<usize>,
    /// SMT siblings of task CPUs that could not be fenced: the housekeeper needed a CPU.
    pub unfenced: Vec<usize>,
    /// CPUs booked idle for moves off a task CPU that turns noisy (`--spare`), best first.
    pub spares: Vec<usize>,
    /// Core cost of every candidate CPU (its own noise plus its siblings').
    pub core_cost: BTreeMap<usize, f64>,
    /// Every candidate CPU in the order the policy would hand them out.
    pub ranking: Vec<usize>,
    /// The device the task CPUs are near (`--near`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near: Option<DeviceReport>,
    /// CPUs the selection would have given the task had every CPU been quiet, passed over for
    /// their noise (or other work's load).
    pub passed_over: Vec<usize>,
    /// Each local rank's block near its GPU (`--near gpu:local-rank`), in rank order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankReport>,
}

impl From<&Selection> for Decision {
    fn from(s: &Selection) -> Decision {
        Decision {
            task_cpus: s.task_cpus.clone(),
            housekeeper: s.housekeeper_cpu,
            housekeeper_shared: s.housekeeper_shared,
            node: s.node,
            fenced: s.fenced.clone(),
            unfenced: s.unfenced.clone(),
            spares: s.spares.clone(),
            core_cost: s.core_cost.clone(),
            ranking: s.ranking.clone(),
            near: s.near.as_ref().map(DeviceReport::from),
            passed_over: s.passed_over.clone(),
            ranks: s.ranks.iter().map(RankReport::from).collect(),
        }
    }
}

/// The device `--near` names, and where it sits (see [`Device`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceReport {
    /// The name as given (`eth0`, `nvme0n1p1`, `3b:00.0`, `gpu1`).
    pub name: String,
    /// How it was named: `net`, `block`, `pci` or `gpu`.
    pub kind: &'static str,
    /// The sysfs directory its locality was read from.
    pub sysfs: String,
    /// That directory's name: the PCI address of a PCI device.
    pub bus_id: String,
    /// Its NUMA node.
    pub node: Option<usize>,
    /// Its local CPUs.
    pub local_cpus: Option<Vec<usize>>,
}

impl From<&Device> for DeviceReport {
    fn from(d: &Device) -> DeviceReport {
        DeviceReport {
            name: d.name.clone(),
            kind: kind_name(d.kind),
            sysfs: d.sysfs.clone(),
            bus_id: d.bus_id.clone(),
            node: d.node,
            local_cpus: d.local_cpus.clone(),
        }
    }
}

/// How `--near` named the device, as the report spells it.
fn kind_name(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Net => "net",
        DeviceKind::Block => "block",
        DeviceKind::Pci => "pci",
        DeviceKind::Gpu => "gpu",
    }
}

/// One local rank's block near its GPU (see [`RankBlock`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankReport {
    /// The local rank.
    pub rank: usize,
    /// Its GPU.
    pub gpu: GpuReport,
    /// Its share by `--near-share`, before other ranks took from it.
    pub share: Vec<usize>,
    /// Its block: the slots its process keeps to, best first.
    pub cpus: Vec<usize>,
    /// Where the block was chosen instead, when the share had too few CPUs left: `node`,
    /// `package` or `machine`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub widened: Option<&'static str>,
}

impl From<&RankBlock> for RankReport {
    fn from(b: &RankBlock) -> RankReport {
        RankReport {
            rank: b.rank,
            gpu: GpuReport::from(&b.gpu),
            share: b.share.clone(),
            cpus: b.cpus.clone(),
            widened: b.widened,
        }
    }
}

/// A GPU and where it sits (see [`Gpu`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuReport {
    /// Its number as `gpuN` counts.
    pub index: usize,
    /// Its PCI address.
    pub bus_id: String,
    /// Its `numa_node` (`None`: -1).
    pub numa_node: Option<usize>,
    /// The node its CPUs come from; `None`: near every CPU alike.
    pub node: Option<usize>,
    /// The NIC nearest it, where the machine has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<NicReport>,
}

impl From<&Gpu> for GpuReport {
    fn from(g: &Gpu) -> GpuReport {
        GpuReport {
            index: g.index,
            bus_id: g.bus_id.clone(),
            numa_node: g.numa_node,
            node: g.node,
            nic: g.nic.as_ref().map(NicReport::from),
        }
    }
}

/// A network card and how it reaches a GPU (see [`Nic`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicReport {
    /// Its network interface, else its PCI address.
    pub name: String,
    /// Its PCI address.
    pub bus_id: String,
    /// The path between them, as `nvidia-smi topo -m` names it (`PIX` ... `SYS`).
    pub link: &'static str,
}

impl From<&Nic> for NicReport {
    fn from(n: &Nic) -> NicReport {
        NicReport {
            name: n.name.clone(),
            bus_id: n.bus_id.clone(),
            link: n.link,
        }
    }
}
