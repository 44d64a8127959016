//! The walk on a made-up `/proc` under a temporary root: which threads it reads, lists, looks
//! up or leaves, as the thread counts, start times, `ns_last_pid` and `children` say.

use super::{Seen, Tree, Walk};
use crate::housekeeper::fake_proc::{process, FakeProc, Thread};
use crate::housekeeper::placer::testing;
use crate::housekeeper::placer::Placer;
use std::time::{Duration, Instant};

/// Process 100 with `count` threads in a made-up `/proc`, followed by a tree, with a placer of
/// one slot that placed nothing.
fn start(count: usize) -> (FakeProc, Placer, Tree, Vec<Thread>) {
    let fake = FakeProc::new();
    let threads = process(100, 1, count);
    threads.iter().for_each(|&t| fake.put(t));
    let (placer, _) = testing::placer(testing::table(1), vec![usize::MAX - 1], usize::MAX - 2);
    let mut tree = Tree::new(Duration::from_millis(100), 0);
    tree.follow(100);
    (fake, placer, tree, threads)
}

/// One walk without a placement log; `all_children`: the once-a-second poll.
fn walk(tree: &mut Tree, fake: &FakeProc, placer: &Placer, all_children: bool) -> Walk {
    let seen = Seen {
        now: Instant::now(),
        boot_s: 10_000.0,
        all_children,
        churning: false,
        log: None,
        deferring: 0,
        placed: placer.placed(),
    };
    tree.walk(&fake.root(), &seen)
}

fn live_tids(w: &Walk) -> Vec<i32> {
    w.live.iter().map(|l| l.tid).collect()
}

#[test]
fn a_thread_count_that_adds_up_is_trusted_and_one_that_does_not_is_listed() {
    let (fake, placer, mut tree, mut threads) = start(2);
    assert_eq!(
        live_tids(&walk(&mut tree, &fake, &placer, false)),
        [100, 101]
    );
    // A third thread in the task directory, but the count still says two: not listed.
    let third = Thread {
        tid: 102,
        ..threads[0]
    };
    fake.put(third);
    assert_eq!(
        live_tids(&walk(&mut tree, &fake, &placer, false)),
        [100, 101]
    );
    // The count says three now: the listing finds it.
    threads.push(third);
    for t in &mut threads {
        t.count = 3;
        fake.put(*t);
    }
    let w = walk(&mut tree, &fake, &placer, false);
    assert_eq!(live_tids(&w), [100, 101, 102]);
    assert!(w.ended.is_empty(), "{:?}", w.ended);
    assert_eq!(tree.order, [100, 101, 102]);
}

#[test]
fn a_pid_reused_by_another_process_ends_the_threads_followed() {
    let (fake, placer, mut tree, threads) = start(2);
    assert_eq!(
        live_tids(&walk(&mut tree, &fake, &placer, false)),
        [100, 101]
    );
    // Another process took pid 100: same count, another start time.
    for t in &threads {
        fake.put(Thread { start: 2000, ..*t });
    }
    let w = walk(&mut tree, &fake, &placer, false);
    assert!(w.live.is_empty(), "{:?}", live_tids(&w));
    assert_eq!(w.ended, [100, 101]);
    assert!(tree.threads.values().all(|t| t.ended));
    assert_eq!(tree.pids().count(), 0, "the new process is not followed");
}

#[test]
fn threads_born_since_the_last_poll_are_looked_up_and_the_rest_wait_for_a_listing() {
    let (fake, placer, mut tree, mut threads) = start(10);
    fake.last_pid(109);
    let all: Vec<i32> = (100..110).collect();
    assert_eq!(live_tids(&walk(&mut tree, &fake, &placer, false)), all);
    // One tid handed out since (110), and a thread below that range (50) that no count
    // accounts for: only the lookup of the born tids runs, and it finds 110 alone.
    let born = Thread {
        tid: 110,
        ..threads[0]
    };
    let stray = Thread {
        tid: 50,
        ..threads[0]
    };
    threads.push(born);
    for t in threads.iter_mut() {
        t.count = 11;
        fake.put(*t);
    }
    fake.put(Thread { count: 11, ..stray });
    fake.last_pid(110);
    let w = walk(&mut tree, &fake, &placer, false);
    assert_eq!(live_tids(&w), (100..111).collect::<Vec<_>>());
    // The once-a-second poll lists every process: the stray thread is found.
    let w = walk(&mut tree, &fake, &placer, true);
    let mut found = vec![50];
    found.extend(100..111);
    assert_eq!(live_tids(&w), found);
}

#[test]
fn the_children_of_a_thread_that_ran_join_the_tree_those_of_a_sleeper_wait() {
    let (fake, placer, mut tree, mut parent) = start(2);
    walk(&mut tree, &fake, &placer, false);
    // The main thread ran and forked 300; the other, asleep, is the parent of 400.
    for (child, parent_tid) in [(300, 100), (400, 101)] {
        process(child, 100, 1).iter().for_each(|&t| fake.put(t));
        fake.children(parent[(parent_tid - 100) as usize], &[child]);
    }
    parent[0].runtime_ns = 5_000_000;
    fake.put(parent[0]);
    let w = walk(&mut tree, &fake, &placer, false);
    assert_eq!(live_tids(&w), [100, 101, 300]);
    assert_eq!(w.visited.iter().copied().collect::<Vec<_>>(), [100, 300]);
    // The once-a-second poll reads every thread's children.
    let w = walk(&mut tree, &fake, &placer, true);
    assert_eq!(live_tids(&w), [100, 101, 300, 400]);
    assert_eq!(tree.pids().collect::<Vec<_>>(), [100, 300, 400]);
}

#[test]
fn a_thread_whose_files_are_gone_ends_and_a_gone_process_is_forgotten() {
    let (fake, placer, mut tree, threads) = start(2);
    walk(&mut tree, &fake, &placer, false);
    fake.end(100, 101);
    fake.put(Thread {
        count: 1,
        ..threads[0]
    });
    let w = walk(&mut tree, &fake, &placer, false);
    assert_eq!((live_tids(&w), w.ended), (vec![100], vec![101]));
    assert!(tree.threads[&101].ended);
    // The whole process reaped.
    fake.end(100, 100);
    fake.reap(100);
    let w = walk(&mut tree, &fake, &placer, false);
    assert_eq!((live_tids(&w), w.ended), (vec![], vec![100]));
    assert_eq!(tree.pids().count(), 0);
}
