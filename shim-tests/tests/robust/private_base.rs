//! A user's private base without `XDG_RUNTIME_DIR`, `/tmp/goset-<uid>`: made 0700, set to 0700
//! when an older goset made it open, and, when another user made it first, not used: the run
//! goes on in a fresh private base beside it and says so in one line.

use shim_tests::{clean_command, goset_run_bin, is_root, run, skip_note};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// A uid no account has, so that no other run on this machine uses its base meanwhile.
const UID: u32 = 64_999;

/// `/tmp/goset-<UID>` and the fresh bases beside it, removed before the test and after it.
struct Bases;

impl Bases {
    fn preferred() -> PathBuf {
        PathBuf::from(format!("/tmp/goset-{UID}"))
    }

    fn clear() {
        let fresh = format!("goset-{UID}.");
        for entry in std::fs::read_dir("/tmp").unwrap().flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(&fresh) || entry.path() == Self::preferred() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

impl Drop for Bases {
    fn drop(&mut self) {
        Self::clear();
    }
}

/// goset-run as [`UID`], without a runtime directory.
fn as_user(args: &[&str]) -> std::process::Command {
    let mut cmd = clean_command(goset_run_bin());
    cmd.env_remove("XDG_RUNTIME_DIR").args(args);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let ok = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(UID) == 0
                && libc::setuid(UID) == 0;
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    cmd
}

fn owner_and_mode(path: &Path) -> (u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.uid(), meta.mode() & 0o7777)
}

#[test]
fn a_users_base_is_private_and_another_users_is_not_used() {
    if !is_root() {
        skip_note("a_users_base_...: runs goset-run as another user (run as root to test it)");
        return;
    }
    if !as_user(&["--version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip_note("a_users_base_...: the built goset-run cannot be run by other users here (a checkout in a private directory)");
        return;
    }
    Bases::clear();
    let _bases = Bases;
    let task = ["-q", "-n", "1", "--sample", "0", "--", "true"];
    let preferred = Bases::preferred();
    // Missing: made, 0700.
    let out = run(as_user(&task));
    assert!(out.status.success(), "{}", out.dump());
    assert_eq!(owner_and_mode(&preferred), (UID, 0o700));
    // The user's own, open: made private.
    std::fs::set_permissions(&preferred, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(as_user(&task));
    assert!(out.status.success(), "{}", out.dump());
    assert_eq!(owner_and_mode(&preferred), (UID, 0o700));
    // Another user's (root's here): left alone, and the run still runs, in a fresh base.
    std::fs::remove_dir_all(&preferred).unwrap();
    std::fs::create_dir(&preferred).unwrap();
    std::fs::set_permissions(&preferred, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(as_user(&task));
    assert!(out.status.success(), "{}", out.dump());
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    let fresh = out
        .stderr
        .split("; using ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no fresh base named: {}", out.stderr));
    assert!(
        fresh.starts_with(&format!("{}.", preferred.display())),
        "{fresh}"
    );
    assert_eq!(owner_and_mode(Path::new(fresh)), (UID, 0o700));
    assert_eq!(owner_and_mode(&preferred), (0, 0o777));
    assert_eq!(
        std::fs::read_dir(&preferred).unwrap().count(),
        0,
        "nothing in another user's base"
    );
}
