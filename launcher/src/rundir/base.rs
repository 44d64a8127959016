//! The base the run directories go in: `/run/goset` for root, `$XDG_RUNTIME_DIR/goset`, else
//! `/tmp/goset-<uid>`, private (0700) to its user.
//!
//! `/tmp` is shared: another user may have made `/tmp/goset-<uid>` first, to read a user's run
//! directories and bookings or to block her runs. Such a name is not used: the run gets a
//! fresh private base of an unguessable name beside it (`/tmp/goset-<uid>.XXXXXX`, mkdtemp's),
//! with one line on stderr saying so. The user's own base made by an older goset with other
//! modes is set to 0700.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where run directories (and, for root, the journals) go, chosen once per process.
pub fn base_dir() -> PathBuf {
    static CHOSEN: OnceLock<PathBuf> = OnceLock::new();
    CHOSEN.get_or_init(choose).clone()
}

fn choose() -> PathBuf {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/goset");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_dir()) {
        return Path::new(&d).join("goset");
    }
    let preferred = PathBuf::from(format!("/tmp/goset-{uid}"));
    let usable = match std::fs::symlink_metadata(&preferred) {
        Ok(meta) => meta.is_dir() && meta.uid() == uid,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    if usable {
        return preferred;
    }
    match fresh(&preferred) {
        Ok(fresh) => {
            let program = std::env::args_os().next().map(PathBuf::from);
            let program = program.as_deref().and_then(Path::file_name);
            crate::output::to_stderr(&format!(
                "{}: {} is not a directory of yours; using {} (set XDG_RUNTIME_DIR to keep one base)\n",
                program.unwrap_or("goset".as_ref()).to_string_lossy(),
                preferred.display(),
                fresh.display()
            ));
            fresh
        }
        // private_base says what is wrong with it.
        Err(_) => preferred,
    }
}

/// A new directory `<near>.XXXXXX`, 0700, of an unguessable name (mkdtemp).
fn fresh(near: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let mut template = near.as_os_str().to_owned().into_vec();
    template.extend_from_slice(b".XXXXXX\0");
    // SAFETY: template is NUL-terminated and writable; mkdtemp fills in the X's.
    if unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) }.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    template.pop();
    Ok(PathBuf::from(std::ffi::OsString::from_vec(template)))
}

/// Makes sure `base` is a directory of ours that nobody else can read or write: the plan in it
/// tells the shim where to append its log, so another user must not be able to plant one, and
/// the run directories and bookings in it are the user's own. Created 0700 (set so, whatever
/// the umask and whatever an older goset made), or 0755 for root's `/run/goset` as is usual
/// under `/run`.
pub(super) fn private_base(base: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mode = if uid == 0 { 0o755 } else { 0o700 };
    if let Err(e) = std::fs::DirBuilder::new().mode(mode).create(base) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    let meta = std::fs::symlink_metadata(base)?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(std::io::Error::other(format!(
            "not a directory owned by uid {uid}; remove it or set XDG_RUNTIME_DIR"
        )));
    }
    if meta.mode() & 0o7777 != mode {
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}
