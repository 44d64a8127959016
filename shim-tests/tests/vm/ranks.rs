//! The checks of the `--near gpu:local-rank` scenarios (`script::gpu_ranks`): gpu0 sits on
//! node 0 and gpu1 on node 1, so local rank `r` (GPU `r mod 2`) belongs on node `r mod 2`.

use crate::console::Console;
use crate::Shape;
use shim_tests::with_role;
use std::collections::{BTreeMap, BTreeSet};

/// Every thread of each of the 4 workers, the one its constructor started before `main`
/// included, was born on its GPU's node, in a block no other worker shares; the dry run shows
/// each rank's GPU.
pub(crate) fn check(shape: &Shape, c: &Console) {
    let name = shape.name;
    let s = &c.scenarios["gpu-ranks"];
    assert_eq!(s.code, 0, "{name}: gpu-ranks:\n{}", s.text);
    assert_eq!(
        s.reports.len(),
        12,
        "{name}: 4 workers of 3 threads:\n{}",
        s.text
    );
    assert_eq!(
        with_role(&s.reports, "early").len(),
        4,
        "{name}:\n{}",
        s.text
    );
    let mut blocks: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for r in &s.reports {
        let rank: usize = r.field("rank").parse().unwrap();
        for &cpu in &r.allowed {
            assert_eq!(
                c.node_of(cpu),
                rank % 2,
                "{name}: rank {rank}'s {} thread allowed {:?}, off its GPU's node:\n{}",
                r.role,
                r.allowed,
                s.text
            );
        }
        blocks.entry(rank).or_default().extend(&r.allowed);
    }
    for (a, cpus_a) in &blocks {
        for (b, cpus_b) in blocks.range(a + 1..) {
            assert!(
                cpus_a.is_disjoint(cpus_b),
                "{name}: ranks {a} and {b} share CPUs {cpus_a:?} {cpus_b:?}:\n{}",
                s.text
            );
        }
    }
    // The report's processes: each worker with the local rank its shim logged.
    let json = crate::console::line_after("gpu-ranks", s, "json ").join(" ");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let processes = report["processes"].as_array().unwrap();
    for r in with_role(&s.reports, "main") {
        let rank: usize = r.field("rank").parse().unwrap();
        let row = (processes.iter())
            .find(|p| p["pid"] == r.pid)
            .unwrap_or_else(|| panic!("{name}: no process {} in {json}", r.pid));
        assert_eq!(row["rank"], rank, "{name}: {row}");
        assert_eq!(row["rank_var"], "LOCAL_RANK", "{name}: {row}");
        assert_eq!(row["gpu"], format!("gpu{}", rank % 2), "{name}: {row}");
        // Its block where the report found its threads inside one of its GPU's (a thread the
        // housekeeper placed before the exec can leave a CPU outside it in the report).
        if let Some(cpus) = row["block"].as_array() {
            let block: BTreeSet<usize> =
                cpus.iter().map(|c| c.as_u64().unwrap() as usize).collect();
            assert!(
                block.len() == 2 && blocks[&rank].is_subset(&block),
                "{name}: {row}: its threads ran on {:?}",
                blocks[&rank]
            );
        }
    }
    let dry = &c.scenarios["gpu-ranks-dry"];
    assert_eq!(dry.code, 0, "{name}: gpu-ranks-dry:\n{}", dry.text);
    for (rank, bus) in [
        "0000:21:00.0",
        "0000:41:00.0",
        "0000:21:00.0",
        "0000:41:00.0",
    ]
    .iter()
    .enumerate()
    {
        let row = (dry.stderr.lines())
            .find(|l| l.split_whitespace().next() == Some(&rank.to_string()) && l.contains(bus));
        assert!(
            row.is_some(),
            "{name}: rank {rank} on {bus}:\n{}",
            dry.stderr
        );
    }
}
