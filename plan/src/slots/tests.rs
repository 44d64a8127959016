//! Unit tests of the slot table.

use super::*;

fn table(slots: usize) -> Box<SlotTable> {
    // SAFETY: every field is an atomic integer, for which all-zero bytes are valid.
    let t: Box<SlotTable> = unsafe { Box::new_zeroed().assume_init() };
    t.init(slots);
    t
}

#[test]
fn a_moved_slot_names_its_new_cpu() {
    let t = map(None).unwrap();
    t.init(2);
    assert_eq!(t.moved_cpu(1), None, "the plan's CPU until moved");
    t.move_slot(1, 7);
    assert_eq!((t.moved_cpu(0), t.moved_cpu(1)), (None, Some(7)));
    // Past the table: nothing, no panic.
    t.move_slot(MAX_SLOTS, 3);
    assert_eq!(t.moved_cpu(MAX_SLOTS), None);
}

/// A birth claim that every slot ranks alike and no process is asked about (the shim's claim
/// of a thread with no binding, under a housekeeper).
fn birth(t: &SlotTable, tid: i32, creator: Option<usize>, slots: usize) -> Option<Birth> {
    t.claim_birth_within(tid, made_by(creator), slots, |_| Some(0), |_| false)
}

/// The origin of a thread created by a thread on slot `creator`.
fn made_by(creator: Option<usize>) -> Origin {
    Origin {
        creator,
        ..Origin::default()
    }
}

/// Makes slot `slot`'s latest birth `age_us` older.
fn age_birth(t: &SlotTable, slot: usize, age_us: u64) {
    let v = t.born[slot].load(Ordering::Relaxed);
    let at = (v >> 16).saturating_sub(age_us);
    t.born[slot].store(at << 16 | (v & 0xffff), Ordering::Relaxed);
}

#[test]
fn by_hand_a_new_thread_avoids_its_creator_and_newborns() {
    let t = table(3);
    assert_eq!(t.claim_among(100, 3).unwrap().slot, 0);
    let a = birth(&t, -100, Some(0), 3).unwrap();
    assert_eq!((a.claim.slot, a.roams), (1, false));
    // Slot 1's thread was just born: it runs.
    let b = birth(&t, -100, Some(0), 3).unwrap();
    assert_eq!((b.claim.slot, b.roams), (2, false));
    // Every slot runs a thread: it roams, counted on the fewest live, the lowest index.
    let c = birth(&t, -100, Some(0), 3).unwrap();
    assert_eq!((c.claim.slot, c.claim.shared, c.roams), (0, true, true));
    // A newborn that ended runs no more: slot 2 is empty again and takes the next.
    t.release(&b.claim);
    let d = birth(&t, -100, Some(0), 3).unwrap();
    assert_eq!(d.claim.slot, 2);
    // A thread born long ago may sleep: slot 1's, beside which the next one goes.
    age_birth(&t, 1, NEWBORN_US);
    let e = birth(&t, -100, Some(0), 3).unwrap();
    assert_eq!((e.claim.slot, e.roams), (1, false));
}

#[test]
fn running_counts_come_before_live_counts() {
    assert!(birth_key(1, false, 0, 0, false, 0) > birth_key(0, false, 9, 9, true, 5));
    assert!(birth_key(0, true, 0, 0, false, 0) > birth_key(0, false, 9, 9, true, 5));
    assert_eq!(
        birth_key(1, true, 0, 0, false, 0),
        birth_key(1, false, 0, 0, false, 0)
    );
    assert!(birth_key(0, false, 0, 1, true, 0) < birth_key(0, false, 0, 2, false, 0));
    // Nearer the process first, before the fewest live threads.
    assert!(birth_key(0, false, 1, 0, false, 0) > birth_key(0, false, 0, 5, true, 3));
    // Among slots otherwise alike, the one the thread runs on, before the lowest index.
    assert!(birth_key(0, false, 0, 0, false, 3) < birth_key(0, false, 0, 0, true, 0));
    let t = table(3);
    for tid in [1, 2, 3] {
        t.claim_among(tid, 3).unwrap();
    }
    t.claim_at(4, 2).unwrap();
    // Slot 2 holds two live threads, both asleep; slots 0 and 1 each one that runs.
    t.publish_running(&[1, 1, 0]);
    let b = birth(&t, -1, Some(0), 3).unwrap();
    assert_eq!((b.claim.slot, b.roams), (2, false));
    // Under a housekeeper a newborn runs until the housekeeper watched it: every slot runs a
    // thread.
    assert!(birth(&t, -1, Some(0), 3).unwrap().roams);
    t.publish_running(&[1, 0, 1]);
    assert_eq!(birth(&t, -1, Some(0), 3).unwrap().claim.slot, 1);
}

