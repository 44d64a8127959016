//! A task cannot crash or starve the launcher: whatever it writes into its slot
//! table or its log, however many threads it has, whatever names it gives them, goset-run
//! finishes its report. Runs that could read without end are started under `ulimit -v`, so
//! that a launcher that did would fail here instead of taking the machine's memory, and under
//! `timeout -k`, so that one that hung ends.

use shim_tests::launch::{goset_run, json, run};
use shim_tests::{goset_run_bin, launcher_lock, two_online_cpus, Build};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Address space for runs that must not read without end: goset-run needs some 8 MiB.
const VM_KIB: &str = "262144";

/// Builds one of the test programs statically (out of the shim's reach: only the housekeeper
/// places its threads); `None` (skipped) without gcc.
fn static_program(build: &Build, src: &str) -> Option<PathBuf> {
    build.c_static(src, src.trim_end_matches(".c"))
}

/// `sh -c script` as the task, with `$1`... the given arguments.
fn sh(script: &str, args: &[&OsStr]) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = ["sh", "-c", script, "sh"].map(Into::into).to_vec();
    argv.extend(args.iter().map(|a| a.to_os_string()));
    argv
}

/// Runs goset-run on two task CPUs with `args` and `task`, under `ulimit -v` and a timeout,
/// and asserts that it finished its report and passed on the task's status 0.
fn finishes(dir: &Path, args: &[&OsStr], task: &[std::ffi::OsString]) -> serde_json::Value {
    let json_path = dir.join("report.json");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {VM_KIB} && exec timeout -k 1 60 \"$@\""))
        .arg("sh")
        .arg(goset_run_bin())
        .args(["--sample", "0", "-n", "2", "--json"])
        .arg(&json_path)
        .args(args)
        .arg("--")
        .args(task);
    let out = run(cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {}\nstderr {}",
        out.stdout,
        out.stderr
    );
    assert!(out.stderr.contains("\nRun\n"), "no report: {}", out.stderr);
    json(&json_path)
}

/// The table's byte offset of the slot count (after the 8-byte magic).
const SLOT_COUNT_AT: u32 = 8;

#[test]
fn a_table_full_of_0xff_leaves_the_launcher_running() {
    let _serial = launcher_lock();
    if !two_online_cpus() {
        return;
    }
    let build = Build::new();
    let Some(sleepers) = static_program(&build, "sleepers.c") else {
        return;
    };
    // Every byte 0xff: a slot count of 2^32 - 1 and counts no claims could make. The sleeper
    // is placed (on the housekeeper CPU) only by a poll that read the table after this.
    let script = format!(
        "head -c {} /dev/zero | tr '\\000' '\\377' \
         | dd of=\"$GOSET_PLAN/slots\" conv=notrunc status=none && exec \"$1\" 1 30",
        goset_plan::SlotTable::SIZE
    );
    let report = finishes(build.dir(), &[], &sh(&script, &[sleepers.as_os_str()]));
    assert!(report["telemetry"]["housekeeper"]["placed"].as_u64() >= Some(1));
}

#[test]
fn a_slot_count_past_the_layout_leaves_the_launcher_running() {
    let _serial = launcher_lock();
    if !two_online_cpus() {
        return;
    }
    let build = Build::new();
    let Some(sleepers) = static_program(&build, "sleepers.c") else {
        return;
    };
    // 2000 slots (0x7d0) where the layout holds 1024; the busy thread makes the housekeeper
    // claim a slot, which once indexed past the table.
    let script = format!(
        "printf '\\320\\007\\000\\000' | dd of=\"$GOSET_PLAN/slots\" bs=1 seek={SLOT_COUNT_AT} \
         conv=notrunc status=none && exec \"$1\" 1 30 busy"
    );
    let report = finishes(build.dir(), &[], &sh(&script, &[sleepers.as_os_str()]));
    assert!(report["telemetry"]["housekeeper"]["placed"].as_u64() >= Some(1));
}

