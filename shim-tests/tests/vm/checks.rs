//! The checks of what a guest printed, one function per kind of scenario, each read from the
//! threads' own reports and the guest's sysfs.

use crate::console::{cpus_of, irqs_of, line_after, memory_of, task_cpus, worker_cpus, Console};
use crate::script::{process_scenarios, BUSY_CPU, BUSY_REPEATS, OFFLINE_CPU, SCENARIO_LIMIT_S};
use crate::Shape;
use shim_tests::{cpulist, with_role};
use std::collections::{BTreeMap, BTreeSet};

/// Every check of `shape`'s console `c`, in the order its scenarios ran.
pub(crate) fn check(shape: &Shape, c: &Console) {
    let name = shape.name;
    for (scenario, s) in &c.scenarios {
        assert_ne!(
            s.code, 137,
            "{name}: {scenario} ran past {SCENARIO_LIMIT_S} s:\n{}",
            s.text
        );
    }
    check_topology(shape, c);
    check_processes(shape, c, &|cpu| c.node_of(cpu));
    check_placement(shape, c);
    check_numa(shape, c);
    check_teams(shape, c);
    check_isolation(shape, c);
    check_bounds(shape, c);
    if shape.gpus {
        crate::ranks::check(shape, c);
    }
}

/// goset's siblings and nodes are the guest's sysfs, and the nodes those asked for.
fn check_topology(shape: &Shape, c: &Console) {
    let name = shape.name;
    let cpus = c.topology["cpus"].as_array().expect("cpus");
    assert_eq!(cpus.len(), c.siblings.len(), "{name}");
    for cpu in cpus {
        let id = cpu["cpu"].as_u64().unwrap() as usize;
        let sib: Vec<usize> = (cpu["siblings"].as_array().unwrap().iter())
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(sib, c.siblings[&id], "{name}: siblings of cpu {id}");
    }
    let nodes: BTreeMap<usize, Vec<usize>> = (c.topology["nodes"].as_array().unwrap().iter())
        .map(|n| {
            let cpus = n["cpus"].as_array().unwrap();
            let cpus = cpus.iter().map(|v| v.as_u64().unwrap() as usize).collect();
            (n["id"].as_u64().unwrap() as usize, cpus)
        })
        .collect();
    assert_eq!(nodes, c.nodes, "{name}: NUMA nodes");
    let expected: BTreeMap<usize, Vec<usize>> = shape
        .nodes
        .iter()
        .enumerate()
        .map(|(i, l)| (i, cpulist(l)))
        .collect();
    assert_eq!(
        c.nodes, expected,
        "{name}: the guest has the nodes asked for"
    );
}

/// Checks the multi-process scenarios: in each, the expected number of processes, each
/// OpenMP team the size asked for, every thread on one CPU, each process's CPUs on one node,
/// and no core shared by two processes. Read from the threads' own reports (`sched_getcpu`,
/// `Cpus_allowed_list`).
fn check_processes(shape: &Shape, c: &Console, node_of: &dyn Fn(usize) -> usize) {
    let name = shape.name;
    let all = c.siblings.len();
    for (scenario, _) in process_scenarios(shape, all) {
        let s = &c.scenarios[&scenario];
        assert_eq!(s.code, 0, "{name}: {scenario}:\n{}", s.text);
        let numbers: Vec<usize> = (scenario.split('-'))
            .filter_map(|w| w.parse().ok())
            .collect();
        let (p, t) = (numbers[0], numbers[1]);
        let team = with_role(&s.reports, "omp");
        let mut by_pid: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for r in &team {
            assert_eq!(
                r.field("team"),
                t.to_string(),
                "{name}: {scenario}: {}",
                r.line
            );
            assert!(
                r.allowed.len() == 1,
                "{name}: {scenario}: a thread not pinned to one CPU: {}\n{}",
                r.line,
                s.text
            );
            by_pid.entry(r.pid).or_default().push(r.single_cpu());
        }
        assert_eq!(by_pid.len(), p, "{name}: {scenario}: processes\n{}", s.text);
        let mut core_owner: BTreeMap<Vec<usize>, u32> = BTreeMap::new();
        for (pid, cpus) in &by_pid {
            assert_eq!(cpus.len(), t, "{name}: {scenario}: pid {pid}\n{}", s.text);
            let nodes: BTreeSet<usize> = cpus.iter().map(|&c| node_of(c)).collect();
            assert_eq!(
                nodes.len(),
                1,
                "{name}: {scenario}: pid {pid} straddles nodes {cpus:?}\n{}",
                s.text
            );
            for &cpu in cpus {
                let owner = core_owner.entry(c.siblings[&cpu].clone()).or_insert(*pid);
                assert_eq!(
                    owner, pid,
                    "{name}: {scenario}: core of CPU {cpu} shared\n{}",
                    s.text
                );
            }
        }
    }
}

