//! Cold: builds a process's configuration from its sources, once, in place.
//!
//! Owns: the sources in order: `GOSET_PLAN=<run dir>`, else `GOSET_CPUS=<cpulist>`, else the
//! CPUs the process may use at start; `GOSET_LOG=FILE|stderr` overrides the log; the root
//! file; and every file the shim reads at start, each through the one bounded, non-blocking,
//! regular-file-only reader ([`sys::read_whole`]): a FIFO, a device or a huge file in any
//! place is refused with one warning, never blocks or fills memory. A secure-exec process
//! (`AT_SECURE`: setuid, setgid, file capabilities) never opens a path taken from the
//! environment: `GOSET_PLAN` and `GOSET_LOG` are ignored with one warning (`GOSET_CPUS`, which
//! names no file, still counts). Any problem disables the shim with one warning, and every
//! hook then passes calls through.
//!
//! Stack: the plan is parsed into its static ([`crate::config`]) and the file buffers (16 KiB
//! of plan text, paths, the executable path) are one static scratch area that only the
//! initialising thread touches, so that loading fits in about 2 KiB of stack even when a hook
//! (not the constructor) is the first call of the process. Must not: allocate, lock, or be
//! called but through [`crate::init`].

use crate::block;
use crate::buf::{Buf, Exclusive};
use crate::config::Config;
use crate::log::{self, warn_once};
use crate::rank;
use crate::role;
use crate::sys;
use core::sync::atomic::{AtomicBool, Ordering};
use goset_plan::plan::{LOG_FILE, PLAN_FILE, SLOTS_FILE};
use goset_plan::{cpulist, slots, vars, CpuSet, Plan, SlotTable, MAX_SLOTS};

/// Largest plan file read (also the buffer `/sys/devices/system/cpu/online` is read into).
const PLAN_MAX: usize = 16 * 1024;
/// Longest executable path looked at.
const EXE_MAX: usize = 512;
/// Longest path built from the run directory.
const PATH_MAX: usize = 600;

/// The initialising thread's buffers.
struct Scratch {
    text: [u8; PLAN_MAX],
    exe: [u8; EXE_MAX],
    path: Buf<PATH_MAX>,
    /// Each slot's block, while the process chooses its own ([`block::take`]).
    blocks: [u16; MAX_SLOTS],
}

static SCRATCH: Exclusive<Scratch> = Exclusive::new(Scratch {
    text: [0; PLAN_MAX],
    exe: [0; EXE_MAX],
    path: Buf::new(),
    blocks: [0; MAX_SLOTS],
});

fn show(b: &[u8]) -> &str {
    core::str::from_utf8(b).unwrap_or("(not utf-8)")
}

/// `<dir>/<name>` with a NUL, in `path`; `None` when it does not fit.
fn path_in<'a>(path: &'a mut Buf<PATH_MAX>, dir: &[u8], name: &str) -> Option<&'a [u8]> {
    path.truncate(0);
    path.push(dir).push(b"/").push(name.as_bytes());
    path.c_str()
}

/// The shim stays out of this process (the reason, if any, was warned about).
#[derive(Debug)]
pub struct Disabled;

