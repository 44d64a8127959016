//! What outlives goset-run, and what it opens: a launcher killed with SIGKILL leaves its run
//! directory, which the next launcher removes (never a live launcher's, never through a link);
//! `--die-with-launcher` ends the task with it; the run directory is private; as root, `--json`
//! and `--log` do not follow a link planted in a directory others can write to.

use shim_tests::{give_away, goset_run_bin, is_root, launcher_lock};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where goset-run puts run directories, given `XDG_RUNTIME_DIR=xdg`.
fn base(xdg: &Path) -> PathBuf {
    if is_root() {
        PathBuf::from("/run/goset")
    } else {
        xdg.join("goset")
    }
}

/// goset-run with a short start and the runtime directory `xdg` (used unless root).
fn goset_run(xdg: &Path) -> Command {
    let mut cmd = Command::new(goset_run_bin());
    cmd.env("XDG_RUNTIME_DIR", xdg)
        .args(["-q", "--sample", "0"]);
    cmd
}

/// Waits up to 30 s for `path` to exist.
fn wait_for(path: &Path) -> bool {
    for _ in 0..3000 {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// A goset-run whose task records its pid and `GOSET_PLAN`, then waits for `stop` (or a
/// signal). Dropping it ends both, whatever happened to the test.
struct Held {
    launcher: Option<Child>,
    task: i32,
    plan: PathBuf,
    stop: PathBuf,
}

impl Held {
    fn start(dir: &Path, extra: &[&str]) -> Held {
        let (info, stop) = (dir.join("info"), dir.join("stop"));
        let script = format!(
            "echo $$ \"$GOSET_PLAN\" > {info}.new && mv {info}.new {info}; while [ ! -e {stop} ]; do sleep 0.05; done",
            info = info.display(),
            stop = stop.display()
        );
        let launcher = goset_run(dir)
            .args(extra)
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut held = Held {
            launcher: Some(launcher),
            task: 0,
            plan: PathBuf::new(),
            stop,
        };
        assert!(wait_for(&info), "the task never started");
        let text = std::fs::read_to_string(&info).unwrap();
        let (pid, plan) = text.trim_end().split_once(' ').unwrap();
        held.task = pid.parse().unwrap();
        held.plan = PathBuf::from(plan);
        held
    }

    /// Kills the launcher with SIGKILL and reaps it; the task is left as it is.
    fn kill_launcher(&mut self) {
        let mut launcher = self.launcher.take().unwrap();
        launcher.kill().unwrap();
        launcher.wait().unwrap();
    }

    /// Lets the task end normally and waits for goset-run.
    fn finish(mut self) -> std::process::ExitStatus {
        std::fs::write(&self.stop, "").unwrap();
        let mut launcher = self.launcher.take().unwrap();
        for _ in 0..3000 {
            if let Some(status) = launcher.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("goset-run did not end");
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.stop, "");
        if let Some(mut launcher) = self.launcher.take() {
            let _ = launcher.kill();
            let _ = launcher.wait();
        }
        if self.task > 0 && alive(self.task) {
            // SAFETY: the task of this test, which it ends.
            unsafe { libc::kill(self.task, libc::SIGKILL) };
            reap(self.task);
        }
    }
}

/// Whether `pid` is alive (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Waits (up to 30 s) for `pid`, a child of this process since it is a subreaper; its status.
fn reap(pid: i32) -> Option<i32> {
    for _ in 0..3000 {
        let mut status = 0;
        // SAFETY: status is a valid out-parameter.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 => std::thread::sleep(Duration::from_millis(10)),
            r if r == pid => return Some(status),
            _ => return None,
        }
    }
    None
}

/// Orphans of the launchers these tests kill become this process's children, to be reaped,
/// until the returned value is dropped. The test binary holds the other robust tests too: an
/// orphan of theirs left unreaped here would be a zombie that still looks alive in `/proc`
/// (a dead launcher's booking, say), so the test that takes this holds [`launcher_lock`] and
/// gives it up before the lock.
fn become_subreaper() -> Subreaper {
    // SAFETY: prctl with an integer argument.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) },
        0,
        "PR_SET_CHILD_SUBREAPER"
    );
    Subreaper
}

/// This process is a subreaper while it lives.
struct Subreaper;

impl Drop for Subreaper {
    fn drop(&mut self) {
        // SAFETY: as in become_subreaper; a failure leaves the process a subreaper, which only
        // keeps orphans as zombies until it exits.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0) };
    }
}

/// The start time (field 22 of stat) of this test process.
fn own_start() -> u64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = text.rsplit_once(')').unwrap().1;
    rest.split_whitespace()
        .nth(22 - 3)
        .unwrap()
        .parse()
        .unwrap()
}

/// Removes what a test planted in the run directories' base, even when it fails.
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => drop(std::fs::remove_dir_all(p)),
                Ok(_) => drop(std::fs::remove_file(p)),
                Err(_) => {}
            }
        }
    }
}

