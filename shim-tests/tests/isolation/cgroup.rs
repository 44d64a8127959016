//! `--cgroup`: a static program that resets its affinity stays in its group, two runs of one
//! command, a group the task makes inside its own.

use crate::machine::*;
use crate::running::*;
use shim_tests::*;
use std::process::{Child, Stdio};

#[test]
fn a_static_program_that_resets_its_affinity_stays_on_the_task_cpus_in_its_cgroup() {
    let Some(bench) = bench("--cgroup", true, true) else {
        return;
    };
    let probe = &bench.probe;
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut run = start(
        &["-n", "1", "--cgroup", "--json", report.to_str().unwrap()],
        probe.path(),
        &["reset"],
        &[],
    );
    let ready = run.ready();
    let group = cpuset_group_of(ready.pid).expect("the task is in a cpuset group");
    let read = |f: &str| {
        std::fs::read_to_string(group.join(f))
            .unwrap()
            .trim()
            .to_string()
    };
    let (cpus, mems) = (read("cpuset.cpus"), read("cpuset.mems"));
    let allowed: Vec<String> = (ready.tids.iter())
        .map(|&t| status_field(ready.pid, t, "Cpus_allowed_list:"))
        .collect();
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    assert!(
        stdout.iter().filter(|l| l.ends_with("rc=0")).count() == 2,
        "both threads reset their affinity to every CPU and the kernel accepted it: {stdout:?}"
    );
    let r = json(&report);
    let planned = task_cpus(&r);
    let planned_text = planned
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(cpus, planned_text, "cpuset.cpus is the plan\n{stderr}");
    assert_eq!(mems, "0", "one node: cpuset.mems 0");
    for a in &allowed {
        assert_eq!(
            a, &planned_text,
            "a thread escaped the cpuset: {allowed:?}\n{stderr}"
        );
    }
    assert!(
        group
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("goset-isolation_probe"),
        "{}",
        group.display()
    );
    assert!(!group.exists(), "the group is removed after the run");
    assert!(stderr.contains("Isolation\n  cgroup"), "{stderr}");
}

#[test]
fn two_cgroup_runs_of_one_command_started_together_both_run() {
    if !need_root("--cgroup") {
        return;
    }
    let _m = launcher_lock();
    let groups = || -> Vec<String> {
        (cpuset_mounts().iter())
            .flat_map(|m| std::fs::read_dir(m).into_iter().flatten().flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("goset-sleep"))
            .collect()
    };
    // Both take the same first name, goset-sleep: the one that makes it second must take
    // goset-sleep-<pid> (it failed with "File exists" every round).
    for round in 0..10 {
        let runs: Vec<Child> = (0..2)
            .map(|_| {
                clean_command(goset_run_bin())
                    .args([
                        "-q", "-n", "1", "--sample", "0", "--share", "--cgroup", "--",
                    ])
                    .args(["sleep", "0.3"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for run in runs {
            let out = run.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(groups().is_empty(), "round {round}: left {:?}", groups());
    }
}

#[test]
fn a_group_the_task_makes_inside_its_own_is_removed_with_it() {
    if !need_root("--cgroup") {
        return;
    }
    let Some(mount) = cpuset_mounts().into_iter().next() else {
        missing("a cpuset cgroup hierarchy", "a kernel with cgroup cpuset");
        return;
    };
    let _m = launcher_lock();
    let m = mount.display();
    // The task makes goset-sh/child (its cpus and mems copied, for cgroup v1) and moves itself
    // in: the group was left busy (EBUSY) and every restore failed after it.
    let script = format!(
        "g=$(grep -E ':cpuset:|^0::' /proc/self/cgroup | head -1 | cut -d: -f3); \
         d={m}$g/child; mkdir $d || exit 3; \
         cat {m}$g/cpuset.cpus > $d/cpuset.cpus 2>/dev/null; \
         cat {m}$g/cpuset.mems > $d/cpuset.mems 2>/dev/null; \
         echo $$ > $d/cgroup.procs || exit 4; sleep 0.2"
    );
    let out = clean_command(goset_run_bin())
        .args([
            "-n", "1", "--sample", "0", "--share", "--cgroup", "--", "sh", "-c", &script,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("cannot remove"), "{err}");
    let left: Vec<String> = (std::fs::read_dir(&mount).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("goset-sh"))
        .collect();
    assert!(left.is_empty(), "left {left:?}\n{err}");
}
