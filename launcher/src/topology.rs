//! Machine topology read from sysfs and procfs under an [`FsRoot`].
//!
//! Owns: which CPUs exist, are online and allowed to the launcher, how they group into SMT
//! cores, dies, clusters, packages and NUMA nodes, and the kernel's isolation parameters.
//! Must not: rank, select or print anything.
//!
//! Two layers: pure parsers over `&str` (hex masks, cpulists, the kernel command line,
//! `/proc/self/status`, `/proc/mounts`), unit-tested on captured text, and [`Topology::read`],
//! which walks the files and is tested on real machines' dumps (`tests/topology_fixtures.rs`).
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
//!   when its directory exists). A CPU whose node is offline has `node: None`, like hwloc (its
//!   node has no memory to bind to); [`NodeInfo`] still lists it under the offline node.
//! - **Allowed**: on the live root the launcher's own affinity (`sched_getaffinity`); on a dump
//!   `Cpus_allowed_list` of `/proc/self/status`, else the cgroup cpuset of `/proc/self/cpuset`,
//!   else every online CPU. An offline CPU is never allowed.
//! - **Isolation**: `cpu/isolated` and `cpu/nohz_full` (absent, empty or `(null)`); where a file is
//!   missing, the kernel command line (`isolcpus=`, `nohz_full=`). `rcu_nocbs=` comes from the
//!   command line; `nohz_full` CPUs count as `rcu_nocbs` too, as the kernel offloads them.

use crate::fsroot::{FsRoot, ReadError};
use goset_plan::cpulist;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

const CPU_DIR: &str = "/sys/devices/system/cpu";
const NODE_DIR: &str = "/sys/devices/system/node";

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
}

/// The kernel's isolation settings: the raw command-line parameters, the sysfs lists, and the
/// effective CPU lists the per-CPU flags come from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Isolation {
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
    pub isolation: Isolation,
    /// Files that were missing or odd; none of them stopped the read.
    pub errors: Vec<ReadError>,
}

impl Topology {
    /// Reads the topology under `root`. Fails only when no CPU at all can be found.
    pub fn read(root: &FsRoot) -> Result<Topology, ReadError> {
        Reader {
            root,
            errors: Vec::new(),
        }
        .read()
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

    /// The NUMA node numbered `id`.
    pub fn node(&self, id: usize) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

// ---------------------------------------------------------------------------------------------
// Pure parsers
// ---------------------------------------------------------------------------------------------

/// Why a hex CPU mask did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskError(pub String);

impl fmt::Display for MaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad cpu mask: {}", self.0)
    }
}

/// Parses a kernel hex CPU mask (`thread_siblings`, `core_siblings`, node `cpumap`): 32-bit hex
/// words separated by commas, most significant first (`00000000,00000101` = CPUs 0 and 8).
/// Blank input is the empty set. Returns the CPUs ascending.
pub fn parse_mask(text: &str) -> Result<Vec<usize>, MaskError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let words: Vec<&str> = text.split(',').collect();
    let mut cpus = Vec::new();
    for (i, word) in words.iter().rev().enumerate() {
        let word = word.trim();
        if word.is_empty() || word.len() > 8 || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MaskError(format!("word {word:?} is not 1 to 8 hex digits")));
        }
        let bits = u32::from_str_radix(word, 16).map_err(|e| MaskError(e.to_string()))?;
        for bit in 0..32 {
            if bits & (1 << bit) != 0 {
                cpus.push(i * 32 + bit);
            }
        }
    }
    Ok(cpus)
}

/// Parses a kernel cpulist (`0-3,8`) with `goset_plan::cpulist`; returns the CPUs ascending,
/// without duplicates. Blank input is the empty list.
pub fn parse_cpulist(text: &str) -> Result<Vec<usize>, cpulist::CpuListError> {
    let mut set = BTreeSet::new();
    cpulist::parse(text.as_bytes(), &mut |c| {
        set.insert(c);
    })?;
    Ok(set.into_iter().collect())
}

/// Parses `cpu/nohz_full`: a cpulist, except that kernels without nohz_full CPUs print
/// `(null)` (space-padded), which is the empty list.
pub fn parse_nohz_full(text: &str) -> Result<Vec<usize>, cpulist::CpuListError> {
    let t = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    if t == "(null)" {
        return Ok(Vec::new());
    }
    parse_cpulist(t)
}

