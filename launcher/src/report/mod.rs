//! The run report: text tables for stderr and the same content as JSON.
//!
//! Renderers are pure: they turn values into strings. [`crate::launch`] decides where they go.

pub mod isolation;
pub mod processes;
pub mod ranks;
pub mod record;
pub mod sharing;
pub mod table;
pub mod telemetry;

use crate::noise::Noise;
use crate::select::Selection;
use crate::topology::Topology;
use serde::Serialize;
use table::Table;

/// One row of the Selection table (and of its JSON).
#[derive(Debug, Clone, Serialize)]
pub struct SelectionRow {
    /// CPU number.
    pub cpu: usize,
    /// `*` task, `&` housekeeper, `*&` both (shared), `+` spare (`+&` with the housekeeper),
    /// `!` fenced sibling, blank otherwise.
    pub sel: String,
    /// Slot index for task CPUs.
    pub slot: Option<usize>,
    /// Steerable interrupts in the sampling window (`None`: not measured).
    pub irq_steerable: Option<u64>,
    /// Non-steerable interrupts in the window.
    pub irq_nonsteerable: Option<u64>,
    /// Softirqs in the window.
    pub softirq: Option<u64>,
    /// Percent of the window busy with other work.
    pub busy_pct: Option<f64>,
    /// Percent of the window stolen by the hypervisor.
    pub steal_pct: Option<f64>,
    /// Core cost: this CPU's noise score plus its SMT siblings'.
    pub core_cost: f64,
    /// Its CPU kind (0 the least performant), where the machine has kinds.
    pub kind: Option<usize>,
    /// SMT siblings other than itself.
    pub siblings: Vec<usize>,
    /// NUMA node.
    pub node: Option<usize>,
    /// In `isolated`.
    pub isolated: bool,
    /// In `nohz_full`.
    pub nohz_full: bool,
    /// In `rcu_nocbs`.
    pub rcu_nocbs: bool,
}

/// The selection with its per-CPU rows, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SelectionReport {
    /// The decision.
    #[serde(flatten)]
    pub selection: Selection,
    /// Sampling window in milliseconds (0: ranked by topology alone).
    pub sample_ms: u64,
    /// One row per candidate CPU, in ranking order.
    pub cpus: Vec<SelectionRow>,
}

fn read_failed(noise: &Noise, file: &str) -> bool {
    noise.errors.iter().any(|e| e.file == file)
}

/// Builds the selection rows: candidates in ranking order.
pub fn selection_report(topo: &Topology, noise: &Noise, sel: &Selection) -> SelectionReport {
    let measured = noise.window_ms > 0;
    let irqs = measured && !read_failed(noise, "/proc/interrupts");
    let softirqs = measured && !read_failed(noise, "/proc/softirqs");
    let stat = measured && !read_failed(noise, "/proc/stat");
    let cpus = sel
        .ranking
        .iter()
        .map(|&cpu| {
            let info = topo.cpu(cpu);
            let n = noise.cpus.get(&cpu);
            let task = sel.task_cpus.iter().position(|&c| c == cpu);
            let hk = sel.housekeeper_cpu == cpu;
            let sel_mark = match (task.is_some(), hk) {
                (true, true) => "*&",
                (true, false) => "*",
                _ if sel.spares.contains(&cpu) && hk => "+&",
                _ if sel.spares.contains(&cpu) => "+",
                (false, true) => "&",
                _ if sel.fenced.contains(&cpu) => "!",
                _ => "",
            };
            SelectionRow {
                cpu,
                sel: sel_mark.to_string(),
                slot: task,
                irq_steerable: n.filter(|_| irqs).map(|n| n.irq_steerable),
                irq_nonsteerable: n.filter(|_| irqs).map(|n| n.irq_nonsteerable),
                softirq: n.filter(|_| softirqs).map(|n| n.softirq),
                busy_pct: n.filter(|_| stat).map(|n| n.busy_pct),
                steal_pct: n.filter(|_| stat).map(|n| n.steal_pct),
                core_cost: sel.core_cost.get(&cpu).copied().unwrap_or(0.0),
                kind: info.and_then(|i| i.kind),
                siblings: info
                    .map(|i| i.siblings.iter().copied().filter(|&s| s != cpu).collect())
                    .unwrap_or_default(),
                node: info.and_then(|i| i.node),
                isolated: info.is_some_and(|i| i.isolated),
                nohz_full: info.is_some_and(|i| i.nohz_full),
                rcu_nocbs: info.is_some_and(|i| i.rcu_nocbs),
            }
        })
        .collect();
    SelectionReport {
        selection: sel.clone(),
        sample_ms: noise.window_ms,
        cpus,
    }
}

