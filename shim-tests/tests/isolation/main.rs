//! Isolation on this machine, as root (CI): `--cgroup` (here the v1 cpuset of a hybrid host, or
//! v2 where the unified root offers cpuset), `--steer` with the machine's real IRQs, a real
//! irqbalance held for the run, `kill -9` of the launcher followed by `goset restore`, and the
//! sudo user. What is checked is read from `/proc` and `/sys` while the task runs, never from
//! goset's report. Without root each test says why it skips. Every test puts the IRQ
//! affinities back from its own snapshot and removes what a run left, even when it fails.

use shim_tests::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Skips (with the reason) unless root; under CI=true, which runs as root, it must be root.
fn need_root(what: &str) -> bool {
    if is_root() {
        return true;
    }
    skip_note(&format!("{what} needs root (CI runs as root)"));
    false
}

fn goset_bin() -> PathBuf {
    goset_run_bin().with_file_name("goset")
}

/// Every IRQ's `smp_affinity_list`; dropping it writes back any that changed.
struct IrqSnapshot(BTreeMap<String, String>);

impl IrqSnapshot {
    fn take() -> IrqSnapshot {
        IrqSnapshot(read_irqs())
    }
}

fn read_irqs() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/irq")
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = entry.path().join("smp_affinity_list");
        if let Ok(text) = std::fs::read_to_string(&file) {
            out.insert(
                entry.file_name().to_string_lossy().into_owned(),
                text.trim().to_string(),
            );
        }
    }
    out
}

impl Drop for IrqSnapshot {
    fn drop(&mut self) {
        for (irq, before) in &self.0 {
            let file = format!("/proc/irq/{irq}/smp_affinity_list");
            if std::fs::read_to_string(&file).is_ok_and(|now| now.trim() != before) {
                let _ = std::fs::write(&file, before);
            }
        }
    }
}

/// Removes what a failed test's runs left: dead runs' journals are undone (`goset restore`)
/// and groups of the probe removed.
struct Leftovers;

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = Command::new(goset_bin())
            .arg("restore")
            .stderr(Stdio::null())
            .status();
        for group in probe_groups() {
            let _ = Command::new(goset_bin())
                .args(["rm-cgroup", &group])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Names of the probe's groups at the top of every hierarchy with the cpuset controller.
fn probe_groups() -> Vec<String> {
    let mut names = Vec::new();
    for mount in cpuset_mounts() {
        for e in std::fs::read_dir(&mount).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("goset-isolation_probe") && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// Mount points of the hierarchies that offer cpuset (v1 with the controller, or a cgroup2
/// root listing it).
fn cpuset_mounts() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (path, fstype, opts) = (*f.get(1)?, *f.get(2)?, *f.get(3)?);
            let has = match fstype {
                "cgroup" => opts.split(',').any(|o| o == "cpuset"),
                "cgroup2" => std::fs::read_to_string(format!("{path}/cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpuset")),
                _ => false,
            };
            has.then(|| PathBuf::from(path))
        })
        .collect()
}

