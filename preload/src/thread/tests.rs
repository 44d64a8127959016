//! Unit tests of the per-thread state, the registry and the brief-children rule.

use super::*;
use crate::role::Role;

#[test]
fn guard_is_reentrant_safe() {
    let g = Guard::enter();
    assert!(g.is_some());
    assert!(Guard::enter().is_none());
    drop(g);
    assert!(Guard::enter().is_some());
}

#[test]
fn registry_finds_by_tid_and_thread() {
    let p = Placement::unslotted(Role::Helper, Some(3));
    register(999_999, 77, p);
    assert_eq!(find_tid(999_999).map(|k| k.placement), Some(p));
    let k = find_thread(77).unwrap();
    assert_eq!((k.tid, k.placement), (999_999, p));
    let (_, entry) = take_state();
    unregister(entry);
    assert!(find_tid(999_999).is_none());
}

#[test]
fn a_waiting_creator_of_brief_children_one_after_another_keeps_the_next_beside_it() {
    register(999_990, 990, Placement::unslotted(Role::Worker, Some(0)));
    let child = |cell: usize, born: u64| {
        std::thread::spawn(move || {
            set_parent(cell, born);
            ending()
        })
        .join()
        .unwrap()
    };
    // Births stamped an hour ahead end briefly, at the clock's first microsecond long
    // after, however slowly the test runs (and however long the machine has been up);
    // creations are RECHECK_US apart (each reads the creator's CPU time), which is
    // fake: 10 µs a creation while it waits, a second when it computed since the last.
    let hour = 3_600_000_000;
    let base = goset_plan::clock::monotonic_us() + hour;
    let mut cpu = 1;
    let mut besides = Vec::new();
    let mut churning = Vec::new();
    // (the child ends briefly, the creator computed since its previous creation)
    let steps = [
        (true, false),
        (true, false),
        (true, false),
        (true, false),
        (true, true),
        (true, false),
        (false, false),
        (true, false),
    ];
    for (k, (brief, computed)) in steps.into_iter().enumerate() {
        let at = base + k as u64 * RECHECK_US;
        cpu += if computed { 1_000_000 } else { 10 };
        let now_cpu = cpu;
        let birth = child_born(false, at, move || now_cpu);
        assert_ne!(birth.cell, NO_CELL, "a registered thread has a cell");
        besides.push(birth.beside);
        churning.push(birth.churning);
        let ended_briefly = child(birth.cell, if brief { at } else { 1 });
        assert_eq!(ended_briefly, brief, "child {k}");
    }
    // Beside from the fourth child: three brief ones before it, the creator waiting; not
    // after the creator computed; the one after a child that lived long starts over.
    assert_eq!(
        besides,
        [false, false, false, true, false, true, true, false]
    );
    // Its records wait from the fourth child on whether the creator waits or computes.
    assert_eq!(
        churning,
        [false, false, false, true, true, true, true, false]
    );
    // A child still alive when the next is created breaks the streak too, and its late
    // report is lost: it is no longer the latest child.
    let base = base + 10 * RECHECK_US;
    let cell = child_born(false, base, || 5).cell;
    let later = child_born(false, base + 1_000, || 6);
    assert!(!later.beside && !later.churning, "the last child lives");
    assert!(child(cell, base), "it ended briefly all the same");
    for k in 0..4 {
        assert!(
            !child_born(false, base + 2_000 + k, || 7).beside,
            "no brief child since"
        );
    }
    let (_, entry) = take_state();
    unregister(entry);
    assert_eq!(
        child_born(false, base, || 1),
        Birth {
            cell: NO_CELL,
            beside: false,
            churning: false
        },
        "no entry, no cell"
    );
}

#[test]
fn a_waiting_creator_is_checked_again_once_a_recheck_not_at_every_child() {
    register(999_991, 991, Placement::unslotted(Role::Worker, Some(0)));
    let base = goset_plan::clock::monotonic_us() + 3_600_000_000;
    let reads = Cell::new(0u32);
    // Children a hundredth of RECHECK_US apart, each ending briefly; the creator's CPU
    // time grows 1 µs a creation while it waits, all of the interval once it computes,
    // from the 200th child.
    let step = RECHECK_US / 100;
    let mut besides = Vec::new();
    let mut reads_while_waiting = 0;
    for k in 0..400u64 {
        if k == 200 {
            reads_while_waiting = reads.get();
        }
        let at = base + k * step;
        let cpu = if k < 200 {
            1 + k
        } else {
            201 + (k - 200) * step
        };
        let birth = child_born(false, at, || {
            reads.set(reads.get() + 1);
            cpu
        });
        besides.push(birth.beside);
        std::thread::spawn(move || {
            set_parent(birth.cell, at);
            ending()
        })
        .join()
        .unwrap();
    }
    let first = besides.iter().position(|&b| b).expect("beside at last");
    assert_eq!(first, 3, "the fourth child, as above");
    // Beside without a read until RECHECK_US has passed since the reading that found the
    // creator waiting: about one read a hundred children here, not one a child.
    assert!(reads_while_waiting < 8, "{reads_while_waiting} reads");
    // The creator computes from child 200 on: the first reading a recheck on sees it.
    let last = besides.iter().rposition(|&b| b).unwrap();
    assert!((200..=305).contains(&last), "last beside {last}");
    assert!(besides[306..].iter().all(|&b| !b));
    let (_, entry) = take_state();
    unregister(entry);
}

#[test]
fn registry_grows_past_one_chunk() {
    let n = CHUNK + 100;
    let base = 5_000_000;
    let mut entries = Vec::new();
    for i in 0..n {
        let p = Placement::unslotted(Role::Worker, Some(i % 7));
        register(base + i as i32, 1_000_000 + i as libc::pthread_t, p);
        entries.push(take_state().1);
    }
    assert!(entries.iter().any(|&e| e >= CHUNK), "{entries:?}");
    let last = base + n as i32 - 1;
    let k = find_tid(last).unwrap();
    assert_eq!(k.placement.cpu, Some((n - 1) % 7));
    assert_eq!(k.view.get(), None, "a new entry has no view");
    k.view.put(Some(&goset_plan::CpuSet::single(3)));
    let by_thread = find_thread(1_000_000 + n as libc::pthread_t - 1).unwrap();
    assert_eq!(by_thread.tid, last);
    assert_eq!(by_thread.view.get(), Some(goset_plan::CpuSet::single(3)));
    for e in entries {
        unregister(e);
    }
    assert!(find_tid(last).is_none());
}
