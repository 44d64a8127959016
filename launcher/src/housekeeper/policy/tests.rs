//! Unit tests of the placement policy.

use super::*;

/// A thread whose demand held for the polls the policy waits for.
fn v(tid: i32, demand: f64, spot: Option<Spot>, idle_polls: u32) -> View {
    let held = Policy::default().promote_after;
    View {
        tid,
        demand,
        spot,
        idle_polls,
        busy_polls: if demand >= Policy::default().burn {
            held
        } else {
            0
        },
        group: 0,
    }
}

#[test]
fn a_thread_left_on_a_slot_a_block_took_leaves_it() {
    let p = Policy::default();
    // Slot 0 in process 7's block now; a sleeper and a burner of no block still on it.
    let sleeper = v(5, 0.0, Some(Spot::Slot(0)), 0);
    let burner = v(6, 0.9, Some(Spot::Slot(0)), 0);
    let a = decide(&[sleeper, burner], &[2, 0], &[7, 0], None, &p);
    assert_eq!(
        a,
        [Action::Demote { tid: 5 }, Action::Claim { tid: 6, slot: 1 }]
    );
    // With no slot outside blocks, the burner goes to the housekeeper CPU too.
    let a = decide(&[burner], &[1, 0], &[7, 7], None, &p);
    assert_eq!(a, [Action::Demote { tid: 6 }]);
}

#[test]
fn a_burner_takes_a_slot_of_its_own_block_only() {
    let p = Policy::default();
    // Slots 0-1: process 7's block, slot 2 in none. Process 7's burner takes slot 1 (the
    // emptier slot 2 is not its own); a burner of no block takes slot 2.
    let mut mine = v(5, 0.9, None, 0);
    mine.group = 7;
    let other = v(6, 0.9, None, 0);
    let a = decide(&[mine, other], &[2, 1, 0], &[7, 7, 0], None, &p);
    assert_eq!(
        a,
        [
            Action::Claim { tid: 5, slot: 1 },
            Action::Claim { tid: 6, slot: 2 }
        ]
    );
}

#[test]
fn a_parked_thread_busy_for_one_poll_stays_parked() {
    let p = Policy::default();
    let once = View {
        busy_polls: 1,
        ..v(10, 0.9, Some(Spot::Parked), 0)
    };
    assert!(decide(&[once], &[0, 0], &[], None, &p).is_empty());
    let held = v(10, 0.9, Some(Spot::Parked), 0);
    assert_eq!(
        decide(&[held], &[0, 0], &[], None, &p),
        [Action::Claim { tid: 10, slot: 0 }]
    );
}

#[test]
fn burners_take_least_loaded_slots_hungriest_first_sleepers_go_home() {
    let p = Policy::default();
    // Slot 0 holds a shim thread; a Go program: two spinning threads, sysmon, an idle M.
    let threads = [
        v(10, 0.01, None, 0),
        v(11, 0.6, None, 0),
        v(12, 1.0, None, 0),
        v(13, 0.0, None, 0),
    ];
    let a = decide(&threads, &[1, 0, 0], &[], None, &p);
    assert_eq!(
        a,
        vec![
            Action::Park { tid: 10 },
            Action::Park { tid: 13 },
            Action::Claim { tid: 12, slot: 1 },
            Action::Claim { tid: 11, slot: 2 },
        ]
    );
    // More burners than slots: they share, the least loaded first.
    let a = decide(&threads, &[0, 0], &[], None, &p);
    assert_eq!(
        &a[2..],
        &[
            Action::Claim { tid: 12, slot: 0 },
            Action::Claim { tid: 11, slot: 1 }
        ]
    );
    assert!(decide(&[], &[0], &[], None, &p).is_empty());
}

#[test]
fn a_sleeper_that_starts_burning_moves_to_a_slot() {
    let p = Policy::default();
    let a = decide(&[v(5, 0.9, Some(Spot::Parked), 0)], &[1, 0], &[], None, &p);
    assert_eq!(a, vec![Action::Claim { tid: 5, slot: 1 }]);
    let a = decide(&[v(5, 0.1, Some(Spot::Parked), 0)], &[1, 0], &[], None, &p);
    assert!(a.is_empty(), "{a:?}");
}

