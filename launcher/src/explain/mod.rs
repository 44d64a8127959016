//! Why a CPU is noisy, by name: per CPU, its top interrupt lines (with their handlers and
//! driver), softirq kinds and the processes and kernel threads that ran there between two
//! readings, and one line of advice where a remedy exists.
//!
//! Owns: [`explain`] (two [`Reading`]s to per-CPU [`CpuExplanation`]s, pure), [`sample`] (read,
//! wait, read, explain), the advice rule and [`render`] of one CPU's lines. The readers are in `read.rs`. Must not: rank, select or
//! print. `goset probe` shows it under its table; `goset noise` may call the same two
//! functions.
//!
//! A thread is counted on the CPU it last ran on (field 39 of its `stat` at the second
//! reading): exact for pinned threads, which are the ones that keep one CPU noisy.

mod read;

pub use read::Reading;

use crate::fsroot::FsRoot;
use crate::noise::{IrqKind, USER_HZ};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// How many sources of each kind an explanation keeps.
pub const TOP: usize = 3;
/// A thread taking at least this share of a CPU, in percent, is worth advice.
pub const TASK_ADVICE_PCT: f64 = 1.0;
/// A steerable IRQ at least this many times a second is worth advice.
pub const IRQ_ADVICE_PER_S: f64 = 10.0;
/// Local timer interrupts at least this many times a second: the tick runs.
pub const TICK_ADVICE_PER_S: f64 = 100.0;

/// An interrupt line's share of one CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IrqSource {
    /// Its label in `/proc/interrupts` (`36`, `LOC`).
    pub irq: String,
    /// Interrupts a second on this CPU.
    pub per_s: f64,
    /// `--steer` (IRQ affinity) can move it.
    pub steerable: bool,
    /// Its handlers (numbered lines), or the row's description (`Local timer interrupts`).
    pub name: String,
    /// Its device's driver, where sysfs says.
    pub driver: Option<String>,
}

/// A softirq kind's share of one CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoftirqSource {
    /// `TIMER`, `NET_RX`, `RCU`, ...
    pub kind: String,
    /// Softirqs a second on this CPU.
    pub per_s: f64,
}

/// A thread's share of one CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSource {
    /// Its process.
    pub pid: u32,
    /// Itself.
    pub tid: u32,
    /// Its name.
    pub comm: String,
    /// A kernel thread.
    pub kernel: bool,
    /// The percent of the window it ran (in 10 ms ticks).
    pub cpu_pct: f64,
}

/// One CPU's noise by name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuExplanation {
    /// The CPU.
    pub cpu: usize,
    /// Its busiest interrupt lines, most first (at most [`TOP`]).
    pub irqs: Vec<IrqSource>,
    /// Its most frequent softirq kinds (at most [`TOP`]).
    pub softirqs: Vec<SoftirqSource>,
    /// The threads that ran there most (at most [`TOP`]).
    pub tasks: Vec<TaskSource>,
    /// What would take the top source away, where something would.
    pub advice: Option<String>,
}

/// Each CPU's sources between `before` and `after`, `window` apart.
pub fn explain(
    before: &Reading,
    after: &Reading,
    window: Duration,
) -> BTreeMap<usize, CpuExplanation> {
    let secs = window.as_secs_f64().max(1e-3);
    let mut out: BTreeMap<usize, CpuExplanation> = BTreeMap::new();
    irqs(before, after, secs, &mut out);
    softirqs(before, after, secs, &mut out);
    tasks(before, after, secs, &mut out);
    for e in out.values_mut() {
        e.irqs
            .sort_by(|x, y| y.per_s.total_cmp(&x.per_s).then(x.irq.cmp(&y.irq)));
        e.irqs.truncate(TOP);
        e.softirqs
            .sort_by(|x, y| y.per_s.total_cmp(&x.per_s).then(x.kind.cmp(&y.kind)));
        e.softirqs.truncate(TOP);
        e.tasks
            .sort_by(|x, y| y.cpu_pct.total_cmp(&x.cpu_pct).then(x.tid.cmp(&y.tid)));
        e.tasks.truncate(TOP);
        e.advice = advice(e);
    }
    out
}

/// Reads under `root`, waits `window`, reads again and explains the difference, leaving out
/// this process's own threads: one call for a command that has no probe of its own to wait on
/// (`goset noise`).
pub fn sample(root: &FsRoot, window: Duration) -> BTreeMap<usize, CpuExplanation> {
    let me = Some(std::process::id());
    let before = Reading::read(root, me);
    let started = std::time::Instant::now();
    crate::signals::sleep(window);
    let after = Reading::read(root, me);
    explain(&before, &after, started.elapsed())
}

/// CPU `cpu`'s entry of `out`, empty at first.
fn entry(out: &mut BTreeMap<usize, CpuExplanation>, cpu: usize) -> &mut CpuExplanation {
    out.entry(cpu).or_insert_with(|| CpuExplanation {
        cpu,
        irqs: Vec::new(),
        softirqs: Vec::new(),
        tasks: Vec::new(),
        advice: None,
    })
}

