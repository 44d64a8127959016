//! What `/proc/interrupts` and `/proc/softirqs` have in common: per-CPU counter tables.
//!
//! Owns: the [`Table`] and [`TableRow`] traits, parsing a table's header and rows
//! ([`parse_table`]), column lookup and sums, and the per-CPU row growth between two tables
//! ([`row_deltas`]). Must not: know either file's row kinds or what a delta is used for; those
//! belong to `interrupts.rs` and `per_cpu.rs`.

use std::collections::{BTreeMap, HashMap};

/// A row of a per-CPU counter table ([`IrqRow`](super::IrqRow),
/// [`CounterRow`](super::CounterRow)).
pub(super) trait TableRow {
    /// The label before the colon.
    fn name(&self) -> &str;
    /// Count per column; may be shorter than the header.
    fn counts(&self) -> &[u64];
    /// The count in column `col`; columns past the end of the row count 0.
    fn at(&self, col: usize) -> u64 {
        self.counts().get(col).copied().unwrap_or(0)
    }
}

/// A parsed per-CPU counter table ([`Interrupts`](super::Interrupts),
/// [`Softirqs`](super::Softirqs)).
pub(super) trait Table {
    type Row: TableRow;
    /// The CPU number of each column.
    fn cpus(&self) -> &[usize];
    /// The rows in file order.
    fn rows(&self) -> &[Self::Row];
}

/// Parses a per-CPU counter table: a header naming CPU columns (blank lines before it are
/// skipped), then `NAME: counts... rest` rows. Lines without a colon, with an empty or spaced
/// name, or that carry no count are skipped; of the others, `row(name, counts, rest)` makes the
/// row or, returning `None`, skips it. Fails only when the header does not name CPU columns.
pub(super) fn parse_table<R>(
    text: &str,
    mut row: impl FnMut(&str, Vec<u64>, &str) -> Option<R>,
) -> Result<(Vec<usize>, Vec<R>), String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let cpus = parse_header(lines.next().unwrap_or(""))?;
    let mut rows = Vec::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let name = label.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            continue;
        }
        let (counts, rest) = split_counts(rest, cpus.len());
        if counts.is_empty() {
            continue;
        }
        rows.extend(row(name, counts, rest));
    }
    Ok((cpus, rows))
}

/// Count of the row named `name` on `cpu`; `None` when the row or the CPU's column is absent.
pub(super) fn row_count<T: Table>(table: &T, name: &str, cpu: usize) -> Option<u64> {
    let col = column_of(table.cpus(), cpu)?;
    Some(table.rows().iter().find(|r| r.name() == name)?.at(col))
}

/// Sum of `rows` in the column of `cpu` (`None`: no column), saturating.
pub(super) fn column_sum<'r, R: TableRow + 'r>(
    cpus: &[usize],
    cpu: usize,
    rows: impl IntoIterator<Item = &'r R>,
) -> Option<u64> {
    let col = column_of(cpus, cpu)?;
    Some(
        rows.into_iter()
            .map(|r| r.at(col))
            .fold(0u64, u64::saturating_add),
    )
}

/// For each CPU with a column in both tables that `wanted` keeps, and each row of `after`,
/// calls `add(entry, row, d)` with the CPU's entry of `out` (made by `Default` when absent) and
/// `d` the row's growth since `before`: a row absent before (an IRQ allocated during the window)
/// counts from 0, and one that went backwards gives 0.
pub(super) fn row_deltas<T: Table, V: Default>(
    before: &T,
    after: &T,
    wanted: impl Fn(usize) -> bool,
    out: &mut BTreeMap<usize, V>,
    mut add: impl FnMut(&mut V, &T::Row, u64),
) {
    let old: HashMap<&str, &T::Row> = before.rows().iter().map(|r| (r.name(), r)).collect();
    for (acol, &cpu) in after.cpus().iter().enumerate() {
        let Some(bcol) = column_of(before.cpus(), cpu).filter(|_| wanted(cpu)) else {
            continue;
        };
        let n = out.entry(cpu).or_default();
        for row in after.rows() {
            let was = old.get(row.name()).map_or(0, |r| r.at(bcol));
            add(n, row, row.at(acol).saturating_sub(was));
        }
    }
}

/// CPU numbers of a header line `CPU0 CPU1 ...`.
fn parse_header(line: &str) -> Result<Vec<usize>, String> {
    let cpus: Option<Vec<usize>> = line
        .split_whitespace()
        .map(|w| w.strip_prefix("CPU")?.parse().ok())
        .collect();
    match cpus {
        Some(c) if !c.is_empty() => Ok(c),
        _ => Err(format!(
            "header does not name CPU columns: {:?}",
            line.trim()
        )),
    }
}

/// The column of `cpu` in a header of CPU numbers, `None` when it has none.
pub(super) fn column_of(cpus: &[usize], cpu: usize) -> Option<usize> {
    // Headers are ascending; fall back to a scan if one is not.
    match cpus.binary_search(&cpu) {
        Ok(i) => Some(i),
        Err(_) => cpus.iter().position(|&c| c == cpu),
    }
}

/// Up to `max` leading decimal numbers of `s`, and the rest of `s`, trimmed.
fn split_counts(s: &str, max: usize) -> (Vec<u64>, &str) {
    let mut counts = Vec::with_capacity(max);
    let mut rest = s;
    while counts.len() < max {
        let t = rest.trim_start();
        let end = t.find(char::is_whitespace).unwrap_or(t.len());
        match t[..end].parse::<u64>() {
            Ok(v) => {
                counts.push(v);
                rest = &t[end..];
            }
            Err(_) => break,
        }
    }
    (counts, rest.trim())
}
