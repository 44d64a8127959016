//! The probe's threads: one per CPU, pinned, SCHED_FIFO where permitted, all started at once,
//! each reading the clock in a tight loop and counting the gaps over the threshold.
//!
//! Owns: starting, pinning and joining the threads, their scheduling policy, and the cost.
//! Must not: rank or print (`stats.rs`, `goset probe`).

use super::stats::{CpuProbe, Detours};
use goset_plan::clock;
use serde::Serialize;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Busy time of one round. Between rounds a thread rests [`REST`], so that a SCHED_FIFO
/// probe never takes more than 90% of a CPU: within the kernel's real-time throttling budget
/// (`sched_rt_runtime_us`, 95% by default), which would otherwise show up as a 50 ms detour
/// of the probe's own making, and leaving normal work (an SSH session) some time.
pub const ROUND: Duration = Duration::from_millis(90);
/// See [`ROUND`].
pub const REST: Duration = Duration::from_millis(10);
/// The real-time priority of a probe thread: the lowest, so that any real-time thread of the
/// machine still preempts it and is seen as a detour, while normal tasks are not.
pub const FIFO_PRIORITY: i32 = 1;

/// A whole probe: each CPU's result, and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    /// Gaps longer than this are detours, in ns.
    pub threshold_ns: u64,
    /// The busy time asked of each thread, in ms.
    pub duration_ms: u64,
    /// One entry per CPU probed, by CPU number.
    pub cpus: Vec<CpuProbe>,
    /// CPUs that could not be probed, each with the reason (offline, not allowed).
    pub failed: Vec<(usize, String)>,
    /// CPU time the probe threads used, in ms: its cost to the machine.
    pub cost_cpu_ms: f64,
    /// Wall time from the first thread's start to the last one's end, in ms.
    pub wall_ms: f64,
}

impl Probe {
    /// The scheduling policy every probed CPU ran under: `"SCHED_FIFO"`, `"normal"`, or
    /// `"mixed"` when the kernel allowed it on some only.
    pub fn policy(&self) -> &'static str {
        let fifo = self.cpus.iter().filter(|p| p.fifo).count();
        match fifo {
            0 => "normal",
            n if n == self.cpus.len() => "SCHED_FIFO",
            _ => "mixed",
        }
    }
}

/// What one thread brings back.
struct Outcome {
    detours: Detours,
    measured_ns: u64,
    fifo: bool,
    cpu_ns: u64,
}

/// Probes `cpus` at once for `duration` of busy time each, counting gaps over `threshold` as
/// detours. A CPU the thread cannot be pinned to is listed in [`Probe::failed`].
pub fn run(cpus: &[usize], duration: Duration, threshold: Duration) -> Probe {
    let threshold_ns = u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX);
    let busy_ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let gate = Arc::new(Gate::default());
    let started = Instant::now();
    let threads: Vec<_> = (cpus.iter().copied())
        .map(|cpu| {
            let gate = Arc::clone(&gate);
            let spawned = std::thread::Builder::new()
                .name(format!("goset-probe-{cpu}"))
                .spawn(move || probe_one(cpu, busy_ns, threshold_ns, &gate));
            (cpu, spawned)
        })
        .collect();
    // Every thread is out of its start-up, which this thread must not compete with a
    // real-time spinner for: they measure from here on, at once.
    gate.open();
    let mut probe = Probe {
        threshold_ns,
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        cpus: Vec::new(),
        failed: Vec::new(),
        cost_cpu_ms: 0.0,
        wall_ms: 0.0,
    };
    for (cpu, spawned) in threads {
        let outcome = match spawned {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|_| Err("the probe thread panicked".into())),
            Err(e) => Err(format!("cannot start a thread: {e}")),
        };
        match outcome {
            Ok(o) => {
                probe.cost_cpu_ms += o.cpu_ns as f64 / 1e6;
                probe
                    .cpus
                    .push(CpuProbe::new(cpu, o.measured_ns, &o.detours, o.fifo));
            }
            Err(why) => probe.failed.push((cpu, why)),
        }
    }
    probe.wall_ms = started.elapsed().as_secs_f64() * 1e3;
    probe
}

