//! This run's CPUs: the machine read, the noise sampled, the selection made and booked under
//! the booking registry's lock ([`crate::booking`]), with `--wait` waiting for other runs'
//! CPUs to free up.
//!
//! A dry run comes through here too, and books nothing. It starts and places nothing: what is
//! done with the CPUs is the rest of the launch's.

use crate::booking::{self, Booking};
use crate::cli::RunOptions;
use crate::error::{Error, Result};
use crate::fsroot::FsRoot;
use crate::noise::{self, Noise};
use crate::output;
use crate::probe;
use crate::record::{self, blend, feed, file::Context, Record};
use crate::select;
use crate::topology::Topology;
use goset_plan::CpuSet;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What selection decided, and the bookings it saw.
pub(super) struct Selected {
    pub topo: Topology,
    pub noise: Noise,
    pub selection: select::Selection,
    /// Other runs' bookings when the selection was made.
    pub bookings: Vec<Booking>,
    /// This run's booking (none for a dry run, or without a registry), held until the run ends.
    pub booked: Option<booking::Booked>,
    /// What this run adds to the node's noise record, and what the record knew (on the live
    /// machine only).
    pub learned: Option<Learned>,
}

/// What this run learns for the noise record, and what the record told its selection.
pub(super) struct Learned {
    /// This machine, when the selection was made.
    pub ctx: Context,
    /// Observations so far: the selection's sample; the run's housekeeper adds its own.
    pub record: Record,
    /// The record's minutes view at selection, where there was a record.
    pub minutes: Option<BTreeMap<usize, record::View>>,
    /// Whether it took part in the selection (it covered enough).
    pub informed: bool,
    /// The sample's last snapshot: where the run's own observations start.
    pub last: Option<noise::Snapshot>,
    /// Other runs' task CPUs when this one selected: their load is not recorded.
    pub booked: Vec<usize>,
}

/// The node's noise record, where one is trusted; each one ignored is said once (unless
/// `--quiet`).
fn known_record(opts: &RunOptions) -> Option<(Context, Record)> {
    let ctx = Context::here();
    let loaded = record::file::load(&ctx);
    if !opts.quiet {
        for w in &loaded.warnings {
            output::to_stderr(&format!("goset-run: warning: {w}\n"));
        }
    }
    loaded.record.map(|(_, r)| (ctx, r))
}

/// Adds what this run learned to the node's noise record (a failure is a warning, unless
/// `--quiet`: the run itself is done).
pub(super) fn save_learned(opts: &RunOptions, learned: &Learned) {
    let said = record::file::save(&learned.ctx, &learned.record);
    let lines = match said {
        Ok((_, warnings)) => warnings,
        Err(e) => vec![e],
    };
    if !opts.quiet {
        for w in lines {
            output::to_stderr(&format!("goset-run: warning: {w}\n"));
        }
    }
}