/// Parses a CPU list from the kernel command line: a cpulist where the item `all` stands for
/// every CPU in `all`.
pub fn parse_param_cpulist(
    value: &str,
    all: &[usize],
) -> Result<Vec<usize>, cpulist::CpuListError> {
    let mut set = BTreeSet::new();
    let mut rest = Vec::new();
    for item in value.trim().split(',') {
        if item.trim() == "all" {
            set.extend(all.iter().copied());
        } else {
            rest.push(item);
        }
    }
    if !rest.is_empty() {
        set.extend(parse_cpulist(&rest.join(","))?);
    }
    Ok(set.into_iter().collect())
}

/// Splits a kernel command line into parameters as the kernel does: separated by white space,
/// double quotes protect spaces (`a="b c"`), the quotes are removed, and everything after a
/// bare `--` belongs to init and is dropped. Each parameter is `(name, value)`, value `None`
/// for a bare flag such as `quiet`.
pub fn parse_cmdline(cmdline: &str) -> Vec<(String, Option<String>)> {
    let mut params = Vec::new();
    let mut token = String::new();
    let mut in_token = false;
    let mut quoted = false;
    let mut chars = cmdline.chars().peekable();
    loop {
        let c = chars.next();
        let ends = match c {
            None => true,
            Some(ch) if ch.is_whitespace() && !quoted => true,
            Some('"') => {
                quoted = !quoted;
                in_token = true;
                false
            }
            Some(ch) => {
                token.push(ch);
                in_token = true;
                false
            }
        };
        if ends && in_token {
            if token == "--" {
                break;
            }
            let (name, value) = match token.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (token.clone(), None),
            };
            params.push((name, value));
            token.clear();
            in_token = false;
        }
        if c.is_none() {
            break;
        }
    }
    params
}

/// The value of the last `name` parameter on the command line: `None` when absent,
/// `Some("")` for a bare `name` or `name=`.
pub fn cmdline_param(cmdline: &str, name: &str) -> Option<String> {
    parse_cmdline(cmdline)
        .into_iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.unwrap_or_default())
}

/// Splits an `isolcpus=` value into its flags (`nohz`, `domain`, `managed_irq`) and cpulist.
/// Returns `(flags, cpulist, isolates_domains)`: without flags the kernel isolates scheduler
/// domains (the `isolated` file); with flags only when `domain` is among them.
pub fn split_isolcpus(value: &str) -> (Vec<String>, String, bool) {
    let mut flags = Vec::new();
    let mut rest = value.trim();
    loop {
        let (head, tail) = match rest.split_once(',') {
            Some((h, t)) => (h, t),
            None => (rest, ""),
        };
        if !head.is_empty()
            && head.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
            && head != "all"
        {
            flags.push(head.to_string());
            rest = tail;
            if tail.is_empty() {
                break;
            }
        } else {
            break;
        }
    }
    let domains = flags.is_empty() || flags.iter().any(|f| f == "domain");
    (flags, rest.to_string(), domains)
}

/// The `Cpus_allowed_list` value of a `/proc/<pid>/status` text.
pub fn status_allowed_list(status: &str) -> Option<&str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
}

/// Where a cgroup hierarchy that holds the cpuset controller is mounted, from `/proc/mounts`:
/// `(mount point, is_v2)`. Prefers a v1 `cpuset` hierarchy; a v2 mount qualifies when
/// `v2_has_cpuset` says its root lists the controller.
pub fn cpuset_mount(mounts: &str, v2_has_cpuset: &dyn Fn(&str) -> bool) -> Option<(String, bool)> {
    let mut v2 = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let dir = unescape_mount(f[1]);
        match f[2] {
            "cgroup" if f[3].split(',').any(|o| o == "cpuset") => return Some((dir, false)),
            "cgroup2" if v2.is_none() && v2_has_cpuset(&dir) => v2 = Some((dir, true)),
            _ => {}
        }
    }
    v2
}

