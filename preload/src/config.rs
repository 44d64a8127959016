//! Configuration, read once per process: the plan, the slot table, the log, the process role.
//!
//! Owns: the life cycle (uninitialised → initialising → ready | disabled) as one atomic, and
//! the sources in order: `GOSET_PLAN=<run dir>`, else `GOSET_CPUS=<cpulist>`, else the CPUs the
//! process may use at start; `GOSET_LOG=FILE|stderr` overrides the log. Any problem disables the
//! shim with one warning, and every hook then passes calls through. Must not: allocate (the
//! plan is read into a stack buffer with raw syscalls) or hold a lock.

use crate::log::warn_once;
use crate::role;
use crate::sys::{self, Buf};
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, Ordering};
use goset_plan::plan::{LOG_FILE, PLAN_FILE, SLOTS_FILE};
use goset_plan::{cpulist, slots, CpuSet, Plan, SlotTable};

/// Longest executable path kept for the log.
const EXE_MAX: usize = 512;
/// Largest plan file read.
const PLAN_MAX: usize = 16 * 1024;

/// Everything fixed for the life of a process (a forked child keeps its parent's).
pub struct Config {
    /// The plan: task CPUs in slot order, housekeeper, reservation, skip mask.
    pub plan: Plan,
    /// The shared slot table.
    pub table: &'static SlotTable,
    /// Placement log descriptor, or -1 for none.
    pub log_fd: i32,
    /// This process only launches others (`mpirun`, a shell ...).
    pub launcher: bool,
    /// The first process of the task, when it can be told (for `main_on_housekeeper`).
    pub root: bool,
    exe: [u8; EXE_MAX],
    exe_len: usize,
}

impl Config {
    /// The process's executable path.
    pub fn exe(&self) -> &[u8] {
        &self.exe[..self.exe_len]
    }

    /// Where helpers and launcher threads run: the housekeeper, else the whole reservation.
    pub fn helper_set(&self) -> CpuSet {
        match self.plan.housekeeper {
            Some(hk) => CpuSet::single(hk),
            None => self.plan.reservation,
        }
    }

    /// A request of a helper or launcher: `mask ∩ reservation`, or [`Config::helper_set`]
    /// when that is empty.
    pub fn clamp(&self, mask: &CpuSet) -> CpuSet {
        let inside = mask.intersection(&self.plan.reservation);
        if inside.is_empty() {
            self.helper_set()
        } else {
            inside
        }
    }
}

const UNINIT: u8 = 0;
const INITIALISING: u8 = 1;
const READY: u8 = 2;
const DISABLED: u8 = 3;

struct Slot {
    state: AtomicU8,
    config: UnsafeCell<MaybeUninit<Config>>,
}

// SAFETY: `config` is written once, by the thread that moved `state` from UNINIT to
// INITIALISING, and read only after `state` is READY (Release/Acquire), never written again.
unsafe impl Sync for Slot {}

static SLOT: Slot = Slot {
    state: AtomicU8::new(UNINIT),
    config: UnsafeCell::new(MaybeUninit::uninit()),
};

/// The configuration, initialising it on first use; `None` while disabled, or while another
/// thread is still initialising after a short wait.
pub fn get() -> Option<&'static Config> {
    let mut spins = 0u32;
    loop {
        match SLOT.state.load(Ordering::Acquire) {
            // SAFETY: READY is stored only after the config was fully written.
            READY => return Some(unsafe { (*SLOT.config.get()).assume_init_ref() }),
            DISABLED => return None,
            UNINIT => {
                if SLOT
                    .state
                    .compare_exchange(UNINIT, INITIALISING, Ordering::Acquire, Ordering::Acquire)
                    .is_ok()
                {
                    return initialise();
                }
            }
            _ => {
                spins += 1;
                if spins > 10_000 {
                    return None;
                }
                // SAFETY: sched_yield has no arguments and no memory effects.
                unsafe { sys::syscall6(libc::SYS_sched_yield, [0; 6]) };
            }
        }
    }
}

/// Whether the configuration is ready, without initialising it.
pub fn ready() -> Option<&'static Config> {
    // SAFETY: as in `get`.
    (SLOT.state.load(Ordering::Acquire) == READY)
        .then(|| unsafe { (*SLOT.config.get()).assume_init_ref() })
}