/// Loads the configuration, filling `plan` in place.
///
/// # Safety
/// Only by the thread that won [`crate::config::begin`], once: it alone uses the scratch
/// area and `plan`.
#[cold]
#[inline(never)]
pub unsafe fn load(plan: &'static mut Plan) -> Result<Config, Disabled> {
    // SAFETY: the caller is the one initialising thread.
    let scratch = unsafe { SCRATCH.get_mut() };
    let exe_len = sys::readlink(b"/proc/self/exe\0", &mut scratch.exe).unwrap_or(0);
    let exe = &scratch.exe[..exe_len];
    if goset_plan::plan::is_goset_program(exe) {
        // Not a problem to warn about: goset's own programs are never placed.
        return Err(Disabled);
    }
    // SAFETY: the initialising thread, before any record is written.
    unsafe { log::set_exe(exe) };
    let Some(allowed) = sys::get_affinity(0) else {
        warn_once(format_args!(
            "cannot read this process's CPUs; not placing threads"
        ));
        return Err(Disabled);
    };
    let (dir_var, log_var, slots_var) = env_paths();
    let (table, dir, bound, first) = match dir_var {
        Some(dir) => {
            let table = from_plan_dir(dir, slots_var, plan, scratch)?;
            // goset-run's own child (or an image it exec'd) is the task's first process.
            let first = plan.launcher_pid != 0 && sys::getppid() as u64 == plan.launcher_pid;
            (table, Some(dir), None, first)
        }
        None => {
            let (table, bound, first) = by_hand(plan, &allowed, slots_var, scratch)?;
            (table, None, bound, first)
        }
    };
    check_cpus(plan, &allowed, &mut scratch.text)?;
    let log_path = match (log_var, dir) {
        (Some(path), _) => Some(path),
        (None, Some(dir)) => match plan.log_path() {
            Some(path) => Some(path),
            None => path_in(&mut scratch.path, dir, LOG_FILE).map(|p| &p[..p.len() - 1]),
        },
        (None, None) => None,
    };
    // A process in a sandbox's PID namespace writes no records (see crate::process).
    let elsewhere = in_other_pidns(plan);
    STARTED_ELSEWHERE.store(elsewhere, Ordering::Relaxed);
    if let Some(path) = log_path.filter(|_| !elsewhere) {
        // SAFETY: the initialising thread.
        unsafe { log::open(path) };
    }
    let (exe, comm) = (&scratch.exe[..exe_len], &sys::thread_name());
    let wrapper = role::is_wrapper(exe, comm);
    let launcher = wrapper || role::is_launcher(exe, comm);
    let root = plan.main_on_housekeeper && is_root(dir, table, scratch);
    let pid = sys::getpid();
    let block = match bound {
        // A local rank under --near gpu:local-rank: its GPU's block, whatever its parent's.
        None if !launcher => rank::take(plan, table, pid)
            .unwrap_or_else(|| block::take(plan, table, pid, first, &mut scratch.blocks)),
        _ => None,
    };
    Ok(Config {
        plan,
        table,
        launcher,
        wrapper,
        root,
        // One of several processes (or keeping to a block): its threads stay near each other.
        near: block.is_some() || !first,
        bound: bound.or(block),
    })
}

/// A path from the environment, while the process is not secure-exec.
type EnvPath = Option<&'static [u8]>;

/// `GOSET_PLAN`, `GOSET_LOG` and `GOSET_SLOTS`, when set, non-empty, and the process is not
/// secure-exec.
fn env_paths() -> (EnvPath, EnvPath, EnvPath) {
    let var = |name: &str| crate::env::get(name.as_bytes()).filter(|v| !v.is_empty());
    let (dir, log, slots) = (var(vars::PLAN), var(vars::LOG), var(vars::SLOTS));
    // SAFETY: getauxval only reads the auxiliary vector.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    if secure && (dir.is_some() || log.is_some() || slots.is_some()) {
        warn_once(format_args!(
            "a setuid or otherwise secure-exec program: GOSET_PLAN, GOSET_LOG and GOSET_SLOTS \
             are ignored (the shim opens no path from the environment here)"
        ));
        return (None, None, None);
    }
    (dir, log, slots)
}