/// `n/a` for what was not measured.
fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| v.to_string())
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.1}"))
}

/// The `sibl` cell of both tables: the SMT siblings of `cpu` other than itself, `-` when it
/// has none. One rule for both tables, so that they agree.
fn other_siblings(cpu: usize, siblings: &[usize]) -> String {
    let others: Vec<String> = (siblings.iter())
        .filter(|&&s| s != cpu)
        .map(|s| s.to_string())
        .collect();
    if others.is_empty() {
        "-".to_string()
    } else {
        others.join(",")
    }
}

fn flag(b: bool) -> String {
    if b { "y" } else { "" }.to_string()
}

/// The Selection table.
pub fn render_selection(rep: &SelectionReport) -> String {
    let mut out = selection_table(rep).render();
    selection_notes(rep, &mut out);
    out.push_str(&ranks::render(&rep.selection));
    out
}

/// The Selection table's rows: one a CPU.
fn selection_table(rep: &SelectionReport) -> Table {
    let mut t = Table::new(
        "Selection",
        &[
            "cpu",
            "sel",
            "slot",
            "steer",
            "non-steer",
            "softirq",
            "busy%",
            "steal%",
            "core",
            "kind",
            "sibl",
            "node",
            "isol",
            "nohz",
            "rcu",
        ],
    );
    for r in &rep.cpus {
        t.row(vec![
            r.cpu.to_string(),
            r.sel.clone(),
            r.slot.map_or_else(String::new, |s| s.to_string()),
            opt(r.irq_steerable),
            opt(r.irq_nonsteerable),
            opt(r.softirq),
            pct(r.busy_pct),
            pct(r.steal_pct),
            format!("{:.0}", r.core_cost),
            kind_cell(r.kind),
            other_siblings(r.cpu, &r.siblings),
            r.node.map_or_else(|| "-".to_string(), |n| n.to_string()),
            flag(r.isolated),
            flag(r.nohz_full),
            flag(r.rcu_nocbs),
        ]);
    }
    t
}

/// The lines under the Selection table: what the table alone does not say about the choice.
fn selection_notes(rep: &SelectionReport, out: &mut String) {
    let sel = &rep.selection;
    if sel.housekeeper_shared {
        out.push_str(&format!(
            "  housekeeper shares cpu {} with the task: no candidate CPU was left\n",
            sel.housekeeper_cpu
        ));
    }
    if !sel.spares.is_empty() {
        let cpus: goset_plan::CpuSet = sel.spares.iter().copied().collect();
        out.push_str(&format!(
            "  spares: cpus {cpus} booked idle; a task CPU that turns noisy hands its threads to the quietest\n"
        ));
    }
    if !sel.unfenced.is_empty() {
        let cpus: goset_plan::CpuSet = sel.unfenced.iter().copied().collect();
        out.push_str(&format!(
            "  siblings not fenced: {cpus} (one CPU must stay free for the housekeeper)\n"
        ));
    }
    if let Some(d) = &sel.near {
        let cpus: Option<goset_plan::CpuSet> =
            (d.local_cpus.as_ref()).map(|l| l.iter().copied().collect());
        out.push_str(&format!(
            "  near {}: {}, node {}, local cpus {}\n",
            d.name,
            d.bus_id,
            d.node.map_or_else(|| "-".to_string(), |n| n.to_string()),
            cpus.map_or_else(|| "-".to_string(), |c| c.to_string()),
        ));
    }
    if !sel.passed_over.is_empty() {
        let cpus: goset_plan::CpuSet = sel.passed_over.iter().copied().collect();
        out.push_str(&format!(
            "  passed over for noise: cpus {cpus} (taken had every CPU been quiet)\n"
        ));
    }
    if rep.sample_ms == 0 {
        out.push_str("  ranked by topology alone (--sample 0)\n");
    }
}