/// Reads the machine, samples the noise, then selects and books under the registry's lock
/// (see [`crate::booking`]): other runs' task CPUs are not candidates unless `--share`.
/// Shared by the dry run (which books nothing), the real one and a Slurm task's (`task`: its
/// part in `--near gpu:local-rank`).
pub(super) fn select_cpus(
    opts: &RunOptions,
    task: Option<&super::ranks::StepTask>,
) -> Result<Selected> {
    let root = &opts.fsroot;
    let topo = Topology::read(root)
        .map_err(|e| Error::System(format!("cannot read the topology: {e}")))?;
    let mut machine_select = machine_options(opts, &topo)?;
    let ranks = super::ranks::request(
        opts,
        &topo,
        |v| std::env::var_os(v).map(|x| x.into_encoded_bytes()),
        task,
    )?;
    let known = root.is_live().then(|| known_record(opts)).flatten();
    let registry = open_registry(root)?;
    // Before the sample: the probe's busy threads would be the sample's load.
    let probe = probe_candidates(opts, &topo, &machine_select, registry.as_ref());
    let window = opts.sample.unwrap_or_else(|| {
        let recent = (known.as_ref()).is_some_and(|(ctx, r)| blend::recent(r, ctx.now));
        Duration::from_millis(if recent {
            blend::SHORT_SAMPLE_MS
        } else {
            crate::cli::DEFAULT_SAMPLE_MS
        })
    });
    let snapshots = noise::sample_snapshots(root, window);
    let noise = (snapshots.as_ref())
        .map(|(before, after)| noise::noise_between(before, after))
        .unwrap_or_default();
    let minutes = (known.as_ref()).map(|(ctx, r)| r.view(record::MINUTES, ctx.now));
    // Steerable interrupts are about to be moved away: they do not count against a CPU.
    let blended = blend::scores(&noise, minutes.as_ref(), opts.isolation.steer);
    machine_select.sample_ms = blended.window_ms;
    machine_select.load_tie_pct = Some(blended.load_tie_pct);
    let mut scores = blended.scores;
    for p in probe.iter().flat_map(|p| &p.cpus) {
        scores.entry(p.cpu).or_default().probe_lost_pct = Some(p.lost_pct());
    }
    let keep = root.is_live() && record::file::own_dir().is_some();
    let mut learned = keep.then(|| Learned {
        ctx: (known.as_ref()).map_or_else(Context::here, |(c, _)| c.clone()),
        record: Record::new("", 0.0),
        minutes,
        informed: blended.informed,
        last: None,
        booked: Vec::new(),
    });
    let deadline = opts.wait.map(|w| Instant::now() + w);
    loop {
        let locked = match &registry {
            Some(r) => Some(r.lock(deadline).map_err(|e| lock_error(r, opts, e))?),
            None => None,
        };
        let bookings = registry.as_ref().map(|r| r.live(true)).unwrap_or_default();
        if let Some(l) = &mut learned {
            // Other runs' tasks are goset's own work, not noise: their CPUs' load is not
            // recorded (it would keep a CPU a finished run used looking busy for minutes).
            l.booked = booking::booked_cpus(&bookings);
            l.record = Record::new(&l.ctx.machine, l.ctx.now);
            if let Some((before, after)) = &snapshots {
                feed::add(&mut l.record, before, after, &l.booked);
            }
            // The probe's detours, weighted by how long it watched each CPU.
            for (p, c) in probe
                .iter()
                .flat_map(|p| p.cpus.iter().map(move |c| (p, c)))
            {
                let secs = p.duration_ms as f64 / 1000.0;
                l.record
                    .add_probe(c.cpu, l.ctx.now, c.lost_pct() / 100.0, secs);
            }
        }
        let mut select_opts = machine_select.clone();
        if !opts.share {
            select_opts.exclude.extend(booking::booked_cpus(&bookings));
        }
        let conflict = match choose(&topo, &scores, &select_opts, ranks.as_ref()) {
            Ok(selection) => {
                let booked = match (&registry, opts.dry_run) {
                    (Some(r), false) => Some(book(r, opts, &selection)?),
                    _ => None,
                };
                drop(locked);
                if let Some(l) = &mut learned {
                    l.last = snapshots.map(|(_, after)| after);
                }
                return Ok(Selected {
                    topo,
                    noise,
                    selection,
                    bookings,
                    booked,
                    learned,
                });
            }
            // Without the other runs' CPUs it would work: they are what is missing.
            Err(e) if choose(&topo, &scores, &machine_select, ranks.as_ref()).is_ok() => e,
            Err(e) => return Err(e.into()),
        };
        drop(locked);
        if deadline.is_some_and(|d| Instant::now() < d) {
            crate::signals::sleep(std::time::Duration::from_millis(200));
            if let Some(sig) = crate::signals::pending() {
                return Err(Error::Interrupted(sig));
            }
            continue;
        }
        return Err(held_error(opts, &bookings, conflict));
    }
}

/// The selection: with rank blocks, each rank's near its GPU ([`select::ranks`]).
fn choose(
    topo: &Topology,
    scores: &BTreeMap<usize, noise::Score>,
    opts: &select::Options,
    ranks: Option<&select::ranks::RankRequest>,
) -> std::result::Result<select::Selection, select::SelectError> {
    match ranks {
        Some(req) => select::ranks::plan_ranks(topo, scores, opts, req),
        None => select::plan(topo, scores, opts),
    }
}

/// `--probe`: the detour probe on the candidate CPUs other runs have not booked (a probe's
/// busy thread on another run's CPU would disturb that run, even with `--share`), with a line
/// on stderr saying what it found and cost (unless `--quiet`). `None` without `--probe`.
fn probe_candidates(
    opts: &RunOptions,
    topo: &Topology,
    select_opts: &select::Options,
    registry: Option<&booking::Registry>,
) -> Option<probe::Probe> {
    if opts.probe.is_zero() {
        return None;
    }
    let booked = registry.map_or_else(Vec::new, |r| booking::booked_cpus(&r.live(false)));
    let cpus: Vec<usize> = (topo.candidates().into_iter())
        .filter(|c| !select_opts.exclude.contains(c) && !booked.contains(c))
        .collect();
    let found = probe::run(&cpus, opts.probe, probe::DEFAULT_THRESHOLD);
    if !opts.quiet {
        output::to_stderr(&probe_line(&found));
    }
    Some(found)
}

/// One line of what the probe found: its policy and cost, and each CPU's lost time.
fn probe_line(p: &probe::Probe) -> String {
    let lost: Vec<String> = (p.cpus.iter())
        .map(|c| format!("{} {:.1}%", c.cpu, c.lost_pct()))
        .collect();
    let failed: String = (p.failed.iter())
        .map(|(cpu, why)| format!("; CPU {cpu} not probed: {why}"))
        .collect();
    format!(
        "goset-run: probe: {} ms at {}, {:.0} CPU-ms; lost per CPU: {}{failed}\n",
        p.duration_ms,
        p.policy(),
        p.cost_cpu_ms,
        lost.join(", ")
    )
}

