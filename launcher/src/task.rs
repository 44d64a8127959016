//! Starting the task on its CPUs and waiting for it.
//!
//! Owns: the child's cgroup, process mask, memory policy, identity and parent-death signal (set
//! between fork and exec), its start under held signals (see [`crate::signals`]), `wait4` with rusage, and the
//! mapping of a wait status to goset-run's exit code.

use crate::error::{Error, Result};
use crate::signals;
use goset_plan::CpuSet;
use std::ffi::OsString;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// What to start and where.
#[derive(Debug, Clone)]
pub struct Launch {
    /// argv of the task.
    pub argv: Vec<OsString>,
    /// The task's process mask.
    pub cpus: CpuSet,
    /// Bind the task's memory to this NUMA node.
    pub node: Option<usize>,
    /// Extra environment.
    pub env: Vec<(OsString, OsString)>,
    /// Variables removed from the inherited environment.
    pub env_remove: Vec<OsString>,
    /// The task gets SIGKILL when the launcher dies first (`PR_SET_PDEATHSIG`).
    pub die_with_launcher: bool,
    /// Where the task's main thread starts: a slot claimed for it before exec.
    pub main_slot: Option<MainSlot>,
    /// The task's cgroup: it joins before anything of it runs.
    pub cgroup: Option<CgroupJoin>,
    /// The identity the task takes before exec (the sudo user).
    pub user: Option<crate::privilege::User>,
    /// Launcher descriptors the task inherits (close-on-exec cleared in the child): the slot
    /// table's and the log's, which `GOSET_SLOTS` and `GOSET_LOG_FD` name.
    pub inherit: Vec<RawFd>,
    /// Descriptors the task gets as its stdout and stderr (an instance's pipes); `None`:
    /// goset-run's own.
    pub stdio: Option<(RawFd, RawFd)>,
}

/// The slot table and the CPU of each of its slots: the task's main thread claims its slot in
/// the child before exec (labelled with its pid, as the shim labels a main thread's claim) and
/// starts on that slot's CPU, so that it is born placed. The shim adopts the claim at its
/// start; the housekeeper sees a thread on a planned CPU its process holds a claim for, and
/// leaves it alone however long the shim takes to start (or the static program it is).
#[derive(Clone)]
pub struct MainSlot {
    /// The table shared with the shim and the housekeeper.
    pub table: &'static goset_plan::SlotTable,
    /// The CPU of each slot, in slot order.
    pub cpus: Vec<usize>,
}

impl std::fmt::Debug for MainSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MainSlot")
            .field("cpus", &self.cpus)
            .finish()
    }
}

/// How the task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Exited with a status.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
}

impl Ending {
    /// goset-run's exit code: the task's status, or 128+signal.
    pub fn exit_code(self) -> i32 {
        match self {
            Ending::Exited(code) => code,
            Ending::Signaled(sig) => 128 + sig,
        }
    }
}

/// Resource usage of the task (and its waited-for children) from `wait4`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub system_s: f64,
    /// Peak resident set in KiB.
    pub max_rss_kib: i64,
    /// Minor page faults.
    pub minor_faults: i64,
    /// Major page faults.
    pub major_faults: i64,
    /// Voluntary context switches.
    pub voluntary_ctxsw: i64,
    /// Involuntary context switches.
    pub involuntary_ctxsw: i64,
}

impl Usage {
    /// This usage with at least `seen_cpu_s` of CPU time: what the housekeeper read from the
    /// task's threads. `wait4` counts only descendants someone waited for up the tree, not
    /// those a sandbox's init reaped in its PID namespace (torn down with it) or nobody did;
    /// the difference is counted as user time.
    pub fn at_least(self, seen_cpu_s: f64) -> Usage {
        let missing = seen_cpu_s - (self.user_s + self.system_s);
        Usage {
            user_s: self.user_s + missing.max(0.0),
            ..self
        }
    }

    /// The sum of two usages (copies started with `--instances`); the peak RSS is the larger.
    pub fn plus(&self, other: &Usage) -> Usage {
        Usage {
            user_s: self.user_s + other.user_s,
            system_s: self.system_s + other.system_s,
            max_rss_kib: self.max_rss_kib.max(other.max_rss_kib),
            minor_faults: self.minor_faults + other.minor_faults,
            major_faults: self.major_faults + other.major_faults,
            voluntary_ctxsw: self.voluntary_ctxsw + other.voluntary_ctxsw,
            involuntary_ctxsw: self.involuntary_ctxsw + other.involuntary_ctxsw,
        }
    }
}

/// Bit `fd` set: standard descriptor `fd` (0, 1, 2) was closed when the program started.
static CLOSED_STDIO: AtomicU8 = AtomicU8::new(0);

