//! `goset-run`: topology → noise → selection → plan export → the pinned task → report.
//!
//! The orchestration only: each step is a call into the module that owns it, and the one
//! place that writes the report to stderr and the JSON file.

use crate::booking::{self, Booking};
use crate::cli::{NoiseMoves, Placement, RunOptions};
use crate::error::{Error, Result};
use crate::fsroot::{FsRoot, ReadError};
use crate::housekeeper::noise_rule::NoiseRule;
use crate::housekeeper::outcome::TelemetryReport;
use crate::housekeeper::{policy::Policy, Housekeeper, Settings, ThreadReport};
use crate::instances;
use crate::isolate::{self, Isolation, IsolationReport};
use crate::noise::{self, Noise};
use crate::output;
use crate::placement;
use crate::privilege::User;
use crate::report::processes::ProcessReport;
use crate::report::{self, SelectionReport};
use crate::rundir::{self, RunDir};
use crate::select::{self, SmtPolicy};
use crate::summary::RunSummary;
use crate::task::{self, Ending, Launch, MainSlot, Task, Usage};
use crate::taskenv;
use crate::topology::Topology;
use goset_plan::{CpuSet, Plan};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

/// The version of the JSON report's layout, its top-level `schema`: raised when a key is
/// removed, renamed or changes meaning, not when one is added (docs/report.md).
pub const REPORT_SCHEMA: u32 = 1;

/// The JSON report (`--json FILE`), described in docs/report.md.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// [`REPORT_SCHEMA`], first, so that a reader can check it before the rest.
    pub schema: u32,
    /// The selection and its per-CPU rows.
    pub selection: &'a SelectionReport,
    /// How the threads were placed (`--placement`): `thread` (each on its own CPU) or `mask`
    /// (one shared mask of the task CPUs).
    pub placement: Placement,
    /// How the task ran; absent with `--dry-run`.
    pub run: Option<RunSummary>,
    /// Where each thread was placed (the placement log) and what it did (the housekeeper).
    pub threads: Vec<ThreadReport>,
    /// Each process of the task: its threads' CPUs and nodes, with `--instances` its copy
    /// and ending; empty with `--dry-run`.
    pub processes: Vec<ProcessReport>,
    /// Per task CPU counters over the run and the housekeeper's cost; absent with `--dry-run`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryReport>,
    /// What `--cgroup`, `--fence` and `--steer` changed and how it was undone; absent without
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationReport>,
    /// Other runs' bookings when this one selected.
    pub bookings: Vec<Booking>,
    /// Files that could not be read, once each.
    pub errors: Vec<ReadError>,
}

/// What selection decided, and the bookings it saw.
struct Selected {
    topo: Topology,
    noise: Noise,
    selection: select::Selection,
    /// Other runs' bookings when the selection was made.
    bookings: Vec<Booking>,
    /// This run's booking (none for a dry run, or without a registry).
    booked: Option<booking::Booked>,
}

