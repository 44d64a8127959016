//! The run itself: the slot table and the descriptors the task inherits, the copies of the
//! task started, the housekeeper polled until they all end, and the run added up.
//!
//! It prints nothing (the report is the launch's), and decides nothing about the plan or the
//! environment: it starts what [`super::prepare`] made.

use super::prepare::{noise_pool, parked_cpu, Prepared};
use crate::cli::{PlacementMode, RunOptions};
use crate::error::{Error, Result};
use crate::fsroot::{FsRoot, ReadError};
use crate::housekeeper::outcome::Telemetry;
use crate::housekeeper::outcome::ThreadOutcome;
use crate::housekeeper::policy::noise::NoiseRule;
use crate::housekeeper::policy::thresholds::Policy;
use crate::housekeeper::{Housekeeper, Settings};
use crate::instances;
use crate::isolate::Isolation;
use crate::noise::Snapshot;
use crate::placement_log;
use crate::record::{feed::Feed, Record};
use crate::rundir::RunDir;
use crate::select;
use crate::summary::RunSummary;
use crate::task::{self, Ending, Launch, MainSlot, Task, Usage};
use goset_plan::{vars, CpuSet};
use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

/// What the run produced.
pub(super) struct Executed {
    pub summary: RunSummary,
    pub threads: Vec<ThreadOutcome>,
    pub telemetry: Telemetry,
    pub errors: Vec<ReadError>,
    pub exit_code: i32,
    /// Each copy's pid and ending, in index order (one without `--instances`).
    pub instances: Vec<(i32, Ending)>,
    /// Each process's local rank as its shim logged it (`--near gpu:local-rank`).
    pub ranks: std::collections::BTreeMap<i32, goset_plan::log::LocalRank>,
    /// What the run saw of every CPU, for the noise record.
    pub learned: Option<Record>,
}

/// Starts the task, keeps house until it ends, and adds up the run. `machine`: where the
/// node's noise record is kept, the machine it names, the selection's last snapshot and other
/// runs' task CPUs; the housekeeper then feeds a record of every CPU as it polls, from that
/// snapshot on (other tasks' load left out on this run's CPUs and theirs).
pub(super) fn execute(
    opts: &RunOptions,
    selection: &select::Selection,
    prepared: &Prepared,
    isolation: &mut Isolation,
    machine: Option<(String, Option<crate::noise::Snapshot>, Vec<usize>)>,
) -> Result<Executed> {
    let settings = settings(opts, selection);
    let run_dir = prepared.run_dir.as_ref();
    let (table, table_fd) = slot_table(run_dir, &selection.task_cpus)?;
    let root = FsRoot::default();
    let mut hk = Housekeeper::new(
        &root,
        settings,
        table,
        run_dir.map(|d| d.log_path()),
        Box::new(crate::housekeeper::placer::Kernel),
    );
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
    for (fd, var) in [(&table_fd, vars::SLOTS), (&log_fd, vars::LOG_FD)] {
        if let Some(fd) = fd {
            use std::os::fd::AsRawFd;
            launch.env.push(inherited(var, fd));
            launch.inherit.push(fd.as_raw_fd());
        }
    }
    task::adopt_orphans();
    let (tasks, relays) = start_instances(opts.instances, &launch)?;
    for task in &tasks {
        hk.attach(task.pid());
    }
    pin_self(selection.housekeeper_cpu);
    // The task's and the launcher's own time is not other tasks' load.
    let own: Vec<usize> = (selection.task_cpus.iter())
        .chain(&selection.spares)
        .chain([&selection.housekeeper_cpu])
        .copied()
        .collect();
    let mut feed = machine.map(|(m, before, others)| {
        let own = own.iter().chain(&others).copied().collect();
        Feed::start(
            &root,
            &m,
            own,
            before.unwrap_or_else(|| hk.opening().clone()),
        )
    });
    let ended = task::wait_all(&tasks, opts.interval, || {
        hk.poll();
        if let Some(f) = &mut feed {
            f.poll();
        }
        isolation.check_drift();
    });
    let closing = Snapshot::read(&root);
    let wall_s = started.elapsed().as_secs_f64();
    relays.finish();
    let (ending, rusage, instances) = endings(&tasks, &ended);
    let mut outcome = hk.finish(&closing);
    let learned = feed.map(|f| f.finish(closing));

    let (log, errors) = own_log(
        run_dir,
        &mut outcome,
        &opts.fsroot,
        std::process::id() as i32,
    );
    let threads = outcome.thread_reports(&log);
    let ranks = log.ranks(prepared.gpus);
    let seen_cpu_s = threads.iter().filter_map(|t| t.cpu_s).sum();
    let summary = RunSummary::new(wall_s, ending, rusage.at_least(seen_cpu_s), prepared.shim);
    let telemetry = outcome.telemetry(&threads);
    Ok(Executed {
        summary,
        threads,
        telemetry,
        errors,
        exit_code: ending.exit_code(),
        instances,
        ranks,
        learned,
    })
}

