//! The housekeeper's tables: Telemetry (per task CPU and `all`), Threads (placement and what
//! each thread did), the Run table with the housekeeper's columns, and Errors.
//!
//! Pure renderers: values in, text out. Unmeasured cells are `n/a`, never a 0.

use super::model::telemetry::CpuTelemetryReport as CpuTelemetry;
use super::model::{PlacementMode, ReadErrorReport, RunReport, TelemetryReport, ThreadReport};
use super::table::Table;
use crate::output::escape;

fn na<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".into(), |v| v.to_string())
}

fn ghz(khz: Option<u64>) -> String {
    khz.map_or_else(|| "n/a".into(), |k| format!("{:.2}GHz", k as f64 / 1e6))
}

/// A count the way the Go goset printed it: `1.33k` from 10 000 on.
fn count(v: Option<u64>) -> String {
    match v {
        None => "n/a".into(),
        Some(n) if n >= 10_000_000 => format!("{:.2}M", n as f64 / 1e6),
        Some(n) if n >= 10_000 => format!("{:.2}k", n as f64 / 1e3),
        Some(n) => n.to_string(),
    }
}

/// Seconds with a unit that keeps three significant places.
pub fn duration(s: Option<f64>) -> String {
    match s {
        None => "n/a".into(),
        Some(0.0) => "0".into(),
        Some(s) if s < 1e-3 => format!("{:.1}µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.1}ms", s * 1e3),
        Some(s) => format!("{s:.3}s"),
    }
}

fn cpulist(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        return "-".into();
    }
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn telemetry_row(t: &mut Table, r: &CpuTelemetry) {
    // An IPI row the architecture does not have (arm64 names them IPI0..) reads "-".
    let ipi = |name: &str| match (r.irq_nonsteerable, r.rows.get(name)) {
        (None, _) => "n/a".to_string(),
        (Some(_), None) => "-".to_string(),
        (Some(_), Some(&n)) => count(Some(n)),
    };
    t.row(vec![
        r.cpu.map_or_else(|| "all".into(), |c| c.to_string()),
        ghz(r.freq_min_khz),
        ghz(r.freq_avg_khz),
        ghz(r.freq_max_khz),
        na(r.throttle),
        count(r.irq_steerable),
        count(r.irq_nonsteerable),
        ipi("RES"),
        ipi("CAL"),
        ipi("TLB"),
        count(r.softirq),
        r.steal_pct
            .map_or_else(|| "n/a".into(), |s| format!("{s:.1}")),
    ]);
}

/// The Telemetry table: counters of each task CPU over the run, then `all`.
pub fn render_telemetry(rep: &TelemetryReport) -> String {
    let mut t = Table::new(
        "Telemetry",
        &[
            "cpu",
            "freq min",
            "freq avg",
            "freq max",
            "throttle",
            "steer",
            "non-steer",
            "res",
            "cal",
            "tlb",
            "softirq",
            "steal%",
        ],
    );
    for r in &rep.cpus {
        telemetry_row(&mut t, r);
    }
    telemetry_row(&mut t, &rep.all);
    t.render()
}

/// The Threads table: where each thread was put and what it did. `cpu` is the CPU it was
/// given; `seen-on` where it ran; a `!` after `seen-on` marks drift (seen outside `cpu`).
/// `brief`: the threads counted and not listed (see [`super::model::telemetry::TotalsReport`]).
pub fn render_threads(threads: &[ThreadReport], brief: u64) -> String {
    let mut t = Table::new(
        "Threads",
        &[
            "tid",
            "pid",
            "comm",
            "role",
            "slot",
            "asked",
            "cpu",
            "seen-on",
            "migr",
            "ctxsw vol",
            "invol",
            "run delay",
            "cpu time",
            "by",
        ],
    );
    for th in threads {
        let p = &th.placement;
        let seen = if th.polls == 0 {
            "n/a".to_string()
        } else {
            cpulist(&th.seen_on) + if th.drift == Some(true) { "!" } else { "" }
        };
        let slot = match p.slot {
            Some(s) if p.shared => format!("{s}+"),
            Some(s) => s.to_string(),
            None => "-".into(),
        };
        t.row(vec![
            p.tid.to_string(),
            p.pid.to_string(),
            p.comm.clone(),
            if p.role.is_empty() {
                "-".into()
            } else {
                p.role.clone()
            },
            slot,
            p.asked.clone().unwrap_or_else(|| "-".into()),
            match p.cpu {
                Some(c) => c.to_string(),
                None if p.roams => "res".into(),
                None => "-".into(),
            },
            seen,
            na(th.migrations),
            na(th.voluntary_ctxsw),
            na(th.involuntary_ctxsw),
            duration(th.run_delay_s),
            duration(th.cpu_s),
            p.placed_by.clone(),
        ]);
    }
    let mut out = t.render();
    if threads.iter().any(|t| t.placement.shared) {
        out.push_str("  slot+ : the slot was shared with another live thread\n");
    }
    if threads.iter().any(|t| t.placement.roams) {
        out.push_str(
            "  res   : on the whole reservation, the kernel balancing it: born while every slot \
             had a running thread, or it takes turns with another thread (see docs/placement.md)\n",
        );
    }
    if brief > 0 {
        out.push_str(&format!(
            "  and {brief} brief threads, not listed: each born beside its creator, which waited \
             on it, and ended within 1 ms (see docs/placement.md)\n"
        ));
    }
    out
}

