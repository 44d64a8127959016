//! `/proc/stat`: the per-CPU time accounting.
//!
//! Owns: [`CpuTimes`] (one `cpu` line, in [`USER_HZ`] ticks, and its
//! arithmetic) and [`parse_proc_stat`], a pure function of the file text. Must not: read files or
//! turn times into noise (`per_cpu.rs` does).

use serde::Serialize;
use std::collections::BTreeMap;

/// Ticks per second of the times in `/proc/stat` (`USER_HZ`, `sysconf(_SC_CLK_TCK)`): 100 on
/// every architecture Linux runs on today, whatever the kernel's `CONFIG_HZ`.
pub const USER_HZ: u64 = 100;

/// One `cpu` line of `/proc/stat`, in [`USER_HZ`] ticks. Fields an older kernel
/// does not print are 0 (`fields` says how many it printed: 4 before 2.6, 7 on 2.6.0, 8 from
/// 2.6.11 with `steal`, 9 with `guest`, 10 from 2.6.33 with `guest_nice`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
    /// Time running a guest; already included in `user`.
    pub guest: u64,
    /// Time running a niced guest; already included in `nice`.
    pub guest_nice: u64,
    /// How many fields the kernel printed.
    pub fields: usize,
}

impl CpuTimes {
    fn from_fields(v: &[u64]) -> CpuTimes {
        let f = |i: usize| v.get(i).copied().unwrap_or(0);
        CpuTimes {
            user: f(0),
            nice: f(1),
            system: f(2),
            idle: f(3),
            iowait: f(4),
            irq: f(5),
            softirq: f(6),
            steal: f(7),
            guest: f(8),
            guest_nice: f(9),
            fields: v.len(),
        }
    }

    /// Time busy with work: user + nice + system + irq + softirq (guest time is inside user
    /// and nice).
    pub fn busy(&self) -> u64 {
        self.user
            .saturating_add(self.nice)
            .saturating_add(self.system)
            .saturating_add(self.irq)
            .saturating_add(self.softirq)
    }

    /// All accounted time: busy + idle + iowait + steal.
    pub fn total(&self) -> u64 {
        self.busy()
            .saturating_add(self.idle)
            .saturating_add(self.iowait)
            .saturating_add(self.steal)
    }

    /// Field-wise `self - before`, each saturating at 0.
    pub fn since(&self, before: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(before.user),
            nice: self.nice.saturating_sub(before.nice),
            system: self.system.saturating_sub(before.system),
            idle: self.idle.saturating_sub(before.idle),
            iowait: self.iowait.saturating_sub(before.iowait),
            irq: self.irq.saturating_sub(before.irq),
            softirq: self.softirq.saturating_sub(before.softirq),
            steal: self.steal.saturating_sub(before.steal),
            guest: self.guest.saturating_sub(before.guest),
            guest_nice: self.guest_nice.saturating_sub(before.guest_nice),
            fields: self.fields.min(before.fields),
        }
    }
}

/// The `cpu` lines of `/proc/stat`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcStat {
    /// The aggregate `cpu ` line.
    pub all: Option<CpuTimes>,
    /// `cpuN` lines: online CPUs only.
    pub cpus: BTreeMap<usize, CpuTimes>,
}

/// Parses the `cpu` and `cpuN` lines of `/proc/stat` (other lines are ignored). Fails when
/// there is no `cpu` line with at least the four original fields.
pub fn parse_proc_stat(text: &str) -> Result<ProcStat, String> {
    let mut stat = ProcStat::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(id) = words.next().and_then(|w| w.strip_prefix("cpu")) else {
            continue;
        };
        let mut v = [0u64; 10];
        let mut n = 0;
        for w in words {
            match w.parse::<u64>() {
                Ok(x) if n < v.len() => {
                    v[n] = x;
                    n += 1;
                }
                _ => break,
            }
        }
        if n < 4 {
            continue;
        }
        let times = CpuTimes::from_fields(&v[..n]);
        if id.is_empty() {
            stat.all = Some(times);
        } else if let Ok(cpu) = id.parse::<usize>() {
            stat.cpus.insert(cpu, times);
        }
    }
    if stat.all.is_none() && stat.cpus.is_empty() {
        return Err("no cpu lines".to_string());
    }
    Ok(stat)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::X86_KVM_STAT;
    use super::*;

    #[test]
    fn parses_captured_x86_kvm_stat() {
        let st = parse_proc_stat(X86_KVM_STAT).unwrap();
        assert_eq!(st.cpus.len(), 2);
        let c1 = st.cpus[&1];
        assert_eq!(
            (c1.user, c1.system, c1.idle, c1.iowait),
            (2531, 1247, 29503, 286)
        );
        assert_eq!((c1.softirq, c1.steal, c1.fields), (53, 6, 10));
        assert_eq!(c1.busy(), 2531 + 1247 + 53);
        assert_eq!(c1.total(), 2531 + 1247 + 29503 + 286 + 53 + 6);
        assert_eq!(st.all.unwrap().user, 4341);
    }

    #[test]
    fn rejects_text_without_cpu_lines() {
        assert!(parse_proc_stat("intr 1 2 3\nctxt 5\n").is_err());
    }

    #[test]
    fn parses_old_stat_formats() {
        // 2.4 (4 fields), 2.6.0 (7), 2.6.11 (8, steal), 2.6.24 (9, guest).
        let st = parse_proc_stat(
            "cpu  10 0 5 100\ncpu0 1 2 3 4\ncpu1 1 2 3 4 5 6 7\ncpu2 1 2 3 4 5 6 7 8\n\
             cpu3 1 2 3 4 5 6 7 8 9\ncpu4 1 2\n",
        )
        .unwrap();
        assert_eq!(
            st.cpus.len(),
            4,
            "a line with fewer than 4 fields is ignored"
        );
        assert_eq!(st.cpus[&0].fields, 4);
        assert_eq!((st.cpus[&0].iowait, st.cpus[&0].steal), (0, 0));
        assert_eq!((st.cpus[&1].softirq, st.cpus[&1].steal), (7, 0));
        assert_eq!(st.cpus[&2].steal, 8);
        assert_eq!((st.cpus[&3].guest, st.cpus[&3].guest_nice), (9, 0));
        assert_eq!(st.all.unwrap().total(), 115);
    }
}
