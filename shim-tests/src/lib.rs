//! Helpers shared by the end-to-end tests in `tests/`, one binary per group, so that they
//! compile once: the built `goset-run` and `libgoset.so`, compilers for the target programs in
//! `programs/`, a watchdog runner, parsers for what the programs report, and the runs and
//! checks that several test files share ([`Program`], [`Mode`], [`checks`]). The tests compare
//! reports against the plan (`GOSET_CPUS` by hand, the `--json` selection under goset-run),
//! never against the shim's own log.
#![warn(missing_docs)]

pub mod checks;
pub mod launch;
pub mod observer;
pub mod plan;
pub mod program;
pub mod report;
pub mod runtimes;
pub mod tools;

pub use checks::*;
pub use plan::*;
pub use program::*;
pub use report::*;
pub use tools::*;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest any target program may run before the watchdog kills it.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The profile directory that holds the workspace's built binaries (`target/debug`).
///
/// A test executable lives in `<target>/debug/deps/`, so its grandparent is the profile
/// directory of whatever target dir cargo used (`CARGO_TARGET_DIR` included). When that does
/// not hold the binaries, `$CARGO_TARGET_DIR/debug` and `<workspace>/target/debug` are tried.
fn profile_dir_candidates() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(profile) = exe.parent().and_then(Path::parent) {
            dirs.push(profile.to_path_buf());
        }
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        let target = PathBuf::from(target);
        let target = if target.is_relative() {
            workspace_dir().join(target)
        } else {
            target
        };
        dirs.push(target.join("debug"));
    }
    dirs.push(workspace_dir().join("target").join("debug"));
    dirs
}

/// The workspace root (the parent of this crate).
fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("shim-tests sits in the workspace")
        .to_path_buf()
}

fn built(name: &str) -> PathBuf {
    let candidates = profile_dir_candidates();
    for dir in &candidates {
        let path = dir.join(name);
        if path.is_file() {
            return path;
        }
    }
    let looked: Vec<String> = candidates
        .iter()
        .map(|d| d.join(name).display().to_string())
        .collect();
    panic!(
        "{name} not found (looked at {}): build first: cargo build --workspace",
        looked.join(", ")
    );
}

/// The shim, `libgoset.so`.
pub fn shim() -> PathBuf {
    built("libgoset.so")
}

/// The launcher, `goset-run`.
pub fn goset_run_bin() -> PathBuf {
    built("goset-run")
}

/// The machine-wide command, `goset`.
pub fn goset_bin() -> PathBuf {
    built("goset")
}

/// The experiment runner, `goset-bench`.
pub fn goset_bench_bin() -> PathBuf {
    built("goset-bench")
}

/// The directory of the C and Rust sources of the target programs.
pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

/// What a finished program left behind.
#[derive(Debug)]
pub struct Outcome {
    /// The command line, for messages.
    pub command: String,
    /// How it ended.
    pub status: ExitStatus,
    /// Everything it wrote to stdout, lossily UTF-8.
    pub stdout: String,
    /// Everything it wrote to stderr, lossily UTF-8.
    pub stderr: String,
}

impl Outcome {
    /// The exit code; panics with the outputs when the program was killed by a signal.
    pub fn code(&self) -> i32 {
        match self.status.code() {
            Some(code) => code,
            None => panic!(
                "{} was killed ({:?})\n{}",
                self.command,
                self.status,
                self.dump()
            ),
        }
    }

    /// Panics with the outputs unless the program exited with `expected`.
    pub fn expect_code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code(),
            expected,
            "exit code of {}\n{}",
            self.command,
            self.dump()
        );
        self
    }

    /// Both outputs, for failure messages.
    pub fn dump(&self) -> String {
        format!(
            "--- stdout:\n{}--- stderr:\n{}---",
            self.stdout, self.stderr
        )
    }
}

