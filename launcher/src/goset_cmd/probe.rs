//! `goset probe`: the detour probe on this machine's CPUs, ranked quietest first, each CPU's
//! noise named under the table ([`crate::explain`]), on stderr and with `--json FILE` as JSON.
//!
//! Must not: measure (that is [`crate::probe`]) or select.

use super::print_json;
use crate::error::{Error, Result};
use crate::explain::{self, CpuExplanation, Reading};
use crate::fsroot::FsRoot;
use crate::probe::{self, CpuProbe, Probe};
use crate::report::table::Table;
use crate::report::telemetry::duration;
use crate::topology::expr::CpuExpr;
use crate::topology::Topology;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The longest threshold accepted, in µs: a gap of a millisecond is a scheduling question,
/// not a detour.
pub const MAX_THRESHOLD_US: u64 = 1000;

/// `goset probe`'s arguments, as clap gives them.
pub struct ProbeArgs<'a> {
    /// Busy time of each probe thread, in ms.
    pub ms: u64,
    /// The CPUs to probe (default: every online CPU this process may use).
    pub cpus: &'a Option<String>,
    /// The detour threshold in µs.
    pub threshold_us: u64,
    /// Where the JSON goes.
    pub json: &'a Option<PathBuf>,
}

/// What `--json` writes: the probe and its ranking.
#[derive(Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    probe: &'a Probe,
    /// The policy the threads ran under (`SCHED_FIFO`, `normal`, `mixed`).
    policy: &'static str,
    /// The CPUs probed, quietest first.
    ranking: Vec<usize>,
    /// Each probed CPU's sources by name over the probe, in ranking order.
    explained: Vec<CpuExplanation>,
}

/// `goset probe [--ms MS] [--cpus LIST] [--threshold-us US] [--json FILE]`.
pub fn run(args: &ProbeArgs) -> Result<()> {
    if args.ms == 0 || args.ms > probe::MAX_MS {
        return Err(Error::Usage(format!(
            "--ms {}: expected 1 to {} (ms of busy time on every CPU probed)",
            args.ms,
            probe::MAX_MS
        )));
    }
    if args.threshold_us == 0 || args.threshold_us > MAX_THRESHOLD_US {
        return Err(Error::Usage(format!(
            "--threshold-us {}: expected 1 to {MAX_THRESHOLD_US}",
            args.threshold_us
        )));
    }
    let cpus = cpus_to_probe(args.cpus)?;
    let root = FsRoot::default();
    let me = Some(std::process::id());
    let before = Reading::read(&root, me);
    let started = Instant::now();
    let probe = probe::run(
        &cpus,
        Duration::from_millis(args.ms),
        Duration::from_micros(args.threshold_us),
    );
    let why = explain::explain(&before, &Reading::read(&root, me), started.elapsed());
    if probe.cpus.is_empty() {
        let why: Vec<String> = (probe.failed.iter())
            .map(|(c, e)| format!("CPU {c}: {e}"))
            .collect();
        return Err(Error::System(format!(
            "no CPU could be probed: {}",
            why.join("; ")
        )));
    }
    let ranking = probe::ranking(&probe.cpus);
    let explained: Vec<CpuExplanation> = (ranking.iter())
        .filter_map(|c| why.get(c).cloned())
        .collect();
    crate::output::to_stderr(&(render(&probe) + &render_why(&explained)));
    if let Some(path) = args.json {
        let report = Report {
            probe: &probe,
            policy: probe.policy(),
            ranking,
            explained,
        };
        print_json(&report, Some(path))?;
    }
    Ok(())
}

/// `--cpus`, resolved on this machine and checked against its candidates; all of them without
/// it.
fn cpus_to_probe(list: &Option<String>) -> Result<Vec<usize>> {
    let topo = Topology::read(&FsRoot::default())
        .map_err(|e| Error::System(format!("cannot read the topology: {e}")))?;
    let candidates = topo.candidates();
    let Some(text) = list else {
        return Ok(candidates);
    };
    let bad = |e: &dyn std::fmt::Display| Error::Usage(format!("--cpus '{text}': {e}"));
    let named = CpuExpr::parse(text)
        .map_err(|e| bad(&e))?
        .resolve(&topo)
        .map_err(|e| bad(&e))?;
    let outside: Vec<String> = (named.iter())
        .filter(|c| !candidates.contains(c))
        .map(|c| c.to_string())
        .collect();
    if !outside.is_empty() {
        return Err(bad(&format!(
            "CPU {} not online or not allowed to this process",
            outside.join(",")
        )));
    }
    if named.is_empty() {
        return Err(bad(&"names no CPU"));
    }
    Ok(named)
}

