//! Per task CPU telemetry over the run: frequency, thermal throttling, interrupts, softirqs and
//! steal.
//!
//! Owns: the files read per CPU and what they add up to ([`summarise`] is pure). Must not:
//! read a file that makes the kernel interrupt a task CPU. What is read and why it is silent:
//! - `/proc/interrupts`, `/proc/softirqs`, `/proc/stat` (at the start and the end only: they are
//!   cumulative): per-CPU counters that the reading CPU sums from memory.
//! - `cpuN/cpufreq/scaling_cur_freq` (every poll, for min/avg/max), only where it is served
//!   from memory ([`freq_is_silent`]): on x86 from Linux 5.18, where `arch_freq_get_on_cpu()`
//!   uses the APERF/MPERF sample that CPU's own tick took (or the cpufreq policy's last
//!   frequency), and on other architectures, where it is the policy's last frequency. On x86
//!   kernels 4.13 to 5.17 `arch_freq_get_on_cpu()` sends the CPU an IPI
//!   (`smp_call_function_single`) whenever its sample is older than 10 ms, which at any poll
//!   interval of 10 ms or more is every poll: there it is not read at all, and the frequency
//!   is `n/a` with the reason in Errors (the kernel version comes from
//!   `/proc/sys/kernel/osrelease`; an unknown version counts as an old one).
//! - `cpuN/thermal_throttle/{core,package}_throttle_count` (start and end): counters the
//!   thermal interrupt handler keeps per CPU.
//!
//! Deliberately not read: `cpuinfo_cur_freq` (acpi-cpufreq answers it by reading an MSR on the
//! target CPU with `smp_call_function_single`, an IPI) and the `cpu MHz` of `/proc/cpuinfo`
//! (x86 kernels before 5.18 sent each CPU an IPI to sample APERF/MPERF; on a VM it is the
//! nominal TSC rate, not a measurement). Without cpufreq the frequency is `n/a`, with the
//! reason in Errors.

use crate::fsroot::{FsRoot, ReadError};
use crate::noise::{self, CpuNoise, Snapshot};
use std::collections::BTreeMap;

fn freq_path(cpu: usize) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
}

fn throttle_paths(cpu: usize) -> [String; 2] {
    let d = format!("/sys/devices/system/cpu/cpu{cpu}/thermal_throttle");
    [
        format!("{d}/core_throttle_count"),
        format!("{d}/package_throttle_count"),
    ]
}

/// `Ok` when `scaling_cur_freq` is served from memory on this kernel (`osrelease`: the text of
/// `/proc/sys/kernel/osrelease`) and architecture; else why it is not read.
pub fn freq_is_silent(x86: bool, osrelease: Option<&str>) -> Result<(), String> {
    if !x86 {
        return Ok(());
    }
    let version = osrelease.and_then(|r| {
        let mut it = r.trim().split(|c: char| !c.is_ascii_digit());
        Some((
            it.next()?.parse::<u32>().ok()?,
            it.next()?.parse::<u32>().ok()?,
        ))
    });
    let why = "on x86 kernels 4.13-5.17 reading it makes arch_freq_get_on_cpu() IPI a CPU \
        whose APERF/MPERF sample is older than 10 ms";
    match version {
        Some(v) if v >= (5, 18) => Ok(()),
        Some((major, minor)) => Err(format!("not read (kernel {major}.{minor}): {why}")),
        None => Err(format!("not read (kernel version unknown): {why}")),
    }
}

/// Frequency samples of one CPU, in kHz.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Freq {
    /// Lowest sample.
    pub min: Option<u64>,
    /// Highest sample.
    pub max: Option<u64>,
    /// Sum of samples, for the average.
    pub sum: u64,
    /// Number of samples.
    pub n: u64,
}

impl Freq {
    /// Adds a sample.
    pub fn add(&mut self, khz: u64) {
        self.min = Some(self.min.map_or(khz, |m| m.min(khz)));
        self.max = Some(self.max.map_or(khz, |m| m.max(khz)));
        self.sum += khz;
        self.n += 1;
    }

