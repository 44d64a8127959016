//! Where goset's own output goes. People's tables go to stderr, JSON that the user asked for to
//! stdout. A closed pipe or a full disk on either never panics and never changes the exit code:
//! the task's status matters more than our report.

use std::io::Write;

/// Writes `text` to stderr, ignoring failures (there is nowhere left to report them).
pub fn to_stderr(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Writes `text` to stdout. A reader that went away (EPIPE) is not an error.
pub fn to_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
