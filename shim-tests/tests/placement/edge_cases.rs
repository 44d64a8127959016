//! Edge cases of the affinity hooks and thread exit (`programs/edge_cases.c`): a bad mask
//! pointer gets the kernel's EFAULT (not a crash in the shim), a main thread that calls
//! `pthread_exit` gives its slot back, and a vfork child's own request is not taken for its
//! parent's.

use shim_tests::*;

/// Runs `edge_cases <mode>` by hand under the shim with `cpus` and checks it exited 0.
fn by_hand_run(prog: &Program, mode: &str, cpus: &str) -> (Outcome, Vec<Report>) {
    let run = prog.run(Mode::ByHand(cpus), &[mode], &[]);
    run.outcome.expect_code(0);
    let reports = run.reports();
    (run.outcome, reports)
}

#[test]
fn a_bad_mask_pointer_gets_efault_as_without_the_shim() {
    let Some(prog) = Program::c("edge_cases.c") else {
        return;
    };
    let mut bare = clean_command(prog.path());
    bare.arg("efault");
    let bare = run(bare);
    bare.expect_code(0);
    let bare_reports = reports(&bare);
    let expected = one(&bare_reports, "main", 0);
    let efault = libc::EFAULT.to_string();
    for call in ["sched", "syscall", "pthread"] {
        assert_eq!(
            expected.field(call),
            efault,
            "bare {call}: {}",
            expected.line
        );
    }
    let (outcome, reports) = by_hand_run(&prog, "efault", "0,1");
    let main = one(&reports, "main", 0);
    for call in ["sched", "syscall", "pthread", "partial"] {
        assert_eq!(
            main.field(call),
            expected.field(call),
            "{call} under the shim must answer as the kernel does\nbare: {}\n{}",
            expected.line,
            outcome.dump()
        );
    }
    assert_eq!(
        main.single_cpu(),
        0,
        "the main thread stays on slot 0: {}",
        main.line
    );
}

#[test]
fn pthread_exit_and_cancellation_unwind_through_the_shims_start_routine() {
    let Some(prog) = Program::c("edge_cases.c") else {
        return;
    };
    // Both unwind with glibc's unwinder through the shim's trampoline frame, which needs its
    // unwind tables and nothing of the shim's own (statically linked) unwinder.
    let (outcome, reports) = by_hand_run(&prog, "cancel", "0,1");
    let main = one(&reports, "main", 0);
    for (field, value) in [("exit", "42"), ("cancelled", "1"), ("cleaned", "2")] {
        assert_eq!(
            main.field(field),
            value,
            "{field}: {}\n{}",
            main.line,
            outcome.dump()
        );
    }
}

#[test]
fn a_main_thread_that_calls_pthread_exit_gives_its_slot_back() {
    let Some(prog) = Program::c("edge_cases.c") else {
        return;
    };
    // Slots: CPU 0 (main), CPU 1 (worker 1), CPU 1. Once the main thread is gone, slot 0 is
    // the least loaded, so worker 2 lands on CPU 0; were it still held, on slot 2 (CPU 1).
    let (outcome, reports) = by_hand_run(&prog, "main_exit", "0,1,1");
    assert_eq!(reports.len(), 3, "three reports\n{}", outcome.dump());
    let main = one(&reports, "main", 0);
    let first = one(&reports, "worker", 1);
    let second = one(&reports, "worker", 2);
    assert_eq!(main.single_cpu(), 0, "{}", main.line);
    assert_eq!(first.single_cpu(), 1, "{}", first.line);
    assert_eq!(
        first.field("zombie"),
        "1",
        "the main thread ended: {}",
        first.line
    );
    assert_eq!(
        second.single_cpu(),
        0,
        "the main thread's slot was released at pthread_exit: {}",
        second.line
    );
}

#[test]
fn a_vfork_child_sets_its_own_mask() {
    let Some(prog) = Program::c("edge_cases.c") else {
        return;
    };
    // "0,0": a child taken for a thread of the task would get CPU 0, not the CPU it asked for.
    for cpus in ["0,1", "0,0"] {
        let (outcome, reports) = by_hand_run(&prog, "vfork", cpus);
        let main = one(&reports, "main", 0);
        for call in ["vfork_sched", "vfork_syscall"] {
            assert_eq!(
                main.field(call),
                "0",
                "GOSET_CPUS={cpus}: a vfork child asking for CPU {} must get it\n{}",
                main.field("asked"),
                outcome.dump()
            );
        }
        // Then the parent asks for that CPU itself: it is still the main thread, on slot 0.
        assert_asked_elsewhere(main, "sched_setaffinity", 0);
        assert_eq!(
            main.single_cpu(),
            0,
            "GOSET_CPUS={cpus}: the parent stays on slot 0 after its vfork children: {}",
            main.line
        );
    }
}

#[test]
fn a_seccomp_filter_that_kills_is_never_tripped() {
    let Some(prog) = Program::c("edge_cases.c") else {
        return;
    };
    // Installed by the program (the shim sees the seccomp call) and inherited across exec
    // (the shim finds it at start): either way its answer must not use process_vm_readv.
    for mode in ["seccomp", "seccomp_exec"] {
        let (outcome, reports) = by_hand_run(&prog, mode, "0,1");
        let main = one(&reports, "main", 0);
        assert_eq!(main.field("rc"), "0", "{mode}: {}", outcome.dump());
        assert_eq!(
            main.single_cpu(),
            0,
            "{mode}: the main thread stays on slot 0: {}",
            main.line
        );
    }
}

#[test]
fn under_a_sandbox_that_forbids_sched_setaffinity_threads_are_still_created() {
    let Some(prog) = Program::c("edge_cases.c") else {
        return;
    };
    // One CPU: each worker is born on its creator's CPU, which it inherits, with no mask of
    // its own to set (and no warning). Two: the worker born on the other CPU needs a mask the
    // sandbox refuses; it runs unplaced, with one warning.
    for (cpus, warned) in [("0", false), ("0,1", true)] {
        let (outcome, reports) = by_hand_run(&prog, "no_setaffinity", cpus);
        let main = one(&reports, "main", 0);
        assert_eq!(
            main.field("failed"),
            "0",
            "GOSET_CPUS={cpus}: {}",
            outcome.dump()
        );
        for id in [1, 2] {
            one(&reports, "worker", id);
        }
        let warnings = outcome.stderr.matches("cannot place a new thread").count();
        assert_eq!(
            warnings,
            usize::from(warned),
            "GOSET_CPUS={cpus}: {}",
            outcome.dump()
        );
        if !warned {
            assert!(
                !outcome.stderr.contains("goset: "),
                "GOSET_CPUS={cpus}: {}",
                outcome.dump()
            );
            for id in [1, 2] {
                assert_eq!(one(&reports, "worker", id).single_cpu(), 0);
            }
        }
    }
}