/// The booking registry, on the live machine only: another machine's dump has no runs of this
/// one to avoid. Without it (a warning) runs select as if alone; out of descriptors (EMFILE)
/// the run could not go on anyway, and that is its one error.
fn open_registry(root: &FsRoot) -> Result<Option<booking::Registry>> {
    Ok(match root.is_live().then(booking::Registry::open) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) if e.raw_os_error() == Some(libc::EMFILE) => {
            return Err(Error::System(format!(
                "cannot open the booking registry: {e}"
            )))
        }
        Some(Err(e)) => {
            output::to_stderr(&format!(
                "goset-run: no booking registry ({e}): concurrent runs may pick the same CPUs\n"
            ));
            None
        }
        None => None,
    })
}

/// The registry's lock not taken: a signal, a holder past the deadline (named), or I/O.
fn lock_error(registry: &booking::Registry, opts: &RunOptions, e: booking::LockError) -> Error {
    match e {
        booking::LockError::Interrupted(sig) => Error::Interrupted(sig),
        booking::LockError::Held(holder) => Error::System(format!(
            "the booking registry's lock {}/lock is held by {holder}{}; {}",
            registry.dir().display(),
            match opts.wait {
                Some(w) => format!(" for more than --wait {}", w.as_secs()),
                None => format!(" for more than {} s", booking::LOCK_BOUND.as_secs()),
            },
            "a launcher holds it for milliseconds: that process is stuck, or not goset's"
        )),
        booking::LockError::Io(e) => {
            Error::System(format!("cannot lock {}: {e}", registry.dir().display()))
        }
    }
}

/// Other runs hold the CPUs this one needs (`conflict`, why selection failed with them left
/// out): names those runs and the ways out.
fn held_error(opts: &RunOptions, bookings: &[Booking], conflict: select::SelectError) -> Error {
    let held: Vec<String> = bookings
        .iter()
        .map(|b| {
            let cpus: CpuSet = b.cpus.iter().copied().collect();
            format!("cpus {cpus} by {}", b.who())
        })
        .collect();
    let waited = if opts.wait.is_some() {
        ", still after --wait"
    } else {
        ""
    };
    Error::System(format!(
        "-n {}: other runs hold the CPUs needed{waited} ({conflict}): {}; --wait SECS waits for them, --share overlaps knowingly",
        opts.select.count,
        held.join(", ")
    ))
}

/// The selection options with what needs the machine: `--include` and `--exclude` resolved
/// on `topo` (a likwid expression names CPUs by their place in it), `--near`'s device found
/// under the fsroot. Each failure is a usage error, before the noise is sampled; a device that
/// is near every CPU alike is a warning (unless `--quiet`).
pub fn machine_options(opts: &RunOptions, topo: &Topology) -> Result<select::Options> {
    let resolve = |flag: &str, expr: &crate::topology::expr::CpuExpr| {
        (expr.resolve(topo)).map_err(|e| Error::Usage(format!("--{flag} '{expr}': {e}")))
    };
    let near = match &opts.near {
        Some(name) => {
            let device = crate::topology::Device::find(&opts.fsroot, name)
                .map_err(|e| Error::Usage(format!("--near {name}: {e}")))?;
            if !opts.quiet && !device.has_locality(&topo.online()) {
                output::to_stderr(&format!(
                    "goset-run: warning: --near {name}: {} has no NUMA node and every CPU is \
                     local to it (a VM, or firmware that does not say): the CPUs are not \
                     restricted, and memory is bound only as --numa says\n",
                    device.bus_id
                ));
            }
            Some(device)
        }
        None => None,
    };
    Ok(select::Options {
        include: resolve("include", &opts.include)?,
        exclude: resolve("exclude", &opts.exclude)?,
        near,
        ..opts.select.clone()
    })
}

/// Books `selection` for this launcher.
fn book(
    registry: &booking::Registry,
    opts: &RunOptions,
    selection: &select::Selection,
) -> Result<booking::Booked> {
    let me = crate::procfs::pid_stat::ProcessId::this(&FsRoot::default())
        .map_err(|e| Error::System(format!("cannot book CPUs: {e}")))?;
    let booking = Booking {
        pid: me.pid,
        start: me.start,
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        command: (opts.command.iter())
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        slurm: booking::slurm_step(|k| std::env::var(k).ok()),
        cpus: (selection.task_cpus.iter())
            .chain(&selection.spares)
            .copied()
            .collect(),
        housekeeper_cpu: selection.housekeeper_cpu,
    };
    registry
        .book(&booking)
        .map_err(|e| Error::System(format!("cannot book in {}: {e}", registry.dir().display())))
}
