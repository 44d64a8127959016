//! The kernel's isolation settings: `cpu/isolated`, `cpu/nohz_full` and the command line.
//!
//! Owns: the **Isolation** rule of the module docs (sysfs first; the command line where a file
//! is missing; `rcu_nocbs=` and `irqaffinity=` from the command line) and reading
//! `/proc/cmdline`. Must not: read CPU topology or decide what isolation means for selection.

use super::parse::{cmdline_param, parse_nohz_full, parse_param_cpulist, split_isolcpus};
use super::sysfs::{Reader, CPU_DIR};
use super::KernelIsolation;

impl Reader<'_> {
    /// `/proc/cmdline`, trimmed; noted when it cannot be read.
    pub(super) fn cmdline(&mut self) -> Option<String> {
        self.read_noted("/proc/cmdline")
            .map(|s| s.trim().to_string())
    }

    /// The isolation settings, given the command line and the possible CPUs (what `all` means).
    pub(super) fn isolation(
        &mut self,
        cmdline: Option<&str>,
        possible: &[usize],
    ) -> KernelIsolation {
        let param = |name: &str| cmdline.and_then(|c| cmdline_param(c, name));
        let mut iso = KernelIsolation {
            isolcpus: param("isolcpus"),
            nohz_full_param: param("nohz_full"),
            rcu_nocbs_param: param("rcu_nocbs"),
            irqaffinity_param: param("irqaffinity"),
            sysfs_isolated: self.list_file(&format!("{CPU_DIR}/isolated")),
            sysfs_nohz_full: self.sysfs_nohz_full(),
            ..KernelIsolation::default()
        };
        iso.isolated = match (&iso.sysfs_isolated, &iso.isolcpus) {
            (Some(v), _) => v.clone(),
            (None, Some(value)) => match split_isolcpus(value) {
                (_, list, true) => self.param_cpus("isolcpus", &list, possible),
                (_, _, false) => Vec::new(),
            },
            (None, None) => Vec::new(),
        };
        iso.nohz_full = match (&iso.sysfs_nohz_full, &iso.nohz_full_param) {
            (Some(v), _) => v.clone(),
            (None, Some(value)) => self.param_cpus("nohz_full", value, possible),
            (None, None) => Vec::new(),
        };
        if let Some(value) = &iso.rcu_nocbs_param {
            iso.rcu_nocbs = self.param_cpus("rcu_nocbs", value, possible);
        }
        if let Some(value) = &iso.irqaffinity_param {
            iso.irqaffinity = Some(self.param_cpus("irqaffinity", value, possible));
        }
        iso
    }

    /// `cpu/nohz_full`, `None` when missing or unparsable (noted).
    fn sysfs_nohz_full(&mut self) -> Option<Vec<usize>> {
        let file = format!("{CPU_DIR}/nohz_full");
        let text = self.read_quiet(&file)?;
        match parse_nohz_full(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.note(&file, format!("unparsable {:?}: {e}", text.trim()));
                None
            }
        }
    }

    /// The CPUs of command-line parameter `name=value`; empty (and noted) when unparsable.
    fn param_cpus(&mut self, name: &str, value: &str, possible: &[usize]) -> Vec<usize> {
        match parse_param_cpulist(value, possible) {
            Ok(v) => v,
            Err(e) => {
                self.note("/proc/cmdline", format!("{name}={value}: {e}"));
                Vec::new()
            }
        }
    }
}
