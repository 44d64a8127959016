//! `goset` without a command: what the machine looks like to a pinning tool.
//!
//! Owns the diagnostics report: topology summary, per-CPU state, isolation parameters, cgroup
//! controllers and goset cgroups, irqbalance, live bookings and stale journals. Reads only
//! under an [`FsRoot`]. Must not: change the machine, or print (the caller decides where the
//! report goes).

use crate::error::{Error, Result};
use crate::fsroot::{FsRoot, ReadError};
use crate::procfs::mounts::CgroupMount;
use crate::report::table::Table;
use crate::topology::Topology;
use serde::Serialize;
use std::collections::BTreeSet;

/// Frequency state of one CPU.
#[derive(Debug, Clone, Serialize)]
pub struct CpuState {
    /// CPU number.
    pub cpu: usize,
    /// Online now.
    pub online: bool,
    /// In `isolated`.
    pub isolated: bool,
    /// In `nohz_full`.
    pub nohz_full: bool,
    /// In `rcu_nocbs`.
    pub rcu_nocbs: bool,
    /// cpufreq governor, where cpufreq exists.
    pub governor: Option<String>,
    /// Current frequency in kHz (`scaling_cur_freq`), where cpufreq exists.
    pub cur_freq_khz: Option<u64>,
}

/// What the machine offers for containing a task.
#[derive(Debug, Clone, Serialize)]
pub struct Cgroups {
    /// Every cgroup hierarchy mounted.
    pub mounts: Vec<CgroupMount>,
    /// Where a cpuset controller is available: "v2", "v1", or none.
    pub cpuset: Option<String>,
    /// goset cgroups left on the machine (directories named `goset-*`).
    pub goset_groups: Vec<String>,
}

/// irqbalance on the machine.
#[derive(Debug, Clone, Serialize)]
pub struct Irqbalance {
    /// The binary is installed.
    pub installed: bool,
    /// A process named irqbalance is running.
    pub running: bool,
}

/// Counts that sum up the topology.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Possible CPUs.
    pub possible: usize,
    /// Online CPUs.
    pub online: usize,
    /// CPUs the launcher may use.
    pub allowed: usize,
    /// Packages with an online CPU.
    pub packages: usize,
    /// Physical cores with an online CPU.
    pub cores: usize,
    /// Most SMT threads on one core.
    pub max_threads_per_core: usize,
    /// NUMA nodes with CPUs.
    pub nodes: usize,
}

/// The whole diagnostics report.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnostics {
    /// Counts.
    pub summary: Summary,
    /// Per-CPU state.
    pub cpus: Vec<CpuState>,
    /// The topology as read.
    pub topology: Topology,
    /// Cgroup hierarchies.
    pub cgroups: Cgroups,
    /// irqbalance.
    pub irqbalance: Irqbalance,
    /// Other runs' live bookings (see [`crate::booking`]).
    pub bookings: Vec<crate::booking::Booking>,
    /// Journals of runs whose launcher died with changes not undone (`goset restore`).
    pub stale_journals: Vec<crate::isolate::journal::Stale>,
    /// The node's noise record, where one is trusted (`goset noise` shows it in full).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<crate::report::record::NoiseReport>,
    /// Lines saying which noise records were ignored, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub noise_warnings: Vec<String>,
    /// What ran on each CPU over [`LOOK`], by name, with advice (`goset noise` looks longer).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub noise_sources: std::collections::BTreeMap<usize, crate::explain::CpuExplanation>,
    /// Files that could not be read.
    pub errors: Vec<ReadError>,
}

fn cgroups(root: &FsRoot, errors: &mut Vec<ReadError>) -> Cgroups {
    let mut mounts = crate::procfs::mounts::read(root).unwrap_or_else(|e| {
        errors.push(e);
        Vec::new()
    });
    for m in mounts.iter_mut().filter(|m| m.version == 2) {
        if let Some(list) = root.read_opt(&format!("{}/cgroup.controllers", m.path)) {
            m.controllers = list.split_whitespace().map(str::to_string).collect();
        }
    }
    let has = |v: u8| {
        mounts
            .iter()
            .any(|m| m.version == v && m.controllers.iter().any(|c| c == "cpuset"))
    };
    let cpuset = if has(2) {
        Some("v2".to_string())
    } else if has(1) {
        Some("v1".to_string())
    } else {
        None
    };
    let goset_groups: BTreeSet<String> = mounts
        .iter()
        .flat_map(|m| {
            root.list(&m.path)
                .into_iter()
                .filter(|n| n.starts_with("goset-"))
                .map(move |n| format!("{}/{n}", m.path))
        })
        .collect();
    Cgroups {
        mounts,
        cpuset,
        goset_groups: goset_groups.into_iter().collect(),
    }
}

