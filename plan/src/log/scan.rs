//! Reading back a line exactly as the shim's writer ([`super::format`]) lays it out, without a
//! JSON parser.
//!
//! Why by hand: a task that churns threads writes tens of thousands of records a second, and
//! the housekeeper follows them while the task runs; a scan of the writer's fixed layout is a
//! few times faster than a JSON parse, and this crate takes no parser (it is the shim's too).
//! Kept beside the writer so that the two change together.
//!
//! Owns: the one layout it accepts: every key in the writer's order, every value in the form
//! the writer gives it, an executable path without escapes, `placed_by` the shim's. Anything
//! else (another writer, the housekeeper's records, a torn or edited line) is `None`, for the
//! caller to parse in full. Must not: allocate, or read past the line it is given: the task
//! writes the log, so a line is whatever the task put there; a scan is one pass over it.

use super::{Event, PlacedBy, Role};

/// One of the shim's records, its strings borrowed from the line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShimLine<'a> {
    /// Unix time in seconds, to the microsecond the writer keeps.
    pub time: f64,
    /// Process id.
    pub pid: i32,
    /// The thread the decision is about.
    pub tid: i32,
    /// The thread's name as the line holds it: JSON-escaped ([`super::escape`]), not decoded.
    pub comm_escaped: &'a [u8],
    /// The process's executable.
    pub exe: &'a str,
    /// What happened.
    pub event: Event,
    /// The intercepted call.
    pub call: &'a str,
    /// The mask asked for, as the writer spelt it (a cpulist, or `(too long)`).
    pub requested: Option<&'a str>,
    /// The CPU applied.
    pub cpu: Option<usize>,
    /// The slot held.
    pub slot: Option<usize>,
    /// The thread's role.
    pub role: Role,
    /// The slot is shared with another live thread.
    pub shared: bool,
    /// It runs on the whole reservation.
    pub roams: bool,
}

/// `line` (without its newline) read as the shim writes it; `None` for any other line.
pub fn shim_line<'a>(line: &'a [u8]) -> Option<ShimLine<'a>> {
    let rest = line.strip_prefix(b"{\"time\":")?;
    let (seconds, rest) = number(rest)?;
    // The fraction: six digits, leading zeros included.
    let fraction = rest.strip_prefix(b".")?;
    let (micros, rest) = (fraction.get(..6)?, &fraction[6..]);
    if !micros.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let micros = micros
        .iter()
        .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    let (pid, rest) = number(rest.strip_prefix(b",\"pid\":")?)?;
    let (tid, rest) = number(rest.strip_prefix(b",\"tid\":")?)?;
    let comm = rest.strip_prefix(b",\"comm\":\"")?;
    let rest = skip_string(comm)?;
    let comm_escaped = &comm[..comm.len() - rest.len() - 1];
    let (exe, rest) = plain_string(rest.strip_prefix(b",\"exe\":\"")?)?;
    let (event, rest) = plain_string(rest.strip_prefix(b",\"event\":\"")?)?;
    let (call, rest) = plain_string(rest.strip_prefix(b",\"call\":\"")?)?;
    let rest = rest.strip_prefix(b",\"requested\":")?;
    let (requested, rest) = match rest.strip_prefix(b"null") {
        Some(rest) => (None, rest),
        None => {
            let (text, rest) = plain_string(rest.strip_prefix(b"\"")?)?;
            (Some(text), rest)
        }
    };
    let (cpu, rest) = number_or_null(rest.strip_prefix(b",\"cpu\":")?)?;
    let (slot, rest) = number_or_null(rest.strip_prefix(b",\"slot\":")?)?;
    let (role, rest) = plain_string(rest.strip_prefix(b",\"role\":\"")?)?;
    let (shared, rest) = boolean(rest.strip_prefix(b",\"shared\":")?)?;
    let (roams, rest) = boolean(rest.strip_prefix(b",\"roams\":")?)?;
    let rest = rest.strip_prefix(b",\"placed_by\":\"")?;
    if rest.strip_suffix(b"\"}")? != PlacedBy::Shim.as_str().as_bytes() {
        return None;
    }
    let text = |s: &'a [u8]| core::str::from_utf8(s).ok();
    Some(ShimLine {
        time: seconds as f64 + f64::from(micros) / 1e6,
        pid: i32::try_from(pid).ok()?,
        tid: i32::try_from(tid).ok()?,
        comm_escaped,
        exe: text(exe)?,
        event: Event::parse(text(event)?)?,
        call: text(call)?,
        requested: match requested {
            Some(r) => Some(text(r)?),
            None => None,
        },
        cpu: cpu.map(usize::try_from).transpose().ok()?,
        slot: slot.map(usize::try_from).transpose().ok()?,
        role: Role::parse(text(role)?)?,
        shared,
        roams,
    })
}

/// `true` or `false` at the start of `s`, and what follows it.
fn boolean(s: &[u8]) -> Option<(bool, &[u8])> {
    match s.strip_prefix(b"true") {
        Some(rest) => Some((true, rest)),
        None => Some((false, s.strip_prefix(b"false")?)),
    }
}

/// A decimal number at the start of `s` as JSON writes one (at most 18 digits, so it fits an
/// `i64`; no leading zero), and what follows it.
fn number(s: &[u8]) -> Option<(i64, &[u8])> {
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 18 || (digits > 1 && s[0] == b'0') {
        return None;
    }
    let n = s[..digits]
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    Some((n, &s[digits..]))
}

/// `null` or a [`number`].
fn number_or_null(s: &[u8]) -> Option<(Option<i64>, &[u8])> {
    match s.strip_prefix(b"null") {
        Some(rest) => Some((None, rest)),
        None => number(s).map(|(n, rest)| (Some(n), rest)),
    }
}

/// Past the end of a JSON string whose opening quote is already consumed; `None` for a raw
/// control character, which JSON does not allow in a string.
fn skip_string(s: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(&s[i + 1..]),
            b if b < 0x20 => return None,
            _ => i += 1,
        }
    }
    None
}

/// A JSON string without escapes or control characters (opening quote consumed), and what
/// follows its closing quote.
fn plain_string(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = s
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    (s[end] == b'"').then(|| (&s[..end], &s[end + 1..]))
}

#[cfg(test)]
mod tests;
