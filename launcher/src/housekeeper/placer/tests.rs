//! The placer on a fake kernel: placing, giving up, demoting, and reading a scribbled table.

use super::affinity::Fake;
use super::handover::logged_claims;
use super::testing::{placer, table, unplaced, WIDE};
use super::*;
use crate::housekeeper::policy::claims::{pending_claims, Mask};

/// The tid of the one thread of [`one_thread_placer`].
const TID: i32 = 101;

/// A placer of two task CPUs, CPU 0 (also the park CPU) and none (so that a thread's mask,
/// the test's, is not a single planned CPU), with thread [`TID`] on the test's mask: the
/// table, the placer, its fake kernel, CPU 0.
fn one_thread_placer(slots: usize) -> (&'static SlotTable, Placer, Fake, usize) {
    let t = table(slots);
    let cpu = 0;
    let (p, fake) = placer(t, vec![cpu, usize::MAX - 1], cpu);
    fake.put(TID, WIDE);
    (t, p, fake, cpu)
}
#[test]
fn places_an_unplaced_thread_and_releases_its_slot_when_it_ends() {
    let (t, mut p, fake, cpu) = one_thread_placer(1);
    p.step(&[unplaced(TID, 1.0)], &[], &Policy::default(), &|_| {
        "w".into()
    });
    assert_eq!(t.live(0), 1, "{:?}", p.failures);
    assert_eq!(p.owned[&TID].spot, Spot::Slot(0));
    assert_eq!(fake.get(TID), Mask::Cpus(vec![cpu]));
    assert_eq!(
        p.records()[0].placed_by,
        Some(goset_plan::log::PlacedBy::Housekeeper)
    );
    p.step(&[], &[TID], &Policy::default(), &|_| "w".into());
    assert_eq!(t.live(0), 0);
    assert_eq!(p.records().last().unwrap().event, Event::Exit);
}

#[test]
fn a_thread_someone_else_moved_is_given_up_and_placed_afresh() {
    let (t, mut p, fake, cpu) = one_thread_placer(1);
    let policy = Policy::default();
    let step = |p: &mut Placer, read: bool| {
        let live = Live {
            read,
            ..unplaced(TID, 1.0)
        };
        p.step(&[live], &[], &policy, &|_| "w".into())
    };
    step(&mut p, true);
    assert_eq!(p.owned[&TID].spot, Spot::Slot(0), "{:?}", p.failures);
    // Someone else (the kernel, another tool) moves it to a CPU outside the plan.
    let elsewhere = 1;
    fake.put(TID, &[elsewhere]);
    // Asleep, so left unread this poll: its mask is checked all the same.
    step(&mut p, false);
    let events: Vec<(&str, Option<usize>)> = (p.records().iter())
        .map(|r| (r.event.as_str(), r.cpu))
        .collect();
    assert_eq!(
        events,
        [
            ("place", Some(cpu)),
            (Event::Moved.as_str(), Some(elsewhere)),
            ("place", Some(cpu))
        ]
    );
    assert_eq!(fake.get(TID), Mask::Cpus(vec![cpu]));
    assert_eq!(t.live(0), 1, "the old claim released, one claim again");
    p.release_all();
}

#[test]
fn a_thread_whose_mask_is_changing_is_placed_once_it_holds_still() {
    let (_, mut p, fake, cpu) = one_thread_placer(1);
    let policy = Policy::default();
    let step = |p: &mut Placer, age_s: f64| {
        let live = Live {
            age_s,
            ..unplaced(TID, 1.0)
        };
        p.step(&[live], &[], &policy, &|_| "w".into())
    };
    // Newborn: given a poll.
    step(&mut p, 0.0);
    assert!(p.records().is_empty());
    // Then sent to the park CPU, its record not yet written (as the shim does with
    // --main-on-housekeeper while the housekeeper holds that CPU).
    fake.put(TID, &[cpu]);
    step(&mut p, 1.0);
    assert!(p.records().is_empty(), "placed while its mask changed");
    // Still unlogged a poll later, with the same mask: nobody's placement, placed.
    step(&mut p, 1.1);
    let events: Vec<&str> = p.records().iter().map(|r| r.event.as_str()).collect();
    assert_eq!(events, ["place"], "{:?}", p.failures);
    p.release_all();
}

#[test]
fn a_runnable_thread_is_never_demoted_and_a_parked_one_that_is_runnable_gets_a_slot_back() {
    let (_, mut p, _fake, _) = one_thread_placer(2);
    let policy = Policy::default();
    let step = |p: &mut Placer, demand: f64, runnable: bool| {
        let live = Live {
            runnable,
            ..unplaced(TID, demand)
        };
        p.step(&[live], &[], &policy, &|_| "w".into());
        p.owned[&TID].spot
    };
    assert_eq!(step(&mut p, 1.0, false), Spot::Slot(0), "{:?}", p.failures);
    // Starved (a vCPU the host did not run): no run time, but runnable. Kept.
    for _ in 0..2 * policy.demote_after {
        assert_eq!(step(&mut p, 0.0, true), Spot::Slot(0));
    }
    // Asleep: demoted after demote_after reads in a row (the starved ones do not count).
    for _ in 1..policy.demote_after {
        assert_eq!(step(&mut p, 0.0, false), Spot::Slot(0));
    }
    step(&mut p, 0.0, false);
    assert_eq!(p.owned[&TID].spot, Spot::Parked);
    // Parked beside others it gets a small share, but it is runnable: a slot again, once
    // that held for promote_after polls.
    for _ in 1..policy.promote_after {
        assert_eq!(step(&mut p, 0.1, true), Spot::Parked);
    }
    assert!(matches!(step(&mut p, 0.1, true), Spot::Slot(_)));
    p.release_all();
}

