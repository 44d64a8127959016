//! The experiment's results as a table (stdout), JSON and CSV.
//!
//! Owns: formatting. Must not: compute statistics.

use crate::analysis::MetricResult;
use crate::experiment::Run;
use crate::schedule::Mode;
use crate::stats::Better;
use serde::Serialize;
use std::fmt::Write as _;

/// What the experiment was, for the table's header and the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct About {
    /// The command as run (the built-in's name for `--bench`).
    pub command: String,
    /// The modes, in table order.
    pub modes: Vec<Mode>,
    /// Counted runs asked per mode.
    pub runs: usize,
    /// Warm-up rounds.
    pub warmup: usize,
    /// Idle seconds before each run.
    pub settle_s: f64,
    /// Seed of the order of modes within rounds and of the bootstrap resamples.
    pub seed: u64,
    /// Resamples per comparison.
    pub resamples: usize,
    /// Confidence of the intervals.
    pub confidence: f64,
    /// goset-run's arguments.
    pub goset_args: Vec<String>,
    /// The `--noise` load, as given.
    pub noise: Option<String>,
}

/// A number with about four significant digits, as the tables show it.
pub fn number(x: f64) -> String {
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A signed number, for differences.
fn signed(x: f64) -> String {
    if x >= 0.0 {
        format!("+{}", number(x))
    } else {
        number(x)
    }
}

fn direction(b: Better) -> &'static str {
    match b {
        Better::Lower => ", lower is better",
        Better::Higher => ", higher is better",
        Better::Unknown => "",
    }
}

/// Runs discarded per mode, as `mode N` words; empty when none were.
fn discarded(runs: &[Run]) -> String {
    let mut words = Vec::new();
    for mode in Mode::ALL {
        let n = (runs.iter())
            .filter(|r| r.planned.mode == mode && !r.planned.warmup && r.discarded.is_some())
            .count();
        if n > 0 {
            words.push(format!("{} {n}", mode.name()));
        }
    }
    words.join(", ")
}

/// The table: per metric each mode's median, sd, min, max and spread, then the differences of
/// [`crate::analysis::COMPARED`] with their intervals and verdicts; the seeds and discarded
/// runs last.
pub fn table(about: &About, results: &[MetricResult], runs: &[Run]) -> String {
    let mut t = String::new();
    for m in results {
        let unit = m.unit.as_deref().unwrap_or("no unit");
        let _ = writeln!(t, "{} ({unit}{})", m.key, direction(m.better));
        let _ = writeln!(
            t,
            "  {:<9} {:>5} {:>10} {:>10} {:>10} {:>10} {:>7}",
            "mode", "runs", "median", "sd", "min", "max", "spread"
        );
        for r in &m.modes {
            let s = &r.summary;
            let _ = writeln!(
                t,
                "  {:<9} {:>5} {:>10} {:>10} {:>10} {:>10} {:>6.1}%",
                r.mode.name(),
                s.n,
                number(s.median),
                number(s.sd),
                number(s.min),
                number(s.max),
                s.spread * 100.0
            );
        }
        for c in &m.comparisons {
            let d = &c.difference;
            let _ = writeln!(
                t,
                "  {:<17} {} ({:+.1}%), {:.0}% CI [{}, {}]: {}",
                format!("{} vs {}", c.mode.name(), c.against.name()),
                signed(d.diff),
                d.relative * 100.0,
                d.confidence * 100.0,
                signed(d.low),
                signed(d.high),
                d.verdict.words(d.confidence)
            );
        }
        t.push('\n');
    }
    let _ = writeln!(
        t,
        "{} runs per mode, interleaved in shuffled order ({} warm-up rounds discarded), {:.1} s \
         settle; bootstrap {} resamples; seed {} (--seed repeats it); spread = (max - min) / median",
        about.runs, about.warmup, about.settle_s, about.resamples, about.seed
    );
    let d = discarded(runs);
    if !d.is_empty() {
        let _ = writeln!(t, "discarded (non-zero exit or timeout): {d}");
    }
    t
}

/// The JSON document: what was run, every run, every metric's results, warnings.
pub fn json(about: &About, results: &[MetricResult], runs: &[Run], warnings: &[String]) -> String {
    #[derive(Serialize)]
    struct RunValues<'a> {
        #[serde(flatten)]
        run: &'a Run,
        metrics: std::collections::BTreeMap<&'a str, f64>,
    }
    let keys: Vec<&str> = results.iter().map(|m| m.key.as_str()).collect();
    let runs: Vec<RunValues> = (runs.iter())
        .map(|run| RunValues {
            run,
            metrics: (run.samples.iter())
                .filter(|s| keys.contains(&s.key.as_str()))
                .map(|s| (s.key.as_str(), s.value))
                .collect(),
        })
        .collect();
    let doc = serde_json::json!({
        "experiment": about,
        "metrics": results,
        "runs": runs,
        "warnings": warnings,
    });
    serde_json::to_string_pretty(&doc).expect("results serialise") + "\n"
}

/// Quotes a CSV field when it needs it.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per run and shown metric: round, mode, warm-up, discarded, the run's CPUs (see
/// [`Run::cpus`]), key, value, unit.
pub fn csv(results: &[MetricResult], runs: &[Run]) -> String {
    let mut t = String::from("round,mode,warmup,discarded,cpus,key,value,unit\n");
    for run in runs {
        for m in results {
            let Some(s) = run.samples.iter().find(|s| s.key == m.key) else {
                continue;
            };
            let cpus = (run.cpus.iter().flatten())
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(
                t,
                "{},{},{},{},{},{},{},{}",
                run.planned.round,
                run.planned.mode.name(),
                run.planned.warmup,
                csv_field(run.discarded.as_deref().unwrap_or("")),
                cpus,
                csv_field(&m.key),
                s.value,
                csv_field(m.unit.as_deref().unwrap_or(""))
            );
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_about_four_digits() {
        assert_eq!(number(3.42159), "3.422");
        assert_eq!(number(17241.3), "17241");
        assert_eq!(number(123.456), "123.5");
        assert_eq!(signed(0.5), "+0.500");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }
}
