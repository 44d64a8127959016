//! A task that leaves goset-run's world: a sandbox with a PID namespace and a /proc of its own
//! (`unshare -p --mount-proc`, `bwrap --unshare-pid`), and a task that switches to another
//! user (`setpriv`, `runuser`). The run directory's `slots` is a link into goset-run's
//! `/proc/<pid>/fd`, which neither can follow, and the log is goset-run's user's: the task
//! inherits both descriptors (`GOSET_SLOTS`, `GOSET_LOG_FD`), so the shim keeps placing. A
//! sandboxed process writes no records (its ids are not the launcher's), and the report's CPU
//! time counts what its threads used though no `wait4` up the tree saw them. firejail closes
//! every inherited descriptor above 2: the shim's warning names the one lost and `--keep-fd`,
//! with which the shim maps the table, and firejail's own processes hold no slot.

use serde_json::Value;
use shim_tests::*;
use std::process::Command;

/// `goset-run -n 2 --json <json> -- <wrapper...> pthreads 1`, run; the outcome and the JSON.
fn run_wrapped(wrapper: &[&str], prog: &Program) -> (Outcome, Value, Selection) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut cmd = goset_run(2, &json, &[], wrapper[0]);
    cmd.args(&wrapper[1..]).arg(prog.path()).arg("1");
    let outcome = {
        let _serial = launcher_lock();
        run(cmd)
    };
    outcome.expect_code(0);
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let selection = Selection::read(&json, &outcome);
    (outcome, report, selection)
}

/// The shim placed the program's threads without a word: no `goset:` line, no loader error,
/// each thread on one task CPU of its own.
fn check_placed(outcome: &Outcome, selection: &Selection, how: &str) -> Vec<Report> {
    assert!(
        !outcome.stderr.contains("goset: ") && !outcome.stderr.contains("ld.so"),
        "{how}: the shim works without a warning\n{}",
        outcome.dump()
    );
    let reports = reports(outcome);
    assert_eq!(
        reports.len(),
        2,
        "{how}: main and worker\n{}",
        outcome.dump()
    );
    assert_distinct(&reports, &selection.task_cpus);
    reports
}

/// The run's CPU time covers what the housekeeper read of the threads, and no row is a
/// namespaced id the program saw (`ids`).
fn check_report(report: &Value, ids: &[u32], how: &str) {
    let threads = report["threads"].as_array().unwrap();
    let seen: f64 = threads.iter().filter_map(|t| t["cpu_s"].as_f64()).sum();
    let usage = &report["run"]["rusage"];
    let counted = usage["user_s"].as_f64().unwrap() + usage["system_s"].as_f64().unwrap();
    assert!(
        counted >= seen * 0.999 && seen > 0.0,
        "{how}: the run counts {counted} s of CPU, its threads used {seen} s: {report}"
    );
    for t in threads {
        let tid = t["tid"].as_u64().unwrap() as u32;
        assert!(
            !ids.contains(&tid),
            "{how}: a row for the sandbox's own id {tid}: {t}"
        );
    }
}

/// A PID-namespace sandbox around the program.
fn in_sandbox(wrapper: &[&str], how: &str) {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let (outcome, report, selection) = run_wrapped(wrapper, &prog);
    let reports = check_placed(&outcome, &selection, how);
    let ids: Vec<u32> = reports.iter().flat_map(|r| [r.pid, r.tid]).collect();
    assert!(
        ids.iter().all(|&id| id < 100),
        "{how}: the program ran in a PID namespace of its own: {ids:?}"
    );
    check_report(&report, &ids, how);
}

/// Whether the kernel lets `unshare` make the namespaces (prints why not; fails under
/// `CI=true`, which is root).
fn namespaces_allowed(probe: &[&str]) -> bool {
    let ok = Command::new(probe[0])
        .args(&probe[1..])
        .arg("true")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{probe:?} refused under CI=true"
        );
        skip_note(&format!(
            "{probe:?} is refused here (unprivileged namespaces are off): skipped"
        ));
    }
    ok
}

#[test]
fn a_task_in_an_unshare_pid_namespace_is_placed() {
    let wrapper: &[&str] = if is_root() {
        &["unshare", "-p", "-f", "--mount-proc"]
    } else {
        &["unshare", "-r", "-p", "-f", "--mount-proc"]
    };
    if namespaces_allowed(wrapper) {
        in_sandbox(wrapper, "unshare -p --mount-proc");
    }
}

