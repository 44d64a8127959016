//! What a program reads back from the affinity calls: a thread that never asked
//! sees the task's CPUs, so pools size to N; a thread that asked reads back what it asked
//! (`programs/views.c`, rt-tests' `pi_stress`, which quits or hangs otherwise); a forked
//! child inherits the forking thread's view, an exec'd program starts afresh (Python's
//! `os.sched_getaffinity`). The kernel's raw return value and the truth in /proc are kept.

use shim_tests::*;
use std::path::Path;

/// The planned CPUs as a set, in ascending order.
fn planned(plan: &[usize]) -> Vec<usize> {
    let mut cpus = plan.to_vec();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// The raw `syscall(SYS_sched_getaffinity)` result without the shim: the kernel's mask size.
fn bare_raw(prog: &Program) -> String {
    let bare = run(clean_command(prog.path()));
    bare.expect_code(0);
    one(&reports(&bare), "main", 0).field("raw").to_string()
}

fn check_views(outcome: &Outcome, plan: &[usize], raw: &str) {
    outcome.expect_code(0);
    let reports = reports(outcome);
    let cpus = planned(plan);
    let main = one(&reports, "main", 0);
    for how in ["view", "pthread", "syscall"] {
        assert_eq!(
            cpulist(main.field(how)),
            cpus,
            "{how}: a main thread that never asked reads the task's CPUs: {}",
            main.line
        );
    }
    assert_eq!(
        main.field("raw"),
        raw,
        "the kernel's byte count: {}",
        main.line
    );
    assert_eq!(
        main.single_cpu(),
        plan[0],
        "/proc still shows the one CPU the shim applied: {}",
        main.line
    );
    let pins = with_role(&reports, "pin");
    assert_eq!(
        pins.len(),
        cpus.len(),
        "one thread per CPU\n{}",
        outcome.dump()
    );
    let mut asked = Vec::new();
    for r in &pins {
        assert_eq!(
            cpulist(r.field("before")),
            cpus,
            "a new thread inherits the never-asked view: {}",
            r.line
        );
        assert_eq!(r.field("rc"), "0", "{}", r.line);
        let cpu: usize = r.field("asked").parse().expect("asked=N");
        for how in ["readback", "sched", "syscall"] {
            assert_eq!(
                cpulist(r.field(how)),
                vec![cpu],
                "{how}: the thread reads back the CPU it asked for: {}",
                r.line
            );
        }
        assert_eq!(r.field("back_rc"), "0", "{}", r.line);
        assert_eq!(r.field("sched_rc"), "0", "{}", r.line);
        assert_eq!(r.field("raw"), raw, "{}", r.line);
        asked.push(cpu);
    }
    asked.sort_unstable();
    assert_eq!(asked, cpus, "thread i asked for the i-th CPU of its mask");
    // The truth: each on its own planned CPU, whatever it asked for (or, under goset-run, on
    // all of them when born while every slot ran a thread).
    assert_distinct(pins.iter().copied(), plan);
    let child = one(&reports, "child", 0);
    assert_eq!(
        cpulist(child.field("view")),
        vec![*cpus.last().unwrap()],
        "a forked child inherits the view of the thread that forked: {}",
        child.line
    );
    assert_distinct([child], plan);
}

fn views(mode: Mode) {
    let Some(prog) = Program::c("views.c") else {
        return;
    };
    let raw = bare_raw(&prog);
    let run = prog.run(mode, &[], &[]);
    check_views(&run.outcome, &run.plan, &raw);
}

#[test]
fn threads_read_back_their_requests_by_hand() {
    views(Mode::ByHand("0,1"));
}

#[test]
fn threads_read_back_their_requests_on_one_cpu_by_hand() {
    views(Mode::ByHand("1"));
}

#[test]
fn threads_read_back_their_requests_under_goset_run() {
    views(Mode::goset_run(2));
}

#[test]
fn a_one_cpu_task_sees_one_cpu_under_goset_run() {
    // The housekeeper is in the reservation but not the task's: pools must not count it.
    views(Mode::goset_run(1));
}

/// Whether `program` is an executable file on PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// `pi_stress` binds each of its threads and reads the binding back; a mismatch makes the
/// threads quit while main waits on a barrier forever. A fixed number of inversions (not a
/// duration) ends it; the watchdog catches a hang.
const PI_STRESS: [&str; 5] = ["--inversions", "2000", "--groups", "1", "--quiet"];

fn pi_stress_usable() -> bool {
    if !on_path("pi_stress") {
        missing("pi_stress", "apt-get install -y rt-tests");
        return false;
    }
    if !is_root() {
        skip_note("pi_stress needs SCHED_FIFO: run the tests as root");
        return false;
    }
    true
}

#[test]
fn pi_stress_finishes_by_hand() {
    if !pi_stress_usable() {
        return;
    }
    let mut cmd = by_hand("pi_stress", "0,1");
    cmd.args(PI_STRESS);
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert!(
        outcome.stdout.contains("Total inversion performed: 2001"),
        "{}",
        outcome.dump()
    );
}

#[test]
fn pi_stress_finishes_under_goset_run() {
    if !pi_stress_usable() {
        return;
    }
    let (outcome, _) = run_under_goset(2, &[], Path::new("pi_stress"), &PI_STRESS, &[]);
    outcome.expect_code(0);
    assert!(
        outcome.stdout.contains("Total inversion performed: 2001"),
        "{}",
        outcome.dump()
    );
}

const PYTHON: &str = "import os
print('view=' + ','.join(str(c) for c in sorted(os.sched_getaffinity(0))))
for line in open('/proc/self/status'):
    if line.startswith('Cpus_allowed_list:'):
        print('allowed=' + line.split(':')[1].strip())
";

/// Python's `os.sched_getaffinity(0)` is the task's CPUs; `/proc` still shows the one CPU.
fn check_python(outcome: &Outcome, plan: &[usize]) {
    outcome.expect_code(0);
    let expected = format!(
        "view={}\nallowed={}\n",
        planned(plan)
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        plan[0]
    );
    assert_eq!(outcome.stdout, expected, "{}", outcome.dump());
}

fn python_usable() -> bool {
    if !on_path("python3") {
        missing("python3", "apt-get install -y python3");
        return false;
    }
    true
}

#[test]
fn python_sees_the_task_cpus_by_hand() {
    if !python_usable() {
        return;
    }
    let mut cmd = by_hand("python3", "0,1");
    cmd.args(["-c", PYTHON]);
    check_python(&run(cmd), &[0, 1]);
}

#[test]
fn python_sees_the_task_cpus_under_goset_run() {
    if !python_usable() {
        return;
    }
    let (outcome, selection) = run_under_goset(2, &[], Path::new("python3"), &["-c", PYTHON], &[]);
    check_python(&outcome, &selection.task_cpus);
}
