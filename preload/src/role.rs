//! Who a thread is: the pure rules that give a thread its role (the roles themselves are the
//! contract's, [`goset_plan::log::Role`]).
//!
//! Owns: the list of launcher programs (take no slot, stay on the housekeeper) and the list of
//! runtime libraries whose threads are helpers. Must not: do I/O; callers pass the names in.

/// A thread's role: the contract's, since the launcher reads it back from the log.
pub use goset_plan::log::Role;

/// Programs that only start others: they take no slot and run on the housekeeper CPU.
pub const LAUNCHERS: &[&[u8]] = &[
    b"mpirun",
    b"mpiexec",
    b"orterun",
    b"orted",
    b"prted",
    b"prterun",
    b"hydra_pmi_proxy",
    b"mpiexec.hydra",
    b"srun",
    b"sh",
    b"bash",
    b"dash",
    b"zsh",
    b"ksh",
    b"env",
    b"time",
    b"timeout",
    b"nohup",
    b"taskset",
    // A sandbox that forks its command into new namespaces and waits for it (two processes
    // of its own that would otherwise each hold a slot).
    b"firejail",
];

/// Programs that set a policy for their command (a CPU or memory binding, a scheduling class)
/// and exec it: launchers that keep the whole reservation rather than the housekeeper CPU, so
/// that what they read of their own CPUs is the task's (numactl's libnuma reads
/// `Cpus_allowed` in `/proc/self/status`, which no hook can answer) and a binding they ask for
/// inside it is applied. Their command is placed when it starts.
pub const WRAPPERS: &[&[u8]] = &[
    b"numactl",
    b"hwloc-bind",
    b"chrt",
    b"nice",
    b"ionice",
    b"stdbuf",
    b"setarch",
    b"prlimit",
];

/// Substrings of library file names whose threads are runtime helpers, not compute threads.
pub const HELPER_LIBRARIES: &[&[u8]] = &[
    b"libmpi",
    b"libopen-pal",
    b"libopen-rte",
    b"libpmix",
    b"libevent",
    b"libfabric",
    b"libucp",
    b"libucs",
    b"libuct",
    b"libpsm",
    b"libprrte",
    b"libhwloc",
];

/// The last path component of `path`.
pub fn basename(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&c| c == b'/') {
        Some(at) => &path[at + 1..],
        None => path,
    }
}

/// `name` up to its first NUL (for fixed `comm` buffers).
pub fn until_nul(name: &[u8]) -> &[u8] {
    match name.iter().position(|&c| c == 0) {
        Some(at) => &name[..at],
        None => name,
    }
}

/// Whether a process with executable path `exe` and name `comm` is one of [`WRAPPERS`].
pub fn is_wrapper(exe: &[u8], comm: &[u8]) -> bool {
    let exe = basename(exe);
    let comm = until_nul(comm);
    WRAPPERS.iter().any(|&w| w == exe || w == comm)
}

/// Whether a process with executable path `exe` and name `comm` is a launcher.
pub fn is_launcher(exe: &[u8], comm: &[u8]) -> bool {
    let exe = basename(exe);
    let comm = until_nul(comm);
    LAUNCHERS.iter().any(|&l| l == exe || l == comm)
}

/// Whether a thread whose start routine lives in library file `path` is a runtime helper.
pub fn is_helper_library(path: &[u8]) -> bool {
    let name = basename(path);
    HELPER_LIBRARIES
        .iter()
        .any(|lib| name.windows(lib.len()).any(|w| w == *lib))
}

/// Whether the plan's `skip` mask names creation index `index`.
pub fn is_skipped(skip: u64, index: u32) -> bool {
    index < 64 && skip & (1u64 << index) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launchers_by_exe_or_comm() {
        assert!(is_launcher(b"/usr/bin/orterun", b"mpirun\0\0\0"));
        assert!(is_launcher(b"/usr/bin/dash", b"sh"));
        assert!(is_launcher(b"/usr/bin/python3", b"env\0"));
        assert!(is_launcher(b"/usr/bin/mpiexec.hydra", b"x"));
        assert!(!is_launcher(b"/usr/bin/bashful", b"bashful"));
        assert!(!is_launcher(b"/home/u/a.out", b"a.out"));
        assert!(!is_launcher(b"", b""));
    }

    #[test]
    fn wrappers_by_exe_or_comm_are_no_plain_launchers() {
        assert!(is_wrapper(b"/usr/bin/numactl", b"numactl\0"));
        assert!(is_wrapper(b"/opt/hwloc/bin/hwloc-bind", b"x"));
        assert!(!is_wrapper(b"/usr/bin/taskset", b"taskset"));
        assert!(!is_wrapper(b"/usr/bin/numactl-helper", b"numactl-helper"));
        assert!(!is_launcher(b"/usr/bin/numactl", b"numactl"));
    }

    #[test]
    fn helper_libraries_by_basename() {
        assert!(is_helper_library(
            b"/usr/lib/x86_64-linux-gnu/libopen-pal.so.40"
        ));
        assert!(is_helper_library(
            b"/usr/lib/x86_64-linux-gnu/libevent_core-2.1.so.7"
        ));
        assert!(is_helper_library(b"/usr/lib/libmpich.so.12"));
        assert!(is_helper_library(b"/opt/ucx/lib/libucs.so.0"));
        assert!(!is_helper_library(
            b"/usr/lib/x86_64-linux-gnu/libgomp.so.1"
        ));
        assert!(!is_helper_library(b"/usr/lib/libmpi/libgomp.so.1"));
        assert!(!is_helper_library(b"./a.out"));
    }

    #[test]
    fn skip_mask_by_creation_index() {
        assert!(is_skipped(0b101, 0));
        assert!(!is_skipped(0b101, 1));
        assert!(is_skipped(0b101, 2));
        assert!(!is_skipped(u64::MAX, 64));
    }

    #[test]
    fn roles_round_trip() {
        for r in [
            Role::Unknown,
            Role::Main,
            Role::Worker,
            Role::Helper,
            Role::Launcher,
        ] {
            assert_eq!(Role::from_u8(r as u8), r);
        }
        assert!(Role::Helper.is_clamped() && !Role::Worker.is_clamped());
    }
}