/// The probe as a table, quietest first, with its policy, threshold and cost.
pub fn render(probe: &Probe) -> String {
    let policy = match probe.policy() {
        "SCHED_FIFO" => format!("SCHED_FIFO priority {}", probe::FIFO_PRIORITY),
        "normal" => "normal priority (SCHED_FIFO not permitted: other tasks' time counts)".into(),
        _ => "SCHED_FIFO where permitted (see the policy column)".into(),
    };
    let title = format!(
        "goset probe: {} ms on {} CPUs at once, {policy}; a detour is a gap over {}",
        probe.duration_ms,
        probe.cpus.len(),
        ns(probe.threshold_ns),
    );
    let mut t = Table::new(
        &title,
        &[
            "rank", "cpu", "lost%", "detours", "longest", "p50", "p99", "policy",
        ],
    );
    let by_cpu = |c: usize| probe.cpus.iter().find(|p| p.cpu == c);
    for (rank, cpu) in probe::ranking(&probe.cpus).into_iter().enumerate() {
        let Some(p) = by_cpu(cpu) else { continue };
        t.row(row(rank + 1, p));
    }
    let mut out = t.render();
    for (cpu, why) in &probe.failed {
        out.push_str(&format!("  CPU {cpu} not probed: {why}\n"));
    }
    out.push_str(&format!(
        "cost: {:.0} CPU-ms over {} wall\n",
        probe.cost_cpu_ms,
        duration(Some(probe.wall_ms / 1e3))
    ));
    out
}

/// Each CPU's sources by name, under a heading, in the order given.
fn render_why(explained: &[CpuExplanation]) -> String {
    let body: String = (explained.iter())
        .map(|e| (e, explain::render(e)))
        .filter(|(_, lines)| !lines.is_empty())
        .map(|(e, lines)| format!("  CPU {}\n{lines}", e.cpu))
        .collect();
    if body.is_empty() {
        return body;
    }
    format!("What ran there during the probe (threads in 10 ms ticks)\n{body}")
}

fn row(rank: usize, p: &CpuProbe) -> Vec<String> {
    vec![
        rank.to_string(),
        p.cpu.to_string(),
        format!("{:.2}", p.lost_pct()),
        p.count.to_string(),
        ns(p.longest_ns),
        ns(p.p50_ns),
        ns(p.p99_ns),
        if p.fifo { "fifo" } else { "normal" }.into(),
    ]
}

/// Nanoseconds with a unit (`-` for none).
fn ns(v: u64) -> String {
    match v {
        0 => "-".into(),
        v if v < 1000 => format!("{v}ns"),
        v => duration(Some(v as f64 / 1e9)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::stats::Detours;

    #[test]
    fn renders_quietest_first_with_policy_threshold_and_cost() {
        let mut noisy = Detours::default();
        for _ in 0..100 {
            noisy.record(100_000);
        }
        let probe = Probe {
            threshold_ns: 5_000,
            duration_ms: 100,
            cpus: vec![
                CpuProbe::new(0, 100_000_000, &noisy, true),
                CpuProbe::new(1, 100_000_000, &Detours::default(), true),
            ],
            failed: vec![(7, "cannot run on CPU 7: EINVAL".into())],
            cost_cpu_ms: 201.4,
            wall_ms: 111.0,
        };
        let text = render(&probe);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "goset probe: 100 ms on 2 CPUs at once, SCHED_FIFO priority 1; a detour is a gap over 5.0µs"
        );
        assert!(lines[2]
            .split_whitespace()
            .eq(["1", "1", "0.00", "0", "-", "-", "-", "fifo"]));
        assert!(lines[3]
            .split_whitespace()
            .eq(["2", "0", "10.00", "100", "100.0µs", "100.0µs", "100.0µs", "fifo"]));
        assert_eq!(lines[4], "  CPU 7 not probed: cannot run on CPU 7: EINVAL");
        assert_eq!(lines[5], "cost: 201 CPU-ms over 111.0ms wall");
    }
}