/// A program's process group, killed (and the program reaped) when dropped, so that nothing a
/// test started outlives it.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a negative pid signals only the process group we created for
        // the child (its pgid is the child's pid); ESRCH when it has ended is fine.
        unsafe {
            libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// A program started in its own process group, its output drained while it runs, its stdin
/// closed or a pipe held open until [`Started::go`]. The group is killed when the program ends
/// (anything it left behind, daemons it forked), at the deadline, or when the test fails first.
pub struct Started {
    group: Group,
    stdin: Mutex<Option<ChildStdin>>,
    stdout: JoinHandle<Vec<u8>>,
    stderr: JoinHandle<Vec<u8>>,
    command: String,
}

impl Started {
    /// Starts `cmd` with a pipe for stdin, for [`Started::go`].
    pub fn new(mut cmd: Command) -> Started {
        cmd.stdin(Stdio::piped());
        Started::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> Started {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let command = format!("{cmd:?}");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command}: {e}"));
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                buf
            })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
        let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
        Started {
            stdin: Mutex::new(child.stdin.take()),
            group: Group(child),
            stdout,
            stderr,
            command,
        }
    }

    /// Writes one byte to the program's stdin and closes it.
    pub fn go(&self) {
        use std::io::Write;
        let stdin = self.stdin.lock().unwrap().take();
        stdin
            .expect("stdin is a pipe, written once")
            .write_all(b"g")
            .expect("write to the task's stdin");
    }

    /// Closes stdin, waits for the program to end and collects its output; after `limit` the
    /// whole group is killed and the test fails.
    pub fn finish(mut self, limit: Duration) -> Outcome {
        drop(self.stdin.lock().unwrap().take());
        let deadline = Instant::now() + limit;
        let mut timed_out = false;
        let child = &mut self.group.0;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    // SAFETY: see Group::drop.
                    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
                    break child.wait().expect("wait for the killed child");
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("waiting for {}: {e}", self.command),
            }
        };
        drop(self.group);
        let text = |h: JoinHandle<Vec<u8>>| {
            String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned()
        };
        let outcome = Outcome {
            command: self.command,
            status,
            stdout: text(self.stdout),
            stderr: text(self.stderr),
        };
        assert!(
            !timed_out,
            "{} did not end within {limit:?}\n{}",
            outcome.command,
            outcome.dump()
        );
        outcome
    }
}

/// Runs `cmd` with stdin closed, in its own process group, and collects its output; see
/// [`Started::finish`]. Fails the test after [`TIMEOUT`].
pub fn run(cmd: Command) -> Outcome {
    run_within(cmd, TIMEOUT)
}

/// [`run`] with another limit than [`TIMEOUT`]. The program runs under [`launcher_lock`]: the
/// files of a group share one test process, and one file's program must not run beside
/// another file's task, as it never did when each file was a process of its own.
fn run_within(mut cmd: Command, limit: Duration) -> Outcome {
    cmd.stdin(Stdio::null());
    let _alone = launcher_lock();
    Started::spawn(cmd).finish(limit)
}

/// Environment variables that would change placement or runtimes' behaviour; every test
/// starts from none of them and sets only what it means to.
const PLACEMENT_VARS: [&str; 4] = ["GOSET_", "OMP_", "KMP_", "GOMP_"];

/// A command for `program` with a clean placement environment: no inherited `LD_PRELOAD`,
/// `GOSET_*`, `OMP_*`, `KMP_*` or `GOMP_*`, and the noise record off (`GOSET_NOISE_DIR=none`),
/// so that one test's deliberate noise neither steers another's selection nor enters the
/// node's record; a test of the record names a directory of its own.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("LD_PRELOAD");
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if PLACEMENT_VARS.iter().any(|p| key_text.starts_with(p)) {
            cmd.env_remove(&key);
        }
    }
    cmd.env("GOSET_NOISE_DIR", "none");
    cmd
}

/// `program` under the shim by hand: `LD_PRELOAD=libgoset.so GOSET_CPUS=<cpus>`.
pub fn by_hand(program: impl AsRef<std::ffi::OsStr>, cpus: &str) -> Command {
    let mut cmd = clean_command(program);
    cmd.env("LD_PRELOAD", shim()).env("GOSET_CPUS", cpus);
    cmd
}

