//! One Slurm task on this node: its block selected inside the CPUs Slurm bound it to and
//! booked, its plan written, its main thread put on its first slot, its threads kept by the
//! node's housekeeper, and its report when it ends.
//!
//! Owns: the life of one task's placement, built from the launch's own steps (selection,
//! plan, housekeeper settings, report), so that a task under `srun --goset` is placed as
//! `goset-run` would place it. Must not: talk to the plugin ([`super::serve`] does) or decide
//! anything the launch's steps decide.

use super::super::cpus::{select_cpus, Selected};
use super::super::execute::{own_log, settings, slot_table};
use super::super::json::JsonSink;
use super::super::prepare::{prepare, Prepared};
use super::super::ranks::StepTask;
use super::args::{self, AgentArgs};
use crate::cli::RunOptions;
use crate::error::{Error, Result};
use crate::fsroot::FsRoot;
use crate::housekeeper::Housekeeper;
use crate::report;
use crate::report::model::{Report, TelemetryReport, ThreadReport};
use goset_plan::CpuSet;
use std::ffi::OsString;
use std::path::PathBuf;

/// What the plugin says of a task, just before it execs.
#[derive(Debug, PartialEq)]
pub(super) struct Request {
    /// `SLURM_LOCALID`.
    pub local: u32,
    /// `SLURM_PROCID` (`%t`).
    pub global: u32,
    pub pid: i32,
    /// The node's Slurm name (`SLURMD_NODENAME`, `%N`).
    pub node: String,
    /// The CPUs Slurm bound it to (`task/affinity`), or the step's when it is not bound.
    pub cpus: CpuSet,
    /// Its working directory, where a relative command is found.
    pub cwd: PathBuf,
    /// Its visible-devices variable ([`goset_plan::ranks::VISIBLE_VARS`]) and value, where
    /// one is set and not blank (`--near gpu:local-rank` reads it as the shim in it will).
    pub visible: Option<(String, Vec<u8>)>,
    /// Its command.
    pub command: OsString,
}

impl Request {
    /// Parses `task\0LOCAL\0GLOBAL\0PID\0NODE\0CPULIST\0CWD\0VISIBLE\0ARGV0\0`, `VISIBLE`
    /// `NAME=VALUE` or empty.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Request, String> {
        use std::os::unix::ffi::OsStrExt;
        let fields: Vec<&[u8]> = bytes
            .strip_suffix(b"\0")
            .unwrap_or(bytes)
            .split(|&b| b == 0)
            .collect();
        let [b"task", local, global, pid, node, cpus, cwd, visible, command] = fields[..] else {
            return Err(format!(
                "a request of {} fields, not the plugin's 9",
                fields.len()
            ));
        };
        let number = |what: &str, b: &[u8]| {
            std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
                .ok_or_else(|| {
                    format!(
                        "the request's {what} '{}' is not a number",
                        String::from_utf8_lossy(b)
                    )
                })
        };
        let pid = number("pid", pid)?;
        Ok(Request {
            local: number("local id", local)?,
            global: number("task id", global)?,
            pid: i32::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?,
            node: String::from_utf8_lossy(node).into_owned(),
            cpus: goset_plan::cpulist::parse_set(cpus).map_err(|e| {
                format!("the task's CPUs '{}': {e:?}", String::from_utf8_lossy(cpus))
            })?,
            cwd: std::ffi::OsStr::from_bytes(cwd).into(),
            visible: visible_var(visible)?,
            command: std::ffi::OsStr::from_bytes(command).into(),
        })
    }
}

/// A request's `NAME=VALUE` of a visible-devices variable; `None` for an empty field.
fn visible_var(field: &[u8]) -> std::result::Result<Option<(String, Vec<u8>)>, String> {
    if field.is_empty() {
        return Ok(None);
    }
    let at = field.iter().position(|&b| b == b'=');
    let name = at.map(|i| String::from_utf8_lossy(&field[..i]).into_owned());
    match (at, name) {
        (Some(i), Some(n)) if goset_plan::ranks::VISIBLE_VARS.contains(&n.as_str()) => {
            Ok(Some((n, field[i + 1..].to_vec())))
        }
        _ => Err(format!(
            "the request's visible devices '{}' is not one of {} =VALUE",
            String::from_utf8_lossy(field),
            goset_plan::ranks::VISIBLE_VARS.join(", ")
        )),
    }
}

