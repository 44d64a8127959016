//! The built-in benchmarks, run as a command of their own (`goset-bench --worker NAME`) so that
//! every mode starts them as it would start any program: bare, under a taskset mask, or under
//! goset-run with the shim placing each worker thread.
//!
//! Owns: the kernels and their one output line, `NAME: VALUE UNIT` (the experiment's metric),
//! then one `NAME worker I: VALUE UNIT` line per worker when there are several. With `threads`
//! workers the main thread is one of them, so that `-n N` means N busy threads.
//!
//! The work is fixed, never timed: every run does the same, and its time is the measurement.

use crate::cache::Caches;
use std::hint::black_box;
use std::time::Instant;

/// A built-in benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// A dependent xorshift-multiply chain: ms per iteration (time lost to interrupts and
    /// preemption).
    Jitter,
    /// Pointer chasing over a ring that fits the L2 cache: ns per load (migration, cache
    /// pollution).
    Chase,
    /// 32x32 double matrix multiply: MFLOP/s (frequency, sibling interference).
    Matmul,
    /// STREAM triad over arrays four times the last-level cache: MB/s.
    Stream,
}

impl Builtin {
    /// Every built-in benchmark.
    pub const ALL: [Builtin; 4] = [
        Builtin::Jitter,
        Builtin::Chase,
        Builtin::Matmul,
        Builtin::Stream,
    ];

    /// Its name in `--bench` and in its output line.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Jitter => "jitter",
            Builtin::Chase => "chase",
            Builtin::Matmul => "matmul",
            Builtin::Stream => "stream",
        }
    }

    /// The benchmark named `name`.
    pub fn parse(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The unit of its metric.
    pub fn unit(self) -> &'static str {
        match self {
            Builtin::Jitter => "ms/iter",
            Builtin::Chase => "ns/load",
            Builtin::Matmul => "MFLOP/s",
            Builtin::Stream => "MB/s",
        }
    }

    /// Whether its workers' results add up (throughputs) rather than average (times).
    fn sums(self) -> bool {
        matches!(self, Builtin::Matmul | Builtin::Stream)
    }
}

/// The sizes a run works on, from the machine's caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Bytes of the chase ring: 3/8 of L2 (192 KiB of a 512 KiB L2), 192 KiB when unknown.
    pub ring_bytes: usize,
    /// Elements of each stream array: four times the last-level cache in doubles, at least
    /// 2 Mi (16 MiB), 4 Mi when unknown.
    pub stream_elements: usize,
}

impl Sizes {
    /// The sizes for `caches`.
    pub fn for_caches(caches: Caches) -> Sizes {
        let ring_bytes = caches.l2.map_or(192 << 10, |l2| (l2 as usize) * 3 / 8);
        let stream_elements = caches
            .last
            .map_or(4 << 20, |llc| (4 * llc as usize / 8).max(2 << 20));
        Sizes {
            ring_bytes: ring_bytes.max(4096),
            stream_elements,
        }
    }
}

/// Runs `bench` on `threads` workers and returns its output lines.
pub fn run(bench: Builtin, threads: usize, sizes: Sizes) -> Vec<String> {
    let threads = threads.max(1);
    let work = move |worker: usize| match bench {
        Builtin::Jitter => jitter(),
        Builtin::Chase => chase(sizes.ring_bytes),
        Builtin::Matmul => matmul(),
        Builtin::Stream => stream(sizes.stream_elements / threads, worker),
    };
    let others: Vec<_> = (1..threads)
        .map(|w| std::thread::spawn(move || work(w)))
        .collect();
    let mut results = vec![work(0)];
    results.extend(others.into_iter().map(|h| h.join().expect("worker")));
    let total: f64 = results.iter().sum();
    let headline = if bench.sums() {
        total
    } else {
        total / threads as f64
    };
    let mut lines = vec![format!(
        "{}: {:.4} {}",
        bench.name(),
        headline,
        bench.unit()
    )];
    if threads > 1 {
        for (i, r) in results.iter().enumerate() {
            lines.push(format!(
                "{} worker {i}: {r:.4} {}",
                bench.name(),
                bench.unit()
            ));
        }
    }
    lines
}

/// Milliseconds per iteration of a dependent xorshift-multiply chain.
fn jitter() -> f64 {
    const ITERATIONS: u32 = 100;
    const STEPS: u32 = 1_000_000;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let start = Instant::now();
    for _ in 0..ITERATIONS {
        for _ in 0..STEPS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        }
        x = black_box(x);
    }
    start.elapsed().as_secs_f64() * 1e3 / f64::from(ITERATIONS)
}

