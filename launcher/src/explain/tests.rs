use super::read::{IrqNames, TaskTime};
use super::*;
use crate::fsroot::FsRoot;
use crate::noise::tests::Spinner;
use crate::noise::{parse_interrupts, parse_softirqs};

const INT_BEFORE: &str = "           CPU0       CPU1
 36:          0      47877 PCI-MSIX-0000:00:06.0   1-edge      virtio2-input.0
LOC:      14523      14824   Local timer interrupts
";
const SOFT_BEFORE: &str = "                    CPU0       CPU1
          TIMER:       4466       3902
         NET_RX:          7       1000
";

fn task(pid: u32, comm: &str, kernel: bool, ticks: u64, cpu: usize) -> TaskTime {
    TaskTime {
        pid,
        tid: pid,
        comm: comm.into(),
        kernel,
        ticks,
        cpu,
    }
}

fn reading(interrupts: &str, softirqs: &str, tasks: Vec<TaskTime>) -> Reading {
    let names = IrqNames {
        actions: "virtio2-input.0".into(),
        driver: Some("virtio-pci".into()),
    };
    Reading {
        interrupts: Some(parse_interrupts(interrupts).unwrap()),
        softirqs: Some(parse_softirqs(softirqs).unwrap()),
        tasks,
        irq_names: [("36".to_string(), names)].into(),
    }
}

#[test]
fn names_the_top_sources_of_each_cpu_and_advises() {
    let before = reading(
        INT_BEFORE,
        SOFT_BEFORE,
        vec![
            task(900, "agent", false, 100, 1),
            task(15, "kworker/0:1", true, 7, 0),
        ],
    );
    let after = reading(
        &INT_BEFORE
            .replace("47877", "48877")
            .replace("14523      14824", "15523      14924"),
        &SOFT_BEFORE.replace("4466       3902", "4716       3952"),
        vec![
            task(900, "agent", false, 110, 1),
            task(15, "kworker/0:1", true, 9, 0),
            task(1200, "newborn", false, 1, 1),
        ],
    );
    let e = explain(&before, &after, Duration::from_secs(1));
    let (c0, c1) = (&e[&0], &e[&1]);
    // CPU 1: the agent's 10 ticks of a second, then the IRQ line, with its names.
    assert_eq!(c1.tasks[0].comm, "agent");
    assert!((c1.tasks[0].cpu_pct - 10.0).abs() < 1e-9);
    assert_eq!(
        c1.tasks[1].comm, "newborn",
        "a thread born in the window counts whole"
    );
    assert_eq!(c1.irqs[0].irq, "36");
    assert_eq!((c1.irqs[0].per_s, c1.irqs[0].steerable), (1000.0, true));
    assert_eq!(c1.irqs[0].driver.as_deref(), Some("virtio-pci"));
    assert_eq!(c1.irqs[1].name, "Local timer interrupts");
    assert_eq!(c1.softirqs[0].kind, "TIMER");
    assert!(
        c1.softirqs.iter().all(|s| s.kind != "NET_RX"),
        "no change, no source"
    );
    let advice = c1.advice.as_deref().unwrap();
    assert!(
        advice.contains("agent (pid 900)") && advice.contains("taskset -a -p -c"),
        "{advice}"
    );
    // CPU 0: a kernel thread's 2%, a timer at 1000/s.
    assert!(c0.tasks[0].kernel);
    assert!(c0
        .advice
        .as_deref()
        .unwrap()
        .contains("isolcpus=domain,managed_irq,0"));
    let text = render(c1);
    assert!(
        text.contains("    tasks: agent (pid 900) 10.0%, newborn (pid 1200) 1.0%\n"),
        "{text}"
    );
    assert!(text.contains("    irqs: 36 virtio2-input.0 [virtio-pci] 1000/s steerable, LOC Local timer interrupts 100/s\n"), "{text}");
    assert!(text.ends_with(&format!("    advice: {advice}\n")));
}

#[test]
fn advice_for_a_steerable_irq_and_for_the_tick_where_no_thread_is_busy() {
    let before = reading(INT_BEFORE, SOFT_BEFORE, Vec::new());
    let after = reading(
        &INT_BEFORE
            .replace("47877", "47977")
            .replace("14523      14824", "15523      14825"),
        SOFT_BEFORE,
        Vec::new(),
    );
    let e = explain(&before, &after, Duration::from_secs(1));
    assert!(e[&1]
        .advice
        .as_deref()
        .unwrap()
        .starts_with("IRQ 36 (virtio2-input.0) is steerable: goset-run --steer"));
    assert_eq!(
        e[&0].advice.as_deref(),
        Some("the timer tick runs: nohz_full=0 stops it while one task runs there")
    );
}

#[test]
fn names_the_process_that_keeps_a_cpu_of_this_machine_busy_and_its_irqs() {
    let online = (FsRoot::default().read("/sys/devices/system/cpu/online")).unwrap_or_default();
    if online.trim() != "0-1" && !online.trim().starts_with("0-") {
        return; // needs CPUs 0 and 1
    }
    let child = std::process::Command::new("taskset")
        .args(["-c", "1", "sh", "-c", "while :; do :; done"])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("taskset (util-linux) runs the busy loop");
    let spinner = Spinner(child);
    let pid = spinner.0.id();
    // Wait until taskset has become the pinned shell (it execs it), bounded.
    for _ in 0..100 {
        let comm = FsRoot::default()
            .read(&format!("/proc/{pid}/comm"))
            .unwrap_or_default();
        if comm.trim() == "sh" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = sample(&FsRoot::default(), Duration::from_millis(500));
    let c1 = &e[&1];
    let text = render(c1);
    // Other work on a shared machine takes its share of CPU 1 too, but a loop pinned there
    // runs in every tick it is given.
    let spin = (c1.tasks.iter())
        .find(|t| t.pid == pid)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(spin.comm, "sh");
    assert!(spin.cpu_pct >= 10.0, "{text}");
    assert!(text.contains(&format!("sh (pid {pid})")), "{text}");
    assert!(!c1.irqs.is_empty(), "CPU 1's interrupts are named: {text}");
    assert!(
        c1.irqs
            .iter()
            .any(|i| i.irq == "LOC" || i.irq.starts_with("IPI") || i.per_s > 0.0),
        "{text}"
    );
}
