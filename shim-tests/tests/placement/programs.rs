//! Programs made of processes, the programs of `bench/programs/run.sh` with the inputs its
//! `inputs.sh` writes (smaller): `make -j2` of 16 C files, `cmake` + `ninja -j2` of the same,
//! `seq 4 | xargs -P2 -I{} sh burn.sh` (a shell loop as the job), and Python `multiprocessing`
//! Pool(2) with the fork, forkserver and spawn start methods, each by hand (`GOSET_CPUS` of two
//! CPUs) and under `goset-run -n 2`; and a program whose main thread waits for two busy workers
//! under libfaketime stacked with the shim.
//!
//! Their jobs must not all end up on one CPU while the other idles. An observer
//! ([`shim_tests::observer`]) reads every thread of the task's tree from `/proc` while it runs
//! (the kernel's `processor`, not goset's log), and two rules are checked:
//! - the threads that computed (ran [`BUSY_S`] or more) ran, together, on every planned CPU: a
//!   job started by `posix_spawn` or `vfork` + exec and left bound to its parent's one CPU
//!   fails this whatever else runs on the machine;
//! - no two of them each burned 40% of a window on one CPU for three windows in a row while
//!   another CPU of the task was left idle (the observer's rule: a CPU another program keeps
//!   busy is not idle, so a loaded machine excuses what a plain mask would do too).
//!
//! The jobs of `xargs -P2` also say, from inside, which CPUs they were allowed and when they ran:
//! two that ran together must not both be bound to the same one CPU (before and after their
//! loops: under goset-run the housekeeper gives a roaming job a CPU of its own in between),
//! however loaded the machine.
//!
//! libfaketime fakes `clock_gettime` for every library of the process: the two workers, reported
//! from inside (`Cpus_allowed_list`), must be on distinct CPUs or roam, as without it.
//!
//! Each test needs its package (make, cmake + ninja-build, python3, libfaketime), and skips
//! saying how to install it when it is missing, except under `CI=true`.

use shim_tests::observer::{tag, Observer, Root, Watch, TAG_VAR};
use shim_tests::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The work of each job in `inputs.sh` units: about a tenth of a second a compile, half a
/// second a shell loop, a fifth a Python job.
const SCALE: &str = "5";

/// Run time that makes a thread one that computed, seconds.
const BUSY_S: f64 = 0.02;

/// The workspace's `bench/programs/` directory.
fn bench_programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bench/programs")
        .canonicalize()
        .expect("bench/programs beside shim-tests")
}

/// The inputs of `bench/programs/inputs.sh` at [`SCALE`], in a temporary directory.
fn inputs() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("goset-programs-")
        .tempdir()
        .expect("temp dir");
    let out = Command::new(bench_programs().join("inputs.sh"))
        .arg(dir.path())
        .arg(SCALE)
        .output()
        .expect("run bench/programs/inputs.sh");
    assert!(
        out.status.success(),
        "inputs.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// A path as text, for a command line.
fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Whether every one of `tools` runs (`--version`); when not, [`missing`] says to install
/// `package`.
fn have(tools: &[&str], package: &str) -> bool {
    if tools.iter().all(|t| runs(t)) {
        return true;
    }
    missing(&tools.join(", "), &format!("apt-get install -y {package}"));
    false
}

/// The Python of the Debian package (`/usr/bin/python3`, not a pyenv shim), else `python3`.
fn python() -> Option<String> {
    let python = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| runs(p))
        .map(str::to_string);
    if python.is_none() {
        missing("python3", "apt-get install -y python3");
    }
    python
}

/// How the program runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Under {
    /// `LD_PRELOAD=libgoset.so GOSET_CPUS=<two CPUs>`.
    Shim,
    /// `goset-run -n 2`.
    GosetRun,
}

/// Runs `program args` `under` the shim (on `cpus`) or goset-run, watched by the observer; the
/// outcome (exit 0 checked), the planned CPUs and what the observer saw.
fn watched(
    under: Under,
    cpus: &str,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Outcome, Vec<usize>, Watch) {
    let tag = tag();
    let _alone = launcher_lock();
    let observer = Observer::start(Root::Tagged(tag.clone()), under == Under::Shim);
    let (outcome, plan) = match under {
        Under::Shim => {
            let mut cmd = by_hand(program, cpus);
            cmd.args(args).envs(env.iter().copied()).env(TAG_VAR, &tag);
            (run(cmd), cpulist(cpus))
        }
        Under::GosetRun => {
            let mut env = env.to_vec();
            env.push((TAG_VAR, &tag));
            let (outcome, selection) = run_under_goset(2, &[], Path::new(program), args, &env);
            (outcome, selection.task_cpus)
        }
    };
    let watch = observer.finish();
    outcome.expect_code(0);
    (outcome, plan, watch)
}

