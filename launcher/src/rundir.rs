//! The run directory: where the launcher exports the plan and the slot table for the shim.
//!
//! `/run/goset/<id>/` for root, `$XDG_RUNTIME_DIR/goset/<id>/` otherwise (falling back to
//! `/tmp/goset-<uid>/<id>/`), private (0700). The directory is removed when the [`RunDir`] is
//! dropped. `<id>` is `<pid>-<start time>`, so that a launcher killed with SIGKILL, whose
//! directory stays, can be told from a later one with the same pid: the next launcher removes
//! it ([`sweep`]), and a reused pid never names the same directory (the shim of a task left
//! running would otherwise join the new run's slot table).
//!
//! It also holds `lib/<platform>/libgoset.so`, symlinks to the shim, so that the task's
//! `LD_PRELOAD` can name `<dir>/lib/$PLATFORM/libgoset.so`: glibc's loader expands the
//! `$PLATFORM` token and finds the shim; musl's loader, which cannot load the shim and treats
//! an unloadable preload as fatal, takes the name literally, finds no such file and skips it.
//! One rule for every process of the task, exec'd by a shell or not. When the launcher's own
//! loader does not find the shim through the links (no `AT_PLATFORM`, a platform name glibc
//! makes up that is not in the list), the task gets the shim's own path, as before.

use crate::error::{Error, Result};
use crate::fsroot::FsRoot;
use crate::privilege::{give, User};
use crate::procfs::ProcessId;
use goset_plan::plan::{Plan, LOG_FILE, PLAN_FILE, SLOTS_FILE};
use goset_plan::slots;
use std::path::{Path, PathBuf};

/// Environment variable naming the shim library, overriding the search next to the binary.
pub const LIB_ENV: &str = "GOSET_LIB";

/// A run directory holding `plan`, `slots`, the shim's `lib/` links and (unless the user chose
/// another place) the placement log. Removed on drop.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    log: PathBuf,
    preload: std::ffi::OsString,
    /// Under sudo: the holder of the slot table's descriptor, killed after the directory goes.
    holder: Option<Holder>,
}

/// The names glibc's loader may give `$PLATFORM`, from the kernel's `AT_PLATFORM`: that name,
/// and on x86_64 the ones glibc substitutes on Intel CPUs (`haswell` with AVX2, FMA, BMI and
/// friends; `xeon_phi` with AVX-512ER/PF; glibc's sysdeps/x86/cpu-features.c), which
/// `getauxval` does not show ([`loader_expands`] checks). Empty when the kernel gives none
/// (glibc could not expand it either).
pub fn platform_names(at_platform: Option<&[u8]>) -> Vec<&[u8]> {
    let Some(name) = at_platform.filter(|n| is_plain_name(n)) else {
        return Vec::new();
    };
    let mut names = vec![name];
    if name == b"x86_64" {
        names.extend([&b"haswell"[..], b"xeon_phi"]);
    }
    names
}

/// A single path component that no loader reads as anything else.
fn is_plain_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/')
}

/// The kernel's `AT_PLATFORM` for this process (the same for the task: one kernel, one ABI).
fn at_platform() -> Option<Vec<u8>> {
    // SAFETY: getauxval has no preconditions; AT_PLATFORM, when present, points to a
    // NUL-terminated string the kernel put on our stack, alive for the process's life.
    let ptr = unsafe { libc::getauxval(libc::AT_PLATFORM) } as *const libc::c_char;
    if ptr.is_null() {
        return None;
    }
    // SAFETY: see above.
    Some(unsafe { std::ffi::CStr::from_ptr(ptr) }.to_bytes().to_vec())
}

/// The `LD_PRELOAD` entry for the shim: `<dir>/lib/$PLATFORM/libgoset.so` when glibc's
/// loader finds the shim through the platform links, else the shim's own path (musl programs
/// then cannot start). A directory
/// whose path holds a separator of `LD_PRELOAD` or a `$` gets the shim's path too.
pub fn preload_entry(dir: &Path, shim: &Path, have_links: bool) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    let safe = !dir
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|c| b": \t\n$".contains(c));
    if have_links && safe {
        dir.join(LIB_DIR)
            .join("$PLATFORM")
            .join(SHIM)
            .into_os_string()
    } else {
        shim.as_os_str().to_owned()
    }
}

