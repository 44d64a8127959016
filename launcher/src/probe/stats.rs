//! What a probe thread's detours come to: a bounded histogram of their lengths, and the per-CPU
//! result ([`CpuProbe`]) made from it.
//!
//! Owns: [`Detours`] (count, lost time, longest, and a log-linear histogram of fixed size, so a
//! storm of detours costs no memory), its percentiles, [`CpuProbe`] and the ranking of CPUs by
//! lost time. Must not: read clocks, start threads or print (`run.rs` measures, `goset probe`
//! prints).

use serde::Serialize;

/// Sub-buckets per power of two, as a power of two: 8 buckets an octave, so a percentile is
/// given to within 12.5% of its value (HdrHistogram's idea at a precision a detour needs).
const SUB_LOG2: u32 = 3;
const SUB: usize = 1 << SUB_LOG2;
/// Buckets for every `u64`: the first [`SUB`] values exactly, then [`SUB`] an octave up to
/// 2^64.
const BUCKETS: usize = (64 - SUB_LOG2 as usize + 1) * SUB;

/// The detours one probe thread saw: gaps between two clock readings over the threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detours {
    /// How many.
    pub count: u64,
    /// Their total length in ns.
    pub lost_ns: u64,
    /// The longest, in ns.
    pub longest_ns: u64,
    /// How many fell in each bucket ([`bucket`]).
    buckets: Box<[u64; BUCKETS]>,
}

impl Default for Detours {
    fn default() -> Self {
        Detours {
            count: 0,
            lost_ns: 0,
            longest_ns: 0,
            buckets: Box::new([0; BUCKETS]),
        }
    }
}

/// The bucket of a length: exact below [`SUB`], else its octave and its top [`SUB_LOG2`]
/// bits after the leading one.
fn bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let octave = 63 - ns.leading_zeros();
    let mantissa = (ns >> (octave - SUB_LOG2)) as usize & (SUB - 1);
    (octave - SUB_LOG2 + 1) as usize * SUB + mantissa
}

/// The largest length that falls in bucket `i`.
fn bucket_top(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let octave = (i / SUB) as u32 + SUB_LOG2 - 1;
    let low = ((SUB + i % SUB) as u64) << (octave - SUB_LOG2);
    low.saturating_add((1u64 << (octave - SUB_LOG2)) - 1)
}

impl Detours {
    /// Counts one detour of `ns`.
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        self.lost_ns = self.lost_ns.saturating_add(ns);
        self.longest_ns = self.longest_ns.max(ns);
        self.buckets[bucket(ns)] += 1;
    }

    /// The length at or below which a fraction `q` (0-1) of the detours fall: the top of the
    /// bucket holding the `ceil(q × count)`-th shortest, never above the longest; 0 with none.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_top(i).min(self.longest_ns);
            }
        }
        self.longest_ns
    }
}

/// One CPU's probe: what a thread that wanted all of it lost, and to detours of which lengths.
/// Plain data, for the ranking, the report and a noise record to absorb.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuProbe {
    /// The CPU.
    pub cpu: usize,
    /// How long the thread measured, in ns (its busy rounds, not the rests between them).
    pub duration_ns: u64,
    /// Time lost to detours, in ns.
    pub lost_ns: u64,
    /// Detours over the threshold.
    pub count: u64,
    /// The longest detour, in ns.
    pub longest_ns: u64,
    /// The median detour, in ns (to within 12.5%).
    pub p50_ns: u64,
    /// The 99th percentile of detours, in ns (to within 12.5%).
    pub p99_ns: u64,
    /// The thread ran SCHED_FIFO (it saw what preempts a real-time thread); else normal
    /// priority (other tasks' share of the CPU counts as detours too).
    pub fifo: bool,
}

impl CpuProbe {
    /// The result of `detours` seen over `duration_ns` on `cpu`.
    pub fn new(cpu: usize, duration_ns: u64, detours: &Detours, fifo: bool) -> Self {
        CpuProbe {
            cpu,
            duration_ns,
            lost_ns: detours.lost_ns.min(duration_ns),
            count: detours.count,
            longest_ns: detours.longest_ns,
            p50_ns: detours.quantile(0.5),
            p99_ns: detours.quantile(0.99),
            fifo,
        }
    }

