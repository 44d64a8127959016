//! Each poll's noise of the task CPUs and the spares, from the sources the selection scores:
//! `/proc/stat` (time the CPU was busy with something else than the task, and steal) and
//! `/proc/interrupts` and `/proc/softirqs` (interrupt rates). Reading them sends no IPI to any
//! CPU: the kernel sums per-CPU counters.
//!
//! Owns: the snapshot of the last poll and each task thread's CPU time then, so that the
//! task's own time on a CPU (and the housekeeper's) is taken out of its busy time. Must not:
//! decide anything ([`super::noise_rule`]) or move a thread (the placer).

use crate::fsroot::FsRoot;
use crate::noise::{self, Snapshot};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What one interrupt or softirq is taken to cost the CPU it lands on, in microseconds: the
/// entry, the handler and the cache lines it evicts (a few µs on current x86; rounded up).
pub const IRQ_COST_US: f64 = 10.0;

/// One CPU's noise over one poll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PollNoise {
    /// Busy time that was neither the task's nor the housekeeper's, percent of the poll.
    pub other_pct: f64,
    /// Time the hypervisor stole, percent.
    pub steal_pct: f64,
    /// Interrupts and softirqs per second (steerable ones only without `--steer`).
    pub irq_per_s: f64,
}

impl PollNoise {
    /// The share of the CPU the task could not have had, percent: other work, steal, and
    /// [`IRQ_COST_US`] per interrupt.
    pub fn pct(&self) -> f64 {
        self.other_pct + self.steal_pct + self.irq_per_s * IRQ_COST_US * 1e-4
    }
}

/// Follows the CPUs' counters from poll to poll.
pub struct NoiseWatch {
    root: FsRoot,
    steer: bool,
    housekeeper: usize,
    before: Snapshot,
    /// Each task thread's CPU time at the last poll, ns.
    thread_ns: HashMap<i32, u64>,
    /// The launcher's CPU time at the last poll.
    own: Duration,
}

impl NoiseWatch {
    /// Takes the first snapshot. `steer`: steerable IRQs are moved away for the run, so they
    /// do not count.
    pub fn start(root: &FsRoot, housekeeper: usize, steer: bool) -> NoiseWatch {
        NoiseWatch {
            root: root.clone(),
            steer,
            housekeeper,
            before: Snapshot::read(root),
            thread_ns: HashMap::new(),
            own: super::own_cpu_time(),
        }
    }

    /// The noise of each of `cpus` since the last call. `ran`: the task threads read this
    /// poll, each with its CPU time so far (ns) and the CPU it last ran on; a thread left
    /// unread did not run. `None` for a CPU whose counters could not be read.
    pub fn sample(
        &mut self,
        cpus: &[usize],
        ran: impl Iterator<Item = (i32, u64, Option<usize>)>,
    ) -> BTreeMap<usize, Option<PollNoise>> {
        let after = Snapshot::read(&self.root);
        let window = after.taken.saturating_duration_since(self.before.taken);
        let mut task_ns: BTreeMap<usize, u64> = BTreeMap::new();
        for (tid, ns, cpu) in ran {
            let was = self.thread_ns.insert(tid, ns);
            if let (Some(was), Some(cpu)) = (was, cpu) {
                *task_ns.entry(cpu).or_default() += ns.saturating_sub(was);
            }
        }
        let own = super::own_cpu_time();
        let own_ns = own.saturating_sub(self.own).as_nanos() as u64;
        self.own = own;
        let deltas = noise::delta_for(&self.before, &after, cpus);
        let readable = after.stat.is_some() && self.before.stat.is_some();
        self.before = after;
        let window_ns = window.as_nanos().max(1) as f64;
        let window_ms = window.as_millis() as u64;
        cpus.iter()
            .map(|&cpu| {
                let figures = deltas.get(&cpu).filter(|_| readable && window_ms > 0);
                let noise = figures.map(|d| {
                    let mut mine = task_ns.get(&cpu).copied().unwrap_or(0);
                    if cpu == self.housekeeper {
                        mine += own_ns;
                    }
                    let mine_pct = 100.0 * mine as f64 / window_ns;
                    PollNoise {
                        other_pct: (d.busy_pct - mine_pct).max(0.0),
                        steal_pct: d.steal_pct,
                        irq_per_s: d.irq_rate(self.steer, window_ms),
                    }
                });
                (cpu, noise)
            })
            .collect()
    }

    /// Forgets a thread that ended.
    pub fn forget(&mut self, tid: i32) {
        self.thread_ns.remove(&tid);
    }
}
