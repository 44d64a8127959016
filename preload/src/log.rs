//! The placement log (one JSON line per decision) and the one-time warning on stderr.
//!
//! Owns: the record's schema and its formatting into a fixed stack buffer, written with a single
//! `write(2)` on an `O_APPEND` descriptor so that lines from many threads and processes never
//! interleave. Must not: allocate, lock, or use std I/O; it never writes to stdout.

use crate::role::Role;
use crate::sys::{self, Buf};
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};
use goset_plan::cpulist;
use goset_plan::CpuSet;

/// What happened, as the log's `event` field spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A process's main thread was placed (at start, after fork or exec).
    Init,
    /// A new thread was placed at creation.
    Create,
    /// An affinity request was answered.
    Set,
    /// A thread ended and released its slot.
    Exit,
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Event::Init => "init",
            Event::Create => "create",
            Event::Set => "set",
            Event::Exit => "exit",
        }
    }
}

/// One placement decision.
pub struct Record<'a> {
    /// Unix time in seconds.
    pub time: f64,
    /// Process id.
    pub pid: i32,
    /// The thread the decision is about.
    pub tid: i32,
    /// The calling thread's name.
    pub comm: &'a [u8],
    /// The process's executable.
    pub exe: &'a [u8],
    /// What happened.
    pub event: Event,
    /// The intercepted call (`pthread_create`, `sched_setaffinity`, `init`, `exit` ...).
    pub call: &'a str,
    /// The mask the program asked for, if it asked.
    pub requested: Option<&'a CpuSet>,
    /// The CPU applied when it is a single CPU.
    pub cpu: Option<usize>,
    /// The slot held.
    pub slot: Option<usize>,
    /// The thread's role.
    pub role: Role,
    /// Whether the slot is shared with another live thread.
    pub shared: bool,
}

/// Size of a formatted record's buffer; a record that does not fit is cut to valid JSON.
pub const LINE_MAX: usize = 3072;

/// Writes `s` as the inside of a JSON string: quotes, backslashes and control characters
/// escaped, bytes that are not UTF-8 replaced by U+FFFD.
pub fn escape(out: &mut dyn Write, s: &[u8]) -> core::fmt::Result {
    // Paths and thread names are nearly always plain ASCII: one write for all of it.
    if s.iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        return out.write_str(core::str::from_utf8(s).unwrap_or_default());
    }
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.write_str("\\\"")?,
                '\\' => out.write_str("\\\\")?,
                '\n' => out.write_str("\\n")?,
                '\t' => out.write_str("\\t")?,
                '\r' => out.write_str("\\r")?,
                c if (c as u32) < 0x20 || c == '\u{7f}' => write!(out, "\\u{:04x}", c as u32)?,
                c => out.write_char(c)?,
            }
        }
        if !chunk.invalid().is_empty() {
            out.write_str("\u{fffd}")?;
        }
    }
    Ok(())
}

fn option(out: &mut dyn Write, v: Option<usize>) -> core::fmt::Result {
    match v {
        Some(v) => write!(out, "{v}"),
        None => out.write_str("null"),
    }
}

/// Formats `r` as one JSON line (with its newline) into `out`.
pub fn format(out: &mut dyn Write, r: &Record) -> core::fmt::Result {
    write!(
        out,
        "{{\"time\":{}.{:06},\"pid\":{},\"tid\":{},\"comm\":\"",
        r.time as u64,
        (r.time.fract() * 1e6) as u64 % 1_000_000,
        r.pid,
        r.tid
    )?;
    escape(out, r.comm)?;
    out.write_str("\",\"exe\":\"")?;
    escape(out, r.exe)?;
    write!(out, "\",\"event\":\"{}\",\"call\":\"", r.event.name())?;
    escape(out, r.call.as_bytes())?;
    out.write_str("\",\"requested\":")?;
    match r.requested {
        Some(set) => {
            let mut list = Buf::<1024>::new();
            if cpulist::write_ranges(&mut list, set).is_err() {
                list = Buf::new();
                list.push(b"(too long)");
            }
            out.write_char('"')?;
            escape(out, list.as_bytes())?;
            out.write_char('"')?;
        }
        None => out.write_str("null")?,
    }
    out.write_str(",\"cpu\":")?;
    option(out, r.cpu)?;
    out.write_str(",\"slot\":")?;
    option(out, r.slot)?;
    writeln!(
        out,
        ",\"role\":\"{}\",\"shared\":{},\"placed_by\":\"shim\"}}",
        r.role.name(),
        r.shared
    )
}

/// Writes `r` to `fd` with one `write(2)`.
pub fn emit(fd: i32, r: &Record) {
    let mut line = Buf::<LINE_MAX>::new();
    if format(&mut line, r).is_err() {
        // Only an enormous exe path gets here: drop it rather than write broken JSON.
        line = Buf::new();
        let short = Record {
            exe: b"(too long)",
            comm: r.comm,
            call: r.call,
            ..*r
        };
        if format(&mut line, &short).is_err() {
            return;
        }
    }
    sys::write(fd, line.as_bytes());
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// Writes `goset: <message>` on stderr, once per process.
pub fn warn_once(message: core::fmt::Arguments) {
    if WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    let mut line = Buf::<1024>::new();
    let _ = line.write_str("goset: ");
    let _ = line.write_fmt(message);
    if !line.fits() {
        line.push(b"...");
    }
    line.push(b"\n");
    sys::write(2, line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(s: &[u8]) -> String {
        let mut out = String::new();
        escape(&mut out, s).unwrap();
        out
    }

    #[test]
    fn escapes_json_strings() {
        assert_eq!(escaped(b"a\"b\\c"), "a\\\"b\\\\c");
        assert_eq!(escaped(b"tab\there\n\x01"), "tab\\there\\n\\u0001");
        assert_eq!(escaped(b"caf\xc3\xa9"), "café");
        assert_eq!(escaped(b"bad\xff!"), "bad\u{fffd}!");
    }

    #[test]
    fn formats_one_line_of_json() {
        let req = goset_plan::cpulist::parse_set(b"0-3").unwrap();
        let r = Record {
            time: 1.5,
            pid: 10,
            tid: 11,
            comm: b"my \"app\"",
            exe: b"/bin/a.out",
            event: Event::Set,
            call: "sched_setaffinity",
            requested: Some(&req),
            cpu: Some(2),
            slot: None,
            role: Role::Worker,
            shared: false,
        };
        let mut out = String::new();
        format(&mut out, &r).unwrap();
        assert_eq!(
            out,
            "{\"time\":1.500000,\"pid\":10,\"tid\":11,\"comm\":\"my \\\"app\\\"\",\
             \"exe\":\"/bin/a.out\",\"event\":\"set\",\"call\":\"sched_setaffinity\",\
             \"requested\":\"0-3\",\"cpu\":2,\"slot\":null,\"role\":\"worker\",\
             \"shared\":false,\"placed_by\":\"shim\"}\n"
        );
        assert_eq!(out.matches('\n').count(), 1);
    }
}
