//! Who the task runs as, and whether the launcher may make the changes it was asked for.
//!
//! Under `sudo` the task runs as the user who invoked it (`SUDO_UID`, `SUDO_GID` and that
//! user's supplementary groups), so that root is kept only by the launcher, for setup,
//! restore and steering. The identity is resolved before fork: `getgrouplist` reads
//! `/etc/group` and is not safe between fork and exec.
//!
//! Owns: the invoking user, dropping to it, and the writability checks. Must not: import
//! `isolate`, `rundir` or `task`, which all use it (it sits below them, so that the run
//! directory and the task's child can drop privileges without importing isolation).

use crate::error::{Error, Result};
use std::path::Path;

/// The identity the task takes before exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User id.
    pub uid: libc::uid_t,
    /// Primary group id.
    pub gid: libc::gid_t,
    /// Supplementary groups.
    pub groups: Vec<libc::gid_t>,
}

/// The invoking user when root was reached through sudo (and `keep_root` is off): `None` when
/// the task keeps the launcher's identity. A `SUDO_UID` or `SUDO_GID` that is not a number is
/// a usage error.
pub fn invoking_user(
    env: impl Fn(&str) -> Option<String>,
    keep_root: bool,
) -> Result<Option<User>> {
    // SAFETY: geteuid cannot fail.
    if keep_root || unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let Some(uid_text) = env("SUDO_UID") else {
        return Ok(None);
    };
    let number = |name: &str, text: &str| {
        id_number(text).ok_or_else(|| {
            Error::Usage(format!(
                "{name}='{}': not an id (a decimal number from 0 to {}; sudo sets it; unset it or pass --keep-root)",
                text.escape_default(),
                u32::MAX - 1
            ))
        })
    };
    let uid = number("SUDO_UID", &uid_text)?;
    if uid == 0 {
        return Ok(None);
    }
    let gid = match env("SUDO_GID") {
        Some(text) => number("SUDO_GID", &text)?,
        None => uid,
    };
    let name =
        env("SUDO_USER").or_else(|| Some(nix::unistd::User::from_uid(uid.into()).ok()??.name));
    let groups = name
        .and_then(|n| std::ffi::CString::new(n).ok())
        .and_then(|n| nix::unistd::getgrouplist(&n, gid.into()).ok())
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|| vec![gid]);
    Ok(Some(User { uid, gid, groups }))
}

/// A user or group id as sudo writes it: decimal digits without sign, blank or leading zero,
/// below `u32::MAX`, which is `(uid_t)-1` (to `setresuid`, "leave unchanged"), never an id.
fn id_number(text: &str) -> Option<u32> {
    let canonical =
        text.bytes().all(|b| b.is_ascii_digit()) && !(text.len() > 1 && text.starts_with('0'));
    let id = text.parse::<u32>().ok().filter(|_| canonical)?;
    (id != u32::MAX).then_some(id)
}

/// In the child before exec: takes `user`'s groups, gid and uid, in the order that leaves no
/// way back. Raw system calls: glibc's wrappers would signal every thread glibc believes the
/// process has, and a child made by a raw clone inherits that belief from the launcher.
pub fn become_user(user: &User) -> std::io::Result<()> {
    let (uid, gid) = (user.uid as libc::c_long, user.gid as libc::c_long);
    // SAFETY: groups outlives the call; the others take plain numbers.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, user.groups.len(), user.groups.as_ptr()) != 0
            || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
            || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Gives `path` to `user`, so that the task can read (and the shim write) what the launcher
/// created for it as root.
pub fn give(path: &Path, user: &User) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
}

/// `Ok` when this process may write `path`; otherwise the one-line reason for `flag`.
pub fn require_writable(flag: &str, path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::System(format!("{flag}: bad path {}", path.display())))?;
    // SAFETY: c is a valid NUL-terminated path. W_OK with the effective ids (AT_EACCESS).
    if unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    Err(Error::System(format!(
        "{flag}: needs root (or the right to write {}: {e}); run it with sudo",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudo_variables_name_the_user_unless_root_is_kept() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
        };
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let nobody = || {
            env(&[
                ("SUDO_UID", "65534"),
                ("SUDO_GID", "65534"),
                ("SUDO_USER", "nobody"),
            ])
        };
        let user = invoking_user(nobody(), false).unwrap();
        if root {
            let user = user.unwrap();
            assert_eq!((user.uid, user.gid), (65534, 65534));
            assert!(user.groups.contains(&65534), "{:?}", user.groups);
        } else {
            assert_eq!(user, None, "only root drops to the sudo user");
        }
        assert_eq!(invoking_user(nobody(), true).unwrap(), None);
        assert_eq!(invoking_user(env(&[]), false).unwrap(), None);
        if root {
            for (var, bad) in [
                ("SUDO_UID", "x"),
                ("SUDO_UID", "4294967295"),
                ("SUDO_UID", "4294967296"),
                ("SUDO_UID", "-1"),
                ("SUDO_UID", "+1000"),
                ("SUDO_UID", " 1000"),
                ("SUDO_UID", "01000"),
                ("SUDO_UID", ""),
                ("SUDO_GID", "4294967295"),
            ] {
                let vars = [("SUDO_UID", "65534"), (var, bad)];
                let vars: Vec<(&str, &str)> = vars.into_iter().rev().collect();
                let get = |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string());
                let e = invoking_user(get, false).unwrap_err();
                assert_eq!(e.exit_code(), 2, "{var}={bad}");
                assert!(e.to_string().starts_with(&format!("{var}='")), "{e}");
            }
        }
    }

    #[test]
    fn ids_are_decimal_numbers_below_the_unchanged_id() {
        assert_eq!(id_number("0"), Some(0));
        assert_eq!(id_number("1000"), Some(1000));
        assert_eq!(id_number("4294967294"), Some(4294967294));
        for bad in [
            "4294967295",
            "99999999999",
            "-1",
            "+1",
            "1 ",
            "007",
            "",
            "x",
        ] {
            assert_eq!(id_number(bad), None, "{bad}");
        }
    }
}