#[test]
fn a_dead_launchers_directory_is_swept_a_live_ones_kept_and_both_are_private() {
    // One test at a time: a launcher killed by one test is swept by the next one's runs.
    let _serial = launcher_lock();
    let tmp = tempfile::tempdir().unwrap();
    let base = base(tmp.path());
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("keep"), "x").unwrap();
    let live = Held::start(tmp.path(), &[]);
    // The live launcher's directory: `<pid>-<start>`, 0711 (others pass through to lib/ and
    // read its plan, 0644, but write nothing there).
    let name = live.plan.file_name().unwrap().to_str().unwrap().to_string();
    let (pid, start) = name.split_once('-').expect("<pid>-<start>");
    let launcher_stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the launcher's pid");
    let launcher_start = launcher_stat.rsplit_once(')').unwrap().1;
    assert_eq!(
        launcher_start.split_whitespace().nth(22 - 3),
        Some(start),
        "{name}"
    );
    assert_eq!(live.plan.parent(), Some(base.as_path()));
    assert_eq!(
        std::fs::metadata(&live.plan).unwrap().mode() & 0o777,
        0o711,
        "{name}"
    );
    assert_eq!(
        std::fs::metadata(live.plan.join("plan")).unwrap().mode() & 0o777,
        0o644,
        "{name}"
    );

    // This test's own pid with another start time: a dead launcher whose pid was reused.
    let me = std::process::id();
    let dead = base.join(format!("{me}-{}", own_start() + 1));
    let gone = base.join(format!("{me}-0"));
    let link = base.join(format!("{me}-{}", own_start() + 2));
    let other_shape = base.join(format!("goset-test-{me}"));
    let planted = Planted(vec![
        dead.clone(),
        gone.clone(),
        link.clone(),
        other_shape.clone(),
    ]);
    for dir in [&dead, &gone, &other_shape] {
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("lib/outside")).unwrap();
    }
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = goset_run(tmp.path()).args(["--", "true"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dead.exists() && !gone.exists(),
        "dead launchers' directories stay"
    );
    assert!(
        live.plan.is_dir(),
        "a live launcher's directory was removed"
    );
    assert!(
        other_shape.is_dir(),
        "a directory goset did not name was removed"
    );
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "a link was removed"
    );
    assert!(victim.join("keep").is_file(), "the sweep followed a link");
    assert!(live.finish().success());
    drop(planted);
}

#[test]
fn kill_9_leaves_the_task_running_unless_die_with_launcher_and_the_next_run_sweeps() {
    let _serial = launcher_lock();
    let _subreaper = become_subreaper();
    let tmp = tempfile::tempdir().unwrap();

    let mut orphan = Held::start(tmp.path(), &[]);
    orphan.kill_launcher();
    assert!(
        alive(orphan.task),
        "without --die-with-launcher the task goes on"
    );
    let out = goset_run(tmp.path()).args(["--", "true"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !orphan.plan.exists(),
        "the dead launcher's {} stays",
        orphan.plan.display()
    );
    drop(orphan);

    let dir = tmp.path().join("die");
    std::fs::create_dir(&dir).unwrap();
    let mut held = Held::start(&dir, &["--die-with-launcher"]);
    held.kill_launcher();
    let status = reap(held.task).expect("the task outlived its launcher");
    held.task = 0;
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "status {status:#x}"
    );
}

/// A file of root's in the sticky directory `shared`, and a link in a directory of root's,
/// work for `--json` and `--log`.
fn roots_own_files_work(tmp: &Path, shared: &Path) {
    let json = shared.join("r.json");
    let log = shared.join("p.log");
    let out = goset_run(tmp)
        .arg("--json")
        .arg(&json)
        .arg("--log")
        .arg(&log)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["run"]["exit"], 0);
    assert!(std::fs::read_to_string(&log).unwrap().contains("\"init\""));
    let out = goset_run(tmp)
        .args(["--json", "/dev/stdout", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["run"]["exit"], 0);
}

#[test]
fn as_root_json_and_log_do_not_follow_a_link_planted_where_others_can_write() {
    if !is_root() {
        eprintln!("skipped: the symlink rule is root's (run as root to test it)");
        return;
    }
    let _serial = launcher_lock();
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let open_dir = tmp.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = tmp.path().join("ran");
    let refused = |flag: &str, path: &Path, want: &str| {
        let out = goset_run(tmp.path())
            .arg(flag)
            .arg(path)
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {}: {err}",
            path.display()
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        let head = format!("goset-run: {flag} {}: cannot create: ", path.display());
        assert!(err.starts_with(&head) && err.contains(want), "{err}");
        assert!(!marker.exists(), "{flag} {}: the task ran", path.display());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    };
    for (flag, name) in [("--json", "r.json"), ("--log", "p.log")] {
        let link = shared.join(name);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        give_away(&link);
        refused(flag, &link, "a symbolic link in");
        std::fs::remove_file(&link).unwrap();
        // Another user's file, a hard link to root's file, a directory without the sticky bit.
        std::fs::write(&link, "theirs\n").unwrap();
        give_away(&link);
        refused(flag, &link, "must be a regular file with one link");
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "theirs\n");
        std::fs::remove_file(&link).unwrap();
        std::fs::hard_link(&victim, &link).unwrap();
        refused(flag, &link, "must be a regular file with one link");
        std::fs::remove_file(&link).unwrap();
        refused(flag, &open_dir.join(name), "is not sticky");
        assert!(!open_dir.join(name).exists());
    }
    roots_own_files_work(tmp.path(), &shared);
}
