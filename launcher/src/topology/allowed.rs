//! Which CPUs the launcher may use (taskset, cgroup cpuset, Slurm).
//!
//! Owns: the **Allowed** rule of the module docs: on the live root the launcher's own affinity
//! (`sched_getaffinity`, the module's only `unsafe`), on a dump `/proc/self/status`, else the
//! cgroup cpuset, else every online CPU. Must not: read CPU or node topology, or decide that an
//! offline CPU is allowed (`mod.rs` masks the result with the online CPUs).

use super::parse::{cgroup_cpuset_path, cpuset_mount, status_allowed_list};
use super::sysfs::Reader;
use std::collections::BTreeSet;

impl Reader<'_> {
    /// The CPUs the launcher (or the dump's process) may run on.
    pub(super) fn allowed(&mut self, online: &BTreeSet<usize>) -> BTreeSet<usize> {
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
        let (mount, v2) = self.cpuset_hierarchy()?;
        let name = if v2 {
            "cpuset.cpus.effective"
        } else {
            "cpuset.cpus"
        };
        self.cgroup_cpus(&mount, &path, name)
    }

    /// Where a hierarchy with the cpuset controller is mounted, and whether it is cgroup v2:
    /// from `/proc/mounts`, else the usual mount points.
    fn cpuset_hierarchy(&mut self) -> Option<(String, bool)> {
        let root = self.root;
        let v2_has = |dir: &str| {
            root.read_opt(&format!("{dir}/cgroup.controllers"))
                .is_some_and(|c| c.split_whitespace().any(|w| w == "cpuset"))
        };
        match self.read_quiet("/proc/mounts") {
            Some(m) => cpuset_mount(&m, &v2_has),
            None if self.root.exists("/sys/fs/cgroup/cpuset/cpuset.cpus") => {
                Some(("/sys/fs/cgroup/cpuset".to_string(), false))
            }
            None if v2_has("/sys/fs/cgroup") => Some(("/sys/fs/cgroup".to_string(), true)),
            None => None,
        }
    }

    /// The cpulist file `name` of cgroup `path` under `mount`, or of the nearest ancestor that
    /// has it: v2 has the file only where the controller is on.
    fn cgroup_cpus(&mut self, mount: &str, path: &str, name: &str) -> Option<BTreeSet<usize>> {
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
