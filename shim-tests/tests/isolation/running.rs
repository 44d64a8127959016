//! A goset-run of the probe whose task waits on its stdin, so that the test reads the machine
//! while it runs.

use shim_tests::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A goset-run whose task waits on its stdin: the test reads the machine while it runs.
pub(crate) struct Running {
    pub(crate) child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

pub(crate) fn start(
    args: &[&str],
    program: &Path,
    program_args: &[&str],
    env: &[(&str, &str)],
) -> Running {
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
pub(crate) struct Ready {
    pub(crate) pid: i32,
    pub(crate) tids: Vec<i32>,
}

impl Running {
    /// Waits for the probe's `ready` line (60 s at most), keeping the lines before it.
    pub(crate) fn ready(&mut self) -> Ready {
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

    pub(crate) fn take_stderr(&mut self) -> String {
        let handle = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new));
        handle.join().unwrap_or_default()
    }

    /// Closes the task's stdin (it exits) and waits for goset-run: `(exit code, stdout, stderr)`.
    pub(crate) fn finish(mut self) -> (i32, Vec<String>, String) {
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