/// Reads the machine, samples the noise, then selects and books under the registry's lock
/// (see [`crate::booking`]): other runs' task CPUs are not candidates unless `--share`.
/// Shared by the dry run (which books nothing) and the real one.
fn select_cpus(opts: &RunOptions) -> Result<Selected> {
    let root = &opts.fsroot;
    let topo = Topology::read(root)
        .map_err(|e| Error::System(format!("cannot read the topology: {e}")))?;
    let machine_select = machine_options(opts, &topo)?;
    let noise = noise::sample(root, opts.sample);
    let scores: BTreeMap<usize, f64> = noise
        .cpus
        .iter()
        // Steerable interrupts are about to be moved away: they do not count against a CPU.
        .map(|(&cpu, n)| (cpu, n.score(opts.isolation.steer, noise.window_ms)))
        .collect();
    // Another machine's dump has no runs of this one to avoid.
    let registry = match root.is_live().then(booking::Registry::open) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            output::to_stderr(&format!(
                "goset-run: no booking registry ({e}): concurrent runs may pick the same CPUs\n"
            ));
            None
        }
        None => None,
    };
    let deadline = opts.wait.map(|w| Instant::now() + w);
    loop {
        let locked = match &registry {
            Some(r) => Some(r.lock(deadline).map_err(|e| match e {
                booking::LockError::Interrupted(sig) => Error::Interrupted(sig),
                booking::LockError::Held(holder) => Error::System(format!(
                    "the booking registry's lock {}/lock is held by {holder}{}; {}",
                    r.dir().display(),
                    match opts.wait {
                        Some(w) => format!(" for more than --wait {}", w.as_secs()),
                        None => format!(" for more than {} s", booking::LOCK_BOUND.as_secs()),
                    },
                    "a launcher holds it for milliseconds: that process is stuck, or not goset's"
                )),
                booking::LockError::Io(e) => {
                    Error::System(format!("cannot lock {}: {e}", r.dir().display()))
                }
            })?),
            None => None,
        };
        let bookings = registry.as_ref().map(|r| r.live(true)).unwrap_or_default();
        let mut select_opts = machine_select.clone();
        if !opts.share {
            select_opts.exclude.extend(booking::booked_cpus(&bookings));
        }
        let conflict = match select::plan(&topo, &scores, &select_opts) {
            Ok(selection) => {
                let booked = match (&registry, opts.dry_run) {
                    (Some(r), false) => Some(book(r, opts, &selection)?),
                    _ => None,
                };
                drop(locked);
                return Ok(Selected {
                    topo,
                    noise,
                    selection,
                    bookings,
                    booked,
                });
            }
            // Without the other runs' CPUs it would work: they are what is missing.
            Err(e) if select::plan(&topo, &scores, &machine_select).is_ok() => e,
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
        return Err(Error::System(format!(
            "-n {}: other runs hold the CPUs needed{waited} ({conflict}): {}; --wait SECS waits for them, --share overlaps knowingly",
            opts.select.count,
            held.join(", ")
        )));
    }
}

