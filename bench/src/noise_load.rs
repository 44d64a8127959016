//! `--noise CPULIST[:DUTY[/PERIOD]]`: a background load of goset-bench's own on those CPUs for the whole
//! experiment, so that the effect of noise-aware selection shows on a small or quiet machine;
//! with `--noise-at SECS`, in each run from SECS after its start (a CPU that turns noisy
//! mid-run).
//!
//! Owns: the load threads (one per CPU, pinned, busy `DUTY` of each period, 10 ms unless
//! given, asleep the rest: `1:10%/5s` is a source busy 0.5 s of every 5 s, as a cron job or a
//! monitoring agent is) and their end. Must not: outlive the experiment ([`NoiseLoad`] stops them when dropped).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The load's default period: short enough that every run sees the same mix of busy and idle.
const PERIOD: Duration = Duration::from_millis(10);

/// The longest period: a load that could stay asleep for a whole experiment is none.
const MAX_PERIOD: Duration = Duration::from_secs(600);

/// What `--noise` asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseSpec {
    /// CPUs to load.
    pub cpus: Vec<usize>,
    /// Busy fraction of each period, (0, 1].
    pub duty: f64,
    /// The period.
    pub period: Duration,
}

/// Parses `CPULIST[:DUTY[/PERIOD]]`; DUTY is a fraction (`0.5`) or a percentage (`50%`),
/// default 50%; PERIOD a duration (`5s`, `100ms`), default 10 ms.
pub fn parse(text: &str) -> Result<NoiseSpec, String> {
    let (list, duty) = match text.split_once(':') {
        Some((l, d)) => (l, Some(d)),
        None => (text, None),
    };
    let (duty, period) = match duty.map(|d| d.split_once('/')) {
        Some(Some((d, p))) => (Some(d), Some(p)),
        Some(None) => (duty, None),
        None => (None, None),
    };
    let period = match period {
        None => PERIOD,
        Some(p) => match goset::cli::parse_duration(p, "--noise") {
            Ok(d) if d >= Duration::from_millis(1) && d <= MAX_PERIOD => d,
            _ => {
                return Err(format!(
                    "--noise {text}: period '{p}' is not a duration from 1ms to 600s"
                ))
            }
        },
    };
    let cpus = goset::topology::parse_cpulist(list).map_err(|e| {
        format!(
            "--noise {text}: {e} (expected CPULIST[:DUTY[/PERIOD]], e.g. 0, 0-1:30% or 1:10%/5s)"
        )
    })?;
    if cpus.is_empty() {
        return Err(format!(
            "--noise {text}: no CPUs (expected CPULIST[:DUTY[/PERIOD]])"
        ));
    }
    let duty = match duty {
        None => 0.5,
        Some(d) => {
            let value = match d.strip_suffix('%') {
                Some(p) => p.parse::<f64>().map(|p| p / 100.0),
                None => d.parse::<f64>(),
            };
            match value {
                Ok(v) if v > 0.0 && v <= 1.0 => v,
                _ => {
                    return Err(format!(
                        "--noise {text}: duty '{d}' is not in (0, 1] or (0%, 100%]"
                    ))
                }
            }
        }
    };
    Ok(NoiseSpec { cpus, duty, period })
}

/// The running load; stopped and joined when dropped.
pub struct NoiseLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl NoiseLoad {
    /// Starts one load thread per CPU of `spec`, each busy from `after` on. Fails (nothing
    /// left running) when a CPU cannot be pinned to (offline, outside the allowed mask).
    pub fn start(spec: &NoiseSpec, after: Duration) -> Result<NoiseLoad, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut noise = NoiseLoad {
            stop: stop.clone(),
            threads: Vec::new(),
        };
        for &cpu in &spec.cpus {
            let (tx, rx) = std::sync::mpsc::channel();
            let stop = stop.clone();
            let (duty, period) = (spec.duty, spec.period);
            noise.threads.push(std::thread::spawn(move || {
                let mut set = nix::sched::CpuSet::new();
                let pinned = set.set(cpu).and_then(|()| {
                    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                });
                let _ = tx.send(pinned.map_err(|e| e.to_string()));
                if pinned.is_ok() && wait(&stop, after) {
                    load(&stop, duty, period);
                }
            }));
            if let Ok(Err(e)) | Err(e) = rx.recv().map_err(|e| e.to_string()) {
                return Err(format!("--noise: cannot run on CPU {cpu}: {e}"));
            }
        }
        Ok(noise)
    }
}

/// Sleeps `after` in periods; `false` when `stop` came first.
fn wait(stop: &AtomicBool, after: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < after {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(PERIOD.min(after.saturating_sub(start.elapsed())));
    }
    true
}

/// Busy `duty` of each `period`, asleep the rest, until `stop`.
fn load(stop: &AtomicBool, duty: f64, period: Duration) {
    let busy = period.mul_f64(duty);
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        while start.elapsed() < busy && !stop.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if let Some(rest) = period.checked_sub(start.elapsed()) {
            // A long sleep in steps, so that the end of the experiment does not wait for it.
            let _ = wait(stop, rest);
        }
    }
}

impl Drop for NoiseLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_and_bad_ones() {
        assert_eq!(
            parse("0").unwrap(),
            NoiseSpec {
                cpus: vec![0],
                duty: 0.5,
                period: PERIOD,
            }
        );
        assert_eq!(parse("0-1:30%").unwrap().duty, 0.3);
        let periodic = parse("1:10%/5s").unwrap();
        assert_eq!(
            (periodic.duty, periodic.period),
            (0.1, Duration::from_secs(5))
        );
        assert_eq!(parse("1:0.25").unwrap().cpus, [1]);
        for bad in [
            "x", "0:0", "0:150%", "0:abc", "", "1:10%/0", "1:10%/1h", "1:10%/x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_load_runs_on_its_cpu_and_stops() {
        let cpu = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
            .map(|s| (0..1024).find(|&c| s.is_set(c).unwrap_or(false)).unwrap())
            .unwrap();
        let spec = NoiseSpec {
            cpus: vec![cpu],
            duty: 1.0,
            period: PERIOD,
        };
        let noise = NoiseLoad::start(&spec, Duration::ZERO).unwrap();
        assert_eq!(noise.threads.len(), 1);
        drop(noise);
        // One that would start in a lifetime still stops at once (the join would hang).
        drop(NoiseLoad::start(&spec, Duration::MAX).unwrap());
        let nowhere = NoiseSpec {
            cpus: vec![100_000],
            duty: 0.5,
            period: PERIOD,
        };
        // A long period's sleep ends with the experiment.
        let slow = NoiseSpec {
            duty: 0.01,
            period: Duration::from_secs(600),
            ..spec.clone()
        };
        let started = Instant::now();
        drop(NoiseLoad::start(&slow, Duration::ZERO).unwrap());
        assert!(started.elapsed() < Duration::from_secs(60));
        assert!(NoiseLoad::start(&nowhere, Duration::ZERO).is_err());
    }
}
