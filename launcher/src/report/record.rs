//! The noise record as a report: per CPU, what it lost and to what over each horizon
//! (`goset noise`, and briefly in bare `goset`), and what a run's task CPUs were known to lose
//! before it against what the run saw.
//!
//! Pure: values in, text out. Each CPU's block ends with its [`CpuNoiseReport::extra`] lines,
//! where what names a CPU's sources and remedies adds its own.

use super::model::record::{KnownAndSeen, RecordUse};
use super::table::Table;
use crate::record::{Record, View, HORIZONS_S, HORIZON_NAMES, MINUTES};
use serde::Serialize;
use std::collections::BTreeMap;

/// One horizon of one CPU.
#[derive(Debug, Clone, Serialize)]
pub struct HorizonReport {
    /// `10 s`, `10 min`, `1 day`.
    pub horizon: &'static str,
    /// Its length, seconds.
    pub horizon_s: f64,
    /// What the record says.
    #[serde(flatten)]
    pub view: View,
    /// Lost to other tasks, irq, softirq and steal, percent.
    pub lost_pct: f64,
}

/// One CPU.
#[derive(Debug, Clone, Serialize)]
pub struct CpuNoiseReport {
    /// CPU number.
    pub cpu: usize,
    /// One per horizon, shortest first.
    pub horizons: Vec<HorizonReport>,
    /// Lines about this CPU that other parts add (its top sources, advice), printed under it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<String>,
}

/// The record as `goset noise` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NoiseReport {
    /// The file it was read from.
    pub file: String,
    /// When it was last updated, Unix seconds.
    pub updated: f64,
    /// Its first observation, Unix seconds.
    pub since: f64,
    /// Seconds since it was updated.
    pub age_s: f64,
    /// Per CPU.
    pub cpus: Vec<CpuNoiseReport>,
}

impl NoiseReport {
    /// `record` (read from `file`) as of `now`.
    pub fn new(file: &str, record: &Record, now: f64) -> NoiseReport {
        let views: Vec<BTreeMap<usize, View>> =
            (0..HORIZONS_S.len()).map(|h| record.view(h, now)).collect();
        let cpus = (record.cpus.keys())
            .map(|&cpu| CpuNoiseReport {
                cpu,
                horizons: (0..HORIZONS_S.len())
                    .map(|h| {
                        let view = views[h][&cpu];
                        HorizonReport {
                            horizon: HORIZON_NAMES[h],
                            horizon_s: HORIZONS_S[h],
                            lost_pct: view.lost_pct(),
                            view,
                        }
                    })
                    .collect(),
                extra: Vec::new(),
            })
            .collect();
        NoiseReport {
            file: file.to_string(),
            updated: record.updated,
            since: record.since,
            age_s: (now - record.updated).max(0.0),
            cpus,
        }
    }
}

fn pct(v: f64) -> String {
    format!("{v:.1}")
}

/// How long ago, in words: `12 s`, `4 min`, `3 h`.
fn ago(s: f64) -> String {
    match s {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.0} h", s / 3600.0),
    }
}

fn heading(r: &NoiseReport) -> String {
    format!(
        "Noise record ({}, updated {} ago, observing for {})\n",
        r.file,
        ago(r.age_s),
        ago((r.updated - r.since).max(0.0))
    )
}

/// The whole report: per CPU and horizon, the seconds observed, the percent lost and to what,
/// and the event rates; each CPU's extra lines under it.
pub fn render(r: &NoiseReport) -> String {
    let mut out = heading(r);
    let header = [
        "cpu",
        "horizon",
        "seen s",
        "lost %",
        "load",
        "irq",
        "softirq",
        "steal",
        "probe",
        "events/s",
        "dev irq/s",
    ];
    for c in &r.cpus {
        let mut t = Table::new("", &header);
        for (i, h) in c.horizons.iter().enumerate() {
            let v = &h.view;
            t.row(vec![
                if i == 0 {
                    c.cpu.to_string()
                } else {
                    String::new()
                },
                h.horizon.to_string(),
                format!("{:.0}", v.covered_s),
                pct(h.lost_pct),
                pct(v.load_pct),
                pct(v.irq_pct),
                pct(v.softirq_pct),
                pct(v.steal_pct),
                v.probe_pct.map_or("-".into(), pct),
                format!("{:.0}", v.events_per_s),
                format!("{:.0}", v.steerable_per_s),
            ]);
        }
        // One table per CPU keeps the extra lines under their CPU; the header once.
        let text = t.render();
        let mut lines = text.lines().skip(1);
        if c.cpu == r.cpus[0].cpu {
            if let Some(h) = lines.next() {
                out.push_str(h);
                out.push('\n');
            }
        } else {
            lines.next();
        }
        for l in lines {
            out.push_str(l);
            out.push('\n');
        }
        for e in &c.extra {
            out.push_str(&format!("        {e}\n"));
        }
    }
    out
}