/// The selection options with what needs the machine: `--include` and `--exclude` resolved
/// on `topo` (a likwid expression names CPUs by their place in it), `--near`'s device found
/// under the fsroot. Each failure is a usage error, before the noise is sampled; a device that
/// is near every CPU alike is a warning (unless `--quiet`).
pub fn machine_options(opts: &RunOptions, topo: &Topology) -> Result<select::Options> {
    let resolve = |flag: &str, expr: &crate::topology::CpuExpr| {
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
    let pid = std::process::id();
    let booking = Booking {
        pid,
        start: crate::procfs::stat::start_ticks(&crate::fsroot::FsRoot::default(), pid)
            .ok_or_else(|| Error::System("no start time in /proc/self/stat".into()))?,
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
        housekeeper: selection.housekeeper,
    };
    registry
        .book(&booking)
        .map_err(|e| Error::System(format!("cannot book in {}: {e}", registry.dir().display())))
}

/// Where `--json` goes, opened before anything runs (by the rules of [`crate::userfile`]) so
/// that a bad path is a usage error and not a lost report after the task ran.
enum JsonSink {
    None,
    Stdout,
    File(std::fs::File, std::path::PathBuf),
}

impl JsonSink {
    fn open(path: Option<&Path>) -> Result<JsonSink> {
        match path {
            None => Ok(JsonSink::None),
            Some(p) if p == Path::new("-") => Ok(JsonSink::Stdout),
            // Not truncated yet: a run that fails before the report leaves the old file.
            Some(p) => crate::userfile::open(p)
                .map(|f| JsonSink::File(f, p.to_path_buf()))
                .map_err(|e| Error::Usage(format!("--json {}: cannot create: {e}", p.display()))),
        }
    }

    /// Writes the report; a failure is reported on stderr and does not change the exit code.
    fn write(self, program: &str, report: &JsonReport) {
        use std::io::Write;
        let text = serde_json::to_string_pretty(report).expect("report serialises") + "\n";
        let (result, name) = match self {
            JsonSink::None => return,
            JsonSink::Stdout => (output::to_stdout(&text), "-".into()),
            // Only a regular file is emptied: a pipe or a terminal (`/dev/stdout`) cannot be.
            JsonSink::File(mut f, path) => (
                f.metadata()
                    .and_then(|m| if m.is_file() { f.set_len(0) } else { Ok(()) })
                    .and_then(|_| f.write_all(text.as_bytes())),
                path.display().to_string(),
            ),
        };
        if let Err(e) = result {
            output::to_stderr(&format!("{program}: cannot write --json {name}: {e}\n"));
        }
    }
}

fn errors_of(topo: &Topology, noise: &Noise) -> Vec<ReadError> {
    let mut errors = topo.errors.clone();
    merge_errors(&mut errors, &noise.errors);
    errors
}

fn merge_errors(into: &mut Vec<ReadError>, more: &[ReadError]) {
    for e in more {
        if !into.contains(e) {
            into.push(e.clone());
        }
    }
}

/// Everything the task is started with.
struct Prepared {
    launch: Launch,
    run_dir: Option<RunDir>,
    shim: bool,
    /// The command is one the shim loads into and places: a glibc program (not a script, whose
    /// interpreter is not inspected), not secure-exec, not one of goset's own programs.
    shim_reaches: bool,
}

/// Where the task's threads that take no slot go (helpers, sleepers, the skip mask): the
/// housekeeper CPU, or inside a cgroup, whose cpuset holds the task CPUs only, the last task
/// CPU (as when the housekeeper has no CPU of its own).
fn parked_cpu(opts: &RunOptions, selection: &select::Selection) -> usize {
    match selection.task_cpus.last() {
        Some(&last) if opts.isolation.cgroup => last,
        _ => selection.housekeeper,
    }
}

/// Resolves the command, writes the plan and the run directory, builds the task's environment.
fn prepare(
    opts: &RunOptions,
    topo: &Topology,
    selection: &select::Selection,
    user: Option<&User>,
) -> Result<Prepared> {
    let command = crate::task::resolve_command(&opts.command[0])?;
    // One shared mask: the task runs as under `taskset -c`, without the shim.
    let shim = match opts.placement {
        Placement::Thread => rundir::find_shim()?,
        Placement::Mask => None,
    };
    let task_set: CpuSet = selection.task_cpus.iter().copied().collect();
    let mut reservation = task_set;
    let parked = parked_cpu(opts, selection);
    reservation.insert(parked);
    // A slot that moves off a noisy CPU takes its threads there: the shim must allow it.
    for c in noise_pool(opts, selection) {
        reservation.insert(c);
    }
    let mut plan = Plan::new(&selection.task_cpus, Some(parked), reservation).ok_or_else(|| {
        Error::Usage(format!(
            "-n {}: more CPUs than a plan holds",
            selection.task_cpus.len()
        ))
    })?;
    plan.skip = opts.skip;
    plan.main_on_housekeeper = opts.main_on_housekeeper;
    // Locality, for a task of several processes (see goset_plan::locality).
    let places: Vec<_> = (selection.task_cpus.iter())
        .map(|&c| topo.place_of(c))
        .collect();
    plan.set_places(&places);
    plan.smt_pack = opts.select.smt == SmtPolicy::Pack;
    plan.per_process = opts.per_process.unwrap_or(0);
    plan.launcher_pid = std::process::id().into();
    // So that a process of the task in a sandbox's PID namespace knows its ids mean nothing
    // here (0, unknown, where /proc does not say).
    plan.pidns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });

    let mut shim_reaches = false;
    let run_dir = match &shim {
        Some(lib) => {
            let linkage = crate::elf::read_file(&command);
            let why = linkage.why_no_shim();
            // The shim stays out of goset's own programs (resolved as the kernel will), and
            // glibc ignores it in a secure-exec program.
            let exe = std::fs::canonicalize(&command).unwrap_or_else(|_| command.clone());
            shim_reaches = linkage.loads_shim()
                && !crate::elf::is_secure_exec(&command)
                && !goset_plan::plan::is_goset_program(exe.as_os_str().as_encoded_bytes());
            if let Some(why) = why.filter(|_| !opts.quiet) {
                output::to_stderr(&format!(
                    "goset-run: {}: {why}: libgoset.so cannot reach it, so the housekeeper places its threads\n",
                    opts.command[0].to_string_lossy()
                ));
            }
            let dir = RunDir::create(&plan, opts.log.as_deref(), lib, user)?;
            Some(dir)
        }
        None if opts.placement == Placement::Mask => None,
        None => {
            output::to_stderr(&format!(
                "goset-run: libgoset.so not found beside goset-run (set {}): threads share the task's mask\n",
                rundir::LIB_ENV
            ));
            None
        }
    };
    let env = taskenv::task_env(
        |name| std::env::var_os(name),
        match opts.per_process {
            Some(n) => taskenv::Threads::PerProcess(n),
            None => taskenv::Threads::Slots(selection.task_cpus.len()),
        },
        run_dir.as_ref().map(|dir| taskenv::Shim {
            preload: dir.preload(),
            plan_dir: dir.path(),
        }),
    );
    let launch = Launch {
        stdio: None,
        argv: opts.command.clone(),
        cpus: task_set,
        node: selection.node,
        env,
        // The plan names the log; a GOSET_LOG left in the environment would override it and
        // hide the task's threads from the report.
        env_remove: match opts.placement {
            Placement::Thread => vec![
                "GOSET_LOG".into(),
                "GOSET_CPUS".into(),
                "GOSET_SLOTS".into(),
                "GOSET_LOG_FD".into(),
            ],
            // A shim the user preloads (in their own LD_PRELOAD) must not find a plan either.
            Placement::Mask => vec![
                "GOSET_LOG".into(),
                "GOSET_CPUS".into(),
                "GOSET_PLAN".into(),
                "GOSET_SLOTS".into(),
                "GOSET_LOG_FD".into(),
            ],
        },
        die_with_launcher: opts.die_with_launcher,
        // Set once the slot table is mapped.
        main_slot: None,
        inherit: Vec::new(),
        cgroup: None,
        user: user.cloned(),
    };
    Ok(Prepared {
        launch,
        shim: shim.is_some(),
        shim_reaches,
        run_dir,
    })
}