/// A goset-run whose task waits on its stdin: the test reads the machine while it runs.
struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn start(args: &[&str], program: &Path, program_args: &[&str], env: &[(&str, &str)]) -> Running {
    let mut cmd = clean_command(goset_run_bin());
    cmd.args(["--sample", "0"])
        .args(args)
        .arg("--")
        .arg(program)
        .args(program_args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("start goset-run");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    Running {
        stdin: child.stdin.take(),
        child,
        lines,
        stdout: Vec::new(),
        stderr,
    }
}

/// What the probe said when it was ready.
struct Ready {
    pid: i32,
    tids: Vec<i32>,
}

impl Running {
    /// Waits for the probe's `ready` line (60 s at most), keeping the lines before it.
    fn ready(&mut self) -> Ready {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout.push(line.clone());
                    if let Some(rest) = line.strip_prefix("ready ") {
                        let field = |k: &str| {
                            rest.split_whitespace()
                                .find_map(|w| w.strip_prefix(k))
                                .unwrap()
                                .to_string()
                        };
                        return Ready {
                            pid: field("pid=").parse().unwrap(),
                            tids: field("tids=")
                                .split(',')
                                .map(|t| t.parse().unwrap())
                                .collect(),
                        };
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no ready line in {TIMEOUT:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().unwrap();
                    let stderr = self.take_stderr();
                    panic!(
                        "goset-run ended before the task was ready ({status}): {:?}\n{}",
                        self.stdout, stderr
                    );
                }
            }
        }
    }

    fn take_stderr(&mut self) -> String {
        let handle = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new));
        handle.join().unwrap_or_default()
    }

    /// Closes the task's stdin (it exits) and waits for goset-run: `(exit code, stdout, stderr)`.
    fn finish(mut self) -> (i32, Vec<String>, String) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "goset-run did not end");
            std::thread::sleep(Duration::from_millis(10));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stdout.push(line);
        }
        let stderr = self.take_stderr();
        let stdout = std::mem::take(&mut self.stdout);
        (status.code().unwrap_or(-1), stdout, stderr)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kills the process group made for this goset-run (ESRCH when it ended).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn status_field(pid: i32, tid: i32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn task_cpus(report: &serde_json::Value) -> Vec<usize> {
    report["selection"]["task_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap() as usize)
        .collect()
}

/// The task's cpuset group, from `/proc/<pid>/cgroup` and the mounts.
fn cpuset_group_of(pid: i32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for mount in cpuset_mounts() {
        let v2 = std::fs::metadata(mount.join("cgroup.controllers")).is_ok();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = if v2 {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == "cpuset")
            };
            if matches && path != "/" {
                return Some(mount.join(path.trim_start_matches('/')));
            }
        }
    }
    None
}

/// What a test that changes the machine holds while it runs; dropped in this order: IRQs put
/// back, what runs left undone, then the machine free for the next test.
struct Bench {
    probe: Program,
    snapshot: IrqSnapshot,
    _leftovers: Leftovers,
    _machine: LauncherLock,
}

/// Root, the probe (static or not) and, for `--cgroup`, a cpuset hierarchy; `None` (with the
/// reason) when one is missing.
fn bench(what: &str, cgroup: bool, static_probe: bool) -> Option<Bench> {
    if !need_root(what) {
        return None;
    }
    if cgroup && cpuset_mounts().is_empty() {
        missing(
            "a cgroup hierarchy with the cpuset controller",
            "mount -t cgroup -o cpuset cpuset /sys/fs/cgroup/cpuset",
        );
        return None;
    }
    let probe = if static_probe {
        Program::c_static("isolation_probe.c")?
    } else {
        Program::c("isolation_probe.c")?
    };
    // The tests here change one machine's IRQs and cgroups: one at a time.
    let machine = launcher_lock();
    Some(Bench {
        probe,
        snapshot: IrqSnapshot::take(),
        _leftovers: Leftovers,
        _machine: machine,
    })
}