/// Records which standard descriptors are closed. Called from a constructor of each binary
/// (`.init_array`), which runs before Rust's runtime opens `/dev/null` on closed ones: the task
/// must get a closed descriptor as it is, or a task that fails on a closed stdout would not.
pub extern "C" fn note_closed_stdio() {
    let mut closed = 0u8;
    for fd in 0..3 {
        // SAFETY: F_GETFD only queries the descriptor table.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            closed |= 1 << fd;
        }
    }
    CLOSED_STDIO.store(closed, Ordering::Relaxed);
}

/// Finds `program` the way exec does (a name with a slash as it is, otherwise on `PATH`), so
/// that a missing or non-executable command is reported before anything is set up.
pub fn resolve_command(program: &std::ffi::OsStr) -> Result<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let name = program.to_string_lossy().into_owned();
    // An empty name is no command (as a shell says), not the PATH directory it would join to.
    if program.is_empty() {
        return Err(Error::CommandNotFound(name));
    }
    let executable = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok();
        // SAFETY: c is a valid NUL-terminated path.
        p.is_file() && c.is_some_and(|c| unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0)
    };
    let candidates: Vec<std::path::PathBuf> = if program.as_bytes().contains(&b'/') {
        vec![program.into()]
    } else {
        let path =
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .collect()
    };
    if let Some(found) = candidates.iter().find(|p| executable(p)) {
        return Ok(found.clone());
    }
    match candidates.iter().find(|p| p.exists()) {
        Some(p) if p.is_dir() => Err(Error::NotExecutable(format!(
            "{name}: cannot execute: is a directory"
        ))),
        Some(_) => Err(Error::NotExecutable(format!(
            "{name}: cannot execute: permission denied"
        ))),
        None => Err(Error::CommandNotFound(name)),
    }
}

/// A started task.
#[derive(Debug)]
pub struct Task {
    pid: i32,
}