    /// The average, `None` without samples.
    pub fn avg(&self) -> Option<u64> {
        (self.n > 0).then(|| self.sum / self.n)
    }
}

/// One row of the Telemetry table (a task CPU, or `all`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuTelemetry {
    /// The CPU; `None` for the `all` row.
    pub cpu: Option<usize>,
    /// Lowest sampled frequency, kHz (`None`: no cpufreq).
    pub freq_min_khz: Option<u64>,
    /// Average sampled frequency, kHz.
    pub freq_avg_khz: Option<u64>,
    /// Highest sampled frequency, kHz.
    pub freq_max_khz: Option<u64>,
    /// Frequency samples taken.
    pub freq_samples: u64,
    /// Thermal throttle events during the run (core + package counters).
    pub throttle: Option<u64>,
    /// Steerable (device) interrupts during the run.
    pub irq_steerable: Option<u64>,
    /// Non-steerable interrupts during the run.
    pub irq_nonsteerable: Option<u64>,
    /// Softirqs during the run.
    pub softirq: Option<u64>,
    /// Share of the run stolen by the hypervisor, percent.
    pub steal_pct: Option<f64>,
    /// Each non-steerable row (`LOC`, `RES`, `CAL`, `TLB`, ...) during the run.
    pub rows: BTreeMap<String, u64>,
}

/// Reads the per-CPU files for the task CPUs.
#[derive(Debug)]
pub struct CpuSampler {
    root: FsRoot,
    cpus: Vec<usize>,
    before: Snapshot,
    throttle_before: BTreeMap<usize, Option<u64>>,
    freq: BTreeMap<usize, Freq>,
    /// CPUs whose `scaling_cur_freq` could not be read or must not be (not sampled again).
    freq_failed: BTreeMap<usize, String>,
}

fn read_u64(root: &FsRoot, path: &str) -> Result<u64, ReadError> {
    let text = root.read(path)?;
    text.trim().parse().map_err(|_| ReadError {
        file: path.to_string(),
        reason: format!("unparsable: {:?}", text.trim()),
    })
}

fn throttle(root: &FsRoot, cpu: usize) -> Option<u64> {
    let [core, package] = throttle_paths(cpu);
    let core = read_u64(root, &core).ok()?;
    // Package counters exist only where the package has a thermal sensor.
    Some(core + read_u64(root, &package).unwrap_or(0))
}

impl CpuSampler {
    /// Starts from `before`, the run's opening snapshot, for `cpus`.
    pub fn start(root: &FsRoot, cpus: &[usize], before: Snapshot) -> CpuSampler {
        let x86 = cfg!(any(target_arch = "x86", target_arch = "x86_64"));
        let release = root.read("/proc/sys/kernel/osrelease").ok();
        let mut freq_failed = BTreeMap::new();
        if let Err(why) = freq_is_silent(x86, release.as_deref()) {
            // Existence is a path walk, not a read: the CPU is not asked.
            for &cpu in cpus {
                let reason = if root.exists(&freq_path(cpu)) {
                    why.clone()
                } else {
                    "missing".to_string()
                };
                freq_failed.insert(cpu, reason);
            }
        }
        CpuSampler {
            root: root.clone(),
            cpus: cpus.to_vec(),
            before,
            throttle_before: cpus.iter().map(|&c| (c, throttle(root, c))).collect(),
            freq: BTreeMap::new(),
            freq_failed,
        }
    }

    /// The snapshot the sampler started from.
    pub fn opening(&self) -> &Snapshot {
        &self.before
    }

    /// One poll: a frequency sample of every task CPU that has cpufreq.
    pub fn poll(&mut self) {
        for &cpu in &self.cpus {
            if self.freq_failed.contains_key(&cpu) {
                continue;
            }
            match read_u64(&self.root, &freq_path(cpu)) {
                Ok(khz) => self.freq.entry(cpu).or_default().add(khz),
                Err(e) => {
                    self.freq_failed.insert(cpu, e.reason);
                }
            }
        }
    }