/// Every interrupt line that fired on a CPU between the readings.
fn irqs(before: &Reading, after: &Reading, secs: f64, out: &mut BTreeMap<usize, CpuExplanation>) {
    let (Some(b), Some(a)) = (&before.interrupts, &after.interrupts) else {
        return;
    };
    for row in &a.rows {
        let Some(was) = b.row(&row.name) else {
            continue;
        };
        for (col, &cpu) in a.cpus.iter().enumerate() {
            let now = row.counts.get(col).copied().unwrap_or(0);
            let then = (b.column(cpu)).and_then(|c| was.counts.get(c).copied());
            let d = now.saturating_sub(then.unwrap_or(now));
            if d == 0 {
                continue;
            }
            let names = after.irq_names.get(&row.name);
            entry(out, cpu).irqs.push(IrqSource {
                irq: row.name.clone(),
                per_s: d as f64 / secs,
                steerable: row.kind == IrqKind::Device,
                name: names.map_or_else(|| row.desc.clone(), |n| n.actions.clone()),
                driver: names.and_then(|n| n.driver.clone()),
            });
        }
    }
}

/// Every softirq kind raised on a CPU between the readings.
fn softirqs(
    before: &Reading,
    after: &Reading,
    secs: f64,
    out: &mut BTreeMap<usize, CpuExplanation>,
) {
    let (Some(b), Some(a)) = (&before.softirqs, &after.softirqs) else {
        return;
    };
    for row in &a.rows {
        for &cpu in &a.cpus {
            let now = a.count(&row.name, cpu).unwrap_or(0);
            let d = now.saturating_sub(b.count(&row.name, cpu).unwrap_or(now));
            if d > 0 {
                entry(out, cpu).softirqs.push(SoftirqSource {
                    kind: row.name.clone(),
                    per_s: d as f64 / secs,
                });
            }
        }
    }
}

/// Every thread that ran between the readings, on the CPU it last ran on.
fn tasks(before: &Reading, after: &Reading, secs: f64, out: &mut BTreeMap<usize, CpuExplanation>) {
    let was: BTreeMap<(u32, u32), u64> = (before.tasks.iter())
        .map(|t| ((t.pid, t.tid), t.ticks))
        .collect();
    let tick_s = 1.0 / USER_HZ as f64;
    for t in &after.tasks {
        // A thread born in the window ran all its time in it.
        let d = t
            .ticks
            .saturating_sub(was.get(&(t.pid, t.tid)).copied().unwrap_or(0));
        if d > 0 {
            entry(out, t.cpu).tasks.push(TaskSource {
                pid: t.pid,
                tid: t.tid,
                comm: t.comm.clone(),
                kernel: t.kernel,
                cpu_pct: (100.0 * d as f64 * tick_s / secs).min(100.0),
            });
        }
    }
}

/// One line of advice for the top source that has a remedy: a thread that takes a share of
/// the CPU, else a steerable IRQ, else the timer tick.
fn advice(e: &CpuExplanation) -> Option<String> {
    let cpu = e.cpu;
    if let Some(t) = e.tasks.first().filter(|t| t.cpu_pct >= TASK_ADVICE_PCT) {
        return Some(if t.kernel {
            format!(
                "kernel thread {} runs here: isolcpus=domain,managed_irq,{cpu} and nohz_full={cpu} keep most kernel work off CPU {cpu}",
                t.comm
            )
        } else {
            format!(
                "{} (pid {}) runs here: move it with taskset -a -p -c <other CPUs> {}, or keep tasks off CPU {cpu} with isolcpus={cpu}",
                t.comm, t.pid, t.pid
            )
        });
    }
    if let Some(i) = (e.irqs.iter()).find(|i| i.steerable && i.per_s >= IRQ_ADVICE_PER_S) {
        return Some(format!(
            "IRQ {} ({}) is steerable: goset-run --steer moves it off the task's CPUs for the run; irqaffinity=<other CPUs> at boot",
            i.irq, i.name
        ));
    }
    (e.irqs.iter())
        .find(|i| i.irq == "LOC" && i.per_s >= TICK_ADVICE_PER_S)
        .map(|_| format!("the timer tick runs: nohz_full={cpu} stops it while one task runs there"))
}

/// One CPU's explanation as indented lines (none when nothing was seen).
pub fn render(e: &CpuExplanation) -> String {
    let mut out = String::new();
    let mut line = |what: &str, items: Vec<String>| {
        if !items.is_empty() {
            out.push_str(&format!("    {what}: {}\n", items.join(", ")));
        }
    };
    line(
        "tasks",
        (e.tasks.iter())
            .map(|t| {
                let who = if t.kernel {
                    "kernel".to_string()
                } else {
                    format!("pid {}", t.pid)
                };
                format!("{} ({who}) {:.1}%", t.comm, t.cpu_pct)
            })
            .collect(),
    );
    line(
        "irqs",
        (e.irqs.iter())
            .map(|i| {
                let driver = i
                    .driver
                    .as_ref()
                    .map_or(String::new(), |d| format!(" [{d}]"));
                let steer = if i.steerable { " steerable" } else { "" };
                format!("{} {}{driver} {:.0}/s{steer}", i.irq, i.name, i.per_s)
            })
            .collect(),
    );
    line(
        "softirqs",
        (e.softirqs.iter())
            .map(|s| format!("{} {:.0}/s", s.kind, s.per_s))
            .collect(),
    );
    if let Some(a) = &e.advice {
        out.push_str(&format!("    advice: {a}\n"));
    }
    out
}

#[cfg(test)]
mod tests;