fn irqbalance(root: &FsRoot) -> Irqbalance {
    let installed = [
        "/usr/sbin/irqbalance",
        "/sbin/irqbalance",
        "/usr/bin/irqbalance",
    ]
    .iter()
    .any(|p| root.exists(p));
    let running = root
        .list("/proc")
        .iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .any(|pid| root.read_opt(&format!("/proc/{pid}/comm")).as_deref() == Some("irqbalance"));
    Irqbalance { installed, running }
}

/// Reads everything the diagnostics report shows.
pub fn gather(root: &FsRoot) -> Result<Diagnostics> {
    let topology = Topology::read(root)
        .map_err(|e| Error::System(format!("cannot read the topology: {e}")))?;
    let mut errors = topology.errors.clone();
    // On the live machine, scaling_cur_freq is read only where that does not IPI the CPU (the
    // same rule as the housekeeper's); a dump's files are plain files.
    let x86 = cfg!(any(target_arch = "x86", target_arch = "x86_64"));
    let release = root.read_opt("/proc/sys/kernel/osrelease");
    let cur_freq_ok = match crate::housekeeper::cpu_sampler::freq_is_silent(x86, release.as_deref())
    {
        Err(why) if root.is_live() => {
            errors.push(ReadError {
                file: "/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq".into(),
                reason: why,
            });
            false
        }
        _ => true,
    };
    let cpus = topology
        .cpus
        .iter()
        .map(|c| {
            let freq = |f: &str| {
                root.read_opt(&format!("/sys/devices/system/cpu/cpu{}/cpufreq/{f}", c.cpu))
            };
            CpuState {
                cpu: c.cpu,
                online: c.online,
                isolated: c.isolated,
                nohz_full: c.nohz_full,
                rcu_nocbs: c.rcu_nocbs,
                governor: freq("scaling_governor"),
                cur_freq_khz: cur_freq_ok
                    .then(|| freq("scaling_cur_freq"))
                    .flatten()
                    .and_then(|f| f.parse().ok()),
            }
        })
        .collect();
    let online: Vec<_> = topology.cpus.iter().filter(|c| c.online).collect();
    let cores: BTreeSet<&Vec<usize>> = online.iter().map(|c| &c.siblings).collect();
    let summary = Summary {
        possible: topology.cpus.len(),
        online: online.len(),
        allowed: topology.candidates().len(),
        packages: online
            .iter()
            .filter_map(|c| c.package_index)
            .collect::<BTreeSet<_>>()
            .len(),
        cores: cores.len(),
        max_threads_per_core: cores.iter().map(|s| s.len()).max().unwrap_or(0),
        nodes: topology.nodes.iter().filter(|n| !n.cpus.is_empty()).count(),
    };
    let cgroups = cgroups(root, &mut errors);
    let irqbalance = irqbalance(root);
    let stale_journals = if root.is_live() {
        crate::isolate::journal::stale(&crate::isolate::journal::dir_in(&crate::rundir::base_dir()))
    } else {
        Vec::new()
    };
    let bookings = match root.is_live().then(crate::booking::Registry::open) {
        Some(Ok(registry)) => registry.live(false),
        _ => Vec::new(),
    };
    let noise_sources = if root.is_live() {
        crate::explain::sample(root, LOOK)
    } else {
        Default::default()
    };
    let (noise, noise_warnings) = if root.is_live() {
        let ctx = crate::record::file::Context::here();
        let loaded = crate::record::file::load(&ctx);
        let report = (loaded.record.as_ref()).map(|(path, r)| {
            crate::report::record::NoiseReport::new(&path.display().to_string(), r, ctx.now)
        });
        (report, loaded.warnings)
    } else {
        (None, Vec::new())
    };
    Ok(Diagnostics {
        summary,
        cpus,
        topology,
        cgroups,
        irqbalance,
        bookings,
        stale_journals,
        noise,
        noise_warnings,
        noise_sources,
        errors,
    })
}

/// How long bare `goset` looks at what runs on each CPU to name it: goset-run's default sample.
pub const LOOK: std::time::Duration = std::time::Duration::from_millis(250);

/// The diagnostics report as text (for stderr, like every human table of goset).
pub fn render(d: &Diagnostics) -> String {
    let mut out = String::new();
    write_machine(d, &mut out);
    out.push_str(&crate::report::render_topology(&d.topology));
    write_frequency(d, &mut out);
    write_isolation(d, &mut out);
    write_cgroups(d, &mut out);
    out.push_str(&format!(
        "IRQ balancing\n  irqbalance: {}\n",
        match (d.irqbalance.installed, d.irqbalance.running) {
            (_, true) => "running",
            (true, false) => "installed, not running",
            (false, false) => "absent",
        }
    ));
    let booked: Vec<crate::report::model::BookingReport> =
        d.bookings.iter().map(From::from).collect();
    out.push_str(&crate::report::render_bookings(
        &booked,
        "Bookings (live runs)",
    ));
    if let Some(n) = &d.noise {
        out.push_str(&crate::report::record::render_brief(n));
    }
    for w in &d.noise_warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
    write_noise_sources(d, &mut out);
    write_trouble(d, &mut out);
    out
}