#[test]
fn a_static_program_that_resets_its_affinity_stays_on_the_task_cpus_in_its_cgroup() {
    let Some(bench) = bench("--cgroup", true, true) else {
        return;
    };
    let probe = &bench.probe;
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut run = start(
        &["-n", "1", "--cgroup", "--json", report.to_str().unwrap()],
        probe.path(),
        &["reset"],
        &[],
    );
    let ready = run.ready();
    let group = cpuset_group_of(ready.pid).expect("the task is in a cpuset group");
    let read = |f: &str| {
        std::fs::read_to_string(group.join(f))
            .unwrap()
            .trim()
            .to_string()
    };
    let (cpus, mems) = (read("cpuset.cpus"), read("cpuset.mems"));
    let allowed: Vec<String> = (ready.tids.iter())
        .map(|&t| status_field(ready.pid, t, "Cpus_allowed_list:"))
        .collect();
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    assert!(
        stdout.iter().filter(|l| l.ends_with("rc=0")).count() == 2,
        "both threads reset their affinity to every CPU and the kernel accepted it: {stdout:?}"
    );
    let r = json(&report);
    let planned = task_cpus(&r);
    let planned_text = planned
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(cpus, planned_text, "cpuset.cpus is the plan\n{stderr}");
    assert_eq!(mems, "0", "one node: cpuset.mems 0");
    for a in &allowed {
        assert_eq!(
            a, &planned_text,
            "a thread escaped the cpuset: {allowed:?}\n{stderr}"
        );
    }
    assert!(
        group
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("goset-isolation_probe"),
        "{}",
        group.display()
    );
    assert!(!group.exists(), "the group is removed after the run");
    assert!(stderr.contains("Isolation\n  cgroup"), "{stderr}");
}