/// The table as the launcher maps it, after a task wrote `bytes` at `offset` through the
/// run directory's path.
fn scribbled(offset: usize, bytes: &[u8]) -> &'static SlotTable {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    let t = goset_plan::slots::create_file(&path, 2).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(bytes, offset as u64).unwrap();
    t
}

#[test]
fn a_table_the_task_wrote_garbage_into_is_read_within_the_plan() {
    // All 0xff: a slot count of 2^32 - 1 (once a 16 GiB vector of counts) and counts no
    // claims could make, so no slot can be claimed.
    let t = scribbled(0, &[0xff; SlotTable::SIZE]);
    let (mut p, fake) = placer(t, vec![0, usize::MAX - 1], 0);
    fake.put(TID, WIDE);
    p.step(&[unplaced(TID, 1.0)], &[], &Policy::default(), &|_| {
        "w".into()
    });
    assert!(p.owned.is_empty(), "{:?}", p.owned);
    // A slot count of 2000 (past the 1024 the layout holds) over empty slots: the claim
    // stays among the plan's two.
    let t = scribbled(8, &2000u32.to_le_bytes());
    assert_eq!(t.slot_count(), 2000);
    let (mut p, fake) = placer(t, vec![0, usize::MAX - 1], 0);
    fake.put(TID, WIDE);
    p.step(&[unplaced(TID, 1.0)], &[], &Policy::default(), &|_| {
        "w".into()
    });
    assert_eq!(p.owned[&TID].spot, Spot::Slot(0), "{:?}", p.failures);
    p.release_all();
}

/// `-n 2` on two CPUs: the housekeeper shares slot 1's CPU, where it parks threads. The
/// table, the placer, its fake kernel, the park CPU, the other CPU.
fn shared_housekeeper() -> (&'static SlotTable, Placer, Fake, usize, usize) {
    let (hk, other) = (1, 0);
    let t = table(2);
    let (p, fake) = placer(t, vec![other, hk], hk);
    (t, p, fake, hk, other)
}

#[test]
fn burners_take_the_empty_slot_before_the_one_a_sleeper_shares() {
    let (t, mut p, fake, _, _) = shared_housekeeper();
    let (sleeper, first, second) = (101, 102, 103);
    for tid in [sleeper, first, second] {
        fake.put(tid, WIDE);
    }
    p.step(&[unplaced(sleeper, 0.0)], &[], &Policy::default(), &|_| {
        "s".into()
    });
    assert_eq!(p.owned[&sleeper].spot, Spot::Parked, "{:?}", p.failures);
    // The first burner takes slot 0, not the sleeper's slot 1; the second goes beside the
    // sleeper rather than beside the first.
    let live =
        [sleeper, first, second].map(|tid| unplaced(tid, if tid == sleeper { 0.0 } else { 1.0 }));
    p.step(&live[..2], &[], &Policy::default(), &|_| "b".into());
    assert_eq!(p.owned[&first].spot, Spot::Slot(0), "{:?}", p.failures);
    p.step(&live, &[], &Policy::default(), &|_| "b".into());
    assert_eq!(p.owned[&second].spot, Spot::Slot(1), "{:?}", p.failures);
    assert_eq!((t.live(0), t.live(1)), (1, 1));
    p.release_all();
}

#[test]
fn a_roaming_threads_record_is_accounted_for_by_its_slot() {
    let placed = |cpu: Option<usize>, slot: Option<usize>, roams: bool| Live {
        shim_placed: true,
        shim_cpu: cpu,
        shim_slot: slot,
        shim_roams: roams,
        ..unplaced(1, 0.0)
    };
    let pid = std::process::id() as i32;
    let live = [
        placed(Some(4), Some(0), false),
        placed(None, Some(1), true),
        placed(None, None, false),
        unplaced(2, 1.0),
    ];
    assert_eq!(logged_claims(&live, &[4, 6]), vec![(pid, 4), (pid, 6)]);
    // Its record on slot 1 and the main thread's on slot 0: nothing is pending, so a
    // thread with no record on CPU 6 is not taken for the shim's.
    let records = [(pid, 0), (-pid, 1)].into_iter();
    assert!(pending_claims(records, &[], &logged_claims(&live, &[4, 6]), &[4, 6]).is_empty());
}

#[test]
fn threads_that_inherited_the_shared_housekeeper_cpu_are_placed() {
    // A launcher's static child and its threads inherited {housekeeper}.
    let (_, mut p, fake, hk, other) = shared_housekeeper();
    let tids = [101, 102];
    for tid in tids {
        fake.put(tid, &[hk]);
    }
    let live: Vec<Live> = tids.iter().map(|&tid| unplaced(tid, 1.0)).collect();
    p.step(&live, &[], &Policy::default(), &|_| "w".into());
    let mut on: Vec<usize> = tids
        .iter()
        .map(|&tid| {
            assert!(
                matches!(p.owned[&tid].spot, Spot::Slot(_)),
                "{:?}",
                p.failures
            );
            match fake.get(tid) {
                Mask::Cpus(c) if c.len() == 1 => c[0],
                m => panic!("tid {tid}: {m:?}"),
            }
        })
        .collect();
    on.sort_unstable();
    let mut want = vec![other, hk];
    want.sort_unstable();
    assert_eq!(on, want, "each on its own planned CPU");
    p.release_all();
}
