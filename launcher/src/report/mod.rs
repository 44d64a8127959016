//! The run report: its one model ([`model`], which the JSON report serialises) and the text
//! tables for stderr over it.
//!
//! Renderers are pure: they turn values into strings. [`crate::launch`] decides where they go.

pub(crate) mod isolation;
pub mod model;
pub mod processes;
pub(crate) mod ranks;
pub(crate) mod record;
pub(crate) mod sharing;
pub(crate) mod table;
pub(crate) mod telemetry;

use crate::topology::Topology;
use model::selection::Decision;
use model::{PlacementMode, SelectionReport};
use table::Table;

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
            sel.housekeeper
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
pub fn render_placement(placement: PlacementMode, sel: &Decision) -> String {
    match placement {
        PlacementMode::Thread => String::new(),
        PlacementMode::Mask => {
            let cpus: goset_plan::CpuSet = sel.task_cpus.iter().copied().collect();
            format!(
                "  placement mask: every thread shares the mask of cpus {cpus} (no libgoset.so, no thread placed or moved)\n"
            )
        }
    }
}

/// Runs' bookings under `title` (see [`crate::booking`]); empty when there are none.
pub fn render_bookings(bookings: &[model::BookingReport], title: &str) -> String {
    if bookings.is_empty() {
        return String::new();
    }
    let mut out = format!("{title}\n");
    for b in bookings {
        let cpus: goset_plan::CpuSet = b.cpus.iter().copied().collect();
        out.push_str(&format!(
            "  cpus {cpus}  housekeeper {}  {}\n",
            b.housekeeper,
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
