//! Per-CPU noise: interrupts, softirqs, other tasks' load and hypervisor steal.
//!
//! Owns: parsing `/proc/interrupts`, `/proc/softirqs` and `/proc/stat` under an [`FsRoot`],
//! differencing two snapshots, and the noise score. Must not: select or print.
//!
//! The parsers ([`parse_interrupts`], [`parse_softirqs`], [`parse_proc_stat`]) are pure
//! functions of the file text. [`Snapshot::read`] reads the three files at one instant (a
//! missing or unparsable file is recorded in [`Snapshot::errors`], never fatal), [`delta`]
//! differences two snapshots per CPU, and [`sample`] does snapshot, sleep, snapshot. The
//! housekeeper reuses [`Snapshot`] and [`delta`] (or [`delta_for`], restricted to the task CPUs)
//! for its telemetry.
//!
//! All counters are cumulative since boot; a counter that decreases between two snapshots (a
//! 32-bit interrupt counter that wrapped, an IRQ freed and reallocated, `/proc/stat` idle time
//! that the kernel corrected) yields a delta of 0, never a huge number.
//!
//! Layout (every public item is re-exported here, so callers name `crate::noise::X`):
//! - `interrupts.rs`: `/proc/interrupts` and `/proc/softirqs` rows and parsers;
//! - `table.rs`: the counter-table machinery those two files share;
//! - `stat.rs`: `/proc/stat` times, their [`USER_HZ`] ticks, and parser;
//! - `snapshot.rs`: [`Snapshot`], the three files (their names) read at one instant;
//! - `per_cpu.rs`: [`CpuNoise`], its score, and [`delta`] / [`delta_for`];
//! - `score.rs`: [`Score`], a CPU's noise by part, and their one order;
//! - this file: [`Noise`] and [`sample`] (snapshot, sleep, snapshot).

mod interrupts;
mod per_cpu;
mod score;
mod snapshot;
mod stat;
mod table;

#[cfg(test)]
mod fixtures;

pub use interrupts::{
    parse_interrupts, parse_softirqs, CounterRow, Interrupts, IrqKind, IrqRow, Softirqs,
};
pub use per_cpu::{delta, delta_for, CpuNoise};
pub use score::Score;
pub use snapshot::{Snapshot, INTERRUPTS, SOFTIRQS, STAT};
pub use stat::{parse_proc_stat, CpuTimes, ProcStat, USER_HZ};