#[test]
fn steered_irqs_leave_the_task_cpu_for_the_run_and_come_back_after() {
    if read_irqs().is_empty() {
        return missing(
            "/proc/irq/*/smp_affinity_list",
            "a kernel with IRQ affinity (any x86 one)",
        );
    }
    let Some(bench) = bench("--steer", false, false) else {
        return;
    };
    let (probe, snapshot) = (&bench.probe, &bench.snapshot);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut run = start(
        &["-n", "1", "--steer", "--json", report.to_str().unwrap()],
        probe.path(),
        &[],
        &[],
    );
    let ready = run.ready();
    let during = read_irqs();
    let main_cpu = status_field(ready.pid, ready.pid, "Cpus_allowed_list:");
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    let r = json(&report);
    let task: Vec<usize> = task_cpus(&r);
    assert_eq!(main_cpu, task[0].to_string(), "the task ran on its CPU");
    let refused: Vec<String> = r["isolation"]["steer"]["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| pair[0].as_u64().unwrap().to_string())
        .collect();
    for (irq, aff) in &during {
        let cpus = cpulist(aff);
        if refused.contains(irq) {
            continue;
        }
        assert!(
            !cpus.contains(&task[0]),
            "irq {irq} was on task CPU {} during the run: {aff}\n{stderr}",
            task[0]
        );
    }
    let applied = r["isolation"]["steer"]["applied"].as_u64().unwrap();
    let moved = (snapshot.0.iter())
        .filter(|(irq, before)| during.get(*irq) != Some(before))
        .count() as u64;
    assert_eq!(applied, moved, "the report counts the IRQs that moved");
    assert_eq!(read_irqs(), snapshot.0, "every IRQ's affinity is as before");
    assert!(stderr.contains("irqbalance  absent") || stderr.contains("irqbalance  held"));
}

/// `goset-run -n 1 --cgroup --steer` of the probe, ready: the bench, the run, what the probe
/// said and the group it is in.
fn fully_isolated() -> Option<(Bench, Running, Ready, PathBuf)> {
    let bench = bench("--cgroup --steer", true, false)?;
    let mut run = start(
        &["-n", "1", "--cgroup", "--steer"],
        bench.probe.path(),
        &[],
        &[],
    );
    let ready = run.ready();
    let group = cpuset_group_of(ready.pid).expect("the task is in a cpuset group");
    Some((bench, run, ready, group))
}

#[test]
fn after_kill_9_of_the_launcher_goset_restore_puts_the_machine_back() {
    let Some((bench, mut run, ready, group)) = fully_isolated() else {
        return;
    };
    let snapshot = &bench.snapshot;
    let launcher = run.child.id() as i32;
    // SAFETY: kill takes a pid and a signal; the launcher only, not its task.
    unsafe { libc::kill(launcher, libc::SIGKILL) };
    let _ = run.child.wait();
    assert!(group.exists(), "the dead launcher's group stays");
    assert_ne!(
        read_irqs(),
        snapshot.0,
        "the dead launcher's IRQs stay steered"
    );

    let bare = Command::new(goset_bin()).output().unwrap();
    let bare_err = String::from_utf8_lossy(&bare.stderr);
    assert!(
        bare_err.contains(&format!(
            "launcher (pid {launcher}) died: run goset restore"
        )),
        "{bare_err}"
    );
    let restore = Command::new(goset_bin()).arg("restore").output().unwrap();
    let restore_err = String::from_utf8_lossy(&restore.stderr);
    assert_eq!(restore.status.code(), Some(0), "{restore_err}");
    assert!(
        restore_err.contains(&format!("pid {} (isolation_probe)", ready.pid)),
        "the task that outlived its launcher is named: {restore_err}"
    );
    assert_eq!(read_irqs(), snapshot.0, "every IRQ's affinity is as before");
    assert!(!group.exists(), "the group is removed");
    assert_eq!(
        cpuset_group_of(ready.pid),
        None,
        "the task is back in the root group"
    );
    assert!(
        std::fs::metadata(format!("/proc/{}", ready.pid)).is_ok(),
        "restore moves the task, it does not kill it"
    );
    let again = Command::new(goset_bin()).arg("restore").output().unwrap();
    let again_err = String::from_utf8_lossy(&again.stderr);
    assert!(
        again.status.success() && again_err.contains("0 change(s) undone from 0 journal(s)"),
        "restore is idempotent: {again_err}"
    );
    drop(run);
}

/// A real irqbalance in the foreground, killed when dropped.
struct Irqbalance(Child);

/// The irqbalance program, where it is installed.
fn irqbalance_program() -> Option<&'static str> {
    ["/usr/sbin/irqbalance", "/sbin/irqbalance"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

impl Irqbalance {
    /// Starts irqbalance in the foreground and waits until it runs (its exec done).
    fn start(program: &str) -> Irqbalance {
        let daemon = Irqbalance(
            Command::new(program)
                .arg("--foreground")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let pid = daemon.0.id();
        let deadline = Instant::now() + TIMEOUT;
        while std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_or(true, |c| c.trim() != "irqbalance")
        {
            assert!(Instant::now() < deadline, "irqbalance did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }
}

impl Drop for Irqbalance {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn irqbalance_is_stopped_for_the_run_and_running_again_after() {
    let Some(irqbalance) = irqbalance_program() else {
        return missing("irqbalance", "apt-get install irqbalance");
    };
    let Some(bench) = bench("--steer", false, false) else {
        return;
    };
    let probe = &bench.probe;
    let daemon = Irqbalance::start(irqbalance);
    let pid = daemon.0.id();
    let mut run = start(&["-n", "1", "--steer"], probe.path(), &[], &[]);
    run.ready();
    let during = state_of(pid);
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    assert_eq!(
        during,
        Some('T'),
        "irqbalance is stopped during the run\n{stderr}"
    );
    let after = state_of(pid);
    assert!(
        matches!(after, Some('S' | 'R' | 'D')),
        "irqbalance runs again after: {after:?}"
    );
    // Every irqbalance is held: another one (a daemon the package started) is listed too.
    let held = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("irqbalance  held (SIGSTOP pid "))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no irqbalance line\n{stderr}"));
    assert!(held.split(',').any(|p| p == pid.to_string()), "{stderr}");
}

#[test]
fn under_sudo_the_task_runs_as_the_invoking_user_on_its_planned_cpus() {
    if !need_root("the sudo identity") {
        return;
    }
    let Some(probe) = Program::c("isolation_probe.c") else {
        return;
    };
    // The user must reach the program in its private build directory.
    let build_dir = probe.path().parent().unwrap();
    std::fs::set_permissions(
        build_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let _machine = launcher_lock();
    let sudo = [
        ("SUDO_UID", "65534"),
        ("SUDO_GID", "65534"),
        ("SUDO_USER", "nobody"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut run = start(
        &["-n", "1", "--json", report.to_str().unwrap()],
        probe.path(),
        &[],
        &sudo,
    );
    let ready = run.ready();
    let allowed: Vec<String> = (ready.tids.iter())
        .map(|&t| status_field(ready.pid, t, "Cpus_allowed_list:"))
        .collect();
    let uid = status_field(ready.pid, ready.pid, "Uid:");
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    let planned = task_cpus(&json(&report));
    assert!(
        stdout
            .iter()
            .any(|l| l == "uid=65534 gid=65534 groups=65534"),
        "the task runs as the sudo user with its groups: {stdout:?}"
    );
    assert!(uid.starts_with("65534\t65534"), "{uid}");
    for a in &allowed {
        assert_eq!(a, &planned[0].to_string(), "{allowed:?}\n{stderr}");
    }
    assert!(
        stderr.contains("  shim") && !stderr.contains("goset: "),
        "the shim placed the threads as the user, without a warning\n{stderr}"
    );

    let mut kept = start(&["-n", "1", "--keep-root"], probe.path(), &[], &sudo);
    kept.ready();
    let (code, stdout, _) = kept.finish();
    assert_eq!(code, 0);
    assert!(stdout[0].starts_with("uid=0 gid=0"), "{stdout:?}");
}

#[test]
fn without_root_cgroup_and_steer_are_refused_before_anything_changes() {
    let _machine = launcher_lock();
    let irqs = read_irqs();
    let groups = probe_groups();
    let mut cmd = clean_command(goset_run_bin());
    if is_root() {
        // As root, the same run as an unprivileged user.
        cmd = clean_command("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(goset_run_bin());
    }
    for flag in ["--cgroup", "--steer"] {
        let mut c = clean_command(cmd.get_program());
        c.args(cmd.get_args())
            .args([flag, "--sample", "0", "--", "true"]);
        let out = run(c);
        let err = out.stderr.trim_end();
        assert_eq!(out.code(), 1, "{}", out.dump());
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with(&format!("goset-run: {flag}: needs root")),
            "{err}"
        );
    }
    assert_eq!(read_irqs(), irqs, "no IRQ changed");
    assert_eq!(probe_groups(), groups, "no group made");
}

#[test]
fn sigterm_to_the_launcher_reaches_the_task_and_the_machine_is_put_back() {
    let Some((bench, run, ready, group)) = fully_isolated() else {
        return;
    };
    let snapshot = &bench.snapshot;
    assert_ne!(read_irqs(), snapshot.0, "steered during the run");
    // SAFETY: kill takes a pid and a signal; the launcher only.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGTERM) };
    // The task ends by the forwarded signal, not by its stdin closing (finish closes it).
    let deadline = Instant::now() + TIMEOUT;
    while !matches!(state_of(ready.pid as u32), None | Some('Z')) {
        assert!(Instant::now() < deadline, "the task outlived the SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, stdout, stderr) = run.finish();
    assert_eq!(
        code,
        128 + libc::SIGTERM,
        "the task's own death: {stdout:?}\n{stderr}"
    );
    assert_eq!(read_irqs(), snapshot.0, "every IRQ's affinity is as before");
    assert!(!group.exists(), "the group is removed");
    assert!(
        stderr.contains("Isolation\n"),
        "the report is finished\n{stderr}"
    );
}

#[test]
fn two_cgroup_runs_of_one_command_started_together_both_run() {
    if !need_root("--cgroup") {
        return;
    }
    let _m = launcher_lock();
    let groups = || -> Vec<String> {
        (cpuset_mounts().iter())
            .flat_map(|m| std::fs::read_dir(m).into_iter().flatten().flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("goset-sleep"))
            .collect()
    };
    // Both take the same first name, goset-sleep: the one that makes it second must take
    // goset-sleep-<pid> (it failed with "File exists" every round).
    for round in 0..10 {
        let runs: Vec<Child> = (0..2)
            .map(|_| {
                clean_command(goset_run_bin())
                    .args([
                        "-q", "-n", "1", "--sample", "0", "--share", "--cgroup", "--",
                    ])
                    .args(["sleep", "0.3"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for run in runs {
            let out = run.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(groups().is_empty(), "round {round}: left {:?}", groups());
    }
}

#[test]
fn a_group_the_task_makes_inside_its_own_is_removed_with_it() {
    if !need_root("--cgroup") {
        return;
    }
    let Some(mount) = cpuset_mounts().into_iter().next() else {
        missing("a cpuset cgroup hierarchy", "a kernel with cgroup cpuset");
        return;
    };
    let _m = launcher_lock();
    let m = mount.display();
    // The task makes goset-sh/child (its cpus and mems copied, for cgroup v1) and moves itself
    // in: the group was left busy (EBUSY) and every restore failed after it.
    let script = format!(
        "g=$(grep -E ':cpuset:|^0::' /proc/self/cgroup | head -1 | cut -d: -f3); \
         d={m}$g/child; mkdir $d || exit 3; \
         cat {m}$g/cpuset.cpus > $d/cpuset.cpus 2>/dev/null; \
         cat {m}$g/cpuset.mems > $d/cpuset.mems 2>/dev/null; \
         echo $$ > $d/cgroup.procs || exit 4; sleep 0.2"
    );
    let out = clean_command(goset_run_bin())
        .args([
            "-n", "1", "--sample", "0", "--share", "--cgroup", "--", "sh", "-c", &script,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("cannot remove"), "{err}");
    let left: Vec<String> = (std::fs::read_dir(&mount).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("goset-sh"))
        .collect();
    assert!(left.is_empty(), "left {left:?}\n{err}");
}

#[test]
fn two_steer_runs_ended_in_either_order_leave_every_irq_as_found() {
    if read_irqs().is_empty() {
        return missing(
            "/proc/irq/*/smp_affinity_list",
            "a kernel with IRQ affinity (any x86 one)",
        );
    }
    let Some(irqbalance) = irqbalance_program() else {
        return missing("irqbalance", "apt-get install irqbalance");
    };
    let Some(bench) = bench("--steer", false, false) else {
        return;
    };
    let daemon = Irqbalance::start(irqbalance);
    let pid = daemon.0.id();
    let found = read_irqs();
    for first_out in [0, 1] {
        // Two runs on the two CPUs (--share: this machine has no third for a housekeeper).
        let mut runs: Vec<Running> = (0..2)
            .map(|_| {
                let mut r = start(
                    &["-n", "1", "--steer", "--share"],
                    bench.probe.path(),
                    &[],
                    &[],
                );
                r.ready();
                r
            })
            .collect();
        assert_eq!(state_of(pid), Some('T'), "irqbalance held while both run");
        let (code, _, stderr) = runs.remove(first_out).finish();
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            state_of(pid),
            Some('T'),
            "irqbalance still held while the other steers\n{stderr}"
        );
        let (code, _, stderr) = runs.remove(0).finish();
        assert_eq!(code, 0, "{stderr}");
        assert!(
            matches!(state_of(pid), Some('S' | 'R' | 'D')),
            "irqbalance runs again after the last\n{stderr}"
        );
        // irqbalance itself may move IRQs once it runs again: compare before it does much.
        let after = read_irqs();
        let changed: Vec<(&String, &String, Option<&String>)> = (found.iter())
            .filter(|(irq, aff)| after.get(*irq) != Some(*aff))
            .map(|(irq, aff)| (irq, aff, after.get(irq)))
            .collect();
        assert!(
            changed.is_empty(),
            "first out: run {first_out}: IRQs not as found: {changed:?}"
        );
    }
    drop(daemon);
}
