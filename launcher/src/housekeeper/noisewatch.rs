//! Each window's noise of the task CPUs and the spares, from the sources the selection scores:
//! `/proc/stat` (time the CPU was busy with something else than the task, and steal) and
//! `/proc/interrupts` (device interrupt rates). Reading them sends no IPI to any CPU: the
//! kernel sums per-CPU counters.
//!
//! Only noise that stays where it is counts, since a slot that moves takes the task's own
//! noise along: the task's run time is taken out of each CPU's busy time (the threads read at
//! each poll on the CPU they ran on; a thread born since is counted whole; the time of threads
//! that ended between reads, found in their processes' totals, is taken out of every task
//! CPU), and so is the launcher's. The interrupts a task causes on its own CPU (rescheduling
//! and call IPIs, its timers, the local tick of a busy CPU, softirqs) are not counted; their
//! time, when the kernel accounts it, is in the busy time like any other.
//!
//! Owns: the snapshot at the start of the window, the task's time since then and each task
//! thread's and process's CPU time at the last read. Must not: decide anything
//! ([`super::policy::noise`]) or move a thread (the placer).

use super::threads::{self, Handle};
use crate::fsroot::FsRoot;
use crate::noise::{self, Snapshot, USER_HZ};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// What one device interrupt is taken to cost the CPU it lands on, in microseconds: the
/// entry, the handler and the cache lines it evicts (a few µs on current x86; rounded up).
pub const IRQ_COST_US: f64 = 10.0;

/// The shortest window the noise is measured over: `/proc/stat` counts whole 10 ms ticks, so
/// over one 10 ms poll a CPU shared half and half reads 0 % or 100 % busy by rounding alone.
pub const MIN_WINDOW: Duration = Duration::from_millis(100);

/// One CPU's noise over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PollNoise {
    /// Busy time that was neither the task's nor the launcher's, percent of the window.
    pub other_pct: f64,
    /// Time the hypervisor stole, percent.
    pub steal_pct: f64,
    /// Device interrupts per second (none with `--steer`: they are moved away).
    pub irq_per_s: f64,
    /// The part of their cost (at [`IRQ_COST_US`] each) that is not already in `other_pct`
    /// as irq time the kernel accounted, percent.
    pub irq_extra_pct: f64,
    /// One clock tick's share of the window, percent: how far `/proc/stat` rounds.
    pub tick_pct: f64,
}

impl PollNoise {
    /// The share of the CPU the task could not have had, percent: other work and steal less
    /// one tick of rounding (as [`crate::noise::CpuNoise::score`] forgives it), and interrupts.
    pub fn pct(&self) -> f64 {
        (self.other_pct + self.steal_pct - self.tick_pct).max(0.0) + self.irq_extra_pct
    }
}

/// Follows the CPUs' counters from poll to poll.
pub struct NoiseWatch {
    root: FsRoot,
    steer: bool,
    housekeeper_cpu: usize,
    /// The snapshot the current window started with.
    before: Snapshot,
    /// Each task thread's CPU time at its last read, ns.
    thread_ns: HashMap<i32, u64>,
    /// The task's run time on each CPU since `before`, as the reads of its threads found it.
    task_ns: BTreeMap<usize, u64>,
    /// All of `task_ns`, and the time of threads whose CPU is unknown.
    read_ns: u64,
    /// Each task process's `stat` and its CPU time (see [`crate::procfs::pid_stat::parse_process_ticks`]) at
    /// the start of the window, ns.
    process_ns: HashMap<i32, (Handle, u64)>,
    /// The launcher's CPU time at the start of the window.
    own: Duration,
}

impl NoiseWatch {
    /// Takes the first snapshot (before the task starts). `steer`: steerable IRQs are moved
    /// away for the run, so they do not count.
    pub fn start(root: &FsRoot, housekeeper_cpu: usize, steer: bool) -> NoiseWatch {
        NoiseWatch {
            root: root.clone(),
            steer,
            housekeeper_cpu,
            before: Snapshot::read(root),
            thread_ns: HashMap::new(),
            task_ns: BTreeMap::new(),
            read_ns: 0,
            process_ns: HashMap::new(),
            own: super::own_cpu_time(),
        }
    }

