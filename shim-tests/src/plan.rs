//! What a test checks reports against: a list of planned CPUs and, under goset-run, the
//! selection it wrote with `--json`.

use super::Outcome;
use std::path::Path;

/// Parses a kernel cpulist (`0-3,5`, `1`), as in `Cpus_allowed_list` and `GOSET_CPUS`, in
/// its order. Panics on anything else, naming the text.
pub fn cpulist(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || panic!("not a cpulist: {text:?}");
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (usize, usize) = (
                    lo.parse().unwrap_or_else(|_| bad()),
                    hi.parse().unwrap_or_else(|_| bad()),
                );
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().unwrap_or_else(|_| bad())),
        }
    }
    cpus
}

/// The CPUs this test process may run on (`Cpus_allowed_list` of its own status).
pub fn own_allowed() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc/self/status");
    cpulist(line)
}

/// The first two CPUs this process may use, as a cpulist (`GOSET_CPUS` of a test by hand);
/// `None` (skipped, with a note) with fewer.
pub fn first_two_allowed() -> Option<String> {
    let cpus = own_allowed();
    if cpus.len() < 2 {
        super::skip_note(&format!("two CPUs needed, this process has {cpus:?}"));
        return None;
    }
    Some(format!("{},{}", cpus[0], cpus[1]))
}

/// The selection goset-run wrote with `--json FILE`.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Task CPUs in slot order.
    pub task_cpus: Vec<usize>,
    /// The housekeeper's CPU, when the selection names one.
    pub housekeeper: Option<usize>,
    /// CPUs booked idle for moves off a noisy CPU (`--spare`).
    pub spares: Vec<usize>,
    /// The report's `telemetry.moves` (empty for a dry run).
    pub moves: Vec<serde_json::Value>,
    /// The report's `telemetry.totals.brief`: threads counted, not logged (0 for a dry run).
    pub brief: u64,
}

impl Selection {
    /// Reads `{"selection":{"task_cpus":[...],"housekeeper":H,...}}` from
    /// `path`; `outcome` is the run that should have written it, for the failure message.
    pub fn read(path: &Path, outcome: &Outcome) -> Selection {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            panic!(
                "goset-run wrote no --json file {} ({e}); {}\n{}",
                path.display(),
                outcome.command,
                outcome.dump()
            )
        });
        let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("--json file {} is not JSON ({e}):\n{text}", path.display())
        });
        let sel = &json["selection"];
        let task_cpus = sel["task_cpus"]
            .as_array()
            .unwrap_or_else(|| {
                panic!(
                    "no selection.task_cpus array in {}:\n{text}",
                    path.display()
                )
            })
            .iter()
            .map(|c| {
                c.as_u64()
                    .unwrap_or_else(|| panic!("task_cpus holds {c}, not a CPU number"))
                    as usize
            })
            .collect();
        Selection {
            task_cpus,
            housekeeper: sel["housekeeper"].as_u64().map(|c| c as usize),
            spares: (sel["spares"].as_array().into_iter().flatten())
                .filter_map(|c| c.as_u64().map(|c| c as usize))
                .collect(),
            moves: (json["telemetry"]["moves"].as_array().cloned()).unwrap_or_default(),
            brief: json["telemetry"]["totals"]["brief"].as_u64().unwrap_or(0),
        }
    }

    /// Every CPU the task may use: the task CPUs and the housekeeper.
    pub fn reservation(&self) -> Vec<usize> {
        let mut cpus = self.task_cpus.clone();
        cpus.extend(self.housekeeper);
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }
}
