//! Real runtimes, placed without help from their authors: scikit-learn KMeans (OpenMP), numba
//! `prange` and ONNX Runtime with two intra-op threads (the scripts in `runtimes/`, run by the venv
//! `target/pyvenv` that `.ci/run` makes) print the same one line plain (`taskset -c` the two CPUs
//! the shim gets by hand, so that every runtime sizes its pools alike), under the shim by hand and
//! under `goset-run -n 2`; redis-server with `--io-threads 2`, under the shim by hand and under
//! goset-run, serves a redis-benchmark run from outside the task to the end. Meanwhile an observer
//! (`common/observer.rs`) watches the task's threads from `/proc`: no two of them may each burn 40%
//! of a window on one CPU for three windows in a row while another CPU of the task is left idle.
//! A doubled-up pair fails the test with its tids, names, CPU, times, the other CPUs' idle and
//! steal shares, and the placement log's lines for those threads.
//!
//! One task at a time in this file: on 2 CPUs a second task would take CPU time from the
//! first, and two of its threads sharing a CPU would each get less than 40%, unseen.

use shim_tests::observer::{cpu_times, idle_share, tag, Observer, Root, Watch, TAG_VAR};
use shim_tests::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Fewest windows the observer must have seen the task in (0.2 s): fewer means it watched
/// nothing.
const MIN_WINDOWS: usize = 10;

/// How the task runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Under {
    /// `LD_PRELOAD=libgoset.so GOSET_CPUS=<two CPUs> GOSET_LOG=<file>`.
    Shim,
    /// `goset-run -n 2 --log <file>`.
    GosetRun,
}

/// The placement log's lines for `tids` (`"tid":N,`), for failure messages.
fn placements(log: &Path, tids: &BTreeSet<i32>) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = (text.lines())
        .filter(|line| (tids.iter()).any(|t| line.contains(&format!("\"tid\":{t},"))))
        .collect();
    lines.join("\n")
}

/// The observer watched the task and saw no two threads doubled up on one CPU.
fn check_watch(what: &str, watch: &Watch, log: &Path) {
    assert!(
        watch.windows >= MIN_WINDOWS,
        "{what}: the observer saw the task in only {} windows\n{}",
        watch.windows,
        watch.summary()
    );
    assert!(
        watch.doubled.is_empty(),
        "{what}: threads doubled up on one CPU, each burning >= 40% of {} windows in a row:\n{}\n\
         placement log ({}) of those threads:\n{}\nbusiest processes now:\n{}",
        shim_tests::observer::WINDOWS,
        watch.summary(),
        log.display(),
        placements(log, &watch.doubled_tids()),
        shim_tests::observer::busiest_processes()
    );
}

/// The script `name` in `runtimes/`.
fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("runtimes")
        .join(name)
}

/// The script's one line of output, with exit code 0 (stdout holds that line alone).
fn one_line(what: &str, outcome: &Outcome) -> String {
    outcome.expect_code(0);
    assert_eq!(
        outcome.stdout.lines().count(),
        1,
        "{what} prints one line\n{}",
        outcome.dump()
    );
    outcome.stdout.clone()
}

/// The plain run's line of `name` on `cpus` (`taskset -c`), once per test process.
fn plain(python: &Path, name: &str, cpus: &str) -> String {
    static LINES: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    let mut lines = LINES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(line) = lines.get(name) {
        return line.clone();
    }
    let tag = tag();
    let mut cmd = clean_command("taskset");
    cmd.args(["-c", cpus])
        .arg(python)
        .arg(script(name))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(TAG_VAR, &tag);
    let observer = Observer::start(Root::Tagged(tag), true);
    let outcome = run(cmd);
    let watch = observer.finish();
    // For comparison only: the kernel alone may double threads up.
    eprintln!("plain taskset -c {cpus} {name}: {}", watch.summary());
    let line = one_line(&format!("plain {name}"), &outcome);
    lines.insert(name.to_string(), line.clone());
    line
}

