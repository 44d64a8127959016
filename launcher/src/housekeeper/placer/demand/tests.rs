//! Unit tests of the demand rule carried out.

use super::super::affinity::{Affinity, Fake};
use super::super::testing::{ran, table, unplaced};
use super::*;
use crate::housekeeper::policy::activity::Activity;
use crate::housekeeper::policy::claims::Mask;

#[test]
fn a_compute_thread_on_a_slower_kind_takes_a_free_slot_of_a_faster_one() {
    // Slot 0 on a P-core (CPU 0), slot 1 on an E-core (CPU 1, 0.7 of it); park on CPU 2.
    let t = table(2);
    let fake = Fake::default();
    let speed = BTreeMap::from([(0, 1000), (1, 700)]);
    let mut p = Placer::new(t, vec![0, 1], 2, speed, None, Box::new(fake.clone()));
    let pid = std::process::id() as i32;
    let tid = pid + 1;
    // The shim placed a worker on slot 1; slot 0's thread has ended.
    t.claim_at(goset_plan::slots::label(pid, false), 1).unwrap();
    fake.put(tid, &[1]);
    let worker = Live {
        shim_placed: true,
        shim_slot: Some(1),
        shim_cpu: Some(1),
        ..unplaced(tid, 1.0)
    };
    let policy = Policy {
        spread_busy: true,
        ..Policy::default()
    };
    // Busy at one poll only: it stays (a change of demand, not one reading).
    p.step(&[worker], &[], &policy, &|_| "w".into());
    assert_eq!(fake.get(tid), Mask::Cpus(vec![1]), "{:?}", p.failures);
    // Busy at the next too: it takes the P-core's slot, and the log says why.
    p.step(&[worker], &[], &policy, &|_| "w".into());
    assert_eq!(fake.get(tid), Mask::Cpus(vec![0]), "{:?}", p.failures);
    let why = p
        .records()
        .last()
        .and_then(|r| r.reason.clone())
        .unwrap_or_default();
    assert!(why.contains("faster kind"), "{why}");
    p.release_all();
}

#[test]
fn a_launcher_that_computes_leaves_the_housekeeper_cpu_for_a_free_slot() {
    // Two slots on CPUs 0 and 1; the housekeeper on CPU 2, where the shim parks launchers.
    let t = table(2);
    let fake = Fake::default();
    let mut p = Placer::new(
        t,
        vec![0, 1],
        2,
        BTreeMap::new(),
        None,
        Box::new(fake.clone()),
    );
    let pid = std::process::id() as i32;
    // A compute thread busy on slot 0; a shell's main thread parked, its record on slot 0.
    let (worker, shell) = (pid + 1, pid);
    t.claim_at(goset_plan::slots::label(pid, false), 0).unwrap();
    let record = t
        .claim_among(goset_plan::slots::label(pid, false), 2)
        .unwrap();
    fake.put(worker, &[0]);
    fake.put(shell, &[2]);
    let computing = Live {
        shim_placed: true,
        shim_slot: Some(0),
        shim_cpu: Some(0),
        ..unplaced(worker, 1.0)
    };
    let launcher = Live {
        pid: shell,
        shim_placed: true,
        shim_cpu: Some(2),
        shim_launcher: true,
        ..unplaced(shell, 1.0)
    };
    let policy = Policy {
        spread_busy: true,
        ..Policy::default()
    };
    let idle = Live {
        activity: ran(0.0),
        demand: 0.0,
        ..launcher
    };
    // Parked and waiting: it stays.
    p.step(&[computing, idle], &[], &policy, &|_| "sh".into());
    assert_eq!(fake.get(shell), Mask::Cpus(vec![2]), "{:?}", p.failures);
    // Computing at one poll (a moment of work at start): it stays.
    p.step(&[computing, launcher], &[], &policy, &|_| "sh".into());
    assert_eq!(fake.get(shell), Mask::Cpus(vec![2]), "{:?}", p.failures);
    // Computing at the next too: it takes the slot no busy thread holds, record and thread.
    p.step(&[computing, launcher], &[], &policy, &|_| "sh".into());
    assert_eq!(fake.get(shell), Mask::Cpus(vec![1]), "{:?}", p.failures);
    assert_eq!(fake.get(worker), Mask::Cpus(vec![0]));
    let label = goset_plan::slots::label(pid, false);
    let slots: Vec<usize> = t.records().filter(|r| r.0 == label).map(|r| r.1).collect();
    assert!(
        slots.contains(&1),
        "the record moved to slot 1: {slots:?} (was {record:?})"
    );
    let why = p
        .records()
        .last()
        .and_then(|r| r.reason.clone())
        .unwrap_or_default();
    assert!(why.contains("launcher computes"), "{why}");
    // Computing on: it stays where it was seated, with no further move (the tree walk reports
    // a moved thread's CPU as the shim's).
    let moves = p.records().len();
    let seated = Live {
        shim_cpu: Some(1),
        ..launcher
    };
    p.step(&[computing, seated], &[], &policy, &|_| "sh".into());
    assert_eq!(
        p.records().len(),
        moves,
        "seated once: {:?}",
        p.records().last()
    );
    assert_eq!(fake.get(shell), Mask::Cpus(vec![1]), "{:?}", p.failures);
    // Waiting again: back to the housekeeper CPU, its record given back.
    let idle = Live {
        shim_cpu: Some(1),
        ..idle
    };
    p.step(&[computing, idle], &[], &policy, &|_| "sh".into());
    assert_eq!(fake.get(shell), Mask::Cpus(vec![2]), "{:?}", p.failures);
    assert_eq!(
        t.records().filter(|r| r.0 == label).count(),
        0,
        "record given back"
    );
    p.release_all();
}

