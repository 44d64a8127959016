//! The Processes table: each process of the task with its threads, the CPUs they were placed
//! on and those CPUs' NUMA nodes, and with `--instances` each copy's index and ending, so that
//! a multi-process run shows at a glance whether every process kept to one node.
//!
//! Pure: threads and instances in, rows and text out.

use super::table::Table;
use crate::housekeeper::outcome::ThreadReport;
use crate::output::escape;
use crate::task::Ending;
use serde::Serialize;
use std::collections::BTreeSet;

/// One process of the task (and of its JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessReport {
    /// Process id.
    pub pid: i32,
    /// The copy it is with `--instances` (the copy's first process); `None` otherwise.
    pub instance: Option<usize>,
    /// Its main thread's name (else its first thread's).
    pub comm: String,
    /// Threads seen.
    pub threads: usize,
    /// The CPUs its threads were placed on (else seen running on), ascending.
    pub cpus: Vec<usize>,
    /// Those CPUs' NUMA nodes, ascending.
    pub nodes: Vec<usize>,
    /// How a copy ended (`--instances`); `None` for other processes.
    pub exit_code: Option<i32>,
}

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
    let mut t = Table::new(
        "Processes",
        &["pid", "inst", "comm", "threads", "cpus", "nodes", "exit"],
    );
    for p in processes {
        t.row(vec![
            p.pid.to_string(),
            p.instance.map_or_else(|| "-".into(), |i| i.to_string()),
            escape(&p.comm).into_owned(),
            p.threads.to_string(),
            list(&p.cpus),
            list(&p.nodes),
            p.exit_code.map_or_else(|| "-".into(), |c| c.to_string()),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement_log::ThreadPlacement;

    fn thread(pid: i32, tid: i32, cpu: Option<usize>, seen: &[usize]) -> ThreadReport {
        let mut t = ThreadReport::unmeasured(ThreadPlacement {
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
        t
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
        // One process, no copies: no table.
        let one = build(&threads[..1], &[(10, Ending::Exited(0))], node_of);
        assert_eq!(render(&one), "");
        assert_eq!(one[0].instance, None);
    }
}