/// SMT policies, every CPU (also under a busy loop), the housekeeper's core, a noisy core.
fn check_placement(shape: &Shape, c: &Console) {
    let name = shape.name;
    let all = c.siblings.len();
    if shape.smt {
        // Spread: every worker on a core of its own; pack: the workers fill whole cores.
        let spread = worker_cpus("spread", &c.scenarios["spread"]);
        let cores: BTreeSet<Vec<usize>> = spread.iter().map(|&p| c.core_of(p)).collect();
        assert_eq!(cores.len(), spread.len(), "{name}: spread {spread:?}");
        let pack = worker_cpus("pack", &c.scenarios["pack"]);
        let cores: BTreeSet<Vec<usize>> = pack.iter().map(|&p| c.core_of(p)).collect();
        assert_eq!(cores.len(), pack.len().div_ceil(2), "{name}: pack {pack:?}");
    }
    // -n = every CPU: every thread on a CPU of its own, also under a busy loop.
    let every = task_cpus("every-cpu", &c.scenarios["every-cpu"]);
    assert_eq!(every.len(), all, "{name}: every-cpu {every:?}");
    for i in 0..BUSY_REPEATS {
        for kind in ["every-cpu-busy", "every-cpu-busy-static"] {
            let scenario = format!("{kind}-{i}");
            let cpus = task_cpus(&scenario, &c.scenarios[&scenario]);
            assert_eq!(cpus.len(), all, "{name}: {scenario} {cpus:?}");
        }
    }
    // The housekeeper (every thread of goset-run) on a core no task CPU is on; the static
    // program's busy threads hold the task CPUs, its main thread (waiting in join) is sent to
    // the housekeeper CPU.
    let s = &c.scenarios["static"];
    let placed = task_cpus("static", s);
    let busy = &placed[..placed.len() - 1];
    let parent = cpus_of("static", s, &["parent"]);
    let housekeeper = parent[0];
    assert!(
        parent.iter().all(|&p| p == housekeeper),
        "{name}: goset-run's threads on {parent:?}"
    );
    let beside: Vec<usize> = c
        .core_of(housekeeper)
        .into_iter()
        .filter(|p| busy.contains(p))
        .collect();
    assert!(
        beside.is_empty(),
        "{name}: the housekeeper on {housekeeper} shares a core with the task {busy:?}"
    );
    assert_eq!(
        placed.last(),
        Some(&housekeeper),
        "{name}: the sleeping main thread is not on the housekeeper CPU\n{}",
        s.text
    );
    // Noise: the busy CPU and its siblings are left out.
    let quiet = task_cpus("noise", &c.scenarios["noise"]);
    let noisy = c.core_of(BUSY_CPU);
    assert!(
        quiet.iter().all(|p| !noisy.contains(p)),
        "{name}: {quiet:?} on the busy core {noisy:?}"
    );
}

/// `--numa auto` on a biggest node, memory bound to the node, CPU 0's core left out.
fn check_numa(shape: &Shape, c: &Console) {
    let name = shape.name;
    if let Some(s) = c.scenarios.get("numa-auto") {
        // One of the biggest nodes holds every worker, each on a CPU of its own.
        let biggest = c.nodes.values().map(Vec::len).max().unwrap();
        let on = worker_cpus("numa-auto", s);
        let distinct: BTreeSet<usize> = on.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            on.len(),
            "{name}: numa-auto shares a CPU {on:?}"
        );
        let node = &c.nodes[&c.node_of(on[0])];
        assert_eq!(
            node.len(),
            biggest,
            "{name}: numa-auto on a smaller node {node:?}"
        );
        assert!(
            on.iter().all(|p| node.contains(p)),
            "{name}: {on:?} not in {node:?}"
        );
    }
    // --numa binds memory to the node of the CPUs (get_mempolicy and numa_maps agree); without
    // it the policy is the default.
    let auto = &c.scenarios["memory-numa-auto"];
    let node = c.node_of(cpus_of("memory-numa-auto", auto, &["mem"])[0]);
    let last = c.nodes.len() - 1;
    for (scenario, node) in [("memory-numa-auto", node), ("memory-numa-last", last)] {
        let (policy, nodes, map, on) = memory_of(scenario, &c.scenarios[scenario]);
        let text = &c.scenarios[scenario].text;
        assert_eq!(
            (policy, nodes, map, on),
            (
                2,
                node.to_string(),
                format!("bind:{node}"),
                vec![format!("N{node}")]
            ),
            "{name}: {scenario}:\n{text}"
        );
    }
    let (policy, _, map, _) = memory_of("memory-default", &c.scenarios["memory-default"]);
    assert_eq!(
        (policy, map.as_str()),
        (0, "default"),
        "{name}: memory-default"
    );
    let avoided = worker_cpus("cpu0-core-avoided", &c.scenarios["cpu0-core-avoided"]);
    let core0 = c.core_of(0);
    assert!(
        avoided.iter().all(|p| !core0.contains(p)),
        "{name}: {avoided:?} on CPU 0's core {core0:?}"
    );
}

