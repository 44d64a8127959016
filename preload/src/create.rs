//! `pthread_create`: the new thread is given its slot before it exists and is born on its CPU.
//!
//! Owns: the role decision for a new thread (launcher process, `skip` mask, helper library),
//! the claim in the parent (or a birth beside a creator that waits on brief children, with its
//! mask and no stopped start: [`thread::born_beside`]), the attr copy carrying the CPU mask (a
//! roaming thread's starts off its pinned creator's CPU), the new thread's view (its attr
//! mask, else its creator's), and the start-routine trampoline that records the placement and
//! the view in the thread, widens a roaming thread's mask, and arranges its release (and logs
//! the birth, or for a child of a creator that churns brief children lists it in the slot
//! table, its records deferred). A birth mask the thread would inherit anyway is not set (see
//! [`holds`]). When glibc cannot apply the birth mask (EINVAL: the CPU went offline, the
//! cpuset changed; EPERM: a seccomp filter forbids sched_setaffinity), the thread is created as
//! the caller asked, unplaced, with one warning: the runtime must not fail.
//! Must not: set the new thread's mask from the parent after it started; keep `Drop` values
//! alive in the trampoline's frame (pthread_exit unwinds through it).

use crate::attr::Attr;
use crate::claim::{self, Placement};
use crate::config::{self, Config};
use crate::init;
use crate::log;
use crate::real::{self, StartRoutine};
use crate::role::{self, Role};
use crate::view::{self, ViewCell};
use crate::{affinity, notes, process, sys, thread};
use core::sync::atomic::{AtomicU64, Ordering};
use goset_plan::slots::Deferred;
use goset_plan::CpuSet;
use libc::{c_int, c_void, pthread_attr_t, pthread_t};

/// What the trampoline needs; taken from [`crate::notes`] by the parent, given back by the child.
struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    placement: Placement,
    requested: Option<CpuSet>,
    /// Its creator's cell and its birth, for [`thread::ending`].
    parent: (usize, u64),
    /// The new thread's view: its attr mask as the kernel would set it, else its creator's
    /// (as a kernel mask is inherited); `None`: never asked.
    view: Option<CpuSet>,
    /// A churning creator's child, which its creator counted: its records are deferred (see
    /// [`goset_plan::slots::Deferred`]).
    deferred: bool,
    /// Born off its creator's CPU, to widen to its whole mask (see [`Placement::first_set`]).
    widens: bool,
}

const CACHE_SIZE: usize = 64;
const HELPER_BIT: u64 = 1 << 63;
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicU64 = AtomicU64::new(0);
/// Start routines already looked up: `address | HELPER_BIT if helper`, direct-mapped, so that a
/// pool creating threads with one routine pays for `dladdr` once.
static ROUTINES: [AtomicU64; CACHE_SIZE] = [EMPTY; CACHE_SIZE];

/// Whether `routine` lives in a runtime helper library (MPI, PMIx, libevent ...).
fn in_helper_library(routine: StartRoutine) -> bool {
    let addr = routine as usize as u64 & !HELPER_BIT;
    let entry = &ROUTINES[(addr as usize >> 4) % CACHE_SIZE];
    let known = entry.load(Ordering::Relaxed);
    if known & !HELPER_BIT == addr {
        return known & HELPER_BIT != 0;
    }
    let helper = look_up_library(routine);
    entry.store(
        addr | if helper { HELPER_BIT } else { 0 },
        Ordering::Relaxed,
    );
    helper
}