/// The run directory's folder of shim links.
const LIB_DIR: &str = "lib";
/// The shim's file name.
const SHIM: &str = goset_plan::vars::SHIM_FILE;

/// Makes `dir/lib/<name>/libgoset.so` a link to `shim` for every platform name; returns
/// whether glibc's loader finds the shim through them (see [`loader_expands`]).
fn link_shim(dir: &Path, shim: &Path, names: &[&[u8]]) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let lib = dir.join(LIB_DIR);
    for name in names {
        let sub = lib.join(std::ffi::OsStr::from_bytes(name));
        std::fs::create_dir_all(&sub)?;
        std::os::unix::fs::symlink(shim, sub.join(SHIM))?;
    }
    Ok(!names.is_empty() && loader_expands(&lib, names))
}

/// The name of the links [`loader_expands`] probes with.
const PROBE: &str = "probe";

/// Whether the loader running the launcher expands `<lib>/$PLATFORM/` to one of the `names`
/// linked there. The launcher runs the task's glibc, so this asks the loader itself rather
/// than trusting the list of names: a `probe` link to the launcher's own libc goes beside each
/// shim link, and `dlopen(<lib>/$PLATFORM/probe, RTLD_NOLOAD)` finds the loaded libc only
/// through a link of the right name. The probes are removed again (the loader keeps the
/// pattern as another name of libc: each run directory is probed once, under its own path).
fn loader_expands(lib: &Path, names: &[&[u8]]) -> bool {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let Some(libc_path) = own_libc() else {
        return false;
    };
    let probes: Vec<PathBuf> = names
        .iter()
        .map(|n| lib.join(std::ffi::OsStr::from_bytes(n)).join(PROBE))
        .collect();
    let linked = probes
        .iter()
        .all(|p| std::os::unix::fs::symlink(&libc_path, p).is_ok());
    let pattern = lib
        .join("$PLATFORM")
        .join(PROBE)
        .into_os_string()
        .into_vec();
    let found = linked
        && std::ffi::CString::new(pattern).is_ok_and(|c| {
            // SAFETY: c is a NUL-terminated path; RTLD_NOLOAD maps nothing new and runs no
            // constructor: it only returns a handle to an object already loaded.
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
            if !handle.is_null() {
                // SAFETY: handle came from dlopen above and is closed once.
                unsafe { libc::dlclose(handle) };
            }
            !handle.is_null()
        });
    for p in &probes {
        let _ = std::fs::remove_file(p);
    }
    found
}

/// The path of the libc this process runs on, from the loader's record of it.
fn own_libc() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let getpid: unsafe extern "C" fn() -> libc::pid_t = libc::getpid;
    // SAFETY: dladdr only reads the address and fills info.
    if unsafe { libc::dladdr(getpid as *const libc::c_void, info.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: dladdr succeeded, so info is filled.
    let name = unsafe { info.assume_init() }.dli_fname;
    if name.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    // Only an absolute path names the file itself.
    name.starts_with(b"/")
        .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(name)))
}

/// Writes a new file `path` that only its owner may write (0644, whatever the umask).
fn write_readable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.write_all(bytes)
}

/// Names `log` in `plan`, or says why the shim could not read it back.
fn set_log(plan: &mut Plan, log: &Path) -> Result<()> {
    if plan.set_log_path(log.as_os_str().as_encoded_bytes()) {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "--log {}: path too long, holding a newline, or beginning or ending with a blank",
        log.display()
    )))
}

/// Checks the user's `--log` path, names it in `plan` and empties it, so that the report reads
/// only this run's records; returns its absolute path. Only a regular file, opened by the rules
/// of [`goset_plan::rootfile`], is a log.
fn kept_log(plan: &mut Plan, log: &Path) -> Result<PathBuf> {
    let usage =
        |e: std::io::Error| Error::Usage(format!("--log {}: cannot create: {e}", log.display()));
    let path = std::path::absolute(log).map_err(usage)?;
    set_log(plan, &path)?;
    let file =
        goset_plan::rootfile::os::open_output(&path).map_err(|e| match e.raw_os_error() {
            // A FIFO without a reader, or a socket.
            Some(libc::ENXIO) => usage(crate::bounded::not_regular()),
            _ => usage(e),
        })?;
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(usage(crate::bounded::not_regular())),
        Err(e) => return Err(usage(e)),
    }
    file.set_len(0).map_err(usage)?;
    Ok(path)
}