/// Runs `runtimes/<name>` plain, then `under` the shim or goset-run with the observer: the
/// same line, and no doubled-up pair.
fn runtime(name: &str, under: Under) {
    let Some(python) = pyvenv_python() else {
        return;
    };
    let Some(cpus) = first_two_allowed() else {
        return;
    };
    let _alone = launcher_lock();
    let expected = plain(&python, name, &cpus);
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("placement.log");
    let tag = tag();
    let observer = Observer::start(Root::Tagged(tag.clone()), under == Under::Shim);
    let outcome = match under {
        Under::Shim => {
            let mut cmd = by_hand(&python, &cpus);
            cmd.arg(script(name))
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("GOSET_LOG", &log)
                .env(TAG_VAR, &tag);
            run(cmd)
        }
        Under::GosetRun => {
            let log_arg = log.to_str().expect("UTF-8 temp path");
            let script = script(name);
            let script = script.to_str().expect("UTF-8 path");
            let env = [("PYTHONDONTWRITEBYTECODE", "1"), (TAG_VAR, tag.as_str())];
            run_under_goset(2, &["--log", log_arg], &python, &[script], &env).0
        }
    };
    let watch = observer.finish();
    let what = format!("{name} under {under:?}");
    assert_eq!(
        one_line(&what, &outcome),
        expected,
        "{what}: not the plain run's line\n{}",
        outcome.dump()
    );
    check_watch(&what, &watch, &log);
}

#[test]
fn kmeans_under_the_shim() {
    runtime("kmeans.py", Under::Shim);
}

#[test]
fn kmeans_under_goset_run() {
    runtime("kmeans.py", Under::GosetRun);
}

#[test]
fn numba_prange_under_the_shim() {
    runtime("numba_prange.py", Under::Shim);
}

#[test]
fn numba_prange_under_goset_run() {
    runtime("numba_prange.py", Under::GosetRun);
}

#[test]
fn onnx_runtime_under_the_shim() {
    runtime("onnx_matmul.py", Under::Shim);
}

#[test]
fn onnx_runtime_under_goset_run() {
    runtime("onnx_matmul.py", Under::GosetRun);
}

/// Longest a server may take to answer PING, or to end after SIGTERM.
const SERVER_WAIT: Duration = Duration::from_secs(20);

/// A server in its own process group, its outputs in files. Dropping it ends it: SIGTERM to
/// the group, then SIGKILL to the group after [`SERVER_WAIT`], whatever happened.
struct Server {
    child: Child,
    status: Option<ExitStatus>,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Server {
    fn start(mut cmd: Command, dir: &Path) -> Server {
        let stdout = dir.join("server.out");
        let stderr = dir.join("server.err");
        let file = |p: &Path| std::fs::File::create(p).expect("server output file");
        cmd.stdin(Stdio::null())
            .stdout(file(&stdout))
            .stderr(file(&stderr))
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Server {
            child,
            status: None,
            stdout,
            stderr,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The server's outputs so far, for messages.
    fn dump(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "--- server stdout:\n{}--- server stderr:\n{}---",
            read(&self.stdout),
            read(&self.stderr)
        )
    }

    /// Polls PING on `port` until `+PONG`; panics when the server ends or takes too long.
    fn wait_ready(&mut self, port: u16) {
        let deadline = Instant::now() + SERVER_WAIT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                panic!(
                    "the server ended ({status}) before answering\n{}",
                    self.dump()
                );
            }
            if ping(port) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no PONG on port {port} within {SERVER_WAIT:?}\n{}",
                self.dump()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ends the whole group: SIGTERM, then SIGKILL when it has not ended in time; the leader's
    /// exit status.
    fn stop(&mut self) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        let group = -self.pid();
        // SAFETY: kill(2) on the process group this test created for the server (its pgid is
        // the server's pid, which stays ours until we reap it below).
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + SERVER_WAIT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    // SAFETY: as above.
                    unsafe { libc::kill(group, libc::SIGKILL) };
                    break self.child.wait().expect("wait for the killed server");
                }
            }
        };
        // Anything left in the group (a forked child) goes too. SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        self.status = Some(status);
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// Whether a redis server on `port` answers PING.
fn ping(port: u16) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0u8; 7];
    conn.write_all(b"PING\r\n").is_ok()
        && conn.read_exact(&mut reply).is_ok()
        && reply.starts_with(b"+PONG")
}

