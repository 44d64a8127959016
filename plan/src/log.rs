//! The placement log's vocabulary and the shim's record layout: one JSON object a line, one
//! line a decision.
//!
//! Owns: the names of the `event`, `role` and `placed_by` fields ([`Event`], [`Role`],
//! [`PlacedBy`]), so that the shim, which writes them, and the launcher, which reads them and
//! writes its own housekeeper's records, spell them one way; and the shim's writer
//! ([`format()`]) and its reader ([`scan`]), which the launcher's housekeeper follows the log
//! with, so that the layout changes in one place. The schema is documented in
//! docs/placement-log.md.
//!
//! Must not: allocate, lock or make system calls: [`format()`] runs on the shim's hook paths.

pub mod scan;

use crate::buf::Buf;
use crate::cpulist;
use crate::CpuSet;
use core::fmt::Write;

/// What happened, as the log's `event` field spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The shim placed a process's main thread (at start, after fork or exec).
    Init,
    /// The shim placed a new thread at creation.
    Create,
    /// The shim answered an affinity request.
    Set,
    /// A thread ended and released its slot.
    Exit,
    /// The housekeeper placed a thread the shim did not.
    Place,
    /// The housekeeper moved a busy thread off a crowded slot to a slot with no busy thread
    /// (`reason` says why, `slot` and `cpu` where to).
    Move,
    /// Someone else (the program, another tool, the kernel) changed the mask of a thread the
    /// housekeeper placed; `cpu` is the one CPU it is then allowed, if one, and it holds no
    /// slot. Also the record's [`Role`].
    Moved,
}

impl Event {
    /// Every event, for tests that must cover them all.
    pub const ALL: [Event; 7] = [
        Event::Init,
        Event::Create,
        Event::Set,
        Event::Exit,
        Event::Place,
        Event::Move,
        Event::Moved,
    ];

    /// The log's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Event::Init => "init",
            Event::Create => "create",
            Event::Set => "set",
            Event::Exit => "exit",
            Event::Place => "place",
            Event::Move => "move",
            Event::Moved => "moved",
        }
    }

    /// The event the log spells `s`; `None` for a name no writer of goset uses.
    pub fn parse(s: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// A thread's role, as the log's `role` field spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// Not yet placed (a thread the shim did not see being created).
    Unknown = 0,
    /// A process's main thread.
    Main = 1,
    /// Any other compute thread.
    Worker = 2,
    /// A runtime helper thread (MPI progress, libevent ...) or one the plan's `skip` mask names.
    Helper = 3,
    /// A thread of a launcher process (`mpirun`, a shell ...).
    Launcher = 4,
    /// A thread whose mask someone else changed after the housekeeper placed it (the role of
    /// an [`Event::Moved`] record): it has no role of goset's any more.
    Moved = 5,
}

impl Role {
    /// Every role, for tests that must cover them all.
    pub const ALL: [Role; 6] = [
        Role::Unknown,
        Role::Main,
        Role::Worker,
        Role::Helper,
        Role::Launcher,
        Role::Moved,
    ];

    /// The log's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Main => "main",
            Role::Worker => "worker",
            Role::Helper => "helper",
            Role::Launcher => "launcher",
            Role::Moved => "moved",
        }
    }

    /// The role the log spells `s`; `None` for a name no writer of goset uses.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The role stored as a byte (the shim packs a thread's placement into one word).
    pub fn from_u8(v: u8) -> Role {
        match v {
            1 => Role::Main,
            2 => Role::Worker,
            3 => Role::Helper,
            4 => Role::Launcher,
            5 => Role::Moved,
            _ => Role::Unknown,
        }
    }

    /// Helpers and launcher threads have no CPU of their own: their requests are clamped.
    pub fn is_clamped(self) -> bool {
        matches!(self, Role::Helper | Role::Launcher)
    }
}

