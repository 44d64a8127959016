//! The Processes table: each process of the task with its threads, the CPUs they were placed
//! on and those CPUs' NUMA nodes, and with `--instances` each copy's index and ending, so that
//! a multi-process run shows at a glance whether every process kept to one node.
//!
//! Pure: threads and instances in, rows and text out.

use super::model::{ProcessReport, ThreadReport};
use super::table::Table;
use crate::output::escape;
use crate::select::ranks::RankBlock;
use crate::task::Ending;
use goset_plan::log::LocalRank;
use std::collections::{BTreeMap, BTreeSet};

/// The processes of `threads` in order of first appearance; `instances` are the copies'
/// pids and endings in index order (one entry without `--instances`, which names no copy).
pub fn build(
    threads: &[ThreadReport],
    instances: &[(i32, Ending)],
    node_of: impl Fn(usize) -> Option<usize>,
) -> Vec<ProcessReport> {
    let mut out: Vec<ProcessReport> = Vec::new();
    for t in threads {
        let p = &t.placement;
        let row = match out.iter_mut().position(|r| r.pid == p.pid) {
            Some(i) => &mut out[i],
            None => {
                let copy = (instances.len() > 1)
                    .then(|| instances.iter().position(|i| i.0 == p.pid))
                    .flatten();
                out.push(ProcessReport {
                    pid: p.pid,
                    instance: copy,
                    comm: p.comm.clone(),
                    threads: 0,
                    cpus: Vec::new(),
                    nodes: Vec::new(),
                    exit_code: copy.map(|i| instances[i].1.exit_code()),
                    rank: None,
                    rank_var: None,
                    gpu: None,
                    block: None,
                });
                out.last_mut().expect("just pushed")
            }
        };
        row.threads += 1;
        if p.tid == p.pid {
            row.comm = p.comm.clone();
        }
        let cpus: Vec<usize> = match p.cpu {
            Some(c) => vec![c],
            None => t.seen_on.clone(),
        };
        let mut all: BTreeSet<usize> = row.cpus.iter().copied().collect();
        all.extend(cpus);
        row.cpus = all.into_iter().collect();
        let nodes: BTreeSet<usize> = row.cpus.iter().filter_map(|&c| node_of(c)).collect();
        row.nodes = nodes.into_iter().collect();
    }
    out
}

/// Gives each process its local rank, GPU and block (`--near gpu:local-rank`): the rank and
/// GPU its shim logged (`logged`, checked by the reader), with the block its threads kept to
/// where that block is its GPU's. A log without any such record (a shim that logs no rank)
/// falls back to inference: a process whose threads all ran inside one rank's block gets that
/// rank, its GPU and its block. Where the log has them, a process without one read no rank
/// (a shell, torchrun's agent): it gets none, wherever its threads ran.
pub fn assign_ranks(
    rows: &mut [ProcessReport],
    ranks: &[RankBlock],
    logged: &BTreeMap<i32, LocalRank>,
) {
    for row in rows.iter_mut() {
        let inside = (!row.cpus.is_empty())
            .then(|| (ranks.iter()).find(|b| row.cpus.iter().all(|c| b.cpus.contains(c))))
            .flatten();
        let block = |b: &RankBlock| {
            let mut block = b.cpus.clone();
            block.sort();
            block
        };
        if let Some(l) = logged.get(&row.pid) {
            row.rank = Some(l.rank);
            row.rank_var = Some(l.var);
            row.gpu = l.gpu.map(|g| format!("gpu{g}"));
            row.block = inside.filter(|b| Some(b.gpu.index) == l.gpu).map(block);
        } else if let Some(b) = inside.filter(|_| logged.is_empty()) {
            row.rank = Some(b.rank);
            row.gpu = Some(format!("gpu{}", b.gpu.index));
            row.block = Some(block(b));
        }
    }
}

fn list(v: &[usize]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let set: goset_plan::CpuSet = v.iter().copied().collect();
    set.to_string()
}

