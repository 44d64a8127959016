//! Files the shim is pointed at that it must not trust (`programs/pthreads.c`, `pool.c`): a
//! plan that is a FIFO, a device or a huge file, a slot table that is a FIFO, a log that is a
//! FIFO without a reader or with one that never reads, `/dev/null` as the log; a process that
//! dropped privileges and cannot open the slot table; a setuid program (`AT_SECURE`) with
//! `GOSET_LOG`/`GOSET_PLAN` set. Never a hang, never a crash: one `goset:` warning at most,
//! and the program runs.

use shim_tests::*;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo");
}

/// A run directory whose plan is valid (one slot on the first allowed CPU).
fn plan_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let cpu = own_allowed()[0];
    std::fs::write(
        dir.path().join("plan"),
        format!("goset-plan 1\ncpus {cpu}\n"),
    )
    .unwrap();
    dir
}

/// Runs `pthreads 2` by hand with `env` and checks it ran with one warning naming `why`.
fn warns(prog: &Program, env: &[(&str, &Path)], why: &str) {
    let mut cmd = by_hand(prog.path(), "0");
    cmd.arg("2").envs(env.iter().map(|(k, v)| (*k, *v)));
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert_eq!(with_role(&reports(&outcome), "worker").len(), 2);
    let warning = assert_one_warning(&outcome);
    assert!(warning.contains(why), "expected '{why}': {warning}");
}

#[test]
fn a_plan_that_is_a_fifo_a_device_or_huge_is_refused_at_once() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let fifo = tempfile::tempdir().unwrap();
    mkfifo(&fifo.path().join("plan"));
    warns(&prog, &[("GOSET_PLAN", fifo.path())], "not a regular file");
    let device = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/dev/zero", device.path().join("plan")).unwrap();
    warns(
        &prog,
        &[("GOSET_PLAN", device.path())],
        "not a regular file",
    );
    let huge = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(huge.path().join("plan")).unwrap();
    file.set_len(1 << 30).unwrap();
    warns(&prog, &[("GOSET_PLAN", huge.path())], "too large");
    let slots = plan_dir();
    mkfifo(&slots.path().join("slots"));
    warns(
        &prog,
        &[("GOSET_PLAN", slots.path())],
        "is not a slot table",
    );
}

#[test]
fn a_log_that_is_a_fifo_never_blocks() {
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log");
    mkfifo(&fifo);
    // No reader: the open fails at once.
    warns(&prog, &[("GOSET_LOG", &fifo)], "ENXIO");
    // A reader that never reads: once the pipe is full, records are dropped. 1000 threads
    // log about 2000 records, far more than a pipe holds.
    let Some(pool) = Program::c("pool.c") else {
        return;
    };
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut cmd = by_hand(pool.path(), "0,1");
    cmd.env("GOSET_LOG", &fifo);
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert!(!outcome.stderr.contains("goset:"), "{}", outcome.dump());
    drop(reader);
    // /dev/null, as the benchmark uses it, is a fine log.
    let mut cmd = by_hand(prog.path(), "0,1");
    cmd.arg("2").env("GOSET_LOG", "/dev/null");
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert!(outcome.stderr.trim().is_empty(), "{}", outcome.dump());
}

/// Whether the tests run as root; prints why a test skips otherwise.
fn root_or_skip(test: &str) -> bool {
    if !is_root() {
        skip_note(&format!(
            "{test}: needs root (to drop privileges with setpriv)"
        ));
        return false;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        missing("setpriv", "apt-get install -y util-linux");
        return false;
    }
    true
}

/// `setpriv`'s arguments that make the rest of its command line run as nobody (65534).
const TO_NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];

/// `setpriv` to nobody, running `program 2` with the shim `preload` (through `sh`, so that
/// only the program itself, not setpriv, is preloaded).
fn as_nobody(program: &Path, preload: &Path) -> Command {
    let mut cmd = clean_command("setpriv");
    cmd.args(TO_NOBODY)
        .args(["sh", "-c"])
        .arg(r#"export LD_PRELOAD="$1"; exec "$0" 2"#)
        .arg(program)
        .arg(preload);
    cmd
}

/// A directory anyone may enter, holding a copy of the shim anyone may read.
fn public_shim() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let so = dir.path().join("libgoset.so");
    std::fs::copy(shim(), &so).unwrap();
    std::fs::set_permissions(&so, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, so)
}

#[test]
fn a_slot_table_a_dropped_process_cannot_open_is_named_eacces() {
    if !root_or_skip("a_slot_table_a_dropped_process_cannot_open_is_named_eacces") {
        return;
    }
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let (public, so) = public_shim();
    let exe = public.path().join("pthreads");
    std::fs::copy(prog.path(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run_dir = plan_dir();
    std::fs::set_permissions(run_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let plan = run_dir.path().join("plan");
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o644)).unwrap();
    let slots = run_dir.path().join("slots");
    std::fs::write(&slots, b"root's only").unwrap();
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = as_nobody(&exe, &so);
    cmd.env("GOSET_PLAN", run_dir.path());
    let outcome = run(cmd);
    outcome.expect_code(0);
    let warning = assert_one_warning(&outcome);
    assert!(warning.contains("EACCES"), "{warning}");
}

/// Removes the shim's copy from the system library directory, whatever happens.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The directory this process's libc was loaded from: a trusted one for secure-exec preloads.
fn system_lib_dir() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let libc = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))?;
    Path::new(libc).parent().map(Path::to_path_buf)
}