#[test]
fn a_truncated_and_replaced_table_leaves_the_launcher_running() {
    let _serial = launcher_lock();
    if !two_online_cpus() {
        return;
    }
    let build = Build::new();
    let Some(sleepers) = static_program(&build, "sleepers.c") else {
        return;
    };
    // Truncating is refused now (the table is sealed); the file is then replaced by an empty
    // one. The thread is placed only by a poll after both, and every poll reads the table.
    let script = "truncate -s 0 \"$GOSET_PLAN/slots\" 2>/dev/null; \
        rm -f \"$GOSET_PLAN/slots\" && : > \"$GOSET_PLAN/slots\" && exec \"$1\" 1 30";
    let report = finishes(build.dir(), &[], &sh(script, &[sleepers.as_os_str()]));
    assert!(report["telemetry"]["housekeeper"]["placed"].as_u64() >= Some(1));
}

/// goset-run with `--log log` and the task `touch <marker>`, under `ulimit -v` and a timeout;
/// stderr a pipe. Returns the exit code, stderr and whether the task ran.
fn with_log(log: &Path) -> (Option<i32>, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {VM_KIB} && exec timeout -k 1 20 \"$@\""))
        .arg("sh")
        .arg(goset_run_bin())
        .args(["-q", "--sample", "0", "--log"])
        .arg(log)
        .args(["--", "touch"])
        .arg(&marker);
    let out = run(cmd);
    (out.status.code(), out.stderr, marker.exists())
}

#[test]
fn a_log_that_is_not_a_regular_file_is_refused_before_the_task_runs() {
    let _serial = launcher_lock();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // /dev/stderr is the pipe `run` reads: it never ends while goset-run holds it.
    for log in [
        Path::new("/dev/zero"),
        Path::new("/dev/full"),
        &fifo,
        Path::new("/dev/stderr"),
    ] {
        let (code, stderr, ran) = with_log(log);
        assert!(
            stderr.contains("not a regular file"),
            "--log {}: exit {code:?}: {stderr}",
            log.display()
        );
        assert!(
            matches!(code, Some(1 | 2)),
            "--log {}: exit {code:?}",
            log.display()
        );
        assert!(!ran, "--log {}: the task ran", log.display());
    }
}

/// goset-run with `--log <dir>/log` and `script` as the task (the log's path in `$1`).
fn logged_run(dir: &Path, script: &str) -> serde_json::Value {
    let log = dir.join("log");
    let args = ["--log".as_ref(), log.as_os_str()];
    let report = finishes(dir, &args, &sh(script, &[log.as_os_str()]));
    assert!(log.is_file());
    report
}

/// The JSON Threads entry of the task's shell, whose records come first in the log.
fn the_shell(report: &serde_json::Value) -> &serde_json::Value {
    report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "sh" && t["tid"] == t["pid"])
        .expect("the task's shell is in the report")
}

#[test]
fn one_invalid_utf8_byte_in_the_log_keeps_the_threads_table() {
    let _serial = launcher_lock();
    let dir = tempfile::tempdir().unwrap();
    let report = logged_run(dir.path(), "printf '\\377\\n' >> \"$1\"");
    let shell = the_shell(&report);
    assert!(!matches!(shell["role"].as_str(), Some("" | "-")), "{shell}");
}

#[test]
fn a_log_appended_without_a_newline_keeps_the_records_before_it() {
    let _serial = launcher_lock();
    let dir = tempfile::tempdir().unwrap();
    // 300 MiB without a newline, more than goset-run's whole address space here.
    let report = logged_run(
        dir.path(),
        "head -c 314572800 /dev/zero | tr '\\000' x >> \"$1\"",
    );
    let shell = the_shell(&report);
    assert!(!matches!(shell["role"].as_str(), Some("" | "-")), "{shell}");
}