#[test]
fn a_newborn_runs_until_a_whole_poll_interval_watched_it() {
    let t = table(2);
    t.claim_among(1, 2).unwrap();
    t.publish_running(&[1, 0]);
    let a = birth(&t, -1, Some(0), 2).unwrap();
    assert_eq!((a.claim.slot, a.roams), (1, false));
    // A poll right after its birth (a microsecond clock: not in the same tick), before it
    // ran: it still counts as running.
    std::thread::sleep(std::time::Duration::from_millis(1));
    t.publish_running(&[1, 0]);
    let b = birth(&t, -1, Some(0), 2).unwrap();
    assert!(b.roams, "{b:?}");
    t.release(&b.claim);
    // The next poll watched it for a whole interval: it sleeps, and the next thread goes
    // beside it rather than beside the running creator.
    t.publish_running(&[1, 0]);
    let c = birth(&t, -1, Some(0), 2).unwrap();
    assert_eq!((c.claim.slot, c.claim.shared, c.roams), (1, true, false));
}

#[test]
fn with_a_running_thread_on_every_slot_a_new_thread_roams() {
    let t = table(2);
    t.claim_among(1, 2).unwrap();
    t.claim_among(2, 2).unwrap();
    t.publish_running(&[1, 0]);
    // The creator runs on slot 1: every slot has a running thread.
    let b = birth(&t, -1, Some(1), 2).unwrap();
    assert!(b.roams);
    assert_eq!(t.live(b.claim.slot), 2, "it still counts on a slot");
    // A garbage count is no count: nothing runs there.
    t.running[0].store(u32::MAX, Ordering::Relaxed);
    assert_eq!(t.running(0), 0);
}

#[test]
fn a_thread_that_ends_leaves_no_running_count_behind() {
    let t = table(2);
    t.claim_among(1, 2).unwrap();
    let worker = t.claim_among(-1, 2).unwrap();
    // The last poll saw both run; then the worker ended before the next one.
    t.publish_running(&[1, 1]);
    t.release(&worker);
    assert_eq!(t.running(1), 0, "nothing holds slot 1 now");
    let b = birth(&t, -1, Some(0), 2).unwrap();
    assert_eq!((b.claim.slot, b.roams), (1, false));
    // A slot still held keeps a count up to the threads it holds.
    let c = t.claim_at(-1, 1).unwrap();
    t.publish_running(&[1, 2]);
    t.release(&c);
    assert_eq!(t.running(1), 1);
}

#[test]
fn claims_least_loaded_then_shares() {
    let t = table(2);
    let a = t.claim_among(10, t.slot_count()).unwrap();
    let b = t.claim_among(11, t.slot_count()).unwrap();
    let c = t.claim_among(12, t.slot_count()).unwrap();
    assert_eq!((a.slot, a.shared), (0, false));
    assert_eq!((b.slot, b.shared), (1, false));
    assert_eq!((c.slot, c.shared), (0, true));
    t.release(&b);
    let d = t.claim_among(13, t.slot_count()).unwrap();
    assert_eq!((d.slot, d.shared), (1, false));
    assert_eq!(t.find(12).map(|f| f.1), Some(0));
    assert_eq!(t.find(11), None);
}

