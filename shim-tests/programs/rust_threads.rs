//! rust_threads WORKERS: the main thread and WORKERS `std::thread`s, all alive together, each
//! reporting its CPU and allowed list from inside (the same line format as report.h).
use std::io::Write;
use std::sync::{Arc, Barrier};

extern "C" {
    fn sched_getcpu() -> i32;
    fn gettid() -> i32;
}

fn busy_work() -> f64 {
    let mut x = 1.0f64;
    for i in 0..3_000_000u64 {
        x = std::hint::black_box(x * 1.000_000_1 + 0.5 / (i + 1) as f64);
    }
    x
}

fn report(role: &str, id: usize) {
    busy_work();
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map_or("?", str::trim);
    // SAFETY: both are plain glibc calls without arguments.
    let (cpu, tid) = unsafe { (sched_getcpu(), gettid()) };
    let line = format!(
        "report role={role} id={id} pid={} tid={tid} cpu={cpu} allowed={allowed}\n",
        std::process::id()
    );
    // One write per line, so that lines of different threads do not interleave.
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
}

fn main() {
    let workers: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let all_alive = Arc::new(Barrier::new(workers + 1));
    let all_reported = Arc::new(Barrier::new(workers + 1));
    let handles: Vec<_> = (0..workers)
        .map(|id| {
            let (alive, reported) = (all_alive.clone(), all_reported.clone());
            std::thread::spawn(move || {
                busy_work();
                alive.wait();
                report("worker", id);
                reported.wait();
            })
        })
        .collect();
    all_alive.wait();
    report("main", 0);
    all_reported.wait();
    for h in handles {
        h.join().expect("worker panicked");
    }
}
