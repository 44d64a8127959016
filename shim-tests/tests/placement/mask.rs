//! `goset-run --placement mask`: the task keeps one shared mask of the selected CPUs,
//! as `taskset -c` would give it, without libgoset.so; and goset-bench's `mask` and `shim`
//! modes, each run's CPUs in its JSON.

use shim_tests::*;
use std::path::Path;

fn json_of(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

/// Two CPUs at least, or the test says why it does nothing.
fn two_cpus() -> Option<Vec<usize>> {
    let cpus = own_allowed();
    if cpus.len() < 2 {
        skip_note("needs two CPUs: -n 2 selects two");
        return None;
    }
    Some(cpus)
}

#[test]
fn every_thread_shares_the_mask_of_the_selection_and_no_shim_is_loaded() {
    if two_cpus().is_none() {
        return;
    }
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    // The main thread and two workers, all alive together, each reading its own mask.
    let mut cmd = goset_run(2, &json, &["--placement", "mask"], prog.path());
    cmd.arg("2");
    let outcome = {
        let _serial = launcher_lock();
        run(cmd)
    };
    outcome.expect_code(0);
    let report = json_of(&json);
    assert_eq!(report["placement"], "mask", "{report}");
    assert_eq!(report["run"]["shim"], false, "{report}");
    let mut selected = Selection::read(&json, &outcome).task_cpus;
    assert_eq!(selected.len(), 2, "{selected:?}");
    selected.sort_unstable();
    let reports = reports(&outcome);
    assert_eq!(reports.len(), 3, "{}", outcome.dump());
    for r in &reports {
        assert_eq!(
            r.allowed, selected,
            "every thread's mask is the whole selection: {}",
            r.line
        );
    }
    assert!(
        outcome
            .stderr
            .contains("placement mask: every thread shares the mask of cpus"),
        "{}",
        outcome.dump()
    );
    assert!(
        (outcome.stderr.lines()).any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.starts_with(&["placement", "mask"])
        }),
        "the Run table names the placement\n{}",
        outcome.dump()
    );
}

/// `cat`'s own mappings and the environment a task gets under goset-run `extra`.
fn maps_and_env(extra: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut cmd = goset_run(2, &json, extra, "sh");
    cmd.args(["-c", "cat /proc/self/maps; echo '-- env'; env"]);
    let outcome = {
        let _serial = launcher_lock();
        run(cmd)
    };
    outcome.expect_code(0);
    let (maps, env) =
        (outcome.stdout.split_once("-- env\n")).unwrap_or_else(|| panic!("{}", outcome.dump()));
    (maps.to_string(), env.to_string())
}

#[test]
fn a_mask_task_gets_no_preload_and_no_plan_but_its_thread_counts() {
    if two_cpus().is_none() {
        return;
    }
    let (maps, env) = maps_and_env(&["--placement", "mask"]);
    assert!(
        !maps.contains("libgoset"),
        "libgoset.so in the task:\n{maps}"
    );
    for var in ["LD_PRELOAD=", "GOSET_PLAN="] {
        assert!(
            !env.lines().any(|l| l.starts_with(var)),
            "{var} in the task's environment:\n{env}"
        );
    }
    for var in ["OMP_NUM_THREADS=2", "GOMAXPROCS=2"] {
        assert!(env.lines().any(|l| l == var), "no {var}:\n{env}");
    }
    // The same checks find the shim under per-thread placement, so they can fail.
    let (maps, env) = maps_and_env(&["--placement", "thread"]);
    assert!(maps.contains("libgoset.so"), "{maps}");
    assert!(env.lines().any(|l| l.starts_with("GOSET_PLAN=")), "{env}");
}

#[test]
fn placing_flags_with_mask_and_bad_modes_are_usage_errors() {
    for (args, says) in [
        (
            &["--placement", "mask", "--spare", "1"][..],
            "goset-run: --spare with --placement mask: ",
        ),
        (
            &["--placement", "mask", "--main-on-housekeeper"],
            "goset-run: --main-on-housekeeper with --placement mask: ",
        ),
        (
            &["--placement", "cores"],
            "goset-run: invalid value 'cores' for '--placement <thread|mask>'",
        ),
    ] {
        let mut cmd = clean_command(goset_run_bin());
        cmd.args(args).args(["--", "true"]);
        let out = run(cmd);
        out.expect_code(2);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.dump());
        assert!(out.stderr.starts_with(says), "{args:?}: {}", out.dump());
    }
}

/// goset-bench's JSON runs: (mode, cpus, metrics) of each.
fn bench_runs(args: &[&str]) -> Vec<(String, Vec<usize>, serde_json::Value)> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut cmd = clean_command(goset_bench_bin());
    cmd.args(["--runs", "2", "--seed", "4", "--goset-arg=--sample=0"])
        .args(["--match", "^(Cpus_allowed_list|shim maps)$"])
        .arg(format!("--json={}", json.display()))
        .args(args)
        .args(["--", "sh", "-c"])
        .arg(
            "grep Cpus_allowed_list /proc/self/status; \
             echo \"shim maps: $(grep -c libgoset /proc/$$/maps)\"",
        );
    let out = {
        let _serial = launcher_lock();
        run(cmd)
    };
    out.expect_code(0);
    let j = json_of(&json);
    (j["runs"].as_array().unwrap().iter())
        .map(|r| {
            assert_eq!(r["discarded"], serde_json::Value::Null, "{r}");
            let cpus = (r["cpus"].as_array())
                .unwrap_or_else(|| panic!("no cpus in {r}"))
                .iter()
                .map(|c| c.as_u64().unwrap() as usize)
                .collect();
            (
                r["mode"].as_str().unwrap().to_string(),
                cpus,
                r["metrics"].clone(),
            )
        })
        .collect()
}

#[test]
fn bench_mask_and_shim_runs_say_their_cpus_and_run_on_them() {
    let Some(cpus) = two_cpus() else {
        return;
    };
    // goset-run's own choice: a shim run takes the CPU a dry run of goset-run selects.
    let runs = bench_runs(&["-n", "1", "--modes", "mask,shim"]);
    assert_eq!(runs.len(), 4, "{runs:?}");
    for (mode, on, metrics) in &runs {
        assert_eq!(on.len(), 1, "{mode}: {on:?}");
        assert!(cpus.contains(&on[0]), "{mode}: {on:?} of {cpus:?}");
        assert_eq!(
            metrics["Cpus_allowed_list"], on[0] as f64,
            "{mode} ran on its CPUs"
        );
        // The shell's mappings of libgoset.so: some under the shim, none under one mask.
        let maps = metrics["shim maps"].as_f64().unwrap();
        assert_eq!(
            maps > 0.0,
            mode == "shim",
            "{mode}: {maps} mappings of libgoset.so"
        );
    }
    let mut modes: Vec<&str> = runs.iter().map(|r| r.0.as_str()).collect();
    modes.sort();
    assert_eq!(modes, ["mask", "mask", "shim", "shim"]);
    // --include fixes every pinned mode's CPUs: CPU 0's core is the one goset-run avoids alone.
    let fixed = cpus[0];
    let runs = bench_runs(&[
        "-n",
        "1",
        "--include",
        &fixed.to_string(),
        "--modes",
        "taskset,goset,mask,shim",
    ]);
    assert_eq!(runs.len(), 8, "{runs:?}");
    for (mode, on, metrics) in &runs {
        assert_eq!(on, &[fixed], "{mode}");
        assert_eq!(metrics["Cpus_allowed_list"], fixed as f64, "{mode}");
    }
}
