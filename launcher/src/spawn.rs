//! Starting a process that is born in a cgroup: `clone3(CLONE_INTO_CGROUP)`, then exec.
//!
//! Owns: the raw clone, the child's exec and the report of its failure through a
//! close-on-exec pipe (nothing written: exec succeeded; four bytes: the errno of what failed).
//! Must not: do anything in the child but system calls. The child is a copy of a
//! single-threaded launcher made without glibc's fork, so glibc's idea of the current thread
//! (its tid, used by `raise`) is the parent's: the child setup uses `kill(getpid())` and raw
//! credential calls, never those wrappers.

use std::ffi::CString;
use std::os::fd::RawFd;

/// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`, Linux 5.7).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Why a process could not be started this way.
#[derive(Debug)]
pub enum Failed {
    /// The kernel has no `clone3` or no `CLONE_INTO_CGROUP` (before Linux 5.7), or refused
    /// the group: nothing was started, another way may work.
    Unsupported,
    /// The child was born and its setup or exec failed (it is reaped).
    Child(std::io::Error),
}

/// What the child executes: the path, argv and envp, built before the clone (the child may
/// not allocate).
pub struct Exec {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl Exec {
    /// `path` with `argv` (argv[0] included) and the environment `env`; `None` when a string
    /// holds a NUL byte.
    pub fn new(
        path: &std::path::Path,
        argv: &[std::ffi::OsString],
        env: &[(std::ffi::OsString, std::ffi::OsString)],
    ) -> Option<Exec> {
        use std::os::unix::ffi::OsStrExt;
        let c = |b: &[u8]| CString::new(b).ok();
        let envp = env
            .iter()
            .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect::<Option<Vec<_>>>()?;
        Some(Exec {
            path: c(path.as_os_str().as_bytes())?,
            argv: argv
                .iter()
                .map(|a| c(a.as_bytes()))
                .collect::<Option<Vec<_>>>()?,
            envp,
        })
    }
}

fn nul_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    let mut out: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    out.push(std::ptr::null());
    out
}

/// Starts `exec` born in the cgroup whose directory `cgroup` is open, after `setup` ran in the
/// child (system calls only). Returns the child's pid.
pub fn into_cgroup(
    exec: &Exec,
    cgroup: RawFd,
    setup: &dyn Fn() -> std::io::Result<()>,
) -> Result<i32, Failed> {
    let argv = nul_terminated(&exec.argv);
    let envp = nul_terminated(&exec.envp);
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Failed::Child(std::io::Error::last_os_error()));
    }
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup as u64,
        ..Default::default()
    };
    // SAFETY: clone3 without CLONE_VM copies the process like fork; args is valid for its size.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // The child: setup, exec, or the errno down the pipe.
        // SAFETY: system calls on descriptors and strings made before the clone.
        unsafe {
            libc::close(pipe[0]);
            let errno = match setup() {
                Ok(()) => {
                    libc::execve(exec.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL)
                }
                Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
            };
            libc::write(pipe[1], (&errno as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    // SAFETY: the write end is ours and closed once.
    unsafe { libc::close(pipe[1]) };
    let close_read = || {
        // SAFETY: the read end is ours and closed once.
        unsafe { libc::close(pipe[0]) };
    };
    if pid < 0 {
        close_read();
        return Err(Failed::Unsupported);
    }
    let pid = pid as i32;
    let mut errno = 0i32;
    let got = loop {
        // SAFETY: reads at most 4 bytes into errno.
        let n = unsafe { libc::read(pipe[0], (&mut errno as *mut i32).cast(), 4) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break n;
        }
    };
    close_read();
    if got == 4 {
        // SAFETY: reaps the child that failed.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        return Err(Failed::Child(std::io::Error::from_raw_os_error(errno)));
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn exec(path: &str, args: &[&str]) -> Exec {
        let argv: Vec<OsString> = std::iter::once(path)
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        Exec::new(
            path.as_ref(),
            &argv,
            &[("PATH".into(), "/usr/bin:/bin".into())],
        )
        .unwrap()
    }

    fn wait(pid: i32) -> i32 {
        let mut status = 0;
        // SAFETY: waits for this test's child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        libc::WEXITSTATUS(status)
    }

    /// A cgroup v2 mount of this machine (any: CLONE_INTO_CGROUP needs no controller).
    fn cgroup2() -> Option<std::path::PathBuf> {
        let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
        let line = mounts
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some("cgroup2"))?;
        line.split_whitespace().nth(1).map(Into::into)
    }

    #[test]
    fn the_child_is_born_in_the_group_and_its_failures_come_back() {
        // SAFETY: geteuid cannot fail.
        let (Some(mount), true) = (cgroup2(), unsafe { libc::geteuid() } == 0) else {
            eprintln!("SKIPPED: needs root and a cgroup2 mount (CI has both)");
            return;
        };
        let name = format!("goset-spawn-test-{}", std::process::id());
        let group = mount.join(&name);
        std::fs::create_dir(&group).unwrap();
        let dir = std::fs::File::open(&group).unwrap();
        let out = tempfile::NamedTempFile::new().unwrap();
        let script = format!("cat /proc/self/cgroup > {}", out.path().display());
        let fd = std::os::fd::AsRawFd::as_raw_fd(&dir);
        let started = into_cgroup(&exec("/bin/sh", &["-c", &script]), fd, &|| Ok(()));
        let code = started.map(wait);
        let seen = std::fs::read_to_string(out.path()).unwrap_or_default();
        let missing = into_cgroup(&exec("/nonexistent-goset", &[]), fd, &|| Ok(()));
        let refused = into_cgroup(&exec("/bin/true", &[]), fd, &|| {
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        });
        std::fs::remove_dir(&group).unwrap();
        assert!(matches!(code, Ok(0)), "{code:?}");
        assert!(
            seen.lines().any(|l| l == format!("0::/{name}")),
            "born in {name}: {seen}"
        );
        assert!(
            matches!(missing, Err(Failed::Child(ref e)) if e.raw_os_error() == Some(libc::ENOENT)),
            "{missing:?}"
        );
        assert!(
            matches!(refused, Err(Failed::Child(ref e)) if e.raw_os_error() == Some(libc::EPERM)),
            "{refused:?}"
        );
    }
}
