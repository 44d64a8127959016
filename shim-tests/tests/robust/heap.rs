//! The shim allocates nothing on the program's heap: an allocation profiler (heaptrack, a
//! leak checker) counts only the program's own calls. A counting preload
//! (`programs/count_allocs.c`) loaded ahead of the shim sees the same number of heap calls
//! from a program that creates and joins threads with the shim by hand (where the first process
//! also hands its slot table on in the environment) and under goset-run as without it. The plan
//! has one CPU, so no thread is born with a mask of its own: glibc's
//! `pthread_attr_setaffinity_np`, which the shim calls for such a birth, makes two small heap
//! calls of its own (freed with the attr), which the shim cannot avoid short of giving up birth
//! placement (docs/shim.md).

use shim_tests::*;
use std::path::Path;
use std::process::Command;

/// The "allocs N" line the counting preload writes at exit.
fn allocs(output: &std::process::Output, how: &str) -> u64 {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{how}: {:?}\n{stderr}",
        output.status
    );
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("allocs ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{how}: no count on stderr:\n{stderr}"))
}

fn counted(counter: &Path, preload_more: Option<&Path>, mut cmd: Command, how: &str) -> u64 {
    let mut preload = counter.display().to_string();
    if let Some(shim) = preload_more {
        preload = format!("{preload} {}", shim.display());
    }
    cmd.env("LD_PRELOAD", preload);
    allocs(&cmd.output().expect("runs"), how)
}

#[test]
fn the_shim_makes_no_heap_call_in_the_program() {
    let build = Build::new();
    let (Some(counter), Some(prog)) = (
        build.c_with(&["-shared", "-fPIC"], "count_allocs.c", "libcount.so"),
        build.c("create_join.c", "create_join"),
    ) else {
        return;
    };
    let cpu = own_allowed()[0];
    let bare = counted(&counter, None, clean_command(&prog), "bare");
    let mut hand = clean_command(&prog);
    hand.env("GOSET_CPUS", cpu.to_string());
    let by_hand = counted(&counter, Some(&shim()), hand, "by hand");
    assert_eq!(by_hand, bare, "heap calls by hand against bare");
    // Under goset-run: the launcher puts the shim in LD_PRELOAD; the counter goes first.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut run = goset_run(1, &json, &["--share"], &prog);
    run.env("LD_PRELOAD", &counter);
    let output = {
        let _serial = launcher_lock();
        run.output().expect("goset-run runs")
    };
    assert_eq!(
        allocs(&output, "goset-run"),
        bare,
        "heap calls under goset-run"
    );
}
