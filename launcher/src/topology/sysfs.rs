//! Reading the CPU and NUMA-node directories of sysfs.
//!
//! Owns: [`Reader`], which reads files under an [`FsRoot`] and notes every missing or odd one
//! instead of failing, and the sysfs steps of [`Topology::read`](super::Topology::read):
//! possible and present CPUs, each CPU's topology ids and masks, online CPUs, NUMA nodes.
//! Must not: group CPUs into cores or packages (`group.rs`), look at the process (`allowed.rs`)
//! or the command line (`kernel_isolation.rs`), or build the per-CPU result (`mod.rs`).

use super::parse::{parse_cpulist, parse_id, parse_mask};
use super::NodeInfo;
use crate::fsroot::{FsRoot, ReadError};
use std::collections::{BTreeMap, BTreeSet};

pub(super) const CPU_DIR: &str = "/sys/devices/system/cpu";
const NODE_DIR: &str = "/sys/devices/system/node";

/// Per-CPU facts read from `cpuN/topology`.
#[derive(Default, Clone)]
pub(super) struct RawCpu {
    pub(super) has_topology: bool,
    pub(super) core: Option<i64>,
    pub(super) die: Option<i64>,
    pub(super) cluster: Option<i64>,
    pub(super) package: Option<i64>,
    pub(super) thread_siblings: Option<Vec<usize>>,
    pub(super) package_cpus: Option<Vec<usize>>,
    /// The CPUs sharing this CPU's last-level cache (`cpuN/cache/indexK`, the highest level
    /// that is not an instruction cache).
    pub(super) llc_cpus: Option<Vec<usize>>,
    /// The CPUs sharing its level-2 cache.
    pub(super) l2_cpus: Option<Vec<usize>>,
}

/// The CPUs the kernel knows of.
pub(super) struct CpuSets {
    /// Numbers of the `cpuN` directories, ascending.
    pub(super) dirs: Vec<usize>,
    /// `cpu/possible` (else `cpu/present`) plus every `cpuN` directory; never empty.
    pub(super) possible: BTreeSet<usize>,
    /// `cpu/present` plus every `cpuN` directory (the directories alone without the file).
    pub(super) present: BTreeSet<usize>,
}

/// Reads topology files under a root, collecting what was missing or odd in `errors`.
pub(super) struct Reader<'a> {
    pub(super) root: &'a FsRoot,
    pub(super) errors: Vec<ReadError>,
}

// ---------------------------------------------------------------------------------------------
// Reading one file

impl<'a> Reader<'a> {
    pub(super) fn new(root: &'a FsRoot) -> Reader<'a> {
        Reader {
            root,
            errors: Vec::new(),
        }
    }

    pub(super) fn note(&mut self, file: &str, reason: impl Into<String>) {
        self.errors.push(ReadError {
            file: file.to_string(),
            reason: reason.into(),
        });
    }

    /// Reads an optional file, noting read errors other than "missing".
    pub(super) fn read_quiet(&mut self, file: &str) -> Option<String> {
        match self.root.read(file) {
            Ok(s) => Some(s),
            Err(e) if e.reason == "missing" => None,
            Err(e) => {
                self.errors.push(e);
                None
            }
        }
    }

    /// Reads a file expected to exist, noting it when missing.
    pub(super) fn read_noted(&mut self, file: &str) -> Option<String> {
        match self.root.read(file) {
            Ok(s) => Some(s),
            Err(e) => {
                self.errors.push(e);
                None
            }
        }
    }

    /// Parses the text of cpulist file `file`, noting it when unparsable.
    pub(super) fn cpulist_file(&mut self, file: &str, text: &str) -> Option<Vec<usize>> {
        match parse_cpulist(text.trim_matches(|c: char| c.is_whitespace() || c == '\0')) {
            Ok(v) => Some(v),
            Err(e) => {
                self.note(file, format!("unparsable cpulist {:?}: {e}", text.trim()));
                None
            }
        }
    }

    fn mask_file(&mut self, file: &str, text: &str) -> Option<Vec<usize>> {
        match parse_mask(text.trim_matches(|c: char| c.is_whitespace() || c == '\0')) {
            Ok(v) => Some(v),
            Err(e) => {
                self.note(file, format!("{e}"));
                None
            }
        }
    }

    /// The first of `lists` (cpulist files) or `masks` (hex mask files) that exists and parses.
    fn cpus_from(&mut self, dir: &str, lists: &[&str], masks: &[&str]) -> Option<Vec<usize>> {
        for name in lists {
            let file = format!("{dir}/{name}");
            if let Some(text) = self.read_quiet(&file) {
                if let Some(v) = self.cpulist_file(&file, &text) {
                    return Some(v);
                }
            }
        }
        for name in masks {
            let file = format!("{dir}/{name}");
            if let Some(text) = self.read_quiet(&file) {
                if let Some(v) = self.mask_file(&file, &text) {
                    return Some(v);
                }
            }
        }
        None
    }

    fn id_file(&mut self, file: &str) -> Option<i64> {
        let text = self.read_quiet(file)?;
        let id = parse_id(&text);
        if id.is_none() {
            self.note(file, format!("not a number: {:?}", text.trim()));
        }
        id
    }

    /// Numbers `N` of the entries `<prefix>N` of directory `dir`.
    fn numbered(&self, dir: &str, prefix: &str) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .root
            .list(dir)
            .iter()
            .filter_map(|n| n.strip_prefix(prefix)?.parse().ok())
            .collect();
        v.sort_unstable();
        v
    }