use crate::fsroot::{FsRoot, ReadError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Noise of every online CPU over a sampling window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Noise {
    /// The measured length of the window in milliseconds (at least the requested one; 0 when
    /// sampling was off).
    pub window_ms: u64,
    /// Per CPU.
    pub cpus: BTreeMap<usize, CpuNoise>,
    /// Files that could not be read or parsed, once each; the fields they feed are 0 and mean
    /// "not measured".
    pub errors: Vec<ReadError>,
}

/// Samples noise under `root` over `window`: snapshot, sleep, snapshot, delta. A zero window
/// reads nothing (a CPU without an entry has no noise, and a dump need not hold
/// `/proc/interrupts`). Missing files are listed in the result's errors, never fatal.
pub fn sample(root: &FsRoot, window: Duration) -> Noise {
    match sample_snapshots(root, window) {
        Some((before, after)) => noise_between(&before, &after),
        None => Noise::default(),
    }
}

/// The two snapshots [`sample`] takes `window` apart; `None` for a zero window.
pub fn sample_snapshots(root: &FsRoot, window: Duration) -> Option<(Snapshot, Snapshot)> {
    if window.is_zero() {
        return None;
    }
    let before = Snapshot::read(root);
    // A signal that ends the run need not wait for the whole window.
    crate::signals::sleep(window);
    Some((before, Snapshot::read(root)))
}

/// The noise between two snapshots, with both snapshots' errors.
pub fn noise_between(before: &Snapshot, after: &Snapshot) -> Noise {
    let elapsed = after.taken.saturating_duration_since(before.taken);
    let mut errors = before.errors.clone();
    for e in &after.errors {
        if !errors.contains(e) {
            errors.push(e.clone());
        }
    }
    Noise {
        window_ms: u64::try_from(elapsed.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
        cpus: delta(before, after),
        errors,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn zero_window_reads_nothing_and_does_not_sleep() {
        let started = Instant::now();
        let n = sample(&FsRoot::default(), Duration::ZERO);
        assert!(started.elapsed() < Duration::from_millis(50), "no sleep");
        assert_eq!(n, Noise::default(), "nothing read");
    }

    #[test]
    fn fixture_root_reports_missing_interrupts() {
        let name = "16em64t-4s2c2t-offlines";
        let tarball = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/topology")
            .join(name)
            .join(format!("{name}.tar.bz2"));
        assert!(tarball.is_file(), "fixture {} not found", tarball.display());
        let dir = tempfile::TempDir::new().unwrap();
        let status = std::process::Command::new("tar")
            .arg("xjf")
            .arg(&tarball)
            .arg("-C")
            .arg(dir.path())
            .arg(format!("{name}/proc"))
            .status()
            .expect("tar must be installed");
        assert!(status.success());
        let root = FsRoot::new(dir.path().join(name));

        // A zero window needs none of the files: no error.
        assert_eq!(sample(&root, Duration::ZERO), Noise::default());
        {
            let window = Duration::from_millis(20);
            let n = sample(&root, window);
            let failed: Vec<&str> = n.errors.iter().map(|e| e.file.as_str()).collect();
            assert_eq!(
                failed,
                [INTERRUPTS, SOFTIRQS],
                "each missing file listed once, /proc/stat read"
            );
            assert_eq!(n.errors[0].to_string(), "/proc/interrupts: missing");
            // CPUs from /proc/stat; the dump is static, so all noise is zero.
            let stat = parse_proc_stat(&root.read(STAT).unwrap()).unwrap();
            assert_eq!(n.cpus.len(), stat.cpus.len());
            assert!(n.cpus.len() >= 12);
            assert!(n
                .cpus
                .values()
                .all(|c| c.score(false, n.window_ms).is_quiet()));
            assert!(n.window_ms >= 20);
        }
    }

    #[test]
    fn parses_live_proc_files() {
        let root = FsRoot::default();
        let i = parse_interrupts(&root.read(INTERRUPTS).unwrap()).unwrap();
        assert!(!i.cpus.is_empty());
        assert!(i
            .rows
            .iter()
            .any(|r| r.kind == IrqKind::Named || r.kind == IrqKind::PerCpu));
        assert!(i
            .rows
            .iter()
            .all(|r| !r.counts.is_empty() && r.counts.len() <= i.cpus.len()));
        let s = parse_softirqs(&root.read(SOFTIRQS).unwrap()).unwrap();
        assert_eq!(s.cpus, i.cpus);
        assert!(s.rows.iter().any(|r| r.name == "TIMER"));
        let st = parse_proc_stat(&root.read(STAT).unwrap()).unwrap();
        assert_eq!(st.cpus.keys().copied().collect::<Vec<_>>(), i.cpus);
        assert!(st.all.is_some());
        assert!(st.cpus.values().all(|t| t.fields >= 8 && t.total() > 0));
    }

    #[test]
    fn samples_this_machine() {
        let n = sample(&FsRoot::default(), Duration::from_millis(100));
        assert!(n.errors.is_empty(), "{:?}", n.errors);
        assert!(n.window_ms >= 100, "{}", n.window_ms);
        // Every online CPU (the rows of /proc/stat) has an entry; on this machine, 0 and 1.
        let online = parse_proc_stat(&FsRoot::default().read(STAT).unwrap())
            .unwrap()
            .cpus;
        assert_eq!(
            n.cpus.keys().collect::<Vec<_>>(),
            online.keys().collect::<Vec<_>>()
        );
        for cpu in [0, 1].into_iter().filter(|c| online.contains_key(c)) {
            let c = n
                .cpus
                .get(&cpu)
                .unwrap_or_else(|| panic!("no entry for CPU {cpu}"));
            assert!(c.ticks > 0, "CPU {cpu} accounted no time: {c:?}");
            assert!((0.0..=100.0).contains(&c.busy_pct));
            assert!((0.0..=100.0).contains(&c.steal_pct));
            assert!(c.rows.contains_key("LOC") || c.rows.keys().any(|k| k.starts_with("IPI")));
        }
    }

    /// Kills and reaps the child when dropped, whatever the test did (other modules' tests
    /// use it too).
    pub(crate) struct Spinner(pub(crate) std::process::Child);

    impl Drop for Spinner {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn busy_loop_makes_its_cpu_noisy() {
        let online = parse_proc_stat(&FsRoot::default().read(STAT).unwrap())
            .unwrap()
            .cpus;
        if !(online.contains_key(&0) && online.contains_key(&1)) {
            return; // needs CPUs 0 and 1 to compare
        }
        let child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("spawn sh");
        let spinner = Spinner(child);
        let mut set = nix::sched::CpuSet::new();
        set.set(0).unwrap();
        let pid = nix::unistd::Pid::from_raw(spinner.0.id() as i32);
        nix::sched::sched_setaffinity(pid, &set).expect("pin the busy loop to CPU 0");
        std::thread::sleep(Duration::from_millis(50));

        // Other work on this shared machine (parallel builds) may saturate CPU 1 too, and then
        // the two CPUs honestly tie on load. Every window must be consistent with the score's
        // promise (CPU 0 busy; CPU 0 above CPU 1 whenever CPU 1 is measurably less loaded);
        // a few windows give CPU 1 a chance to be quieter.
        let mut conclusive = 0;
        let mut last = String::new();
        for _ in 0..20 {
            let n = sample(&FsRoot::default(), Duration::from_millis(300));
            let (c0, c1) = (&n.cpus[&0], &n.cpus[&1]);
            let (s0, s1) = (c0.score(false, n.window_ms), c1.score(false, n.window_ms));
            last = format!("CPU 0: {c0:?} score {s0:?}; CPU 1: {c1:?} score {s1:?}");
            assert!(
                c0.busy_pct + c0.steal_pct > 50.0,
                "CPU 0 under a busy loop: {last}"
            );
            let quantum = 1000.0 / n.window_ms as f64;
            let (l0, l1) = (c0.busy_pct + c0.steal_pct, c1.busy_pct + c1.steal_pct);
            if l1 + 2.0 * quantum < l0 {
                assert!(c0.busy_pct > 50.0, "{last}");
                assert!(
                    s0.compare(&s1).is_gt(),
                    "CPU 0 must score above the less loaded CPU 1: {last}"
                );
                conclusive += 1;
                if conclusive >= 2 {
                    return;
                }
            }
        }
        if conclusive == 0 {
            eprintln!("busy_loop_makes_its_cpu_noisy: CPU 1 was saturated by other work in every window; last: {last}");
        }
    }
}