#[test]
fn a_setuid_program_opens_no_path_from_the_environment() {
    if !root_or_skip("a_setuid_program_opens_no_path_from_the_environment") {
        return;
    }
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let Some(lib_dir) = system_lib_dir() else {
        skip_note("no system library directory found in /proc/self/maps");
        return;
    };
    // Secure-exec preloads must be bare names of setuid libraries in a trusted directory.
    let name = format!("libgoset-secure-test-{}.so", std::process::id());
    let lib = lib_dir.join(&name);
    std::fs::copy(shim(), &lib).unwrap();
    let _remove = Remove(lib.clone());
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let public = tempfile::tempdir().unwrap();
    std::fs::set_permissions(public.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = public.path().join("pthreads");
    std::fs::copy(prog.path(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let log = public.path().join("placement.log");
    let plan = public.path().join("run");
    let mut cmd = as_nobody(&exe, Path::new(&name));
    cmd.env("GOSET_CPUS", "0")
        .env("GOSET_LOG", &log)
        .env("GOSET_PLAN", &plan);
    let outcome = run(cmd);
    outcome.expect_code(0);
    let warning = assert_one_warning(&outcome);
    assert!(warning.contains("secure-exec"), "{warning}");
    // GOSET_CPUS, no path, was used: the shim ran, and placed the threads.
    let reports = reports(&outcome);
    let workers = with_role(&reports, "worker");
    assert_eq!(workers.len(), 2, "{}", outcome.dump());
    assert_on_plan(workers, &[0]);
    assert!(!log.exists(), "GOSET_LOG was created by a setuid program");
    assert!(!plan.exists(), "GOSET_PLAN was created by a setuid program");
}

#[test]
fn as_root_goset_log_does_not_follow_a_link_planted_where_others_can_write() {
    if !is_root() {
        skip_note("as_root_goset_log_...: the link rule is root's (run as root to test it)");
        return;
    }
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    let shared = tmp.path().join("shared");
    let open_dir = tmp.path().join("open");
    for (dir, mode) in [(&shared, 0o1777), (&open_dir, 0o777)] {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let log = shared.join("log");
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    give_away(&log);
    warns(&prog, &[("GOSET_LOG", &log)], "ELOOP");
    std::fs::remove_file(&log).unwrap();
    // Another user's file, a hard link to root's file, a directory without the sticky bit.
    std::fs::write(&log, "theirs\n").unwrap();
    give_away(&log);
    warns(
        &prog,
        &[("GOSET_LOG", &log)],
        "as root, in a directory others can write to",
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "theirs\n");
    std::fs::remove_file(&log).unwrap();
    std::fs::hard_link(&victim, &log).unwrap();
    warns(&prog, &[("GOSET_LOG", &log)], "EPERM");
    std::fs::remove_file(&log).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    warns(&prog, &[("GOSET_LOG", &open_dir.join("log"))], "EPERM");
    assert!(!open_dir.join("log").exists());
    // Root's own file in the sticky directory is logged to, and so is a link in a directory
    // of root's.
    let mine = tmp.path().join("mine");
    std::os::unix::fs::symlink(&log, &mine).unwrap();
    for path in [&log, &mine] {
        let mut cmd = by_hand(prog.path(), "0");
        cmd.arg("2").env("GOSET_LOG", path);
        let outcome = run(cmd);
        outcome.expect_code(0);
        assert!(!outcome.stderr.contains("goset:"), "{}", outcome.dump());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("\"event\":\"init\"").count(), 2, "{text}");
}

#[test]
fn as_root_a_plan_in_another_users_directory_is_refused() {
    if !is_root() {
        skip_note("as_root_a_plan_in_...: the rule is root's (run as root to test it)");
        return;
    }
    let Some(prog) = Program::c("pthreads.c") else {
        return;
    };
    // nobody's directory, with a plan whose log line names a file root would create.
    let dir = plan_dir();
    let created = dir.path().join("created-by-root");
    let cpu = own_allowed()[0];
    std::fs::write(
        dir.path().join("plan"),
        format!("goset-plan 1\ncpus {cpu}\nlog {}\n", created.display()),
    )
    .unwrap();
    give_away(dir.path());
    warns(&prog, &[("GOSET_PLAN", dir.path())], "not root");
    assert!(!created.exists(), "root created the file the plan names");
    // root's own directory passes that rule (this one then lacks its slot table).
    std::os::unix::fs::lchown(dir.path(), Some(0), Some(0)).unwrap();
    let mut cmd = by_hand(prog.path(), "0");
    cmd.arg("2").env("GOSET_PLAN", dir.path());
    let outcome = run(cmd);
    outcome.expect_code(0);
    assert!(!outcome.stderr.contains("not root"), "{}", outcome.dump());
    assert!(outcome.stderr.contains("slots"), "{}", outcome.dump());
}