#[test]
fn a_task_in_a_bwrap_sandbox_is_placed() {
    if Command::new("bwrap").arg("--version").output().is_err() {
        missing("bwrap", "apt-get install -y bubblewrap");
        return;
    }
    let wrapper = [
        "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-pid",
    ];
    if namespaces_allowed(&wrapper) {
        in_sandbox(&wrapper, "bwrap --unshare-pid");
    }
}

#[test]
fn firejail_closing_the_descriptors_is_named_and_keeping_them_keeps_the_table() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    if Command::new("firejail").arg("--version").output().is_err() {
        missing("firejail", "apt-get install -y firejail");
        return;
    }
    let firejail = ["firejail", "--noprofile", "--quiet", "--"];
    if !namespaces_allowed(&firejail) {
        return;
    }
    // firejail closes every descriptor above 2 and mounts a /proc of its own: neither the
    // handed descriptor nor the link into goset-run's /proc/<pid>/fd reaches the table. The
    // warning says which descriptor was lost and how to keep it.
    let (outcome, _, _) = run_wrapped(&firejail, &prog);
    let warnings: Vec<&str> = (outcome.stderr.lines())
        .filter(|l| l.starts_with("goset: "))
        .collect();
    assert!(!warnings.is_empty(), "{}", outcome.dump());
    for w in warnings {
        assert!(
            w.contains("(GOSET_SLOTS=/proc/self/fd/") && w.contains("--keep-fd"),
            "{w}"
        );
    }
    // Kept, the shim maps the table with no warning, and firejail's own processes (which
    // only wait for the sandbox) hold no slot.
    let kept = ["firejail", "--noprofile", "--quiet", "--keep-fd=all", "--"];
    let (outcome, report, _) = run_wrapped(&kept, &prog);
    assert!(!outcome.stderr.contains("goset: "), "{}", outcome.dump());
    let threads = report["threads"].as_array().unwrap();
    let own: Vec<&Value> = (threads.iter())
        .filter(|t| t["comm"] == "firejail" && t["placed_by"] == "shim")
        .collect();
    assert!(!own.is_empty(), "{report:#}");
    for t in own {
        assert!(t["role"] == "launcher" && t["slot"].is_null(), "{t}");
    }
}

/// A task that switches to nobody keeps the shim: its threads are placed and logged.
fn as_another_user(wrapper: &[&str], how: &str) {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    if !is_root() {
        skip_note(&format!("{how}: needs root to switch users"));
        return;
    }
    let (outcome, report, selection) = run_wrapped(wrapper, &prog);
    let reports = check_placed(&outcome, &selection, how);
    check_report(&report, &[], how);
    for r in &reports {
        let row = (report["threads"].as_array().unwrap().iter())
            .find(|t| t["tid"].as_u64() == Some(r.tid as u64))
            .unwrap_or_else(|| panic!("{how}: no row for {}: {report}", r.line));
        assert_eq!(row["placed_by"], "shim", "{how}: {row}");
    }
}

#[test]
fn a_task_that_switches_user_with_setpriv_keeps_the_shim() {
    as_another_user(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        "setpriv",
    );
}

#[test]
fn a_task_that_switches_user_with_runuser_keeps_the_shim() {
    as_another_user(&["runuser", "-u", "nobody", "--"], "runuser");
}

#[test]
fn a_sandbox_that_hides_the_run_directory_is_named_and_counted() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    if Command::new("bwrap").arg("--version").output().is_err() {
        missing("bwrap", "apt-get install -y bubblewrap");
        return;
    }
    let wrapper = [
        "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/run",
        "--unshare-pid",
    ];
    if !namespaces_allowed(&wrapper) {
        return;
    }
    let (outcome, report, _) = run_wrapped(&wrapper, &prog);
    // The shim cannot load there: the loader's line names its path in the run directory.
    assert!(
        outcome.stderr.contains("libgoset.so"),
        "the cause is named\n{}",
        outcome.dump()
    );
    let ids: Vec<u32> = reports(&outcome)
        .iter()
        .flat_map(|r| [r.pid, r.tid])
        .collect();
    assert_eq!(ids.len(), 4, "main and worker report\n{}", outcome.dump());
    check_report(&report, &ids, "bwrap --tmpfs /run");
}
