//! What `/proc` says of the task's processes, for claims: whether one is alive, whether its
//! main thread runs now, and whose descendant this process is. Bounded reads of a main
//! thread's `stat`, never of a process's (see [`stat_fields`]).

use crate::buf::Buf;
use crate::sys;

/// Whether process `pid` is alive (not gone, not a zombie; see [`stat_fields`]).
pub fn alive(pid: i32) -> bool {
    !matches!(state(pid), None | Some(b'Z') | Some(b'X'))
}

/// Process `pid`'s main thread's `stat` read into `stat`, as its state letter and the rest of
/// the line after it (`Ok(None)`: read, but no state letter found); `Err`: gone, or unreadable.
///
/// Reads the main thread's stat, not the process's: its state is the same field, but
/// `/proc/<pid>/stat` sums every thread's times with the process's signal lock held, which
/// in a process of thousands of threads costs milliseconds and stalls its every thread
/// creation and exit meanwhile.
fn stat_fields(pid: i32, stat: &mut [u8; 512]) -> Result<Option<(u8, &[u8])>, ()> {
    let mut path = Buf::<40>::new();
    let _ = core::fmt::Write::write_fmt(&mut path, format_args!("/proc/{pid}/task/{pid}/stat"));
    let Some(c_path) = path.c_str() else {
        return Ok(None);
    };
    // "pid (comm) S ppid ...": the state follows the last ')', well inside the first 512 bytes.
    let n = sys::read_prefix(c_path, stat).map_err(|_| ())?;
    let line = &stat[..n];
    let Some(at) = line.iter().rposition(|&c| c == b')') else {
        return Ok(None);
    };
    Ok(line
        .get(at + 2)
        .map(|&state| (state, line.get(at + 3..).unwrap_or_default())))
}

/// The state letter of process `pid`'s main thread (`R`, `S`, `Z` ...); `None` when it is gone
/// (or its stat cannot be read: a main thread whose stat reads but holds no state letter is
/// taken as alive, `Some(0)`).
pub(super) fn state(pid: i32) -> Option<u8> {
    let mut stat = [0u8; 512];
    let fields = stat_fields(pid, &mut stat).ok()?;
    Some(fields.map_or(0, |(state, _)| state))
}

/// Ancestors a process looks through for the owner of the block it finds itself in.
const ANCESTORS: usize = 8;

/// Whether process `ancestor` is this process's parent, or its parent's, at most
/// [`ANCESTORS`] up: a forked child (and the image it execs) keeps its forebear's block, a
/// process that merely sits on a slot of another's block (the housekeeper placed it there
/// before that block was taken) does not. One `/proc` read a level above the parent.
pub fn descends_from(ancestor: i32) -> bool {
    let mut pid = sys::getppid();
    let mut stat = [0u8; 512];
    for _ in 0..ANCESTORS {
        if pid == ancestor {
            return true;
        }
        if pid <= 1 {
            return false;
        }
        let Ok(Some((_, rest))) = stat_fields(pid, &mut stat) else {
            return false;
        };
        let digits = rest.split(|&c| c == b' ').nth(1).unwrap_or_default();
        let Some(parent) = core::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
        else {
            return false;
        };
        pid = parent;
    }
    false
}
