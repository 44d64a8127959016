//! `/proc/interrupts` and `/proc/softirqs`: the two per-CPU counter tables.
//!
//! Owns: the row types of both files, which interrupts are steerable ([`IrqKind`]), and the
//! parsers [`parse_interrupts`] and [`parse_softirqs`], pure functions of the file text built on
//! the shared table machinery of `table.rs`. Must not: read files, difference snapshots or
//! score noise (`snapshot.rs`, `per_cpu.rs`).

use super::table::{column_of, column_sum, parse_table, row_count, Table, TableRow};
use serde::Serialize;

/// What kind of row of `/proc/interrupts` a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqKind {
    /// A numbered device IRQ (`  24:`) whose affinity can be moved: steerable.
    Device,
    /// A numbered IRQ that is private to each CPU and cannot be moved: an Arm GIC SGI or PPI
    /// (hardware IRQ below 32, or the extended PPI range 1056..1120; the arch timer is one) or a
    /// RISC-V local interrupt (`RISC-V INTC`). Non-steerable.
    PerCpu,
    /// A named row (`LOC`, `RES`, `CAL`, `TLB`, `NMI`, arm64 `IPI0`, ...): architecture
    /// interrupts delivered to each CPU. Non-steerable.
    Named,
}

impl IrqKind {
    /// Whether moving IRQ affinity can take these interrupts off a CPU.
    pub fn steerable(self) -> bool {
        self == IrqKind::Device
    }
}

/// One row of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqRow {
    /// The label before the colon: an IRQ number (`"24"`) or a name (`"LOC"`, `"IPI0"`).
    pub name: String,
    /// Steerable or not.
    pub kind: IrqKind,
    /// Count per column of the header ([`Interrupts`]' `cpus`); may be shorter than the header
    /// (columns past its end count 0).
    pub counts: Vec<u64>,
    /// The rest of the line: chip, hardware IRQ, trigger and device names, or the description
    /// of a named row (`"Local timer interrupts"`).
    pub desc: String,
}

/// `/proc/interrupts`, parsed. Only online CPUs have a column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Interrupts {
    /// The CPU number of each column, from the header (`CPU0 CPU2 CPU3` when CPU 1 is offline).
    pub cpus: Vec<usize>,
    /// The rows in file order, except `ERR` and `MIS` (one system-wide number, not per CPU).
    pub rows: Vec<IrqRow>,
}

impl Interrupts {
    /// The column of `cpu`, `None` when it has none (offline).
    pub fn column(&self, cpu: usize) -> Option<usize> {
        column_of(&self.cpus, cpu)
    }

    /// The row named `name` (`"LOC"`, `"24"`).
    pub fn row(&self, name: &str) -> Option<&IrqRow> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// Count of row `name` on `cpu`; `None` when the row or the CPU's column is absent.
    pub fn count(&self, name: &str, cpu: usize) -> Option<u64> {
        row_count(self, name, cpu)
    }

    /// Sum over steerable rows on `cpu` (`None`: no column).
    pub fn steerable(&self, cpu: usize) -> Option<u64> {
        self.sum(cpu, |k| k.steerable())
    }

    fn sum(&self, cpu: usize, keep: impl Fn(IrqKind) -> bool) -> Option<u64> {
        column_sum(&self.cpus, cpu, self.rows.iter().filter(|r| keep(r.kind)))
    }
}

/// Parses `/proc/interrupts`. The header names the CPU columns; numbered rows are device IRQs
/// (steerable unless [`IrqKind::PerCpu`]), named rows are architecture interrupts; `ERR` and
/// `MIS` are skipped. Rows that carry no count are skipped. Fails only when the header does not
/// name CPU columns.
pub fn parse_interrupts(text: &str) -> Result<Interrupts, String> {
    let (cpus, rows) = parse_table(text, |name, counts, desc| {
        if name.eq_ignore_ascii_case("ERR") || name.eq_ignore_ascii_case("MIS") {
            return None;
        }
        let kind = if name.bytes().all(|b| b.is_ascii_digit()) {
            if per_cpu_chip(desc) {
                IrqKind::PerCpu
            } else {
                IrqKind::Device
            }
        } else {
            IrqKind::Named
        };
        Some(IrqRow {
            name: name.to_string(),
            kind,
            counts,
            desc: desc.to_string(),
        })
    })?;
    Ok(Interrupts { cpus, rows })
}

