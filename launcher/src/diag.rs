//! `goset` without a command: what the machine looks like to a pinning tool.
//!
//! Owns the diagnostics report (topology summary, per-CPU state, isolation parameters, cgroup
//! controllers and goset cgroups, irqbalance) and `goset topology`. Reads only under an
//! [`FsRoot`]; with `-- CMD` it hands over to [`crate::launch`].

use crate::cli::{GosetCli, GosetCommand};
use crate::error::{Error, Result};
use crate::fsroot::{FsRoot, ReadError};
use crate::report::table::Table;
use crate::topology::Topology;
use serde::Serialize;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

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

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CgroupMount {
    /// 1 or 2.
    pub version: u8,
    /// Mount point.
    pub path: String,
    /// Controllers: the v1 mount options that name controllers, or v2's `cgroup.controllers`.
    pub controllers: Vec<String>,
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
    /// Files that could not be read.
    pub errors: Vec<ReadError>,
}

const V1_CONTROLLERS: &[&str] = &[
    "cpuset",
    "cpu",
    "cpuacct",
    "memory",
    "devices",
    "freezer",
    "blkio",
    "pids",
    "net_cls",
    "perf_event",
    "hugetlb",
    "rdma",
    "misc",
];

/// Cgroup hierarchies from `/proc/mounts` text; v2 controllers are filled in by the caller.
pub fn parse_cgroup_mounts(mounts: &str) -> Vec<CgroupMount> {
    mounts
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (path, fstype, options) = (f.get(1)?, f.get(2)?, f.get(3).unwrap_or(&""));
            let version = match *fstype {
                "cgroup" => 1,
                "cgroup2" => 2,
                _ => return None,
            };
            let controllers = if version == 1 {
                options
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o))
                    .map(str::to_string)
                    .collect()
            } else {
                Vec::new()
            };
            Some(CgroupMount {
                version,
                path: path.to_string(),
                controllers,
            })
        })
        .collect()
}

fn cgroups(root: &FsRoot, errors: &mut Vec<ReadError>) -> Cgroups {
    let mounts_text = root.read("/proc/mounts").unwrap_or_else(|e| {
        errors.push(e);
        String::new()
    });
    let mut mounts = parse_cgroup_mounts(&mounts_text);
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
    let cur_freq_ok = match crate::housekeeper::telemetry::freq_is_silent(x86, release.as_deref()) {
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
    Ok(Diagnostics {
        summary,
        cpus,
        topology,
        cgroups,
        irqbalance,
        bookings,
        stale_journals,
        errors,
    })
}

/// The diagnostics report as text (for stderr, like every human table of goset).
pub fn render(d: &Diagnostics) -> String {
    let s = &d.summary;
    let mut out = format!(
        "Machine\n  cpus {} possible, {} online, {} allowed\n  {} packages, {} cores, up to {} threads per core, {} NUMA nodes\n",
        s.possible, s.online, s.allowed, s.packages, s.cores, s.max_threads_per_core, s.nodes
    );
    for n in &d.topology.nodes {
        let cpus: goset_plan::CpuSet = n.cpus.iter().copied().collect();
        out.push_str(&format!(
            "  node {}{}: cpus {}\n",
            n.id,
            if n.online { "" } else { " (offline)" },
            cpus
        ));
    }
    out.push_str(&crate::report::render_topology(&d.topology));
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
    let iso = &d.topology.isolation;
    let param = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    out.push_str(&format!(
        "Isolation\n  isolcpus={}  nohz_full={}  rcu_nocbs={}  irqaffinity={}\n",
        param(&iso.isolcpus),
        param(&iso.nohz_full_param),
        param(&iso.rcu_nocbs_param),
        param(&iso.irqaffinity_param)
    ));
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
    out.push_str(&format!(
        "IRQ balancing\n  irqbalance: {}\n",
        match (d.irqbalance.installed, d.irqbalance.running) {
            (_, true) => "running",
            (true, false) => "installed, not running",
            (false, false) => "absent",
        }
    ));
    out.push_str(&crate::report::render_bookings(
        &d.bookings,
        "Bookings (live runs)",
    ));
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
    out
}

fn root_of(fsroot: &Option<PathBuf>) -> Result<FsRoot> {
    crate::cli::fsroot(fsroot.as_deref())
}

fn print_json(value: &impl Serialize, dest: Option<&Path>) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("report serialises") + "\n";
    match dest {
        Some(path) if path.as_os_str() != "-" => std::fs::write(path, text)
            .map_err(|e| Error::System(format!("cannot write {}: {e}", path.display()))),
        _ => crate::output::to_stdout(&text)
            .map_err(|e| Error::System(format!("cannot write to stdout: {e}"))),
    }
}