/// What the run produced.
struct Executed {
    summary: RunSummary,
    threads: Vec<ThreadReport>,
    telemetry: TelemetryReport,
    errors: Vec<ReadError>,
    exit_code: i32,
    /// Each copy's pid and ending, in index order (one without `--instances`).
    instances: Vec<(i32, Ending)>,
}

/// Where a slot may go when its CPU turns noisy: the spares booked for it, with `--adapt` the
/// candidates this run does not use (other runs' CPUs were no candidates; the housekeeper's
/// only when no other is left, as a spare is shared when nothing else is), or nowhere.
fn noise_pool(opts: &RunOptions, selection: &select::Selection) -> Vec<usize> {
    match opts.noise_moves {
        NoiseMoves::Off => Vec::new(),
        NoiseMoves::Spares => selection.spares.clone(),
        NoiseMoves::Unused => {
            let unused: Vec<usize> = (selection.ranking.iter().copied())
                .filter(|c| !selection.task_cpus.contains(c) && !selection.fenced.contains(c))
                .collect();
            let others: Vec<usize> = (unused.iter().copied())
                .filter(|&c| c != selection.housekeeper)
                .collect();
            if others.is_empty() {
                unused
            } else {
                others
            }
        }
    }
}

/// Starts the task, keeps house until it ends, and adds up the run.
fn execute(
    opts: &RunOptions,
    selection: &select::Selection,
    prepared: &Prepared,
    isolation: &mut Isolation,
) -> Result<Executed> {
    let settings = Settings {
        task_cpus: selection.task_cpus.clone(),
        park_cpu: parked_cpu(opts, selection),
        interval: opts.interval,
        // Under one shared mask the housekeeper only watches: it places and moves nothing.
        policy: Policy {
            spread_busy: opts.adapt && opts.placement == Placement::Thread,
            place: opts.placement == Placement::Thread,
            ..Default::default()
        },
        spares: noise_pool(opts, selection),
        noise_rule: NoiseRule::default(),
        launcher_cpu: selection.housekeeper,
        steer: opts.isolation.steer,
    };
    let run_dir = prepared.run_dir.as_ref();
    let (table, table_fd) = slot_table(run_dir, &selection.task_cpus)?;
    let root = FsRoot::default();
    let mut hk = Housekeeper::new(&root, settings, table, run_dir.map(|d| d.log_path()));
    if let Some((kept, true)) = run_dir.map(|d| d.log_kept()) {
        hk.free_log_after(kept);
    }
    let started = Instant::now();
    // Under the shim the main thread is born on its slot, which the shim adopts; with
    // --main-on-housekeeper the shim sends it to the housekeeper CPU instead, and a program the
    // shim cannot reach has all its threads placed (and reported) by the housekeeper.
    let main_slot = (prepared.shim_reaches && !opts.main_on_housekeeper).then(|| MainSlot {
        table,
        cpus: selection.task_cpus.clone(),
    });
    let mut launch = Launch {
        main_slot,
        cgroup: isolation.cgroup_join(),
        ..prepared.launch.clone()
    };
    let log_fd = run_dir.map(|d| inherited_log(d.log_path())).transpose()?;
    for (fd, var) in [(&table_fd, "GOSET_SLOTS"), (&log_fd, "GOSET_LOG_FD")] {
        if let Some(fd) = fd {
            use std::os::fd::AsRawFd;
            launch.env.push(inherited(var, fd));
            launch.inherit.push(fd.as_raw_fd());
        }
    }
    let (tasks, relays) = start_instances(opts.instances, &launch)?;
    for task in &tasks {
        hk.attach(task.pid());
    }
    pin_self(selection.housekeeper);
    let ended = task::wait_all(&tasks, opts.interval, || {
        hk.poll();
        isolation.check_drift();
    });
    let wall_s = started.elapsed().as_secs_f64();
    relays.finish();
    // The first copy to fail gives the exit status; usage adds up.
    let ending = (ended.iter().map(|e| e.1))
        .find(|e| *e != Ending::Exited(0))
        .unwrap_or(Ending::Exited(0));
    let rusage = (ended.iter()).fold(Usage::default(), |sum, e| sum.plus(&e.2));
    let mut instances: Vec<(i32, Ending)> = tasks.iter().map(|t| (t.pid(), ending)).collect();
    for &(i, e, _) in &ended {
        instances[i].1 = e;
    }
    let outcome = hk.finish();

    let log = run_dir
        .map(|d| placement::read(d.log_path(), d.log_kept().0))
        .unwrap_or_default();
    let threads = outcome.thread_reports(&log);
    let seen_cpu_s = threads.iter().filter_map(|t| t.cpu_s).sum();
    let summary = RunSummary::new(wall_s, ending, rusage.at_least(seen_cpu_s), prepared.shim);
    let mut telemetry = outcome.telemetry(&threads);
    // The launcher's CPU: inside a cgroup the housekeeper parks threads on a task CPU instead.
    telemetry.housekeeper.cpu = selection.housekeeper;
    Ok(Executed {
        summary,
        threads,
        telemetry,
        errors: outcome.errors,
        exit_code: ending.exit_code(),
        instances,
    })
}