/// This launcher's run directory name: `<pid>-<start>`, the start time (clock ticks after boot,
/// field 22 of `/proc/<pid>/stat`) telling this process from an earlier one with the same pid.
pub fn own_name() -> std::io::Result<String> {
    let me = ProcessId::this(&FsRoot::default()).map_err(std::io::Error::other)?;
    Ok(format!("{}-{}", me.pid, me.start))
}

/// The pid and start time a run directory's name holds, if it has the shape [`own_name`]
/// gives (and no other spelling of it: no sign, no leading zero).
pub fn parse_name(name: &str) -> Option<(u32, u64)> {
    let (pid, start) = name.split_once('-')?;
    let parsed = (pid.parse().ok()?, start.parse().ok()?);
    (format!("{}-{}", parsed.0, parsed.1) == name && parsed.0 != 0).then_some(parsed)
}

/// Removes the run directories in `base` whose launcher is gone (killed with SIGKILL, or a
/// crash): a directory of ours, by name and owner (in root's base, any owner: a sudo run's
/// directory is its user's), whose pid is not alive with the start time the name holds. A
/// live launcher's directory, another name, a link or another owner's entry stays.
/// `remove_dir_all` does not follow links, so nothing outside the directory goes.
fn sweep(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    // Root's base holds only root's launchers' directories, a sudo run's given to its user.
    let roots_base = uid == 0 && std::fs::symlink_metadata(base).is_ok_and(|m| m.uid() == 0);
    for entry in entries.flatten() {
        let Some((pid, start)) = entry.file_name().to_str().and_then(parse_name) else {
            continue;
        };
        let ours = std::fs::symlink_metadata(entry.path())
            .is_ok_and(|m| m.is_dir() && (m.uid() == uid || roots_base));
        if ours && !(ProcessId { pid, start }).is_alive(&FsRoot::default()) {
            // Another launcher may be sweeping it too.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl RunDir {
    /// Creates a fresh run directory, writes `plan` (with the log path set) and `slots`, and
    /// links the shim under `lib/`. `log` is where the placement log goes; `None` keeps it
    /// inside the directory. First removes the directories of launchers that are gone
    /// ([`sweep`]). With `user` (the task's identity under sudo) the directory, the plan, the
    /// log and the table are that user's to read and write.
    pub fn create(
        plan: &Plan,
        log: Option<&Path>,
        shim: &Path,
        user: Option<&User>,
    ) -> Result<RunDir> {
        use std::os::unix::fs::DirBuilderExt;
        let fail = |what: &str, path: &Path, e: std::io::Error| {
            Error::System(format!("cannot create {what} {}: {e}", path.display()))
        };
        let mut plan = plan.clone();
        // A kept log is the user's path: checked (and emptied) before anything is created.
        let kept = log.map(|l| kept_log(&mut plan, l)).transpose()?;
        let base = base_dir();
        private_base(&base).map_err(|e| fail("run directory", &base, e))?;
        sweep(&base);
        let name = own_name().map_err(|e| fail("run directory in", &base, e))?;
        let dir = base.join(name);
        // Only this process has this name: a directory under it is a previous boot's.
        let _ = std::fs::remove_dir_all(&dir);
        // 0711: others may pass through it to the shim's links in lib/ and read the plan (a
        // task that switches to another user keeps the shim, and maps the slot table through
        // the descriptor it inherited), but not list it nor write in it; the log is 0600,
        // nobody else's to read.
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(&dir)
            .map_err(|e| fail("run directory", &dir, e))?;
        let shim = std::fs::canonicalize(shim).map_err(|e| fail("shim link to", shim, e))?;
        let platform = at_platform();
        let linked = link_shim(&dir, &shim, &platform_names(platform.as_deref()))
            .map_err(|e| fail("shim links in", &dir, e))?;
        let mut run_dir = RunDir {
            log: dir.join(LOG_FILE),
            preload: preload_entry(&dir, &shim, linked),
            dir,
            holder: None,
        };
        match kept {
            Some(path) => run_dir.log = path,
            None => {
                let log = run_dir.log.clone();
                set_log(&mut plan, &log)?;
                crate::bounded::create_regular(&log).map_err(|e| fail("log", &log, e))?;
            }
        }
        let plan_path = run_dir.dir.join(PLAN_FILE);
        write_readable(&plan_path, plan.to_text().as_bytes())
            .map_err(|e| fail("plan", &plan_path, e))?;
        let slots_path = run_dir.dir.join(SLOTS_FILE);
        match user {
            None => slots::create_file(&slots_path, plan.slot_count()).map(|_| ()),
            Some(user) => Holder::start(&slots_path, plan.slot_count(), user)
                .map(|holder| run_dir.holder = Some(holder)),
        }
        .map_err(|e| fail("slot table", &slots_path, e))?;
        if let Some(user) = user {
            for path in [&run_dir.dir, &plan_path, &run_dir.log] {
                give(path, user).map_err(|e| fail("(for the sudo user)", path, e))?;
            }
        }
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

    /// How much of the placement log the report reads, and whether the rest may be freed once
    /// the housekeeper has read it: the run directory's own log (not one the user keeps with
    /// `--log`) keeps at most a quarter of its filesystem (a small `XDG_RUNTIME_DIR` tmpfs
    /// must not fill), at most [`crate::placement_log::MAX_BYTES`].
    pub fn log_kept(&self) -> (u64, bool) {
        let max = crate::placement_log::MAX_BYTES;
        if !self.log.starts_with(&self.dir) {
            return (max, false);
        }
        let size = nix::sys::statvfs::statvfs(&self.dir)
            .map(|v| v.blocks() * v.fragment_size())
            .unwrap_or(u64::MAX);
        ((size / 4).min(max), true)
    }

    /// The shim's `LD_PRELOAD` entry (see [`preload_entry`]).
    pub fn preload(&self) -> &std::ffi::OsStr {
        &self.preload
    }
}

/// The process that holds the slot table's descriptor under sudo. The task's user may not look
/// at root's descriptors (`/proc/<launcher>/fd/N`), so a child forked as that user, and made
/// dumpable so that its own user may, keeps the memfd, and the table's link names the
/// holder's descriptor. It dies with the launcher (parent-death signal) or with the directory.
#[derive(Debug)]
struct Holder(libc::pid_t);

impl Holder {
    fn start(link: &Path, slot_count: usize, user: &User) -> std::io::Result<Holder> {
        let (fd, _table) = slots::create_sealed(slot_count)?;
        // SAFETY: fchown on the memfd this process owns.
        if unsafe { libc::fchown(fd, user.uid, user.gid) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: getpid cannot fail.
        let launcher = unsafe { libc::getpid() };
        // SAFETY: the child makes system calls only, then waits to be killed.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: system calls only, safe after fork; the child never returns.
            unsafe {
                let ok = crate::privilege::become_user(user).is_ok()
                    && libc::prctl(libc::PR_SET_DUMPABLE, 1) == 0
                    && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == 0
                    && libc::getppid() == launcher;
                if !ok {
                    libc::_exit(1);
                }
                // Nothing of the launcher's but the table: its pipes must not stay open.
                libc::syscall(libc::SYS_close_range, 0, (fd - 1).max(0) as u32, 0);
                libc::syscall(libc::SYS_close_range, fd as u32 + 1, u32::MAX, 0);
                loop {
                    libc::pause();
                }
            }
        }
        let holder = Holder(pid);
        slots::link_file(link, pid as u32, fd)?;
        Ok(holder)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: the holder is this process's child; kill and reap it.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
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
    find_shim_for(std::env::current_exe().ok().as_deref())
}

/// Finds `libgoset.so` as the goset program `exe` would (see [`find_shim`]): `$GOSET_LIB`,
/// else beside `exe`, else in `../lib/` from it. goset-bench's `shim` mode asks this for the
/// goset-run it uses.
pub fn find_shim_for(exe: Option<&Path>) -> Result<Option<PathBuf>> {
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
    let Some(exe) = exe else {
        return Ok(None);
    };
    let dir = exe.parent().unwrap_or(Path::new("/"));
    Ok([dir.join("libgoset.so"), dir.join("../lib/libgoset.so")]
        .into_iter()
        .find(|p| p.is_file()))
}

mod base;
pub use base::base_dir;
use base::private_base;

#[cfg(test)]
mod tests;
