//! Hooked calls on small stacks (`programs/small_stacks.c`): every hook's stack use, measured
//! on a pattern-filled stack and compared with the same call without the shim, stays within the
//! budgets of `preload/src/lib.rs` (2 KiB once the shim is initialised, a logged decision
//! included; 4 KiB for a first call that initialises, before the shim's constructor, and for a
//! new thread's start and exit); threads on `PTHREAD_STACK_MIN` stacks (with a guard page, and
//! self-allocated with a canary below) and a signal handler on an 8 KiB alternate stack call
//! the hooks and run on; `cyclictest` (32 KiB thread stacks) runs under goset-run.

use shim_tests::*;
use std::path::PathBuf;
use std::process::Command;

/// Extra stack a hook may use once the shim is initialised.
const WARM_BUDGET: i64 = 2048;
/// Extra stack on any other path: a first call that initialises, a thread's start and exit.
const COLD_BUDGET: i64 = 4096;

/// Hooks as the program names them; the last three are the read side.
const HOOKS: [&str; 9] = [
    "pthread_create",
    "pthread_setaffinity_np",
    "sched_setaffinity",
    "syscall_setaffinity",
    "pthread_attr_setaffinity_np",
    "pthread_setattr_default_np",
    "sched_getaffinity",
    "pthread_getaffinity_np",
    "syscall_getaffinity",
];
/// Hooks whose first call initialises the shim and places the main thread.
const PLACING: usize = 6;

/// `small_stacks` linked against `libsmall_stacks_early.so` (same source, `-DEARLY_LIB`), both
/// bound at load (`-z now`), so that no lazy symbol binding is charged to a measured call.
struct StackProgram {
    build: Build,
    exe: PathBuf,
}

