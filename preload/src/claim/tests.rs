//! Unit tests of a thread's placement and the slot-table operations around it.

use super::*;

#[test]
fn packs_and_unpacks() {
    let p = Placement {
        role: Role::Worker,
        cpu: Some(1023),
        slot: Some(0),
        record: Some(4095),
        shared: true,
        roams: true,
    };
    assert_eq!(Placement::unpack(p.pack()), p);
    assert_eq!(Placement::UNKNOWN.pack(), 0);
    assert_eq!(Placement::unpack(0), Placement::UNKNOWN);
    let h = Placement::unslotted(Role::Helper, None);
    assert_eq!(Placement::unpack(h.pack()), h);
}

#[test]
fn in_its_block_a_thread_takes_a_slot_only_another_process_holds_rather_than_roam() {
    use goset_plan::Plan;
    let plan = Plan::new(&[0, 1, 2], None, [0, 1, 2].into_iter().collect()).unwrap();
    // The process keeps to slots 0 and 1 (its block).
    let cfg = crate::config::test_config(plan, Some([0, 1].into_iter().collect()));
    let table = cfg.table;
    let me = 4242;
    // Slot 0: a shell the housekeeper placed there (its tid as label) and that ran;
    // slot 1: this process's main thread, running.
    table.claim_at(77, 0).unwrap();
    table.claim_at(me, 1).unwrap();
    table.publish_running(&[1, 1, 0]);
    let p = claim(&cfg, Role::Worker, -me, Some(1), Some(1));
    assert_eq!((p.cpu, p.roams), (Some(0), false), "{p:?}");
    // A second one: every slot of the block holds a thread of this process: it roams.
    let q = claim(&cfg, Role::Worker, -me, Some(1), Some(1));
    assert!(q.roams, "{q:?}");
    assert_eq!(q.birth_set(&cfg), [0, 1].into_iter().collect());
}

#[test]
fn a_roaming_thread_of_a_pinned_creator_starts_off_the_creators_cpu() {
    use goset_plan::Plan;
    let set = |cpus: &[usize]| cpus.iter().copied().collect::<CpuSet>();
    let plan = Plan::new(&[2, 0, 1], None, set(&[0, 1, 2])).unwrap();
    let cfg = crate::config::test_config(plan, None);
    // A live pid: a full table reaps the records of dead processes.
    let me = sys::getpid();
    // The main thread on slot 0 (CPU 2), running, as is slot 1's and slot 2's thread.
    let main = claim(&cfg, Role::Main, me, None, None);
    assert_eq!(main.cpu, Some(2));
    cfg.table.claim_at(-me, 1).unwrap();
    cfg.table.claim_at(-me, 2).unwrap();
    cfg.table.publish_running(&[1, 1, 1]);
    let roamer = claim(&cfg, Role::Worker, -me, Some(0), Some(0));
    assert!(roamer.roams, "{roamer:?}");
    assert_eq!(roamer.first_set(&cfg, &main), (set(&[0, 1]), true));
    // Its children, born roaming from a roaming creator, start where the kernel puts them.
    assert_eq!(roamer.first_set(&cfg, &roamer), (set(&[0, 1, 2]), false));
    // A pinned thread is born on its CPU, whoever creates it.
    let pinned = Placement::unslotted(Role::Worker, Some(1));
    assert_eq!(pinned.first_set(&cfg, &main), (set(&[1]), false));
    // With one slot there is no other CPU to start on.
    let one = Plan::new(&[1], None, set(&[1])).unwrap();
    let cfg = crate::config::test_config(one, None);
    let main = claim(&cfg, Role::Main, me, None, None);
    cfg.table.publish_running(&[1]);
    let roamer = claim(&cfg, Role::Worker, -me, Some(0), Some(0));
    assert!(roamer.roams, "{roamer:?}");
    assert_eq!(roamer.first_set(&cfg, &main), (set(&[1]), false));
}

#[test]
fn a_live_process_is_alive() {
    assert!(alive(sys::getpid()));
    assert!(!alive(i32::MAX - 1));
}

#[test]
fn a_process_starts_in_the_node_no_other_starting_process_needs() {
    use goset_plan::Plan;
    // The uneven guest of the VM tests: nodes of 3, 2 and 1 CPUs (slots 0-2, 3-4 and 5).
    let nodes = [2, 2, 2, 1, 1, 0];
    let mut plan = Plan::new(&[3, 4, 5, 1, 2, 0], None, (0..6).collect()).unwrap();
    let places: Vec<_> = (0..6)
        .map(|s| [nodes[s], 0, nodes[s], s as u16, s as u16])
        .collect();
    plan.set_places(&places);
    let cfg = crate::config::test_config(plan, Some((0..6).collect()));
    // Another process of two threads whose main thread the housekeeper placed on slot 0
    // before its shim took a block: node 2 has room for one more process of two, not two.
    cfg.table.claim_at(684, 0).unwrap();
    let main = claim(&cfg, Role::Main, 683, None, None);
    assert_eq!(main.slot.map(|s| nodes[s]), Some(1), "{main:?}");
    // Once that process holds its block, the room it takes is counted as taken, no more.
    cfg.table.release_all(683);
    assert!(cfg.table.take_block(684, 6, |s| s < 2, |_| false));
    let main = claim(&cfg, Role::Main, 683, None, None);
    assert_eq!(main.slot.map(|s| nodes[s]), Some(1), "{main:?}");
}

/// A configuration of plan `[cpu + 1, cpu]` for a process other than the task's first.
fn one_of_several(cpu: usize) -> Config {
    use goset_plan::Plan;
    let reservation: CpuSet = [cpu, cpu + 1].into_iter().collect();
    let plan = Plan::new(&[cpu + 1, cpu], None, reservation).unwrap();
    let mut cfg = crate::config::test_config(plan, None);
    cfg.near = true;
    cfg
}

#[test]
fn a_new_image_keeps_its_cpu_and_its_waiting_parents_place() {
    // This thread kept to one CPU it may use, so that where it runs is known.
    let allowed = sys::get_affinity(0).expect("this thread's CPUs");
    let cpu = allowed.first().expect("a CPU");
    assert!(sys::set_affinity(0, &CpuSet::single(cpu)) >= 0);
    // Slot 0 on another CPU, free; slot 1 on this one, held by this process's parent (the
    // test harness, which waits for it): the parent's place.
    let cfg = one_of_several(cpu);
    cfg.table.claim_at(sys::getppid(), 1).unwrap();
    let p = claim_image(&cfg, 4243);
    // A thread created by a thread of its own (a creator that runs) is not the parent's work.
    let worker = claim(&cfg, Role::Worker, -4243, Some(1), None);
    // Slot 1 held by another process: the free slot, though on another CPU.
    let taken = one_of_several(cpu);
    taken.table.claim_at(1, 1).unwrap();
    let q = claim_image(&taken, 4243);
    // Both free: the one it runs on, though slot 0 comes first.
    let r = claim_image(&one_of_several(cpu), 4243);
    // The task's first process keeps the plan's order.
    let mut first = one_of_several(cpu);
    first.near = false;
    let f = claim_image(&first, 4243);
    sys::set_affinity(0, &allowed);
    assert_eq!(
        (p.slot, p.cpu, p.shared),
        (Some(1), Some(cpu), true),
        "{p:?}"
    );
    assert_eq!(worker.slot, Some(0), "{worker:?}");
    assert_eq!((q.slot, q.shared), (Some(0), false), "{q:?}");
    assert_eq!((r.slot, r.cpu), (Some(1), Some(cpu)), "{r:?}");
    assert_eq!(f.slot, Some(0), "{f:?}");
}