/// OpenMP teams: one thread per planned CPU.
fn check_teams(shape: &Shape, c: &Console) {
    let name = shape.name;
    for (scenario, team) in [("omp-gomp", 4), ("omp-llvm", 6)] {
        let Some(s) = c.scenarios.get(scenario) else {
            continue;
        };
        let cpus = cpus_of(scenario, s, &["omp"]);
        let distinct: BTreeSet<usize> = cpus.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            team,
            "{name}: {scenario} {cpus:?}\n{}",
            s.text
        );
        for r in with_role(&s.reports, "omp") {
            assert_eq!(r.field("team"), team.to_string(), "{name}: {}", r.line);
        }
    }
}

/// A `taskset` mask, a cpuset, an offline CPU and a node too small bound the task.
fn check_bounds(shape: &Shape, c: &Console) {
    let name = shape.name;
    let all = c.siblings.len();
    let last_cpus: Vec<usize> = cpulist(shape.nodes.last().unwrap());
    let bounded = worker_cpus("taskset", &c.scenarios["taskset"]);
    assert!(
        bounded.iter().all(|p| last_cpus.contains(p)),
        "{name}: taskset {bounded:?}"
    );
    let boxed = task_cpus("cpuset", &c.scenarios["cpuset"]);
    assert!(
        boxed.iter().all(|p| [1, 3, 5].contains(p)),
        "{name}: cpuset 1,3,5 but {boxed:?}"
    );
    let crowded = &c.scenarios["cpuset-too-many"];
    assert_eq!(
        crowded.code, 2,
        "{name}: cpuset-too-many:\n{}",
        crowded.text
    );
    let online = task_cpus("hotplug", &c.scenarios["hotplug"]);
    assert!(
        online.len() == all - 1 && !online.contains(&OFFLINE_CPU),
        "{name}: hotplug (CPU {OFFLINE_CPU} offline) {online:?}"
    );
    let small = &c.scenarios["numa-too-small"];
    assert_eq!(small.code, 2, "{name}: numa-too-small:\n{}", small.text);
    assert!(small.stderr.contains("holds"), "{name}: {}", small.stderr);
}

/// cgroup v2 (the group from inside the task, its cpuset, a mask reset by the task clamped to
/// it, everything undone after), fenced siblings, steered IRQs.
fn check_isolation(shape: &Shape, c: &Console) {
    let name = shape.name;
    let mut scenarios = vec!["cgroup-v2"];
    if shape.smt {
        scenarios.push("fence");
    }
    for scenario in scenarios {
        let s = &c.scenarios[scenario];
        let held = task_cpus(scenario, s);
        let cg = line_after(scenario, s, "cg ");
        assert!(
            cg[0].starts_with("/goset-sh"),
            "{name}: {scenario} group {cg:?}"
        );
        let cpus = cpulist(cg[1]);
        // The task CPUs, and with --fence their siblings.
        let mut planned: BTreeSet<usize> = held.iter().copied().collect();
        if scenario == "fence" {
            planned.extend(held.iter().flat_map(|&p| c.core_of(p)));
        }
        assert_eq!(
            cpus.iter().copied().collect::<BTreeSet<_>>(),
            planned,
            "{name}: {scenario}: cpuset.cpus {} for threads on {held:?}\n{}",
            cg[1],
            s.text
        );
        let nodes: BTreeSet<usize> = cpus.iter().map(|&p| c.node_of(p)).collect();
        assert_eq!(
            cpulist(cg[2]).into_iter().collect::<BTreeSet<_>>(),
            nodes,
            "{name}: {scenario}: cpuset.mems"
        );
        assert_eq!(
            line_after(scenario, s, "cgroup-after "),
            ["subtree=[]", "groups=[]"],
            "{name}: {scenario}: the group and +cpuset are undone"
        );
    }
    let s = &c.scenarios["steer"];
    assert_eq!(s.code, 0, "{name}: steer:\n{}", s.text);
    let json_line = line_after("steer", s, "json ").join(" ");
    let report: serde_json::Value = serde_json::from_str(&json_line).unwrap();
    let task: Vec<usize> = (report["selection"]["task_cpus"].as_array().unwrap().iter())
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let refused: Vec<String> = (report["isolation"]["steer"]["refused"].as_array().unwrap())
        .iter()
        .map(|pair| pair[0].as_u64().unwrap().to_string())
        .collect();
    let (before, during) = (irqs_of(s, "irq-before"), irqs_of(s, "irq-during"));
    assert!(
        !before.is_empty(),
        "{name}: the guest has IRQs:\n{}",
        s.text
    );
    for (irq, aff) in &during {
        assert!(
            refused.contains(irq) || !cpulist(aff).iter().any(|p| task.contains(p)),
            "{name}: irq {irq} on {aff} during the run, task on {task:?}\n{}",
            s.text
        );
    }
    assert_eq!(irqs_of(s, "irq-after"), before, "{name}: IRQs restored");
}