/// Whether the description of a numbered row names an interrupt private to each CPU.
fn per_cpu_chip(desc: &str) -> bool {
    if desc.starts_with("RISC-V INTC") {
        return true;
    }
    let mut words = desc.split_whitespace();
    match (words.next(), words.next()) {
        (Some(chip), Some(hwirq)) if chip.starts_with("GIC") => hwirq
            .parse::<u32>()
            .is_ok_and(|h| h < 32 || (1056..1120).contains(&h)),
        _ => false,
    }
}

/// One row of a per-CPU counter table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterRow {
    /// The label before the colon (`"TIMER"`).
    pub name: String,
    /// Count per column; may be shorter than the header.
    pub counts: Vec<u64>,
}

/// `/proc/softirqs`, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Softirqs {
    /// The CPU number of each column, from the header.
    pub cpus: Vec<usize>,
    /// `HI`, `TIMER`, `NET_TX`, `NET_RX`, `BLOCK`, `IRQ_POLL`, `TASKLET`, `SCHED`, `HRTIMER`,
    /// `RCU` (as the kernel has them), in file order.
    pub rows: Vec<CounterRow>,
}

impl Softirqs {
    /// The column of `cpu`.
    pub fn column(&self, cpu: usize) -> Option<usize> {
        column_of(&self.cpus, cpu)
    }

    /// Count of softirq `name` on `cpu`.
    pub fn count(&self, name: &str, cpu: usize) -> Option<u64> {
        row_count(self, name, cpu)
    }

    /// Sum over all softirq types on `cpu`.
    pub fn total(&self, cpu: usize) -> Option<u64> {
        column_sum(&self.cpus, cpu, &self.rows)
    }
}

/// Parses `/proc/softirqs`: a header of CPU columns, then `NAME: counts` rows. Fails only when
/// the header does not name CPU columns.
pub fn parse_softirqs(text: &str) -> Result<Softirqs, String> {
    let (cpus, rows) = parse_table(text, |name, counts, _| {
        Some(CounterRow {
            name: name.to_string(),
            counts,
        })
    })?;
    Ok(Softirqs { cpus, rows })
}

impl TableRow for IrqRow {
    fn name(&self) -> &str {
        &self.name
    }
    fn counts(&self) -> &[u64] {
        &self.counts
    }
}

impl TableRow for CounterRow {
    fn name(&self) -> &str {
        &self.name
    }
    fn counts(&self) -> &[u64] {
        &self.counts
    }
}

impl Table for Interrupts {
    type Row = IrqRow;
    fn cpus(&self) -> &[usize] {
        &self.cpus
    }
    fn rows(&self) -> &[IrqRow] {
        &self.rows
    }
}

