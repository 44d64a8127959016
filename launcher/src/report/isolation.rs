//! The Isolation table: what `--cgroup`, `--fence` and `--steer` changed, and their undoing.

use super::model::selection::Decision;
use super::model::IsolationReport;

/// IRQs refused, summed by reason: `EIO 3, EINVAL 1`.
fn by_reason(refused: &[(u32, String)]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, why) in refused {
        *counts.entry(why).or_default() += 1;
    }
    counts
        .iter()
        .map(|(why, n)| format!("{why} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cpus(list: &[usize]) -> String {
    list.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Renders the table; empty when the run isolated nothing.
pub fn render_isolation(iso: &IsolationReport, sel: &Decision) -> String {
    let mut rows: Vec<(&str, String)> = Vec::new();
    if let Some(g) = &iso.cgroup {
        rows.push((
            "cgroup",
            format!(
                "{} ({})  cpus {}  mems {}",
                g.path.display(),
                g.version,
                g.cpus,
                g.mems
            ),
        ));
    }
    if !sel.fenced.is_empty() {
        rows.push(("fenced", cpus(&sel.fenced)));
    }
    if let Some(s) = &iso.steer {
        let refused = if s.refused.is_empty() {
            "0".to_string()
        } else {
            format!("{} ({})", s.refused.len(), by_reason(&s.refused))
        };
        rows.push((
            "steer",
            format!(
                "applied {}  refused {refused}  already off {}  remaining {}  drift {}",
                s.applied, s.already_off, s.remaining, s.drift
            ),
        ));
    }
    if let Some(h) = &iso.irqbalance {
        rows.push(("irqbalance", h.clone()));
    }
    for (pid, comm) in &iso.undone.outlived {
        let parent = iso
            .cgroup
            .as_ref()
            .and_then(|g| g.path.parent())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        rows.push((
            "outlived",
            format!("pid {pid} ({comm}) outlived the task: moved to {parent}"),
        ));
    }
    for why in &iso.undone.failed {
        rows.push(("not undone", why.clone()));
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("Isolation\n");
    for (name, value) in rows {
        out.push_str(&format!("  {name:<11} {value}\n"));
    }
    out
}