    /// Reads an optional cpulist file.
    pub(super) fn list_file(&mut self, file: &str) -> Option<Vec<usize>> {
        let text = self.read_quiet(file)?;
        self.cpulist_file(file, &text)
    }
}

// ---------------------------------------------------------------------------------------------
// CPUs

impl Reader<'_> {
    /// Possible and present CPUs. Fails only when there is no CPU at all.
    pub(super) fn possible_cpus(&mut self) -> Result<CpuSets, ReadError> {
        let dirs = self.numbered(CPU_DIR, "cpu");
        let possible_file = format!("{CPU_DIR}/possible");
        let present_list = self.list_file(&format!("{CPU_DIR}/present"));
        let mut possible: BTreeSet<usize> = match self.list_file(&possible_file) {
            Some(v) => v.into_iter().collect(),
            None => {
                self.note(
                    &possible_file,
                    "missing; using present or the cpuN directories",
                );
                present_list.iter().flatten().copied().collect()
            }
        };
        possible.extend(dirs.iter().copied());
        if possible.is_empty() {
            return Err(ReadError {
                file: CPU_DIR.to_string(),
                reason: "no CPU found".to_string(),
            });
        }
        let present = match &present_list {
            Some(v) => v.iter().chain(&dirs).copied().collect(),
            None => dirs.iter().copied().collect(),
        };
        Ok(CpuSets {
            dirs,
            possible,
            present,
        })
    }

    /// The `cpuN/topology` ids and masks of each of `dirs`.
    pub(super) fn per_cpu_ids(&mut self, dirs: &[usize]) -> BTreeMap<usize, RawCpu> {
        dirs.iter().map(|&cpu| (cpu, self.raw_cpu(cpu))).collect()
    }

    /// The CPUs sharing `cpu`'s data or unified cache of `level` (`None`: the highest level,
    /// the last-level cache), where sysfs describes its caches.
    /// The data and unified caches of `cpu`, as (level, index directory), read once for the
    /// last level and the L2 alike.
    fn caches(&mut self, cpu: usize) -> Vec<(i64, String)> {
        let dir = format!("{CPU_DIR}/cpu{cpu}/cache");
        let mut caches = Vec::new();
        for k in self.numbered(&dir, "index") {
            let index = format!("{dir}/index{k}");
            let kind = self
                .read_quiet(&format!("{index}/type"))
                .unwrap_or_default();
            if kind.trim() == "Instruction" {
                continue;
            }
            if let Some(l) = self.id_file(&format!("{index}/level")) {
                caches.push((l, index));
            }
        }
        caches
    }

    /// The CPUs sharing the cache of `caches` at `level` (`None`: the last level, the first
    /// of the highest).
    fn cache_cpus(&mut self, caches: &[(i64, String)], level: Option<i64>) -> Option<Vec<usize>> {
        let mut best: Option<&(i64, String)> = None;
        for c in caches {
            let wanted = match level {
                Some(want) => c.0 == want,
                None => best.is_none_or(|b| c.0 > b.0),
            };
            if wanted {
                best = Some(c);
            }
        }
        let index = &best?.1;
        // The mask first, as hwloc reads it: some kernels' list disagrees with it (Bulldozer's
        // L2 lists only the CPU itself, its mask the compute unit).
        (self.cpus_from(index, &[], &["shared_cpu_map"]))
            .or_else(|| self.cpus_from(index, &["shared_cpu_list"], &[]))
    }

    fn raw_cpu(&mut self, cpu: usize) -> RawCpu {
        let dir = format!("{CPU_DIR}/cpu{cpu}/topology");
        if !self.root.exists(&dir) {
            return RawCpu::default();
        }
        let caches = self.caches(cpu);
        RawCpu {
            llc_cpus: self.cache_cpus(&caches, None),
            l2_cpus: self.cache_cpus(&caches, Some(2)),
            has_topology: true,
            core: self.id_file(&format!("{dir}/core_id")),
            die: self.id_file(&format!("{dir}/die_id")).filter(|&d| d >= 0),
            cluster: self
                .id_file(&format!("{dir}/cluster_id"))
                .filter(|&c| c >= 0),
            package: self.id_file(&format!("{dir}/physical_package_id")),
            thread_siblings: self.cpus_from(
                &dir,
                &["thread_siblings_list", "core_cpus_list"],
                &["thread_siblings", "core_cpus"],
            ),
            package_cpus: self.cpus_from(
                &dir,
                &["package_cpus_list", "core_siblings_list"],
                &["package_cpus", "core_siblings"],
            ),
        }
    }

    /// Online CPUs: `cpu/online`, else each CPU's own state. Notes online CPUs without a
    /// `topology` directory where others have one.
    pub(super) fn online(
        &mut self,
        cpus: &CpuSets,
        raw: &BTreeMap<usize, RawCpu>,
    ) -> BTreeSet<usize> {
        let online_file = format!("{CPU_DIR}/online");
        let online: BTreeSet<usize> = match self.list_file(&online_file) {
            Some(v) => v
                .into_iter()
                .filter(|c| cpus.possible.contains(c))
                .collect(),
            None => {
                self.note(&online_file, "missing; using cpuN/online and cpuN/topology");
                self.online_per_cpu(&cpus.dirs, raw)
            }
        };
        if raw.values().any(|r| r.has_topology) {
            for &cpu in &online {
                if !raw.get(&cpu).is_some_and(|r| r.has_topology) {
                    self.note(
                        &format!("{CPU_DIR}/cpu{cpu}/topology"),
                        "missing for an online CPU",
                    );
                }
            }
        }
        online
    }

    /// Online CPUs of a kernel without `cpu/online`: `cpuN/online` (`1`/`0`); a CPU without
    /// that file is online unless other CPUs have a `topology` directory and it has none.
    fn online_per_cpu(&mut self, dirs: &[usize], raw: &BTreeMap<usize, RawCpu>) -> BTreeSet<usize> {
        let any_topology = raw.values().any(|r| r.has_topology);
        let mut set = BTreeSet::new();
        for &cpu in dirs {
            let f = format!("{CPU_DIR}/cpu{cpu}/online");
            let on = match self.read_quiet(&f).map(|s| s.trim().to_string()) {
                Some(s) if s == "1" => true,
                Some(s) if s == "0" => false,
                Some(s) => {
                    self.note(&f, format!("expected 0 or 1, found {s:?}"));
                    raw[&cpu].has_topology
                }
                None => raw[&cpu].has_topology || !any_topology,
            };
            if on {
                set.insert(cpu);
            }
        }
        set
    }
}

