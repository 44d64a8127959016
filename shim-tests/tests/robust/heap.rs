//! The shim allocates nothing on the program's heap: an allocation profiler (heaptrack, a
//! leak checker) counts only the program's own calls. A counting preload
//! (`programs/count_allocs.c`) loaded ahead of the shim sees the same number of heap calls
//! from a program that creates and joins threads with the shim by hand (where the first process
//! also hands its slot table on in the environment) and under goset-run as without it: threads
//! created one after another (each born beside its waiting creator) and threads that live
//! together, each on a slot of its own, so that on two CPUs one is born off its creator's CPU
//! with a mask of its own (glibc allocates for a mask in an attr; the shim sets none there).

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
    // Two CPUs where the machine lends them: a thread then needs a mask of its own.
    let cpus: Vec<String> = own_allowed()
        .iter()
        .take(2)
        .map(|c| c.to_string())
        .collect();
    if cpus.len() < 2 {
        eprintln!("one CPU allowed: no thread is born off its creator's CPU here");
    }
    for args in [&["4"][..], &["4", "together"]] {
        let how = format!("create_join {}", args.join(" "));
        let mut bare = clean_command(&prog);
        bare.args(args);
        let bare = counted(&counter, None, bare, &format!("{how}, bare"));
        let mut hand = clean_command(&prog);
        hand.args(args).env("GOSET_CPUS", cpus.join(","));
        let by_hand = counted(&counter, Some(&shim()), hand, &format!("{how}, by hand"));
        assert_eq!(by_hand, bare, "{how}: heap calls by hand against bare");
        // Under goset-run: the launcher puts the shim in LD_PRELOAD; the counter goes first.
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("report.json");
        let include = cpus.join(",");
        let mut run = goset_run(
            cpus.len(),
            &json,
            &["--share", "--include", &include],
            &prog,
        );
        run.args(args).env("LD_PRELOAD", &counter);
        let output = {
            let _serial = launcher_lock();
            run.output().expect("goset-run runs")
        };
        assert_eq!(
            allocs(&output, &format!("{how}, goset-run")),
            bare,
            "{how}: heap calls under goset-run"
        );
    }
}