#[test]
fn a_claim_at_a_chosen_slot_counts_there_and_steers_the_next_claim() {
    let t = table(2);
    let parked = t.claim_at(20, 0).unwrap();
    assert_eq!((parked.slot, parked.shared), (0, false));
    assert_eq!(t.find(20).map(|f| f.1), Some(0));
    assert_eq!(t.claim_among(21, t.slot_count()).unwrap().slot, 1);
    assert!(t.claim_at(22, 1).unwrap().shared);
    assert!(t.claim_at(23, MAX_SLOTS).is_none());
    t.live[0].store(MAX_THREADS + 1, Ordering::Release);
    assert!(
        t.claim_at(24, 0).is_none(),
        "a count no claims made is left alone"
    );
}

#[test]
fn a_moved_record_counts_at_its_new_slot_until_released() {
    let t = table(2);
    let a = t.claim_at(-5, 0).unwrap();
    let b = t.claim_at(-5, 0).unwrap();
    assert_eq!((t.live(0), t.live(1)), (2, 0));
    let moved = t.move_record(-5, 0, 1).unwrap();
    assert_eq!((t.live(0), t.live(1)), (1, 1));
    assert_eq!(t.record_slot(moved), Some(1));
    assert!(t.move_record(-6, 0, 1).is_none(), "no record of that label");
    assert!(t.move_record(-5, 0, MAX_SLOTS).is_none());
    assert_eq!(
        (t.live(0), t.live(1)),
        (1, 1),
        "a move that failed counts nothing"
    );
    // Whichever thread's record moved, releasing both claims empties both slots.
    t.release(&a);
    t.release(&b);
    assert_eq!((t.live(0), t.live(1)), (0, 0));
    assert_eq!(t.records().count(), 0);
}

#[test]
fn a_newborn_moved_off_its_slot_leaves_it_free_for_the_next_birth() {
    let t = table(2);
    // Published counts: a housekeeper runs, and slot 0's birth is after its last poll.
    t.publish_running(&[0, 0]);
    let born = birth(&t, 7, None, 2).unwrap();
    assert_eq!(born.claim.slot, 0);
    assert!(t.newborn_on(0));
    t.move_record(7, 0, 1).unwrap();
    assert!(!t.newborn_on(0), "the newborn left slot 0");
    // The next birth takes slot 0, free, rather than roam beside a busy slot 1.
    t.running[1].store(1, Ordering::Relaxed);
    let next = birth(&t, 8, None, 2).unwrap();
    assert_eq!((next.claim.slot, next.roams), (0, false));
}

#[test]
fn concurrent_reapers_free_a_record_once() {
    let t = std::sync::Arc::new(*table(1));
    for _ in 0..3 {
        t.claim_among(-42, t.slot_count()).unwrap();
    }
    let survivor = t.claim_among(7, t.slot_count()).unwrap();
    let reapers: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || t.release_all(-42))
        })
        .collect();
    let freed: usize = reapers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(freed, 3);
    assert_eq!(t.live(0), 1, "only the survivor's claim is left");
    assert_eq!(t.find(7).map(|f| f.1), Some(survivor.slot));
}

#[test]
fn a_pool_that_churns_never_stacks_while_a_slot_is_free() {
    let t = std::sync::Arc::new(*table(2));
    // Threads take the table through an Arc; at most two are alive at once.
    let mut held = std::collections::VecDeque::new();
    for tid in 0..1000 {
        if held.len() == 2 {
            let old: Claim = held.pop_front().unwrap();
            t.release(&old);
        }
        let c = t.claim_among(tid, t.slot_count()).unwrap();
        assert!(!c.shared, "thread {tid} shared a slot while one was free");
        held.push_back(c);
    }
    assert_eq!(t.records().count(), 2);
    assert!(t.records_in_use().len() <= 3);
}

#[test]
fn a_claim_finds_the_free_records_wherever_they_are() {
    let t = table(2);
    let claims: Vec<Claim> = (0..MAX_RECORDS as i32)
        .map(|tid| t.claim_at(tid, 0).unwrap())
        .collect();
    assert!(claims.iter().all(|c| c.record.is_some()));
    assert_eq!(t.claim_at(-1, 0).unwrap().record, None, "records ran out");
    // Freed above the point the last search reached, then below it: both are found again.
    t.release(&claims[4000]);
    t.release(&claims[3]);
    assert_eq!(t.claim_at(-2, 1).unwrap().record, Some(3));
    assert_eq!(t.claim_at(-3, 1).unwrap().record, Some(4000));
    // Beside thousands of live records, a churning thread takes the same record back.
    t.release(&claims[2000]);
    for tid in 0..100 {
        let c = t.claim_at(-100 - tid, 1).unwrap();
        assert_eq!(c.record, Some(2000));
        t.release(&c);
    }
}