/// The Machine section: the counts, and each node's CPUs.
fn write_machine(d: &Diagnostics, out: &mut String) {
    let s = &d.summary;
    out.push_str(&format!(
        "Machine\n  cpus {} possible, {} online, {} allowed\n  {} packages, {} cores, up to {} threads per core, {} NUMA nodes\n",
        s.possible, s.online, s.allowed, s.packages, s.cores, s.max_threads_per_core, s.nodes
    ));
    for n in &d.topology.nodes {
        let cpus: goset_plan::CpuSet = n.cpus.iter().copied().collect();
        out.push_str(&format!(
            "  node {}{}: cpus {}\n",
            n.id,
            if n.online { "" } else { " (offline)" },
            cpus
        ));
    }
}

/// The Frequency table, or why there is none.
fn write_frequency(d: &Diagnostics, out: &mut String) {
    if d.cpus
        .iter()
        .any(|c| c.governor.is_some() || c.cur_freq_khz.is_some())
    {
        let mut t = Table::new("Frequency", &["cpu", "governor", "freq"]);
        for st in &d.cpus {
            t.row(vec![
                st.cpu.to_string(),
                st.governor.clone().unwrap_or_else(|| "n/a".into()),
                st.cur_freq_khz
                    .map_or_else(|| "n/a".into(), |k| format!("{:.2}GHz", k as f64 / 1e6)),
            ]);
        }
        out.push_str(&t.render());
    } else {
        out.push_str(
            "Frequency\n  n/a: no cpufreq in sysfs (scaling_governor, scaling_cur_freq)\n",
        );
    }
}

/// The Isolation section: the kernel's isolation parameters, `-` where unset.
fn write_isolation(d: &Diagnostics, out: &mut String) {
    let iso = &d.topology.isolation;
    let param = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    out.push_str(&format!(
        "Isolation\n  isolcpus={}  nohz_full={}  rcu_nocbs={}  irqaffinity={}\n",
        param(&iso.isolcpus),
        param(&iso.nohz_full_param),
        param(&iso.rcu_nocbs_param),
        param(&iso.irqaffinity_param)
    ));
}

/// The Cgroups section: the mounts, the cpuset controller, goset's own groups.
fn write_cgroups(d: &Diagnostics, out: &mut String) {
    out.push_str("Cgroups\n");
    for m in &d.cgroups.mounts {
        out.push_str(&format!(
            "  v{} {}  {}\n",
            m.version,
            m.path,
            m.controllers.join(",")
        ));
    }
    out.push_str(&format!(
        "  cpuset controller: {}\n  goset cgroups: {}\n",
        d.cgroups.cpuset.as_deref().unwrap_or("none"),
        if d.cgroups.goset_groups.is_empty() {
            "none".to_string()
        } else {
            d.cgroups.goset_groups.join(" ")
        }
    ));
}

/// What needs the user: journals of dead runs to restore, and what could not be read.
fn write_trouble(d: &Diagnostics, out: &mut String) {
    for j in &d.stale_journals {
        out.push_str(&format!(
            "Warning: {} holds changes of a run whose launcher (pid {}) died: run goset restore\n",
            j.path.display(),
            j.pid
        ));
    }
    if !d.errors.is_empty() {
        out.push_str("Errors\n");
        for e in &d.errors {
            out.push_str(&format!("  {e}\n"));
        }
    }
}

/// What ran on each CPU meanwhile, by name, and the advice; CPUs where nothing was seen are
/// left out.
fn write_noise_sources(d: &Diagnostics, out: &mut String) {
    let lines: Vec<String> = (d.noise_sources.values())
        .filter_map(|e| {
            let text = crate::explain::render(e);
            (!text.is_empty()).then(|| format!("  CPU {}\n{text}", e.cpu))
        })
        .collect();
    if lines.is_empty() {
        return;
    }
    out.push_str(&format!(
        "Noise sources over {} ms (`goset noise` for the record and a longer look)\n",
        LOOK.as_millis()
    ));
    for l in lines {
        out.push_str(&l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_machine_reports_its_cgroups_and_cpus() {
        let d = gather(&FsRoot::default()).unwrap();
        assert!(d.summary.online >= 1);
        assert_eq!(d.cpus.len(), d.summary.possible);
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        assert_eq!(
            d.cgroups.mounts.len(),
            crate::procfs::mounts::cgroup_mounts(&mounts).len()
        );
        assert!(render(&d).contains("Cgroups\n"));
    }
}
