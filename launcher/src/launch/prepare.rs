//! What the task is started with: the plan the shim reads, the run directory that holds it,
//! the task's environment, and where the threads that take no slot, or leave a noisy CPU, go.
//!
//! It writes files (the run directory) but starts nothing: the slot table, the inherited
//! descriptors and the task itself are the execution's.

use crate::cli::{NoiseMoves, PlacementMode, RunOptions};
use crate::error::{Error, Result};
use crate::output;
use crate::privilege::User;
use crate::rundir::{self, RunDir};
use crate::select::{self, SmtPolicy};
use crate::task::Launch;
use crate::taskenv;
use crate::topology::Topology;
use goset_plan::{vars, CpuSet, Plan};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Everything the task is started with.
pub(super) struct Prepared {
    pub launch: Launch,
    pub run_dir: Option<RunDir>,
    pub shim: bool,
    /// The command is one the shim loads into and places: a glibc program (not a script, whose
    /// interpreter is not inspected), not secure-exec, not one of goset's own programs.
    pub shim_reaches: bool,
    /// The machine's GPUs the plan counts (`--near gpu:local-rank`; 0 without rank blocks):
    /// the bound on a GPU a process's log record names.
    pub gpus: usize,
}

/// Where the task's threads that take no slot go (helpers, sleepers, the skip mask): the
/// housekeeper CPU, or inside a cgroup, whose cpuset holds the task CPUs only, the last task
/// CPU (as when the housekeeper has no CPU of its own).
pub(super) fn parked_cpu(opts: &RunOptions, selection: &select::Selection) -> usize {
    match selection.task_cpus.last() {
        Some(&last) if opts.isolation.cgroup => last,
        _ => selection.housekeeper_cpu,
    }
}

/// Resolves the command, writes the plan and the run directory, builds the task's environment.
pub(super) fn prepare(
    opts: &RunOptions,
    topo: &Topology,
    selection: &select::Selection,
    user: Option<&User>,
) -> Result<Prepared> {
    let command = crate::task::resolve_command(&opts.command[0])?;
    // One shared mask: the task runs as under `taskset -c`, without the shim.
    let shim = match opts.placement {
        PlacementMode::Thread => rundir::find_shim()?,
        PlacementMode::Mask => None,
    };
    let task_set: CpuSet = selection.task_cpus.iter().copied().collect();
    let plan = plan(opts, topo, selection, task_set)?;
    let (run_dir, shim_reaches) = match &shim {
        Some(lib) => {
            let reaches = shim_reaches(opts, &command);
            (
                Some(RunDir::create(&plan, opts.log.as_deref(), lib, user)?),
                reaches,
            )
        }
        None if opts.placement == PlacementMode::Mask => (None, false),
        None => {
            output::to_stderr(&format!(
                "goset-run: libgoset.so not found beside goset-run (set {}): threads share the task's mask\n",
                rundir::LIB_ENV
            ));
            (None, false)
        }
    };
    let env = taskenv::task_env(
        |name| std::env::var_os(name),
        match (selection.ranks.first(), opts.per_process) {
            (Some(rank), _) => taskenv::Threads::PerProcess(rank.cpus.len()),
            (None, Some(n)) => taskenv::Threads::PerProcess(n),
            (None, None) => taskenv::Threads::Slots(selection.task_cpus.len()),
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
        env_remove: env_remove(opts.placement),
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
        gpus: if plan.ranks.given() {
            plan.ranks.gpus()
        } else {
            0
        },
    })
}

/// The plan the shim reads: the task CPUs as slots, the parked CPU, and a reservation of every
/// CPU a thread of the task may be on (`task_set`, the parked CPU, the noise pool).
fn plan(
    opts: &RunOptions,
    topo: &Topology,
    selection: &select::Selection,
    task_set: CpuSet,
) -> Result<Plan> {
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
    if !selection.ranks.is_empty() {
        let slot_of = |c: &usize| selection.task_cpus.iter().position(|t| t == c);
        let blocks: Vec<(usize, Vec<usize>)> = (selection.ranks.iter())
            .map(|r| (r.gpu.index, r.cpus.iter().filter_map(slot_of).collect()))
            .collect();
        let gpus = crate::topology::gpus::gpus(&opts.fsroot, topo).len();
        if !plan.ranks.set(gpus, &blocks) {
            return Err(Error::Usage(format!(
                "--near gpu:local-rank: {} ranks, more than a plan holds",
                blocks.len()
            )));
        }
    }
    plan.launcher_pid = std::process::id().into();
    // So that a process of the task in a sandbox's PID namespace knows its ids mean nothing
    // here (0, unknown, where /proc does not say).
    plan.pidns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });
    Ok(plan)
}

/// Whether the shim loads into `command` and places its threads; if not, and not `--quiet`,
/// says why the housekeeper places them instead.
fn shim_reaches(opts: &RunOptions, command: &Path) -> bool {
    let linkage = crate::elf::read_file(command);
    let why = linkage.why_no_shim();
    // The shim stays out of goset's own programs (resolved as the kernel will), and
    // glibc ignores it in a secure-exec program.
    let exe: PathBuf = std::fs::canonicalize(command).unwrap_or_else(|_| command.to_path_buf());
    let reaches = linkage.loads_shim()
        && !crate::elf::is_secure_exec(command)
        && !goset_plan::plan::is_goset_program(exe.as_os_str().as_encoded_bytes());
    if let Some(why) = why.filter(|_| !opts.quiet) {
        output::to_stderr(&format!(
            "goset-run: {}: {why}: libgoset.so cannot reach it, so the housekeeper places its threads\n",
            opts.command[0].to_string_lossy()
        ));
    }
    reaches
}

/// The variables the task must not inherit: the plan names the log, and a GOSET_LOG left in
/// the environment would override it and hide the task's threads from the report.
fn env_remove(placement: PlacementMode) -> Vec<OsString> {
    match placement {
        PlacementMode::Thread => [
            vars::LOG,
            vars::CPUS,
            vars::RANK_BLOCKS,
            vars::SLOTS,
            vars::LOG_FD,
        ]
        .map(OsString::from)
        .into(),
        // A shim the user preloads (in their own LD_PRELOAD) must not find a plan either.
        PlacementMode::Mask => [
            vars::LOG,
            vars::CPUS,
            vars::RANK_BLOCKS,
            vars::PLAN,
            vars::SLOTS,
            vars::LOG_FD,
        ]
        .map(OsString::from)
        .into(),
    }
}

/// Where a slot may go when its CPU turns noisy: the spares booked for it, with `--adapt` the
/// candidates this run does not use (other runs' CPUs were no candidates; the housekeeper's
/// only when no other is left, as a spare is shared when nothing else is), or nowhere.
pub(super) fn noise_pool(opts: &RunOptions, selection: &select::Selection) -> Vec<usize> {
    match opts.noise_moves {
        NoiseMoves::Off => Vec::new(),
        NoiseMoves::Spares => selection.spares.clone(),
        NoiseMoves::Unused => {
            let unused: Vec<usize> = (selection.ranking.iter().copied())
                .filter(|c| !selection.task_cpus.contains(c) && !selection.fenced.contains(c))
                .collect();
            let others: Vec<usize> = (unused.iter().copied())
                .filter(|&c| c != selection.housekeeper_cpu)
                .collect();
            if others.is_empty() {
                unused
            } else {
                others
            }
        }
    }
}
