//! Benchmark of the housekeeper's silence and cost (not a test: it measures, it does not judge).
//!
//! ```sh
//! cargo build --release --workspace
//! cargo run --release -p goset --example housekeeper_bench -- [--runs 5] [--secs 3] [--cpu 1]
//! ```
//!
//! 1. Silence: a busy task pinned on `--cpu` (`goset-run -n 1 --include CPU`), the housekeeper
//!    on another CPU polling every 10 ms, against the same run with polling off (an interval
//!    longer than the run: one poll at the start, then it sleeps on the task's pidfd). Runs
//!    alternate so that the machine's own drift hits both modes alike. Reported: the
//!    function-call (CAL), reschedule (RES), TLB-shootdown (TLB) and timer (LOC) interrupt rates
//!    of the task CPU, from goset-run's own `--json` telemetry.
//! 2. Cost: the launcher's CPU time per second of run while it follows a task of 64 threads
//!    (one busy, 63 asleep), at 100 ms and at 10 ms.
//!
//! The task is this program itself, re-run as `--task THREADS SECS`. goset-run is taken from
//! beside this example (`target/release/goset-run`) or from `$GOSET_RUN`.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn task(threads: usize, secs: f64) {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let sleepers: Vec<_> = (1..threads)
        .map(|_| std::thread::spawn(move || std::thread::sleep(end - Instant::now())))
        .collect();
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..100_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
    for s in sleepers {
        let _ = s.join();
    }
}

fn goset_run() -> PathBuf {
    if let Some(p) = std::env::var_os("GOSET_RUN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let p = dir.join("goset-run");
    assert!(
        p.is_file(),
        "{} not found: cargo build --release --workspace, or set GOSET_RUN",
        p.display()
    );
    p
}

/// One run; its `--json` report.
fn once(cpu: usize, interval_ms: u64, threads: usize, secs: f64) -> Value {
    let json = std::env::temp_dir().join(format!("goset-hk-bench-{}.json", std::process::id()));
    let status = Command::new(goset_run())
        .args(["-n", "1", "--sample", "0", "--quiet"])
        .args(["--include", &cpu.to_string()])
        .args(["--interval", &interval_ms.to_string()])
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--task", &threads.to_string(), &secs.to_string()])
        // The report is read from --json; the Errors table (no cpufreq on a VM) is noise here.
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run goset-run");
    assert!(
        status.status.success(),
        "goset-run failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    v
}

fn rate(v: &Value, row: &str) -> f64 {
    let t = &v["telemetry"];
    let n = t["cpus"][0]["rows"][row].as_f64().unwrap_or(f64::NAN);
    n / t["window_s"].as_f64().unwrap()
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len().max(2) - 1) as f64;
    (m, var.sqrt())
}

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--task") {
        task(args[i + 1].parse().unwrap(), args[i + 2].parse().unwrap());
        return;
    }
    let runs = arg(&args, "--runs", 5.0) as usize;
    let secs = arg(&args, "--secs", 3.0);
    let cpu = arg(&args, "--cpu", 1.0) as usize;
    const ROWS: [&str; 4] = ["CAL", "RES", "TLB", "LOC"];
    let modes = [("poll 10 ms", 10u64), ("no polling", 10_000_000)];
    let mut rates = vec![vec![Vec::new(); ROWS.len()]; modes.len()];
    let mut costs = vec![Vec::new(); modes.len()];
    for _ in 0..runs {
        for (m, &(_, interval)) in modes.iter().enumerate() {
            let v = once(cpu, interval, 1, secs);
            for (r, row) in ROWS.iter().enumerate() {
                rates[m][r].push(rate(&v, row));
            }
            costs[m].push(v["telemetry"]["housekeeper"]["cpu_pct"].as_f64().unwrap());
        }
    }
    println!("Silence: busy task on cpu {cpu}, {runs} alternating runs of {secs} s each");
    println!(
        "  {:>12}  {}  {:>12}",
        "mode",
        ROWS.map(|r| format!("{:>14}", format!("{r}/s"))).join(""),
        "hk cpu%"
    );
    for (m, (name, _)) in modes.iter().enumerate() {
        let cells: String = (0..ROWS.len())
            .map(|r| {
                let (mu, sd) = mean_sd(&rates[m][r]);
                format!("{:>14}", format!("{mu:.2}±{sd:.2}"))
            })
            .collect();
        println!("  {name:>12}  {cells}  {:>12.3}", mean_sd(&costs[m]).0);
    }
    println!("Cost: task of 64 threads (1 busy, 63 asleep) on cpu {cpu}");
    println!(
        "  {:>9}  {:>8}  {:>10}  {:>12}",
        "interval", "polls", "hk cpu%", "µs per poll"
    );
    for interval in [100u64, 10] {
        let mut pct = Vec::new();
        let mut per_poll = Vec::new();
        let mut polls = 0.0;
        for _ in 0..runs.max(1) {
            let v = once(cpu, interval, 64, secs);
            let hk = &v["telemetry"]["housekeeper"];
            let p = v["telemetry"]["polls"].as_f64().unwrap();
            pct.push(hk["cpu_pct"].as_f64().unwrap());
            per_poll.push(hk["cpu_s"].as_f64().unwrap() / p * 1e6);
            polls = p;
        }
        let (m, sd) = mean_sd(&pct);
        println!(
            "  {:>7}ms  {polls:>8}  {:>10}  {:>12.1}",
            interval,
            format!("{m:.3}±{sd:.3}"),
            mean_sd(&per_poll).0
        );
    }
}