/// The requests per second of redis-benchmark's `-q` summary (`SET: 81234.57 requests per
/// second, ...`), after the progress lines it ends with `\r`.
fn requests_per_second(stdout: &str) -> Option<f64> {
    let line = (stdout.split(['\r', '\n'])).find(|l| l.contains("requests per second"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// goset-run's selection for redis-server: two task CPUs, and every thread nobody placed
/// (jemalloc's) only ever on the housekeeper CPU.
fn check_unplaced_threads(what: &str, json: &Path, server_outcome: &Outcome) {
    let selection = Selection::read(json, server_outcome);
    assert_eq!(selection.task_cpus.len(), 2, "{what}: {selection:?}");
    // jemalloc creates its background threads through dlsym(RTLD_NEXT, "pthread_create"),
    // behind the shim: the housekeeper places them, or leaves one where a helper it put on
    // the housekeeper CPU created it; never on a task CPU beside a placed thread.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(json).expect("the JSON")).expect("JSON");
    let hk = selection.housekeeper.expect("a housekeeper");
    for t in report["threads"].as_array().expect("threads") {
        if t["placed_by"] == "none" {
            let seen: Vec<u64> = (t["seen_on"].as_array().into_iter().flatten())
                .filter_map(|c| c.as_u64())
                .collect();
            assert!(
                seen.iter().all(|&c| c == hk as u64),
                "{what}: a thread nobody placed ran on a task CPU: {t}"
            );
        }
    }
}

/// redis-server `--io-threads 2` under the shim or goset-run, redis-benchmark from outside
/// (50 clients: redis 7 hands reads and writes to its I/O thread from 4 clients on, which then
/// spins beside the main thread).
fn redis(under: Under) {
    if !have_redis() {
        return;
    }
    let Some(cpus) = first_two_allowed() else {
        return;
    };
    let _alone = launcher_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("placement.log");
    let json = dir.path().join("selection.json");
    let port = free_port().to_string();
    let mut cmd = match under {
        Under::Shim => {
            let mut cmd = by_hand("redis-server", &cpus);
            cmd.env("GOSET_LOG", &log);
            cmd
        }
        Under::GosetRun => {
            let log_arg = log.to_str().expect("UTF-8 temp path");
            goset_run(2, &json, &["--log", log_arg], "redis-server")
        }
    };
    cmd.args(["--port", &port, "--bind", "127.0.0.1", "--io-threads", "2"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir.path());
    let mut server = Server::start(cmd, dir.path());
    server.wait_ready(port.parse().expect("a port number"));
    let observer = Observer::start(Root::Pid(server.pid()), under == Under::Shim);
    let mut bench = clean_command("redis-benchmark");
    bench.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "set",
        "-n",
        "100000",
        "-c",
        "50",
        "-q",
    ]);
    let outcome = run(bench);
    let watch = observer.finish();
    let status = server.stop();
    let what = format!("redis-server --io-threads 2 under {under:?}");
    outcome.expect_code(0);
    let rps = requests_per_second(&outcome.stdout);
    assert!(
        rps.is_some_and(|r| r > 0.0),
        "{what}: redis-benchmark reports no requests per second\n{}\n{}",
        outcome.dump(),
        server.dump()
    );
    if under == Under::GosetRun {
        let server_outcome = Outcome {
            command: "goset-run ... redis-server".into(),
            status,
            stdout: String::new(),
            stderr: server.dump(),
        };
        check_unplaced_threads(&what, &json, &server_outcome);
    }
    check_watch(&what, &watch, &log);
}

#[test]
fn redis_io_threads_under_the_shim() {
    redis(Under::Shim);
}

#[test]
fn redis_io_threads_under_goset_run() {
    redis(Under::GosetRun);
}

/// Each of the two loops burned at least this share of the run: they had CPU a to themselves
/// (a third thread there leaves each a third).
const BURNED: f64 = 0.45;
/// CPU b idle for at least this share of the run was left idle ...
const LEFT_IDLE: f64 = 0.6;
/// ... and for at most this share, taken by a process outside the task.
const TAKEN: f64 = 0.2;

/// What a try of [`two_loops_on`] met, measured apart from the observer's verdict.
struct Met {
    /// Both loops burned at least [`BURNED`] of the run.
    burned: bool,
    /// CPU b's idle share over the run (`/proc/stat`).
    b_idle: f64,
}

/// Two busy shell loops held on CPU `a` by `taskset` and a sleeper on CPU `b`, a task of 2 s
/// under the observer: what it saw, and what the try met.
fn two_loops_on(a: usize, b: usize) -> (Watch, Met) {
    let tag = tag();
    let script = format!(
        "taskset -c {a} sh -c 'while :; do :; done' & \
         taskset -c {a} sh -c 'while :; do :; done' & taskset -c {b} sleep 5 & wait"
    );
    let mut cmd = clean_command("timeout");
    cmd.args(["2", "sh", "-c", &script]).env(TAG_VAR, &tag);
    let observer = Observer::start(Root::Tagged(tag), true);
    let (times, began) = (cpu_times(), Instant::now());
    let outcome = run(cmd);
    let (elapsed, b_idle) = (began.elapsed(), idle_share(b, &times, &cpu_times()));
    let watch = observer.finish();
    outcome.expect_code(124);
    let mut runs: Vec<f64> = watch.threads.iter().map(|t| t.run_s).collect();
    runs.sort_by(|x, y| y.total_cmp(x));
    let burned = runs.len() >= 2 && runs[1] >= BURNED * elapsed.as_secs_f64();
    let b_idle = b_idle.expect("CPU b in /proc/stat");
    (watch, Met { burned, b_idle })
}

/// The observer is no blind eye: two busy shell loops held on one CPU by `taskset`, while a
/// sleeper of the task leaves another CPU idle, make a doubled-up pair. Each try is judged by
/// what it met: with the other CPU idle the pair is doubled up, with it taken by a process
/// outside the task (seen in a full run of the suite, and always beside a program that keeps a
/// CPU busy: on two CPUs it runs on the one the loops leave) the pair is rightly excused; a try
/// in which the loops did not have their CPU to themselves says nothing. Up to six tries,
/// until one met an idle CPU, and at least two must have said something.
#[test]
fn observer_sees_two_busy_processes_on_one_cpu() {
    let allowed = own_allowed();
    let [a, b, ..] = allowed[..] else {
        eprintln!("skipped: needs two CPUs (one to share, one left idle)");
        return;
    };
    let _alone = launcher_lock();
    let on_a = |pairs: &[shim_tests::observer::Doubled]| pairs.iter().any(|d| d.cpu == a as i32);
    let (mut summaries, mut judged) = (Vec::new(), 0);
    for _ in 0..6 {
        let (watch, met) = two_loops_on(a, b);
        let summary = format!(
            "cpu {b} idle {:.0}%: {}",
            met.b_idle * 100.0,
            watch.summary()
        );
        if met.burned && met.b_idle >= LEFT_IDLE {
            assert!(
                on_a(&watch.doubled),
                "no doubled-up pair seen on cpu {a} while cpu {b} was left idle: {summary}"
            );
            return;
        }
        if met.burned && met.b_idle <= TAKEN {
            assert!(
                watch.doubled.is_empty() && on_a(&watch.excused),
                "the pair on cpu {a} must be excused while cpu {b} is taken: {summary}"
            );
            judged += 1;
        }
        summaries.push(summary);
    }
    assert!(
        judged >= 2,
        "in 6 tries only {judged} met the pair alone on cpu {a} and cpu {b} idle or taken:\n{}\n\
         busiest processes now:\n{}",
        summaries.join("\n"),
        shim_tests::observer::busiest_processes()
    );
    eprintln!(
        "cpu {b} was never left idle in 6 tries (a process outside the task held it): \
         only the excused pair was seen"
    );
}

/// Nor does it blame a placement for what no placement could help: the same two loops, while a
/// busy loop outside the task holds the other CPU, share CPU a with no CPU left idle. Up to
/// five tries, until one in which the loops had CPU a to themselves.
#[test]
fn observer_excuses_a_pair_while_the_other_cpu_is_taken() {
    let allowed = own_allowed();
    let [a, b, ..] = allowed[..] else {
        eprintln!("skipped: needs two CPUs (one to share, one taken)");
        return;
    };
    let _alone = launcher_lock();
    let mut summaries = Vec::new();
    for _ in 0..5 {
        let mut hog = clean_command("taskset");
        hog.args(["-c", &b.to_string(), "sh", "-c", "while :; do :; done"]);
        // Its own process group, killed when dropped.
        let hog = Started::new(hog);
        let (watch, met) = two_loops_on(a, b);
        drop(hog);
        if met.burned && met.b_idle <= TAKEN {
            assert!(
                watch.doubled.is_empty() && watch.excused.iter().any(|d| d.cpu == a as i32),
                "the pair on cpu {a} is excused while cpu {b} runs a loop outside the task: {}",
                watch.summary()
            );
            return;
        }
        summaries.push(format!(
            "cpu {b} idle {:.0}%: {}",
            met.b_idle * 100.0,
            watch.summary()
        ));
    }
    panic!(
        "in 5 tries the loops never had cpu {a} to themselves:\n{}",
        summaries.join("\n")
    );
}
