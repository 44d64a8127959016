//! Who runs the task: the sudo user, and without root no isolation at all.

use crate::machine::*;
use crate::running::*;
use shim_tests::*;

#[test]
fn under_sudo_the_task_runs_as_the_invoking_user_on_its_planned_cpus() {
    if !need_root("the sudo identity") {
        return;
    }
    let Some(probe) = Program::c("isolation_probe.c") else {
        return;
    };
    // The user must reach the program in its private build directory.
    let build_dir = probe.path().parent().unwrap();
    std::fs::set_permissions(
        build_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let _machine = launcher_lock();
    let sudo = [
        ("SUDO_UID", "65534"),
        ("SUDO_GID", "65534"),
        ("SUDO_USER", "nobody"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut run = start(
        &["-n", "1", "--json", report.to_str().unwrap()],
        probe.path(),
        &[],
        &sudo,
    );
    let ready = run.ready();
    let allowed: Vec<String> = (ready.tids.iter())
        .map(|&t| status_field(ready.pid, t, "Cpus_allowed_list:"))
        .collect();
    let uid = status_field(ready.pid, ready.pid, "Uid:");
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 0, "{stdout:?}\n{stderr}");
    let planned = task_cpus(&json(&report));
    assert!(
        stdout
            .iter()
            .any(|l| l == "uid=65534 gid=65534 groups=65534"),
        "the task runs as the sudo user with its groups: {stdout:?}"
    );
    assert!(uid.starts_with("65534\t65534"), "{uid}");
    for a in &allowed {
        assert_eq!(a, &planned[0].to_string(), "{allowed:?}\n{stderr}");
    }
    assert!(
        stderr.contains("  shim") && !stderr.contains("goset: "),
        "the shim placed the threads as the user, without a warning\n{stderr}"
    );

    let mut kept = start(&["-n", "1", "--keep-root"], probe.path(), &[], &sudo);
    kept.ready();
    let (code, stdout, _) = kept.finish();
    assert_eq!(code, 0);
    assert!(stdout[0].starts_with("uid=0 gid=0"), "{stdout:?}");
}

#[test]
fn without_root_cgroup_and_steer_are_refused_before_anything_changes() {
    let _machine = launcher_lock();
    let irqs = read_irqs();
    let groups = probe_groups();
    let mut cmd = clean_command(goset_run_bin());
    if is_root() {
        // As root, the same run as an unprivileged user.
        cmd = clean_command("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(goset_run_bin());
    }
    for flag in ["--cgroup", "--steer"] {
        let mut c = clean_command(cmd.get_program());
        c.args(cmd.get_args())
            .args([flag, "--sample", "0", "--", "true"]);
        let out = run(c);
        let err = out.stderr.trim_end();
        assert_eq!(out.code(), 1, "{}", out.dump());
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with(&format!("goset-run: {flag}: needs root")),
            "{err}"
        );
    }
    assert_eq!(read_irqs(), irqs, "no IRQ changed");
    assert_eq!(probe_groups(), groups, "no group made");
}