/// The Processes table; empty for a task of one process without `--instances`.
pub fn render(processes: &[ProcessReport]) -> String {
    if processes.len() < 2 && processes.iter().all(|p| p.instance.is_none()) {
        return String::new();
    }
    let ranks = processes.iter().any(|p| p.rank.is_some());
    let mut header = vec!["pid", "inst", "comm", "threads", "cpus", "nodes", "exit"];
    if ranks {
        header.extend(["rank", "gpu", "block"]);
    }
    let mut t = Table::new("Processes", &header);
    for p in processes {
        let dash = || "-".to_string();
        let mut row = vec![
            p.pid.to_string(),
            p.instance.map_or_else(dash, |i| i.to_string()),
            escape(&p.comm).into_owned(),
            p.threads.to_string(),
            list(&p.cpus),
            list(&p.nodes),
            p.exit_code.map_or_else(dash, |c| c.to_string()),
        ];
        if ranks {
            row.push(p.rank.map_or_else(dash, |r| r.to_string()));
            row.push(p.gpu.clone().unwrap_or_else(dash));
            row.push(p.block.as_deref().map_or_else(dash, list));
        }
        t.row(row);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::housekeeper::outcome::ThreadOutcome;
    use crate::placement_log::ThreadPlacement;

    fn thread(pid: i32, tid: i32, cpu: Option<usize>, seen: &[usize]) -> ThreadReport {
        let mut t = ThreadOutcome::unmeasured(ThreadPlacement {
            tid,
            pid,
            comm: format!("t{tid}"),
            role: "worker".into(),
            slot: None,
            cpu,
            shared: false,
            roams: false,
            set_calls: 0,
            asked: None,
            exited: false,
            placed_by: "shim".into(),
        });
        t.seen_on = seen.to_vec();
        ThreadReport::from(&t)
    }

    #[test]
    fn each_process_lists_its_cpus_nodes_and_copy() {
        let threads = [
            thread(10, 11, Some(1), &[]),
            thread(20, 20, Some(4), &[]),
            thread(10, 10, Some(0), &[]),
            thread(20, 21, None, &[5, 6]),
        ];
        let node_of = |c: usize| Some(c / 4);
        let rows = build(
            &threads,
            &[(20, Ending::Exited(0)), (10, Ending::Exited(3))],
            node_of,
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].pid, rows[0].instance, rows[0].exit_code),
            (10, Some(1), Some(3))
        );
        assert_eq!(
            (rows[0].cpus.clone(), rows[0].nodes.clone()),
            (vec![0, 1], vec![0])
        );
        assert_eq!(rows[0].comm, "t10", "the main thread's name");
        assert_eq!(
            (rows[1].cpus.clone(), rows[1].nodes.clone()),
            (vec![4, 5, 6], vec![1])
        );
        let text = render(&rows);
        assert!(text.contains("Processes") && text.contains("4-6"), "{text}");
        // Under --near gpu:local-rank, the rank whose block holds a process's CPUs.
        let gpu = |index| crate::topology::gpus::Gpu {
            index,
            bus_id: String::new(),
            numa_node: Some(index),
            node: Some(index),
            nic: None,
            sysfs: String::new(),
        };
        let block = |rank: usize, cpus: Vec<usize>| RankBlock {
            rank,
            gpu: gpu(rank),
            share: cpus.clone(),
            cpus,
            widened: None,
        };
        let mut ranked = rows.clone();
        let blocks = [block(0, vec![0, 1, 2]), block(1, vec![6, 5, 4])];
        assign_ranks(&mut ranked, &blocks, &BTreeMap::new());
        assert_eq!(
            (ranked[0].rank, ranked[0].gpu.as_deref()),
            (Some(0), Some("gpu0"))
        );
        assert_eq!(ranked[1].block, Some(vec![4, 5, 6]));
        assert!(render(&ranked).contains("gpu1"));
        assert_eq!(ranked[0].rank_var, None, "inferred");
        // A rank its shim logged is the process's, whatever block it ran in.
        let logged = LocalRank {
            rank: 5,
            var: "SLURM_LOCALID",
            gpu: Some(1),
        };
        let mut logged_rows = rows.clone();
        assign_ranks(&mut logged_rows, &blocks, &BTreeMap::from([(20, logged)]));
        let r = &logged_rows[1];
        let seen = (r.rank, r.rank_var, r.gpu.as_deref(), r.block.clone());
        assert_eq!(
            seen,
            (
                Some(5),
                Some("SLURM_LOCALID"),
                Some("gpu1"),
                Some(vec![4, 5, 6])
            )
        );
        let unlogged = &logged_rows[0];
        assert_eq!(
            unlogged.rank, None,
            "no record where others have one: no rank"
        );
        assert_eq!(
            (unlogged.gpu.as_deref(), unlogged.block.as_deref()),
            (None, None)
        );
        // One process, no copies: no table.
        let one = build(&threads[..1], &[(10, Ending::Exited(0))], node_of);
        assert_eq!(render(&one), "");
        assert_eq!(one[0].instance, None);
    }
}