/// The Run table with the housekeeper's columns: the task (`wait4`), the scheduler totals,
/// and what the housekeeper did and cost. `drift` is the number of steered IRQs that came back
/// to a task CPU while the task ran (`-` without `--steer`); a thread seen off its CPU is
/// marked in the Threads table. `placement` is `--placement`'s mode.
pub fn render_run(
    run: &RunReport,
    tele: &TelemetryReport,
    irq_drift: Option<usize>,
    placement: PlacementMode,
) -> String {
    let mut t = Table::new("Run", &["task", "", "sched", "", "housekeeper", ""]);
    let exit = match run.signal {
        Some(sig) => format!("signal {sig}"),
        None => run.exit.to_string(),
    };
    let hk = &tele.housekeeper;
    let rows: [[String; 6]; 6] = [
        [
            "wall".into(),
            format!("{:.3}s", run.wall_s),
            "ctxsw vol".into(),
            run.rusage.voluntary_ctxsw.to_string(),
            "poll".into(),
            format!("{}@{}ms", tele.polls, tele.interval_ms),
        ],
        [
            "util".into(),
            format!("{:.0}%", run.util_pct),
            "ctxsw invol".into(),
            run.rusage.involuntary_ctxsw.to_string(),
            "cpu".into(),
            format!("{}", hk.cpu),
        ],
        [
            "exit".into(),
            exit,
            "migrations".into(),
            na(tele.totals.migrations),
            "cost".into(),
            format!("{:.2}%", hk.cpu_pct),
        ],
        [
            "user".into(),
            format!("{:.3}s", run.rusage.user_s),
            "run delay".into(),
            duration(tele.totals.run_delay_s),
            "placed".into(),
            hk.placed.to_string(),
        ],
        [
            "sys".into(),
            format!("{:.3}s", run.rusage.system_s),
            "max rss".into(),
            format!("{}KiB", run.rusage.max_rss_kib),
            "drift".into(),
            irq_drift.map_or_else(|| "-".into(), |d| d.to_string()),
        ],
        [
            "placement".into(),
            placement.name().into(),
            String::new(),
            String::new(),
            "moved".into(),
            hk.moved.to_string(),
        ],
    ];
    for r in rows {
        t.row(r.to_vec());
    }
    t.render()
}

/// The Moves table: each thread the housekeeper moved after its placement, when and why;
/// empty when none moved.
pub fn render_moves(tele: &TelemetryReport) -> String {
    if tele.moves.is_empty() {
        return String::new();
    }
    let mut t = Table::new("Moves", &["after", "tid", "comm", "from", "to", "reason"]);
    let cpu = |c: Option<usize>| c.map_or_else(|| "-".into(), |c| c.to_string());
    for m in &tele.moves {
        t.row(vec![
            format!("{:.2}s", m.after_s),
            m.tid.to_string(),
            m.comm.clone(),
            cpu(m.from_cpu),
            cpu(m.to_cpu),
            m.reason.clone(),
        ]);
    }
    t.render()
}

/// The Errors table: each failed or unsupported read once, with the reason; empty when none.
pub fn render_errors(errors: &[ReadErrorReport]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let mut out = String::from("Errors\n");
    for e in errors {
        out.push_str(&format!("  {}: {}\n", escape(&e.file), escape(&e.reason)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmeasured_cells_read_na_and_counts_scale() {
        assert_eq!(count(Some(12_345)), "12.35k");
        assert_eq!(count(Some(999)), "999");
        assert_eq!(count(None), "n/a");
        assert_eq!(duration(Some(0.000_028_69)), "28.7µs");
        assert_eq!(duration(Some(1.5)), "1.500s");
        let mut t = Table::new("T", &["cpu"; 12]);
        telemetry_row(
            &mut t,
            &CpuTelemetry {
                cpu: Some(1),
                irq_nonsteerable: Some(3),
                rows: [("CAL".to_string(), 2)].into(),
                ..Default::default()
            },
        );
        let text = t.render();
        let last = text.lines().last().unwrap();
        let cells: Vec<&str> = last.split_whitespace().collect();
        assert_eq!(
            cells,
            ["1", "n/a", "n/a", "n/a", "n/a", "n/a", "3", "-", "2", "-", "n/a", "n/a"]
        );
    }

    #[test]
    fn an_error_naming_a_path_with_an_escape_sequence_is_printed_escaped() {
        let e = ReadErrorReport {
            file: "/tmp/\x1b[2Jlog".into(),
            reason: "not a regular file".into(),
        };
        assert_eq!(
            render_errors(&[e]),
            "Errors\n  /tmp/\\x1b[2Jlog: not a regular file\n"
        );
    }
}