/// The two rules of the module's note, on what the observer saw of `what`.
fn check_spread(what: &str, plan: &[usize], watch: &Watch) {
    let busy: Vec<_> = (watch.threads.iter())
        .filter(|t| t.run_s >= BUSY_S)
        .collect();
    assert!(
        busy.len() >= 2,
        "{what}: the observer saw {} threads compute\n{}",
        busy.len(),
        watch.summary()
    );
    let ran_on: BTreeSet<usize> = (busy.iter())
        .flat_map(|t| t.cpus.iter().map(|&c| c as usize))
        .collect();
    let planned: BTreeSet<usize> = plan.iter().copied().collect();
    assert!(
        planned.is_subset(&ran_on),
        "{what}: the threads that computed ran on CPUs {ran_on:?} only, not on every planned CPU \
         {planned:?}\n{}",
        watch.summary()
    );
    assert!(
        watch.doubled.is_empty(),
        "{what}: busy threads doubled up on one CPU while another was left idle:\n{}\n\
         busiest processes now:\n{}",
        watch.summary(),
        shim_tests::observer::busiest_processes()
    );
}

/// `make -j2` of the 16 C files (`CC=cc`, which starts cc1 and as with vfork, itself started by
/// make's posix_spawn).
fn make(under: Under) {
    let Some(cpus) = first_two_allowed().filter(|_| have(&["make", "cc"], "make gcc")) else {
        return;
    };
    let dir = inputs();
    let c = dir.path().join("c");
    let args = ["-C", path(&c), "-j2", "-s", "CC=cc"];
    let (_, plan, watch) = watched(under, &cpus, "make", &args, &[]);
    assert!(c.join("prog").is_file(), "make built no program");
    check_spread(&format!("make -j2 under {under:?}"), &plan, &watch);
}

#[test]
fn make_j2_by_hand_uses_both_cpus() {
    make(Under::Shim);
}

#[test]
fn make_j2_under_goset_run_uses_both_cpus() {
    make(Under::GosetRun);
}

/// `ninja -j2` of the same files, configured by `cmake -G Ninja` outside the task.
fn ninja(under: Under) {
    let tools = ["cmake", "ninja", "cc"];
    let Some(cpus) = first_two_allowed().filter(|_| have(&tools, "cmake ninja-build gcc")) else {
        return;
    };
    let dir = inputs();
    let build = dir.path().join("build");
    let configure = {
        let _alone = launcher_lock();
        Command::new("cmake")
            .arg("-S")
            .arg(dir.path().join("c"))
            .arg("-B")
            .arg(&build)
            .args(["-G", "Ninja"])
            .output()
            .expect("run cmake")
    };
    assert!(
        configure.status.success(),
        "cmake: {}",
        String::from_utf8_lossy(&configure.stderr)
    );
    let args = ["-C", path(&build), "-j2"];
    let (_, plan, watch) = watched(under, &cpus, "ninja", &args, &[]);
    assert!(build.join("prog").is_file(), "ninja built no program");
    check_spread(&format!("ninja -j2 under {under:?}"), &plan, &watch);
}

#[test]
fn ninja_j2_by_hand_uses_both_cpus() {
    ninja(Under::Shim);
}

#[test]
fn ninja_j2_under_goset_run_uses_both_cpus() {
    ninja(Under::GosetRun);
}

/// `seq 4 | xargs -P2 -I{} sh burn.sh`: four shells that compute, two at a time.
fn xargs(under: Under) {
    let tools = ["xargs", "seq"];
    let Some(cpus) = first_two_allowed().filter(|_| have(&tools, "findutils coreutils")) else {
        return;
    };
    let dir = inputs();
    let burn = dir.path().join("burn.sh");
    let script = format!("seq 4 | xargs -P2 -I{{}} sh {}", path(&burn));
    let (outcome, plan, watch) = watched(under, &cpus, "sh", &["-c", &script], &[]);
    let what = format!("{script} under {under:?}");
    check_spread(&what, &plan, &watch);
    let jobs = burn_lines(&outcome);
    assert_eq!(
        jobs.len(),
        4,
        "{what}: four jobs report\n{}",
        outcome.dump()
    );
    for (i, a) in jobs.iter().enumerate() {
        for b in &jobs[i + 1..] {
            let overlap = a.end.min(b.end) - a.start.max(b.start);
            // Each job reads its mask before and after its loop; under goset-run the
            // housekeeper may give a roaming job a CPU of its own in between (after the other
            // job ended), so only a job bound to one CPU at both reads is known to have been
            // bound to it all along.
            let bound = |j: &Job| j.allowed.len() == 1 && j.first == j.allowed;
            assert!(
                overlap < OVERLAP_S || !bound(a) || !bound(b) || a.allowed != b.allowed,
                "{what}: two jobs that ran together for {overlap:.2} s were both bound to CPU \
                 {:?}\n{}",
                a.allowed,
                outcome.stdout
            );
        }
    }
}

