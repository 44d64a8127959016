//! Statistics of one metric's runs: a summary per mode, and the difference of two modes'
//! medians with a bootstrap confidence interval and a plain verdict.
//!
//! Owns: arithmetic on samples. Must not: run anything or print; the seed comes from outside so
//! that a run can be reproduced.

use serde::Serialize;

/// Median, spread and extremes of one mode's runs of one metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of runs.
    pub n: usize,
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Sample standard deviation (n - 1); 0 for one run.
    pub sd: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// (max - min) / |median|, as a fraction (0 when the median is 0).
    pub spread: f64,
}

/// The median of `xs` (any order); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The summary of `xs`; `None` when empty.
pub fn summarize(xs: &[f64]) -> Option<Summary> {
    let median = median(xs)?;
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let spread = if median != 0.0 {
        (max - min) / median.abs()
    } else {
        0.0
    };
    Some(Summary {
        n,
        median,
        sd,
        min,
        max,
        spread,
    })
}

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Times, latencies.
    Lower,
    /// Rates, throughputs.
    Higher,
    /// Not known: differences are reported without a direction.
    Unknown,
}

/// What a difference means for the mode being judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The interval lies wholly on the good side.
    Better,
    /// The interval lies wholly on the bad side.
    Worse,
    /// The interval excludes 0 but the metric has no known direction.
    Different,
    /// The interval holds 0.
    NoDifference,
    /// Fewer than [`MIN_RUNS`] runs on a side: a bootstrap of so few says little.
    TooFewRuns,
}

/// Fewest runs per mode for a verdict: a percentile bootstrap of 2 or 3 values draws from a
/// handful of distinct medians, and its interval is far too narrow.
pub const MIN_RUNS: usize = 5;

impl Verdict {
    /// The words of the table.
    pub fn words(self, confidence: f64) -> String {
        match self {
            Verdict::Better => "better".into(),
            Verdict::Worse => "worse".into(),
            Verdict::Different => "different".into(),
            Verdict::NoDifference => format!("no difference at {:.0}%", confidence * 100.0),
            Verdict::TooFewRuns => format!("too few runs for a verdict (fewer than {MIN_RUNS})"),
        }
    }
}

/// The difference `judged - against` of two modes' medians.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Difference {
    /// Difference of the medians.
    pub diff: f64,
    /// The difference relative to `against`'s median (0 when that is 0).
    pub relative: f64,
    /// Lower end of the confidence interval.
    pub low: f64,
    /// Upper end of the confidence interval.
    pub high: f64,
    /// The interval's confidence (0.95).
    pub confidence: f64,
    /// Bootstrap resamples drawn.
    pub resamples: usize,
    /// The verdict for `judged`.
    pub verdict: Verdict,
}

/// The percentile bootstrap of the difference of medians: `resamples` times, each sample is
/// drawn again with replacement and the difference of the resampled medians kept; the interval
/// is the central `confidence` of those differences. `None` when either sample is empty.
pub fn compare(
    judged: &[f64],
    against: &[f64],
    better: Better,
    resamples: usize,
    confidence: f64,
    rng: &mut fastrand::Rng,
) -> Option<Difference> {
    let diff = median(judged)? - median(against)?;
    let base = median(against)?;
    let mut diffs = Vec::with_capacity(resamples);
    let mut a = vec![0.0; judged.len()];
    let mut b = vec![0.0; against.len()];
    for _ in 0..resamples.max(1) {
        for x in a.iter_mut() {
            *x = judged[rng.usize(..judged.len())];
        }
        for x in b.iter_mut() {
            *x = against[rng.usize(..against.len())];
        }
        diffs.push(median(&a)? - median(&b)?);
    }
    diffs.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    let at = |q: f64| diffs[((q * (diffs.len() - 1) as f64).round() as usize).min(diffs.len() - 1)];
    let (low, high) = (at(tail), at(1.0 - tail));
    let verdict = if judged.len().min(against.len()) < MIN_RUNS {
        Verdict::TooFewRuns
    } else if low <= 0.0 && high >= 0.0 {
        Verdict::NoDifference
    } else {
        let lower = high < 0.0;
        match better {
            Better::Lower if lower => Verdict::Better,
            Better::Higher if !lower => Verdict::Better,
            Better::Unknown => Verdict::Different,
            _ => Verdict::Worse,
        }
    };
    Some(Difference {
        diff,
        relative: if base != 0.0 { diff / base.abs() } else { 0.0 },
        low,
        high,
        confidence,
        resamples: resamples.max(1),
        verdict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let s = summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!((s.sd - 1.290_994).abs() < 1e-6, "{}", s.sd);
        assert!((s.spread - 1.2).abs() < 1e-12);
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[7.0]).unwrap().sd, 0.0);
    }

    #[test]
    fn clearly_separated_samples_get_a_verdict_and_overlapping_ones_none() {
        let slow = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.1];
        let fast = [8.0, 8.1, 7.9, 8.2, 8.0, 7.8, 8.1, 8.0];
        let mut rng = fastrand::Rng::with_seed(1);
        let d = compare(&fast, &slow, Better::Lower, 2000, 0.95, &mut rng).unwrap();
        assert_eq!(d.verdict, Verdict::Better, "{d:?}");
        assert!(d.low <= d.diff && d.diff <= d.high && d.high < 0.0, "{d:?}");
        assert!((d.relative - (8.0 - 10.05) / 10.05).abs() < 1e-9);
        let d = compare(&fast, &slow, Better::Higher, 2000, 0.95, &mut rng).unwrap();
        assert_eq!(d.verdict, Verdict::Worse);
        let d = compare(&fast, &slow, Better::Unknown, 2000, 0.95, &mut rng).unwrap();
        assert_eq!(d.verdict, Verdict::Different);
        let same = [10.1, 9.9, 10.0, 10.2, 9.8, 10.0, 10.1, 9.9];
        let d = compare(&same, &slow, Better::Lower, 2000, 0.95, &mut rng).unwrap();
        assert_eq!(d.verdict, Verdict::NoDifference, "{d:?}");
        let d = compare(&fast[..4], &slow, Better::Lower, 2000, 0.95, &mut rng).unwrap();
        assert_eq!(d.verdict, Verdict::TooFewRuns, "{d:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_interval() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [2.0, 3.0, 4.0, 5.0, 9.0];
        let run = |seed| {
            let mut rng = fastrand::Rng::with_seed(seed);
            compare(&a, &b, Better::Lower, 500, 0.9, &mut rng).unwrap()
        };
        assert_eq!(run(7), run(7));
    }
}
