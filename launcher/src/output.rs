//! Where goset's own output goes. People's tables go to stderr, JSON that the user asked for to
//! stdout. A closed pipe or a full disk on either never panics and never changes the exit code:
//! the task's status matters more than our report. Text another user or the task chose is
//! escaped on its way to a terminal ([`escape`]).

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

/// `text` for a terminal, the one rule for every string another user or the task chose (a
/// thread or process name, a path, another run's command): an escape sequence in it must not
/// reach the terminal raw. Control characters (C0, DEL, C1) read
/// `\xNN`, and a backslash `\\` so that the escaped text is not ambiguous.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.into()
}
