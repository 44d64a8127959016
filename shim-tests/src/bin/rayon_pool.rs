//! rayon_pool: rayon sizes its global pool from `available_parallelism()`, which reads the
//! calling thread's affinity mask. Prints the pool size, then keeps every worker busy at once
//! (each spins until all have started, then does fixed work) and reports each worker's thread
//! from inside: `report role=worker id=<index> pid= tid= cpu=<sched_getcpu> allowed=<its
//! Cpus_allowed_list> pool=<current_num_threads>`, and the main thread as `role=main`.

use std::sync::atomic::{AtomicUsize, Ordering};

fn allowed() -> String {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn report(role: &str, id: usize, pool: usize) -> String {
    // SAFETY: getpid, gettid and sched_getcpu take no pointers.
    let (pid, tid, cpu) = unsafe { (libc::getpid(), libc::gettid(), libc::sched_getcpu()) };
    format!(
        "report role={role} id={id} pid={pid} tid={tid} cpu={cpu} allowed={} pool={pool}",
        allowed()
    )
}

fn busy() -> f64 {
    let mut x = 1.0f64;
    for i in 0..3_000_000u64 {
        x = x * 1.000_000_1 + 0.5 / (i + 1) as f64;
    }
    std::hint::black_box(x)
}

fn main() {
    let pool = rayon::current_num_threads();
    let started = AtomicUsize::new(0);
    let lines: Vec<String> = rayon::broadcast(|ctx| {
        // Every worker runs this once; none finishes before all have started, so no worker
        // runs two of them and all are busy together.
        started.fetch_add(1, Ordering::SeqCst);
        while started.load(Ordering::SeqCst) < ctx.num_threads() {
            std::hint::spin_loop();
        }
        busy();
        report("worker", ctx.index(), pool)
    });
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", report("main", 0, pool));
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
}
