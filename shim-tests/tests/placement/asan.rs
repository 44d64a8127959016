//! AddressSanitizer programs built by gcc (`-fsanitize=address` links libasan dynamically)
//! under goset-run. ASan refuses to start unless its runtime comes first in the library list,
//! and the shim is preloaded; goset-run adds `verify_asan_link_order=0` to `ASAN_OPTIONS` when
//! the shim is the only preload, so the program runs with every thread placed by the shim,
//! started directly or by a shell, and ASan still catches what it should.

use shim_tests::*;

/// `pthreads` built with ASan, run as `sh -c '"$0" "$@"' pthreads <workers>` when `shell`.
fn asan_pthreads(shell: bool, workers: &[usize]) {
    let build = Build::new();
    let Some(prog) = build.asan("pthreads.c", "pthreads") else {
        return;
    };
    for &count in workers {
        let count = count.to_string();
        let prog_text = prog.to_str().expect("UTF-8 temp path");
        let (program, args): (&std::path::Path, Vec<&str>) = if shell {
            ("sh".as_ref(), vec!["-c", r#""$0" "$@""#, prog_text, &count])
        } else {
            (&prog, vec![&count])
        };
        let (outcome, selection) = run_under_goset(2, &[], program, &args, &[]);
        check_threads(&outcome, &selection.task_cpus, count.parse().unwrap());
    }
}

#[test]
fn asan_program_threads_are_placed() {
    asan_pthreads(false, &[1, 3]);
}

#[test]
fn asan_program_started_by_a_shell_has_its_threads_placed() {
    asan_pthreads(true, &[1]);
}

#[test]
fn asan_still_catches_a_heap_overflow() {
    let build = Build::new();
    let Some(prog) = build.asan("asan_overflow.c", "asan_overflow") else {
        return;
    };
    let (outcome, _) = run_under_goset(2, &[], &prog, &[], &[]);
    outcome.expect_code(1);
    assert!(
        outcome.stderr.contains("heap-buffer-overflow") && outcome.stdout.is_empty(),
        "ASan stops the program at the overflow\n{}",
        outcome.dump()
    );
}

#[test]
fn a_users_asan_link_order_check_is_kept() {
    // The check can fail: with the user's own verify_asan_link_order=1, ASan refuses to run
    // behind the shim.
    let build = Build::new();
    let Some(prog) = build.asan("pthreads.c", "pthreads") else {
        return;
    };
    let env = [("ASAN_OPTIONS", "verify_asan_link_order=1")];
    let (outcome, _) = run_under_goset(2, &[], &prog, &["1"], &env);
    outcome.expect_code(1);
    assert!(
        outcome.stderr.contains("ASan runtime does not come first"),
        "{}",
        outcome.dump()
    );
}