/// Whether each task of the node is one local rank (`--near gpu:local-rank` with several
/// tasks on the node): its block is then cut from its rank's share of the step's CPUs, as
/// goset-run cuts it, not from Slurm's binding of the task, which knows no GPU.
fn each_task_a_rank(agent: &AgentArgs, opts: &RunOptions) -> bool {
    opts.ranks.is_some() && agent.tasks > 1
}

/// The task's options and CPUs (selected and booked): inside its Slurm binding, or where each
/// task is a local rank, its block in its rank's share, the step's other tasks' CPUs (`taken`)
/// held.
pub(super) fn select(
    agent: &AgentArgs,
    user: &[String],
    req: &Request,
    online: &[usize],
    taken: &[(u32, CpuSet)],
) -> Result<(RunOptions, Selected)> {
    let all_taken: CpuSet = taken.iter().flat_map(|(_, c)| c.iter()).collect();
    let opts = options(agent, user, req, online, &all_taken)?;
    let task = opts.ranks.is_some().then(|| StepTask {
        rank: each_task_a_rank(agent, &opts).then_some(req.local as usize),
        held: all_taken.iter().collect(),
        visible: req.visible.clone(),
    });
    let selected = select_cpus(&opts, task.as_ref()).map_err(|e| held_by_step(e, req, taken))?;
    Ok((opts, selected))
}

/// The goset-run options of one task: the user's flags with the placeholders of their file
/// patterns filled in, `-n` the CPUs per task unless given, every CPU outside the task's
/// binding (and the step's other tasks' `taken`) excluded.
pub(super) fn options(
    agent: &AgentArgs,
    user: &[String],
    req: &Request,
    online: &[usize],
    taken: &CpuSet,
) -> Result<RunOptions> {
    use clap::Parser;
    let mut argv: Vec<OsString> = vec!["goset-run".into()];
    argv.extend(
        user.iter()
            .map(|a| args::expand(a, &agent.job, &agent.step, req.global, &req.node).into()),
    );
    if !args::gives_count(user) {
        argv.extend(["-n".into(), agent.cpus_per_task.to_string().into()]);
    }
    let command = if req.command.to_string_lossy().contains('/') {
        req.cwd.join(&req.command).into_os_string()
    } else {
        req.command.clone()
    };
    argv.extend(["--".into(), command]);
    let cli = crate::cli::RunCli::try_parse_from(crate::cli::normalize_args(argv))
        .map_err(|e| Error::Usage(format!("--goset: {}", crate::cli::clap_error_line(&e))))?;
    let mut opts = cli.run.validate()?;
    let outside: CpuSet = (online.iter().copied())
        .filter(|&c| !req.cpus.contains(c) || taken.contains(c))
        .collect();
    // A rank's other tasks' CPUs are held, not left out: they count in its share.
    if !outside.is_empty() && !each_task_a_rank(agent, &opts) {
        opts.exclude = crate::topology::expr::CpuExpr::parse(&outside.to_string())
            .map_err(|e| Error::System(format!("the task's CPUs outside {outside}: {e}")))?;
    }
    Ok(opts)
}

/// One task being placed.
pub(super) struct TaskRun {
    pub req: Request,
    opts: RunOptions,
    selected: Selected,
    prepared: Prepared,
    housekeeper: Housekeeper,
    json: JsonSink,
}

/// What a task's placement came to, for the node's summary line.
pub(super) struct Finished {
    pub global: u32,
    pub node: String,
    pub cpus: CpuSet,
    pub housekeeper_cpu: usize,
    pub threads: usize,
    /// CPUs shared with other runs' housekeepers or tasks ([`report::sharing`]).
    pub shared: Vec<String>,
}