/// Starts the copies of the task: without `--instances` one, as it is; with `--instances K`,
/// K copies each with `GOSET_INSTANCE=i`, and for K > 1 each copy's output relayed with its
/// index in front ([`instances`]). Each copy's main thread is born on a slot claimed for it,
/// as the one task's is (the housekeeper leaves it to the shim, which moves it into the copy's
/// block if the slot is not in it). A copy that cannot start ends the ones already started (SIGKILL, reaped) before the
/// error is returned.
fn start_instances(
    instances: Option<usize>,
    launch: &Launch,
) -> Result<(Vec<Task>, instances::Relays)> {
    let count = instances.unwrap_or(1);
    let mut tasks: Vec<Task> = Vec::with_capacity(count);
    let mut relays = instances::Relays::default();
    for i in 0..count {
        let mut one = launch.clone();
        if instances.is_some() {
            one.env
                .push(("GOSET_INSTANCE".into(), i.to_string().into()));
        }
        let pipes = if count > 1 {
            let pipes = instances::Pipes::new()
                .map_err(|e| Error::System(format!("cannot make the instances' pipes: {e}")))?;
            one.stdio = Some(pipes.write_ends());
            Some(pipes)
        } else {
            None
        };
        match Task::start(&one) {
            Ok(t) => tasks.push(t),
            Err(e) => {
                for t in &tasks {
                    // SAFETY: kill takes a pid and a signal.
                    unsafe { libc::kill(t.pid(), libc::SIGKILL) };
                }
                task::wait_all(&tasks, std::time::Duration::from_millis(10), || {});
                return Err(e);
            }
        }
        if let Some(pipes) = pipes {
            relays.add(i, pipes);
        }
    }
    Ok((tasks, relays))
}