/// A fresh path for a table file in the temporary directory.
fn table_path(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("goset-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The table as a task's process opens it: by path, read-write.
fn open_as_task(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

#[test]
fn a_file_table_is_shared_between_mappings() {
    use std::os::fd::AsRawFd;
    let path = table_path("slots");
    let launcher = create_file(&path, 3).unwrap();
    let f = open_as_task(&path);
    // What the shim checks before it maps the file.
    let meta = f.metadata().unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.len(), SlotTable::SIZE as u64);
    let a = map(Some(f.as_raw_fd())).unwrap();
    let b = map(Some(f.as_raw_fd())).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(a.is_ready());
    assert_eq!(a.slot_count(), 3);
    a.claim_among(5, a.slot_count()).unwrap();
    assert_eq!(b.live(0), 1);
    assert_eq!(launcher.live(0), 1);
    assert_eq!(b.find(5).map(|f| f.1), Some(0));
}

#[test]
fn a_task_can_neither_shrink_nor_grow_nor_swap_the_launchers_table() {
    let path = table_path("sealed");
    let launcher = create_file(&path, 2).unwrap();
    let f = open_as_task(&path);
    let sealed = |r: std::io::Result<()>| r.unwrap_err().raw_os_error() == Some(libc::EPERM);
    assert!(sealed(f.set_len(0)), "truncated");
    assert!(sealed(f.set_len(2 * SlotTable::SIZE as u64)), "grown");
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"").unwrap();
    std::fs::remove_file(&path).unwrap();
    // The launcher's mapping still reads (a truncated mapped file would be SIGBUS here).
    assert_eq!(
        launcher.live_counts(2).collect::<Vec<_>>(),
        [Some(0), Some(0)]
    );
    assert_eq!(launcher.claim_among(9, 2).map(|c| c.slot), Some(0));
}

/// Writes `bytes` at `offset` of the table the way a task can: through its path.
fn scribble(path: &std::path::Path, offset: usize, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    open_as_task(path)
        .write_all_at(bytes, offset as u64)
        .unwrap();
}

#[test]
fn a_table_full_of_0xff_reads_as_unknown() {
    let path = table_path("ff");
    let t = create_file(&path, 2).unwrap();
    scribble(&path, 0, &[0xff; SlotTable::SIZE]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(t.live_counts(2).collect::<Vec<_>>(), [None, None]);
    assert_eq!(t.claim_among(7, 2), None, "no slot has a real count");
    assert_eq!(t.claim_among(7, t.slot_count()), None);
    // Reading what the shim reads does not panic either.
    assert_eq!(t.find(7), None);
    assert_eq!(t.records().count(), MAX_RECORDS);
    t.release_all(7);
}

#[test]
fn a_slot_count_beyond_the_layout_is_bounded() {
    let path = table_path("count");
    let t = create_file(&path, 2).unwrap();
    let count = core::mem::offset_of!(SlotTable, slot_count);
    scribble(&path, count, &2000u32.to_le_bytes());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(t.slot_count(), 2000);
    // Every slot is empty: the lowest takes the claim, whatever the table's count.
    assert_eq!(t.claim_among(5, t.slot_count()).map(|c| c.slot), Some(0));
    assert_eq!(t.claim_among(6, 2).map(|c| c.slot), Some(1));
    assert_eq!(t.live_counts(usize::MAX).count(), MAX_SLOTS);
}

#[test]
fn a_record_no_claim_wrote_is_skipped() {
    let path = table_path("record");
    let t = create_file(&path, 2).unwrap();
    let records = core::mem::offset_of!(SlotTable, records);
    let used = core::mem::offset_of!(SlotTable, records_used);
    // Label 7 with slot part 0 (a claim writes slot + 1), then a real claim.
    scribble(&path, records, &(7u64 << 32).to_le_bytes());
    scribble(&path, used, &1u32.to_le_bytes());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(t.find(7), None);
    assert_eq!(t.records().count(), 0);
    assert_eq!(t.release_all(7), 0);
    t.claim_among(7, t.slot_count()).unwrap();
    assert_eq!(t.records().collect::<Vec<_>>(), [(7, 0)]);
}

#[test]
fn concurrent_claims_spread_over_slots() {
    let t = std::sync::Arc::new(*table(4));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || t.claim_among(100 + i, t.slot_count()).unwrap())
        })
        .collect();
    let mut slots: Vec<usize> = handles
        .into_iter()
        .map(|h| h.join().unwrap().slot)
        .collect();
    slots.sort();
    assert_eq!(slots, vec![0, 1, 2, 3]);
}

