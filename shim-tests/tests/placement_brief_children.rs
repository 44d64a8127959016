//! A creator that spawns brief threads one after another (`programs/brief_children.c`: create,
//! join, repeat). Pinning each to a CPU of its own costs more than it saves: glibc starts the
//! thread stopped and sets its mask from the parent, and every join wakes across CPUs. After
//! three children in a row each ended within a millisecond, before the next was created, the
//! creator's next children are born with its mask, as under a plain mask's wake-affine
//! placement. The first children are placed as any, since one brief thread says nothing of
//! what follows. Masks are read from /proc inside each thread (the kernel's, not the shim's
//! answer).

mod common;
use common::*;

const CHILDREN: usize = 50;

/// The main thread's mask and each child's, from the program's output.
fn masks(out: &Outcome) -> (String, Vec<String>) {
    out.expect_code(0);
    let field = |l: &str| l.split_once("allowed=").map(|(_, m)| m.to_string());
    let main = (out.stdout.lines())
        .find(|l| l.starts_with("main "))
        .and_then(field)
        .unwrap_or_else(|| panic!("no main line\n{}", out.dump()));
    let children: Vec<String> = (out.stdout.lines())
        .filter(|l| l.starts_with("child "))
        .filter_map(field)
        .collect();
    assert_eq!(children.len(), CHILDREN, "{}", out.dump());
    (main, children)
}

#[test]
fn by_hand_a_creator_of_brief_threads_keeps_its_later_children_beside_it() {
    let Some(program) = Program::c("brief_children.c") else {
        return;
    };
    let plan = own_allowed();
    if plan.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let (a, b) = (plan[0], plan[1]);
    let mut cmd = by_hand(program.path(), &format!("{a},{b}"));
    cmd.arg(CHILDREN.to_string());
    let out = run(cmd);
    let (main, children) = masks(&out);
    assert_eq!(main, a.to_string(), "the main thread on the first slot");
    // The first three are placed as any thread: on the slot where nothing runs.
    for (i, m) in children.iter().take(3).enumerate() {
        assert_eq!(m, &b.to_string(), "child {i}\n{}", out.dump());
    }
    // Each of the later ones is beside the main thread, unless a child before it lived a
    // millisecond or more (a loaded machine can stretch one); not every one can have.
    assert!(
        children
            .iter()
            .all(|m| m == &a.to_string() || m == &b.to_string()),
        "{children:?}"
    );
    let beside = children.iter().filter(|m| **m == main).count();
    assert!(
        beside > 0,
        "no child was born beside its creator: {children:?}"
    );
}

#[test]
fn under_goset_run_later_brief_children_share_the_creators_mask() {
    let Some(program) = Program::c("brief_children.c") else {
        return;
    };
    let (out, selection) = run_under_goset(2, &[], program.path(), &[&CHILDREN.to_string()], &[]);
    let (main, children) = masks(&out);
    let beside = children.iter().filter(|m| **m == main).count();
    assert!(beside > 0, "main {main}, children {children:?}");
    for m in &children {
        for cpu in cpulist(m) {
            assert!(
                selection.task_cpus.contains(&cpu),
                "{m} outside {:?}",
                selection.task_cpus
            );
        }
    }
}
