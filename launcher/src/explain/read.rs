//! What an explanation is made of, read at one instant under an [`FsRoot`]: the interrupt and
//! softirq tables, every thread's CPU time and last CPU, and the names the kernel gives each
//! IRQ's handlers and device.
//!
//! Owns: [`Reading`] and its readers. Must not: difference two readings or advise (`mod.rs`).

use crate::fsroot::FsRoot;
use crate::noise::{parse_interrupts, parse_softirqs, Interrupts, Softirqs, INTERRUPTS, SOFTIRQS};
use crate::procfs::pid_stat::parse_pid_stat;
use std::collections::BTreeMap;

/// At most this many threads are read: a machine with more is explained by the first ones
/// (in /proc order), never by an unbounded walk.
pub const MAX_TASKS: usize = 65_536;

/// One thread's CPU time and where it last ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTime {
    /// Its process.
    pub pid: u32,
    /// Itself.
    pub tid: u32,
    /// Its name (`comm`).
    pub comm: String,
    /// A kernel thread (a child of kthreadd, pid 2).
    pub kernel: bool,
    /// User + system time in `USER_HZ` ticks.
    pub ticks: u64,
    /// The CPU it last ran on (field 39).
    pub cpu: usize,
}

/// An IRQ's names: its handlers' (`/sys/kernel/irq/N/actions`, else the end of its
/// `/proc/interrupts` line) and its device's driver, where sysfs says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IrqNames {
    /// The handlers' names, comma-separated (`virtio2-input.0`, `nvme0q3`, `eth0-rx-1`).
    pub actions: String,
    /// The driver of the PCI device its line names (`virtio-pci`, `nvme`), if any.
    pub driver: Option<String>,
}

/// The files an explanation reads, at one instant. A part that cannot be read is `None`.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// `/proc/interrupts`.
    pub interrupts: Option<Interrupts>,
    /// `/proc/softirqs`.
    pub softirqs: Option<Softirqs>,
    /// Every thread's time (at most [`MAX_TASKS`]).
    pub tasks: Vec<TaskTime>,
    /// The names of each numbered IRQ.
    pub irq_names: BTreeMap<String, IrqNames>,
}

impl Reading {
    /// Reads everything under `root`, leaving out the threads of process `skip` (the reader's
    /// own: its probe threads are no noise).
    pub fn read(root: &FsRoot, skip: Option<u32>) -> Reading {
        let interrupts = (root.read(INTERRUPTS).ok()).and_then(|t| parse_interrupts(&t).ok());
        let irq_names = (interrupts.iter().flat_map(|i| &i.rows))
            .filter(|r| r.name.parse::<u32>().is_ok())
            .map(|r| (r.name.clone(), irq_names(root, &r.name, &r.desc)))
            .collect();
        Reading {
            softirqs: (root.read(SOFTIRQS).ok()).and_then(|t| parse_softirqs(&t).ok()),
            interrupts,
            tasks: tasks(root, skip),
            irq_names,
        }
    }
}

/// The names of IRQ `irq`, whose `/proc/interrupts` line ends in `desc`.
fn irq_names(root: &FsRoot, irq: &str, desc: &str) -> IrqNames {
    let actions = match root.read(&format!("/sys/kernel/irq/{irq}/actions")) {
        Ok(a) if !a.trim().is_empty() => a.trim().to_string(),
        // Without sysfs's actions: the words after the trigger (`5-edge`, `fasteoi`).
        _ => desc_actions(desc),
    };
    let driver = pci_address(desc).and_then(|addr| {
        let link = root.path(&format!("/sys/bus/pci/devices/{addr}/driver"));
        let target = std::fs::read_link(link).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    });
    IrqNames { actions, driver }
}

/// The handler names at the end of an interrupt line's description: what follows its last
/// trigger word (`...-edge`, `...-level`, `edge`, `level`, `fasteoi`), else its last word.
pub fn desc_actions(desc: &str) -> String {
    let words: Vec<&str> = desc.split_whitespace().collect();
    let trigger = (words.iter()).rposition(|w| {
        w.ends_with("-edge") || w.ends_with("-level") || ["edge", "level", "fasteoi"].contains(w)
    });
    match trigger {
        Some(t) if t + 1 < words.len() => words[t + 1..].join(" "),
        _ => words.last().map(|w| w.to_string()).unwrap_or_default(),
    }
}

/// The PCI address a description names (`PCI-MSIX-0000:00:06.0`, `PCI-MSI-0000:3b:00.0`).
pub fn pci_address(desc: &str) -> Option<&str> {
    let word = desc.split_whitespace().find(|w| w.starts_with("PCI-MSI"))?;
    let addr = word.split_once('-')?.1.split_once('-')?.1;
    (addr.len() == 12 && addr.as_bytes()[4] == b':').then_some(addr)
}

/// Every thread's time under `root` (but process `skip`'s), at most [`MAX_TASKS`].
fn tasks(root: &FsRoot, skip: Option<u32>) -> Vec<TaskTime> {
    let Ok(procs) = std::fs::read_dir(root.path("/proc")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if Some(pid) == skip {
            continue;
        }
        let Ok(threads) = std::fs::read_dir(root.path(&format!("/proc/{pid}/task"))) else {
            continue;
        };
        for t in threads.flatten() {
            if out.len() >= MAX_TASKS {
                return out;
            }
            let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(text) = root.read(&format!("/proc/{pid}/task/{tid}/stat")) else {
                continue;
            };
            let Some(s) = parse_pid_stat(&text) else {
                continue;
            };
            let Some(cpu) = s.processor else { continue };
            out.push(TaskTime {
                pid,
                tid,
                comm: s.comm,
                kernel: pid == 2 || s.ppid == 2,
                ticks: s.cpu_ticks,
                cpu,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_names_and_pci_addresses_from_interrupt_lines() {
        let virtio = "PCI-MSIX-0000:00:06.0   1-edge      virtio2-input.0";
        assert_eq!(desc_actions(virtio), "virtio2-input.0");
        assert_eq!(pci_address(virtio), Some("0000:00:06.0"));
        assert_eq!(desc_actions("IO-APIC   4-edge      ttyS0"), "ttyS0");
        assert_eq!(pci_address("IO-APIC   4-edge      ttyS0"), None);
        assert_eq!(
            desc_actions("GICv3  30 Level     arch_timer"),
            "arch_timer",
            "no trigger word known: the last word"
        );
        assert_eq!(
            desc_actions("IR-PCI-MSI 1048576-edge eth0-rx-0"),
            "eth0-rx-0"
        );
    }

    #[test]
    fn reads_this_machine_with_names_and_threads() {
        let me = std::process::id();
        let r = Reading::read(&FsRoot::default(), Some(me));
        assert!(r.interrupts.is_some() && r.softirqs.is_some());
        assert!(
            r.tasks.iter().all(|t| t.pid != me),
            "its own threads left out"
        );
        assert!(
            r.tasks.iter().any(|t| t.pid == 1 && !t.kernel),
            "init is a process"
        );
        assert!(
            r.tasks.iter().any(|t| t.kernel),
            "kernel threads are marked"
        );
        let numbered = (r.interrupts.as_ref().unwrap().rows.iter())
            .filter(|row| row.name.parse::<u32>().is_ok())
            .count();
        assert_eq!(r.irq_names.len(), numbered);
        assert!(
            r.irq_names.values().all(|n| !n.actions.is_empty()),
            "{:?}",
            r.irq_names
        );
    }
}
