//! The Ranks table (`--near gpu:local-rank`): each local rank's GPU, its node and NIC, its
//! share and its block. Pure: renders what the selection holds.

use super::model::selection::Decision;
use super::table::Table;
use goset_plan::CpuSet;

/// The Ranks table, empty without rank blocks.
pub fn render(sel: &Decision) -> String {
    if sel.ranks.is_empty() {
        return String::new();
    }
    let mut t = Table::new(
        "Ranks (--near gpu:local-rank)",
        &[
            "rank", "gpu", "bus id", "node", "nic", "link", "share", "block",
        ],
    );
    let set = |cpus: &[usize]| cpus.iter().copied().collect::<CpuSet>().to_string();
    for r in &sel.ranks {
        let g = &r.gpu;
        t.row(vec![
            r.rank.to_string(),
            format!("gpu{}", g.index),
            g.bus_id.clone(),
            g.node.map_or_else(|| "-".into(), |n| n.to_string()),
            g.nic
                .as_ref()
                .map_or_else(|| "-".into(), |n| n.name.clone()),
            g.nic
                .as_ref()
                .map_or_else(|| "-".into(), |n| n.link.to_string()),
            set(&r.share),
            match r.widened {
                Some(tier) => format!("{} (share full: {tier})", set(&r.cpus)),
                None => set(&r.cpus),
            },
        ]);
    }
    t.render()
}
