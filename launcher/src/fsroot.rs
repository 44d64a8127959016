//! Reading files of `/proc` and `/sys` under a root directory.
//!
//! Every reader in the launcher takes an [`FsRoot`], so tests point it at the sysfs dumps in
//! `shared/fixtures/topology/` and the real machine is just the root `/`. Errors name the file
//! and why it could not be read; callers decide whether a missing file is fatal (rarely).
//! A dump is anyone's files: a device, a FIFO or an endless file where a `/proc` file should
//! be is refused (see [`crate::bounded`]), never read until memory runs out.

use std::fmt;
use std::path::{Path, PathBuf};

/// The longest file read as text: `/proc/interrupts` of a machine with thousands of CPUs
/// and interrupts stays below it.
pub const MAX_TEXT: u64 = 64 << 20;

/// The directory that stands for `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRoot(PathBuf);

/// A file that could not be read: which one and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadError {
    /// The path as the kernel names it (`/proc/interrupts`), not the fixture path.
    pub file: String,
    /// Why: "missing", "permission denied", or the OS error.
    pub reason: String,
}

impl ReadError {
    /// A fact of the machine rather than a failure of this run: a per-CPU file that a driver
    /// this machine lacks would provide (no cpufreq or thermal driver, as on a VM), or one not
    /// read because reading it would interrupt a task CPU. `--quiet` leaves these out.
    pub fn is_machine_fact(&self) -> bool {
        self.file.starts_with("/sys/devices/system/cpu/cpuN/")
            && (self.reason.starts_with("missing on cpus ")
                || self.reason.starts_with("not read (kernel"))
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.reason)
    }
}

impl std::error::Error for ReadError {}

impl Default for FsRoot {
    fn default() -> Self {
        FsRoot(PathBuf::from("/"))
    }
}

impl FsRoot {
    /// A root at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FsRoot(dir.into())
    }

    /// Whether this is the live system (`/`), where per-process state such as the launcher's
    /// own affinity applies.
    pub fn is_live(&self) -> bool {
        self.0 == Path::new("/")
    }

    /// The directory that stands for `/`.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// The real path of `abs` (a path such as `/proc/stat`) under this root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.0.join(abs.trim_start_matches('/'))
    }

    /// Reads `abs` as text: a regular file of at most [`MAX_TEXT`] bytes.
    pub fn read(&self, abs: &str) -> Result<String, ReadError> {
        let fail = |reason: String| ReadError {
            file: abs.to_string(),
            reason,
        };
        let bytes = crate::bounded::read_regular(&self.path(abs), MAX_TEXT).map_err(|e| {
            fail(match e.kind() {
                std::io::ErrorKind::NotFound => "missing".to_string(),
                std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                _ => e.to_string(),
            })
        })?;
        String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".to_string()))
    }

    /// Reads `abs` as text with surrounding white space trimmed; `None` when it is missing or
    /// unreadable (for the many optional sysfs attributes).
    pub fn read_opt(&self, abs: &str) -> Option<String> {
        self.read(abs).ok().map(|s| s.trim().to_string())
    }

    /// Where `abs` leads with every link followed, as a path under this root
    /// (`/sys/class/net/eth0` → `/sys/devices/.../net/eth0`); `None` when it is missing or
    /// leads out of the root (a dump's absolute link would name this machine's files).
    pub fn canonical(&self, abs: &str) -> Option<String> {
        let real = std::fs::canonicalize(self.path(abs)).ok()?;
        let base = std::fs::canonicalize(&self.0).ok()?;
        Some(format!("/{}", real.strip_prefix(base).ok()?.to_str()?))
    }

    /// Whether `abs` exists.
    pub fn exists(&self, abs: &str) -> bool {
        self.path(abs).exists()
    }

    /// Names of the entries of directory `abs`, sorted; empty when it cannot be read.
    pub fn list(&self, abs: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(abs))
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kernel_path_in_errors() {
        let root = FsRoot::new("/nonexistent-goset-root");
        let err = root.read("/proc/interrupts").unwrap_err();
        assert_eq!(err.to_string(), "/proc/interrupts: missing");
        assert!(FsRoot::default().read("/proc/self/status").is_ok());
        assert!(FsRoot::default().is_live());
    }

    #[test]
    fn missing_drivers_are_facts_of_the_machine_not_errors_of_the_run() {
        let e = |file: &str, reason: &str| ReadError {
            file: file.into(),
            reason: reason.into(),
        };
        let cpufreq = "/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq";
        assert!(e(cpufreq, "missing on cpus 0,1: no cpufreq driver").is_machine_fact());
        assert!(e(cpufreq, "not read (kernel 5.10) on cpus 1: it would IPI").is_machine_fact());
        assert!(!e(cpufreq, "permission denied on cpus 1").is_machine_fact());
        assert!(!e("/proc/interrupts", "missing").is_machine_fact());
    }

    #[test]
    fn links_are_followed_inside_the_root_and_never_out_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("sys/devices/pci0000:00/0000:00:03.0");
        std::fs::create_dir_all(&devices).unwrap();
        std::fs::create_dir_all(dir.path().join("sys/class/net")).unwrap();
        let class = |name: &str, target: &str| {
            std::os::unix::fs::symlink(target, dir.path().join("sys/class/net").join(name)).unwrap()
        };
        class("eth0", "../../devices/pci0000:00/0000:00:03.0");
        class("out", "/etc");
        class("up", "../../../..");
        let root = FsRoot::new(dir.path());
        assert_eq!(
            root.canonical("/sys/class/net/eth0").as_deref(),
            Some("/sys/devices/pci0000:00/0000:00:03.0")
        );
        assert_eq!(root.canonical("/sys/class/net/out"), None);
        assert_eq!(root.canonical("/sys/class/net/up"), None);
        assert_eq!(root.canonical("/sys/class/net/missing"), None);
        assert_eq!(
            FsRoot::default().canonical("/proc/self/..").as_deref(),
            Some("/proc")
        );
    }

    #[test]
    fn a_device_or_a_fifo_in_a_dump_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("proc/interrupts")).unwrap();
        let fifo = dir.path().join("proc/stat");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let root = FsRoot::new(dir.path());
        for file in ["/proc/interrupts", "/proc/stat"] {
            let e = root.read(file).unwrap_err();
            assert_eq!(e.to_string(), format!("{file}: not a regular file"));
        }
    }
}
