//! Open MPI: `goset-run -n 2 -- mpirun -np 2 ./rank`. Each rank's main thread is on its own
//! planned CPU; mpirun's threads and the MPI helper threads take no slot: they are confined to
//! the reservation and run on the housekeeper CPU. On this 2-CPU machine the housekeeper shares
//! a task CPU, so "no slot" shows as: helpers on the housekeeper only, never on the other CPU;
//! mpirun's main thread, a launcher, roams every slot's CPU there (parked on a CPU the task
//! computes on, a launcher that computes would double up with it), and it takes no slot.
//!
//! By hand, mpirun's ranks keep the cores mpirun bound them to: `multi/by_hand_tree.rs`.

use shim_tests::*;

#[test]
fn ranks_on_own_cpus_helpers_on_the_housekeeper_under_goset_run() {
    let Some(rank) = Program::mpi("mpi_rank.c") else {
        return;
    };
    let mut args: Vec<&str> = Vec::new();
    if is_root() {
        args.extend(["--allow-run-as-root", "--oversubscribe"]);
    }
    // Shared memory and self only: no network needed.
    args.extend(["--mca", "btl", "self,vader", "-np", "2", rank.path_str()]);
    let mpirun = std::path::PathBuf::from("mpirun");
    let (outcome, selection) = run_under_goset(2, &[], &mpirun, &args, &[]);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let plan = &selection.task_cpus;
    let reservation = selection.reservation();
    let housekeeper = selection
        .housekeeper
        .expect("the selection names a housekeeper");

    let ranks = with_role(&reports, "rank");
    assert_eq!(ranks.len(), 2, "two ranks report\n{}", outcome.dump());
    assert_distinct(ranks.iter().copied(), plan);

    let rank_pids: Vec<u32> = ranks.iter().map(|r| r.pid).collect();
    for t in with_role(&reports, "rank-thread") {
        assert!(
            rank_pids.contains(&t.pid),
            "a thread of an unknown rank: {}",
            t.line
        );
        assert!(
            t.allowed.iter().all(|c| reservation.contains(c)),
            "rank thread outside the reservation {reservation:?}: {}",
            t.line
        );
        if t.tid != t.pid {
            assert_eq!(
                t.allowed,
                vec![housekeeper],
                "an MPI helper thread must run on the housekeeper only: {}",
                t.line
            );
        }
    }
    let launcher = with_role(&reports, "launcher-thread");
    assert!(
        !launcher.is_empty(),
        "the ranks listed mpirun's threads\n{}",
        outcome.dump()
    );
    for t in launcher {
        assert!(
            t.allowed.iter().all(|c| reservation.contains(c)),
            "mpirun thread outside the reservation {reservation:?}: {}",
            t.line
        );
        // The launcher's main thread roams the slots' CPUs when the housekeeper shares one of
        // them (the shim's launcher_set); its other threads stay on the housekeeper.
        let parked = if t.tid == t.pid && plan.contains(&housekeeper) {
            let mut slots = plan.clone();
            slots.sort_unstable();
            slots
        } else {
            vec![housekeeper]
        };
        assert_eq!(
            t.allowed, parked,
            "mpirun's threads take no slot and run on the housekeeper: {}",
            t.line
        );
    }
}

#[test]
fn mpirun_of_two_goset_runs_gives_each_rank_its_own_cpu() {
    // `mpirun -np 2 goset-run -n 1 -- ./rank`: one launcher per rank, started together; the
    // bookings keep them apart (mpirun's own binding is off, so only goset separates them).
    let Some(rank) = Program::mpi("mpi_rank.c") else {
        return;
    };
    let mut cmd = clean_command("mpirun");
    if is_root() {
        cmd.args(["--allow-run-as-root", "--oversubscribe"]);
    }
    cmd.args([
        "--bind-to",
        "none",
        "--mca",
        "btl",
        "self,vader",
        "-np",
        "2",
    ])
    .arg(goset_run_bin())
    .args(["-q", "-n", "1", "--sample", "0", "--"])
    .arg(rank.path());
    let _serial = launcher_lock();
    let outcome = run(cmd);
    outcome.expect_code(0);
    let reports = reports(&outcome);
    let ranks = with_role(&reports, "rank");
    assert_eq!(ranks.len(), 2, "two ranks report\n{}", outcome.dump());
    let cpus: Vec<&Vec<usize>> = ranks.iter().map(|r| &r.allowed).collect();
    assert!(
        cpus.iter().all(|a| a.len() == 1) && cpus[0] != cpus[1],
        "each rank on a CPU of its own: {cpus:?}\n{}",
        outcome.dump()
    );
}
