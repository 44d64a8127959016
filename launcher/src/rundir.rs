//! The run directory: where the launcher exports the plan and the slot table for the shim.
//!
//! `/run/goset/<id>/` for root, `$XDG_RUNTIME_DIR/goset/<id>/` otherwise (falling back to
//! `/tmp/goset-<uid>/<id>/`). The directory is removed when the [`RunDir`] is dropped.

use crate::error::{Error, Result};
use goset_plan::plan::{Plan, LOG_FILE, PLAN_FILE, SLOTS_FILE};
use goset_plan::slots;
use std::path::{Path, PathBuf};

/// Environment variable naming the shim library, overriding the search next to the binary.
pub const LIB_ENV: &str = "GOSET_LIB";

/// A run directory holding `plan`, `slots` and (unless the user chose another place) the
/// placement log. Removed on drop.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    log: PathBuf,
}

fn base_dir() -> PathBuf {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/goset");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_dir() => Path::new(&d).join("goset"),
        _ => PathBuf::from(format!("/tmp/goset-{uid}")),
    }
}

/// Makes sure `base` is a directory of ours that nobody else can write to: the plan in it tells
/// the shim where to append its log, so another user must not be able to plant one (`/tmp` is
/// shared). Created 0700, or 0755 for root's `/run/goset` as is usual under `/run`.
fn private_base(base: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mode = if uid == 0 { 0o755 } else { 0o700 };
    if let Err(e) = std::fs::DirBuilder::new().mode(mode).create(base) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    let meta = std::fs::symlink_metadata(base)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "not a directory owned by uid {uid} and writable only by it; remove it or set XDG_RUNTIME_DIR"
        )));
    }
    Ok(())
}

impl RunDir {
    /// Creates a fresh run directory and writes `plan` (with the log path set) and `slots`.
    /// `log` is where the placement log goes; `None` keeps it inside the directory.
    pub fn create(plan: &Plan, log: Option<&Path>) -> Result<RunDir> {
        let base = base_dir();
        let fail = |what: &str, path: &Path, e: std::io::Error| {
            Error::System(format!("cannot create {what} {}: {e}", path.display()))
        };
        private_base(&base).map_err(|e| fail("run directory", &base, e))?;
        let dir = base.join(std::process::id().to_string());
        // A directory left by a crashed launcher with our pid holds nothing of value.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).map_err(|e| fail("run directory", &dir, e))?;
        let mut run_dir = RunDir {
            log: dir.join(LOG_FILE),
            dir,
        };
        let mut plan = plan.clone();
        let log = match log {
            Some(l) => std::path::absolute(l).map_err(|e| fail("log", l, e))?,
            None => run_dir.log.clone(),
        };
        if !plan.set_log_path(log.as_os_str().as_encoded_bytes()) {
            return Err(Error::Usage(format!(
                "--log {}: path too long, holding a newline, or beginning or ending with a blank",
                log.display()
            )));
        }
        // Truncate a kept log so the report reads only this run's records.
        std::fs::write(&log, b"").map_err(|e| fail("log", &log, e))?;
        let plan_path = run_dir.dir.join(PLAN_FILE);
        std::fs::write(&plan_path, plan.to_text()).map_err(|e| fail("plan", &plan_path, e))?;
        let slots_path = run_dir.dir.join(SLOTS_FILE);
        slots::create_file(&slots_path, plan.slot_count())
            .map_err(|e| fail("slot table", &slots_path, e))?;
        run_dir.log = log;
        Ok(run_dir)
    }

    /// The directory, for `GOSET_PLAN`.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where the placement log is written.
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Finds `libgoset.so`: `$GOSET_LIB`, else beside the running binary, else in `../lib/`.
/// `None` when it is not installed; a `GOSET_LIB` that names no file is a usage error.
pub fn find_shim() -> Result<Option<PathBuf>> {
    if let Some(p) = std::env::var_os(LIB_ENV) {
        let path = PathBuf::from(p);
        if !path.is_file() {
            return Err(Error::Usage(format!(
                "{LIB_ENV}={}: no such file (it must name libgoset.so)",
                path.display()
            )));
        }
        return Ok(Some(path));
    }
    let Some(exe) = std::env::current_exe().ok() else {
        return Ok(None);
    };
    let dir = exe.parent().unwrap_or(Path::new("/"));
    Ok([dir.join("libgoset.so"), dir.join("../lib/libgoset.so")]
        .into_iter()
        .find(|p| p.is_file()))
}
