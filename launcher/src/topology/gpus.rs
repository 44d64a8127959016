//! The machine's GPUs as `--near gpu:local-rank` sees them: each one's node, and the network
//! card nearest it.
//!
//! Owns: the list of GPUs in `gpuN` order ([`super::device::gpu_order`]), the node a GPU's
//! CPUs are taken from, and the NIC each GPU pairs with for GPUDirect RDMA: the one whose PCI
//! path shares the most with the GPU's (the same PCIe switch first), labelled as `nvidia-smi
//! topo -m` labels the link. Must not: decide what a rank gets (`select::ranks` does).
//!
//! A GPU's node is its `numa_node`; where that node has no CPUs (the GPU memory nodes of a
//! Grace Hopper), or the GPU reports -1 but local CPUs short of all, the node holding most of
//! its `local_cpulist`; else none (near every CPU alike).

use super::device::{gpu_order, Device, PciAddress};
use super::Topology;
use crate::fsroot::FsRoot;

const PCI: &str = "/sys/bus/pci/devices";

/// A GPU and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its number as `gpuN` (and CUDA with `CUDA_DEVICE_ORDER=PCI_BUS_ID`) counts.
    pub index: usize,
    /// Its PCI address.
    pub bus_id: String,
    /// Its `numa_node` (`None`: -1).
    pub numa_node: Option<usize>,
    /// The node its CPUs come from (see the module docs); `None`: near every CPU alike.
    pub node: Option<usize>,
    /// The NIC nearest it, where the machine has one.
    pub nic: Option<Nic>,
    /// Its sysfs directory (for the NIC pairing).
    pub sysfs: String,
}

/// A network card and how it reaches a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    /// Its network interface (`ib0`, `ens1f0`), else its PCI address.
    pub name: String,
    /// Its PCI address.
    pub bus_id: String,
    /// The path between them, as `nvidia-smi topo -m` names it: `PIX` (one PCIe switch),
    /// `PXB` (several bridges), `PHB` (the host bridge), `NODE` (host bridges of one node),
    /// `SYS` (across the socket link).
    pub link: &'static str,
}

/// Every GPU of the machine under `root`, in `gpuN` order, each with its node and NIC.
pub fn gpus(root: &FsRoot, topo: &Topology) -> Vec<Gpu> {
    let functions = super::device::pci_functions(root);
    let nics: Vec<(PciAddress, String)> = (functions.iter())
        .filter(|f| f.class >> 16 == 0x02)
        .filter_map(|f| Some((f.address, root.canonical(&format!("{PCI}/{}", f.address))?)))
        .collect();
    let net_names = net_names(root);
    (gpu_order(&functions).iter().enumerate())
        .filter_map(|(index, _)| {
            let d = Device::find(root, &format!("gpu{index}")).ok()?;
            let node = effective_node(topo, &d);
            let nic = nearest_nic(&d.sysfs, node, &nics, topo, root).map(|(a, link)| Nic {
                name: (net_names.iter())
                    .find(|(dir, _)| *dir == a.1)
                    .map_or_else(|| a.0.to_string(), |(_, n)| n.clone()),
                bus_id: a.0.to_string(),
                link,
            });
            Some(Gpu {
                index,
                bus_id: d.bus_id.clone(),
                numa_node: d.node,
                node,
                nic,
                sysfs: d.sysfs,
            })
        })
        .collect()
}

/// Each network interface's device directory and its name, names in order.
fn net_names(root: &FsRoot) -> Vec<(String, String)> {
    let mut names = root.list("/sys/class/net");
    names.sort();
    (names.into_iter())
        .filter_map(|n| Some((root.canonical(&format!("/sys/class/net/{n}/device"))?, n)))
        .collect()
}

/// The node device `d`'s CPUs come from (see the module docs).
pub fn effective_node(topo: &Topology, d: &Device) -> Option<usize> {
    let has_cpus = |n: usize| topo.node(n).is_some_and(|i| !i.cpus.is_empty());
    if let Some(n) = d.node.filter(|&n| has_cpus(n)) {
        return Some(n);
    }
    let local = d.local_cpus.as_ref()?;
    if !d.has_locality(&topo.online()) && d.node.is_none() {
        return None;
    }
    (topo.nodes.iter())
        .filter(|n| !n.cpus.is_empty())
        .map(|n| (n.cpus.iter().filter(|c| local.contains(c)).count(), n.id))
        .filter(|&(count, _)| count > 0)
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, id)| id)
}

/// The PCI devices on the path from the host bridge to `dir`, in order.
fn pci_path(dir: &str) -> Vec<&str> {
    (dir.split('/'))
        .skip_while(|c| !c.starts_with("pci"))
        .collect()
}

/// The link between two PCI devices at `a` and `b`, on nodes `node_a` and `node_b`.
fn link(a: &str, b: &str, node_a: Option<usize>, node_b: Option<usize>) -> &'static str {
    let (pa, pb) = (pci_path(a), pci_path(b));
    let shared = pa.iter().zip(&pb).take_while(|(x, y)| x == y).count();
    match shared {
        0 if node_a.is_some() && node_a == node_b => "NODE",
        0 => "SYS",
        // The host bridge alone.
        1 => "PHB",
        // Through one switch: each below the switch's upstream port by a downstream port.
        _ if pa.len() - shared <= 2 && pb.len() - shared <= 2 && shared >= 3 => "PIX",
        _ => "PXB",
    }
}

/// How near a link is: the smaller the nearer.
fn link_rank(link: &str) -> usize {
    ["PIX", "PXB", "PHB", "NODE", "SYS"]
        .iter()
        .position(|l| *l == link)
        .unwrap_or(5)
}

/// The NIC of `nics` nearest the GPU at `gpu_dir` on `node`: the nearest link, then the
/// longest shared PCI path, then the lowest address.
fn nearest_nic(
    gpu_dir: &str,
    node: Option<usize>,
    nics: &[(PciAddress, String)],
    topo: &Topology,
    root: &FsRoot,
) -> Option<((PciAddress, String), &'static str)> {
    (nics.iter())
        .map(|(addr, dir)| {
            let nic_node = Device::find(root, &addr.to_string())
                .ok()
                .and_then(|d| effective_node(topo, &d));
            let l = link(gpu_dir, dir, node, nic_node);
            let shared = (pci_path(gpu_dir).iter())
                .zip(pci_path(dir))
                .take_while(|(x, y)| **x == *y)
                .count();
            (
                (link_rank(l), usize::MAX - shared, *addr),
                (*addr, dir.clone()),
                l,
            )
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, nic, l)| (nic, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_named_as_nvidia_smi_names_them() {
        let sw = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
        let gpu = format!("{sw}/0000:02:00.0/0000:03:00.0");
        let nic_same_switch = format!("{sw}/0000:02:01.0/0000:04:00.0");
        assert_eq!(link(&gpu, &nic_same_switch, Some(0), Some(0)), "PIX");
        let nic_other_port = "/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0";
        assert_eq!(link(&gpu, nic_other_port, Some(0), Some(0)), "PHB");
        let deeper = format!("{sw}/0000:02:02.0/0000:06:00.0/0000:07:00.0/0000:08:00.0");
        assert_eq!(link(&gpu, &deeper, Some(0), Some(0)), "PXB");
        let other_bridge = "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0";
        assert_eq!(link(&gpu, other_bridge, Some(0), Some(0)), "NODE");
        assert_eq!(link(&gpu, other_bridge, Some(0), Some(1)), "SYS");
        assert!(link_rank("PIX") < link_rank("SYS"));
    }
}