// ---------------------------------------------------------------------------------------------
// NUMA nodes

impl Reader<'_> {
    /// NUMA nodes, ascending: every node with a directory, in `node/online` or `node/possible`,
    /// or linked from a CPU directory. Their CPUs are restricted to `possible`.
    pub(super) fn nodes(
        &mut self,
        possible: &BTreeSet<usize>,
        cpu_dirs: &[usize],
    ) -> Vec<NodeInfo> {
        let dirs = self.numbered(NODE_DIR, "node");
        let mut ids: BTreeSet<usize> = dirs.iter().copied().collect();
        let online_list = self.list_file(&format!("{NODE_DIR}/online"));
        ids.extend(online_list.iter().flatten().copied());
        if let Some(v) = self.list_file(&format!("{NODE_DIR}/possible")) {
            ids.extend(v);
        }
        let linked = self.node_links(cpu_dirs);
        ids.extend(linked.keys().copied());
        if ids.is_empty() && !self.root.exists(NODE_DIR) {
            self.note(
                NODE_DIR,
                "missing (a kernel without NUMA): one node 0 of every CPU, memory not bound",
            );
            return vec![NodeInfo {
                id: 0,
                online: true,
                cpus: possible.iter().copied().collect(),
                synthetic: true,
            }];
        }
        ids.into_iter()
            .map(|id| {
                let has_dir = dirs.contains(&id);
                let cpus = self.node_cpus(id, has_dir, &linked);
                NodeInfo {
                    id,
                    online: online_list.as_ref().map_or(has_dir, |v| v.contains(&id)),
                    cpus: cpus.into_iter().filter(|c| possible.contains(c)).collect(),
                    synthetic: false,
                }
            })
            .collect()
    }

    /// The `cpu/cpuN/nodeM` links, by node: the fallback where a node directory has no CPU list.
    fn node_links(&self, cpu_dirs: &[usize]) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut linked: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for &cpu in cpu_dirs {
            for m in self.numbered(&format!("{CPU_DIR}/cpu{cpu}"), "node") {
                linked.entry(m).or_default().insert(cpu);
            }
        }
        linked
    }

    /// The CPUs of node `id`: its `cpulist`, else `cpumap`, else its `cpuM` entries, else the
    /// CPUs that link to it.
    fn node_cpus(
        &mut self,
        id: usize,
        has_dir: bool,
        linked: &BTreeMap<usize, BTreeSet<usize>>,
    ) -> Vec<usize> {
        if has_dir {
            let dir = format!("{NODE_DIR}/node{id}");
            if let Some(v) = self.cpus_from(&dir, &["cpulist"], &["cpumap"]) {
                return v;
            }
            let in_dir = self.numbered(&dir, "cpu");
            if !in_dir.is_empty() {
                return in_dir;
            }
        }
        linked
            .get(&id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}