impl Table for Softirqs {
    type Row = CounterRow;
    fn cpus(&self) -> &[usize] {
        &self.cpus
    }
    fn rows(&self) -> &[CounterRow] {
        &self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{
        ARM64_INTERRUPTS, X86_HOST_INTERRUPTS, X86_KVM_INTERRUPTS, X86_KVM_SOFTIRQS,
    };
    use super::*;

    #[test]
    fn parses_captured_x86_kvm_interrupts() {
        let i = parse_interrupts(X86_KVM_INTERRUPTS).unwrap();
        assert_eq!(i.cpus, vec![0, 1]);
        assert!(i.row("ERR").is_none() && i.row("MIS").is_none());
        let devices = i.rows.iter().filter(|r| r.kind == IrqKind::Device).count();
        assert_eq!(devices, 19);
        assert!(i.rows.iter().all(|r| r.kind != IrqKind::PerCpu));
        assert_eq!(
            i.row("36").unwrap().desc,
            "PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0"
        );
        assert_eq!(i.count("36", 1), Some(47877));
        assert_eq!(i.count("CAL", 0), Some(41488));
        assert_eq!(i.row("LOC").unwrap().desc, "Local timer interrupts");
        assert_eq!(i.steerable(0), Some(1 + 44 + 18 + 1499 + 1570 + 1));
        assert_eq!(i.steerable(1), Some(1 + 15 + 67 + 1 + 47877 + 2224 + 2791));
        assert_eq!(
            i.sum(0, |k| !k.steerable()),
            Some(14523 + 1 + 7404 + 41488 + 4848 + 93)
        );
        assert_eq!(i.steerable(2), None);
    }

    #[test]
    fn parses_captured_x86_kvm_softirqs() {
        let s = parse_softirqs(X86_KVM_SOFTIRQS).unwrap();
        assert_eq!(s.cpus, vec![0, 1]);
        assert_eq!(s.rows.len(), 10);
        assert_eq!(s.count("BLOCK", 1), Some(47876));
        assert_eq!(s.total(0), Some(4466 + 4 + 1461 + 25 + 10126 + 8848));
    }

    #[test]
    fn parses_arm64_interrupts() {
        let i = parse_interrupts(ARM64_INTERRUPTS).unwrap();
        assert_eq!(i.cpus, vec![0, 1, 3]);
        assert_eq!(i.column(3), Some(2));
        assert_eq!(i.column(2), None);
        let kind = |n: &str| i.row(n).unwrap().kind;
        // PPIs (hwirq < 32) and extended PPIs are per CPU; SPIs and ITS MSIs can be steered.
        assert_eq!(kind("10"), IrqKind::PerCpu);
        assert_eq!(kind("12"), IrqKind::PerCpu);
        assert_eq!(kind("13"), IrqKind::PerCpu);
        assert_eq!(kind("50"), IrqKind::PerCpu);
        assert_eq!(kind("14"), IrqKind::Device);
        assert_eq!(kind("15"), IrqKind::Device);
        assert_eq!(kind("42"), IrqKind::Device);
        assert_eq!(kind("43"), IrqKind::Device);
        assert_eq!(kind("IPI0"), IrqKind::Named);
        assert!(i.row("Err").is_none());
        assert_eq!(i.count("IPI1", 3), Some(703));
        assert_eq!(i.steerable(3), Some(1200));
        assert_eq!(i.steerable(1), Some(70000));
        assert_eq!(
            i.sum(1, |k| !k.steerable()),
            Some(734567 + 5 + 3002 + 602 + 12 + 22)
        );
        assert_eq!(i.row("10").unwrap().desc, "GICv3  27 Level     arch_timer");
    }

    #[test]
    fn parses_x86_host_with_offline_cpus_and_short_rows() {
        let i = parse_interrupts(X86_HOST_INTERRUPTS).unwrap();
        assert_eq!(i.cpus, vec![0, 1, 2, 3, 6, 7]);
        assert!(i.row("ERR").is_none() && i.row("MIS").is_none());
        assert_eq!(i.count("124", 6), Some(88000));
        assert_eq!(i.count("124", 4), None);
        // HYP printed two columns only: the others count 0.
        assert_eq!(i.row("HYP").unwrap().counts, vec![7, 8]);
        assert_eq!(i.count("HYP", 7), Some(0));
        assert_eq!(i.count("HYP", 1), Some(8));
        assert_eq!(i.steerable(0), Some(44 + 12000));
        assert_eq!(i.steerable(6), Some(88000));
        assert_eq!(
            i.sum(7, |k| !k.steerable()),
            Some(3 + 1700000 + 3 + 140 + 10000 + 600 + 60 + 40)
        );
        let named: Vec<&str> = i
            .rows
            .iter()
            .filter(|r| r.kind == IrqKind::Named)
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(named.len(), 18);
        assert!(named.contains(&"MCP") && named.contains(&"PIW"));
    }

    #[test]
    fn rejects_text_without_cpu_header() {
        assert!(parse_interrupts("").is_err());
        assert!(parse_interrupts("garbage here\n 1: 2 3\n").is_err());
        assert!(parse_softirqs("HI: 0 0\n").is_err());
    }
}
