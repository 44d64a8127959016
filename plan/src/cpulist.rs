//! The kernel's cpulist syntax, as in `/sys/devices/system/cpu/online` and `taskset -c`.
//!
//! Accepted: comma-separated items, each `N`, `A-B`, `A-B:S` (every S-th CPU from A to B, as
//! util-linux reads it) or `A-B:U/G` (the kernel's form: the first U CPUs of every group of G).
//! Blank input is the empty list (sysfs writes an empty `isolated` as a bare newline).
//! Parsing never allocates: items are handed to a callback in the order written, so an ordered
//! list such as a plan's `3,1,2` keeps its order.

use crate::cpuset::{CpuSet, MAX_CPUS};
use core::fmt;

/// Why a cpulist did not parse. `Display` names what is accepted; callers add the bad value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuListError {
    /// A character or item that is not part of the syntax.
    Syntax,
    /// A range whose end is below its start, or a zero stride or group.
    BadRange,
    /// A CPU number at or above [`MAX_CPUS`].
    TooLarge,
}

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuListError::Syntax => f.write_str(
                "expected a cpu list such as 0,2-4 or 0-10:2 (numbers, ranges, strides)",
            ),
            CpuListError::BadRange => {
                f.write_str("a range must run upwards (A-B with A <= B) with a stride above 0")
            }
            CpuListError::TooLarge => write!(f, "cpu numbers must be below {MAX_CPUS}"),
        }
    }
}

fn number(s: &[u8]) -> Result<usize, CpuListError> {
    if s.is_empty() || s.len() > 7 || !s.iter().all(u8::is_ascii_digit) {
        return Err(CpuListError::Syntax);
    }
    let n = s.iter().fold(0usize, |n, d| n * 10 + (d - b'0') as usize);
    if n >= MAX_CPUS {
        return Err(CpuListError::TooLarge);
    }
    Ok(n)
}

fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let at = s.iter().position(|&c| c == sep)?;
    Some((&s[..at], &s[at + 1..]))
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

fn item(s: &[u8], each: &mut dyn FnMut(usize)) -> Result<(), CpuListError> {
    let (range, step) = match split_once(s, b':') {
        Some((r, st)) => (r, Some(st)),
        None => (s, None),
    };
    let (lo, hi) = match split_once(range, b'-') {
        Some((a, b)) => (number(a)?, number(b)?),
        None if step.is_none() => {
            let n = number(range)?;
            (n, n)
        }
        None => return Err(CpuListError::Syntax),
    };
    if hi < lo {
        return Err(CpuListError::BadRange);
    }
    let (used, group) = match step {
        None => (1, 1),
        Some(st) => match split_once(st, b'/') {
            Some((u, g)) => (number(u)?, number(g)?),
            None => (1, number(st)?),
        },
    };
    if used == 0 || group == 0 || used > group {
        return Err(CpuListError::BadRange);
    }
    let mut base = lo;
    while base <= hi {
        for cpu in base..(base + used).min(hi + 1) {
            each(cpu);
        }
        base += group;
    }
    Ok(())
}

/// Parses `text`, calling `each` for every CPU in the order written (duplicates included).
pub fn parse(text: &[u8], each: &mut dyn FnMut(usize)) -> Result<(), CpuListError> {
    let text = trim(text);
    if text.is_empty() {
        return Ok(());
    }
    for part in text.split(|&c| c == b',') {
        item(trim(part), each)?;
    }
    Ok(())
}

/// Parses `text` into a set.
pub fn parse_set(text: &[u8]) -> Result<CpuSet, CpuListError> {
    let mut set = CpuSet::new();
    parse(text, &mut |cpu| {
        set.insert(cpu);
    })?;
    Ok(set)
}

/// Writes the CPUs of `set` in compressed ascending form (`0-3,8`); empty writes nothing.
pub fn write_ranges(out: &mut dyn fmt::Write, set: &CpuSet) -> fmt::Result {
    let mut first = true;
    let mut run: Option<(usize, usize)> = None;
    let mut flush = |out: &mut dyn fmt::Write, (a, b): (usize, usize)| -> fmt::Result {
        if !first {
            out.write_char(',')?;
        }
        first = false;
        if a == b {
            write!(out, "{a}")
        } else {
            write!(out, "{a}-{b}")
        }
    };
    for cpu in set.iter() {
        run = match run {
            Some((a, b)) if b + 1 == cpu => Some((a, cpu)),
            Some(r) => {
                flush(out, r)?;
                Some((cpu, cpu))
            }
            None => Some((cpu, cpu)),
        };
    }
    if let Some(r) = run {
        flush(out, r)?;
    }
    Ok(())
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_ranges(f, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &str) -> Result<Vec<usize>, CpuListError> {
        let mut v = Vec::new();
        parse(s.as_bytes(), &mut |c| v.push(c)).map(|_| v)
    }

    #[test]
    fn accepts_kernel_and_util_linux_forms() {
        assert_eq!(list("1,3-5").unwrap(), vec![1, 3, 4, 5]);
        assert_eq!(list("0-10:2").unwrap(), vec![0, 2, 4, 6, 8, 10]);
        assert_eq!(list("0-15:2/8").unwrap(), vec![0, 1, 8, 9]);
        assert_eq!(list(" 3,1,2\n").unwrap(), vec![3, 1, 2]);
        assert_eq!(list("\n").unwrap(), Vec::<usize>::new());
        assert_eq!(list("7").unwrap(), vec![7]);
    }

    #[test]
    fn rejects_bad_lists() {
        assert_eq!(list("a"), Err(CpuListError::Syntax));
        assert_eq!(list("1,,2"), Err(CpuListError::Syntax));
        assert_eq!(list("-1"), Err(CpuListError::Syntax));
        assert_eq!(list("5-3"), Err(CpuListError::BadRange));
        assert_eq!(list("0-4:0"), Err(CpuListError::BadRange));
        assert_eq!(list("0-4:3/2"), Err(CpuListError::BadRange));
        assert_eq!(list("4096"), Err(CpuListError::TooLarge));
        assert_eq!(list("3:2"), Err(CpuListError::Syntax));
    }

    #[test]
    fn formats_compressed_ranges() {
        let set = parse_set(b"0-3,8,10-11,1023").unwrap();
        assert_eq!(set.to_string(), "0-3,8,10-11,1023");
        assert_eq!(CpuSet::new().to_string(), "");
    }
}
