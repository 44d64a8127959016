//! Carrying out the plan of runs: each run started in its mode (bare, under a taskset mask,
//! under goset-run with per-thread placement or one shared mask, under the shim by hand), its
//! CPUs recorded, its output captured, its numbers extracted, non-zero exits discarded.
//!
//! Owns: processes and their output. Must not: compute statistics or print tables.

use crate::metrics::{self, Sample};
use crate::schedule::{taskset_cpus, Mode, Planned};
use serde::Serialize;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Which of the command's streams the numbers are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Standard output (the default).
    Stdout,
    /// Standard error (`stress-ng` writes its metrics there).
    Stderr,
    /// Both, stdout first.
    Both,
}

/// How the runs are made.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// `goset-run`.
    pub goset_run: PathBuf,
    /// Arguments given to goset-run before `--` (`-n N` among them).
    pub goset_args: Vec<OsString>,
    /// CPUs of each taskset run.
    pub taskset_width: usize,
    /// The CPUs goset-bench may use, taskset's rotation.
    pub allowed: Vec<usize>,
    /// The CPUs `--include` fixes (it names `-n` of them): every taskset and shim run's, and
    /// goset-run's choice too. `None`: taskset rotates, shim runs take goset-run's selection.
    pub fixed: Option<Vec<usize>>,
    /// `libgoset.so` for shim runs, found as the goset-run used would find it.
    pub shim: Option<PathBuf>,
    /// A private directory for goset-run's `--json` report of each run (its CPUs).
    pub report_dir: Option<PathBuf>,
    /// Idle time before each run.
    pub settle: Duration,
    /// A run that takes longer is ended (SIGTERM, then SIGKILL 2 s later) and discarded.
    pub timeout: Option<Duration>,
    /// Where the numbers are read.
    pub stream: Stream,
    /// `--noise` with `--noise-at`: a load started in each run, that long after its start.
    pub noise_at: Option<(crate::noise_load::NoiseSpec, Duration)>,
}

/// One run done.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Its place in the plan.
    #[serde(flatten)]
    pub planned: Planned,
    /// The CPUs of the run: the mask of a taskset or shim run (in `GOSET_CPUS` order for
    /// shim), goset-run's task CPUs in slot order (goset, mask), and the CPUs goset-bench may
    /// use for a baseline run (unpinned); `None` when they are not known (a goset-run that
    /// failed before its report).
    pub cpus: Option<Vec<usize>>,
    /// Exit status (128 + signal when killed), `None` when it could not start.
    pub status: Option<i32>,
    /// Why it does not count (non-zero exit, timeout, could not start), if it does not.
    pub discarded: Option<String>,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Its numbers (kept for discarded runs too, for `--dump`).
    #[serde(skip)]
    pub samples: Vec<Sample>,
    /// The last lines of its stderr, for a discarded run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
}

impl Run {
    /// Whether its numbers count.
    pub fn counts(&self) -> bool {
        !self.planned.warmup && self.discarded.is_none()
    }
}

/// The command line of `mode`; `report` is where goset-run writes its `--json` report.
fn command_of(setup: &Setup, mode: Mode, report: Option<&Path>) -> Command {
    let mut cmd = match mode {
        Mode::Goset | Mode::Mask => {
            let mut c = Command::new(&setup.goset_run);
            c.args(&setup.goset_args);
            if mode == Mode::Mask {
                c.args(["--placement", "mask"]);
            }
            if let Some(r) = report {
                c.arg("--json").arg(r);
            }
            c.arg("--").args(&setup.command);
            c
        }
        Mode::Baseline | Mode::Taskset | Mode::Shim => {
            let mut c = Command::new(&setup.command[0]);
            c.args(&setup.command[1..]);
            c
        }
    };
    // A group of its own, so that a run's every process can be ended (see [`crate::signals`]).
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd
}