fn look_up_library(routine: StartRoutine) -> bool {
    let mut info = core::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the address and fills info.
    if unsafe { libc::dladdr(routine as *const c_void, info.as_mut_ptr()) } == 0 {
        return false;
    }
    // SAFETY: dladdr succeeded, so info is filled.
    let name = unsafe { info.assume_init() }.dli_fname;
    if name.is_null() {
        return false;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    role::is_helper_library(unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes())
}

/// The new thread's placement, and whether it is born beside its creator (with its mask).
fn decide(cfg: &Config, routine: StartRoutine, beside: bool) -> (Placement, bool) {
    if cfg.launcher {
        return (
            Placement::unslotted(Role::Launcher, cfg.plan.housekeeper),
            false,
        );
    }
    let index = cfg.table.next_creation_index();
    if role::is_skipped(cfg.plan.skip, index) || in_helper_library(routine) {
        return (
            Placement::unslotted(Role::Helper, cfg.plan.housekeeper),
            false,
        );
    }
    let label = goset_plan::slots::label(process::pid(), false);
    let creator = process::recorded();
    if beside {
        return (claim::beside(cfg, label, &creator), true);
    }
    // The creator runs (it is creating a thread): its own slot is the last choice.
    let anchor = process::main_placement().slot_now(cfg);
    let p = claim::claim(cfg, Role::Worker, label, creator.slot_now(cfg), anchor);
    // A thread that roams like its creator is born with the creator's mask as it is: a mask
    // in the attr makes glibc start the thread stopped and set it from the parent, a system
    // call and a handshake on every thread a churning program creates.
    let inherits = p.roams && creator.roams && creator.slot_now(cfg).is_none();
    (p, inherits)
}

/// Whether the creating thread (placed `creator`) is allowed exactly `set`, so that its child
/// inherits `set` with no mask of its own: a mask in the attr makes glibc start the thread
/// stopped and set it from the parent, a system call and a handshake (every child of a
/// creator on the one CPU left, as under `-n 1`). The kernel is asked only when the shim gave
/// the creator that mask (its slot's CPU, or the reservation it roams).
fn holds(cfg: &Config, creator: &Placement, set: &CpuSet) -> bool {
    let given = match creator.slot_now(cfg).and_then(|s| cfg.cpu_of_slot(s)) {
        Some(cpu) => CpuSet::single(cpu),
        None if creator.roams => cfg.slot_set(),
        None => return false,
    };
    given == *set && sys::get_affinity(0).as_ref() == Some(set)
}

/// What is settled for a new thread before anything is allocated for it.
struct Newborn {
    placement: Placement,
    /// Born with its creator's mask as it is: no mask in the attr (see [`decide`]).
    inherits: bool,
    /// See [`Start::deferred`].
    deferred: bool,
    /// See [`Start::view`].
    view: Option<CpuSet>,
    /// See [`Start::parent`].
    parent: (usize, u64),
}

/// Settles the new thread's view, placement and records, `requested` the caller's attr mask;
/// a deferred child is counted here.
#[inline]
fn newborn(cfg: &Config, routine: StartRoutine, requested: &Option<CpuSet>) -> Newborn {
    let view = match requested {
        Some(mask) => Some(view::granted(mask)),
        None => affinity::own_view().and_then(ViewCell::get),
    };
    let born_us = goset_plan::clock::monotonic_us();
    let main = thread::tid() == process::pid();
    let birth = thread::child_born(main, born_us, sys::thread_cpu_us);
    let (p, inherits) = decide(cfg, routine, birth.beside);
    let inherits = inherits && requested.is_none();
    // A churning creator's children mostly end within a millisecond, wherever they are born:
    // counted and listed, not logged, while they live (see goset_plan::slots::Deferred).
    let deferred =
        birth.churning && p.role == Role::Worker && requested.is_none() && process::logs();
    if deferred {
        cfg.table.deferring_born();
    }
    Newborn {
        placement: p,
        inherits,
        deferred,
        view,
        parent: (birth.cell, born_us),
    }
}

/// Undoes what [`newborn`] claimed and counted, for a thread that will not be born placed.
#[inline]
fn unborn(cfg: &Config, born: &Newborn) {
    claim::release(cfg, &born.placement);
    if born.deferred {
        cfg.table.deferring_done();
    }
}

/// The mask the new thread is born with, and whether it widens after; `None` where it needs
/// none: it inherits its creator's mask, or its creator holds that mask already ([`holds`]).
#[inline]
fn birth_mask(cfg: &Config, born: &Newborn) -> Option<(CpuSet, bool)> {
    // A thread that inherits its creator's mask needs none (the churn path: nothing to compute).
    match born.inherits {
        true => None,
        false => {
            let creator = process::recorded();
            let p = &born.placement;
            Some(p.first_set(cfg, &creator)).filter(|(set, _)| !holds(cfg, &creator, set))
        }
    }
}

/// The one warning for a thread created unplaced after its birth on `cpu` failed with `ret`.
#[cold]
fn warn_unplaced(cpu: Option<usize>, ret: c_int) {
    match cpu {
        Some(cpu) => log::warn_once(format_args!(
            "cannot create a thread on CPU {cpu} (errno {ret}); it runs unplaced"
        )),
        None => log::warn_once(format_args!(
            "cannot create a thread on the reservation (errno {ret}); it runs unplaced"
        )),
    }
}

/// The hook's body.
///
/// # Safety
/// The arguments of `pthread_create`.
pub unsafe fn create(
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let Some(real_create) = real::pthread_create() else {
        return libc::EAGAIN;
    };
    let guard = thread::Guard::enter();
    // A child forked behind libc's back (raw clone, `_Fork`) still has its parent's cached
    // pid: it would claim under its parent's label, so it creates threads unplaced.
    let cfg = match guard {
        Some(_) => init::get().filter(|_| process::own_pid().is_some()),
        None => None,
    };
    let Some(cfg) = cfg else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real_create(thread, attr, routine, arg) };
    };
    // SAFETY: attr is NULL or initialised, as pthread_create requires.
    let Some((mut copy, requested)) = (unsafe { Attr::copy_of(attr) }) else {
        // SAFETY: as above.
        return unsafe { real_create(thread, attr, routine, arg) };
    };
    let born = newborn(cfg, routine, &requested);
    let start = notes::take::<Start>();
    let first = birth_mask(cfg, &born);
    let mask_set = match first {
        Some((set, _)) => copy.set_affinity(&set),
        None => true,
    };
    let start = match start {
        Some(start) if mask_set => start,
        _ => {
            unborn(cfg, &born);
            if let Some(start) = start {
                // SAFETY: taken above, never written.
                unsafe { notes::give_back(start) };
            }
            // SAFETY: the caller's arguments, unchanged.
            return unsafe { real_create(thread, attr, routine, arg) };
        }
    };
    // SAFETY: start is fresh memory of the right size and alignment for a Start.
    unsafe {
        start.write(Start {
            routine,
            arg,
            placement: born.placement,
            requested,
            parent: born.parent,
            view: born.view,
            deferred: born.deferred,
            widens: first.is_some_and(|(_, widens)| widens),
        })
    };
    // SAFETY: copy is an initialised attr; the trampoline takes ownership of start.
    let ret = unsafe { real_create(thread, copy.as_ptr(), trampoline, start.cast()) };
    if ret == 0 {
        return 0;
    }
    unborn(cfg, &born);
    // SAFETY: on failure the trampoline never ran: glibc (2.34+) applies the attr mask after
    // clone, and if that fails it makes the stopped thread exit before its start routine and
    // waits for it before returning. So start is still ours.
    unsafe { notes::give_back(start) };
    // EINVAL is what glibc returns when the birth mask cannot be applied (the CPU went offline,
    // the cpuset changed), EPERM when a seccomp filter forbids sched_setaffinity (a sandbox);
    // each is also an answer to the caller's own attr (a bad one, a policy it may not have).
    if ret != libc::EINVAL && !(ret == libc::EPERM && first.is_some()) {
        // EAGAIN ...: the program's own failure.
        return ret;
    }
    // Create the thread as the caller asked: unplaced, and the caller's own error comes back
    // unchanged.
    // SAFETY: the caller's arguments, unchanged.
    let retry = unsafe { real_create(thread, attr, routine, arg) };
    if retry == 0 {
        warn_unplaced(born.placement.cpu, ret);
    }
    retry
}