#[test]
fn a_bound_process_claims_only_the_slots_it_accepts() {
    let t = table(3);
    // Slot 0 is free, but the process keeps a binding to slot 2's CPU.
    let a = t
        .claim_birth_within(7, made_by(None), 3, |s| (s == 2).then_some(0), |_| false)
        .unwrap();
    assert_eq!((a.claim.slot, a.roams), (2, false));
    // Its second thread shares that slot (the binding holds), and roams only in name: every
    // slot it accepts runs a thread.
    let b = t
        .claim_birth_within(
            -7,
            made_by(Some(2)),
            3,
            |s| (s == 2).then_some(0),
            |_| false,
        )
        .unwrap();
    assert_eq!((b.claim.slot, b.claim.shared, b.roams), (2, true, true));
    assert_eq!(t.live(0), 0, "the free slot was never taken");
    assert!(t
        .claim_birth_within(-7, made_by(None), 3, |_| None, |_| false)
        .is_none());
}

#[test]
fn a_table_is_stamped_with_the_plan_it_was_made_for() {
    let t = table(2);
    assert!(!t.is_stamped(5), "not stamped");
    t.stamp(5);
    assert!(t.is_stamped(5) && !t.is_stamped(6));
}

#[test]
fn a_block_is_taken_whole_or_not_at_all() {
    let t = table(4);
    assert!(t.take_block(10, 4, |s| s < 2, |_| false));
    assert_eq!(
        (t.owner(0), t.owner(1), t.owner(2)),
        (Some(10), Some(10), None)
    );
    // Overlapping a live process's block: nothing taken.
    assert!(!t.take_block(11, 4, |s| s >= 1, |_| false));
    assert_eq!((t.owner(2), t.owner(3)), (None, None));
    // Its owner ended: the block can be taken over.
    assert!(t.take_block(11, 4, |s| s >= 1, |pid| pid == 10));
    assert_eq!(
        (t.owner(0), t.owner(1), t.owner(3)),
        (Some(10), Some(11), Some(11))
    );
    t.release_block(11);
    assert_eq!((t.owner(0), t.owner(1)), (Some(10), None));
}

#[test]
fn one_process_of_the_task_reaps_at_a_time() {
    let t = table(2);
    assert!(t.reap_due(100_000), "the first look is due");
    assert!(
        !t.reap_due(100_000),
        "another process of the task waits its turn"
    );
    // Once the interval has passed, a process takes the next turn.
    let last = t.reaped_us.load(Ordering::Relaxed);
    t.reaped_us.store(last - 100_000, Ordering::Relaxed);
    assert!(t.reap_due(100_000));
}