/// Pins the child to `cpus` between fork and exec, as `taskset -c` does.
fn pin_before_exec(cmd: &mut Command, cpus: &[usize]) {
    let mut set = goset_plan::CpuSet::new();
    for &c in cpus {
        set.insert(c);
    }
    // SAFETY: sched_setaffinity is async-signal-safe; `set` is moved into the closure and lives
    // as long as the Command.
    unsafe {
        cmd.pre_exec(move || {
            let (mask, len) = set.as_raw();
            if libc::sched_setaffinity(0, len, mask as *const libc::cpu_set_t) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs the shim as a user would by hand on `cpus`: `LD_PRELOAD` ends with `lib` (after the
/// user's own preloads), `GOSET_CPUS` lists the CPUs in slot order, and no `GOSET_PLAN` of
/// another run's overrides it.
fn preload_shim(cmd: &mut Command, lib: &Path, cpus: &[usize]) {
    let user = std::env::var_os("LD_PRELOAD");
    let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
    cmd.env(
        "LD_PRELOAD",
        goset::taskenv::preload_list(user.as_deref(), lib.as_os_str()),
    )
    .env(goset_plan::vars::CPUS, list.join(","))
    .env_remove(goset_plan::vars::PLAN);
}

/// The task CPUs of a goset-run `--json` report, in slot order.
pub fn report_cpus(json: &[u8]) -> Option<Vec<usize>> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    (v["selection"]["task_cpus"].as_array()?.iter())
        .map(|c| c.as_u64().map(|c| c as usize))
        .collect()
}

/// The CPUs goset-run would select now with the experiment's flags (`--dry-run`, its report
/// on stdout), for a shim run: the same selection a goset run gets, made the same way.
fn goset_selection(setup: &Setup) -> Result<Vec<usize>, String> {
    let mut cmd = Command::new(&setup.goset_run);
    cmd.args(&setup.goset_args)
        .args(["--dry-run", "--json", "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = cmd
        .spawn()
        .map_err(|e| format!("goset-run --dry-run: {e}"))?;
    crate::signals::running(child.id() as i32);
    let out = child.wait_with_output();
    crate::signals::running(0);
    let out = out.map_err(|e| format!("goset-run --dry-run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "goset-run --dry-run failed: {}",
            tail(&String::from_utf8_lossy(&out.stderr), 1)
        ));
    }
    report_cpus(&out.stdout).ok_or_else(|| "goset-run --dry-run gave no task_cpus".into())
}

/// Reads a pipe to its end on a thread of its own.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut out);
        }
        out
    })
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Makes one run: `k` is the number of taskset runs before it (its rotation).
pub fn run_one(setup: &Setup, planned: Planned, k: usize) -> Run {
    std::thread::sleep(setup.settle);
    let mut run = Run {
        planned,
        cpus: None,
        status: None,
        discarded: None,
        wall_s: 0.0,
        samples: Vec::new(),
        stderr_tail: None,
    };
    let report = report_path(setup, planned);
    let mut cmd = command_of(setup, planned.mode, report.as_deref());
    match planned.mode {
        Mode::Baseline => run.cpus = Some(setup.allowed.clone()),
        Mode::Taskset => {
            let cpus = (setup.fixed.clone())
                .unwrap_or_else(|| taskset_cpus(&setup.allowed, setup.taskset_width, k));
            pin_before_exec(&mut cmd, &cpus);
            run.cpus = Some(cpus);
        }
        Mode::Shim => {
            let cpus = match (&setup.fixed, &setup.shim) {
                (_, None) => Err(format!(
                    "libgoset.so not found (build it, or set {})",
                    goset::rundir::LIB_ENV
                )),
                (Some(fixed), Some(_)) => Ok(fixed.clone()),
                (None, Some(_)) => goset_selection(setup),
            };
            let cpus = match cpus {
                Ok(c) => c,
                Err(why) => {
                    run.discarded = Some(format!("could not start: {why}"));
                    return run;
                }
            };
            if let Some(lib) = &setup.shim {
                preload_shim(&mut cmd, lib, &cpus);
            }
            pin_before_exec(&mut cmd, &cpus);
            run.cpus = Some(cpus);
        }
        Mode::Goset | Mode::Mask => {}
    }
    let start = Instant::now();
    // Pinned when started, so a CPU the machine lacks was refused before the first run.
    let _noise = (setup.noise_at.as_ref())
        .and_then(|(spec, at)| crate::noise_load::NoiseLoad::start(spec, *at).ok());
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            run.discarded = Some(format!("could not start: {e}"));
            return run;
        }
    };
    let ended = see_out(child, setup.timeout, start);
    run.wall_s = ended.wall_s;
    let text = match setup.stream {
        Stream::Stdout => ended.stdout,
        Stream::Stderr => ended.stderr.clone(),
        Stream::Both => ended.stdout + &ended.stderr,
    };
    if let Some(r) = &report {
        run.cpus = std::fs::read(r).ok().and_then(|j| report_cpus(&j));
        let _ = std::fs::remove_file(r);
    }
    run.samples = metrics::extract(&text);
    run.status = (ended.status).map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)));
    run.discarded = verdict(ended.timed_out, run.status, setup.timeout);
    if run.discarded.is_some() {
        run.stderr_tail = Some(tail(&ended.stderr, 3));
    }
    run
}

