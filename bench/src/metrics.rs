//! Metrics from any command's output: every number becomes a metric keyed by its line's label
//! and its column, with a unit and a direction inferred where obvious.
//!
//! Owns: reading text. Must not: run commands or decide what is shown.
//!
//! A line's label is its words that are neither numbers nor a number's unit, joined by one space
//! (trailing `:` and `=` dropped): `events per second:  1234.56` is `events per second`. A line
//! with several numbers keys each as `label#column` (from 0, left to right), so a table row
//! `sha256  123.45k  456.78k` gives `sha256#0` and `sha256#1`; a label seen again in the same
//! output gets `@2`, `@3`. The run's structure is its keys in order: a command whose structure
//! changes between runs drifts ([`drift`]).

use crate::stats::Better;
use goset::output::escape;
use regex::Regex;
use std::sync::OnceLock;

/// One number of one output.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// `label`, `label#column`, with `@n` for a repeated label.
    pub key: String,
    /// The number (a `k`, `M`, `G` suffix is kept as the unit, not multiplied out).
    pub value: f64,
    /// The unit written with it (`ns`, `MB/s`, `%`, `k`), if any.
    pub unit: Option<String>,
}

/// A number token: optional bracket, the number (thousands separators allowed), an attached
/// unit, trailing punctuation.
fn number_token() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"^[(\[]?([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?)((?:[A-Za-zµ%]+)(?:/[A-Za-z]+)?)?[)\],;:]*$",
        )
        .expect("valid regex")
    })
}

/// Words that are a unit when they follow a number.
const UNITS: &[&str] = &[
    "ns", "us", "µs", "ms", "s", "sec", "secs", "seconds", "min", "minutes", "cycles", "%", "KB/s",
    "MB/s", "GB/s", "KiB/s", "MiB/s", "GiB/s", "kB/s", "B/s", "ops/s", "op/s", "ops/sec", "/s",
    "MFLOP/s", "GFLOP/s", "MFLOPS", "GFLOPS", "events/s", "ns/load", "ms/iter", "ns/op", "us/op",
    "ms/op", "req/s", "bytes", "KB", "MB", "GB", "KiB", "MiB", "GiB",
];

/// Splits a token into its number and attached unit, when it is a number.
fn parse_number(token: &str) -> Option<(f64, Option<String>)> {
    let caps = number_token().captures(token)?;
    // An ordinal (`95th percentile`) is part of a label.
    if caps
        .get(2)
        .is_some_and(|u| ["st", "nd", "rd", "th"].contains(&u.as_str()))
    {
        return None;
    }
    let value: f64 = caps[1].replace(',', "").parse().ok()?;
    Some((value, caps.get(2).map(|m| m.as_str().to_string())))
}

/// A bracketed integer (`[1234]`): a log line's pid or thread id, neither a measurement nor
/// part of the label (it changes every run).
fn is_identifier(token: &str) -> bool {
    let inner = token.strip_prefix('[').and_then(|t| t.strip_suffix(']'));
    inner.is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
}

/// A line without numbers that ends in `:` heads the indented lines below it (sysbench's
/// `Latency (ms):`): their labels start with its words, and a unit in brackets is theirs.
fn heading_of(line: &str, words: &[&str]) -> Option<(String, Option<String>)> {
    if !line.trim_end().ends_with(':') || words.is_empty() {
        return None;
    }
    let mut unit = None;
    let mut title = Vec::new();
    for w in words {
        match w.strip_prefix('(').and_then(|w| w.strip_suffix(')')) {
            Some(u) if UNITS.contains(&u) => unit = Some(u.to_string()),
            _ => title.push(*w),
        }
    }
    Some((title.join(" "), unit))
}

/// Every number of `text`, in order.
pub fn extract(text: &str) -> Vec<Sample> {
    // Bounded by MAX_SAMPLES: a command that prints a number a line (`seq 1000000`) would
    // otherwise keep every one, in every run (85 MB a run).
    let mut out = Vec::new();

    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    // The heading the indented lines below it belong to, and the unit it names.
    let mut heading: Option<(String, Option<String>)> = None;
    for line in text.lines() {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let mut words = Vec::new();
        let mut numbers: Vec<(f64, Option<String>)> = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            if is_identifier(tokens[i]) {
                i += 1;
                continue;
            }
            if let Some((value, mut unit)) = parse_number(tokens[i]) {
                if unit.is_none() {
                    if let Some(next) = tokens.get(i + 1) {
                        let bare = next.trim_end_matches([',', ';', ')']);
                        if UNITS.contains(&bare) {
                            unit = Some(bare.to_string());
                            i += 1;
                        }
                    }
                }
                numbers.push((value, unit));
            } else {
                let word = tokens[i].trim_end_matches([':', '=', ',']);
                if word.chars().any(|c| c.is_alphanumeric()) {
                    words.push(word);
                }
            }
            i += 1;
        }
        let indented = line.starts_with([' ', '\t']);
        if numbers.is_empty() {
            heading = heading_of(line, &words);
            continue;
        }
        let mut label = words.join(" ");
        if let (true, Some((title, unit))) = (indented, &heading) {
            label = format!("{title} {label}");
            for (_, u) in numbers.iter_mut().filter(|(_, u)| u.is_none()) {
                u.clone_from(unit);
            }
        } else {
            heading = None;
        }
        let n = seen.entry(label.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            label = format!("{label}@{n}");
        }
        let several = numbers.len() > 1;
        for (column, (value, unit)) in numbers.into_iter().enumerate() {
            let key = if several {
                format!("{label}#{column}")
            } else {
                label.clone()
            };
            out.push(Sample { key, value, unit });
            if out.len() == MAX_SAMPLES {
                return out;
            }
        }
    }
    out
}