#[test]
fn a_widened_threads_cpus_follow_the_threads_that_compute() {
    // Three slots on CPUs 0-2, the housekeeper on CPU 3.
    let t = table(3);
    let fake = Fake::default();
    let mut p = Placer::new(
        t,
        vec![0, 1, 2],
        3,
        BTreeMap::new(),
        None,
        Box::new(fake.clone()),
    );
    let pid = std::process::id() as i32;
    let (rank, worker) = (pid + 1, pid + 2);
    t.claim_at(goset_plan::slots::label(pid, false), 0).unwrap();
    t.claim_at(goset_plan::slots::label(pid, false), 2).unwrap();
    fake.put(rank, &[0]);
    fake.put(worker, &[2]);
    // A rank's main thread yielding in MPI_Init: many short runs, all slept.
    let turns = Activity {
        ran: 0.3,
        runs: 3000,
        run_ns: 30_000_000,
        voluntary: 3000,
        involuntary: 0,
        ran_on: Some(0),
    };
    let waiting = Live {
        shim_placed: true,
        shim_slot: Some(0),
        shim_cpu: Some(0),
        activity: turns,
        demand: 0.3,
        ..unplaced(rank, 0.3)
    };
    let sleeping = Live {
        shim_placed: true,
        shim_slot: Some(2),
        shim_cpu: Some(2),
        activity: ran(0.0),
        demand: 0.0,
        ..unplaced(worker, 0.0)
    };
    let policy = Policy {
        spread_busy: true,
        ..Policy::default()
    };
    // Two polls of turns: it runs on every slot's CPU where nothing computes.
    p.step(&[waiting, sleeping], &[], &policy, &|_| "rank".into());
    p.step(&[waiting, sleeping], &[], &policy, &|_| "rank".into());
    assert_eq!(
        fake.get(rank),
        Mask::Cpus(vec![0, 1, 2]),
        "{:?}",
        p.failures
    );
    // Its worker starts computing on slot 2: that CPU leaves the rank's set.
    let computing = Live {
        activity: ran(1.0),
        demand: 1.0,
        ..sleeping
    };
    p.step(&[waiting, computing], &[], &policy, &|_| "rank".into());
    assert_eq!(fake.get(rank), Mask::Cpus(vec![0, 1]), "{:?}", p.failures);
    p.release_all();
}