/// Decodes the octal escapes (`\040` for a space) of a `/proc/mounts` field.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup path of the cpuset controller from `/proc/self/cgroup`: the v1 line naming
/// `cpuset`, else the v2 (`0::`) line.
pub fn cgroup_cpuset_path(cgroup: &str) -> Option<String> {
    let mut v2 = None;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        if ctrls.split(',').any(|c| c == "cpuset") {
            return Some(path.to_string());
        }
        if ctrls.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    v2
}

/// Parses a sysfs integer attribute such as `core_id` (may be negative).
pub fn parse_id(text: &str) -> Option<i64> {
    text.trim_matches(|c: char| c.is_whitespace() || c == '\0')
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// Per-CPU facts read from `cpuN/topology`.
#[derive(Default, Clone)]
struct RawCpu {
    has_topology: bool,
    core: Option<i64>,
    die: Option<i64>,
    cluster: Option<i64>,
    package: Option<i64>,
    thread_siblings: Option<Vec<usize>>,
    package_cpus: Option<Vec<usize>>,
}

/// How CPUs are grouped into packages.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PackageKey {
    Id(i64),
    Mask(Vec<usize>),
    Alone(usize),
}

struct Reader<'a> {
    root: &'a FsRoot,
    errors: Vec<ReadError>,
}

/// Simple union-find over CPU numbers.
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