/// `goset-run -n <n> --sample 0 --json <json> <extra...> -- <program>` (add the program's
/// arguments to the returned command).
pub fn goset_run(
    n: usize,
    json: &Path,
    extra: &[&str],
    program: impl AsRef<std::ffi::OsStr>,
) -> Command {
    let mut cmd = clean_command(goset_run_bin());
    cmd.arg("-n")
        .arg(n.to_string())
        .args(["--sample", "0", "--json"])
        .arg(json);
    cmd.args(extra).arg("--").arg(program);
    cmd
}

/// Serialises the tests of one binary (a group) that start goset-run or a program: on 2 CPUs,
/// two concurrent launchers would compete for the same CPUs, book each other's, or sweep each
/// other's run directories, and one test's busy loop is noise to another's run. A test that
/// needs the machine to itself (IRQs, cgroups, a busy loop that outlives one run) holds the
/// lock for the whole test; the helpers that start goset-run or run a program take it too,
/// which is free on a thread that already holds it. A test that failed while holding it
/// leaves it usable (poison is ignored).
pub fn launcher_lock() -> LauncherLock {
    static LOCK: Mutex<()> = Mutex::new(());
    if HOLDS_LAUNCHER_LOCK.get() {
        return LauncherLock(None);
    }
    let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HOLDS_LAUNCHER_LOCK.set(true);
    LauncherLock(Some(guard))
}

thread_local! {
    /// Whether this thread holds [`launcher_lock`]'s mutex: a nested take must not wait for
    /// itself.
    static HOLDS_LAUNCHER_LOCK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`launcher_lock`] held: the outermost take releases it when dropped, nested ones do nothing.
pub struct LauncherLock(Option<MutexGuard<'static, ()>>);

impl Drop for LauncherLock {
    fn drop(&mut self) {
        if self.0.is_some() {
            HOLDS_LAUNCHER_LOCK.set(false);
        }
    }
}

/// Runs `goset-run args` (the noise record off, as [`clean_command`] has it) and asserts that
/// it succeeded.
pub fn goset_run_ok(args: &[&str]) -> std::process::Output {
    succeeded(
        Command::new(goset_run_bin())
            .env("GOSET_NOISE_DIR", "none")
            .args(args),
    )
}

/// Runs `cmd` to its end and asserts that it succeeded, its stderr the message otherwise.
pub fn succeeded(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether the tests run as root (CI does): some checks need it and skip, saying so, without.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Makes `path` (not following a link) belong to nobody (65534), as if another user had made
/// it: root's rules for files other users could have planted are tested with these.
pub fn give_away(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::lchown(c.as_ptr(), 65534, 65534) }, 0);
}

/// Whether this machine has two online CPUs; prints why a test skips when it has not.
pub fn two_online_cpus() -> bool {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut n = 0;
    goset_plan::cpulist::parse(text.as_bytes(), &mut |_| n += 1).unwrap();
    if n < 2 {
        eprintln!("skipped: needs 2 online CPUs");
    }
    n >= 2
}

/// Runs `program args` under `goset-run -n <n>` and returns the outcome with the selection.
pub fn run_under_goset(
    n: usize,
    extra: &[&str],
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Outcome, Selection) {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("selection.json");
    let mut cmd = goset_run(n, &json, extra, program);
    cmd.args(args).envs(env.iter().copied());
    let _serial = launcher_lock();
    let outcome = run(cmd);
    let selection = Selection::read(&json, &outcome);
    assert_eq!(
        selection.task_cpus.len(),
        n,
        "goset-run -n {n} selected {:?}",
        selection.task_cpus
    );
    (outcome, selection)
}

/// The selection `goset-run -n <n> --sample 0 --dry-run` makes (deterministic: ranked by
/// topology alone), so that a test can ask a runtime for the opposite placement.
pub fn dry_run_selection(n: usize) -> Selection {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("selection.json");
    let cmd = goset_run(n, &json, &["--dry-run"], "true");
    let _serial = launcher_lock();
    let outcome = run(cmd);
    Selection::read(&json, &outcome)
}