/// Where goset-run writes the report of a run made through it.
fn report_path(setup: &Setup, planned: Planned) -> Option<PathBuf> {
    (setup.report_dir.as_ref())
        .filter(|_| planned.mode.uses_goset_run())
        .map(|d| {
            d.join(format!(
                "run-{}-{}.json",
                planned.round,
                planned.mode.name()
            ))
        })
}

/// How a started run ended, and what it wrote.
struct Ended {
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    wall_s: f64,
    stdout: String,
    stderr: String,
}

/// Sees a started run to its end, within `timeout` of `start`, and its process group with it.
fn see_out(mut child: std::process::Child, timeout: Option<Duration>, start: Instant) -> Ended {
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    crate::signals::running(child.id() as i32);
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let (status, timed_out) = wait_within(&mut child, group, timeout, start);
    let wall_s = start.elapsed().as_secs_f64();
    // What the run left behind in its group (a daemonised helper holding the pipes) ends too.
    let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
    crate::signals::running(0);
    Ended {
        status,
        timed_out,
        wall_s,
        stdout: String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned(),
    }
}

/// Waits for `child`; past `timeout` its group is sent SIGTERM, and SIGKILL 2 s later.
/// Returns its status, if it could be read, and whether it was timed out.
fn wait_within(
    child: &mut std::process::Child,
    group: nix::unistd::Pid,
    timeout: Option<Duration>,
    start: Instant,
) -> (Option<std::process::ExitStatus>, bool) {
    let mut termed: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(_) => break None,
        }
        let over = timeout.is_some_and(|t| start.elapsed() > t);
        match termed {
            None if over => {
                let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
                termed = Some(Instant::now());
            }
            Some(at) if at.elapsed() > Duration::from_secs(2) => {
                let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (status, termed.is_some())
}

/// Why a run that ended so is discarded, or `None` if it counts.
fn verdict(timed_out: bool, status: Option<i32>, timeout: Option<Duration>) -> Option<String> {
    match (timed_out, status) {
        (true, _) => Some(format!(
            "timed out after {:.1} s",
            timeout.unwrap_or_default().as_secs_f64()
        )),
        (false, Some(0)) => None,
        (false, Some(s)) => Some(format!("exit status {s}")),
        (false, None) => Some("its status could not be read".into()),
    }
}

/// Makes every run of `plan` in order; `progress` is told after each.
pub fn run_all(setup: &Setup, plan: &[Planned], progress: &mut dyn FnMut(&Run)) -> Vec<Run> {
    let mut taskset_runs = 0;
    let mut runs = Vec::with_capacity(plan.len());
    for &planned in plan {
        let run = run_one(setup, planned, taskset_runs);
        if planned.mode == Mode::Taskset {
            taskset_runs += 1;
        }
        progress(&run);
        runs.push(run);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(script: &str) -> Setup {
        Setup {
            command: vec!["sh".into(), "-c".into(), script.into()],
            goset_run: "/nonexistent/goset-run".into(),
            goset_args: Vec::new(),
            taskset_width: 1,
            allowed: vec![0],
            fixed: None,
            shim: None,
            report_dir: None,
            settle: Duration::ZERO,
            timeout: Some(Duration::from_secs(30)),
            stream: Stream::Stdout,
            noise_at: None,
        }
    }

    fn planned(mode: Mode) -> Planned {
        Planned {
            round: 0,
            mode,
            warmup: false,
        }
    }

    #[test]
    fn numbers_are_read_and_failures_discarded() {
        let r = run_one(&setup("echo 'x: 1.5 ms'"), planned(Mode::Baseline), 0);
        assert!(r.counts(), "{r:?}");
        assert_eq!(r.samples[0].value, 1.5);
        let r = run_one(&setup("echo oops >&2; exit 3"), planned(Mode::Baseline), 0);
        assert_eq!(r.discarded.as_deref(), Some("exit status 3"));
        assert_eq!(r.stderr_tail.as_deref(), Some("oops"));
        let r = run_one(&setup("kill -9 $$"), planned(Mode::Baseline), 0);
        assert_eq!(r.status, Some(137));
        let r = run_one(&setup("true"), planned(Mode::Goset), 0);
        assert!(r.discarded.unwrap().starts_with("could not start"));
    }

    #[test]
    fn every_run_records_its_cpus_and_a_shim_run_is_preloaded_and_pinned() {
        let cpu = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
            .map(|s| (0..1024).find(|&c| s.is_set(c).unwrap_or(false)).unwrap())
            .unwrap();
        let mut s = setup(
            "echo \"cpus: $GOSET_CPUS\"; case $LD_PRELOAD in \
             */nonexistent/libgoset.so) echo 'shim last: 1';; *) echo 'shim last: 0';; esac; \
             grep Cpus_allowed_list /proc/self/status",
        );
        s.allowed = vec![cpu];
        let r = run_one(&s, planned(Mode::Baseline), 0);
        assert_eq!(
            r.cpus,
            Some(vec![cpu]),
            "a baseline run has goset-bench's CPUs"
        );
        let r = run_one(&s, planned(Mode::Shim), 0);
        assert!(
            r.discarded.unwrap().contains("libgoset.so not found"),
            "no shim, no shim run"
        );
        // A library that does not exist: the loader says so and goes on.
        s.shim = Some("/nonexistent/libgoset.so".into());
        s.fixed = Some(vec![cpu]);
        let r = run_one(&s, planned(Mode::Shim), 0);
        assert!(r.counts(), "{r:?}");
        assert_eq!(r.cpus, Some(vec![cpu]));
        let value = |key: &str| {
            (r.samples.iter())
                .find(|m| m.key == key)
                .unwrap_or_else(|| panic!("no {key} in {r:?}"))
                .value
        };
        assert_eq!(value("cpus"), cpu as f64);
        assert_eq!(
            value("Cpus_allowed_list"),
            cpu as f64,
            "pinned as GOSET_CPUS"
        );
        assert_eq!(value("shim last"), 1.0, "LD_PRELOAD ends with the shim");
        // With --include fixing the CPUs, taskset leaves its rotation.
        s.allowed = vec![cpu, cpu + 1];
        let r = run_one(&s, planned(Mode::Taskset), 1);
        assert_eq!(r.cpus, Some(vec![cpu]));
        assert_eq!(
            report_cpus(br#"{"selection": {"task_cpus": [3, 1]}}"#),
            Some(vec![3, 1])
        );
        assert_eq!(report_cpus(b"{}"), None);
    }

    #[test]
    fn a_taskset_run_is_pinned_and_a_slow_run_ends() {
        let cpu = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
            .map(|s| (0..1024).find(|&c| s.is_set(c).unwrap_or(false)).unwrap())
            .unwrap();
        let mut s = setup("grep Cpus_allowed_list /proc/self/status");
        s.allowed = vec![cpu];
        let r = run_one(&s, planned(Mode::Taskset), 0);
        assert_eq!(r.cpus, Some(vec![cpu]));
        assert_eq!(r.samples[0].value, cpu as f64, "{r:?}");
        let mut s = setup("trap '' TERM; sleep 60");
        s.timeout = Some(Duration::from_millis(100));
        let r = run_one(&s, planned(Mode::Baseline), 0);
        assert!(r.discarded.unwrap().starts_with("timed out"));
        assert!(r.wall_s < 30.0, "the child that ignores SIGTERM was killed");
    }
}