/// What `--quiet` prints: the Errors table without the machine's facts (no cpufreq or thermal
/// driver, as on every VM), which are not errors of this run.
fn quiet_errors(errors: &[ReadError]) -> String {
    let of_this_run: Vec<ReadError> = errors
        .iter()
        .filter(|e| !e.is_machine_fact())
        .cloned()
        .collect();
    report::telemetry::render_errors(&of_this_run)
}

/// Runs `goset-run` with validated options; returns the exit code.
pub fn run(opts: &RunOptions) -> Result<i32> {
    crate::signals::install();
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 && opts.fsroot.is_live() {
        restore_dead_runs(opts.quiet, opts.isolation != Default::default());
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
    } = select_cpus(opts)?;
    if let Some(sig) = crate::signals::pending() {
        return Err(Error::Interrupted(sig));
    }
    let sel_report = report::selection_report(&topo, &noise, &selection);
    let bookings_text = report::render_bookings(
        &bookings,
        if opts.share {
            "Bookings of other runs (--share: their CPUs may be shared)"
        } else {
            "Bookings of other runs (their CPUs left out)"
        },
    );
    let mut errors = errors_of(&topo, &noise);
    let json = JsonSink::open(opts.json.as_deref())?;
    if opts.dry_run {
        let errors_table = report::telemetry::render_errors(&errors);
        if opts.quiet {
            output::to_stderr(&quiet_errors(&errors));
        } else {
            output::to_stderr(&format!(
                "{}{}{}{bookings_text}{errors_table}",
                report::banner(),
                report::render_selection(&sel_report),
                report::render_placement(opts.placement, &selection)
            ));
        }
        let report = JsonReport {
            schema: REPORT_SCHEMA,
            selection: &sel_report,
            placement: opts.placement,
            run: None,
            threads: Vec::new(),
            processes: Vec::new(),
            telemetry: None,
            isolation: None,
            bookings,
            errors,
        };
        json.write("goset-run", &report);
        return Ok(0);
    }

    let prepared = prepare(opts, &topo, &selection, user.as_ref())?;
    if let Some(sig) = crate::signals::pending() {
        return Err(Error::Interrupted(sig));
    }
    let mut isolation = Isolation::setup(
        &opts.fsroot,
        opts.isolation,
        hierarchy.as_ref(),
        &isolation_setup(opts, &topo, &selection)?,
    )?;
    let mut run = execute(opts, &selection, &prepared, &mut isolation)?;
    // Threads by process, so that a process's rows stay together.
    run.threads.sort_by_key(|t| t.placement.pid);
    let processes = report::processes::build(&run.threads, &run.instances, |c| {
        topo.cpu(c).and_then(|i| i.node)
    });
    let iso_report = (opts.isolation != Default::default()).then(|| isolation.finish());
    merge_errors(&mut errors, &run.errors);
    let errors_table = report::telemetry::render_errors(&errors);
    if opts.quiet {
        output::to_stderr(&quiet_errors(&errors));
    } else {
        use report::telemetry as tele;
        let threads_table = if run.threads.is_empty() {
            String::new()
        } else {
            tele::render_threads(&run.threads)
        };
        let iso_table = iso_report
            .as_ref()
            .map(|r| report::isolation::render_isolation(r, &selection))
            .unwrap_or_default();
        let irq_drift = iso_report
            .as_ref()
            .and_then(|r| r.steer.as_ref())
            .map(|s| s.drift);
        output::to_stderr(&format!(
            "{}{}{}{bookings_text}{}{}{}{}{}{iso_table}{errors_table}",
            report::banner(),
            report::render_selection(&sel_report),
            report::render_placement(opts.placement, &selection),
            tele::render_telemetry(&run.telemetry),
            report::processes::render(&processes),
            threads_table,
            tele::render_moves(&run.telemetry),
            tele::render_run(&run.summary, &run.telemetry, irq_drift, opts.placement),
        ));
    }
    let report = JsonReport {
        schema: REPORT_SCHEMA,
        selection: &sel_report,
        placement: opts.placement,
        run: Some(run.summary),
        threads: run.threads,
        processes,
        telemetry: Some(run.telemetry),
        isolation: iso_report,
        bookings,
        errors,
    };
    json.write("goset-run", &report);
    drop(prepared);
    Ok(run.exit_code)
}

