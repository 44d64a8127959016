//! Unit tests of the plan file.

use super::*;

#[test]
fn places_survive_the_plan_file() {
    let cpus = [2, 4, 6, 0, 3, 5, 7, 1];
    let mut plan = Plan::new(&cpus, None, cpus.iter().copied().collect()).unwrap();
    let places: Vec<Place> = cpus
        .iter()
        .map(|&c| {
            [
                c as u16 / 4,
                c as u16 / 4,
                c as u16 / 4,
                c as u16 / 2,
                c as u16 / 2,
            ]
        })
        .collect();
    plan.set_places(&places);
    plan.per_process = 4;
    let text = plan.to_text();
    assert!(
        text.contains("\nnode 2,0-1,3;4-7\n") || text.contains("\nnode 0-3;4-7\n"),
        "{text}"
    );
    let back = Plan::parse(text.as_bytes()).unwrap();
    assert_eq!(back.per_process, 4);
    let d = |p: &Plan, a: usize, b: usize| crate::level::distance(&p.place(a), &p.place(b));
    for a in 0..8 {
        for b in 0..8 {
            assert_eq!(d(&back, a, b), d(&plan, a, b), "slots {a} {b}");
        }
    }
    // Slot 0 is CPU 2, whose sibling CPU 3 is slot 4.
    assert_eq!(back.siblings(0).collect::<Vec<_>>(), [4]);
    // A plan without cores: no siblings; a CPU in no group is a group of its own.
    let bare = Plan::parse(b"goset-plan 1\ncpus 0,1,2\nnode 0-1\n").unwrap();
    assert_eq!(bare.siblings(0).count(), 0);
    assert_eq!(crate::level::distance(&bare.place(0), &bare.place(1)), 1);
    assert_eq!(crate::level::distance(&bare.place(0), &bare.place(2)), 2);
    assert!(Plan::parse(b"goset-plan 1\ncpus 0,1\nnode 0;x\n").is_err());
}

#[test]
fn goset_itself_is_recognised_by_executable() {
    assert!(is_goset_program(b"/work/target/release/goset-run"));
    assert!(is_goset_program(b"/usr/bin/goset"));
    assert!(is_goset_program(b"goset"));
    assert!(!is_goset_program(b"/usr/bin/gosetx"));
}

#[test]
fn the_cpus_hash_depends_on_the_cpus_and_their_order() {
    let hash = |cpus: &[usize]| {
        let reservation = cpus.iter().copied().collect();
        Plan::new(cpus, None, reservation).unwrap().cpus_hash()
    };
    assert_eq!(hash(&[0, 1]), hash(&[0, 1]));
    assert_ne!(hash(&[0, 1]), hash(&[1, 0]));
    assert_ne!(hash(&[0, 1]), hash(&[0, 1, 2]));
    assert_ne!(hash(&[0]), 0, "0 is an unstamped table");
}

#[test]
fn round_trips_through_text() {
    let mut plan = Plan::new(
        &[3, 1, 2],
        Some(0),
        crate::cpulist::parse_set(b"0-3").unwrap(),
    )
    .unwrap();
    plan.skip = 0x5;
    plan.main_on_housekeeper = true;
    plan.pidns = 4026531836;
    assert!(plan.set_log_path(b"/tmp/x.log"));
    let text = plan.to_text();
    let back = Plan::parse(text.as_bytes()).unwrap();
    assert_eq!(back.cpus().collect::<Vec<_>>(), vec![3, 1, 2]);
    assert_eq!(back.housekeeper, Some(0));
    assert_eq!(back.reservation.to_string(), "0-3");
    assert_eq!(back.skip, 5);
    assert!(back.main_on_housekeeper);
    assert_eq!(back.pidns, 4026531836);
    assert_eq!(back.log_path(), Some(&b"/tmp/x.log"[..]));
}

#[test]
fn defaults_reservation_to_cpus_and_housekeeper() {
    let plan = Plan::parse(
        b"goset-plan 1\n  # comment\ncpus 4,2\nhousekeeper 7\nfuture x\nlog /tmp/a#b.log\n",
    )
    .unwrap();
    assert_eq!(plan.reservation.to_string(), "2,4,7");
    assert_eq!(plan.cpu_of_slot(0), Some(4));
    assert_eq!(plan.cpu_of_slot(2), None);
    assert_eq!(plan.log_path(), Some(&b"/tmp/a#b.log"[..]));
    assert!(!plan.clone().set_log_path(b"/tmp/x "));
}

#[test]
fn rejects_garbage() {
    assert_eq!(Plan::parse(b"\x7fELF").unwrap_err(), PlanError::NotAPlan);
    assert_eq!(
        Plan::parse(b"goset-plan 1\n").unwrap_err(),
        PlanError::NoCpus
    );
    assert!(matches!(
        Plan::parse(b"goset-plan 1\ncpus 1-x\n").unwrap_err(),
        PlanError::BadValue("cpus", _)
    ));
    assert!(matches!(
        Plan::parse(b"goset-plan 1\ncpus 1\nskip 0xzz\n").unwrap_err(),
        PlanError::BadValue("skip", None)
    ));
    let mut plan = Plan::EMPTY;
    plan.set_with_cpus(b"2,4-6").unwrap();
    assert_eq!(plan.slot_count(), 4);
}

#[test]
fn in_place_builders_replace_what_was_there() {
    let mut plan = Plan::parse(b"goset-plan 1\ncpus 7,5\nhousekeeper 1\nskip 3\nlog /x\n").unwrap();
    let set = crate::cpulist::parse_set(b"2-3").unwrap();
    plan.set_from_set(&set).unwrap();
    assert_eq!(plan.cpus().collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(
        (plan.housekeeper, plan.skip, plan.log_path()),
        (None, 0, None)
    );
    assert_eq!(plan.reservation, set);
    assert_eq!(plan.set_from_set(&CpuSet::new()), Err(PlanError::NoCpus));
    plan.set_with_cpus(b"4").unwrap();
    assert_eq!(plan.cpus().collect::<Vec<_>>(), vec![4]);
    plan.parse_into(b"goset-plan 1\ncpus 1\n").unwrap();
    assert_eq!(plan.reservation.to_string(), "1");
}

#[test]
fn rank_blocks_survive_the_plan_file() {
    let cpus = [3, 1, 2, 0];
    let mut plan = Plan::new(&cpus, None, cpus.iter().copied().collect()).unwrap();
    assert!(plan.ranks.set(2, &[(0, vec![0, 1]), (1, vec![2, 3])]));
    let text = plan.to_text();
    assert!(
        text.contains("\ngpus 2\nrank_blocks 0:1,3;1:0,2\n"),
        "{text}"
    );
    let back = Plan::parse(text.as_bytes()).unwrap();
    assert_eq!(back.ranks.gpus(), 2);
    assert_eq!(
        (0..4).map(|s| back.ranks.of_slot(s)).collect::<Vec<_>>(),
        [0, 0, 1, 1]
    );
    assert_eq!(back.ranks.gpu_of(1), Some(1));
    // Before the cpus line, blocks have no slots to name.
    assert!(Plan::parse(b"goset-plan 1\nrank_blocks 0:0\ncpus 0\n").is_err());
    assert!(!Plan::parse(b"goset-plan 1\ncpus 0\n")
        .unwrap()
        .ranks
        .given());
}
