//! `--instances K`: the output of K copies of one command, kept apart.
//!
//! Owns: each copy's stdout and stderr pipes, and the relays that copy their lines to
//! goset-run's own stdout and stderr with the copy's index in front (`[2] line`), a whole
//! line at a time, so that lines of different copies never mix within a line. Must not:
//! start or wait for processes (`task` and `launch` do), or hold up the report: a relay whose
//! pipe a daemonised grandchild keeps open is left behind after a short grace.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most instances one goset-run starts: `--instances` is checked against it, and the signal
/// forwarding table has a slot for each.
pub const MAX_INSTANCES: usize = 256;

/// How long the relays may take to drain once every copy has ended.
const DRAIN: Duration = Duration::from_secs(2);

/// One copy's stdout and stderr pipes, both ends, before it starts.
pub struct Pipes {
    out: (OwnedFd, OwnedFd),
    err: (OwnedFd, OwnedFd),
}

impl Pipes {
    /// Two close-on-exec pipes (the copy gets its write ends as descriptors 1 and 2).
    pub fn new() -> std::io::Result<Pipes> {
        let pipe =
            || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from);
        Ok(Pipes {
            out: pipe()?,
            err: pipe()?,
        })
    }

    /// The write ends, for the copy's stdout and stderr.
    pub fn write_ends(&self) -> (RawFd, RawFd) {
        (self.out.1.as_raw_fd(), self.err.1.as_raw_fd())
    }
}

/// The relays of every copy started so far.
#[derive(Default)]
pub struct Relays(Vec<JoinHandle<()>>);

impl Relays {
    /// Closes this side's write ends (the copy holds its own now) and relays copy `index`'s
    /// lines.
    pub fn add(&mut self, index: usize, pipes: Pipes) {
        let Pipes { out, err } = pipes;
        drop((out.1, err.1));
        let prefix = format!("[{index}] ");
        let p = prefix.clone();
        self.0.push(std::thread::spawn(move || {
            relay(out.0, &p, std::io::stdout())
        }));
        self.0.push(std::thread::spawn(move || {
            relay(err.0, &prefix, std::io::stderr())
        }));
    }

    /// Waits for the relays to copy what is left, at most [`DRAIN`].
    pub fn finish(self) {
        let end = Instant::now() + DRAIN;
        while Instant::now() < end && self.0.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        for h in self.0.into_iter().filter(|h| h.is_finished()) {
            let _ = h.join();
        }
    }
}

/// Copies `from` to `to` line by line, each line prefixed; a last line without a newline gets
/// one. Ends at end of file or when `to` fails (a closed stdout: the copy then gets EPIPE).
fn relay(from: OwnedFd, prefix: &str, to: impl Write) {
    let mut reader = BufReader::new(File::from(from));
    let mut to = to;
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut out = Vec::with_capacity(prefix.len() + line.len() + 1);
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(&line);
        if !line.ends_with(b"\n") {
            out.push(b'\n');
        }
        if to.write_all(&out).and_then(|_| to.flush()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_prefixed_whole_and_a_last_partial_line_ends() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut w = File::from(w);
        w.write_all(b"one\ntwo\nthree").unwrap();
        drop(w);
        let mut out = Vec::new();
        relay(r, "[3] ", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[3] one\n[3] two\n[3] three\n"
        );
    }
}