/// The short form for bare `goset`: one line per CPU, the percent lost over each horizon.
pub fn render_brief(r: &NoiseReport) -> String {
    let names: Vec<String> = HORIZON_NAMES
        .iter()
        .map(|h| format!("lost % {h}"))
        .collect();
    let mut header = vec!["cpu"];
    header.extend(names.iter().map(String::as_str));
    let mut t = Table::new(heading(r).trim_end(), &header);
    for c in &r.cpus {
        let mut row = vec![c.cpu.to_string()];
        row.extend(c.horizons.iter().map(|h| pct(h.lost_pct)));
        t.row(row);
    }
    t.render()
}

/// The rows of [`KnownAndSeen`] for `task_cpus`: `minutes` is the record's view at selection,
/// `seen` the run's figure per CPU.
pub fn known_and_seen(
    task_cpus: &[usize],
    minutes: &BTreeMap<usize, View>,
    seen: &BTreeMap<usize, f64>,
) -> Vec<KnownAndSeen> {
    (task_cpus.iter())
        .map(|&cpu| {
            let v = minutes.get(&cpu).copied().unwrap_or_default();
            KnownAndSeen {
                cpu,
                known_lost_pct: v.lost_pct(),
                known_covered_s: v.covered_s,
                seen_lost_pct: seen.get(&cpu).copied(),
            }
        })
        .collect()
}

/// The Noise record table of a run's report: what the record knew of each task CPU (`-` for
/// nothing), whether that counted in the selection, and what the run saw.
pub fn render_known_and_seen(u: &RecordUse) -> String {
    let rows = &u.cpus;
    if rows.is_empty() {
        return String::new();
    }
    let title = format!(
        "Noise record ({} horizon) against this run{}",
        HORIZON_NAMES[MINUTES],
        if u.informed {
            ""
        } else {
            " (too little observed to count in the selection)"
        }
    );
    let mut t = Table::new(
        &title,
        &[
            "cpu",
            "known lost %",
            "seen s",
            "run saw irq+softirq+steal %",
        ],
    );
    for r in rows {
        t.row(vec![
            r.cpu.to_string(),
            if r.known_covered_s > 0.0 {
                pct(r.known_lost_pct)
            } else {
                "-".into()
            },
            format!("{:.0}", r.known_covered_s),
            r.seen_lost_pct.map_or("n/a".into(), pct),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::decay::Observation;

    #[test]
    fn renders_each_cpu_under_one_header_with_its_extra_lines() {
        let mut rec = Record::new("m", 0.0);
        for i in 0..30 {
            let obs = Observation {
                secs: 1.0,
                load_pct: Some(if i % 10 < 1 { 100.0 } else { 0.0 }),
                ..Observation::default()
            };
            rec.observe(1, i as f64, &obs);
            rec.observe(
                0,
                i as f64,
                &Observation {
                    load_pct: Some(0.0),
                    ..obs
                },
            );
        }
        let mut r = NoiseReport::new("/x/noise.record", &rec, 30.0);
        r.cpus[1].extra.push("top: spinner (pid 7)".into());
        let text = render(&r);
        assert_eq!(text.matches("horizon").count(), 1, "{text}");
        assert!(text.contains("top: spinner"), "{text}");
        let day = &r.cpus[1].horizons[2];
        assert!((day.lost_pct - 10.0).abs() < 0.1, "{day:?}");
        let brief = render_brief(&r);
        assert_eq!(brief.lines().count(), 4, "{brief}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["cpus"][1]["horizons"][1]["horizon"], "10 min");
        assert!(json["cpus"][1]["horizons"][1]["load_pct"].as_f64().unwrap() > 9.0);
        let rows = known_and_seen(&[1], &rec.view(MINUTES, 30.0), &BTreeMap::from([(1, 2.0)]));
        let used = RecordUse {
            informed: true,
            sample_ms: 30,
            cpus: rows,
        };
        let table = render_known_and_seen(&used);
        assert!(
            table.contains("run saw") && !table.contains("too little"),
            "{table}"
        );
    }
}
