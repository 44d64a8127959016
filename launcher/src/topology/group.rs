//! Grouping CPUs into packages and SMT cores.
//!
//! Owns: the **Packages** and **Cores** rules of the module docs (the -1 package id of POWER7,
//! AMD compute units that are not SMT, online and offline CPUs kept apart), as pure functions of
//! what `sysfs.rs` read. Must not: read files or note errors.

use super::sysfs::RawCpu;
use std::collections::{BTreeMap, BTreeSet};

/// What CPUs of one package have in common.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PackageKey {
    Id(i64),
    Mask(Vec<usize>),
    Alone(usize),
}

impl PackageKey {
    /// The package of `cpu`: its `physical_package_id`, else (-1) its package mask, else itself
    /// alone. `None` without a `topology` directory.
    fn of(cpu: usize, r: &RawCpu) -> Option<PackageKey> {
        if !r.has_topology {
            return None;
        }
        Some(match (r.package, &r.package_cpus) {
            (Some(id), _) if id >= 0 => PackageKey::Id(id),
            (_, Some(mask)) if mask.contains(&cpu) => PackageKey::Mask(mask.clone()),
            _ => PackageKey::Alone(cpu),
        })
    }
}

/// The logical package (0, 1, ... in order of each package's lowest CPU) of every CPU with a
/// `topology` directory.
pub(super) fn packages(raw: &BTreeMap<usize, RawCpu>) -> BTreeMap<usize, usize> {
    let mut index: BTreeMap<PackageKey, usize> = BTreeMap::new();
    raw.iter()
        .filter_map(|(&cpu, r)| {
            let key = PackageKey::of(cpu, r)?;
            let next = index.len();
            Some((cpu, *index.entry(key).or_insert(next)))
        })
        .collect()
}

/// The core of every CPU with a `topology` directory, as the core's CPUs ascending: thread
/// siblings restricted to the same package, die and `core_id`, closed into a partition, online
/// and offline CPUs kept apart. `packages` is what [`packages`] made of `raw`.
pub(super) fn cores(
    raw: &BTreeMap<usize, RawCpu>,
    online: &BTreeSet<usize>,
    packages: &BTreeMap<usize, usize>,
) -> BTreeMap<usize, Vec<usize>> {
    let same_core = |cpu: usize, r: &RawCpu, t: usize, rt: &RawCpu| {
        t != cpu
            && rt.has_topology
            && online.contains(&t) == online.contains(&cpu)
            && packages.get(&t) == packages.get(&cpu)
            && rt.die == r.die
            && (rt.core == r.core || rt.core.is_none() || r.core.is_none())
    };
    let with_topology = || raw.iter().filter(|(_, r)| r.has_topology);
    let mut groups = Groups(BTreeMap::new());
    for (&cpu, r) in with_topology() {
        groups.find(cpu);
        for &t in r.thread_siblings.iter().flatten() {
            if raw.get(&t).is_some_and(|rt| same_core(cpu, r, t, rt)) {
                groups.union(cpu, t);
            }
        }
    }
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (&cpu, _) in with_topology() {
        members.entry(groups.find(cpu)).or_default().push(cpu);
    }
    with_topology()
        .map(|(&cpu, _)| (cpu, members[&groups.find(cpu)].clone()))
        .collect()
}

/// Simple union-find over CPU numbers; the root of a group is its lowest CPU.
struct Groups(BTreeMap<usize, usize>);

impl Groups {
    fn find(&mut self, x: usize) -> usize {
        let p = *self.0.entry(x).or_insert(x);
        if p == x {
            return x;
        }
        let r = self.find(p);
        self.0.insert(x, r);
        r
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            self.0.insert(hi, lo);
        }
    }
}