/// The start signal of the probe threads: shut until every thread is started, so that they
/// measure the same interval.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One thread's probe of `cpu`: pin, try SCHED_FIFO, wait for the gate, then measure.
fn probe_one(cpu: usize, busy_ns: u64, threshold_ns: u64, gate: &Gate) -> Result<Outcome, String> {
    pin(cpu)?;
    let fifo = try_fifo();
    gate.wait();
    let cpu_before = clock::nanos(libc::CLOCK_THREAD_CPUTIME_ID);
    let mut detours = Detours::default();
    let mut measured_ns = 0u64;
    while measured_ns < busy_ns {
        let round = (busy_ns - measured_ns).min(ROUND.as_nanos() as u64);
        measured_ns += spin(round, threshold_ns, &mut detours);
        if measured_ns < busy_ns {
            std::thread::sleep(REST);
        }
    }
    let cpu_ns = clock::nanos(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(cpu_before);
    Ok(Outcome {
        detours,
        measured_ns,
        fifo,
        cpu_ns,
    })
}

/// Reads the clock in a tight loop for `round_ns`, recording every gap over `threshold_ns`;
/// returns the time measured.
fn spin(round_ns: u64, threshold_ns: u64, detours: &mut Detours) -> u64 {
    let start = clock::nanos(libc::CLOCK_MONOTONIC);
    let end = start.saturating_add(round_ns);
    let mut prev = start;
    loop {
        let now = clock::nanos(libc::CLOCK_MONOTONIC);
        let gap = now.saturating_sub(prev);
        if gap > threshold_ns {
            detours.record(gap);
        }
        prev = now;
        if now >= end {
            return now - start;
        }
    }
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("cannot run on CPU {cpu}: {e}"))
}

/// Makes the calling thread SCHED_FIFO at [`FIFO_PRIORITY`]; false where the kernel refuses
/// (no CAP_SYS_NICE and no RLIMIT_RTPRIO, or a cgroup without real-time time).
fn try_fifo() -> bool {
    let param = libc::sched_param {
        sched_priority: FIFO_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_every_cpu_for_the_time_asked_and_reports_its_cost() {
        let cpus: Vec<usize> = (0..2)
            .filter(|&c| {
                nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
                    .is_ok_and(|s| s.is_set(c).unwrap_or(false))
            })
            .collect();
        let p = run(&cpus, Duration::from_millis(120), Duration::from_micros(5));
        assert!(p.failed.is_empty(), "{:?}", p.failed);
        assert_eq!(p.cpus.iter().map(|c| c.cpu).collect::<Vec<_>>(), cpus);
        for c in &p.cpus {
            assert!(c.duration_ns >= 120_000_000, "{c:?}");
            assert!(
                c.lost_ns <= c.duration_ns && c.longest_ns <= c.lost_ns,
                "{c:?}"
            );
            assert!(c.p50_ns <= c.p99_ns && c.p99_ns <= c.longest_ns, "{c:?}");
            assert!(c.count == 0 || c.p50_ns > 5_000, "{c:?}");
        }
        // Two rounds of busy time per thread: at least most of it is the probe's own CPU time.
        assert!(
            p.cost_cpu_ms > 60.0 * cpus.len() as f64,
            "{}",
            p.cost_cpu_ms
        );
        assert!(
            p.wall_ms >= 120.0 + REST.as_millis() as f64,
            "{}",
            p.wall_ms
        );
        assert_eq!(p.threshold_ns, 5_000);
    }

    #[test]
    fn a_cpu_it_cannot_run_on_is_reported_and_the_others_still_probed() {
        let bogus = 4095;
        let p = run(
            &[0, bogus],
            Duration::from_millis(20),
            Duration::from_micros(5),
        );
        assert_eq!(p.failed.len(), 1, "{p:?}");
        assert_eq!(p.failed[0].0, bogus);
        assert!(p.failed[0].1.contains("4095"), "{}", p.failed[0].1);
        assert_eq!(p.cpus.len(), 1);
        assert_eq!(p.cpus[0].cpu, 0);
    }
}