impl TaskRun {
    /// Selects and books the task's CPUs, writes its plan, puts its main thread on its first
    /// slot (or the whole block where the shim does not reach it) and follows it; returns the
    /// run and the environment lines for the plugin.
    pub fn start(
        agent: &AgentArgs,
        user: &[String],
        req: Request,
        taken: &[(u32, CpuSet)],
    ) -> Result<(TaskRun, Vec<String>)> {
        let root = FsRoot::default();
        let topo = crate::topology::Topology::read(&root)
            .map_err(|e| Error::System(format!("cannot read the topology: {e}")))?;
        let (opts, mut selected) = select(agent, user, &req, &topo.online(), taken)?;
        let json = JsonSink::open(opts.json.as_deref())?;
        // Under the agent's one file name: removed if this task fails below (the agent then
        // books the step's other tasks again), else left to the node's booking.
        let booked = selected.booked.take();
        let selection = &selected.selection;
        let prepared = prepare(&opts, &selected.topo, selection, None)?;
        let (table, _fd) = slot_table(prepared.run_dir.as_ref(), &selection.task_cpus)?;
        let run_dir = prepared.run_dir.as_ref();
        let mut housekeeper = Housekeeper::new(
            &root,
            settings(&opts, selection),
            table,
            run_dir.map(|d| d.log_path()),
            Box::new(crate::housekeeper::placer::Kernel),
        );
        if let Some((kept, true)) = run_dir.map(|d| d.log_kept()) {
            housekeeper.free_log_after(kept);
        }
        // Born placed: the main thread's slot claimed under its pid, as goset-run's child
        // claims it before exec; the shim adopts the claim.
        let task_set: CpuSet = selection.task_cpus.iter().copied().collect();
        let first = (prepared.shim_reaches && !opts.main_on_housekeeper)
            .then(|| table.claim_among(req.pid, selection.task_cpus.len()))
            .flatten()
            .and_then(|c| selection.task_cpus.get(c.slot).copied())
            .map_or(task_set, CpuSet::single);
        let (mask, len) = first.as_raw();
        // SAFETY: mask points to a live cpu_set_t-sized buffer.
        if unsafe { libc::sched_setaffinity(req.pid, len, mask as *const libc::cpu_set_t) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::System(format!(
                "cannot bind task pid {}: {e}",
                req.pid
            )));
        }
        housekeeper.attach(req.pid);
        // The node's one booking holds every task's CPUs ([`super::NodeBooking`]) from here:
        // this task's must not remove it when the task ends.
        std::mem::forget(booked);
        let mut lines: Vec<String> = (prepared.launch.env.iter())
            .map(|(k, v)| format!("set {}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        lines.extend(
            (prepared.launch.env_remove.iter()).map(|k| format!("unset {}", k.to_string_lossy())),
        );
        let run = TaskRun {
            req,
            opts,
            selected,
            prepared,
            housekeeper,
            json,
        };
        Ok((run, lines))
    }

    /// The task's CPUs (its booking).
    pub fn cpus(&self) -> impl Iterator<Item = usize> + '_ {
        self.selected.selection.task_cpus.iter().copied()
    }

    /// The housekeeper CPU its selection chose.
    pub fn housekeeper_cpu(&self) -> usize {
        self.selected.selection.housekeeper_cpu
    }

    /// One round of the housekeeper.
    pub fn poll(&mut self) {
        self.housekeeper.poll();
    }

    /// Whether the task has ended (gone, or a zombie Slurm has not reaped yet).
    pub fn ended(&self) -> bool {
        let stat = crate::procfs::pid_stat::read(&self.opts.fsroot, self.req.pid as u32);
        stat.is_none_or(|s| matches!(s.state, 'Z' | 'X'))
    }

    /// Ends the housekeeping, writes the JSON report (`--json`), removes the run directory.
    pub fn finish(self) -> Finished {
        let closing = crate::noise::Snapshot::read(&self.opts.fsroot);
        let mut outcome = self.housekeeper.finish(&closing);
        let run_dir = self.prepared.run_dir.as_ref();
        let (log, errors) = own_log(run_dir, &mut outcome, &self.opts.fsroot, self.req.pid);
        let outcomes = outcome.thread_reports(&log);
        let threads: Vec<ThreadReport> = outcomes.iter().map(ThreadReport::from).collect();
        let Selected {
            topo,
            noise,
            selection,
            bookings,
            ..
        } = &self.selected;
        let mut processes =
            report::processes::build(&threads, &[], |c| topo.cpu(c).and_then(|i| i.node));
        let logged = log.ranks(self.prepared.gpus);
        report::processes::assign_ranks(&mut processes, &selection.ranks, &logged);
        let sel_report = report::model::selection_report(topo, noise, selection);
        // Runs booked since this task selected, with those it saw.
        let later = crate::booking::Registry::open().map_or_else(|_| Vec::new(), |r| r.live(false));
        let others: Vec<report::model::BookingReport> =
            (bookings.iter().chain(&later)).map(From::from).collect();
        let shared =
            report::sharing::find(&selection.task_cpus, selection.housekeeper_cpu, &others);
        let finished = Finished {
            global: self.req.global,
            node: self.req.node.clone(),
            cpus: selection.task_cpus.iter().copied().collect(),
            housekeeper_cpu: selection.housekeeper_cpu,
            threads: threads.len(),
            shared: shared.iter().map(|s| s.phrase()).collect(),
        };
        let placement = self.opts.placement.into();
        let mut report = Report::selected(&sel_report, placement, bookings, &errors);
        report.telemetry = Some(TelemetryReport::from(&outcome.telemetry(&outcomes)));
        report.threads = threads;
        report.processes = processes;
        self.json.write("goset-run", &report);
        finished
    }
}