#[test]
fn an_idle_slot_holder_gives_its_slot_to_a_burner() {
    let p = Policy::default();
    // A static program's main thread took slot 0 while it started, then waits in join;
    // its two workers burn, one of them sharing slot 0.
    let threads = [
        v(1, 0.0, Some(Spot::Slot(0)), 3),
        v(2, 1.0, Some(Spot::Slot(1)), 0),
        v(3, 1.0, Some(Spot::Slot(0)), 0),
    ];
    let a = decide(&threads, &[2, 1], &[], None, &p);
    assert_eq!(a, vec![Action::Demote { tid: 1 }]);
    // Not idle for long enough: it keeps the slot.
    let threads = [v(1, 0.0, Some(Spot::Slot(0)), 2), threads[1], threads[2]];
    assert!(decide(&threads, &[2, 1], &[], None, &p).is_empty());
}

#[test]
fn a_burner_sharing_a_slot_moves_only_when_another_is_emptier_by_two() {
    let p = Policy::default();
    let threads = [v(7, 1.0, Some(Spot::Slot(0)), 0)];
    assert_eq!(
        decide(&threads, &[2, 0], &[], None, &p),
        vec![Action::Claim { tid: 7, slot: 1 }]
    );
    assert!(decide(&threads, &[2, 1], &[], None, &p).is_empty());
    assert!(decide(&threads, &[1, 0], &[], None, &p).is_empty());
}

#[test]
fn with_the_housekeeper_on_a_task_cpu_a_burner_goes_beside_a_sleeper_only_when_it_must() {
    let p = Policy::default();
    // -n 3 on three CPUs, the housekeeper on slot 2's: a static program's main thread held
    // slot 0 while it started and now waits in join; its workers hold slots 1 and 2.
    let threads = [
        v(1, 0.0, Some(Spot::Slot(0)), 3),
        v(2, 1.0, Some(Spot::Slot(1)), 0),
        v(3, 1.0, Some(Spot::Slot(2)), 0),
    ];
    // Parked beside worker 3, the main thread leaves slot 0 empty: 3 moves there.
    assert_eq!(
        decide(&threads, &[1, 1, 1], &[], Some(2), &p),
        vec![Action::Demote { tid: 1 }, Action::Claim { tid: 3, slot: 0 }]
    );
    // Without the shared CPU the parked thread is nobody's neighbour.
    assert_eq!(
        decide(&threads, &[1, 1, 1], &[], None, &p),
        vec![Action::Demote { tid: 1 }]
    );
    // A new sleeper parks first: the burners take the empty slot, then the sleeper's
    // rather than a burner's.
    let fresh = [v(4, 0.0, None, 0), v(5, 1.0, None, 0), v(6, 0.9, None, 0)];
    assert_eq!(
        decide(&fresh, &[0, 0], &[], Some(1), &p),
        vec![
            Action::Park { tid: 4 },
            Action::Claim { tid: 5, slot: 0 },
            Action::Claim { tid: 6, slot: 1 }
        ]
    );
    // Beside a sleeper with every other slot taken, a burner stays.
    let settled = [
        v(4, 0.0, Some(Spot::Parked), 0),
        v(5, 1.0, Some(Spot::Slot(0)), 0),
        v(6, 0.9, Some(Spot::Slot(1)), 0),
    ];
    assert!(decide(&settled, &[1, 1], &[], Some(1), &p).is_empty());
    // A parked burner leaves its share before it looks for the least-loaded slot.
    let parked = [v(7, 1.0, Some(Spot::Parked), 0)];
    assert_eq!(
        decide(&parked, &[1, 0], &[], Some(1), &p),
        vec![Action::Claim { tid: 7, slot: 1 }]
    );
}

fn un(tid: i32, pid: i32, mask: Mask, kin: Kin) -> Unclaimed {
    Unclaimed {
        tid,
        pid,
        mask,
        kin,
    }
}