/// Undoes the journals of dead launchers before this run selects (their IRQs and cgroups
/// would skew the noise and block the group's name), saying so unless `quiet`. What could not
/// be undone is this run's business only when it isolates itself (`isolating`): a plain run
/// says nothing of other runs' leftovers (`goset restore` does).
fn restore_dead_runs(quiet: bool, isolating: bool) {
    let (done, journals) = isolate::restore(&rundir::base_dir());
    if done.restored > 0 && !quiet {
        output::to_stderr(&format!(
            "goset-run: undid {} change(s) left by {journals} run(s) whose launcher died\n",
            done.restored
        ));
    }
    if isolating {
        for why in &done.failed {
            output::to_stderr(&format!("goset-run: restore: {why}\n"));
        }
    }
}

/// The group's CPUs (the task CPUs, fenced siblings and `pool`, where slots may move) and the
/// CPUs IRQs leave: the same less the `--adapt` candidates, which this run does not reserve
/// (steering every unused CPU would crowd all IRQs onto the rest); booked spares are left.
fn isolated_cpus(selection: &select::Selection, pool: &[usize]) -> (CpuSet, CpuSet) {
    let mut away: CpuSet = selection.task_cpus.iter().copied().collect();
    for &c in selection.fenced.iter().chain(&selection.spares) {
        away.insert(c);
    }
    let mut group = away;
    for &c in pool {
        group.insert(c);
    }
    (group, away)
}

/// What the isolation of this run is about: the group's CPUs (task CPUs and fenced siblings)
/// and memory nodes (the `--numa` node, else every node of those CPUs), the CPUs IRQs leave
/// and where they go.
fn isolation_setup(
    opts: &RunOptions,
    topo: &Topology,
    selection: &select::Selection,
) -> Result<isolate::Setup> {
    let (cpus, away) = isolated_cpus(selection, &noise_pool(opts, selection));
    let mut mems = CpuSet::new();
    match selection.node {
        Some(n) => {
            mems.insert(n);
        }
        None => {
            for c in cpus.iter() {
                mems.insert(topo.cpu(c).and_then(|i| i.node).unwrap_or(0));
            }
        }
    }
    let onto: CpuSet = topo
        .cpus
        .iter()
        .filter(|c| c.online && !away.contains(c.cpu))
        .map(|c| c.cpu)
        .collect();
    let name =
        rundir::own_name().map_err(|e| Error::System(format!("cannot name the journal: {e}")))?;
    Ok(isolate::Setup {
        journals: isolate::journal::dir_in(&rundir::base_dir()),
        name,
        group_name: isolate::cgroup::group_name(&opts.command[0]),
        cpus,
        mems,
        away,
        onto,
    })
}