fn initialise() -> Option<&'static Config> {
    // SAFETY: this thread won the UNINIT → INITIALISING exchange, so it alone writes the config.
    let out = unsafe { &mut *SLOT.config.get() };
    match load(out) {
        Ok(()) => {
            // Before READY, so no thread that sees READY takes the main thread for a stranger.
            crate::process::set_pid(sys::getpid());
            if sys::seccomp_mode() == 2 {
                sys::note_seccomp_filter();
            }
            SLOT.state.store(READY, Ordering::Release);
            // SAFETY: load returned Ok, so it wrote the config.
            let config = unsafe { out.assume_init_ref() };
            crate::process::start(config, "init");
            Some(config)
        }
        Err(()) => {
            SLOT.state.store(DISABLED, Ordering::Release);
            None
        }
    }
}

/// Reads a whole small file (path NUL-terminated) into `buf`.
fn read_file(path: &[u8], buf: &mut [u8]) -> Result<usize, i32> {
    let fd = sys::open(path, libc::O_RDONLY | libc::O_CLOEXEC, 0)?;
    let n = sys::read_all(fd, buf);
    sys::close(fd);
    n.ok_or(libc::EIO)
}

fn path_in(dir: &[u8], name: &str) -> Buf<600> {
    let mut p = Buf::new();
    p.push(dir).push(b"/").push(name.as_bytes());
    p
}

fn show(b: &[u8]) -> &str {
    core::str::from_utf8(b).unwrap_or("(not utf-8)")
}

struct Sources {
    plan: Plan,
    table: &'static SlotTable,
    log: Buf<600>,
    dir: Option<&'static [u8]>,
}

fn from_plan_dir(dir: &'static [u8]) -> Result<Sources, ()> {
    let mut path = path_in(dir, PLAN_FILE);
    let mut text = [0u8; PLAN_MAX];
    let Some(c_path) = path.c_str() else {
        warn_once(format_args!(
            "GOSET_PLAN={} is too long; not placing threads",
            show(dir)
        ));
        return Err(());
    };
    let len = match read_file(c_path, &mut text) {
        Ok(len) => len,
        Err(e) => {
            warn_once(format_args!(
                "GOSET_PLAN={}: cannot read {}/{PLAN_FILE} (errno {e}); not placing threads",
                show(dir),
                show(dir)
            ));
            return Err(());
        }
    };
    let plan = Plan::parse(&text[..len]).map_err(|e| {
        warn_once(format_args!(
            "GOSET_PLAN={}: {e}; not placing threads",
            show(dir)
        ));
    })?;
    let mut slots_path = path_in(dir, SLOTS_FILE);
    let table = slots_path
        .c_str()
        .and_then(|p| sys::open(p, libc::O_RDWR | libc::O_CLOEXEC, 0).ok())
        .and_then(|fd| {
            let mut st = MaybeUninit::<libc::stat>::uninit();
            // SAFETY: fstat writes one stat struct into st.
            let ok = unsafe { libc::fstat(fd, st.as_mut_ptr()) } == 0
                // SAFETY: fstat succeeded, so st is initialised.
                && unsafe { st.assume_init_ref() }.st_size as usize >= SlotTable::SIZE;
            let table = if ok { slots::map(Some(fd)) } else { None };
            sys::close(fd);
            table
        })
        .filter(|t| t.is_ready() && t.slot_count() == plan.slot_count());
    let Some(table) = table else {
        warn_once(format_args!(
            "GOSET_PLAN={}: {}/{SLOTS_FILE} is missing or not a slot table for this plan; not placing threads",
            show(dir),
            show(dir)
        ));
        return Err(());
    };
    let mut log = Buf::new();
    match plan.log_path() {
        Some(p) => log.push(p),
        None => log.push(dir).push(b"/").push(LOG_FILE.as_bytes()),
    };
    Ok(Sources {
        plan,
        table,
        log,
        dir: Some(dir),
    })
}

fn by_hand(allowed: &CpuSet) -> Result<Sources, ()> {
    let plan = match crate::env::get(b"GOSET_CPUS") {
        Some(list) => Plan::with_cpus(list).map_err(|e| {
            warn_once(format_args!(
                "GOSET_CPUS={}: {e}; not placing threads",
                show(list)
            ));
        })?,
        None => {
            let mut list = Buf::<8192>::new();
            let _ = cpulist::write_ranges(&mut list, allowed);
            Plan::with_cpus(list.as_bytes()).map_err(|e| {
                warn_once(format_args!(
                    "cannot use this process's CPUs: {e}; not placing threads"
                ));
            })?
        }
    };
    let Some(table) = slots::map(None) else {
        warn_once(format_args!(
            "cannot map an anonymous slot table; not placing threads"
        ));
        return Err(());
    };
    table.init(plan.slot_count());
    Ok(Sources {
        plan,
        table,
        log: Buf::new(),
        dir: None,
    })
}

