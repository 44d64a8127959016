//! `goset-run --slurm-step`: the step agent the SPANK plugin (`slurm/goset_spank.c`) starts
//! once per step on each node, as the user, before the tasks fork (docs/slurm.md).
//!
//! Owns: the agent's life. It checks the user's `--goset` flags, listens on a socket of its
//! own, says `ready PATH` (or `error WHY`) on stdout, then serves each task's request
//! ([`task::TaskRun`]: its block inside its Slurm CPUs, booked, planned, followed) while it
//! polls every task's housekeeper from one process; when the node's tasks have ended, or the
//! plugin closes its stdin, it writes the reports and one summary line on the step's stderr.
//! Must not: start or wait for the tasks (Slurm does), or make a task fail: a task it cannot
//! place gets `error WHY`, and the plugin lets it run as Slurm placed it.

mod args;
mod serve;
mod task;

use crate::output;
use args::AgentArgs;
use goset_plan::CpuSet;
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::time::Duration;
use task::{Finished, TaskRun};

/// Runs the agent with the plugin's arguments (those after `--slurm-step`); returns the exit
/// code.
pub fn main(argv: &[OsString]) -> i32 {
    crate::signals::install();
    let agent = match AgentArgs::parse(argv) {
        Ok(a) => a,
        Err(e) => return not_ready(&e, 2),
    };
    // Each task's selection books under the step's name (booking::slurm_step) until the
    // node's booking replaces it. One thread yet: setting the environment is sound.
    std::env::set_var("SLURM_JOB_ID", &agent.job);
    std::env::set_var("SLURM_STEP_ID", &agent.step);
    let user = args::split_args(&agent.args);
    if let Some(why) = args::refused(&user, agent.allow_root_flags) {
        return not_ready(&why, 2);
    }
    // The flags checked once, on a stand-in task, so that a bad one is named before any task
    // starts.
    let probe = task::Request {
        local: 0,
        global: 0,
        pid: 0,
        node: String::new(),
        cpus: CpuSet::single(0),
        cwd: "/".into(),
        visible: None,
        command: "true".into(),
    };
    let interval = match task::options(&agent, &user, &probe, &[0], &CpuSet::default()) {
        Ok(o) => o.interval,
        Err(e) => return not_ready(&e.to_string(), 2),
    };
    let listener = match serve::Listener::open() {
        Ok(l) => l,
        Err(e) => return not_ready(&format!("cannot listen for the tasks: {e}"), 1),
    };
    let _ = output::to_stdout(&format!("ready {}\n", listener.path().display()));
    // Nothing more goes to the plugin's pipe: it is read once.
    if let Ok(null) = std::fs::File::open("/dev/null") {
        // SAFETY: dup2 of a descriptor we own onto stdout.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
    let finished = keep_house(&agent, &user, &listener, interval);
    summarize(&agent, finished);
    0
}

/// The agent could not start: `error WHY` for the plugin, which puts it on each task's stderr.
fn not_ready(why: &str, code: i32) -> i32 {
    let _ = output::to_stdout(&format!("error {}\n", why.replace('\n', " ")));
    code
}

/// The task the node's summary goes to: the lowest local id's stderr.
struct Summary {
    finished: Vec<Finished>,
    stderr: Option<(u32, std::os::fd::OwnedFd)>,
}

/// Serves the tasks and polls their housekeepers every `interval` until the node's tasks
/// have all ended, or the plugin closes the agent's stdin (the step is over).
fn keep_house(
    agent: &AgentArgs,
    user: &[String],
    listener: &serve::Listener,
    interval: Duration,
) -> Summary {
    let mut runs: Vec<TaskRun> = Vec::new();
    let mut summary = Summary {
        finished: Vec::new(),
        stderr: None,
    };
    let mut seen = 0;
    let mut booking = NodeBooking(None);
    // The topology reads the CPUs this process may use: each task selects among those the
    // agent started with, not the housekeeper CPU it was pinned to since.
    let started_on = own_mask();
    loop {
        let step_over = listener.wait(0, interval);
        while let Some(conn) = listener.accept() {
            let taken: Vec<(u32, CpuSet)> = (runs.iter())
                .map(|r| (r.req.global, r.cpus().collect()))
                .collect();
            set_mask(&started_on);
            let (run, stderr) = serve::answer(conn, |req| {
                let (run, lines) = TaskRun::start(agent, user, req, &taken)?;
                // Booked for the node before the task runs.
                booking.book(agent, runs.iter().chain([&run]));
                Ok((run, lines))
            });
            match run {
                Some(run) => {
                    seen += 1;
                    keep_lowest(&mut summary.stderr, run.req.local, stderr);
                    runs.push(run);
                }
                // A task that failed after its selection booked took the file with it.
                None => booking.book(agent, runs.iter()),
            }
            // One housekeeper process for the node: on the first task's housekeeper CPU.
            if let Some(first) = runs.first() {
                super::execute::pin_self(first.housekeeper_cpu());
            }
        }
        for run in runs.iter_mut() {
            run.poll();
        }
        let (ended, live): (Vec<TaskRun>, Vec<TaskRun>) = runs.into_iter().partition(|r| r.ended());
        runs = live;
        if !ended.is_empty() {
            booking.book(agent, runs.iter());
        }
        (summary.finished).extend(ended.into_iter().map(TaskRun::finish));
        let signalled = crate::signals::pending().is_some();
        if step_over || signalled || (seen >= agent.tasks && runs.is_empty()) {
            (summary.finished).extend(runs.into_iter().map(TaskRun::finish));
            return summary;
        }
    }
}

/// This process's CPU mask (nix's, to be set back as it was).
fn own_mask() -> Option<nix::sched::CpuSet> {
    nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()
}

/// Sets this process's CPU mask back to `mask`.
fn set_mask(mask: &Option<nix::sched::CpuSet>) {
    if let Some(m) = mask {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), m);
    }
}