fn from_plan_dir(
    dir: &'static [u8],
    handed: EnvPath,
    plan: &mut Plan,
    scratch: &mut Scratch,
) -> Result<&'static SlotTable, Disabled> {
    if sys::geteuid() == 0 {
        refuse_foreign_dir(dir, scratch)?;
    }
    let Some(c_path) = path_in(&mut scratch.path, dir, PLAN_FILE) else {
        warn_once(format_args!(
            "GOSET_PLAN={} is too long; not placing threads",
            show(dir)
        ));
        return Err(Disabled);
    };
    let len = sys::read_whole(c_path, &mut scratch.text).map_err(|e| {
        if matches!(e, sys::FileError::Os(libc::EACCES)) {
            // A task that switched to another user itself (setpriv, runuser, a daemon
            // dropping root) still loads the shim; the run is goset-run's user's.
            warn_once(format_args!(
                "GOSET_PLAN={}: cannot read {}/{PLAN_FILE} ({e}): this process runs as uid {}, \
                 not goset-run's user; not placing threads (goset-run under sudo runs the task \
                 as SUDO_USER; or run goset-run as that user)",
                show(dir),
                show(dir),
                sys::geteuid()
            ));
        } else {
            warn_once(format_args!(
                "GOSET_PLAN={}: cannot read {}/{PLAN_FILE} ({e}); not placing threads",
                show(dir),
                show(dir)
            ));
        }
        Disabled
    })?;
    plan.parse_into(&scratch.text[..len]).map_err(|e| {
        warn_once(format_args!(
            "GOSET_PLAN={}: {e}; not placing threads",
            show(dir)
        ));
        Disabled
    })?;
    let slots_path = path_in(&mut scratch.path, dir, SLOTS_FILE);
    let why = match map_table(slots_path.unwrap_or(b"\0"), plan.slot_count()) {
        Ok(table) => return Ok(table),
        Err(why) => why,
    };
    // The link into the launcher's /proc/<pid>/fd cannot be followed from a sandbox with a
    // /proc of its own, nor by another user: the descriptor the task inherited can.
    if let Some(table) = handed_table(handed, plan, scratch) {
        return Ok(table);
    }
    let gone = matches!(why, TableError::Open(libc::ENOENT | libc::EACCES));
    warn_once(format_args!(
        "GOSET_PLAN={}: {}/{SLOTS_FILE} {why}{}{}{}; not placing threads",
        show(dir),
        show(dir),
        if gone {
            " and the descriptor goset-run handed on (GOSET_SLOTS="
        } else {
            ""
        },
        if gone {
            show(handed.unwrap_or(b""))
        } else {
            ""
        },
        if gone {
            ") is gone: a sandbox or a program that closed it, with a /proc of its own or as \
             another user (firejail closes every descriptor above 2 unless given --keep-fd with \
             the numbers of GOSET_SLOTS and GOSET_LOG_FD)"
        } else {
            ""
        }
    ));
    Err(Disabled)
}

/// As root, a plan directory root does not own is refused: another user could have written
/// its plan, whose `log` line names a file root would create (goset-run refuses the same).
fn refuse_foreign_dir(dir: &[u8], scratch: &mut Scratch) -> Result<(), Disabled> {
    scratch.path.truncate(0);
    let Some(c_dir) = scratch.path.push(dir).c_str() else {
        return Err(Disabled);
    };
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    let owner = sys::open(c_dir, flags, 0).ok().and_then(|fd| {
        let st = sys::fstat(fd);
        sys::close(fd);
        st.map(|st| st.owned.uid)
    });
    match owner {
        Some(0) => Ok(()),
        Some(uid) => {
            warn_once(format_args!(
                "GOSET_PLAN={}: owned by uid {uid}, not root: a root process takes no plan \
                 another user could write; not placing threads",
                show(dir)
            ));
            Err(Disabled)
        }
        None => {
            warn_once(format_args!(
                "GOSET_PLAN={}: not a directory that can be opened; not placing threads",
                show(dir)
            ));
            Err(Disabled)
        }
    }
}

/// The table named by `GOSET_SLOTS` (`handed`), when it is one made for `plan`.
fn handed_table(handed: EnvPath, plan: &Plan, scratch: &mut Scratch) -> Option<&'static SlotTable> {
    scratch.path.truncate(0);
    let c_path = scratch.path.push(handed?).c_str()?;
    let table = map_table(c_path, plan.slot_count()).ok()?;
    table.is_stamped(plan.cpus_hash()).then_some(table)
}

/// Why the slot table cannot be used, as the warning says it.
enum TableError {
    Open(i32),
    NotATable,
    OtherPlan,
}

impl core::fmt::Display for TableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TableError::Open(e) => write!(f, "cannot be opened ({})", sys::ErrnoName(*e)),
            TableError::NotATable => f.write_str("is not a slot table"),
            TableError::OtherPlan => f.write_str("is not the slot table of this plan"),
        }
    }
}

/// Maps the run directory's slot table: a regular file of exactly the table's size.
fn map_table(c_path: &[u8], slot_count: usize) -> Result<&'static SlotTable, TableError> {
    let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    let fd = sys::open(c_path, flags, 0).map_err(TableError::Open)?;
    let table = match sys::fstat(fd) {
        Some(st) if st.kind == libc::S_IFREG && st.size == SlotTable::SIZE as u64 => {
            slots::map(Some(fd))
        }
        _ => None,
    };
    sys::close(fd);
    let table = table.ok_or(TableError::NotATable)?;
    if table.is_ready() && table.slot_count() == slot_count {
        Ok(table)
    } else {
        Err(TableError::OtherPlan)
    }
}