/// The most numbers kept of one run's output; the rest are not read (the run's
/// [`crate::experiment::Run::samples`] then holds exactly this many, and goset-bench says so).
pub const MAX_SAMPLES: usize = 10_000;

/// The direction of a metric from its unit and key, where obvious: times are lower-is-better,
/// rates (anything per second) higher-is-better.
pub fn infer_better(key: &str, unit: Option<&str>) -> Better {
    let key = key.to_lowercase();
    if let Some(u) = unit {
        let u = u.to_lowercase();
        let per_second = u.ends_with("/s") || u.ends_with("/sec") || u.ends_with("ps");
        if per_second {
            return Better::Higher;
        }
        let time = [
            "ns", "us", "µs", "ms", "s", "sec", "secs", "seconds", "min", "cycles",
        ];
        let head = u.split('/').next().unwrap_or("");
        if time.contains(&head) {
            return Better::Lower;
        }
    }
    let rate = [
        "per second",
        "per sec",
        "/s",
        "/sec",
        "throughput",
        "bandwidth",
        "ops",
    ];
    if rate.iter().any(|w| key.contains(w)) {
        return Better::Higher;
    }
    let time = ["latency", "time", "elapsed", "duration", "seconds"];
    if time.iter().any(|w| key.contains(w)) {
        return Better::Lower;
    }
    Better::Unknown
}

/// How one run's structure differs from the first run's: the first key that differs, or a
/// count that does; `None` when they are the same.
pub fn drift(first: &[Sample], this: &[Sample]) -> Option<String> {
    for (i, (a, b)) in first.iter().zip(this).enumerate() {
        if a.key != b.key {
            // The keys are the command's own text: control characters are shown escaped.
            let (now, was) = (escape(&b.key), escape(&a.key));
            return Some(format!("number {i} is '{now}', was '{was}'"));
        }
    }
    (first.len() != this.len()).then(|| format!("{} numbers, were {}", this.len(), first.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<(String, f64, Option<String>)> {
        extract(text)
            .into_iter()
            .map(|s| (s.key, s.value, s.unit))
            .collect()
    }

    #[test]
    fn labels_columns_units_and_repeats() {
        let text = "chase: 3.42 ns/load\n\
                    events per second:  1,234.56\n\
                    sha256  123.45k  456.78k\n\
                    x86_64 2026-12-03 10:30:00 v1.2.3\n\
                    total time: 10.0021s\n\
                    min: 0.10 ms\nmin: 0.20 ms\n\
                    stress-ng: info:  [4242] cpu  1234  1.00\n\
                    Latency (ms):\n         min:  0.27\n         95th percentile:  0.30\n\
                    top: 1\n";
        let s = |k: &str, v: f64, u: Option<&str>| (k.to_string(), v, u.map(String::from));
        assert_eq!(
            keys(text),
            [
                s("chase", 3.42, Some("ns/load")),
                s("events per second", 1234.56, None),
                s("sha256#0", 123.45, Some("k")),
                s("sha256#1", 456.78, Some("k")),
                s("total time", 10.0021, Some("s")),
                s("min", 0.10, Some("ms")),
                s("min@2", 0.20, Some("ms")),
                s("stress-ng info cpu#0", 1234.0, None),
                s("stress-ng info cpu#1", 1.00, None),
                s("Latency min", 0.27, Some("ms")),
                s("Latency 95th percentile", 0.30, Some("ms")),
                s("top", 1.0, None),
            ]
        );
    }

    #[test]
    fn directions_where_obvious() {
        assert_eq!(infer_better("chase", Some("ns/load")), Better::Lower);
        assert_eq!(infer_better("x", Some("MB/s")), Better::Higher);
        assert_eq!(infer_better("events per second", None), Better::Higher);
        assert_eq!(infer_better("bogo ops/s (real time)", None), Better::Higher);
        assert_eq!(infer_better("latency avg", None), Better::Lower);
        assert_eq!(infer_better("threads", None), Better::Unknown);
    }

    #[test]
    fn a_changed_structure_is_drift() {
        let a = extract("x: 1\ny: 2\n");
        assert_eq!(drift(&a, &extract("x: 5\ny: 7\n")), None);
        assert!(drift(&a, &extract("x: 5\nz: 7\n"))
            .unwrap()
            .contains("'z', was 'y'"));
        assert!(drift(&a, &extract("x: 5\n"))
            .unwrap()
            .contains("1 numbers, were 2"));
    }

    #[test]
    fn a_run_keeps_a_bounded_number_of_numbers_and_drift_is_printed_escaped() {
        let many: String = (0..MAX_SAMPLES + 50).map(|i| format!("{i}\n")).collect();
        assert_eq!(extract(&many).len(), MAX_SAMPLES);
        let a = extract("x: 1\n");
        let b = extract("\x1b[2Jx: 1\n");
        let why = drift(&a, &b).unwrap();
        assert!(!why.contains('\x1b') && why.contains("\\x1b"), "{why}");
    }
}