/// Who placed a thread, as the log's `placed_by` field (and the report) spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacedBy {
    /// libgoset.so; also what a record without the field means.
    Shim,
    /// goset-run's housekeeper.
    Housekeeper,
    /// Nobody: a thread only `/proc` saw (the report's word; never in the log).
    Nobody,
}

impl PlacedBy {
    /// Every value, for tests that must cover them all.
    pub const ALL: [PlacedBy; 3] = [PlacedBy::Shim, PlacedBy::Housekeeper, PlacedBy::Nobody];

    /// The log's (and the report's) spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            PlacedBy::Shim => "shim",
            PlacedBy::Housekeeper => "housekeeper",
            PlacedBy::Nobody => "none",
        }
    }

    /// The value spelled `s`; `None` for a name no writer of goset uses.
    pub fn parse(s: &str) -> Option<PlacedBy> {
        PlacedBy::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// One of the shim's placement decisions (the process's executable, fixed for its life, is
/// spliced in by the shim's log, see [`format()`]).
pub struct Record<'a> {
    /// Unix time in seconds.
    pub time: f64,
    /// Process id.
    pub pid: i32,
    /// The thread the decision is about.
    pub tid: i32,
    /// The calling thread's name.
    pub comm: &'a [u8],
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
    /// It runs on the whole reservation (born while every slot had a running thread).
    pub roams: bool,
}

/// A process's local rank as the shim read it (`--near gpu:local-rank`), logged once, on the
/// process's `init` record: `"local_rank":R,"rank_var":"LOCAL_RANK","gpu":G` after
/// `placed_by` (`gpu` `null` where its visible-devices variable names no index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalRank {
    /// The local rank.
    pub rank: usize,
    /// The variable it came from, one of [`crate::ranks::LOCAL_RANK_VARS`].
    pub var: &'static str,
    /// Its GPU's number (`gpuN`).
    pub gpu: Option<usize>,
}

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

/// Formats `r` as one JSON line (with its newline) into `out`, leaving out the executable
/// path's text; returns where in `out` that text goes. A requested mask whose cpulist does not
/// fit in `out` is written as `"(too long)"`. `rank`: the process's local rank, for its
/// `init` record.
pub fn format<const N: usize>(
    out: &mut Buf<N>,
    r: &Record,
    rank: Option<&LocalRank>,
) -> Result<usize, core::fmt::Error> {
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
    let exe_at = out.len();
    write!(out, "\",\"event\":\"{}\",\"call\":\"", r.event.as_str())?;
    escape(out, r.call.as_bytes())?;
    out.write_str("\",\"requested\":")?;
    match r.requested {
        Some(set) => {
            // A cpulist is plain ASCII: written straight into the line, taken back if too long.
            let at = out.len();
            let _ = out.write_char('"');
            let _ = cpulist::write_ranges(out, set);
            let _ = out.write_char('"');
            if !out.fits() {
                out.truncate(at);
                out.write_str("\"(too long)\"")?;
            }
        }
        None => out.write_str("null")?,
    }
    out.write_str(",\"cpu\":")?;
    option(out, r.cpu)?;
    out.write_str(",\"slot\":")?;
    option(out, r.slot)?;
    write!(
        out,
        ",\"role\":\"{}\",\"shared\":{},\"roams\":{},\"placed_by\":\"{}\"",
        r.role.as_str(),
        r.shared,
        r.roams,
        PlacedBy::Shim.as_str()
    )?;
    if let Some(l) = rank {
        write!(
            out,
            ",\"local_rank\":{},\"rank_var\":\"{}\",\"gpu\":",
            l.rank, l.var
        )?;
        option(out, l.gpu)?;
    }
    out.write_str("}\n")?;
    Ok(exe_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back() {
        for e in Event::ALL {
            assert_eq!(Event::parse(e.as_str()), Some(e));
        }
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
            assert_eq!(Role::from_u8(r as u8), r);
        }
        for p in PlacedBy::ALL {
            assert_eq!(PlacedBy::parse(p.as_str()), Some(p));
        }
        assert_eq!(Event::parse("exited"), None);
    }
}
