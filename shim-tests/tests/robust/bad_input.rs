//! Bad input: `GOSET_PLAN` pointing to nothing, to garbage, or to a plan whose CPUs the process
//! may not use (and a bad `GOSET_CPUS`). The program runs normally: exactly one `goset:` warning
//! on stderr, stdout untouched, the exit code unchanged, and its threads keep the mask they
//! started with (the shim passes calls through).

use shim_tests::*;
use std::os::unix::process::CommandExt;
use std::path::Path;

/// Runs `pthreads 1 3` with `env` and an optional starting mask, and checks that it ran as
/// without the shim.
fn runs_normally(env: &[(&str, &dyn AsRef<std::ffi::OsStr>)], start_mask: Option<usize>) {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let mut cmd = clean_command(prog.path());
    cmd.env("LD_PRELOAD", shim()).args(["1", "3"]);
    for (key, value) in env {
        cmd.env(key, value);
    }
    let expected_mask = match start_mask {
        Some(cpu) => {
            restrict_to(&mut cmd, cpu);
            vec![cpu]
        }
        None => own_allowed(),
    };
    let outcome = run(cmd);
    outcome.expect_code(3);
    let warning = assert_one_warning(&outcome);
    let reports = reports(&outcome);
    assert_eq!(
        reports.len(),
        2,
        "main and worker report\n{}",
        outcome.dump()
    );
    for r in &reports {
        assert_eq!(
            r.allowed, expected_mask,
            "with an unusable plan the thread keeps its mask ({warning}): {}",
            r.line
        );
    }
}

/// Starts the command on `cpu` only, as `taskset -c <cpu>` would, without running taskset
/// itself under the shim.
fn restrict_to(cmd: &mut std::process::Command, cpu: usize) {
    // SAFETY: the closure runs in the forked child before exec and only calls the
    // async-signal-safe sched_setaffinity on a stack value.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn write_plan_dir(root: &Path, name: &str, text: &[u8]) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plan"), text).unwrap();
    dir
}

/// A CPU this machine does not let the test use.
fn cpu_outside() -> usize {
    own_allowed().into_iter().max().unwrap_or(0) + 6
}

#[test]
fn plan_dir_that_does_not_exist() {
    let tmp = tempfile::tempdir().unwrap();
    runs_normally(&[("GOSET_PLAN", &tmp.path().join("no-such-run"))], None);
}

#[test]
fn plan_dir_with_garbage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_plan_dir(
        tmp.path(),
        "garbage",
        b"\x7fELF\x02\x01\x01\0 this is not a plan\ncpus = lots\n",
    );
    runs_normally(&[("GOSET_PLAN", &dir)], None);
}

#[test]
fn plan_path_is_a_garbage_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plan-file");
    std::fs::write(&file, b"garbage garbage\n\0\xff\xfe").unwrap();
    runs_normally(&[("GOSET_PLAN", &file)], None);
}

#[test]
fn plan_with_a_bad_cpu_list() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_plan_dir(tmp.path(), "bad-list", b"goset-plan 1\ncpus 1-x\n");
    runs_normally(&[("GOSET_PLAN", &dir)], None);
}

#[test]
fn plan_with_cpus_outside_the_machine() {
    let tmp = tempfile::tempdir().unwrap();
    let text = format!("goset-plan 1\ncpus {}\n", cpu_outside());
    let dir = write_plan_dir(tmp.path(), "outside", text.as_bytes());
    runs_normally(&[("GOSET_PLAN", &dir)], None);
}

#[test]
fn plan_with_cpus_outside_a_taskset_mask() {
    let allowed = own_allowed();
    if allowed.len() < 2 {
        skip_note(&format!(
            "needs two allowed CPUs, this process has {allowed:?}"
        ));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Like `taskset -c <a> prog` with a plan that names only <b>.
    let text = format!("goset-plan 1\ncpus {}\n", allowed[1]);
    let dir = write_plan_dir(tmp.path(), "masked", text.as_bytes());
    runs_normally(&[("GOSET_PLAN", &dir)], Some(allowed[0]));
}

#[test]
fn goset_cpus_outside_the_machine() {
    let cpus = cpu_outside().to_string();
    runs_normally(&[("GOSET_CPUS", &cpus)], None);
}

#[test]
fn goset_cpus_garbage() {
    runs_normally(&[("GOSET_CPUS", &"one,two")], None);
}

#[test]
fn bad_plan_with_libgomp_binding() {
    // libgomp pins the main thread from its constructor, before the shim has read the plan.
    let Some(prog) = Program::gomp("omp.c") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_plan_dir(tmp.path(), "garbage", b"not a plan\n");
    let mut cmd = clean_command(prog.path());
    cmd.env("LD_PRELOAD", shim())
        .env("GOSET_PLAN", &dir)
        .env("OMP_NUM_THREADS", "2")
        .env("OMP_PROC_BIND", "true");
    cmd.arg("3");
    let outcome = run(cmd);
    outcome.expect_code(3);
    assert_one_warning(&outcome);
    assert_eq!(
        with_role(&reports(&outcome), "omp").len(),
        2,
        "both OpenMP threads ran\n{}",
        outcome.dump()
    );
}