fn one(cpu: usize) -> Mask {
    Mask::Cpus(vec![cpu])
}

const NONE: &BTreeMap<(i32, usize), u32> = &BTreeMap::new();

#[test]
fn an_inherited_mask_is_no_placement() {
    let other = |tid: i32, cpu: usize| un(tid, 10, one(cpu), Kin::Other);
    // -n 2 on 2 CPUs: task CPUs 1 and 0, the housekeeper shares CPU 0. A static program
    // run by `sh` (moved to CPU 0 by the shim): every thread inherited {0}.
    let threads = [other(10, 0), other(11, 0), other(12, 0)];
    assert_eq!(leave_alone(&threads, NONE, &[0], &[1, 0], 0), [false; 3]);
    // Even alone, {housekeeper} is not a placement of a process the shim is not in.
    assert_eq!(leave_alone(&[other(10, 0)], NONE, &[], &[1, 0], 0), [false]);
    // Two threads inheriting the planned CPU of a main thread the shim placed before it
    // exec'd a static binary: the CPU is the main thread's.
    let threads = [other(11, 1), other(12, 1)];
    assert_eq!(
        leave_alone(&threads, NONE, &[1], &[1, 0], 0),
        [false, false]
    );
    assert_eq!(
        leave_alone(&[other(11, 1)], NONE, &[1], &[1, 0], 0),
        [false]
    );
    // A thread the program pinned itself on a planned CPU of its own is left; a mask of
    // several CPUs, or one outside the plan, is not a placement; an unreadable one is
    // nothing to place.
    let threads = [
        other(20, 1),
        un(21, 10, Mask::Cpus(vec![0, 1]), Kin::Other),
        other(22, 5),
        un(23, 10, Mask::Unknown, Kin::Other),
    ];
    assert_eq!(
        leave_alone(&threads, NONE, &[], &[1, 2], 0),
        [true, false, false, true]
    );
}

#[test]
fn claims_no_logged_thread_accounts_for_are_pending() {
    // Process 10: main (label 10) and two threads (-10) on slot 0, one thread on slot 1;
    // the main thread is logged on CPU 4 (slot 0). The housekeeper's own claim for
    // thread 33 (label 33, slot 1) is not the shim's. A label whose slot is past the
    // plan is nobody's.
    let records = [(10, 0), (-10, 0), (-10, 0), (-10, 1), (33, 1), (-10, 9)];
    let p = pending_claims(records.into_iter(), &[(33, 1)], &[(10, 4)], &[4, 5]);
    assert_eq!(p, BTreeMap::from([((10, 4), 2), ((10, 5), 1)]));
    assert!(pending_claims([(i32::MIN, 0)].into_iter(), &[], &[], &[4]).is_empty());
}

#[test]
fn a_thread_born_on_its_slot_waits_for_its_record_however_long() {
    // -n 2 on 2 CPUs (task CPUs 1 and 0, housekeeper 0). The main thread is logged on
    // CPU 1; two workers were born, one on each CPU, with a claim each, but have not run
    // to write their records. A third thread was cloned raw by the main thread: it
    // inherited {1} and no claim covers it.
    let pending = BTreeMap::from([((10, 1), 1), ((10, 0), 1)]);
    let threads = [
        un(13, 10, one(1), Kin::Shim),
        un(11, 10, one(1), Kin::Shim),
        un(12, 10, one(0), Kin::Shim),
    ];
    assert_eq!(
        leave_alone(&threads, &pending, &[1], &[1, 0], 0),
        [false, true, true],
        "the oldest thread on CPU 1 takes its claim"
    );
    // The task's main thread, born on slot 0 by the launcher's claim before the shim's
    // init has run, takes the claim before any thread that inherited its CPU.
    let pending = BTreeMap::from([((20, 1), 1)]);
    let threads = [
        un(21, 20, one(1), Kin::Other),
        un(20, 20, one(1), Kin::Other),
    ];
    assert_eq!(
        leave_alone(&threads, &pending, &[], &[1, 0], 0),
        [false, true]
    );
    // A thread the shim let roam (every slot ran a thread) is allowed every planned CPU;
    // its claim is on some slot. One claim covers one roaming thread; without a claim, a
    // thread with every planned CPU (a static program's) is placed.
    let pending = BTreeMap::from([((30, 0), 1)]);
    let every = Mask::Cpus(vec![0, 1]);
    let threads = [
        un(31, 30, every.clone(), Kin::Shim),
        un(32, 30, every.clone(), Kin::Shim),
        un(41, 40, every, Kin::Other),
    ];
    assert_eq!(
        leave_alone(&threads, &pending, &[], &[1, 0], 0),
        [true, false, false]
    );
}

