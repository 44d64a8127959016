//! `goset-run`: topology → noise → selection → plan export → the pinned task → report.
//!
//! The orchestration only, in the one order a run takes: each step is a call into the module
//! that owns it. Here, `cpus` selects and books, `prepare` writes the plan and the run
//! directory, `isolating` says what the cgroup and IRQ steering apply to, `execute` starts the
//! task and keeps house, `stderr` renders the report and `json` writes its JSON. This file
//! decides when the report is printed and written, and grows no step of its own.

mod cpus;
mod execute;
mod isolating;
mod json;
mod prepare;
mod ranks;
mod stderr;
mod step;

pub use cpus::machine_options;

use crate::cli::RunOptions;
use crate::error::{Error, Result};
use crate::fsroot::ReadError;
use crate::isolate::{self, Isolation};
use crate::noise::Noise;
use crate::output;
use crate::record;
use crate::report;
use crate::report::model::{IsolationReport, Report, RunReport, TelemetryReport, ThreadReport};
use crate::topology::Topology;
use cpus::Selected;
use json::JsonSink;
use std::collections::BTreeMap;
use std::ffi::OsString;

/// The files the topology and the noise sampling could not read, once each.
fn errors_of(topo: &Topology, noise: &Noise) -> Vec<ReadError> {
    let mut errors = topo.errors.clone();
    merge_errors(&mut errors, &noise.errors);
    errors
}

/// Adds to `into` the errors of `more` it does not hold yet.
fn merge_errors(into: &mut Vec<ReadError>, more: &[ReadError]) {
    for e in more {
        if !into.contains(e) {
            into.push(e.clone());
        }
    }
}

/// How this run used the noise record: what it knew of each task CPU, against `seen` (lost %
/// per CPU over the run).
fn record_use(
    learned: &cpus::Learned,
    selection: &crate::select::Selection,
    noise: &Noise,
    seen: BTreeMap<usize, f64>,
) -> report::model::RecordUse {
    let known = learned.minutes.clone().unwrap_or_default();
    report::model::RecordUse {
        informed: learned.informed,
        sample_ms: noise.window_ms,
        cpus: report::record::known_and_seen(&selection.task_cpus, &known, &seen),
    }
}

/// The report's spelling of `--placement`: here, above both the options and the report, so
/// that the report does not depend on the command line.
impl From<crate::cli::PlacementMode> for report::model::PlacementMode {
    fn from(p: crate::cli::PlacementMode) -> report::model::PlacementMode {
        match p {
            crate::cli::PlacementMode::Thread => report::model::PlacementMode::Thread,
            crate::cli::PlacementMode::Mask => report::model::PlacementMode::Mask,
        }
    }
}