/// The slot table shared with the shim (the run directory's `slots` file), stamped with the
/// plan's CPUs, and a descriptor of it that the task inherits (see [`inherited`]); or a
/// private table when there is no shim, so that the housekeeper still hands out slots without
/// overlap.
fn slot_table(
    run_dir: Option<&RunDir>,
    cpus: &[usize],
) -> Result<(&'static goset_plan::SlotTable, Option<OwnedFd>)> {
    use std::os::fd::AsRawFd;
    let Some(dir) = run_dir else {
        let table = goset_plan::slots::map(None)
            .ok_or_else(|| Error::System("cannot map a slot table".into()))?;
        table.init(cpus.len());
        return Ok((table, None));
    };
    let path = dir.path().join(goset_plan::plan::SLOTS_FILE);
    let fail = |e: std::io::Error| Error::System(format!("cannot map {}: {e}", path.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(fail)?;
    let table = goset_plan::slots::map(Some(file.as_raw_fd()))
        .ok_or_else(|| fail(std::io::Error::last_os_error()))?;
    table.stamp(goset_plan::plan::cpus_hash(cpus.iter().copied()));
    Ok((table, Some(high_copy(file.as_raw_fd()).map_err(fail)?)))
}

/// A descriptor the task inherits and the variable that names it: `GOSET_SLOTS` the slot
/// table (`/proc/self/fd/<n>`), which a process that cannot open the run directory's `slots`
/// (a link into the launcher's `/proc/<pid>/fd`) maps instead: in a sandbox with a PID
/// namespace and a /proc of its own, or after switching to another user; `GOSET_LOG_FD` the
/// log (`<n>`), which a process that switched to another user writes to.
fn inherited(var: &str, fd: &OwnedFd) -> (OsString, OsString) {
    use std::os::fd::AsRawFd;
    let value = match var {
        "GOSET_SLOTS" => format!("/proc/self/fd/{}", fd.as_raw_fd()),
        _ => fd.as_raw_fd().to_string(),
    };
    (var.into(), value.into())
}

/// The placement log open for appending, on a high descriptor, for the task to inherit.
fn inherited_log(path: &Path) -> Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let fail = |e: std::io::Error| Error::System(format!("cannot open {}: {e}", path.display()));
    let file = crate::bounded::open_regular(path, std::fs::OpenOptions::new().append(true))
        .map_err(fail)?;
    high_copy(file.as_raw_fd()).map_err(fail)
}

/// A close-on-exec copy of `fd` out of the low numbers a program may expect free (the shim
/// keeps its own there too).
fn high_copy(fd: std::os::fd::RawFd) -> std::io::Result<OwnedFd> {
    let high = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(512))?;
    // SAFETY: fcntl returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(high) })
}

/// Moves the launcher onto the housekeeper CPU, away from the task's CPUs.
fn pin_self(cpu: usize) {
    let set = CpuSet::single(cpu);
    let (mask, len) = set.as_raw();
    // SAFETY: mask points to a live cpu_set_t-sized buffer.
    unsafe { libc::sched_setaffinity(0, len, mask as *const libc::cpu_set_t) };
}

/// The whole of `goset-run`: parse, validate, run; returns the process exit code.
pub fn main_with_args(program: &str, args: impl IntoIterator<Item = OsString>) -> i32 {
    use clap::Parser;
    crate::cli::ignore_empty_env();
    let args = crate::cli::normalize_args(args);
    let cli = crate::cli::RunCli::try_parse_from(args)
        .unwrap_or_else(|e| crate::cli::exit_on_clap_error(e, program));
    run_args(program, &cli.run)
}

/// Validates and runs parsed run flags, printing any error as one line.
pub fn run_args(program: &str, args: &crate::cli::RunArgs) -> i32 {
    args.validate().and_then(|o| run(&o)).unwrap_or_else(|e| {
        output::to_stderr(&format!("{program}: {e}\n"));
        e.exit_code()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapt_candidates_join_the_group_but_keep_their_irqs() {
        let selection = select::Selection {
            task_cpus: vec![2, 3],
            housekeeper: 0,
            housekeeper_shared: false,
            node: None,
            fenced: vec![6],
            unfenced: Vec::new(),
            spares: vec![4],
            core_cost: Default::default(),
            ranking: vec![2, 3, 4, 5, 7, 0, 1],
            near: None,
        };
        let set = |v: &[usize]| v.iter().copied().collect::<CpuSet>();
        // --spare 1: the spare is reserved like a task CPU.
        let (group, away) = isolated_cpus(&selection, &[4]);
        assert_eq!((group, away), (set(&[2, 3, 4, 6]), set(&[2, 3, 4, 6])));
        // --adapt: the candidates may receive the task's threads, and keep their IRQs.
        let adapt = select::Selection {
            spares: Vec::new(),
            ..selection
        };
        let (group, away) = isolated_cpus(&adapt, &[5, 7, 1]);
        assert_eq!((group, away), (set(&[1, 2, 3, 5, 6, 7]), set(&[2, 3, 6])));
    }
}
