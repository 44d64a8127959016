//! What a guest printed on its console, split into its sysfs facts, goset's topology and the
//! scenarios, and what each scenario's threads reported.

use shim_tests::{cpulist, parse_line, with_role, Report};
use std::collections::{BTreeMap, BTreeSet};

/// One scenario's exit code, reports and stderr.
pub(crate) struct Scenario {
    pub(crate) code: i32,
    pub(crate) reports: Vec<Report>,
    pub(crate) stderr: String,
    pub(crate) text: String,
}

/// What the guest printed, split: sysfs facts, the topology JSON, the scenarios.
pub(crate) struct Console {
    pub(crate) siblings: BTreeMap<usize, Vec<usize>>,
    pub(crate) nodes: BTreeMap<usize, Vec<usize>>,
    pub(crate) topology: serde_json::Value,
    pub(crate) scenarios: BTreeMap<String, Scenario>,
}

impl Console {
    /// The CPUs of `cpu`'s core (its siblings, itself included).
    pub(crate) fn core_of(&self, cpu: usize) -> Vec<usize> {
        self.siblings[&cpu].clone()
    }

    /// The node that holds `cpu`.
    pub(crate) fn node_of(&self, cpu: usize) -> usize {
        *self
            .nodes
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .unwrap()
            .0
    }
}

/// `<number> <cpulist>` of a `sib` or `node` line.
fn number_and_cpus(rest: &str, text: &str) -> (usize, Vec<usize>) {
    let (number, list) = rest.split_once(' ').unwrap_or((rest, ""));
    let number = (number.parse()).unwrap_or_else(|_| panic!("odd line {rest:?}:\n{text}"));
    (number, cpulist(list))
}

/// A line without the `[i] ` that goset-run puts before each line of copy `i`
/// (`--instances`).
fn strip_instance(line: &str) -> &str {
    line.strip_prefix('[')
        .and_then(|rest| rest.split_once("] "))
        .filter(|(i, _)| i.parse::<usize>().is_ok())
        .map_or(line, |(_, rest)| rest)
}

/// Splits the console between its `== BEGIN` and `== END` markers.
pub(crate) fn parse(text: &str) -> Console {
    let body = text
        .split_once("== BEGIN\n")
        .and_then(|(_, rest)| rest.split_once("== END"))
        .map(|(body, _)| body)
        .unwrap_or_else(|| panic!("the guest did not run its checks:\n{text}"));
    let (mut siblings, mut nodes) = (BTreeMap::new(), BTreeMap::new());
    let mut topology = serde_json::Value::Null;
    let mut scenarios = BTreeMap::new();
    let mut current: Option<(String, Scenario)> = None;
    for line in body.lines() {
        if let Some(name) = line.strip_prefix("== SCENARIO ") {
            let fresh = Scenario {
                code: -1,
                reports: Vec::new(),
                stderr: String::new(),
                text: String::new(),
            };
            if let Some((n, s)) = current.replace((name.to_string(), fresh)) {
                scenarios.insert(n, s);
            }
        } else if let Some((_, s)) = current.as_mut() {
            s.text.push_str(line);
            s.text.push('\n');
            if let Some(rc) = line.strip_prefix("== RC ") {
                s.code = rc.trim().parse().unwrap();
            } else if let Some(err) = line.strip_prefix("stderr ") {
                s.stderr.push_str(err);
                s.stderr.push('\n');
            } else if let Some(r) = parse_line(strip_instance(line)) {
                s.reports.push(r);
            }
        } else if let Some(rest) = line.strip_prefix("sib ") {
            let (cpu, list) = number_and_cpus(rest, text);
            siblings.insert(cpu, list);
        } else if let Some(rest) = line.strip_prefix("node ") {
            let (id, list) = number_and_cpus(rest, text);
            nodes.insert(id, list);
        } else if let Some(json) = line.strip_prefix("topology ") {
            topology = serde_json::from_str(json).unwrap_or_else(|e| {
                panic!("goset topology --json is not JSON ({e}): {json}\n{text}")
            });
        }
    }
    if let Some((n, s)) = current {
        scenarios.insert(n, s);
    }
    Console {
        siblings,
        nodes,
        topology,
        scenarios,
    }
}

/// The one CPU each thread of `roles` was allowed at the end (one each, or the scenario failed).
pub(crate) fn cpus_of(name: &str, s: &Scenario, roles: &[&str]) -> Vec<usize> {
    assert_eq!(s.code, 0, "{name}:\n{}", s.text);
    let threads: Vec<&Report> = roles
        .iter()
        .flat_map(|r| with_role(&s.reports, r))
        .collect();
    assert!(!threads.is_empty(), "{name}: no reports:\n{}", s.text);
    threads
        .iter()
        .map(|r| {
            assert_eq!(r.allowed.len(), 1, "{name}: {}\n{}", r.line, s.text);
            r.allowed[0]
        })
        .collect()
}

/// The CPU each busy worker was allowed at the end.
pub(crate) fn worker_cpus(name: &str, s: &Scenario) -> Vec<usize> {
    cpus_of(name, s, &["busy"])
}

/// The CPU each busy worker and the main thread held while they all ran (`held=`: placed_threads
/// with "main" exits 0 only once they all differed for its hold time; a mask read later, at
/// the report, may already show a sleeper moved).
pub(crate) fn task_cpus(name: &str, s: &Scenario) -> Vec<usize> {
    assert_eq!(s.code, 0, "{name}:\n{}", s.text);
    let threads: Vec<&Report> = ["busy", "main"]
        .iter()
        .flat_map(|role| with_role(&s.reports, role))
        .collect();
    let cpus: Vec<usize> = threads
        .iter()
        .map(|r| {
            let held = r.field("held").parse();
            held.unwrap_or_else(|_| panic!("{name}: never held one CPU: {}", r.line))
        })
        .collect();
    let distinct: BTreeSet<usize> = cpus.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        cpus.len(),
        "{name}: two task threads share a CPU {cpus:?}\n{}",
        s.text
    );
    cpus
}

/// The memory policy `numa_memory` reported: (get_mempolicy mode, its nodes, numa_maps's
/// policy word, the nodes holding the buffer's pages).
pub(crate) fn memory_of(name: &str, s: &Scenario) -> (i32, String, String, Vec<String>) {
    assert_eq!(s.code, 0, "{name}:\n{}", s.text);
    let mem = with_role(&s.reports, "mem");
    assert_eq!(mem.len(), 1, "{name}:\n{}", s.text);
    let r = mem[0];
    let on: Vec<String> = r
        .extra
        .keys()
        .filter(|k| k.starts_with('N'))
        .cloned()
        .collect();
    (
        r.field("policy").parse().unwrap(),
        r.field("nodes").to_string(),
        r.field("map").to_string(),
        on,
    )
}

/// The words after `prefix` on the scenario's first line that starts with it.
pub(crate) fn line_after<'a>(name: &str, s: &'a Scenario, prefix: &str) -> Vec<&'a str> {
    let line = (s.text.lines())
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("{name}: no '{prefix}' line:\n{}", s.text));
    line.split_whitespace().collect()
}

/// Each IRQ's affinity on the scenario's lines tagged `tag`.
pub(crate) fn irqs_of(s: &Scenario, tag: &str) -> BTreeMap<String, String> {
    (s.text.lines())
        .filter_map(|l| l.strip_prefix(tag)?.strip_prefix(' '))
        .filter_map(|l| l.split_once(' '))
        .map(|(irq, aff)| (irq.to_string(), aff.trim().to_string()))
        .collect()
}