fn set_mempolicy_bind(node: usize) -> std::io::Result<()> {
    const MPOL_BIND: libc::c_long = 2;
    let mut mask = [0u64; 16];
    if node >= mask.len() * 64 {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    mask[node / 64] |= 1 << (node % 64);
    // SAFETY: mask outlives the call and maxnode matches its size in bits.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_BIND,
            mask.as_ptr(),
            (mask.len() * 64) as libc::c_ulong,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// In the child before exec: asks for SIGKILL when the launcher dies. The signal comes when
/// the thread that forked ends, and goset-run forks from its main thread, which lives as long
/// as the launcher. SIGKILL rather than SIGTERM: the launcher forwards every signal it can
/// catch and waits for the task, so it dies first only by SIGKILL or a crash, and nobody is
/// left to follow a SIGTERM that the task ignores with a SIGKILL.
fn die_with(launcher: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and no memory.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The launcher may have died before the prctl, and then no signal comes. kill, not
    // raise: after a raw clone glibc's cached thread id is the launcher's.
    // SAFETY: getppid, getpid and kill are async-signal-safe.
    unsafe {
        if libc::getppid() != launcher {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    Ok(())
}

/// What the child does between fork (or clone) and exec, in this order. System calls and
/// atomics only: it runs in a copy of the launcher that may not allocate.
struct ChildSetup {
    closed: u8,
    cgroup_procs: Option<RawFd>,
    main_slot: Option<MainSlot>,
    cpus: CpuSet,
    node: Option<usize>,
    user: Option<crate::privilege::User>,
    inherit: Vec<RawFd>,
    stdio: Option<(RawFd, RawFd)>,
    die_with_launcher: bool,
    launcher: libc::pid_t,
}

impl ChildSetup {
    /// `join`: write to the group's `cgroup.procs` (a child born in it does not).
    fn run(&self, join: bool) -> std::io::Result<()> {
        // SAFETY: system calls on plain values and buffers of this struct.
        unsafe {
            for fd in (0..3).filter(|fd| self.closed & (1 << fd) != 0) {
                libc::close(fd);
            }
            if let Some((out, err)) = self.stdio {
                if libc::dup2(out, 1) < 0 || libc::dup2(err, 2) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Joining a v1 cpuset resets the mask to the group's CPUs: first, then the mask.
            if let Some(fd) = self.cgroup_procs.filter(|_| join) {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // A claim is a few atomic operations on the shared mapping: safe after fork.
            let claimed = self.main_slot.as_ref().and_then(|m| {
                let claim = m.table.claim_among(libc::getpid(), m.cpus.len())?;
                m.cpus.get(claim.slot).map(|&cpu| CpuSet::single(cpu))
            });
            let (mask, len) = claimed.as_ref().unwrap_or(&self.cpus).as_raw();
            if libc::sched_setaffinity(0, len, mask as *const libc::cpu_set_t) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        for &fd in &self.inherit {
            // SAFETY: F_SETFD on a descriptor of this struct; no memory is passed.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(node) = self.node {
            set_mempolicy_bind(node)?;
        }
        // A change of credentials clears the parent-death signal: it is set after.
        if let Some(user) = &self.user {
            crate::privilege::become_user(user)?;
        }
        if self.die_with_launcher {
            die_with(self.launcher)?;
        }
        Ok(())
    }
}

/// How the task joins its cgroup.
#[derive(Debug, Clone, Copy)]
pub struct CgroupJoin {
    /// The group's `cgroup.procs`, open: the child writes `0` to it before exec (v1, or v2
    /// where `clone3` cannot place it).
    pub procs: RawFd,
    /// The group's directory, open (v2): the child is born in the group
    /// (`clone3(CLONE_INTO_CGROUP)`).
    pub dir: Option<RawFd>,
}

fn start_error(name: &str, e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOENT) => Error::CommandNotFound(name.to_string()),
        Some(libc::EACCES) | Some(libc::ENOEXEC) | Some(libc::EISDIR) => {
            Error::NotExecutable(format!("{name}: cannot execute: {e}"))
        }
        _ => Error::System(format!("cannot start {name}: {e}")),
    }
}

/// The task's environment: the launcher's, less `remove`, plus `add` (which wins).
fn task_environment(
    remove: &[OsString],
    add: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !remove.contains(k) && !add.iter().any(|(a, _)| a == k))
        .collect();
    env.extend(add.iter().cloned());
    env
}

impl Task {
    /// Starts the task: cgroup, process mask, memory policy and identity are set in the child
    /// before exec ([`ChildSetup`]); on cgroup v2 it is born in its group.
    pub fn start(launch: &Launch) -> Result<Task> {
        let (program, args) = launch
            .argv
            .split_first()
            .ok_or_else(|| Error::Usage("no command given".into()))?;
        let name = program.to_string_lossy().into_owned();
        let setup = std::sync::Arc::new(ChildSetup {
            closed: CLOSED_STDIO.load(Ordering::Relaxed),
            cgroup_procs: launch.cgroup.map(|c| c.procs),
            main_slot: launch.main_slot.clone(),
            cpus: launch.cpus,
            node: launch.node,
            user: launch.user.clone(),
            inherit: launch.inherit.clone(),
            stdio: launch.stdio,
            die_with_launcher: launch.die_with_launcher,
            // SAFETY: getpid cannot fail.
            launcher: unsafe { libc::getpid() },
        });
        let born_in = match launch.cgroup.and_then(|c| c.dir) {
            Some(dir) => {
                let path = resolve_command(program)?;
                let env = task_environment(&launch.env_remove, &launch.env);
                let exec = crate::spawn::Exec::new(&path, &launch.argv, &env)
                    .ok_or_else(|| Error::Usage(format!("{name}: an argument holds a NUL byte")))?;
                Some((exec, dir))
            }
            None => None,
        };
        let mut cmd = std::process::Command::new(program);
        for name in &launch.env_remove {
            cmd.env_remove(name);
        }
        cmd.args(args).envs(launch.env.iter().map(|(k, v)| (k, v)));
        let forked = std::sync::Arc::clone(&setup);
        // SAFETY: the closure only makes async-signal-safe system calls.
        unsafe {
            cmd.pre_exec(move || forked.run(true));
        }
        // A signal that came before the task exists ends the run without starting it; one
        // that comes while it is being started waits, and is then forwarded to it.
        let held = signals::hold();
        if let Some(sig) = signals::pending() {
            return Err(Error::Interrupted(sig));
        }
        let cloned = born_in.as_ref().map(|(exec, dir)| {
            crate::spawn::into_cgroup(exec, *dir, &|| {
                // No fork handler runs for a raw clone: what they do for a fork, done here.
                signals::unblock_in_child();
                // SAFETY: resetting a disposition; Rust's runtime ignores SIGPIPE, and std's
                // spawn gives the child the default back.
                unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
                setup.run(false)
            })
        });
        let pid = match cloned {
            Some(Ok(pid)) => pid,
            Some(Err(crate::spawn::Failed::Child(e))) => return Err(start_error(&name, e)),
            // An older kernel: the child joins by writing to cgroup.procs instead.
            Some(Err(crate::spawn::Failed::Unsupported)) | None => {
                let child = cmd.spawn().map_err(|e| start_error(&name, e))?;
                let pid = child.id() as i32;
                // The child is reaped with wait4 below, not through std's handle.
                std::mem::forget(child);
                pid
            }
        };
        if !signals::set_task(pid) {
            // More tasks than signals can follow: --instances is bounded below this.
            crate::output::to_stderr("goset-run: too many tasks to forward signals to\n");
        }
        drop(held);
        Ok(Task { pid })
    }

    /// The task's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Waits for the task, calling `tick` about every `interval` while it runs.
    pub fn wait(&self, interval: Duration, tick: impl FnMut()) -> (Ending, Usage) {
        let ended = wait_all(std::slice::from_ref(self), interval, tick);
        let (_, ending, usage) = ended[0];
        (ending, usage)
    }

    /// Reaps the task if it ended: `None` while it runs; a failed wait counts as exit 1.
    fn try_reap(&self) -> Option<(Ending, Usage)> {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: status and ru are valid out-parameters.
        let rc = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut ru) };
        if rc == self.pid {
            signals::clear_task(self.pid);
            let ending = if libc::WIFSIGNALED(status) {
                Ending::Signaled(libc::WTERMSIG(status))
            } else {
                Ending::Exited(libc::WEXITSTATUS(status))
            };
            return Some((ending, usage(&ru)));
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            signals::clear_task(self.pid);
            return Some((Ending::Exited(1), Usage::default()));
        }
        None
    }
}

/// Makes this process the reaper of the task's orphans: a process whose parent ends before it
/// (mold's linking child, a shell's background job, a daemon's double fork) is re-parented
/// here instead of to init, so it stays in the task's process tree, where the housekeeper
/// watches it and its placement records count as the task's. [`wait_all`] reaps them.
pub fn adopt_orphans() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Reaps every ended child that is none of `tasks` (orphans adopted by [`adopt_orphans`]);
/// a task's own status is left for [`Task::try_reap`].
fn reap_orphans(tasks: &[Task]) {
    loop {
        // SAFETY: zeroed siginfo is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        // SAFETY: info is a valid out-parameter; WNOWAIT leaves the child waitable.
        if unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) } != 0 {
            return;
        }
        // SAFETY: waitid filled info (si_pid 0: no child has ended).
        let pid = unsafe { info.si_pid() };
        if pid <= 0 || tasks.iter().any(|t| t.pid == pid) {
            return;
        }
        let mut status = 0;
        // SAFETY: status is a valid out-parameter; pid is an ended child of ours.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Waits for every task, calling `tick` about every `interval` while any runs, and reaps the
/// orphans it adopted meanwhile. Returns each task's index, ending and usage in the order they
/// ended.
pub fn wait_all(
    tasks: &[Task],
    interval: Duration,
    mut tick: impl FnMut(),
) -> Vec<(usize, Ending, Usage)> {
    // A pidfd becomes readable when its task exits, so the wait ends at once; -1 on an old
    // kernel, where the wait sleeps the interval.
    let pidfds: Vec<i32> = (tasks.iter())
        // SAFETY: pidfd_open takes a pid and flags.
        .map(|t| unsafe { libc::syscall(libc::SYS_pidfd_open, t.pid, 0) } as i32)
        .collect();
    let timeout_ms = interval.as_millis().min(i32::MAX as u128) as i32;
    let mut ended: Vec<(usize, Ending, Usage)> = Vec::new();
    loop {
        reap_orphans(tasks);
        for (i, t) in tasks.iter().enumerate() {
            if ended.iter().any(|e| e.0 == i) {
                continue;
            }
            if let Some((ending, usage)) = t.try_reap() {
                ended.push((i, ending, usage));
            }
        }
        if ended.len() == tasks.len() {
            for fd in pidfds.into_iter().filter(|&fd| fd >= 0) {
                // SAFETY: fd is ours and closed once.
                unsafe { libc::close(fd) };
            }
            return ended;
        }
        tick();
        let mut pfds: Vec<libc::pollfd> = (pidfds.iter().enumerate())
            .filter(|&(i, &fd)| fd >= 0 && !ended.iter().any(|e| e.0 == i))
            .map(|(_, &fd)| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if pfds.len() + ended.len() == tasks.len() {
            // SAFETY: pfds is a valid pollfd array of its length.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        } else {
            std::thread::sleep(interval);
        }
    }
}

fn usage(ru: &libc::rusage) -> Usage {
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Usage {
        user_s: secs(ru.ru_utime),
        system_s: secs(ru.ru_stime),
        max_rss_kib: ru.ru_maxrss,
        minor_faults: ru.ru_minflt,
        major_faults: ru.ru_majflt,
        voluntary_ctxsw: ru.ru_nvcsw,
        involuntary_ctxsw: ru.ru_nivcsw,
    }
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn cpu_time_the_housekeeper_saw_is_never_lost() {
        let waited = Usage {
            user_s: 1.0,
            system_s: 0.5,
            ..Usage::default()
        };
        // wait4 counted more than the threads read: kept as it is.
        assert_eq!(waited.at_least(1.2), waited);
        // A sandbox's processes, reaped inside it: wait4 saw nothing of their 2 s.
        let sandboxed = Usage::default().at_least(2.0);
        assert_eq!((sandboxed.user_s, sandboxed.system_s), (2.0, 0.0));
        assert_eq!(waited.at_least(2.0).user_s, 1.5);
    }
}