/// By hand: the plan from `GOSET_CPUS` (else the CPUs the process started on), the slot table
/// every process of the tree shares, the binding the process keeps, and whether it is the
/// tree's first process (it made the table).
///
/// The first shimmed process of a tree makes the table and hands it on through
/// [`vars::SLOTS`], so that the processes of a tree started by hand spread over the CPUs as
/// under goset-run; a process whose table is gone (the first process ended) makes one for its
/// own descendants. A process that started on a strict part of the plan's CPUs without holding
/// a claim in the table was bound by someone else (`taskset`, `numactl`, `mpirun`), or is the
/// first process and was started bound: it keeps that binding.
fn by_hand(
    plan: &mut Plan,
    allowed: &CpuSet,
    handed: EnvPath,
    scratch: &mut Scratch,
) -> Result<(&'static SlotTable, Option<CpuSet>, bool), Disabled> {
    match crate::env::get(vars::CPUS.as_bytes()) {
        Some(list) => plan.set_with_cpus(list).map_err(|e| {
            warn_once(format_args!(
                "GOSET_CPUS={}: {e}; not placing threads",
                show(list)
            ));
            Disabled
        })?,
        None => plan.set_from_set(allowed).map_err(|e| {
            warn_once(format_args!(
                "cannot use this process's CPUs: {e}; not placing threads"
            ));
            Disabled
        })?,
    }
    if let Some(blocks) = crate::env::get(vars::RANK_BLOCKS.as_bytes()) {
        plan.set_rank_blocks(blocks).map_err(|e| {
            warn_once(format_args!(
                "{}={}: {e}; not placing threads",
                vars::RANK_BLOCKS,
                show(blocks)
            ));
            Disabled
        })?;
    }
    let inherited = handed_table(handed, plan, scratch);
    let table = match inherited {
        Some(table) => table,
        None => hand_on(plan.slot_count(), plan.cpus_hash())?,
    };
    let own_binding = match (handed, inherited) {
        (None, _) => true,
        (Some(_), Some(table)) => table.find(sys::getpid()).is_none(),
        (Some(_), None) => false,
    };
    let cpus = plan.cpu_set();
    let strict_part = !allowed.is_empty() && allowed.intersection(&cpus) == *allowed;
    let bound = (own_binding && strict_part && *allowed != cpus).then_some(*allowed);
    Ok((table, bound, inherited.is_none()))
}

/// The `GOSET_SLOTS=<value>` entry this process hands on (NUL-terminated), written while
/// loading and put into the environment by [`hand_on_now`]; static, since the environment
/// keeps pointing at it.
static HANDED: Exclusive<Buf<64>> = Exclusive::new(Buf::new());
/// Whether [`HANDED`] is written and [`hand_on_now`] has yet to export it.
static TO_HAND_ON: AtomicBool = AtomicBool::new(false);

/// A new slot table for `slot_count` slots, stamped with `hash`, to be named in this process's
/// environment for its descendants ([`hand_on_now`]); a private one (forked children share it)
/// when no memfd can be made.
fn hand_on(slot_count: usize, hash: u32) -> Result<&'static SlotTable, Disabled> {
    if let Ok((low, table)) = slots::create_sealed(slot_count) {
        table.stamp(hash);
        // Kept out of the low numbers a program may expect free.
        let fd = sys::dup_high(low);
        if fd != low {
            sys::close(low);
        }
        // SAFETY: the initialising thread; read only after TO_HAND_ON (Release) says so.
        let value = unsafe { HANDED.get_mut() };
        value.truncate(0);
        let pid = sys::getpid();
        let name = vars::SLOTS;
        let _ = core::fmt::Write::write_fmt(value, format_args!("{name}=/proc/{pid}/fd/{fd}\0"));
        TO_HAND_ON.store(value.fits(), Ordering::Release);
        return Ok(table);
    }
    let Some(table) = slots::map(None) else {
        warn_once(format_args!(
            "cannot map an anonymous slot table; not placing threads"
        ));
        return Err(Disabled);
    };
    table.init(slot_count);
    table.stamp(hash);
    Ok(table)
}