    /// Ends at `after`, the run's closing snapshot: one row per task CPU, the `all` row, and
    /// the errors.
    pub fn finish(self, after: &Snapshot) -> (Vec<CpuTelemetry>, CpuTelemetry, Vec<ReadError>) {
        let noise = noise::delta_for(&self.before, after, &self.cpus);
        let mut errors: Vec<ReadError> = Vec::new();
        for e in self.before.errors.iter().chain(&after.errors) {
            if !errors.contains(e) {
                errors.push(e.clone());
            }
        }
        let ok = |file: &str| !errors.iter().any(|e| e.file == file);
        let have = Have {
            irqs: ok(noise::INTERRUPTS),
            softirqs: ok(noise::SOFTIRQS),
            stat: ok(noise::STAT),
        };
        let throttle_after: BTreeMap<usize, Option<u64>> = self
            .cpus
            .iter()
            .map(|&c| (c, throttle(&self.root, c)))
            .collect();
        let rows: Vec<CpuTelemetry> = self
            .cpus
            .iter()
            .map(|&cpu| {
                let t = match (self.throttle_before[&cpu], throttle_after[&cpu]) {
                    (Some(b), Some(a)) => Some(a.saturating_sub(b)),
                    _ => None,
                };
                row(cpu, noise.get(&cpu), self.freq.get(&cpu), t, &have)
            })
            .collect();
        group_error(&mut errors, &self.freq_failed, "cpufreq/scaling_cur_freq",
            "no cpufreq driver (a VM has none); cpuinfo_cur_freq and /proc/cpuinfo are not read: they can IPI the task CPUs");
        let no_throttle: BTreeMap<usize, String> = self
            .cpus
            .iter()
            .filter(|c| throttle_after[c].is_none())
            .map(|&c| (c, "missing".to_string()))
            .collect();
        group_error(
            &mut errors,
            &no_throttle,
            "thermal_throttle/core_throttle_count",
            "no x86 thermal throttle driver (a VM has none)",
        );
        let all = summarise(&rows);
        (rows, all, errors)
    }
}

/// Which cumulative files were read at both ends.
struct Have {
    irqs: bool,
    softirqs: bool,
    stat: bool,
}

fn row(
    cpu: usize,
    n: Option<&CpuNoise>,
    f: Option<&Freq>,
    throttle: Option<u64>,
    have: &Have,
) -> CpuTelemetry {
    CpuTelemetry {
        cpu: Some(cpu),
        freq_min_khz: f.and_then(|f| f.min),
        freq_avg_khz: f.and_then(Freq::avg),
        freq_max_khz: f.and_then(|f| f.max),
        freq_samples: f.map_or(0, |f| f.n),
        throttle,
        irq_steerable: n.filter(|_| have.irqs).map(|n| n.irq_steerable),
        irq_nonsteerable: n.filter(|_| have.irqs).map(|n| n.irq_nonsteerable),
        softirq: n.filter(|_| have.softirqs).map(|n| n.softirq),
        steal_pct: n.filter(|_| have.stat).map(|n| n.steal_pct),
        rows: n.map(|n| n.rows.clone()).unwrap_or_default(),
    }
}

/// One error line for a per-CPU file that failed on some CPUs: the CPUs and the reason.
fn group_error(
    errors: &mut Vec<ReadError>,
    failed: &BTreeMap<usize, String>,
    file: &str,
    why_missing: &str,
) {
    let mut by_reason: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (cpu, reason) in failed {
        by_reason.entry(reason).or_default().push(cpu.to_string());
    }
    for (reason, cpus) in by_reason {
        let cpus = cpus.join(",");
        let reason = match reason.split_once(": ") {
            _ if reason == "missing" => format!("missing on cpus {cpus}: {why_missing}"),
            Some((what, why)) => format!("{what} on cpus {cpus}: {why}"),
            None => format!("{reason} on cpus {cpus}"),
        };
        errors.push(ReadError {
            file: format!("/sys/devices/system/cpu/cpuN/{file}"),
            reason,
        });
    }
}