/// The `kind` cell: the kind's number, `-` where the machine has no kinds.
fn kind_cell(kind: Option<usize>) -> String {
    kind.map_or_else(|| "-".to_string(), |k| k.to_string())
}

/// The CPU kinds table, like `lstopo --cpukinds`: the least performant first; empty where the
/// machine describes no kinds.
pub fn render_kinds(topo: &Topology) -> String {
    if topo.kinds.is_empty() {
        return String::new();
    }
    let mut t = Table::new(
        "CPU kinds",
        &[
            "kind", "cpus", "type", "capacity", "max MHz", "base MHz", "class", "perf",
        ],
    );
    let num = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for k in &topo.kinds {
        let cpus: goset_plan::CpuSet = k.cpus.iter().copied().collect();
        t.row(vec![
            k.index.to_string(),
            cpus.to_string(),
            k.core_type.clone().unwrap_or_else(|| "-".to_string()),
            num(k.capacity),
            num(k.max_mhz),
            num(k.base_mhz),
            k.class.to_string(),
            format!("{:.2}", k.perf as f64 / 1000.0),
        ]);
    }
    t.render()
}

/// The line under the Selection table that says the task keeps one shared mask
/// (`--placement mask`); empty for per-thread placement, the default (the Run table names
/// the mode either way).
pub fn render_placement(placement: crate::cli::Placement, sel: &Selection) -> String {
    match placement {
        crate::cli::Placement::Thread => String::new(),
        crate::cli::Placement::Mask => {
            let cpus: goset_plan::CpuSet = sel.task_cpus.iter().copied().collect();
            format!(
                "  placement mask: every thread shares the mask of cpus {cpus} (no libgoset.so, no thread placed or moved)\n"
            )
        }
    }
}

/// Runs' bookings under `title` (see [`crate::booking`]); empty when there are none.
pub fn render_bookings(bookings: &[crate::booking::Booking], title: &str) -> String {
    if bookings.is_empty() {
        return String::new();
    }
    let mut out = format!("{title}\n");
    for b in bookings {
        let cpus: goset_plan::CpuSet = b.cpus.iter().copied().collect();
        out.push_str(&format!(
            "  cpus {cpus}  housekeeper {}  {}\n",
            b.housekeeper_cpu,
            b.who()
        ));
    }
    out
}

/// The banner that opens the report.
pub fn banner() -> &'static str {
    "----------------- GOSET -----------------\n"
}

/// The Topology table, one row per possible CPU, and the CPU kinds table.
pub fn render_topology(topo: &Topology) -> String {
    let mut t = Table::new(
        "Topology",
        &[
            "cpu", "online", "allowed", "core", "sibl", "package", "node", "kind", "isol", "nohz",
            "rcu",
        ],
    );
    let id = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for c in &topo.cpus {
        t.row(vec![
            c.cpu.to_string(),
            flag(c.online),
            flag(c.allowed),
            id(c.core),
            other_siblings(c.cpu, &c.siblings),
            id(c.package),
            c.node.map_or_else(|| "-".to_string(), |n| n.to_string()),
            kind_cell(c.kind),
            flag(c.isolated),
            flag(c.nohz_full),
            flag(c.rcu_nocbs),
        ]);
    }
    let mut out = t.render();
    out.push_str(&render_kinds(topo));
    out
}