/// Runs in the new thread before its start routine: records the placement, logs it, frees
/// the parent's note. Returns the routine and its argument.
///
/// # Safety
/// `start` must be the `Start` that `create` allocated for this thread.
unsafe fn arrive(start: *mut Start) -> (StartRoutine, *mut c_void) {
    // SAFETY: start was written by create and is handed over to this thread alone.
    let Start {
        routine,
        arg,
        placement,
        requested,
        parent,
        view,
        deferred,
        widens,
    } = unsafe { start.read() };
    // SAFETY: start came from notes::take and is read out.
    unsafe { notes::give_back(start) };
    if let Some(cfg) = config::ready() {
        if let Some(_guard) = thread::Guard::enter() {
            let tid = thread::tid();
            if widens {
                placement.widen(cfg);
            }
            thread::set_parent(parent.0, parent.1);
            process::adopt_thread(cfg, tid, placement);
            if let Some(cell) = thread::own_view() {
                cell.put(view.as_ref());
            }
            // Counted by its creator; listed while it lives (a full list: it logs as any
            // other).
            let listed = deferred.then(|| {
                cfg.table.defer(&Deferred {
                    tid,
                    slot: placement.slot,
                    roams: placement.roams,
                })
            });
            if let Some(index) = listed.flatten() {
                thread::set_deferred(index);
                return (routine, arg);
            }
            process::note_created(cfg, tid, requested.as_ref(), &placement);
        }
        if deferred {
            cfg.table.deferring_done();
        }
    }
    (routine, arg)
}

/// The start routine every created thread runs: no `Drop` values live across the call, and
/// `C-unwind` lets `pthread_exit` and cancellation unwind through it.
extern "C-unwind" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: pthread_create was given this trampoline with a Start from create.
    let (routine, arg) = unsafe { arrive(start.cast()) };
    // SAFETY: the caller's own start routine with its own argument.
    unsafe { routine(arg) }
}
