//! Made-up machines for the unit tests of code that works on a [`Topology`] (selection, CPU
//! expressions), so that each does not build its own.

use super::{CpuInfo, NodeInfo, Topology};

/// A machine of `cores` cores with `smt` threads each, numbered like Linux on x86 (thread t of
/// core c is CPU t*cores + c), split evenly over `nodes` nodes, each one package with one
/// last-level cache and one die.
pub(crate) fn machine(cores: usize, smt: usize, nodes: usize) -> Topology {
    let n = cores * smt;
    let node_of = |cpu: usize| (cpu % cores) * nodes / cores;
    let first_of_node = |cpu: usize| (0..n).find(|&c| node_of(c) == node_of(cpu));
    let cpus = (0..n)
        .map(|cpu| CpuInfo {
            cpu,
            online: true,
            allowed: true,
            siblings: (0..smt).map(|t| t * cores + cpu % cores).collect(),
            core: Some((cpu % cores) as i64),
            package: Some(node_of(cpu) as i64),
            node: Some(node_of(cpu)),
            die: Some(0),
            cluster: None,
            llc: first_of_node(cpu),
            l2: None,
            package_index: Some(node_of(cpu)),
            present: true,
            isolated: false,
            nohz_full: false,
            rcu_nocbs: false,
            kind: None,
            favour: None,
        })
        .collect();
    let nodes = (0..nodes)
        .map(|id| NodeInfo {
            id,
            online: true,
            cpus: (0..n).filter(|&c| node_of(c) == id).collect(),
            synthetic: false,
        })
        .collect();
    Topology {
        cpus,
        nodes,
        ..Default::default()
    }
}
