//! `--instances K`: the output of K copies of one command, kept apart.
//!
//! Owns: each copy's stdout and stderr pipes, and the relays that copy their lines to
//! goset-run's own stdout and stderr with the copy's index in front (`[2] line`), a whole
//! line at a time, so that lines of different copies never mix within a line (a line longer
//! than 64 KiB goes out in pieces, so that memory stays bounded). Must not:
//! start or wait for processes (`task` and `launch` do), or hold up the report: a relay whose
//! pipe a daemonised grandchild keeps open is left behind after a short grace.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
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
            relay(File::from(out.0), &p, std::io::stdout())
        }));
        self.0.push(std::thread::spawn(move || {
            relay(File::from(err.0), &prefix, std::io::stderr())
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

/// Most bytes of one line a relay holds before it writes them out: a copy that writes
/// without newlines costs the launcher this much memory, not the whole line.
const CHUNK: u64 = 64 << 10;

/// Copies `from` to `to` line by line, each line prefixed; a last line without a newline gets
/// one. A line longer than [`CHUNK`] goes out in pieces, the prefix before the first only.
/// Ends at end of file or when `to` fails (a closed stdout: the copy then gets EPIPE).
fn relay(from: impl Read, prefix: &str, to: impl Write) {
    let mut reader = BufReader::new(from);
    let mut to = to;
    let mut piece = Vec::new();
    let mut at_line_start = true;
    loop {
        piece.clear();
        piece.extend_from_slice(if at_line_start {
            prefix.as_bytes()
        } else {
            b""
        });
        let start = piece.len();
        match reader.by_ref().take(CHUNK).read_until(b'\n', &mut piece) {
            Ok(0) | Err(_) if at_line_start => return,
            Ok(0) | Err(_) => {
                let _ = to.write_all(b"\n").and_then(|_| to.flush());
                return;
            }
            Ok(_) => {}
        }
        at_line_start = piece.ends_with(b"\n");
        if !at_line_start && ((piece.len() - start) as u64) < CHUNK {
            // End of file in mid-line.
            piece.push(b'\n');
            at_line_start = true;
        }
        if to.write_all(&piece).and_then(|_| to.flush()).is_err() {
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
        relay(File::from(r), "[3] ", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[3] one\n[3] two\n[3] three\n"
        );
    }

    #[test]
    fn a_line_longer_than_a_chunk_is_prefixed_once_and_relayed_whole() {
        let long = vec![b'x'; CHUNK as usize * 3 + 5];
        let mut input = long.clone();
        input.extend_from_slice(b"\nshort\n");
        let mut out = Vec::new();
        relay(&input[..], "[0] ", &mut out);
        let mut expected = b"[0] ".to_vec();
        expected.extend_from_slice(&long);
        expected.extend_from_slice(b"\n[0] short\n");
        assert!(out == expected, "{} bytes relayed", out.len());
    }

    #[test]
    fn a_partial_line_at_a_chunk_boundary_ends_with_a_newline() {
        let input = vec![b'y'; CHUNK as usize];
        let mut out = Vec::new();
        relay(&input[..], "[1] ", &mut out);
        assert_eq!(out.len(), 4 + CHUNK as usize + 1);
        assert!(out.starts_with(b"[1] y") && out.ends_with(b"y\n"));
    }
}