    /// Lost time in percent of the time measured (0 when nothing was measured).
    pub fn lost_pct(&self) -> f64 {
        if self.duration_ns == 0 {
            return 0.0;
        }
        100.0 * self.lost_ns as f64 / self.duration_ns as f64
    }
}

/// The CPUs of `probes`, quietest first: least time lost, then the shorter longest detour,
/// then the lower number.
pub fn ranking(probes: &[CpuProbe]) -> Vec<usize> {
    let mut order: Vec<&CpuProbe> = probes.iter().collect();
    order.sort_by(|a, b| {
        (a.lost_pct().total_cmp(&b.lost_pct()))
            .then(a.longest_ns.cmp(&b.longest_ns))
            .then(a.cpu.cmp(&b.cpu))
    });
    order.iter().map(|p| p.cpu).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_length_in_order_within_an_eighth() {
        let mut last = 0;
        for ns in (0..5000u64).chain([1 << 20, 123_456_789, u64::MAX / 3, u64::MAX]) {
            let b = bucket(ns);
            assert!(b < BUCKETS, "{ns}");
            assert!(b >= last, "{ns}: bucket order");
            last = b;
            let top = bucket_top(b);
            assert!(top >= ns, "{ns} above its bucket's top {top}");
            assert!(
                (top - ns) as f64 <= ns as f64 / SUB as f64,
                "{ns}: top {top} more than an eighth above"
            );
            if b > 0 {
                assert!(bucket_top(b - 1) < ns, "{ns}: the previous bucket holds it");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_top(BUCKETS - 1), u64::MAX);
    }

    #[test]
    fn percentiles_lost_time_and_longest_of_known_detours() {
        let mut d = Detours::default();
        assert_eq!((d.quantile(0.5), d.quantile(0.99)), (0, 0));
        // 98 timer ticks of ~6 µs, one 100 µs softirq, one 2 ms preemption.
        for _ in 0..98 {
            d.record(6_000);
        }
        d.record(100_000);
        d.record(2_000_000);
        assert_eq!(d.count, 100);
        assert_eq!(d.lost_ns, 98 * 6_000 + 100_000 + 2_000_000);
        assert_eq!(d.longest_ns, 2_000_000);
        let p50 = d.quantile(0.5);
        assert!((6_000..=6_750).contains(&p50), "{p50}");
        let p99 = d.quantile(0.99);
        assert!((100_000..=112_500).contains(&p99), "{p99}");
        assert_eq!(d.quantile(1.0), 2_000_000, "never above the longest");

        let p = CpuProbe::new(3, 100_000_000, &d, true);
        assert!((p.lost_pct() - 2.688).abs() < 1e-9, "{}", p.lost_pct());
        assert_eq!((p.cpu, p.count, p.p50_ns, p.p99_ns), (3, 100, p50, p99));
    }

    #[test]
    fn a_storm_costs_no_memory_and_lost_time_is_capped_by_the_window() {
        let mut d = Detours::default();
        for i in 0..1_000_000u64 {
            d.record(5_000 + i % 1000);
        }
        assert_eq!(d.count, 1_000_000);
        let p = CpuProbe::new(0, 1_000_000, &d, false);
        assert_eq!(p.lost_ns, 1_000_000, "lost time never exceeds the window");
        assert_eq!(p.lost_pct(), 100.0);
        assert_eq!(CpuProbe::new(0, 0, &d, false).lost_pct(), 0.0);
    }

    #[test]
    fn ranking_puts_the_cpu_that_lost_most_last() {
        let mut quiet = Detours::default();
        quiet.record(8_000);
        let mut noisy = Detours::default();
        for _ in 0..100 {
            noisy.record(100_000);
        }
        let probes = [
            CpuProbe::new(0, 100_000_000, &noisy, true),
            CpuProbe::new(1, 100_000_000, &quiet, true),
            CpuProbe::new(2, 100_000_000, &Detours::default(), true),
            CpuProbe::new(3, 100_000_000, &quiet, true),
        ];
        assert_eq!(ranking(&probes), [2, 1, 3, 0]);
    }
}