/// The run's placement log with only the records of the task's own threads (those of the
/// process tree under `tree`, the launcher or a Slurm task), and the run's
/// errors (`outcome`'s, taken) with a line counting the records left out.
pub(super) fn own_log(
    run_dir: Option<&RunDir>,
    outcome: &mut crate::housekeeper::outcome::Outcome,
    root: &crate::fsroot::FsRoot,
    tree: i32,
) -> (placement_log::Log, Vec<crate::fsroot::ReadError>) {
    let log = run_dir
        .map(|d| placement_log::read(d.log_path(), d.log_kept().0))
        .unwrap_or_default();
    let live = crate::housekeeper::own::LiveProcs(root);
    let (log, left_out) = outcome.own_log(log, tree, &live);
    let mut errors = std::mem::take(&mut outcome.errors);
    if let (Some(dir), 1..) = (run_dir, left_out) {
        errors.push(crate::fsroot::ReadError {
            file: dir.log_path().display().to_string(),
            reason: format!(
                "{left_out} record(s) naming a thread outside the task's process tree: forged, left out"
            ),
        });
    }
    (log, errors)
}

/// The housekeeper's settings for this run. Under one shared mask it only watches: it places
/// and moves nothing.
pub(super) fn settings(opts: &RunOptions, selection: &select::Selection) -> Settings {
    Settings {
        task_cpus: selection.task_cpus.clone(),
        park_cpu: parked_cpu(opts, selection),
        interval: opts.interval,
        policy: Policy {
            spread_busy: opts.adapt && opts.placement == PlacementMode::Thread,
            place: opts.placement == PlacementMode::Thread,
            ..Default::default()
        },
        spares: noise_pool(opts, selection),
        noise_rule: NoiseRule::default(),
        housekeeper_cpu: selection.housekeeper_cpu,
        steer: opts.isolation.steer,
        speed: selection.perf.clone(),
    }
}

/// The run's ending, usage, and each copy's pid and ending. The first copy to fail gives the
/// exit status; usage adds up.
fn endings(
    tasks: &[Task],
    ended: &[(usize, Ending, Usage)],
) -> (Ending, Usage, Vec<(i32, Ending)>) {
    let ending = (ended.iter().map(|e| e.1))
        .find(|e| *e != Ending::Exited(0))
        .unwrap_or(Ending::Exited(0));
    let rusage = (ended.iter()).fold(Usage::default(), |sum, e| sum.plus(&e.2));
    let mut instances: Vec<(i32, Ending)> = tasks.iter().map(|t| (t.pid(), ending)).collect();
    for &(i, e, _) in ended {
        instances[i].1 = e;
    }
    (ending, rusage, instances)
}

/// Starts the copies of the task: without `--instances` one, as it is; with `--instances K`,
/// K copies each with `GOSET_INSTANCE=i`, and for K > 1 each copy's output relayed with its
/// index in front ([`instances`]). Each copy's main thread is born on a slot claimed for it,
/// as the one task's is (the housekeeper leaves it to the shim, which moves it into the copy's
/// block if the slot is not in it). A copy that cannot start ends the ones already started
/// (SIGKILL, reaped) before the error is returned.
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

/// The slot table shared with the shim (the run directory's `slots` file), stamped with the
/// plan's CPUs, and a descriptor of it that the task inherits (see [`inherited`]); or a
/// private table when there is no shim, so that the housekeeper still hands out slots without
/// overlap.
pub(super) fn slot_table(
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
    Ok((table, Some(high_copy(file.into()))))
}

/// A descriptor the task inherits and the variable that names it: `GOSET_SLOTS` the slot
/// table (`/proc/self/fd/<n>`), which a process that cannot open the run directory's `slots`
/// (a link into the launcher's `/proc/<pid>/fd`) maps instead: in a sandbox with a PID
/// namespace and a /proc of its own, or after switching to another user; `GOSET_LOG_FD` the
/// log (`<n>`), which a process that switched to another user writes to.
fn inherited(var: &str, fd: &OwnedFd) -> (OsString, OsString) {
    use std::os::fd::AsRawFd;
    let value = match var {
        vars::SLOTS => format!("/proc/self/fd/{}", fd.as_raw_fd()),
        _ => fd.as_raw_fd().to_string(),
    };
    (var.into(), value.into())
}

/// The placement log open for appending, on a high descriptor, for the task to inherit.
fn inherited_log(path: &Path) -> Result<OwnedFd> {
    let fail = |e: std::io::Error| Error::System(format!("cannot open {}: {e}", path.display()));
    let file = crate::bounded::open_regular(path, std::fs::OpenOptions::new().append(true))
        .map_err(fail)?;
    Ok(high_copy(file.into()))
}

/// `fd` (close-on-exec) moved out of the low numbers a program may expect free, by the rule
/// the shim keeps its own by ([`goset_plan::descriptor`]); `fd` itself where the limit leaves
/// no number above the floor free.
fn high_copy(fd: OwnedFd) -> OwnedFd {
    use std::os::fd::AsRawFd;
    let floor = goset_plan::descriptor::floor_now();
    if floor <= i64::from(fd.as_raw_fd()) {
        return fd;
    }
    let floor = i32::try_from(floor).unwrap_or(i32::MAX);
    match nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(floor)) {
        // SAFETY: fcntl returned a new descriptor that nothing else owns.
        Ok(high) => unsafe { OwnedFd::from_raw_fd(high) },
        Err(_) => fd,
    }
}

/// Moves the launcher onto the housekeeper CPU, away from the task's CPUs.
pub(super) fn pin_self(cpu: usize) {
    let set = CpuSet::single(cpu);
    let (mask, len) = set.as_raw();
    // SAFETY: mask points to a live cpu_set_t-sized buffer.
    unsafe { libc::sched_setaffinity(0, len, mask as *const libc::cpu_set_t) };
}