impl Reader<'_> {
    fn note(&mut self, file: &str, reason: impl Into<String>) {
        self.errors.push(ReadError {
            file: file.to_string(),
            reason: reason.into(),
        });
    }

    /// Reads an optional file, noting read errors other than "missing".
    fn read_quiet(&mut self, file: &str) -> Option<String> {
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
    fn read_noted(&mut self, file: &str) -> Option<String> {
        match self.root.read(file) {
            Ok(s) => Some(s),
            Err(e) => {
                self.errors.push(e);
                None
            }
        }
    }

    fn cpulist_file(&mut self, file: &str, text: &str) -> Option<Vec<usize>> {
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

    fn list_file(&mut self, file: &str) -> Option<Vec<usize>> {
        let text = self.read_quiet(file)?;
        self.cpulist_file(file, &text)
    }

    fn read(mut self) -> Result<Topology, ReadError> {
        // Possible and present CPUs.
        let dirs = self.numbered(CPU_DIR, "cpu");
        let possible_file = format!("{CPU_DIR}/possible");
        let present_file = format!("{CPU_DIR}/present");
        let present_list = self.list_file(&present_file);
        let mut possible: BTreeSet<usize> = match self.list_file(&possible_file) {
            Some(v) => v.into_iter().collect(),
            None => {
                self.note(
                    &possible_file,
                    "missing; using present or the cpuN directories",
                );
                match &present_list {
                    Some(v) => v.iter().copied().collect(),
                    None => BTreeSet::new(),
                }
            }
        };
        possible.extend(dirs.iter().copied());
        if possible.is_empty() {
            return Err(ReadError {
                file: CPU_DIR.to_string(),
                reason: "no CPU found".to_string(),
            });
        }
        let dir_set: BTreeSet<usize> = dirs.iter().copied().collect();
        let present: BTreeSet<usize> = match &present_list {
            Some(v) => v.iter().copied().chain(dirs.iter().copied()).collect(),
            None => dir_set.clone(),
        };

        // Per-CPU topology files.
        let mut raw: BTreeMap<usize, RawCpu> = BTreeMap::new();
        for &cpu in &dirs {
            let dir = format!("{CPU_DIR}/cpu{cpu}/topology");
            if !self.root.exists(&dir) {
                raw.insert(cpu, RawCpu::default());
                continue;
            }
            let r = RawCpu {
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
            };
            raw.insert(cpu, r);
        }
        let any_topology = raw.values().any(|r| r.has_topology);

        // Online CPUs.
        let online_file = format!("{CPU_DIR}/online");
        let online: BTreeSet<usize> = match self.list_file(&online_file) {
            Some(v) => v.into_iter().filter(|c| possible.contains(c)).collect(),
            None => {
                self.note(&online_file, "missing; using cpuN/online and cpuN/topology");
                let mut set = BTreeSet::new();
                for &cpu in &dirs {
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
        };
        for &cpu in &online {
            if !raw.get(&cpu).is_some_and(|r| r.has_topology) && any_topology {
                self.note(
                    &format!("{CPU_DIR}/cpu{cpu}/topology"),
                    "missing for an online CPU",
                );
            }
        }

        // Packages.
        let package_key = |cpu: usize, r: &RawCpu| -> Option<PackageKey> {
            if !r.has_topology {
                return None;
            }
            Some(match (r.package, &r.package_cpus) {
                (Some(id), _) if id >= 0 => PackageKey::Id(id),
                (_, Some(mask)) if mask.contains(&cpu) => PackageKey::Mask(mask.clone()),
                _ => PackageKey::Alone(cpu),
            })
        };
        let mut pkg_of: BTreeMap<usize, PackageKey> = BTreeMap::new();
        for (&cpu, r) in &raw {
            if let Some(k) = package_key(cpu, r) {
                pkg_of.insert(cpu, k);
            }
        }
        let mut pkg_index: BTreeMap<PackageKey, usize> = BTreeMap::new();
        for k in pkg_of.values() {
            let n = pkg_index.len();
            pkg_index.entry(k.clone()).or_insert(n);
        }

        // Cores: thread siblings restricted to the same package, die and core_id, closed into
        // a partition; online and offline CPUs kept apart.
        let mut cores = Groups(BTreeMap::new());
        for (&cpu, r) in &raw {
            if !r.has_topology {
                continue;
            }
            cores.find(cpu);
            let Some(ts) = &r.thread_siblings else {
                continue;
            };
            for &t in ts {
                let Some(rt) = raw.get(&t) else { continue };
                let same = t != cpu
                    && rt.has_topology
                    && online.contains(&t) == online.contains(&cpu)
                    && pkg_of.get(&t) == pkg_of.get(&cpu)
                    && rt.die == r.die
                    && (rt.core == r.core || rt.core.is_none() || r.core.is_none());
                if same {
                    cores.union(cpu, t);
                }
            }
        }
        let mut core_members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (&cpu, r) in &raw {
            if r.has_topology {
                let root = cores.find(cpu);
                core_members.entry(root).or_default().push(cpu);
            }
        }

        // NUMA nodes.
        let nodes = self.read_nodes(&possible, &dirs);
        let mut node_of: BTreeMap<usize, usize> = BTreeMap::new();
        for n in nodes.iter().filter(|n| n.online) {
            for &c in &n.cpus {
                node_of.entry(c).or_insert(n.id);
            }
        }

        // Allowed, isolation.
        let allowed = self.read_allowed(&online);
        let cmdline = self
            .read_noted("/proc/cmdline")
            .map(|s| s.trim().to_string());
        let possible_vec: Vec<usize> = possible.iter().copied().collect();
        let isolation = self.read_isolation(cmdline.as_deref(), &possible_vec);
        let isolated: BTreeSet<usize> = isolation.isolated.iter().copied().collect();
        let nohz: BTreeSet<usize> = isolation.nohz_full.iter().copied().collect();
        let nocbs: BTreeSet<usize> = isolation
            .rcu_nocbs
            .iter()
            .chain(&isolation.nohz_full)
            .copied()
            .collect();

        let cpus = possible
            .iter()
            .map(|&cpu| {
                let r = raw.get(&cpu).cloned().unwrap_or_default();
                let siblings = if r.has_topology {
                    core_members[&cores.find(cpu)].clone()
                } else if online.contains(&cpu) {
                    vec![cpu]
                } else {
                    Vec::new()
                };
                CpuInfo {
                    cpu,
                    online: online.contains(&cpu),
                    allowed: online.contains(&cpu) && allowed.contains(&cpu),
                    siblings,
                    core: r.core,
                    package: r.package,
                    node: node_of.get(&cpu).copied(),
                    die: r.die,
                    cluster: r.cluster,
                    package_index: pkg_of.get(&cpu).map(|k| pkg_index[k]),
                    present: present.contains(&cpu),
                    isolated: isolated.contains(&cpu),
                    nohz_full: nohz.contains(&cpu),
                    rcu_nocbs: nocbs.contains(&cpu),
                }
            })
            .collect();

        Ok(Topology {
            cpus,
            nodes,
            cmdline,
            isolation,
            errors: self.errors,
        })
    }

    fn read_nodes(&mut self, possible: &BTreeSet<usize>, cpu_dirs: &[usize]) -> Vec<NodeInfo> {
        let dirs = self.numbered(NODE_DIR, "node");
        let mut ids: BTreeSet<usize> = dirs.iter().copied().collect();
        let online_list = self.list_file(&format!("{NODE_DIR}/online"));
        if let Some(v) = &online_list {
            ids.extend(v.iter().copied());
        }
        if let Some(v) = self.list_file(&format!("{NODE_DIR}/possible")) {
            ids.extend(v);
        }
        // cpu/cpuN/nodeM links: the fallback where a node directory has no CPU list.
        let mut linked: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for &cpu in cpu_dirs {
            for m in self.numbered(&format!("{CPU_DIR}/cpu{cpu}"), "node") {
                linked.entry(m).or_default().insert(cpu);
            }
        }
        ids.extend(linked.keys().copied());
        if dirs.is_empty() && !self.root.exists(NODE_DIR) {
            self.note(NODE_DIR, "missing; no NUMA nodes");
        }

        let mut nodes = Vec::new();
        for id in ids {
            let dir = format!("{NODE_DIR}/node{id}");
            let has_dir = dirs.contains(&id);
            let mut cpus = if has_dir {
                self.cpus_from(&dir, &["cpulist"], &["cpumap"])
            } else {
                None
            };
            if cpus.is_none() && has_dir {
                let in_dir = self.numbered(&dir, "cpu");
                if !in_dir.is_empty() {
                    cpus = Some(in_dir);
                }
            }
            let cpus: Vec<usize> = cpus
                .unwrap_or_else(|| {
                    linked
                        .get(&id)
                        .map(|s| s.iter().copied().collect())
                        .unwrap_or_default()
                })
                .into_iter()
                .filter(|c| possible.contains(c))
                .collect();
            let online = match &online_list {
                Some(v) => v.contains(&id),
                None => has_dir,
            };
            nodes.push(NodeInfo { id, online, cpus });
        }
        nodes
    }

    fn read_allowed(&mut self, online: &BTreeSet<usize>) -> BTreeSet<usize> {
        if self.root.is_live() {
            if let Some(set) = own_affinity() {
                return set;
            }
            self.note("sched_getaffinity", "failed; using /proc/self/status");
        }
        if let Some(status) = self.read_quiet("/proc/self/status") {
            if let Some(list) = status_allowed_list(&status) {
                if let Some(v) = self.cpulist_file("/proc/self/status", list) {
                    return v.into_iter().collect();
                }
            }
        }
        if let Some(set) = self.read_cpuset() {
            return set;
        }
        online.clone()
    }

    /// The CPUs of the cgroup cpuset this dump's process was in, when the dump has them.
    fn read_cpuset(&mut self) -> Option<BTreeSet<usize>> {
        let path = match self.read_quiet("/proc/self/cpuset") {
            Some(p) => p.trim().to_string(),
            None => cgroup_cpuset_path(&self.read_quiet("/proc/self/cgroup")?)?,
        };
        let root = self.root;
        let v2_has = |dir: &str| {
            root.read_opt(&format!("{dir}/cgroup.controllers"))
                .is_some_and(|c| c.split_whitespace().any(|w| w == "cpuset"))
        };
        let (mount, v2) = match self.read_quiet("/proc/mounts") {
            Some(m) => cpuset_mount(&m, &v2_has)?,
            None if self.root.exists("/sys/fs/cgroup/cpuset/cpuset.cpus") => {
                ("/sys/fs/cgroup/cpuset".to_string(), false)
            }
            None if v2_has("/sys/fs/cgroup") => ("/sys/fs/cgroup".to_string(), true),
            None => return None,
        };
        let name = if v2 {
            "cpuset.cpus.effective"
        } else {
            "cpuset.cpus"
        };
        // Walk up from the process's cgroup: v2 has the file only where the controller is on.
        let mut p = path.trim_end_matches('/').to_string();
        loop {
            let file = format!("{}{}/{name}", mount.trim_end_matches('/'), p);
            if let Some(text) = self.read_quiet(&file) {
                return self
                    .cpulist_file(&file, &text)
                    .map(|v| v.into_iter().collect());
            }
            match p.rfind('/') {
                Some(i) if !p.is_empty() => p.truncate(i),
                _ => return None,
            }
        }
    }

    fn read_isolation(&mut self, cmdline: Option<&str>, possible: &[usize]) -> Isolation {
        let param = |name: &str| cmdline.and_then(|c| cmdline_param(c, name));
        let mut iso = Isolation {
            isolcpus: param("isolcpus"),
            nohz_full_param: param("nohz_full"),
            rcu_nocbs_param: param("rcu_nocbs"),
            irqaffinity_param: param("irqaffinity"),
            ..Isolation::default()
        };
        let isolated_file = format!("{CPU_DIR}/isolated");
        iso.sysfs_isolated = self.list_file(&isolated_file);
        let nohz_file = format!("{CPU_DIR}/nohz_full");
        iso.sysfs_nohz_full = self
            .read_quiet(&nohz_file)
            .and_then(|t| match parse_nohz_full(&t) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.note(&nohz_file, format!("unparsable {:?}: {e}", t.trim()));
                    None
                }
            });
        let mut from_param = |name: &str, value: &str| match parse_param_cpulist(value, possible) {
            Ok(v) => v,
            Err(e) => {
                self.note("/proc/cmdline", format!("{name}={value}: {e}"));
                Vec::new()
            }
        };
        iso.isolated = match (&iso.sysfs_isolated, &iso.isolcpus) {
            (Some(v), _) => v.clone(),
            (None, Some(value)) => {
                let (_, list, domains) = split_isolcpus(value);
                if domains {
                    from_param("isolcpus", &list)
                } else {
                    Vec::new()
                }
            }
            (None, None) => Vec::new(),
        };
        iso.nohz_full = match (&iso.sysfs_nohz_full, &iso.nohz_full_param) {
            (Some(v), _) => v.clone(),
            (None, Some(value)) => from_param("nohz_full", value),
            (None, None) => Vec::new(),
        };
        if let Some(value) = iso.rcu_nocbs_param.clone() {
            iso.rcu_nocbs = from_param("rcu_nocbs", &value);
        }
        if let Some(value) = iso.irqaffinity_param.clone() {
            iso.irqaffinity = Some(from_param("irqaffinity", &value));
        }
        iso
    }
}

/// The calling thread's affinity mask (`sched_getaffinity(0)`).
fn own_affinity() -> Option<BTreeSet<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set, and the size passed is its own.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: every index is below the set's capacity.
    Some(
        (0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hex_masks_most_significant_word_first() {
        assert_eq!(parse_mask("00000000,00000101\n").unwrap(), vec![0, 8]);
        assert_eq!(parse_mask("00000000,00000202").unwrap(), vec![1, 9]);
        assert_eq!(parse_mask("000000f0").unwrap(), vec![4, 5, 6, 7]);
        assert_eq!(
            parse_mask("00000001,00000000,80000000").unwrap(),
            vec![31, 64]
        );
        assert_eq!(
            parse_mask("00155550").unwrap(),
            vec![4, 6, 8, 10, 12, 14, 16, 18, 20]
        );
        assert_eq!(parse_mask("ffff").unwrap(), (0..16).collect::<Vec<_>>());
        assert_eq!(parse_mask("").unwrap(), Vec::<usize>::new());
        assert_eq!(
            parse_mask("00000000,00000000").unwrap(),
            Vec::<usize>::new()
        );
        assert!(parse_mask("zz").is_err());
        assert!(parse_mask("1,,2").is_err());
        assert!(parse_mask("123456789").is_err());
        assert!(parse_mask("0-3").is_err());
    }

    #[test]
    fn parses_cpulists_and_nohz_full_null() {
        assert_eq!(parse_cpulist("3,0-1\n").unwrap(), vec![0, 1, 3]);
        assert_eq!(parse_cpulist("\n").unwrap(), Vec::<usize>::new());
        assert!(parse_cpulist("x").is_err());
        assert_eq!(
            parse_nohz_full("              (null)\n").unwrap(),
            Vec::<usize>::new()
        );
        assert_eq!(parse_nohz_full("\n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_nohz_full("2-3\n").unwrap(), vec![2, 3]);
        assert_eq!(
            parse_param_cpulist("all", &[0, 1, 2]).unwrap(),
            vec![0, 1, 2]
        );
        assert_eq!(
            parse_param_cpulist("1,3", &[0, 1, 2, 3]).unwrap(),
            vec![1, 3]
        );
        assert_eq!(
            parse_param_cpulist("", &[0, 1]).unwrap(),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn parses_kernel_command_lines() {
        let live = "mitigations=auto,no_guest_host console=ttyS0 quiet rdinit=/process_api -- --addr 0.0.0.0:2024 rcu_nocbs=1";
        let p = parse_cmdline(live);
        assert_eq!(
            p[0],
            (
                "mitigations".to_string(),
                Some("auto,no_guest_host".to_string())
            )
        );
        assert_eq!(p[2], ("quiet".to_string(), None));
        assert_eq!(p.len(), 4, "parameters after -- belong to init: {p:?}");
        assert_eq!(cmdline_param(live, "rcu_nocbs"), None);

        let c = "BOOT_IMAGE=/vmlinuz ro isolcpus=nohz,domain,2-5 nohz_full=2-5 rcu_nocbs  irqaffinity=0-1 \
                 dyndbg=\"file x.c +p\" isolcpus=managed_irq,3-4";
        assert_eq!(cmdline_param(c, "nohz_full").as_deref(), Some("2-5"));
        assert_eq!(cmdline_param(c, "rcu_nocbs").as_deref(), Some(""));
        assert_eq!(cmdline_param(c, "irqaffinity").as_deref(), Some("0-1"));
        assert_eq!(cmdline_param(c, "dyndbg").as_deref(), Some("file x.c +p"));
        assert_eq!(
            cmdline_param(c, "isolcpus").as_deref(),
            Some("managed_irq,3-4"),
            "the last one wins"
        );
        assert_eq!(cmdline_param(c, "nosuch"), None);
        assert_eq!(parse_cmdline("  "), vec![]);
    }

    #[test]
    fn splits_isolcpus_flags() {
        assert_eq!(split_isolcpus("2-5"), (vec![], "2-5".to_string(), true));
        assert_eq!(
            split_isolcpus("nohz,domain,2-5"),
            (
                vec!["nohz".to_string(), "domain".to_string()],
                "2-5".to_string(),
                true
            )
        );
        assert_eq!(
            split_isolcpus("managed_irq,3"),
            (vec!["managed_irq".to_string()], "3".to_string(), false)
        );
        assert_eq!(split_isolcpus("1,3"), (vec![], "1,3".to_string(), true));
    }

    #[test]
    fn reads_status_cgroup_and_mounts() {
        let status =
            "Name:\tcat\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n";
        assert_eq!(status_allowed_list(status), Some("0-1"));
        assert_eq!(status_allowed_list("Name:\tx\n"), None);

        let v1 = "11:pids:/\n6:cpuset:/slurm/job1\n1:name=systemd:/x\n";
        assert_eq!(cgroup_cpuset_path(v1).as_deref(), Some("/slurm/job1"));
        assert_eq!(
            cgroup_cpuset_path("0::/user.slice/a.scope\n").as_deref(),
            Some("/user.slice/a.scope")
        );
        assert_eq!(cgroup_cpuset_path("3:memory:/x\n"), None);

        let mounts = "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n\
                      cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,cpuset 0 0\n";
        assert_eq!(
            cpuset_mount(mounts, &|_| true),
            Some(("/sys/fs/cgroup/cpuset".to_string(), false))
        );
        let v2 = "cgroup2 /sys/fs/my\\040cg cgroup2 rw 0 0\n";
        assert_eq!(
            cpuset_mount(v2, &|d| d == "/sys/fs/my cg"),
            Some(("/sys/fs/my cg".to_string(), true))
        );
        assert_eq!(cpuset_mount(v2, &|_| false), None);
    }

    #[test]
    fn parses_ids() {
        assert_eq!(parse_id("-1\n"), Some(-1));
        assert_eq!(parse_id("8442\n"), Some(8442));
        assert_eq!(parse_id("x"), None);
    }
}