#[test]
fn a_forged_record_naming_another_process_is_left_out_of_the_report() {
    let _serial = launcher_lock();
    let dir = tempfile::tempdir().unwrap();
    // This test process, outside the task: its main thread, and the thread running the test.
    let me = std::process::id();
    // SAFETY: gettid cannot fail.
    let tid = unsafe { libc::gettid() };
    let forged = |tid: i32| {
        format!(
            r#"{{"time":1,"pid":{me},"tid":{tid},"comm":"forged","event":"set","role":"worker","cpu":0,"slot":0}}"#
        )
    };
    let script = format!(
        "printf '%s\\n%s\\n' '{}' '{}' >> \"$1\"",
        forged(me as i32),
        forged(tid)
    );
    let report = logged_run(dir.path(), &script);
    let threads = report["threads"].as_array().unwrap();
    assert!(
        threads
            .iter()
            .all(|t| t["pid"] != me && t["comm"] != "forged"),
        "{threads:#?}"
    );
    the_shell(&report);
    let errors = report["errors"].to_string();
    assert!(
        errors.contains("2 record(s) naming a thread outside the task's process tree"),
        "{errors}"
    );
}

#[test]
fn an_escape_sequence_in_a_thread_name_reaches_stderr_escaped() {
    let _serial = launcher_lock();
    let build = Build::new();
    let Some(named) = build.c("named.c", "named") else {
        return;
    };
    let json_path = build.dir().join("report.json");
    let name: &OsStr = "\x1b[2Jevil".as_ref();
    let out = goset_run(
        &["--sample", "0"],
        &json_path,
        &[named.as_os_str(), name],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        !out.stderr.contains('\x1b'),
        "raw ESC on stderr: {:?}",
        out.stderr
    );
    assert!(out.stderr.contains("\\x1b[2Jevil"), "{}", out.stderr);
    // JSON keeps the name as it is.
    let report = json(&json_path);
    let names: Vec<&str> = report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["comm"].as_str())
        .collect();
    assert!(names.contains(&"\x1b[2Jevil"), "{names:?}");
}

/// goset-run on two task CPUs with 2000 sleeping threads, under `limit` (a `ulimit` option);
/// asserts that each thread was placed, so read, and returns the task's `nofile` line.
fn two_thousand_threads(limit: &str) -> String {
    let build = Build::new();
    let Some(sleepers) = static_program(&build, "sleepers.c") else {
        return String::new();
    };
    let json_path = build.dir().join("report.json");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit {limit} 1024 && exec timeout -k 1 80 \"$@\""
        ))
        .arg("sh")
        .arg(goset_run_bin())
        .args(["-q", "--sample", "0", "-n", "2", "--json"])
        .arg(&json_path)
        .arg("--")
        .arg(&sleepers)
        .args(["2000", "60"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("placed 2000 of 2000"), "{}", out.stdout);
    let report = json(&json_path);
    let threads = report["threads"].as_array().unwrap();
    assert!(threads.len() > 2000, "{} threads", threads.len());
    assert!(threads.iter().all(|t| t["polls"].as_u64() > Some(0)));
    let errors = report["errors"].to_string();
    assert!(!errors.contains("/proc/<pid>/task"), "{errors}");
    out.stdout.lines().next().unwrap_or_default().to_string()
}

#[test]
fn two_thousand_threads_are_read_under_ulimit_n_1024() {
    let _serial = launcher_lock();
    if !two_online_cpus() {
        return;
    }
    // Soft and hard limit 1024: only keeping fewer descriptors open helps.
    two_thousand_threads("-n");
}

#[test]
fn a_raised_descriptor_limit_is_the_launchers_alone() {
    let _serial = launcher_lock();
    if !two_online_cpus() {
        return;
    }
    let hard = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .unwrap()
        .1;
    if hard <= 1024 {
        eprintln!("skipped: the hard RLIMIT_NOFILE is {hard}, so there is nothing to raise");
        return;
    }
    // Soft 1024 under a higher hard limit: the launcher raises its own, the task keeps 1024.
    let nofile = two_thousand_threads("-Sn");
    if !nofile.is_empty() {
        assert_eq!(nofile, "nofile 1024");
    }
}