/// Time two jobs must have run together for their masks to be compared, seconds: more than the
/// clock ticks (10 ms) the start is counted in.
const OVERLAP_S: f64 = 0.1;

/// A job of `burn.sh` as it reported itself: its CPUs before and after its loop, and when it
/// ran (seconds since boot).
struct Job {
    first: Vec<usize>,
    allowed: Vec<usize>,
    start: f64,
    end: f64,
}

/// The `burn pid=P first=L allowed=L start=TICKS end=SECONDS` lines of `outcome`.
fn burn_lines(outcome: &Outcome) -> Vec<Job> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let lines = outcome.stdout.lines().filter(|l| l.starts_with("burn "));
    lines
        .map(|line| {
            let field = |key: &str| {
                (line.split_whitespace())
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                    .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
            };
            let number = |key: &str| -> f64 {
                (field(key).parse()).unwrap_or_else(|e| panic!("{key} in {line:?}: {e}"))
            };
            Job {
                first: cpulist(field("first")),
                allowed: cpulist(field("allowed")),
                start: number("start") / ticks,
                end: number("end"),
            }
        })
        .collect()
}

#[test]
fn xargs_p2_of_shell_loops_by_hand_uses_both_cpus() {
    xargs(Under::Shim);
}

#[test]
fn xargs_p2_of_shell_loops_under_goset_run_uses_both_cpus() {
    xargs(Under::GosetRun);
}

/// `pool.py METHOD`: Pool(2) of that start method maps 8 jobs; the sum it prints checked.
fn pool(method: &str, under: Under) {
    let (Some(python), Some(cpus)) = (python(), first_two_allowed()) else {
        return;
    };
    let dir = inputs();
    let script = dir.path().join("pool.py");
    let env = [("PYTHONDONTWRITEBYTECODE", "1")];
    let args = [path(&script), method];
    let (outcome, plan, watch) = watched(under, &cpus, &python, &args, &env);
    assert!(
        outcome.stdout.trim().parse::<u64>().is_ok(),
        "pool.py prints its sum\n{}",
        outcome.dump()
    );
    let what = format!("Pool(2), {method}, under {under:?}");
    check_spread(&what, &plan, &watch);
}

#[test]
fn pool_fork_by_hand_uses_both_cpus() {
    pool("fork", Under::Shim);
}

#[test]
fn pool_fork_under_goset_run_uses_both_cpus() {
    pool("fork", Under::GosetRun);
}

#[test]
fn pool_forkserver_by_hand_uses_both_cpus() {
    pool("forkserver", Under::Shim);
}

#[test]
fn pool_forkserver_under_goset_run_uses_both_cpus() {
    pool("forkserver", Under::GosetRun);
}

#[test]
fn pool_spawn_by_hand_uses_both_cpus() {
    pool("spawn", Under::Shim);
}

#[test]
fn pool_spawn_under_goset_run_uses_both_cpus() {
    pool("spawn", Under::GosetRun);
}

/// libfaketime's library, as the Debian package installs it; `None` (skipped) without it.
fn libfaketime() -> Option<PathBuf> {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketime.so.1")])
        .find(|p| p.is_file());
    if found.is_none() {
        missing("libfaketime", "apt-get install -y libfaketime");
    }
    found
}

/// `two_workers` with libfaketime ahead of the shim in `LD_PRELOAD` (`inputs.sh`'s
/// `stacked.sh`) and the clock set a day back: its two busy workers on distinct CPUs, or
/// roaming, as without libfaketime.
fn faketime(under: Under) {
    let (Some(lib), Some(prog)) = (libfaketime(), Program::c("two_workers.c")) else {
        return;
    };
    let Some(cpus) = first_two_allowed() else {
        return;
    };
    let dir = inputs();
    let stacked = dir.path().join("stacked.sh");
    let env = [("FAKETIME", "-1d"), ("FAKETIME_LIB", path(&lib))];
    let args = [path(&stacked), prog.path_str()];
    let (outcome, plan) = match under {
        Under::Shim => {
            let mut cmd = by_hand("sh", &cpus);
            cmd.args(args).envs(env);
            (run(cmd), cpulist(&cpus))
        }
        Under::GosetRun => {
            let (outcome, selection) = run_under_goset(2, &[], Path::new("sh"), &args, &env);
            (outcome, selection.task_cpus)
        }
    };
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let workers = with_role(&reports, "worker");
    assert_eq!(workers.len(), 2, "two workers report\n{}", outcome.dump());
    assert_distinct(workers.iter().copied(), &plan);
}

#[test]
fn libfaketime_stacked_with_the_shim_by_hand_spreads_two_workers() {
    faketime(Under::Shim);
}

#[test]
fn libfaketime_stacked_under_goset_run_spreads_two_workers() {
    faketime(Under::GosetRun);
}
