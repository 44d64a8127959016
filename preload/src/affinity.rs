//! Every affinity entry point: `sched_setaffinity`, libc `syscall(SYS_sched_setaffinity)`,
//! `pthread_setaffinity_np`, and the attr setters (which are logged and passed through, since
//! `pthread_create` overrides the mask anyway).
//!
//! Owns: the answer to "thread T asks for mask M": a compute thread gets its own CPU (and
//! success, never EINVAL: libomp aborts on errors); helpers and launcher threads get M clamped
//! to the reservation; threads outside the task are left alone. Must not: call libc's
//! `syscall` or `sched_setaffinity` (raw syscalls only), allocate, or lock.

use crate::config::{self, Config};
use crate::log::Event;
use crate::placement::Placement;
use crate::role::Role;
use crate::{process, real, sys, thread};
use goset_plan::CpuSet;
use libc::{c_int, pthread_attr_t, pthread_t};

/// Whose mask a request is about.
enum Target {
    /// A thread of this task whose placement is known (tid, placement).
    Placed(i32, Placement),
    /// A thread of this process the shim did not place: clamp.
    Unplaced(i32),
    /// Not ours: pass through.
    Foreign,
}

fn of_tid(cfg: &Config, pid: i32, call: &str) -> Target {
    let me = thread::tid();
    if pid == 0 || pid == me {
        return Target::Placed(me, process::current(cfg, call));
    }
    if pid == process::pid() {
        return Target::Placed(pid, process::main_placement());
    }
    if let Some(p) = thread::find_tid(pid) {
        return Target::Placed(pid, p);
    }
    if let Some((_, slot)) = cfg.table.find(pid) {
        let p = Placement {
            role: Role::Main,
            cpu: cfg.plan.cpu_of_slot(slot),
            slot: Some(slot),
            record: None,
            shared: false,
        };
        return Target::Placed(pid, p);
    }
    let mut path = sys::Buf::<48>::new();
    let _ = core::fmt::Write::write_fmt(&mut path, format_args!("/proc/self/task/{pid}"));
    match path.c_str() {
        Some(p) if sys::exists(p) => Target::Unplaced(pid),
        _ => Target::Foreign,
    }
}

/// Applies the answer for `target`; the raw result (0 on success).
fn answer(cfg: &Config, target: Target, requested: &CpuSet, call: &str) -> Option<i64> {
    let (tid, p, set) = match target {
        Target::Placed(tid, p) => (tid, p, p.answer(cfg, requested)),
        Target::Unplaced(tid) => (
            tid,
            Placement::unslotted(Role::Unknown, None),
            cfg.clamp(requested),
        ),
        Target::Foreign => return None,
    };
    // The caller itself is addressed as 0: right even in a vfork child, whose cached tid is
    // its parent's.
    let who = if tid == thread::tid() { 0 } else { tid };
    let ret = sys::set_affinity(who, &set);
    if ret < 0 {
        // Our CPU is unusable (hot-unplugged, cgroup changed): let the request through.
        return None;
    }
    if !thread::repeats_last_set(fingerprint(tid, requested, &set)) {
        process::note(cfg, Event::Set, call, tid, Some(requested), &p, Some(&set));
    }
    Some(0)
}

/// FNV-1a over the target, the requested mask and the applied mask.
fn fingerprint(tid: i32, requested: &CpuSet, applied: &CpuSet) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |b: u8| h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    tid.to_le_bytes().into_iter().for_each(&mut mix);
    for set in [requested, applied] {
        let (ptr, len) = set.as_raw();
        // SAFETY: as_raw describes the live set's bytes.
        unsafe { core::slice::from_raw_parts(ptr, len) }
            .iter()
            .for_each(|&b| mix(b));
    }
    h | 1
}

/// `sched_setaffinity` and `syscall(SYS_sched_setaffinity, ...)`: the raw result.
///
/// # Safety
/// `mask` must be readable for `len` bytes (or the kernel will say EFAULT).
pub unsafe fn sched_set(pid: i32, len: usize, mask: *const u8, call: &str) -> i64 {
    // SAFETY: the caller's arguments, unchanged.
    let pass = || unsafe { sys::set_affinity_raw(pid, len, mask) };
    if mask.is_null() || pid < 0 {
        return pass();
    }
    let Some(_guard) = thread::Guard::enter() else {
        return pass();
    };
    let Some(cfg) = config::get() else {
        return pass();
    };
    // SAFETY: mask is readable for len bytes (caller).
    let requested = unsafe { CpuSet::from_raw(mask, len) };
    let target = of_tid(cfg, pid, call);
    answer(cfg, target, &requested, call).unwrap_or_else(pass)
}

/// `pthread_setaffinity_np`: an error number, as pthread functions return.
///
/// # Safety
/// The arguments of `pthread_setaffinity_np`.
pub unsafe fn pthread_set(thread: pthread_t, len: usize, mask: *const libc::cpu_set_t) -> c_int {
    let pass = || match real::pthread_setaffinity_np() {
        // SAFETY: the caller's arguments, unchanged.
        Some(f) => unsafe { f(thread, len, mask) },
        None => libc::ENOSYS,
    };
    if mask.is_null() {
        return pass();
    }
    let Some(_guard) = thread::Guard::enter() else {
        return pass();
    };
    let Some(cfg) = config::get() else {
        return pass();
    };
    // SAFETY: mask is readable for len bytes (caller).
    let requested = unsafe { CpuSet::from_raw(mask.cast(), len) };
    let call = "pthread_setaffinity_np";
    // SAFETY: pthread_self and pthread_equal have no preconditions.
    let target = if unsafe { libc::pthread_equal(thread, libc::pthread_self()) } != 0 {
        Target::Placed(thread::tid(), process::current(cfg, call))
    } else if let Some((tid, p)) = thread::find_thread(thread) {
        Target::Placed(tid, p)
    } else if process::is_main_thread(thread) {
        Target::Placed(process::pid(), process::main_placement())
    } else {
        // A thread we cannot name by tid: clamp through the real call.
        let set = cfg.clamp(&requested);
        let (ptr, size) = set.as_raw();
        let ret = match real::pthread_setaffinity_np() {
            // SAFETY: thread is the caller's; ptr/size describe a live CpuSet.
            Some(f) => unsafe { f(thread, size, ptr.cast()) },
            None => libc::ENOSYS,
        };
        let p = Placement::unslotted(Role::Unknown, None);
        process::note(cfg, Event::Set, call, 0, Some(&requested), &p, Some(&set));
        return if ret == 0 { 0 } else { pass() };
    };
    match answer(cfg, target, &requested, call) {
        Some(_) => 0,
        None => pass(),
    }
}

/// Logs an attr mask (it is replaced at `pthread_create`).
///
/// # Safety
/// `attr` must be an initialised attribute object.
pub unsafe fn note_attr(attr: *const pthread_attr_t, call: &str) {
    let Some(_guard) = thread::Guard::enter() else {
        return;
    };
    let Some(cfg) = config::get() else { return };
    if attr.is_null() || cfg.log_fd < 0 {
        return;
    }
    // SAFETY: attr is initialised (caller).
    let requested = unsafe { crate::attr::affinity_of(attr) };
    let p = process::current(cfg, call);
    process::note(
        cfg,
        Event::Set,
        call,
        thread::tid(),
        requested.as_ref(),
        &p,
        Some(&CpuSet::new()),
    );
}