/// Keeps the stderr of the task with the lowest local id.
fn keep_lowest(
    kept: &mut Option<(u32, std::os::fd::OwnedFd)>,
    local: u32,
    stderr: Option<std::os::fd::OwnedFd>,
) {
    if let Some(fd) = stderr {
        if kept.as_ref().is_none_or(|(l, _)| local < *l) {
            *kept = Some((local, fd));
        }
    }
}

/// One line for the node on the step's stderr: each task's CPUs, and the housekeeper's CPU
/// with whose CPUs it shares.
fn summarize(agent: &AgentArgs, mut summary: Summary) {
    let Some((_, fd)) = summary.stderr.take() else {
        return;
    };
    summary.finished.sort_by_key(|f| f.global);
    let line = summary_line(agent, &summary.finished);
    let mut file = std::fs::File::from(fd);
    let _ = std::io::Write::write_all(&mut file, line.as_bytes());
}

/// `goset n1 step 12.0: task 0 cpus 0 (2 threads), task 1 cpus 1 (2 threads); housekeeper
/// cpu 0, shared with task 0 (CPUs short)`.
fn summary_line(agent: &AgentArgs, finished: &[Finished]) -> String {
    let tasks: Vec<String> = finished
        .iter()
        .map(|f| format!("task {} cpus {} ({} threads)", f.global, f.cpus, f.threads))
        .collect();
    let housekeeper = match finished.first() {
        Some(first) => {
            let cpu = first.housekeeper_cpu;
            match finished.iter().find(|f| f.cpus.contains(cpu)) {
                Some(f) => format!(
                    "; housekeeper cpu {cpu}, shared with task {} (CPUs short)",
                    f.global
                ),
                None => format!("; housekeeper cpu {cpu}"),
            }
        }
        None => String::new(),
    };
    let mut shared: Vec<&str> = finished
        .iter()
        .flat_map(|f| f.shared.iter().map(String::as_str))
        .collect();
    shared.dedup();
    let shared: String = shared.iter().map(|s| format!("; {s}")).collect();
    format!(
        "goset {} step {}.{}: {}{housekeeper}{shared}\n",
        finished.first().map_or("", |f| f.node.as_str()),
        agent.job,
        agent.step,
        if tasks.is_empty() {
            "no task placed".to_string()
        } else {
            tasks.join(", ")
        }
    )
}

/// The agent's one booking in the node's registry: every live task's CPUs, with the first
/// task's housekeeper CPU. Each task's selection books its own CPUs under the agent's name
/// (`<pid>-<start>.booking`); this puts back the whole step's after each, and drops the
/// CPUs of tasks that ended.
struct NodeBooking(Option<crate::booking::Booked>);

impl NodeBooking {
    fn book<'a>(&mut self, agent: &AgentArgs, runs: impl Iterator<Item = &'a TaskRun>) {
        use crate::booking::{Booking, Registry};
        let runs: Vec<&TaskRun> = runs.collect();
        let (Some(first), Ok(registry)) = (runs.first(), Registry::open()) else {
            self.0 = None;
            return;
        };
        let Ok(me) = crate::procfs::pid_stat::ProcessId::this(&crate::fsroot::FsRoot::default())
        else {
            return;
        };
        let Ok(_locked) = registry.lock(None) else {
            return;
        };
        let booking = Booking {
            pid: me.pid,
            start: me.start,
            // SAFETY: getuid cannot fail.
            uid: unsafe { libc::getuid() },
            command: format!("srun --goset, {} task(s)", runs.len()),
            slurm: Some(format!(
                "{}.{} node {}",
                agent.job, agent.step, first.req.node
            )),
            cpus: runs.iter().flat_map(|r| r.cpus()).collect(),
            housekeeper_cpu: first.housekeeper_cpu(),
        };
        // The new file replaces the old under the same name: the old guard must not remove it.
        if let Ok(new) = registry.book(&booking) {
            std::mem::forget(self.0.replace(new));
        }
    }
}