/// One cache line of the chase ring: the index of the next line.
#[repr(align(64))]
#[derive(Clone, Copy)]
struct Line {
    next: usize,
}

/// Nanoseconds per dependent load around a ring of `bytes` in a random cyclic order (the same
/// order every run).
fn chase(bytes: usize) -> f64 {
    const LOADS: usize = 50_000_000;
    let lines = (bytes / std::mem::size_of::<Line>()).max(2);
    let mut order: Vec<usize> = (1..lines).collect();
    fastrand::Rng::with_seed(1).shuffle(&mut order);
    let mut ring = vec![Line { next: 0 }; lines];
    let mut at = 0;
    for &n in &order {
        ring[at].next = n;
        at = n;
    }
    ring[at].next = 0;
    let mut p = 0;
    for _ in 0..lines {
        p = ring[p].next;
    }
    let start = Instant::now();
    for _ in 0..LOADS {
        p = ring[p].next;
    }
    black_box(p);
    start.elapsed().as_secs_f64() * 1e9 / LOADS as f64
}

/// MFLOP/s of repeated 32x32 double matrix multiplies.
fn matmul() -> f64 {
    const N: usize = 32;
    const REPEATS: usize = 20_000;
    let a: Vec<f64> = (0..N * N).map(|i| (i % 7) as f64 * 0.5).collect();
    let b: Vec<f64> = (0..N * N).map(|i| (i % 5) as f64 * 0.25).collect();
    let mut c = vec![0.0f64; N * N];
    let start = Instant::now();
    for _ in 0..REPEATS {
        let a = black_box(&a);
        for i in 0..N {
            for k in 0..N {
                let aik = a[i * N + k];
                for j in 0..N {
                    c[i * N + j] += aik * b[k * N + j];
                }
            }
        }
        black_box(&mut c);
    }
    let flops = 2.0 * (N * N * N) as f64 * REPEATS as f64;
    flops / start.elapsed().as_secs_f64() / 1e6
}

/// MB/s of the STREAM triad `a = b + s * c` over `elements` doubles per array.
fn stream(elements: usize, worker: usize) -> f64 {
    const PASSES: usize = 10;
    let n = elements.max(1 << 16);
    let b = vec![1.0f64 + worker as f64; n];
    let c = vec![2.0f64; n];
    let mut a = vec![0.0f64; n];
    let s = black_box(3.0);
    // One pass first: the pages are touched before the clock starts.
    for ((x, y), z) in a.iter_mut().zip(&b).zip(&c) {
        *x = y + s * z;
    }
    let start = Instant::now();
    for _ in 0..PASSES {
        for ((x, y), z) in a.iter_mut().zip(&b).zip(&c) {
            *x = y + s * z;
        }
        black_box(&mut a);
    }
    let bytes = 3.0 * 8.0 * n as f64 * PASSES as f64;
    bytes / start.elapsed().as_secs_f64() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_caches() {
        let s = Sizes::for_caches(Caches {
            l2: Some(512 << 10),
            last: Some(32 << 20),
        });
        assert_eq!(s.ring_bytes, 192 << 10);
        assert_eq!(s.stream_elements, 16 << 20);
        let s = Sizes::for_caches(Caches {
            l2: None,
            last: None,
        });
        assert_eq!((s.ring_bytes, s.stream_elements), (192 << 10, 4 << 20));
    }

    #[test]
    fn a_run_prints_the_headline_then_each_worker() {
        let sizes = Sizes {
            ring_bytes: 8192,
            stream_elements: 1 << 16,
        };
        let lines = run(Builtin::Matmul, 2, sizes);
        assert_eq!(lines.len(), 3, "{lines:?}");
        let value =
            |l: &str| -> f64 { l.split_whitespace().rev().nth(1).unwrap().parse().unwrap() };
        assert!(lines[0].starts_with("matmul: ") && lines[0].ends_with(" MFLOP/s"));
        let sum = value(&lines[1]) + value(&lines[2]);
        assert!(
            (value(&lines[0]) - sum).abs() < 1e-3 * sum.max(1.0),
            "{lines:?}"
        );
        assert_eq!(run(Builtin::Stream, 1, sizes).len(), 1);
    }
}