    /// Called at every poll. `ran`: the task threads read this poll, each with its CPU time
    /// so far (ns) and the CPU it last ran on (a thread left unread did not run); `processes`:
    /// the task's processes. Once the window is [`MIN_WINDOW`] long, the noise of each of
    /// `task_cpus` and `spares` over it (`None` for a CPU whose counters could not be read),
    /// and a new window starts.
    pub fn sample(
        &mut self,
        task_cpus: &[usize],
        spares: &[usize],
        ran: impl Iterator<Item = (i32, u64, Option<usize>)>,
        processes: impl Iterator<Item = i32>,
    ) -> Option<BTreeMap<usize, Option<PollNoise>>> {
        for (tid, ns, cpu) in ran {
            // A thread not seen before was born since the watch started (before the task).
            let was = self.thread_ns.insert(tid, ns).unwrap_or(0);
            let ran_ns = ns.saturating_sub(was);
            self.read_ns = self.read_ns.saturating_add(ran_ns);
            if let Some(cpu) = cpu {
                let t = self.task_ns.entry(cpu).or_default();
                *t = t.saturating_add(ran_ns);
            }
        }
        if self.before.taken.elapsed() < MIN_WINDOW {
            return None;
        }
        let after = Snapshot::read(&self.root);
        let window = after.taken.saturating_duration_since(self.before.taken);
        let unread_ns = self.unread_task_ns(processes);
        let own = super::own_cpu_time();
        let own_ns = own.saturating_sub(self.own).as_nanos() as u64;
        self.own = own;
        let cpus: Vec<usize> = task_cpus.iter().chain(spares).copied().collect();
        let deltas = noise::delta_for(&self.before, &after, &cpus);
        let readable = after.stat.is_some() && self.before.stat.is_some();
        self.before = after;
        let task_ns = std::mem::take(&mut self.task_ns);
        self.read_ns = 0;
        let window_ns = window.as_nanos().max(1) as f64;
        let window_s = window.as_secs_f64();
        let noise = cpus
            .iter()
            .map(|&cpu| {
                let figures = deltas.get(&cpu).filter(|d| readable && d.ticks > 0);
                let noise = figures.map(|d| {
                    let mut mine = task_ns.get(&cpu).copied().unwrap_or(0);
                    if task_cpus.contains(&cpu) {
                        mine = mine.saturating_add(unread_ns);
                    }
                    if cpu == self.housekeeper_cpu {
                        mine = mine.saturating_add(own_ns);
                    }
                    let mine_pct = 100.0 * mine as f64 / window_ns;
                    let irq_per_s = if self.steer {
                        0.0
                    } else {
                        d.irq_steerable as f64 / window_s
                    };
                    let irq_cost_pct = irq_per_s * IRQ_COST_US * 1e-4;
                    PollNoise {
                        other_pct: (d.busy_pct - mine_pct).max(0.0),
                        steal_pct: d.steal_pct,
                        irq_per_s,
                        irq_extra_pct: (irq_cost_pct - d.irq_time_pct).max(0.0),
                        tick_pct: 100.0 / d.ticks as f64,
                    }
                });
                (cpu, noise)
            })
            .collect();
        Some(noise)
    }

    /// The task's CPU time over the window that the reads of its threads did not see (threads
    /// that ended since their last read, or were born and ended between two), from its
    /// processes' totals, less two ticks a process for their rounding.
    fn unread_task_ns(&mut self, processes: impl Iterator<Item = i32>) -> u64 {
        const TICK_NS: u64 = 1_000_000_000 / USER_HZ;
        let mut total_ns = 0u64;
        let mut seen = HashSet::new();
        for pid in processes {
            seen.insert(pid);
            let root = &self.root;
            let (handle, was) = self
                .process_ns
                .entry(pid)
                .or_insert_with(|| (Handle::new(root.path(&format!("/proc/{pid}/stat"))), 0));
            let ticks = match handle.read() {
                threads::Read::Text(text) => crate::procfs::pid_stat::parse_process_ticks(&text),
                _ => None,
            };
            if let Some(ticks) = ticks {
                let ns = ticks.saturating_mul(TICK_NS);
                total_ns =
                    total_ns.saturating_add(ns.saturating_sub(*was).saturating_sub(2 * TICK_NS));
                *was = ns;
            }
        }
        self.process_ns.retain(|pid, _| seen.contains(pid));
        total_ns.saturating_sub(self.read_ns)
    }

