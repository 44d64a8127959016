//! From runs to results: which metrics are shown, their unit and direction, each mode's
//! summary, goset's differences with the other modes, and output-drift warnings.
//!
//! Owns: choosing and judging metrics (pure). Must not: run anything or print.

use crate::experiment::Run;
use crate::metrics::{self, infer_better};
use crate::schedule::Mode;
use crate::stats::{self, Better, Difference, Summary};
use regex::Regex;
use serde::Serialize;

/// What the user said about metrics.
#[derive(Debug, Clone)]
pub struct Choice {
    /// `--match`: only keys it matches (constant ones included).
    pub matching: Option<Regex>,
    /// `--topk`: at most this many metrics.
    pub topk: usize,
    /// `--unit REGEX=UNIT`: the unit of matching keys.
    pub units: Vec<(Regex, String)>,
    /// `--better REGEX=lower|higher`: the direction of matching keys.
    pub better: Vec<(Regex, Better)>,
    /// Bootstrap resamples per comparison.
    pub resamples: usize,
    /// Confidence of the intervals.
    pub confidence: f64,
    /// Seed of the resamples.
    pub seed: u64,
}

/// One mode's runs of one metric.
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    /// The mode.
    pub mode: Mode,
    /// The values of its counted runs, in run order.
    pub values: Vec<f64>,
    /// Their summary.
    pub summary: Summary,
}

/// One mode against another.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The mode judged (goset, or mask or shim against taskset).
    pub mode: Mode,
    /// The other mode.
    pub against: Mode,
    /// The judged mode's median minus the other's, with its interval and verdict.
    #[serde(flatten)]
    pub difference: Difference,
}

/// One metric's results.
#[derive(Debug, Clone, Serialize)]
pub struct MetricResult {
    /// Its key.
    pub key: String,
    /// Its unit, if known.
    pub unit: Option<String>,
    /// Which way it improves.
    pub better: Better,
    /// Each mode's runs, in the order of the modes.
    pub modes: Vec<ModeResult>,
    /// The pairs of [`COMPARED`] where both modes ran.
    pub comparisons: Vec<Comparison>,
}

/// The comparisons made, in table order: goset against every other mode; the shared mask
/// under goset-run and the shim by hand against taskset on its own, each a part of goset.
pub const COMPARED: [(Mode, Mode); 6] = [
    (Mode::Goset, Mode::Baseline),
    (Mode::Goset, Mode::Taskset),
    (Mode::Goset, Mode::Mask),
    (Mode::Goset, Mode::Shim),
    (Mode::Mask, Mode::Taskset),
    (Mode::Shim, Mode::Taskset),
];

/// The metrics to show, in order of first appearance: those `--match` selects, else those whose
/// value changed at least once (a constant is a label, a size or a count, not a measurement);
/// at most `topk`.
fn chosen_keys(counted: &[&Run], choice: &Choice) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    let mut first: std::collections::BTreeMap<&str, f64> = Default::default();
    let mut varies: std::collections::BTreeSet<&str> = Default::default();
    for run in counted {
        for s in &run.samples {
            match first.get(s.key.as_str()) {
                None => {
                    first.insert(&s.key, s.value);
                    keys.push(s.key.clone());
                }
                Some(&v) if v != s.value => {
                    varies.insert(&s.key);
                }
                Some(_) => {}
            }
        }
    }
    keys.into_iter()
        .filter(|k| match &choice.matching {
            Some(re) => re.is_match(k),
            None => varies.contains(k.as_str()),
        })
        .take(choice.topk)
        .collect()
}

/// Output-drift warnings: each counted run whose line structure differs from the first's.
pub fn drift_warnings(runs: &[Run]) -> Vec<String> {
    let counted: Vec<&Run> = runs.iter().filter(|r| r.counts()).collect();
    let Some(first) = counted.first() else {
        return Vec::new();
    };
    (counted.iter().skip(1))
        .filter_map(|r| {
            let why = metrics::drift(&first.samples, &r.samples)?;
            Some(format!(
                "output drift: run {} ({}) {why}; the command must print the same lines every run",
                r.planned.round,
                r.planned.mode.name()
            ))
        })
        .collect()
}