/// Plan CPUs must be ones this process may run on. A process narrowed by goset itself (a
/// launcher's child on the housekeeper, a rank bound before exec) has a mask inside the
/// reservation: then the plan's CPUs need only be online.
fn check_cpus(plan: &Plan, allowed: &CpuSet) -> Result<(), ()> {
    let cpus = plan.cpu_set();
    let narrowed = !allowed.is_empty() && allowed.intersection(&plan.reservation) == *allowed;
    let mut online_text = [0u8; 4096];
    let online = read_file(b"/sys/devices/system/cpu/online\0", &mut online_text)
        .ok()
        .and_then(|n| cpulist::parse_set(&online_text[..n]).ok())
        .filter(|s| !s.is_empty());
    let usable = match online {
        Some(online) if narrowed => online,
        _ => *allowed,
    };
    if cpus.intersection(&usable) == cpus {
        return Ok(());
    }
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
    Err(())
}

/// Whether this process is the task's first: the first to create `<dir>/root`, which holds its
/// pid so that the same process after exec still knows. Without a run dir: unknown, false.
fn is_root(dir: Option<&[u8]>, table: &SlotTable) -> bool {
    let Some(dir) = dir else { return false };
    let mut path = path_in(dir, "root");
    let Some(c_path) = path.c_str() else {
        return false;
    };
    let pid = sys::getpid();
    let mut text = Buf::<16>::new();
    let _ = core::fmt::Write::write_fmt(&mut text, format_args!("{pid}"));
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    match sys::open(c_path, flags, 0o644) {
        Ok(fd) => {
            sys::write(fd, text.as_bytes());
            sys::close(fd);
            true
        }
        Err(libc::EEXIST) => {
            let mut held = [0u8; 16];
            read_file(c_path, &mut held).is_ok_and(|n| held[..n].trim_ascii() == text.as_bytes())
        }
        // The run dir is read-only to us: the first process is the one that finds no records.
        Err(_) => table.records().next().is_none(),
    }
}

fn open_log(path: &[u8]) -> i32 {
    if path == b"stderr" {
        return 2;
    }
    let mut p = Buf::<600>::new();
    p.push(path);
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC;
    match p.c_str().map(|c| sys::open(c, flags, 0o644)) {
        Some(Ok(fd)) => fd,
        _ => {
            warn_once(format_args!(
                "cannot open the placement log {}; not logging",
                show(path)
            ));
            -1
        }
    }
}

fn load(out: &mut MaybeUninit<Config>) -> Result<(), ()> {
    let mut exe = [0u8; EXE_MAX];
    let exe_len = sys::readlink(b"/proc/self/exe\0", &mut exe).unwrap_or(0);
    if role::is_goset(&exe[..exe_len]) {
        // Not a problem to warn about: goset's own programs are never placed.
        return Err(());
    }
    let Some(allowed) = sys::get_affinity(0) else {
        warn_once(format_args!(
            "cannot read this process's CPUs; not placing threads"
        ));
        return Err(());
    };
    let sources = match crate::env::get(b"GOSET_PLAN").filter(|d| !d.is_empty()) {
        Some(dir) => from_plan_dir(dir)?,
        None => by_hand(&allowed)?,
    };
    check_cpus(&sources.plan, &allowed)?;
    let log_fd = match crate::env::get(b"GOSET_LOG").filter(|l| !l.is_empty()) {
        Some(path) => open_log(path),
        None if sources.log.as_bytes().is_empty() => -1,
        None => open_log(sources.log.as_bytes()),
    };
    let launcher = role::is_launcher(&exe[..exe_len], &sys::thread_name());
    let root = sources.plan.main_on_housekeeper && is_root(sources.dir, sources.table);
    out.write(Config {
        plan: sources.plan,
        table: sources.table,
        log_fd,
        launcher,
        root,
        exe,
        exe_len,
    });
    Ok(())
}