    /// Forgets a thread that ended.
    pub fn forget(&mut self, tid: i32) {
        self.thread_ns.remove(&tid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/stat` of 3 CPUs with the same user and idle ticks.
    fn stat(user: u64, idle: u64) -> String {
        (0..3)
            .map(|c| format!("cpu{c} {user} 0 0 {idle} 0 0 0 0 0 0\n"))
            .collect()
    }

    #[test]
    fn the_task_own_time_is_not_noise_even_of_newborn_and_ended_threads() {
        let dir = tempfile::tempdir().unwrap();
        let root = FsRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/77")).unwrap();
        std::fs::write(dir.path().join("proc/stat"), stat(0, 1000)).unwrap();
        let mut watch = NoiseWatch::start(&root, 9, false);
        // Within the first window: nothing yet. Thread 78 is new, and has run 10 s on cpu 0.
        let ten_s = 10_000_000_000;
        let thread = [(78, ten_s, Some(0))];
        assert!(watch
            .sample(&[0, 1], &[2], thread.into_iter(), [77].into_iter())
            .is_none());
        // Each CPU ran 50 of 100 ticks since. Process 77 used 30 s: 20 s in threads that ended
        // unread. (The window is real time, far shorter than those seconds.)
        std::fs::write(dir.path().join("proc/stat"), stat(50, 1050)).unwrap();
        std::fs::write(
            dir.path().join("proc/77/stat"),
            "77 (t) S 1 77 77 0 -1 0 0 0 0 0 2500 500 0 0 20 0 1 0 5 0 0\n",
        )
        .unwrap();
        std::thread::sleep(MIN_WINDOW);
        let noise = watch
            .sample(&[0, 1], &[2], std::iter::empty(), [77].into_iter())
            .expect("a whole window");
        let n = |cpu: usize| noise[&cpu].unwrap();
        assert_eq!(
            n(0).other_pct,
            0.0,
            "the newborn's 10 s is the task's: {:?}",
            n(0)
        );
        assert_eq!(
            n(1).other_pct,
            0.0,
            "ended threads ran on a task CPU: {:?}",
            n(1)
        );
        // The spare ran no task thread: its 50 % is noise, one tick (1 %) forgiven.
        assert_eq!((n(2).other_pct, n(2).tick_pct), (50.0, 1.0));
        assert_eq!(n(2).pct(), 49.0);
        // Another 50 of 100 ticks, while the task did not run: now cpu 0's are noise. The
        // task's time was counted once.
        std::fs::write(dir.path().join("proc/stat"), stat(100, 1100)).unwrap();
        std::thread::sleep(MIN_WINDOW);
        let noise = watch
            .sample(&[0, 1], &[2], thread.into_iter(), [77].into_iter())
            .expect("a whole window");
        let n = |cpu: usize| noise[&cpu].unwrap().pct();
        assert_eq!((n(0), n(1)), (49.0, 49.0), "{noise:?}");
    }

    #[test]
    fn only_device_interrupts_count_and_not_with_steer() {
        let dir = tempfile::tempdir().unwrap();
        let root = FsRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let interrupts = |dev: u64, loc: u64| {
            format!(
                "           CPU0       CPU1       CPU2\n 36: 0 0 {dev} PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0\nLOC: {loc} {loc} 0 Local timer interrupts\n"
            )
        };
        let write = |user: u64, idle: u64, dev: u64, loc: u64| {
            std::fs::write(dir.path().join("proc/stat"), stat(user, idle)).unwrap();
            std::fs::write(dir.path().join("proc/interrupts"), interrupts(dev, loc)).unwrap();
        };
        write(0, 1000, 0, 0);
        let mut plain = NoiseWatch::start(&root, 9, false);
        let mut steered = NoiseWatch::start(&root, 9, true);
        // A storm of the task's own timer interrupts on cpus 0 and 1; a device's on cpu 2.
        write(0, 1100, 1_000_000, 1_000_000);
        std::thread::sleep(MIN_WINDOW);
        for (watch, steer) in [(&mut plain, false), (&mut steered, true)] {
            let noise = watch
                .sample(&[0, 1], &[2], std::iter::empty(), std::iter::empty())
                .unwrap();
            let n = |cpu: usize| noise[&cpu].unwrap();
            assert_eq!((n(0).pct(), n(1).pct()), (0.0, 0.0), "{noise:?}");
            assert_eq!(n(2).irq_per_s > 0.0, !steer, "{noise:?}");
            assert_eq!(n(2).pct() > 0.0, !steer, "{noise:?}");
        }
    }
}