/// `goset restore`: undoes the journals of dead launchers, saying what it did.
fn restore() -> Result<()> {
    let (done, journals) = crate::isolate::restore(&crate::rundir::base_dir());
    for (pid, comm) in &done.outlived {
        crate::output::to_stderr(&format!(
            "goset: pid {pid} ({comm}) was still in a goset cgroup: moved to its parent\n"
        ));
    }
    crate::output::to_stderr(&format!(
        "goset: restore: {} change(s) undone from {journals} journal(s) of dead runs\n",
        done.restored
    ));
    for why in &done.failed {
        crate::output::to_stderr(&format!("goset: restore: {why}\n"));
    }
    if done.failed.is_empty() {
        Ok(())
    } else {
        Err(Error::System(format!(
            "restore: {} change(s) could not be undone (above); their journals are kept",
            done.failed.len()
        )))
    }
}

/// `goset rm-cgroup NAME`.
fn rm_cgroup(name: &str) -> Result<()> {
    for (dir, moved) in crate::isolate::cgroup::remove_named(&FsRoot::default(), name)? {
        for (pid, comm) in moved {
            crate::output::to_stderr(&format!(
                "goset: pid {pid} ({comm}) moved out of {} to its parent\n",
                dir.display()
            ));
        }
        crate::output::to_stderr(&format!("goset: removed {}\n", dir.display()));
    }
    Ok(())
}

/// The whole of `goset`; returns the exit code.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
    use clap::Parser;
    crate::cli::ignore_empty_env();
    let args = crate::cli::normalize_args(args);
    let cli = GosetCli::try_parse_from(args)
        .unwrap_or_else(|e| crate::cli::exit_on_clap_error(e, "goset"));
    let result = match &cli.command {
        Some(GosetCommand::Topology { json, fsroot }) => root_of(fsroot)
            .and_then(|root| {
                Topology::read(&root)
                    .map_err(|e| Error::System(format!("cannot read the topology: {e}")))
            })
            .and_then(|t| {
                if *json {
                    return print_json(&t, None);
                }
                crate::output::to_stderr(&crate::report::render_topology(&t));
                Ok(())
            }),
        Some(GosetCommand::Restore) => restore(),
        Some(GosetCommand::RmCgroup { name }) => rm_cgroup(name),
        Some(GosetCommand::Completions { shell }) => {
            crate::output::to_stdout(&crate::completions::goset_scripts(*shell))
                .map_err(|e| Error::System(format!("cannot write the completions: {e}")))
        }
        None if cli.run.command.is_empty() && !cli.run.dry_run => root_of(&cli.run.fsroot)
            .and_then(|root| gather(&root))
            .and_then(|d| match &cli.run.json {
                Some(path) => print_json(&d, Some(path)),
                None => {
                    crate::output::to_stderr(&render(&d));
                    Ok(())
                }
            }),
        None => return crate::launch::run_args("goset", &cli.run),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            crate::output::to_stderr(&format!("goset: {e}\n"));
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cgroup_hierarchies_from_mounts() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
            cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n\
            cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0\n\
            cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        let m = parse_cgroup_mounts(mounts);
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].version, m[0].controllers.clone()),
            (1, vec!["cpuset".to_string()])
        );
        assert!(m[1].controllers.is_empty());
        assert_eq!(
            (m[2].version, m[2].path.as_str()),
            (2, "/sys/fs/cgroup/unified")
        );
    }

    #[test]
    fn the_live_machine_reports_its_cgroups_and_cpus() {
        let d = gather(&FsRoot::default()).unwrap();
        assert!(d.summary.online >= 1);
        assert_eq!(d.cpus.len(), d.summary.possible);
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        assert_eq!(d.cgroups.mounts.len(), parse_cgroup_mounts(&mounts).len());
        assert!(render(&d).contains("Cgroups\n"));
    }
}
