//! The command-line surface of `goset` and `goset-run`: help, version, one-line usage errors,
//! and which stream each output goes to.

mod common;

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> std::process::Output {
    Command::new(common::bin(bin)).args(args).output().unwrap()
}

#[test]
fn help_and_version_go_to_stdout_and_exit_0() {
    for bin in ["goset", "goset-run"] {
        let help = run(bin, &["--help"]);
        assert!(help.status.success());
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("--include"),
            "{bin} --help"
        );
        let version = run(bin, &["--version"]);
        assert_eq!(
            String::from_utf8_lossy(&version.stdout),
            format!("{bin} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn an_unknown_flag_is_one_line_and_exit_2() {
    let out = run("goset-run", &["--frobnicate", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("goset-run: unexpected argument '--frobnicate'"),
        "{err}"
    );
    let out = run("goset-run", &["-n", "x", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'x'"));
    let out = run("goset-run", &["-n", "1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "goset-run: no command given: put it after -- (or use --dry-run)\n"
    );
}

#[test]
fn goset_runs_a_command_like_goset_run() {
    let out = run(
        "goset",
        &[
            "-n",
            "1",
            "--sample",
            "0",
            "--quiet",
            "--",
            "sh",
            "-c",
            "echo hello; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.is_empty() || err.starts_with("Errors\n"),
        "--quiet prints nothing but errors: {err}"
    );
    // A machine without cpufreq or thermal drivers (any VM) is a fact, not an error of the run.
    assert!(
        !err.contains("driver"),
        "--quiet prints the machine's facts: {err}"
    );
}

#[test]
fn diagnostics_go_to_stderr_and_json_to_stdout() {
    let root = common::fixture_root("32intel64-2p8co2t+8ve");
    let root = root.to_str().unwrap();
    let out = run("goset", &["--fsroot", root]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("32 online"), "{text}");
    assert!(
        text.contains("2 packages, 16 cores, up to 2 threads per core, 2 NUMA nodes"),
        "{text}"
    );

    let out = run("goset", &["topology", "--json", "--fsroot", root]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu0 = &v["cpus"][0];
    assert_eq!(cpu0["cpu"], 0);
    assert_eq!(cpu0["siblings"], serde_json::json!([0, 16]));
    assert_eq!(cpu0["node"], 0);

    let out = run("goset", &["--json", "-"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["cgroups"]["mounts"].is_array());
    assert!(v["summary"]["online"].as_u64().unwrap() >= 1);
}

#[test]
fn a_dry_run_never_starts_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = run(
        "goset-run",
        &[
            "--dry-run",
            "--sample",
            "0",
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    assert!(out.status.success());
    assert!(!marker.exists());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Selection"));
}

#[test]
fn bad_input_is_refused_before_the_task_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    let refused = |extra: &[&str], env: &[(&str, &str)], want: &str| {
        let mut cmd = Command::new(common::bin("goset-run"));
        cmd.args(["-q", "--sample", "0"]).args(extra).args(touch);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?} {env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.lines().any(|l| l.starts_with(want)), "{extra:?}: {err}");
        assert!(!marker.exists(), "{extra:?} {env:?} ran the task");
    };
    refused(
        &["--json", "/nonexistent-dir/r.json"],
        &[],
        "goset-run: --json /nonexistent-dir/r.json: cannot create",
    );
    refused(
        &[],
        &[("GOSET_LIB", "/nonexistent.so")],
        "goset-run: GOSET_LIB=/nonexistent.so: no such file",
    );
    refused(
        &["--fsroot", "/etc/passwd"],
        &[],
        "goset-run: --fsroot /etc/passwd: not a directory",
    );
    refused(&["-fence=true"], &[], "goset-run: --fence needs --cgroup");
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // (uid_t)-1 means "unchanged" to setresuid, never a user; nor is a number past it.
        for (var, bad) in [
            ("SUDO_UID", "4294967295"),
            ("SUDO_UID", "4294967296"),
            ("SUDO_UID", "-1"),
            ("SUDO_UID", "nobody"),
            ("SUDO_GID", "4294967295"),
        ] {
            let env = [("SUDO_UID", "65534"), (var, bad)];
            let env = if var == "SUDO_UID" {
                &env[1..]
            } else {
                &env[..]
            };
            refused(&[], env, &format!("goset-run: {var}='{bad}': not an id"));
        }
    } else {
        eprintln!("SUDO_UID values not checked: only root takes SUDO_UID as the task's user");
    }
    let out = Command::new(common::bin("goset-run"))
        .env("GOSET_FSROOT", "/")
        .args(["-q", "--sample", "0"])
        .args(touch)
        .output()
        .unwrap();
    assert!(out.status.success(), "GOSET_FSROOT=/ is the live machine");
    assert!(marker.exists());
}

#[test]
fn a_bad_cpu_expression_or_device_is_one_line_and_exit_2_before_the_task_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let accepted = "expected a cpu list (0,2-4 or 0-10:2) or a likwid expression: \
         DOMAIN:INDICES with DOMAIN N, S<i>, D<i>, M<i> or C<i> (S0:0-3), L:DOMAIN:INDICES, or \
         E:DOMAIN:COUNT[:CHUNK:STRIDE] (E:S0:4:1:2), joined with @";
    for (args, want) in [
        (
            ["--include", "S0:0@Q1"],
            format!("goset-run: --include 'S0:0@Q1': 'Q1': {accepted}\n"),
        ),
        (
            ["-exclude", "E:N:4:2:1"],
            "goset-run: --exclude 'E:N:4:2:1': 'E:N:4:2:1': STRIDE must be at least CHUNK, or \
             chunks would overlap (E:DOMAIN:COUNT[:CHUNK:STRIDE])\n"
                .to_string(),
        ),
        // Well formed, but no machine has a 1000th NUMA domain.
        (
            ["--include", "M999:0"],
            "goset-run: --include 'M999:0': M999: no NUMA domain 999 with CPUs goset-run may use"
                .to_string(),
        ),
        (
            ["--near", "no-such-nic"],
            "goset-run: --near no-such-nic: no such network interface, block device or PCI \
             device; --near takes"
                .to_string(),
        ),
    ] {
        let out = Command::new(common::bin("goset-run"))
            .args(["--sample", "0"])
            .args(args)
            .args(["--", "touch", marker.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&want), "{args:?}: {err}");
        assert!(!marker.exists(), "{args:?} ran the task");
    }
}

#[test]
fn an_endless_sample_and_an_empty_command_are_refused() {
    let out = run("goset-run", &["--sample", "99999999", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("goset-run: --sample 99999999: at most 60000 ms"),
        "{err}"
    );
    let out = run("goset-run", &["-q", "--sample", "0", "--", ""]);
    assert_eq!(
        out.status.code(),
        Some(127),
        "an empty command is not found"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("command not found"), "{err}");
}

#[test]
fn a_kept_log_may_have_any_name_and_goset_log_does_not_divert_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("place #1.log");
    let other = dir.path().join("other.log");
    let out = Command::new(common::bin("goset-run"))
        .env("GOSET_LOG", &other)
        .args([
            "-q",
            "--sample",
            "0",
            "--log",
            log.to_str().unwrap(),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["event"], "init");
    assert!(
        !other.exists(),
        "GOSET_LOG from the environment took the log"
    );
}

#[test]
fn a_reader_that_goes_away_is_not_a_crash() {
    // 256 CPUs make ~100 KB of JSON, more than a pipe holds, so goset meets the closed pipe.
    let root = common::fixture_root("256ppc-8n8s4t");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' topology --json --fsroot '{}' | head -c 1 >/dev/null",
            common::bin("goset").display(),
            root.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(common::bin("goset-run"))
        .args(["--sample", "0", "--", "sh", "-c", "exit 5"])
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "a full stderr must not change the task's status"
    );
}

#[test]
fn a_report_that_cannot_be_written_fails_the_run_but_keeps_the_tasks_status() {
    let root = common::fixture_root("256ppc-8n8s4t");
    let dry = Command::new(common::bin("goset-run"))
        .args(["--dry-run", "-n", "2", "--json", "/dev/full", "--fsroot"])
        .arg(&root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&dry.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("--json")).collect();
    assert_eq!(
        said,
        ["goset-run: cannot write --json /dev/full: No space left on device (os error 28)"]
    );
    assert_eq!(dry.status.code(), Some(1), "{err}");
    for (task, code) in [("exit 0", 1), ("exit 5", 5)] {
        let out = Command::new(common::bin("goset-run"))
            .args([
                "-q",
                "--sample",
                "0",
                "--json",
                "/dev/full",
                "--",
                "sh",
                "-c",
                task,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{task}: {err}");
        assert_eq!(err.lines().count(), 1, "{task}: {err}");
    }
}

#[test]
fn an_empty_goset_fsroot_is_unset_and_a_failed_run_keeps_the_old_json() {
    let out = Command::new(common::bin("goset-run"))
        .env("GOSET_FSROOT", "")
        .args(["-q", "--sample", "0", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    std::fs::write(&json, "old\n").unwrap();
    let with_json = |cmd: &str| {
        run(
            "goset-run",
            &[
                "-q",
                "--sample",
                "0",
                "--json",
                json.to_str().unwrap(),
                "--",
                cmd,
            ],
        )
    };
    assert_eq!(with_json("/nonexistent/cmd").status.code(), Some(127));
    assert_eq!(std::fs::read_to_string(&json).unwrap(), "old\n");
    let out = with_json("true");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["run"]["exit"], 0);
}

#[test]
fn a_closed_stdout_reaches_the_task_closed() {
    // The task exits 7 when its fd 1 is closed, 0 when it is open (as /dev/null would be).
    let script = format!(
        "exec {} -q --sample 0 -- sh -c 'test -e /proc/self/fd/1 || exit 7' >&-",
        common::bin("goset-run").display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until process `pid` catches `sig` (its handler is installed), up to 10 s.
fn wait_until_caught(pid: u32, sig: i32) {
    let bit = 1u64 << (sig - 1);
    for _ in 0..1000 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
        if caught.is_some_and(|m| m & bit != 0) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("process {pid} never caught signal {sig}");
}

/// Waits for `child` up to 30 s, killing it (and failing) past that.
fn wait_or_kill(child: &mut std::process::Child) -> std::process::ExitStatus {
    for _ in 0..3000 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("goset-run did not end");
}

#[test]
fn a_sigterm_before_the_task_exists_ends_the_run_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut child = Command::new(common::bin("goset-run"))
        .args(["-q", "--sample", "20000", "--", "touch"])
        .arg(&marker)
        .env("XDG_RUNTIME_DIR", dir.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Sampling for 20 s: the signal arrives long before the task could exist.
    wait_until_caught(child.id(), libc::SIGTERM);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_or_kill(&mut child);
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(err.contains("SIGTERM before the task started"), "{err}");
    assert!(!marker.exists(), "the task was started");
    let left: Vec<_> = std::fs::read_dir(dir.path().join("goset"))
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "run directories left: {left:?}");
}

#[test]
fn signals_sent_to_the_launcher_reach_a_task_that_handles_them_and_it_runs_on() {
    let signals = [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGALRM,
        libc::SIGPWR,
        libc::SIGRTMIN() + 1,
    ];
    for sig in signals {
        let dir = tempfile::tempdir().unwrap();
        let (ready, got) = (dir.path().join("ready"), dir.path().join("got"));
        let script = format!(
            "trap 'touch {got}; exit 0' {sig}; touch {ready}; while [ ! -e {got} ]; do sleep 0.05; done",
            got = got.display(),
            ready = ready.display(),
        );
        let mut child = Command::new(common::bin("goset-run"))
            .args(["-q", "--sample", "0", "--", "sh", "-c", &script])
            .spawn()
            .unwrap();
        for _ in 0..1000 {
            if ready.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(ready.exists(), "the task never started");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = wait_or_kill(&mut child);
        assert!(got.exists(), "signal {sig} never reached the task");
        assert_eq!(status.code(), Some(0));
    }
}

#[test]
fn a_hangup_ignored_when_the_launcher_starts_stays_ignored_by_the_task() {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(common::bin("goset-run"));
    cmd.args([
        "-q",
        "--sample",
        "0",
        "--",
        "grep",
        "^SigIgn:",
        "/proc/self/status",
    ]);
    // SAFETY: signal is async-signal-safe; what nohup does before it execs.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let ignored = (line.trim().strip_prefix("SigIgn:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no SigIgn line: {line:?}"));
    assert_ne!(ignored & 1 << (libc::SIGHUP - 1), 0, "{line}");
}

#[test]
fn devices_and_fifos_in_an_fsroot_dump_are_errors_not_endless_reads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(common::fixture_root("offline-cpu0-node0"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(copied.success());
    let proc = root.join("proc");
    for file in ["cmdline", "interrupts"] {
        let _ = std::fs::remove_file(proc.join(file));
        std::os::unix::fs::symlink("/dev/zero", proc.join(file)).unwrap();
    }
    let _ = std::fs::remove_file(proc.join("stat"));
    nix::unistd::mkfifo(
        &proc.join("stat"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    // Bounded like a hostile task's runs: a launcher that read without end would fail here
    // (address space, `ulimit -v`) or end (`timeout -k`) instead of taking the machine.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 262144 && exec timeout -k 1 20 \"$@\"")
        .arg("sh")
        .arg(common::bin("goset-run"))
        .args(["--dry-run", "-n", "1", "--fsroot"])
        .arg(&root)
        .args(["--", "true"]);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for file in ["/proc/cmdline", "/proc/interrupts", "/proc/stat"] {
        let line = format!("  {file}: not a regular file\n");
        assert!(stderr.contains(&line), "{stderr}");
    }
}

/// `goset noise`: a bad `--watch` is one usage line; a watch fills a private record
/// (`GOSET_NOISE_DIR`) whose report goes to stderr and `--json`, with its cost; a garbage record
/// is ignored with one warning, and replaced by the next watch.
#[test]
fn goset_noise_watches_into_a_private_record_and_ignores_garbage() {
    for bad in ["0", "5x", "2d"] {
        let out = run("goset", &["noise", "--watch", bad]);
        assert_eq!(out.status.code(), Some(2), "--watch {bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("goset: --watch {bad}")) || err.contains("--watch"));
    }
    let dir = tempfile::tempdir().unwrap();
    let noise = |args: &[&str]| {
        Command::new(common::bin("goset"))
            .env("GOSET_NOISE_DIR", dir.path())
            .arg("noise")
            .args(args)
            .output()
            .unwrap()
    };
    std::fs::write(dir.path().join("noise.record"), "garbage").unwrap();
    let out = noise(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("ignored").count(), 1, "{err}");
    assert!(err.contains("none yet"), "{err}");
    let out = noise(&["--watch", "1s", "--json", "-"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("of CPU time") && err.contains("replaced"),
        "{err}"
    );
    assert!(err.contains("10 min") && err.contains("lost %"), "{err}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["watch"]["polls"].as_u64().unwrap() >= 2, "{json}");
    let cpus = json["record"]["cpus"].as_array().unwrap();
    assert!(!cpus.is_empty());
    assert_eq!(cpus[0]["horizons"].as_array().unwrap().len(), 3);
    assert!(
        json["record"]["cpus"][0]["horizons"][0]["covered_s"]
            .as_f64()
            .unwrap()
            > 0.5
    );
    // Off: nothing read, nothing written.
    let off = Command::new(common::bin("goset"))
        .env("GOSET_NOISE_DIR", "none")
        .args(["noise", "--quiet"])
        .output()
        .unwrap();
    assert!(off.status.success());
    assert!(String::from_utf8_lossy(&off.stderr).is_empty());
}

#[test]
fn goset_probe_refuses_bad_values_in_one_line_before_probing() {
    for (args, line) in [
        (
            &["--ms", "0"][..],
            "goset: --ms 0: expected 1 to 10000 (ms of busy time on every CPU probed)",
        ),
        (
            &["--ms", "10001"],
            "goset: --ms 10001: expected 1 to 10000 (ms of busy time on every CPU probed)",
        ),
        (
            &["--threshold-us", "0"],
            "goset: --threshold-us 0: expected 1 to 1000",
        ),
        (
            &["--cpus", "1000"],
            "goset: --cpus '1000': CPU 1000 not online or not allowed to this process",
        ),
    ] {
        let out = run("goset", &[&["probe"], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("{line}\n"),
            "{args:?}"
        );
    }
    let out = run("goset", &["probe", "--cpus", "1-x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("goset: --cpus '1-x': ") && err.lines().count() == 1,
        "{err}"
    );
    let out = run("goset-run", &["--probe", "10001", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Kills and reaps the busy loop of [`goset_noise_names_what_keeps_a_cpu_busy_and_its_irqs`]
/// however the test ends.
struct Loop(std::process::Child);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `goset noise` names what ran on each CPU: a shell loop pinned to CPU 1 is among CPU 1's
/// tasks, with its pid, in the text and the JSON, and CPU 1's interrupt lines are named.
#[test]
fn goset_noise_names_what_keeps_a_cpu_busy_and_its_irqs() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    if !online.trim().starts_with("0-") {
        println!(
            "SKIPPED: needs CPUs 0 and 1 online (online: {})",
            online.trim()
        );
        return;
    }
    let busy = Loop(
        Command::new("taskset")
            .args(["-c", "1", "sh", "-c", "while :; do :; done"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("taskset (util-linux) runs the busy loop"),
    );
    let pid = busy.0.id();
    // Until taskset has become the pinned shell (it execs it), bounded.
    for _ in 0..200 {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "sh" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::bin("goset"))
        .env("GOSET_NOISE_DIR", dir.path())
        .args(["noise", "--json", "-"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("sh (pid {pid})")), "{err}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu1 = &json["explained"]["1"];
    let tasks = cpu1["tasks"].as_array().unwrap();
    assert!(tasks.iter().any(|t| t["pid"] == pid), "{cpu1}");
    assert!(!cpu1["irqs"].as_array().unwrap().is_empty(), "{cpu1}");
}
