//! The machine a test changes: root, the IRQ affinities it puts back, the groups and
//! journals a failed run leaves, the cpuset hierarchies, and what a test holds while it runs.

use shim_tests::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Skips (with the reason) unless root; under CI=true, which runs as root, it must be root.
pub(crate) fn need_root(what: &str) -> bool {
    if is_root() {
        return true;
    }
    skip_note(&format!("{what} needs root (CI runs as root)"));
    false
}

/// Whether this kernel shows IRQ affinities; says why the test skips when it does not.
pub(crate) fn irq_affinity_shown() -> bool {
    if read_irqs().is_empty() {
        missing(
            "/proc/irq/*/smp_affinity_list",
            "a kernel with IRQ affinity (any x86 one)",
        );
        return false;
    }
    true
}

/// Every IRQ's `smp_affinity_list`; dropping it writes back any that changed.
pub(crate) struct IrqSnapshot(pub(crate) BTreeMap<String, String>);

impl IrqSnapshot {
    pub(crate) fn take() -> IrqSnapshot {
        IrqSnapshot(read_irqs())
    }
}

pub(crate) fn read_irqs() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/irq")
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = entry.path().join("smp_affinity_list");
        if let Ok(text) = std::fs::read_to_string(&file) {
            out.insert(
                entry.file_name().to_string_lossy().into_owned(),
                text.trim().to_string(),
            );
        }
    }
    out
}

impl Drop for IrqSnapshot {
    fn drop(&mut self) {
        for (irq, before) in &self.0 {
            let file = format!("/proc/irq/{irq}/smp_affinity_list");
            if std::fs::read_to_string(&file).is_ok_and(|now| now.trim() != before) {
                let _ = std::fs::write(&file, before);
            }
        }
    }
}

/// Removes what a failed test's runs left: dead runs' journals are undone (`goset restore`)
/// and groups of the probe removed.
pub(crate) struct Leftovers;

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = Command::new(goset_bin())
            .arg("restore")
            .stderr(Stdio::null())
            .status();
        for group in probe_groups() {
            let _ = Command::new(goset_bin())
                .args(["rm-cgroup", &group])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Names of the probe's groups at the top of every hierarchy with the cpuset controller.
pub(crate) fn probe_groups() -> Vec<String> {
    let mut names = Vec::new();
    for mount in cpuset_mounts() {
        for e in std::fs::read_dir(&mount).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("goset-isolation_probe") && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// Mount points of the hierarchies that offer cpuset (v1 with the controller, or a cgroup2
/// root listing it).
pub(crate) fn cpuset_mounts() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (path, fstype, opts) = (*f.get(1)?, *f.get(2)?, *f.get(3)?);
            let has = match fstype {
                "cgroup" => opts.split(',').any(|o| o == "cpuset"),
                "cgroup2" => std::fs::read_to_string(format!("{path}/cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpuset")),
                _ => false,
            };
            has.then(|| PathBuf::from(path))
        })
        .collect()
}

pub(crate) fn status_field(pid: i32, tid: i32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub(crate) fn task_cpus(report: &serde_json::Value) -> Vec<usize> {
    report["selection"]["task_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap() as usize)
        .collect()
}

/// The task's cpuset group, from `/proc/<pid>/cgroup` and the mounts.
pub(crate) fn cpuset_group_of(pid: i32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for mount in cpuset_mounts() {
        let v2 = std::fs::metadata(mount.join("cgroup.controllers")).is_ok();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = if v2 {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == "cpuset")
            };
            if matches && path != "/" {
                return Some(mount.join(path.trim_start_matches('/')));
            }
        }
    }
    None
}

/// What a test that changes the machine holds while it runs; dropped in this order: IRQs put
/// back, what runs left undone, then the machine free for the next test.
pub(crate) struct Bench {
    pub(crate) probe: Program,
    pub(crate) snapshot: IrqSnapshot,
    _leftovers: Leftovers,
    _machine: LauncherLock,
}

/// Root, the probe (static or not) and, for `--cgroup`, a cpuset hierarchy; `None` (with the
/// reason) when one is missing.
pub(crate) fn bench(what: &str, cgroup: bool, static_probe: bool) -> Option<Bench> {
    if !need_root(what) {
        return None;
    }
    if cgroup && cpuset_mounts().is_empty() {
        missing(
            "a cgroup hierarchy with the cpuset controller",
            "mount -t cgroup -o cpuset cpuset /sys/fs/cgroup/cpuset",
        );
        return None;
    }
    let probe = if static_probe {
        Program::c_static("isolation_probe.c")?
    } else {
        Program::c("isolation_probe.c")?
    };
    // The tests here change one machine's IRQs and cgroups: one at a time.
    let machine = launcher_lock();
    Some(Bench {
        probe,
        snapshot: IrqSnapshot::take(),
        _leftovers: Leftovers,
        _machine: machine,
    })
}