fn sum(rows: &[CpuTelemetry], f: impl Fn(&CpuTelemetry) -> Option<u64>) -> Option<u64> {
    // A sum over CPUs of which one is unmeasured is not a measurement either.
    rows.iter()
        .map(&f)
        .sum::<Option<u64>>()
        .filter(|_| !rows.is_empty())
}

/// The `all` row: counts summed over the task CPUs, frequency min of mins / average of all
/// samples / max of maxes, steal averaged. A column is `None` if any CPU's is.
pub fn summarise(rows: &[CpuTelemetry]) -> CpuTelemetry {
    let samples: u64 = rows.iter().map(|r| r.freq_samples).sum();
    let weighted: u64 = rows
        .iter()
        .filter_map(|r| Some(r.freq_avg_khz? * r.freq_samples))
        .sum();
    let mut all_rows: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows {
        for (k, v) in &r.rows {
            *all_rows.entry(k.clone()).or_default() += v;
        }
    }
    let steal: Option<Vec<f64>> = rows.iter().map(|r| r.steal_pct).collect();
    CpuTelemetry {
        cpu: None,
        freq_min_khz: rows.iter().filter_map(|r| r.freq_min_khz).min(),
        freq_avg_khz: (samples > 0).then(|| weighted / samples),
        freq_max_khz: rows.iter().filter_map(|r| r.freq_max_khz).max(),
        freq_samples: samples,
        throttle: sum(rows, |r| r.throttle),
        irq_steerable: sum(rows, |r| r.irq_steerable),
        irq_nonsteerable: sum(rows, |r| r.irq_nonsteerable),
        softirq: sum(rows, |r| r.softirq),
        steal_pct: steal
            .filter(|s| !s.is_empty())
            .map(|s| s.iter().sum::<f64>() / s.len() as f64),
        rows: all_rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cpu: usize, freq: Option<(u64, u64, u64, u64)>, irq: Option<u64>) -> CpuTelemetry {
        CpuTelemetry {
            cpu: Some(cpu),
            freq_min_khz: freq.map(|f| f.0),
            freq_avg_khz: freq.map(|f| f.1),
            freq_max_khz: freq.map(|f| f.2),
            freq_samples: freq.map_or(0, |f| f.3),
            throttle: Some(1),
            irq_steerable: irq,
            irq_nonsteerable: Some(10),
            softirq: Some(5),
            steal_pct: Some(2.0),
            rows: [("CAL".to_string(), 3)].into(),
        }
    }

    #[test]
    fn all_row_sums_counts_and_weights_frequency() {
        let all = summarise(&[
            r(1, Some((1000, 2000, 3000, 1)), Some(4)),
            r(2, Some((1500, 1500, 1500, 3)), Some(6)),
        ]);
        assert_eq!(
            (all.freq_min_khz, all.freq_avg_khz, all.freq_max_khz),
            (Some(1000), Some(1625), Some(3000))
        );
        assert_eq!(
            (all.irq_steerable, all.throttle, all.softirq),
            (Some(10), Some(2), Some(10))
        );
        assert_eq!((all.steal_pct, all.rows["CAL"]), (Some(2.0), 6));
        // One unmeasured CPU makes the sum unmeasured, never a smaller number.
        let all = summarise(&[r(1, None, Some(4)), r(2, None, None)]);
        assert_eq!(
            (all.irq_steerable, all.freq_avg_khz, all.freq_min_khz),
            (None, None, None)
        );
    }

    #[test]
    fn freq_accumulates() {
        let mut f = Freq::default();
        assert_eq!(f.avg(), None);
        for k in [3, 1, 2] {
            f.add(k);
        }
        assert_eq!((f.min, f.avg(), f.max, f.n), (Some(1), Some(2), Some(3), 3));
    }

    #[test]
    fn missing_sysfs_is_na_with_one_error_line_each() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(
            dir.path().join("proc/stat"),
            "cpu 1 0 1 10\ncpu0 1 0 1 10\ncpu1 1 0 1 10 0 0 0 5\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(
            dir.path().join("proc/sys/kernel/osrelease"),
            "6.1.0-18-amd64\n",
        )
        .unwrap();
        let root = FsRoot::new(dir.path());
        let khz = dir.path().join("sys/devices/system/cpu/cpu1/cpufreq");
        std::fs::create_dir_all(&khz).unwrap();
        std::fs::write(khz.join("scaling_cur_freq"), "2400000\n").unwrap();
        let mut s = CpuSampler::start(&root, &[0, 1], Snapshot::read(&root));
        s.poll();
        s.poll();
        let (rows, all, errors) = s.finish(&Snapshot::read(&root));
        assert_eq!(rows[0].freq_avg_khz, None);
        assert_eq!(
            (rows[1].freq_avg_khz, rows[1].freq_samples),
            (Some(2_400_000), 2)
        );
        assert_eq!(
            (rows[0].irq_nonsteerable, rows[0].steal_pct),
            (None, Some(0.0))
        );
        assert_eq!((rows[0].throttle, all.throttle), (None, None));
        let files: Vec<&str> = errors.iter().map(|e| e.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "/proc/interrupts",
                "/proc/softirqs",
                "/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq",
                "/sys/devices/system/cpu/cpuN/thermal_throttle/core_throttle_count"
            ]
        );
        assert!(
            errors[2].reason.starts_with("missing on cpus 0:"),
            "{}",
            errors[2].reason
        );
        assert!(
            errors[3].reason.starts_with("missing on cpus 0,1:"),
            "{}",
            errors[3].reason
        );
    }

    #[test]
    fn scaling_cur_freq_is_read_only_where_it_sends_no_ipi() {
        assert_eq!(freq_is_silent(true, Some("5.18.0\n")), Ok(()));
        assert_eq!(freq_is_silent(true, Some("6.18.44-fc-v1045")), Ok(()));
        assert_eq!(freq_is_silent(false, Some("4.19.0")), Ok(()));
        assert_eq!(freq_is_silent(false, None), Ok(()));
        for (old, v) in [
            ("5.17.15", "5.17"),
            ("5.10.0-23-amd64", "5.10"),
            ("4.13.0", "4.13"),
            ("4.9.0", "4.9"),
        ] {
            let e = freq_is_silent(true, Some(old)).unwrap_err();
            assert!(
                e.starts_with(&format!("not read (kernel {v}): on x86")),
                "{e}"
            );
        }
        assert!(freq_is_silent(true, Some("garbage")).is_err());
        assert!(freq_is_silent(true, None).is_err());
    }

    #[test]
    fn an_old_x86_kernel_leaves_frequency_unread() {
        if !cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
            return;
        }
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(
            dir.path().join("proc/sys/kernel/osrelease"),
            "5.10.0-23-amd64\n",
        )
        .unwrap();
        let khz = dir.path().join("sys/devices/system/cpu/cpu1/cpufreq");
        std::fs::create_dir_all(&khz).unwrap();
        std::fs::write(khz.join("scaling_cur_freq"), "2400000\n").unwrap();
        let root = FsRoot::new(dir.path());
        let mut s = CpuSampler::start(&root, &[0, 1], Snapshot::read(&root));
        s.poll();
        let (rows, _, errors) = s.finish(&Snapshot::read(&root));
        assert_eq!((rows[1].freq_avg_khz, rows[1].freq_samples), (None, 0));
        let freq: Vec<&str> = errors
            .iter()
            .filter(|e| e.file.ends_with("scaling_cur_freq"))
            .map(|e| e.reason.as_str())
            .collect();
        assert_eq!(freq.len(), 2, "{errors:?}");
        assert!(freq[0].starts_with("missing on cpus 0:"), "{freq:?}");
        assert!(
            freq[1].starts_with("not read (kernel 5.10) on cpus 1: on x86"),
            "{freq:?}"
        );
    }
}
