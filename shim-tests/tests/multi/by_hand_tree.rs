//! The shim by hand across a process tree: the first shimmed process makes the slot table and
//! hands it on (`GOSET_SLOTS`), so sibling processes spread over the CPUs as under goset-run;
//! a process that a tool bound inside the set before it started (`taskset`, `mpirun`) keeps
//! its binding; and a program started without the shim (`sudo`, an empty environment) gets
//! every CPU of the set rather than the one its parent's thread was given.

use shim_tests::*;

/// The two CPUs every test uses, in plan order: `(a, b)`; `None` (with a note) on one CPU.
fn two_cpus() -> Option<(usize, usize)> {
    let allowed = own_allowed();
    match allowed[..] {
        [a, b, ..] => Some((a, b)),
        _ => {
            skip_note("needs two CPUs");
            None
        }
    }
}

#[test]
fn sibling_processes_started_by_hand_take_different_cpus() {
    let (Some(prog), Some((a, b))) = (Program::c("pthreads.c"), two_cpus()) else {
        return;
    };
    // Before the table was handed on, each process made its own and both took slot 0.
    let p = prog.path_str();
    let mut cmd = by_hand("sh", &format!("{a},{b}"));
    cmd.args(["-c", &format!("{p} 0 & {p} 0 & wait")]);
    let outcome = run(cmd);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let mains = with_role(&reports, "main");
    assert_eq!(mains.len(), 2, "two processes report\n{}", outcome.dump());
    assert_ne!(mains[0].pid, mains[1].pid);
    let cpus: Vec<usize> = mains.iter().map(|r| r.single_cpu()).collect();
    assert!(
        cpus.contains(&a) && cpus.contains(&b),
        "each process's main thread on a CPU of its own: {cpus:?}\n{}",
        outcome.dump()
    );
}

#[test]
fn processes_bound_inside_the_set_keep_their_binding_by_hand() {
    let (Some(prog), Some((a, b))) = (Program::c("pthreads.c"), two_cpus()) else {
        return;
    };
    // The first process asks for the set's second CPU, the other for its first: the reverse
    // of the order the shim would give them, so a replaced binding shows.
    let p = prog.path_str();
    let mut cmd = by_hand("sh", &format!("{a},{b}"));
    let script = format!(
        "taskset -c {b} {p} 1 > \"$TMP_B\" & taskset -c {a} {p} 1 > \"$TMP_A\" & wait; \
         cat \"$TMP_B\" \"$TMP_A\""
    );
    let dir = tempfile::tempdir().unwrap();
    cmd.env("TMP_A", dir.path().join("a"))
        .env("TMP_B", dir.path().join("b"));
    cmd.args(["-c", &script]);
    let outcome = run(cmd);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    assert_eq!(
        reports.len(),
        4,
        "two processes of two threads\n{}",
        outcome.dump()
    );
    let first = reports[0].pid;
    for r in &reports {
        let bound = if r.pid == first { b } else { a };
        assert_eq!(
            r.single_cpu(),
            bound,
            "every thread of a process stays on the CPU taskset bound it to\n{}",
            outcome.dump()
        );
    }
}

#[test]
fn mpirun_ranks_by_hand_keep_the_cpus_mpirun_bound_them_to() {
    let (Some(rank), Some((a, b))) = (Program::mpi("mpi_rank.c"), two_cpus()) else {
        return;
    };
    // Plan order b, a: rank 0, which mpirun binds to the first core (a), would be moved to
    // slot 0 (b) by a shim that replaced the binding, onto rank 1's CPU.
    let mut cmd = by_hand("mpirun", &format!("{b},{a}"));
    if is_root() {
        cmd.args(["--allow-run-as-root", "--oversubscribe"]);
    }
    cmd.args([
        "--bind-to",
        "core",
        "--mca",
        "btl",
        "self,vader",
        "-np",
        "2",
    ])
    .arg(rank.path());
    let outcome = run(cmd);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let ranks = with_role(&reports, "rank");
    assert_eq!(ranks.len(), 2, "two ranks report\n{}", outcome.dump());
    let cpus: Vec<usize> = ranks.iter().map(|r| r.single_cpu()).collect();
    assert_ne!(
        cpus[0],
        cpus[1],
        "each rank on the core mpirun bound it to\n{}",
        outcome.dump()
    );
}

/// `exec_bare MODE pthreads 1`: the parent holds slot 0; the program it starts without the
/// shim must run on both CPUs, not on the slot its forked child (or the parent) was given.
fn started_without_the_shim(mode: &str) {
    let (Some(parent), Some(prog), Some((a, b))) = (
        Program::c("exec_bare.c"),
        Program::c("pthreads.c"),
        two_cpus(),
    ) else {
        return;
    };
    let mut cmd = by_hand(parent.path(), &format!("{a},{b}"));
    cmd.args([mode, prog.path_str(), "1"]);
    let outcome = run(cmd);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    assert_eq!(
        one(&reports, "parent", 0).single_cpu(),
        a,
        "{}",
        outcome.dump()
    );
    for role in ["main", "worker"] {
        let r = one(&reports, role, 0);
        let mut allowed = r.allowed.clone();
        allowed.sort_unstable();
        let mut set = vec![a, b];
        set.sort_unstable();
        assert_eq!(
            allowed,
            set,
            "a {mode}'d program without the shim runs on every CPU of the set\n{}",
            outcome.dump()
        );
    }
}

#[test]
fn a_program_execd_without_the_shim_gets_every_cpu() {
    started_without_the_shim("execve");
}

#[test]
fn a_program_spawned_without_the_shim_gets_every_cpu() {
    started_without_the_shim("spawn");
}

#[test]
fn sudo_under_the_shim_by_hand_runs_its_command_on_every_cpu() {
    let (Some(prog), Some((a, b))) = (Program::c("pthreads.c"), two_cpus()) else {
        return;
    };
    if !is_root() {
        skip_note("sudo -u nobody needs root");
        return;
    }
    if std::process::Command::new("sudo")
        .arg("-V")
        .output()
        .is_err()
    {
        missing("sudo", "apt-get install -y sudo");
        return;
    }
    // sudo drops LD_PRELOAD; its forked child held the other CPU.
    let mut cmd = by_hand("sudo", &format!("{a},{b}"));
    cmd.args(["-u", "nobody", prog.path_str(), "1"]);
    let outcome = run(cmd);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    assert_eq!(
        reports.len(),
        2,
        "main and worker report\n{}",
        outcome.dump()
    );
    for r in &reports {
        assert_eq!(
            r.allowed.len(),
            2,
            "sudo's command runs on both CPUs\n{}",
            outcome.dump()
        );
    }
}