#[test]
fn a_fork_and_a_helper_of_a_shim_process_are_the_shims() {
    // A fork that has not run its fork handler yet, whatever its mask; a helper born on
    // the housekeeper CPU (here also a task CPU) in a process the shim is in. The same
    // masks in a static program are inherited.
    let threads = [
        un(30, 30, one(1), Kin::Fork),
        un(31, 31, Mask::Cpus(vec![0, 1]), Kin::Fork),
        un(41, 40, one(0), Kin::Shim),
        un(51, 50, one(0), Kin::Other),
    ];
    assert_eq!(
        leave_alone(&threads, NONE, &[1, 1], &[1, 0], 0),
        [true, true, true, false]
    );
}

mod kin_tests {
    use super::super::*;

    #[test]
    fn a_process_is_the_shims_while_it_runs_what_the_shim_logged_and_so_are_its_forks() {
        let logged = BTreeMap::from([(10, Some("/bin/app".to_string()))]);
        // 11 and 12 fork from 10 and 11; 13 is 10's child that exec'd another program.
        let parents = BTreeMap::from([(10, 1), (11, 10), (12, 11), (13, 10)]);
        let lineage = Lineage {
            logged: &logged,
            parents: &parents,
        };
        let mut exe = |p: i32| match p {
            13 => Some("/bin/other".to_string()),
            1 => Some("/sbin/init".to_string()),
            _ => Some("/bin/app".to_string()),
        };
        assert_eq!(kin_of(10, &lineage, &mut exe), Kin::Shim);
        assert_eq!(kin_of(11, &lineage, &mut exe), Kin::Fork);
        assert_eq!(kin_of(12, &lineage, &mut exe), Kin::Fork);
        assert_eq!(kin_of(13, &lineage, &mut exe), Kin::Other);
        // After an exec, the logged executable no longer is the one it runs.
        let mut exec = |p: i32| (p == 10).then(|| "/bin/new".to_string());
        assert_eq!(kin_of(10, &lineage, &mut exec), Kin::Other);
        assert_eq!(kin_of(11, &lineage, &mut exec), Kin::Other);
    }
}

#[test]
fn a_thread_count_adds_up_with_the_deferred_threads_only() {
    assert!(adds_up(10, 10, 0));
    assert!(adds_up(12, 10, 2) && adds_up(11, 10, 2));
    // One more than the deferred ones: a thread nobody accounts for, to be listed.
    assert!(!adds_up(13, 10, 2));
    // Fewer than known: a known thread ended.
    assert!(!adds_up(9, 10, 5));
}

#[test]
fn a_count_that_does_not_add_up_is_listed_less_often_while_the_task_churns() {
    assert_eq!(listing_wait(false, 3000), MISMATCH_LISTING);
    assert_eq!(listing_wait(true, 20), CHURN_LISTING);
    assert!(CHURN_LISTING > MISMATCH_LISTING);
}

#[test]
fn a_process_with_many_threads_is_listed_less_often() {
    use std::time::Duration;
    assert_eq!(listing_every(0), CHURN_LISTING);
    assert_eq!(listing_every(1000), CHURN_LISTING);
    assert_eq!(listing_every(3000), Duration::from_secs(3));
    assert_eq!(listing_wait(true, 10_000), Duration::from_secs(10));
    assert_eq!(listing_every(usize::MAX), LISTING_PER_THREAD * u32::MAX);
}