/// The results of `runs` for `modes`.
pub fn analyse(runs: &[Run], modes: &[Mode], choice: &Choice) -> Vec<MetricResult> {
    let counted: Vec<&Run> = runs.iter().filter(|r| r.counts()).collect();
    let mut rng = fastrand::Rng::with_seed(choice.seed);
    let mut out = Vec::new();
    for key in chosen_keys(&counted, choice) {
        let written_unit = (counted.iter())
            .flat_map(|r| &r.samples)
            .find(|s| s.key == key)
            .and_then(|s| s.unit.clone());
        let unit = (choice.units.iter())
            .find(|(re, _)| re.is_match(&key))
            .map(|(_, u)| u.clone())
            .or(written_unit);
        let better = (choice.better.iter())
            .find(|(re, _)| re.is_match(&key))
            .map(|&(_, b)| b)
            .unwrap_or_else(|| infer_better(&key, unit.as_deref()));
        let values_of = |mode: Mode| -> Vec<f64> {
            (counted.iter())
                .filter(|r| r.planned.mode == mode)
                .filter_map(|r| r.samples.iter().find(|s| s.key == key).map(|s| s.value))
                .collect()
        };
        let results: Vec<ModeResult> = (modes.iter())
            .filter_map(|&mode| {
                let values = values_of(mode);
                let summary = stats::summarize(&values)?;
                Some(ModeResult {
                    mode,
                    values,
                    summary,
                })
            })
            .collect();
        let comparisons = COMPARED
            .into_iter()
            .filter(|(mode, against)| modes.contains(mode) && modes.contains(against))
            .filter_map(|(mode, against)| {
                let other = values_of(against);
                let difference = stats::compare(
                    &values_of(mode),
                    &other,
                    better,
                    choice.resamples,
                    choice.confidence,
                    &mut rng,
                )?;
                Some(Comparison {
                    mode,
                    against,
                    difference,
                })
            })
            .collect();
        out.push(MetricResult {
            key,
            unit,
            better,
            modes: results,
            comparisons,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::extract;
    use crate::schedule::Planned;

    fn run(round: usize, mode: Mode, text: &str) -> Run {
        Run {
            planned: Planned {
                round,
                mode,
                warmup: false,
            },
            cpus: None,
            status: Some(0),
            discarded: None,
            wall_s: 0.1,
            samples: extract(text),
            stderr_tail: None,
        }
    }

    fn choice() -> Choice {
        Choice {
            matching: None,
            topk: 8,
            units: Vec::new(),
            better: Vec::new(),
            resamples: 1000,
            confidence: 0.95,
            seed: 3,
        }
    }

    #[test]
    fn constants_are_left_out_and_goset_is_compared_with_each_mode() {
        let mut runs = Vec::new();
        for round in 0..6 {
            let r = round as f64 * 0.01;
            runs.push(run(
                round,
                Mode::Baseline,
                &format!("threads: 4\nlat: {} ms", 5.0 + r),
            ));
            runs.push(run(
                round,
                Mode::Taskset,
                &format!("threads: 4\nlat: {} ms", 6.0 + r),
            ));
            runs.push(run(
                round,
                Mode::Goset,
                &format!("threads: 4\nlat: {} ms", 4.0 + r),
            ));
        }
        let mut failed = run(6, Mode::Goset, "lat: 100 ms");
        failed.discarded = Some("exit status 1".into());
        runs.push(failed);
        let results = analyse(&runs, &Mode::DEFAULT, &choice());
        assert_eq!(results.len(), 1, "{results:?}");
        let lat = &results[0];
        assert_eq!((lat.key.as_str(), lat.unit.as_deref()), ("lat", Some("ms")));
        assert_eq!(lat.better, Better::Lower);
        assert_eq!(
            lat.modes[2].summary.n, 6,
            "the discarded run does not count"
        );
        let verdicts: Vec<_> = (lat.comparisons.iter())
            .map(|c| (c.against, c.difference.verdict))
            .collect();
        assert_eq!(
            verdicts,
            [
                (Mode::Baseline, stats::Verdict::Better),
                (Mode::Taskset, stats::Verdict::Better)
            ]
        );
        let mut c = choice();
        c.matching = Some(Regex::new("^threads$").unwrap());
        c.better = vec![(Regex::new("threads").unwrap(), Better::Higher)];
        let results = analyse(&runs, &Mode::DEFAULT, &c);
        assert_eq!(results[0].key, "threads");
        assert_eq!(results[0].better, Better::Higher);
        assert_eq!(
            results[0].comparisons[0].difference.verdict,
            stats::Verdict::NoDifference
        );
    }

    #[test]
    fn a_run_with_other_lines_is_drift() {
        let runs = [
            run(0, Mode::Baseline, "a: 1\nb: 2"),
            run(0, Mode::Goset, "a: 1\nb: 3"),
            run(1, Mode::Goset, "a: 1\nerror count: 3\nb: 3"),
        ];
        let w = drift_warnings(&runs);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("output drift: run 1 (goset) number 1 is 'error count'"));
    }
}