/// Runs `goset-run` with validated options; returns the exit code.
pub fn run(opts: &RunOptions) -> Result<i32> {
    crate::signals::install();
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 && opts.fsroot.is_live() {
        isolating::restore_dead_runs(opts.quiet, opts.isolation != Default::default());
    }
    let hierarchy = if opts.dry_run {
        None
    } else {
        isolate::preflight(&opts.fsroot, opts.isolation)?
    };
    let user = crate::privilege::invoking_user(|k| std::env::var(k).ok(), opts.keep_root)?;
    let Selected {
        topo,
        noise,
        selection,
        bookings,
        booked: _booked,
        mut learned,
    } = cpus::select_cpus(opts, None)?;
    if let Some(sig) = crate::signals::pending() {
        return Err(Error::Interrupted(sig));
    }
    let sel_report = report::model::selection_report(&topo, &noise, &selection);
    let head = stderr::Head {
        opts,
        sel_report: &sel_report,
        bookings: &bookings,
    };
    let mut errors = errors_of(&topo, &noise);
    let json = JsonSink::open(opts.json.as_deref())?;
    if opts.dry_run {
        let record_use = learned.as_ref().map(|l| {
            cpus::save_learned(opts, l);
            record_use(l, &selection, &noise, BTreeMap::new())
        });
        output::to_stderr(&head.dry_run(&errors));
        let mut report = Report::selected(&sel_report, opts.placement.into(), &bookings, &errors);
        report.noise_record = record_use;
        return Ok(json::with_report(0, json.write("goset-run", &report)));
    }

    let prepared = prepare::prepare(opts, &topo, &selection, user.as_ref())?;
    if let Some(sig) = crate::signals::pending() {
        return Err(Error::Interrupted(sig));
    }
    let mut isolation = Isolation::setup(
        &opts.fsroot,
        opts.isolation,
        hierarchy.as_ref(),
        &isolating::isolation_setup(opts, &topo, &selection)?,
    )?;
    let machine =
        (learned.as_mut()).map(|l| (l.ctx.machine.clone(), l.last.take(), l.booked.clone()));
    let run = execute::execute(opts, &selection, &prepared, &mut isolation, machine)?;
    let record_use = learned.as_mut().map(|l| {
        let seen = run.learned.as_ref().map_or_else(BTreeMap::new, |r| {
            // The longest horizon barely decays over the run: its average is the run's.
            let views = r.view(record::HORIZONS_S.len() - 1, l.ctx.now.max(r.updated));
            (views.into_iter())
                .map(|(c, v)| (c, v.lost_pct()))
                .collect()
        });
        if let Some(r) = &run.learned {
            l.record.merge(r);
        }
        cpus::save_learned(opts, l);
        record_use(l, &selection, &noise, seen)
    });
    let mut threads: Vec<ThreadReport> = run.threads.iter().map(ThreadReport::from).collect();
    // Threads by process, so that a process's rows stay together.
    threads.sort_by_key(|t| t.placement.pid);
    let mut processes = report::processes::build(&threads, &run.instances, |c| {
        topo.cpu(c).and_then(|i| i.node)
    });
    report::processes::assign_ranks(&mut processes, &selection.ranks, &run.ranks);
    let iso_report = (opts.isolation != Default::default()).then(|| isolation.finish());
    merge_errors(&mut errors, &run.errors);
    // Runs booked since this one selected, for the CPUs they share with it.
    let later = match opts.fsroot.is_live().then(crate::booking::Registry::open) {
        Some(Ok(r)) => r.live(false),
        _ => Vec::new(),
    };
    let mut report = Report::selected(&sel_report, opts.placement.into(), &bookings, &errors);
    report.run = Some(RunReport::from(&run.summary));
    report.threads = threads;
    report.processes = processes;
    report.telemetry = Some(TelemetryReport::from(&run.telemetry));
    report.isolation = iso_report.as_ref().map(IsolationReport::from);
    report.noise_record = record_use;
    output::to_stderr(&head.finished(&report, &errors, &later));
    let written = json.write("goset-run", &report);
    drop(prepared);
    Ok(json::with_report(run.exit_code, written))
}

/// The whole of `goset-run`: parse, validate, run; returns the process exit code.
pub fn main_with_args(program: &str, args: impl IntoIterator<Item = OsString>) -> i32 {
    use clap::Parser;
    crate::cli::ignore_empty_env();
    let args: Vec<OsString> = args.into_iter().collect();
    // The agent of `srun --goset` (slurm/goset_spank.c): not a flag of a run.
    if args.get(1).is_some_and(|a| a == "--slurm-step") {
        return step::main(&args[2..]);
    }
    let args = crate::cli::normalize_args(args);
    let cli = crate::cli::RunCli::try_parse_from(args)
        .unwrap_or_else(|e| crate::cli::exit_on_clap_error(e, program));
    run_args(program, &cli.run)
}

/// Validates and runs parsed run flags, printing any error as one line.
pub fn run_args(program: &str, args: &crate::cli::RunArgs) -> i32 {
    args.validate().and_then(|o| run(&o)).unwrap_or_else(|e| {
        let e = e.naming_limits();
        output::to_stderr(&format!("{program}: {e}\n"));
        e.exit_code()
    })
}