/// Puts the table made while loading into the environment ([`crate::env::put`], not libc's
/// `setenv`, which allocates on the program's heap), from the constructor: before `main`
/// reads its environment, even when a hook called earlier (by another library's constructor)
/// loaded the configuration.
pub fn hand_on_now() {
    if !TO_HAND_ON.swap(false, Ordering::AcqRel) {
        return;
    }
    // SAFETY: written before TO_HAND_ON was set, read-only since; static, as the environment
    // needs.
    let entry = unsafe { HANDED.get() };
    crate::env::put(entry.as_bytes());
}

/// Whether this image started in another PID namespace than goset-run's, as [`load`] found
/// (an image's namespace is its start's; a forked child asks [`in_other_pidns`] again).
pub fn started_elsewhere() -> bool {
    STARTED_ELSEWHERE.load(Ordering::Relaxed)
}

static STARTED_ELSEWHERE: AtomicBool = AtomicBool::new(false);

/// Whether this process is in a PID namespace other than the plan's (see
/// [`goset_plan::Plan::pidns`]); false when the plan names none. A process that cannot tell
/// (no /proc) counts as elsewhere: its ids may be anyone's.
pub fn in_other_pidns(plan: &Plan) -> bool {
    if plan.pidns == 0 {
        return false;
    }
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    let Ok(fd) = sys::open(b"/proc/self/ns/pid\0", flags, 0) else {
        return true;
    };
    let ino = sys::fstat(fd).map(|st| st.id.ino);
    sys::close(fd);
    ino != Some(plan.pidns)
}

/// Plan CPUs must be ones this process may run on. A process narrowed by goset itself (a
/// launcher's child on the housekeeper, a rank bound before exec) has a mask inside the
/// reservation: then the plan's CPUs need only be online.
fn check_cpus(plan: &Plan, allowed: &CpuSet, text: &mut [u8]) -> Result<(), Disabled> {
    let cpus = plan.cpu_set();
    if cpus.intersection(allowed) == cpus {
        // The common case, decided without reading sysfs (a program started under goset pays
        // this at every exec).
        return Ok(());
    }
    let narrowed = !allowed.is_empty() && allowed.intersection(&plan.reservation) == *allowed;
    let online = sys::read_whole(b"/sys/devices/system/cpu/online\0", text)
        .ok()
        .and_then(|n| cpulist::parse_set(&text[..n]).ok())
        .filter(|s| !s.is_empty());
    let usable = match online {
        Some(online) if narrowed => online,
        _ => *allowed,
    };
    if cpus.intersection(&usable) == cpus {
        return Ok(());
    }
    warn_outside(&cpus, &usable, allowed);
    Err(Disabled)
}

/// The warning of [`check_cpus`], in a frame of its own: its buffers are not on the path of a
/// plan that fits.
#[cold]
#[inline(never)]
fn warn_outside(cpus: &CpuSet, usable: &CpuSet, allowed: &CpuSet) {
    let mut outside = Buf::<256>::new();
    let missing: CpuSet = cpus.iter().filter(|&c| !usable.contains(c)).collect();
    let _ = cpulist::write_ranges(&mut outside, &missing);
    let mut have = Buf::<256>::new();
    let _ = cpulist::write_ranges(&mut have, allowed);
    warn_once(format_args!(
        "plan CPUs {} are outside this process's allowed CPUs {}; not placing threads",
        show(outside.as_bytes()),
        show(have.as_bytes())
    ));
}

/// Whether this process is the task's first: the first to create `<dir>/root`, which holds its
/// pid so that the same process after exec still knows. Without a run dir: unknown, false.
fn is_root(dir: Option<&[u8]>, table: &SlotTable, scratch: &mut Scratch) -> bool {
    let Some(dir) = dir else { return false };
    let Some(c_path) = path_in(&mut scratch.path, dir, "root") else {
        return false;
    };
    let pid = sys::getpid();
    let mut text = Buf::<16>::new();
    let _ = core::fmt::Write::write_fmt(&mut text, format_args!("{pid}"));
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NONBLOCK;
    match sys::open(c_path, flags, 0o644) {
        Ok(fd) => {
            sys::write(fd, text.as_bytes());
            sys::close(fd);
            true
        }
        Err(libc::EEXIST) => {
            let mut held = [0u8; 16];
            sys::read_whole(c_path, &mut held)
                .is_ok_and(|n| held[..n].trim_ascii() == text.as_bytes())
        }
        // The run dir is read-only to us: the first process is the one that finds no records.
        Err(_) => table.records().next().is_none(),
    }
}