/// A selection that failed where the step's other tasks hold some of this task's CPUs: the
/// error names them.
fn held_by_step(e: Error, req: &Request, taken: &[(u32, CpuSet)]) -> Error {
    let holders: Vec<String> = (taken.iter())
        .map(|(task, cpus)| (task, cpus.intersection(&req.cpus)))
        .filter(|(_, held)| !held.is_empty())
        .map(|(task, held)| format!("cpus {held} by task {task}"))
        .collect();
    if holders.is_empty() {
        return e;
    }
    Error::System(format!(
        "{e}: of the CPUs Slurm gave task {} ({}), this step's other tasks hold {}; \
         give each task CPUs of its own (--cpus-per-task, --cpu-bind=cores) or a smaller -n",
        req.global,
        req.cpus,
        holders.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_parses_and_a_bad_one_is_named() {
        let req = Request::parse(
            b"task\x001\x003\x00400\x00n1\x000-1,4\x00/home/u\x00CUDA_VISIBLE_DEVICES=2,3\x00./probe\x00",
        )
            .unwrap();
        assert_eq!((req.local, req.global, req.pid), (1, 3, 400));
        assert_eq!(req.cpus.to_string(), "0-1,4");
        assert_eq!(req.command, OsString::from("./probe"));
        let visible = Some(("CUDA_VISIBLE_DEVICES".to_string(), b"2,3".to_vec()));
        assert_eq!(req.visible, visible);
        assert!(
            Request::parse(b"task\x001\x003\x00400\x00n1\x000\x00/\x00PATH=/bin\x00p")
                .unwrap_err()
                .contains("'PATH=/bin' is not one of CUDA_VISIBLE_DEVICES")
        );
        assert!(Request::parse(b"task\x001")
            .unwrap_err()
            .contains("2 fields"));
        assert!(
            Request::parse(b"task\x00a\x003\x00400\x00n1\x000\x00/\x00\x00p")
                .unwrap_err()
                .contains("'a'")
        );
    }

    #[test]
    fn a_selection_failed_for_the_steps_own_tasks_names_them() {
        let req = Request::parse(b"task\x001\x001\x00400\x00n1\x000-1\x00/\x00\x00p\x00").unwrap();
        let taken = [(0, CpuSet::single(0)), (2, CpuSet::single(5))];
        let e = held_by_step(Error::System("no candidate CPUs".into()), &req, &taken);
        let text = e.to_string();
        assert!(
            text.starts_with("no candidate CPUs: of the CPUs Slurm gave task 1 (0-1)"),
            "{text}"
        );
        assert!(
            text.contains("hold cpus 0 by task 0;") && !text.contains("task 2"),
            "{text}"
        );
        let alone = held_by_step(Error::System("x".into()), &req, &taken[1..]);
        assert_eq!(alone.to_string(), "x");
    }

    #[test]
    fn a_tasks_options_keep_to_its_binding_and_fill_in_placeholders() {
        let agent = AgentArgs {
            job: "9".into(),
            step: "0".into(),
            tasks: 2,
            cpus_per_task: 1,
            ..Default::default()
        };
        let req =
            Request::parse(b"task\x001\x003\x00400\x00n2\x001\x00/w\x00\x00./probe\x00").unwrap();
        let user = args::split_args("--json=/tmp/g-%j.%t.%N.json,--sample=0");
        let opts = options(&agent, &user, &req, &[0, 1, 2, 3], &CpuSet::single(2)).unwrap();
        assert_eq!(
            opts.json.as_deref(),
            Some(std::path::Path::new("/tmp/g-9.3.n2.json"))
        );
        assert_eq!(opts.select.count, 1);
        assert_eq!(opts.command, [OsString::from("/w/./probe")]);
        assert_eq!(opts.exclude.to_string(), "0,2-3");
        let bad = options(
            &agent,
            &args::split_args("--smt=wide"),
            &req,
            &[0, 1],
            &CpuSet::default(),
        );
        assert!(bad.err().unwrap().to_string().starts_with("--goset: "));
    }

    /// The HGX-like dump (8 GPUs, 4 on each of 2 sockets), unpacked.
    fn hgx() -> (tempfile::TempDir, String) {
        let name = "fake-hgx-8gpu-2s";
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topology");
        let dir = tempfile::TempDir::new().unwrap();
        let tar = std::process::Command::new("tar")
            .arg("xjf")
            .arg(format!("{fixtures}/{name}/{name}.tar.bz2"))
            .arg("-C")
            .arg(dir.path())
            .status()
            .expect("tar must be installed");
        assert!(tar.success());
        let root = dir.path().join(name).display().to_string();
        (dir, root)
    }

    #[test]
    fn each_task_a_rank_gets_the_block_goset_run_gives_its_rank() {
        use clap::Parser;
        let (_dir, root) = hgx();
        for mode in ["node", "socket", "exclusive", "cache"] {
            let flags = format!(
                "--near=gpu:local-rank,--near-share={mode},--fsroot={root},--dry-run,--sample=0"
            );
            let user = args::split_args(&flags);
            // goset-run -n 32 over the node's 8 ranks at once.
            let argv = ["goset-run", "-n", "32"].iter().map(|a| a.to_string());
            let argv = argv
                .chain(user.iter().cloned())
                .chain(["--".into(), "x".into()]);
            let whole = crate::cli::RunCli::try_parse_from(argv)
                .unwrap()
                .run
                .validate();
            let whole = select_cpus(&whole.unwrap(), None).unwrap().selection.ranks;
            assert_eq!(whole.len(), 8);
            // srun --ntasks-per-node=8 --cpus-per-task=4: each task one rank, in local id order,
            // Slurm's binding of it (CPU 0) set aside.
            let agent = AgentArgs {
                tasks: 8,
                cpus_per_task: 4,
                ..Default::default()
            };
            let online: Vec<usize> = (0..32).collect();
            let mut taken: Vec<(u32, CpuSet)> = Vec::new();
            for local in 0..8u32 {
                let text = format!("task\0{local}\0{local}\0400\0n1\00\0/\0\0x\0");
                let req = Request::parse(text.as_bytes()).unwrap();
                let (_, sel) = select(&agent, &user, &req, &online, &taken).unwrap();
                let [block] = &sel.selection.ranks[..] else {
                    panic!("{mode} task {local}: {:?}", sel.selection.ranks)
                };
                let what = format!("{mode} task {local}");
                assert_eq!(block.rank, local as usize, "{what}");
                assert_eq!(block.gpu.index, whole[local as usize].gpu.index, "{what}");
                assert_eq!(block.share, whole[local as usize].share, "{what}");
                assert_eq!(block.cpus, whole[local as usize].cpus, "{what}");
                let mut task = sel.selection.task_cpus.clone();
                task.sort();
                let mut cpus = block.cpus.clone();
                cpus.sort();
                assert_eq!(task, cpus, "{what}: the task is its block");
                taken.push((local, task.into_iter().collect()));
            }
        }
        // A task whose variable names GPUs 4-7 takes rank 1's GPU among those: GPU 5, node 1.
        let user = args::split_args(&format!(
            "--near=gpu:local-rank,--fsroot={root},--dry-run,--sample=0"
        ));
        let agent = AgentArgs {
            tasks: 4,
            cpus_per_task: 4,
            ..Default::default()
        };
        let text =
            b"task\x001\x001\x00400\x00n1\x000\x00/\x00CUDA_VISIBLE_DEVICES=4,5,6,7\x00x\x00";
        let req = Request::parse(text).unwrap();
        let (_, sel) = select(&agent, &user, &req, &(0..32).collect::<Vec<_>>(), &[]).unwrap();
        assert_eq!(sel.selection.ranks[0].gpu.index, 5);
        assert!(sel
            .selection
            .task_cpus
            .iter()
            .all(|&c| (8..16).contains(&(c % 16))));
    }
}
