//! `goset noise [--watch DURATION] [--json FILE]`: the node's noise record per CPU and horizon,
//! after (with `--watch`) sampling every CPU into it for DURATION, at a cost it reports.

use crate::error::{Error, Result};
use crate::explain::{self, CpuExplanation, Reading};
use crate::fsroot::FsRoot;
use crate::noise::Snapshot;
use crate::output;
use crate::record::{feed, file, Record};
use crate::report::record::{render, NoiseReport};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest `--watch`: a day (the longest horizon).
pub const MAX_WATCH: Duration = Duration::from_secs(86_400);

/// What a watch did and cost.
#[derive(Debug, Clone, Serialize)]
pub struct WatchCost {
    /// How long it watched, seconds.
    pub secs: f64,
    /// Snapshots of the counters it took.
    pub polls: u64,
    /// CPU time it used, seconds.
    pub cpu_s: f64,
    /// That time as a percent of one CPU over the watch.
    pub cpu_pct: f64,
}

/// How long `goset noise` without `--watch` looks at what runs on each CPU, to name it.
pub const LOOK: Duration = Duration::from_secs(1);

/// The JSON of `goset noise`.
#[derive(Debug, Serialize)]
struct Json<'a> {
    watch: Option<&'a WatchCost>,
    record: Option<&'a NoiseReport>,
    /// Per CPU, what ran there over the watch (or [`LOOK`]): its top interrupt lines,
    /// softirq kinds and threads, with advice.
    explained: &'a BTreeMap<usize, CpuExplanation>,
    warnings: &'a [String],
}

/// Samples every CPU for `length` into a record (a poll each [`feed::FEED_PERIOD`]; a signal
/// ends it early) and returns it with what it cost.
fn watch(length: Duration, machine: &str) -> (Record, WatchCost) {
    let started = Instant::now();
    let cpu_before = crate::housekeeper::own_cpu_time();
    let root = FsRoot::default();
    let mut f = feed::Feed::start(&root, machine, Vec::new(), Snapshot::read(&root));
    let mut polls = 1;
    while started.elapsed() < length && crate::signals::pending().is_none() {
        let left = length.saturating_sub(started.elapsed());
        crate::signals::sleep(left.min(feed::FEED_PERIOD));
        f.take();
        polls += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu_s = crate::housekeeper::own_cpu_time()
        .saturating_sub(cpu_before)
        .as_secs_f64();
    let cost = WatchCost {
        secs,
        polls,
        cpu_s,
        cpu_pct: 100.0 * cpu_s / secs.max(1e-9),
    };
    (f.record, cost)
}

/// Runs `goset noise`; `quiet`: no report on stderr (the watch's cost and warnings still).
pub fn run(watch_for: Option<&str>, json: Option<&Path>, quiet: bool) -> Result<()> {
    let length = watch_for
        .map(|w| crate::cli::parse_duration(w, "--watch"))
        .transpose()
        .map_err(Error::Usage)?;
    if let Some(l) = length.filter(|l| l.is_zero() || *l > MAX_WATCH) {
        return Err(Error::Usage(format!(
            "--watch {}: from 1 s to {} s (a day)",
            l.as_secs_f64(),
            MAX_WATCH.as_secs()
        )));
    }
    crate::signals::install();
    let mut warnings = Vec::new();
    let mut cost = None;
    // What ran on each CPU meanwhile, by name (this process's own threads left out).
    let root = FsRoot::default();
    let me = Some(std::process::id());
    let before = Reading::read(&root, me);
    let started = Instant::now();
    if length.is_none() && !(quiet && json.is_none()) {
        crate::signals::sleep(LOOK);
    }
    if let Some(length) = length {
        let ctx = file::Context::here();
        let (learned, c) = watch(length, &ctx.machine);
        output::to_stderr(&format!(
            "goset noise: watched {} CPUs for {:.1} s ({} polls of /proc/stat, /proc/interrupts \
             and /proc/softirqs): {:.1} ms of CPU time, {:.3} % of one CPU\n",
            learned.cpus.len(),
            c.secs,
            c.polls,
            1000.0 * c.cpu_s,
            c.cpu_pct
        ));
        match file::save(&file::Context::here(), &learned) {
            Ok((_, w)) => warnings.extend(w),
            Err(e) => return Err(Error::System(e)),
        }
        cost = Some(c);
    }
    let explained = explain::explain(&before, &Reading::read(&root, me), started.elapsed());
    let ctx = file::Context::here();
    let loaded = file::load(&ctx);
    warnings.extend(loaded.warnings);
    for w in &warnings {
        output::to_stderr(&format!("goset noise: warning: {w}\n"));
    }
    let mut report = (loaded.record.as_ref())
        .map(|(path, r)| NoiseReport::new(&path.display().to_string(), r, ctx.now));
    for c in report.iter_mut().flat_map(|r| r.cpus.iter_mut()) {
        let lines = explained
            .get(&c.cpu)
            .map(explain::render)
            .unwrap_or_default();
        c.extra.extend(lines.lines().map(str::to_string));
    }
    match &report {
        _ if quiet => {}
        Some(r) => output::to_stderr(&render(r)),
        None => output::to_stderr(&match file::own_dir() {
            Some(dir) => format!(
                "Noise record\n  none yet in {}: goset-run keeps one as it runs; `goset noise \
                 --watch 60s` samples every CPU into it\n",
                dir.display()
            ),
            None => format!("Noise record\n  off ({}={})\n", file::DIR_VAR, file::OFF),
        }),
    }
    // Without a record to hang them on, the sources come on their own.
    if report.is_none() && !quiet {
        let named: String = explained.values().map(named_cpu).collect();
        output::to_stderr(&named);
    }
    if let Some(path) = json {
        let value = Json {
            watch: cost.as_ref(),
            record: report.as_ref(),
            explained: &explained,
            warnings: &warnings,
        };
        super::print_json(&value, Some(path))?;
    }
    Ok(())
}

/// One CPU's sources, under a line naming the CPU (empty when nothing was seen).
fn named_cpu(e: &CpuExplanation) -> String {
    let lines = explain::render(e);
    if lines.is_empty() {
        return lines;
    }
    format!("  CPU {}\n{lines}", e.cpu)
}
