//! The report lines the target programs print (see `programs/report.h`) and the checks the
//! tests make on them.

use super::{cpulist, Outcome};
use std::collections::BTreeMap;

/// One `report role=.. id=.. pid=.. tid=.. cpu=.. allowed=.. [k=v ...]` line.
#[derive(Debug, Clone)]
pub struct Report {
    /// What the thread is to the program (`main`, `worker`, `busy`, ...).
    pub role: String,
    /// Its index among the threads of its role.
    pub id: i64,
    /// Its process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// `sched_getcpu()` after the work (or the CPU last run on, for threads listed from /proc).
    pub cpu: i64,
    /// The thread's `Cpus_allowed_list`.
    pub allowed: Vec<usize>,
    /// The line as printed, for messages.
    pub line: String,
    /// Any further `k=v` fields.
    pub extra: BTreeMap<String, String>,
}

impl Report {
    /// A further field; panics naming the line when it is missing.
    pub fn field(&self, key: &str) -> &str {
        self.extra
            .get(key)
            .unwrap_or_else(|| panic!("report without {key}=: {}", self.line))
    }

    /// The one CPU this thread may run on; panics unless its allowed list is exactly that CPU
    /// and it reported running there.
    pub fn single_cpu(&self) -> usize {
        assert!(
            self.allowed.len() == 1 && self.cpu == self.allowed[0] as i64,
            "thread not pinned to one CPU (allowed={:?}, cpu={}): {}",
            self.allowed,
            self.cpu,
            self.line
        );
        self.allowed[0]
    }
}

/// One `report ...` line, or `None` for any other line.
pub fn parse_line(line: &str) -> Option<Report> {
    let rest = line.strip_prefix("report ")?;
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    for token in rest.split_whitespace() {
        let (k, v) = token.split_once('=')?;
        fields.insert(k.to_string(), v.to_string());
    }
    let mut take = |k: &str| fields.remove(k);
    let role = take("role")?;
    let id = take("id")?.parse().ok()?;
    let pid = take("pid")?.parse().ok()?;
    let tid = take("tid")?.parse().ok()?;
    let cpu = take("cpu")?.parse().ok()?;
    let allowed_text = take("allowed")?;
    let allowed_ok = !allowed_text.is_empty()
        && allowed_text
            .chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == '-');
    if !allowed_ok {
        return None;
    }
    Some(Report {
        role,
        id,
        pid,
        tid,
        cpu,
        allowed: cpulist(&allowed_text),
        line: line.to_string(),
        extra: fields,
    })
}

/// The reports on a program's stdout. Every line there must be a well-formed report: the shim
/// must never write to stdout.
pub fn reports(outcome: &Outcome) -> Vec<Report> {
    outcome
        .stdout
        .lines()
        .map(|line| {
            parse_line(line).unwrap_or_else(|| {
                panic!(
                    "stdout holds a line the program did not print: {line:?}\n{}\n{}",
                    outcome.command,
                    outcome.dump()
                )
            })
        })
        .collect()
}

/// The reports with `role`.
pub fn with_role<'a>(reports: &'a [Report], role: &str) -> Vec<&'a Report> {
    reports.iter().filter(|r| r.role == role).collect()
}

/// The single report with `role` and `id`.
pub fn one<'a>(reports: &'a [Report], role: &str, id: i64) -> &'a Report {
    let found: Vec<_> = reports
        .iter()
        .filter(|r| r.role == role && r.id == id)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one report role={role} id={id}, got {found:#?}"
    );
    found[0]
}

impl Report {
    /// Whether the thread roams: allowed every planned CPU, more than one, and running on one
    /// of them. Under goset-run a thread born while every slot had a running thread (its
    /// creator's included) gets them all, the kernel balancing it, until the housekeeper gives
    /// it a CPU of its own; by hand, a thread born while every slot holds its creator or a
    /// newborn roams for good.
    pub fn roams(&self, plan: &[usize]) -> bool {
        let mut planned = plan.to_vec();
        planned.sort_unstable();
        plan.len() > 1 && self.allowed == planned && planned.contains(&(self.cpu as usize))
    }
}

/// The reports of threads that do not roam (see [`Report::roams`]).
pub fn pinned<'a>(
    reports: impl IntoIterator<Item = &'a Report>,
    plan: &[usize],
) -> Vec<&'a Report> {
    reports.into_iter().filter(|r| !r.roams(plan)).collect()
}

/// Every report is a thread pinned to exactly one CPU of `plan`; returns their CPUs.
pub fn assert_on_plan<'a>(
    reports: impl IntoIterator<Item = &'a Report>,
    plan: &[usize],
) -> Vec<usize> {
    reports
        .into_iter()
        .map(|r| {
            let cpu = r.single_cpu();
            assert!(
                plan.contains(&cpu),
                "thread on CPU {cpu}, outside the plan {plan:?}: {}",
                r.line
            );
            cpu
        })
        .collect()
}

/// The threads are on planned CPUs, spread as evenly as possible: the number of threads per
/// planned CPU differs by at most one, among those that do not roam (see [`Report::roams`]).
pub fn assert_even<'a>(reports: impl IntoIterator<Item = &'a Report> + Clone, plan: &[usize]) {
    let cpus = assert_on_plan(pinned(reports.clone(), plan), plan);
    let counts: Vec<usize> = plan
        .iter()
        .map(|p| cpus.iter().filter(|c| *c == p).count())
        .collect();
    let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    let lines: Vec<&str> = reports.into_iter().map(|r| r.line.as_str()).collect();
    assert!(
        hi - lo <= 1,
        "uneven spread over plan {plan:?}: counts {counts:?}\n{}",
        lines.join("\n")
    );
}

/// The threads are on distinct planned CPUs, or roam (see [`Report::roams`]).
pub fn assert_distinct<'a>(reports: impl IntoIterator<Item = &'a Report> + Clone, plan: &[usize]) {
    let mut cpus = assert_on_plan(pinned(reports.clone(), plan), plan);
    cpus.sort_unstable();
    let before = cpus.len();
    cpus.dedup();
    let lines: Vec<&str> = reports.into_iter().map(|r| r.line.as_str()).collect();
    assert_eq!(
        cpus.len(),
        before,
        "two threads share a CPU:\n{}",
        lines.join("\n")
    );
}

/// Stderr has exactly one line and it is a `goset:` warning; returns it.
pub fn assert_one_warning(outcome: &Outcome) -> String {
    let lines: Vec<&str> = outcome
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("goset:"),
        "expected exactly one 'goset:' warning on stderr of {}\n{}",
        outcome.command,
        outcome.dump()
    );
    lines[0].to_string()
}