#[test]
fn by_hand_a_process_seen_running_keeps_its_slot_to_itself() {
    let t = table(2);
    // A job on slot 0, older than the newborn window; its parent (xargs) on slot 1.
    let job = birth(&t, 100, None, 2).unwrap();
    assert_eq!(job.claim.slot, 0);
    age_birth(&t, 0, NEWBORN_US);
    t.claim_at(200, 1).unwrap();
    age_birth(&t, 1, NEWBORN_US);
    assert_eq!(t.main_holders(0).collect::<Vec<_>>(), vec![100]);
    // The next job is born where the running job is not, though the counts would tie...
    let runs = |s: usize| t.main_holders(s).any(|pid| pid == 100);
    let next = t
        .claim_birth_within(300, made_by(None), 2, |_| Some(0), runs)
        .unwrap();
    assert_eq!((next.claim.slot, next.roams), (1, false));
    // ... and beside it only when nothing tells it runs.
    t.release(&next.claim);
    age_birth(&t, 1, NEWBORN_US);
    let blind = t
        .claim_birth_within(300, made_by(None), 2, |_| Some(0), |_| false)
        .unwrap();
    assert_eq!(blind.claim.slot, 0);
}

#[test]
fn a_record_freed_for_its_label_leaves_no_newborn_behind() {
    let t = table(2);
    // The launcher's claim for the task's main thread, freed when the image it execs is a
    // launcher program (taskset) that holds no slot.
    let first = birth(&t, 42, None, 2).unwrap();
    assert_eq!(first.claim.slot, 0);
    assert_eq!(t.release_all(42), 1);
    let next = birth(&t, 42, None, 2).unwrap();
    assert_eq!(
        next.claim.slot, 0,
        "slot 0 holds no newborn once its record is freed"
    );
}

/// A birth claim among the slots, ranked alike, of a new program that starts on `slot`'s CPU,
/// which its waiting parent holds (`parent_waits`).
fn started_on(t: &SlotTable, tid: i32, slot: usize, parent_waits: bool) -> Claim {
    let origin = Origin {
        here: Some(slot),
        parent_waits,
        ..Origin::default()
    };
    let born = t.claim_birth_within(tid, origin, t.slot_count(), |_| Some(0), |_| false);
    let born = born.expect("a slot");
    assert!(!born.roams, "{born:?}");
    born.claim
}

#[test]
fn a_program_started_by_a_waiting_parent_takes_its_place() {
    let t = table(2);
    // The parent (make) on slot 1, born long ago, sleeping; slot 0 free.
    t.claim_at(100, 1).unwrap();
    // Its new program, started on the parent's CPU, stays there beside its waiting parent
    // rather than moving to the free slot, though that one comes first in the plan.
    let child = started_on(&t, 200, 1, true);
    assert_eq!((child.slot, child.shared), (1, true));
    // A second program while the first runs there (a newborn): the free slot.
    let second = started_on(&t, 300, 1, true);
    assert_eq!((second.slot, second.shared), (0, false));
    t.release(&second);
    t.release(&child);
    // A parent that is not waiting still counts: the free slot.
    let other = started_on(&t, 500, 1, false);
    assert_eq!((other.slot, other.shared), (0, false));
}

#[test]
fn a_process_placing_itself_keeps_the_free_cpu_it_runs_on() {
    let t = table(3);
    // Started on slot 2's CPU, every slot free: slot 2, not the first in the plan.
    let a = started_on(&t, 100, 2, false);
    assert_eq!(a.slot, 2);
    t.release(&a);
    age_birth(&t, 2, NEWBORN_US);
    // Slot 2 holds another process's sleeping thread: a free slot, the plan's first.
    t.claim_at(200, 2).unwrap();
    assert_eq!(started_on(&t, 300, 2, false).slot, 0);
    // Without a preference (a task's first process), the plan's order.
    assert_eq!(birth(&t, 400, None, 3).map(|b| b.claim.slot), Some(1));
}

#[test]
fn a_waiting_parent_seen_in_the_running_counts_is_discounted_once() {
    let t = table(2);
    t.claim_at(100, 1).unwrap();
    // The housekeeper saw the parent run on slot 1 in its last interval, nothing on slot 0.
    t.publish_running(&[0, 1]);
    let child = started_on(&t, 200, 1, true);
    assert_eq!(child.slot, 1, "the parent's count is the child's own");
    // Two threads ran on slot 1: another than the parent computes there.
    t.release(&child);
    t.publish_running(&[0, 2]);
    t.publish_running(&[0, 2]);
    assert_eq!(started_on(&t, 300, 1, true).slot, 0);
}
