//! `--steer` with the machine's real IRQs: off the task CPU for the run and back after, also
//! when two runs end in either order.

use crate::irqbalance::*;
use crate::machine::*;
use crate::running::*;
use shim_tests::*;

#[test]
fn steered_irqs_leave_the_task_cpu_for_the_run_and_come_back_after() {
    if !irq_affinity_shown() {
        return;
    }
    let Some(bench) = bench("--steer", false, false) else {
        return;
    };
    let (probe, snapshot) = (&bench.probe, &bench.snapshot);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut run = start(
        &["-n", "1", "--steer", "--json", report.to_str().unwrap()],
        probe.path(),
        &[],
        &[],
    );
    let ready = run.ready();
    let during = read_irqs();
    let main_cpu = status_field(ready.pid, ready.pid, "Cpus_allowed_list:");
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    let r = json(&report);
    let task: Vec<usize> = task_cpus(&r);
    assert_eq!(main_cpu, task[0].to_string(), "the task ran on its CPU");
    let refused: Vec<String> = r["isolation"]["steer"]["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| pair[0].as_u64().unwrap().to_string())
        .collect();
    for (irq, aff) in &during {
        let cpus = cpulist(aff);
        if refused.contains(irq) {
            continue;
        }
        assert!(
            !cpus.contains(&task[0]),
            "irq {irq} was on task CPU {} during the run: {aff}\n{stderr}",
            task[0]
        );
    }
    let applied = r["isolation"]["steer"]["applied"].as_u64().unwrap();
    let moved = (snapshot.0.iter())
        .filter(|(irq, before)| during.get(*irq) != Some(before))
        .count() as u64;
    assert_eq!(applied, moved, "the report counts the IRQs that moved");
    assert_eq!(read_irqs(), snapshot.0, "every IRQ's affinity is as before");
    assert!(stderr.contains("irqbalance  absent") || stderr.contains("irqbalance  held"));
}

#[test]
fn two_steer_runs_ended_in_either_order_leave_every_irq_as_found() {
    if !irq_affinity_shown() {
        return;
    }
    let Some(irqbalance) = irqbalance_program() else {
        return missing("irqbalance", "apt-get install irqbalance");
    };
    let Some(bench) = bench("--steer", false, false) else {
        return;
    };
    let daemon = Irqbalance::start(irqbalance);
    let pid = daemon.0.id();
    let found = read_irqs();
    for first_out in [0, 1] {
        // Two runs on the two CPUs (--share: this machine has no third for a housekeeper).
        let mut runs: Vec<Running> = (0..2)
            .map(|_| {
                let mut r = start(
                    &["-n", "1", "--steer", "--share"],
                    bench.probe.path(),
                    &[],
                    &[],
                );
                r.ready();
                r
            })
            .collect();
        assert_eq!(state_of(pid), Some('T'), "irqbalance held while both run");
        let (code, _, stderr) = runs.remove(first_out).finish();
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            state_of(pid),
            Some('T'),
            "irqbalance still held while the other steers\n{stderr}"
        );
        let (code, _, stderr) = runs.remove(0).finish();
        assert_eq!(code, 0, "{stderr}");
        assert!(
            matches!(state_of(pid), Some('S' | 'R' | 'D')),
            "irqbalance runs again after the last\n{stderr}"
        );
        // irqbalance itself may move IRQs once it runs again: compare before it does much.
        let after = read_irqs();
        let changed: Vec<(&String, &String, Option<&String>)> = (found.iter())
            .filter(|(irq, aff)| after.get(*irq) != Some(*aff))
            .map(|(irq, aff)| (irq, aff, after.get(irq)))
            .collect();
        assert!(
            changed.is_empty(),
            "first out: run {first_out}: IRQs not as found: {changed:?}"
        );
    }
    drop(daemon);
}