impl StackProgram {
    fn build() -> Option<StackProgram> {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        if !Command::new(&cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            missing("a C compiler", "apt-get install -y gcc");
            return None;
        }
        let build = Build::new();
        let dir = build.dir().to_path_buf();
        let src = programs_dir().join("small_stacks.c");
        let flags = ["-O1", "-Wall", "-pthread", "-Wl,-z,now"];
        let lib = dir.join("libsmall_stacks_early.so");
        let exe = dir.join("small_stacks");
        let steps: [Vec<std::ffi::OsString>; 2] = [
            vec![
                "-shared".into(),
                "-fPIC".into(),
                "-DEARLY_LIB".into(),
                "-o".into(),
                lib.into(),
            ],
            vec![
                "-o".into(),
                exe.clone().into(),
                format!("-L{}", dir.display()).into(),
                format!("-Wl,-rpath,{}", dir.display()).into(),
            ],
        ];
        for (i, step) in steps.iter().enumerate() {
            let mut cmd = Command::new(&cc);
            cmd.args(flags).args(step).arg(&src);
            if i == 1 {
                cmd.arg("-lsmall_stacks_early");
            }
            let out = cmd.output().expect("run the C compiler");
            assert!(
                out.status.success(),
                "{cmd:?} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(StackProgram { build, exe })
    }

    /// `small_stacks <mode>` without the shim.
    fn bare(&self, mode: &str, env: &[(&str, &str)]) -> Report {
        let mut cmd = clean_command(&self.exe);
        cmd.arg(mode).envs(env.iter().copied());
        main_report(run(cmd))
    }

    /// `small_stacks <mode>` by hand under the shim with `cpus`, logging to a file (so that
    /// logged decisions are measured).
    fn by_hand(&self, mode: &str, cpus: &str, env: &[(&str, &str)]) -> (Report, Vec<Report>) {
        let log = self.build.dir().join("placement.log");
        let mut cmd = by_hand(&self.exe, cpus);
        cmd.arg(mode)
            .env("GOSET_LOG", &log)
            .envs(env.iter().copied());
        let outcome = run(cmd);
        let all = reports(&outcome);
        (main_report(outcome), all)
    }

    /// `small_stacks <mode>` under `goset-run -n <n>`; the plan's CPUs too.
    fn goset_run(
        &self,
        n: usize,
        mode: &str,
        env: &[(&str, &str)],
    ) -> (Report, Vec<Report>, Vec<usize>) {
        let (outcome, selection) = run_under_goset(n, &[], &self.exe, &[mode], env);
        let all = reports(&outcome);
        (main_report(outcome), all, selection.task_cpus)
    }
}

/// The main thread's report of a run that must have exited 0.
fn main_report(outcome: Outcome) -> Report {
    outcome.expect_code(0);
    assert!(
        !outcome.stderr.contains("goset:"),
        "no warning expected\n{}",
        outcome.dump()
    );
    let all = reports(&outcome);
    one(&all, "main", 0).clone()
}

fn number(r: &Report, key: &str) -> i64 {
    r.field(key)
        .parse()
        .unwrap_or_else(|_| panic!("{key} in {}", r.line))
}

/// Asserts the shim's extra stack for `key` is within `budget`; returns it.
fn within(shim: &Report, bare: &Report, key: &str, budget: i64, how: &str) -> i64 {
    let (s, b) = (number(shim, key), number(bare, key));
    assert!(b > 0, "{key}: the bare run measured nothing: {}", bare.line);
    let extra = s - b;
    eprintln!("{how}: {key}: {s} bytes with the shim, {b} without: {extra:+}");
    assert!(
        extra <= budget,
        "{how}: {key} takes {extra} bytes of stack more under the shim ({s} vs {b}); the budget is {budget}"
    );
    extra
}

#[test]
fn every_hook_stays_within_its_stack_budget() {
    let Some(prog) = StackProgram::build() else {
        return;
    };
    let bare = prog.bare("measure", &[]);
    let (shim, _) = prog.by_hand("measure", "1,0", &[]);
    for hook in HOOKS {
        within(
            &shim,
            &bare,
            &format!("{hook}_cold"),
            COLD_BUDGET,
            "first call",
        );
        within(
            &shim,
            &bare,
            &format!("{hook}_warm"),
            WARM_BUDGET,
            "warm call",
        );
    }
    let start = within(&shim, &bare, "thread_start", COLD_BUDGET, "thread start");
    // The meter sees the shim: its decisions (a log record each) cost something.
    assert!(start > 0, "the shim's thread start was not measured");
    let set = within(
        &shim,
        &bare,
        "sched_setaffinity_warm",
        WARM_BUDGET,
        "warm call",
    );
    assert!(set > 0, "the shim's sched_setaffinity was not measured");
}

/// Runs `small_stacks early` with EARLY_HOOK=`hook` bare, by hand and under goset-run, and
/// checks the first call's budget and that it was indeed the one that initialised the shim.
fn check_early(prog: &StackProgram, hook: &str, placing: bool) {
    let env = [("EARLY_HOOK", hook)];
    let bare = prog.bare("early", &env);
    let all = own_allowed();
    let (first, last) = (all[0], *all.last().unwrap());
    let cpus = format!("{last},{first}");
    let (by_hand, _) = prog.by_hand("early", &cpus, &env);
    let (goset, _, plan) = prog.goset_run(all.len().min(2), "early", &env);
    for (shim, slot0, how) in [(&by_hand, last, "by hand"), (&goset, plan[0], "goset-run")] {
        let what = format!("{hook} before the constructor, {how}");
        within(shim, &bare, "early", COLD_BUDGET, &what);
        if placing && all.len() > 1 {
            // By hand, unplaced before the call (the start mask: more than one CPU); under
            // goset-run, born on slot 0 (claimed before exec). On slot 0 after, either way.
            let before = cpulist(shim.field("before"));
            let born_placed = how == "goset-run";
            assert!(
                if born_placed {
                    before == vec![slot0]
                } else {
                    before.len() > 1 && before.contains(&slot0)
                },
                "{how}: the main thread was not where it starts before {hook}: {}",
                shim.line
            );
            assert_eq!(
                cpulist(shim.field("after")),
                vec![slot0],
                "{how}: {hook}, the first call, initialises the shim: {}",
                shim.line
            );
        }
    }
}

#[test]
fn a_hook_called_before_the_shims_constructor_stays_within_budget() {
    let Some(prog) = StackProgram::build() else {
        return;
    };
    for (i, hook) in HOOKS.iter().enumerate() {
        check_early(&prog, hook, i < PLACING);
    }
}

/// Checks the eight small-stack threads: both calls succeeded, nothing below a self-allocated
/// stack was written, and every thread ran on a planned CPU.
fn check_threads(all: &[Report], plan: &[usize], how: &str) {
    let workers = with_role(all, "worker");
    assert_eq!(workers.len(), 8, "{how}: eight small-stack threads");
    for w in &workers {
        assert_eq!(
            (w.field("first"), w.field("second")),
            ("0", "0"),
            "{how}: {}",
            w.line
        );
        if w.field("stack") == "own" {
            assert_eq!(w.field("canary"), "intact", "{how}: {}", w.line);
        }
        assert!(
            plan.contains(&w.single_cpu()),
            "{how}: off the plan {plan:?}: {}",
            w.line
        );
    }
}

#[test]
fn threads_on_minimum_stacks_call_every_hook() {
    let Some(prog) = StackProgram::build() else {
        return;
    };
    // Without the shim the program runs as well: what follows measures the shim.
    prog.bare("threads", &[]);
    let (_, all) = prog.by_hand("threads", "0,1", &[]);
    check_threads(&all, &[0, 1], "by hand");
    let (_, all, plan) = prog.goset_run(2, "threads", &[]);
    check_threads(&all, &plan, "goset-run");
}

#[test]
fn a_signal_handler_on_an_8k_alternate_stack_sets_affinity() {
    let Some(prog) = StackProgram::build() else {
        return;
    };
    let bare = prog.bare("signal", &[]);
    let (by_hand, _) = prog.by_hand("signal", "0,1", &[]);
    let (goset, _, _) = prog.goset_run(1, "signal", &[]);
    for (shim, how) in [(&by_hand, "by hand"), (&goset, "goset-run")] {
        assert_eq!(shim.field("altstack"), "8192", "{}", shim.line);
        assert_eq!(
            (
                shim.field("handled"),
                shim.field("cold_ret"),
                shim.field("warm_ret")
            ),
            ("2", "0", "0"),
            "{how}: {}",
            shim.line
        );
        within(
            shim,
            &bare,
            "cold_depth",
            COLD_BUDGET,
            &format!("signal handler, {how}"),
        );
        within(
            shim,
            &bare,
            "warm_depth",
            WARM_BUDGET,
            &format!("signal handler, {how}"),
        );
    }
}

#[test]
fn cyclictest_runs_under_goset_run() {
    if !Command::new("cyclictest")
        .arg("--help")
        .output()
        .is_ok_and(|o| !o.stdout.is_empty() || !o.stderr.is_empty())
    {
        missing("cyclictest", "apt-get install -y rt-tests");
        return;
    }
    for threads in [1usize, 2] {
        let t = threads.to_string();
        let args = ["-t", &t, "-l", "200", "-i", "1000", "-q"];
        let dir = tempfile::tempdir().expect("temp dir");
        let json = dir.path().join("selection.json");
        let mut cmd = goset_run(threads, &json, &[], "cyclictest");
        cmd.args(args);
        let _serial = launcher_lock();
        let outcome = run(cmd);
        outcome.expect_code(0);
        for i in 0..threads {
            assert!(
                outcome.stdout.contains(&format!("T: {i} (")),
                "cyclictest -t {threads}: thread {i} reported\n{}",
                outcome.dump()
            );
        }
    }
}
