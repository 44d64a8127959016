//! `pthread_create`: the new thread is given its slot before it exists and its CPU before it
//! runs its start routine.
//!
//! Owns: the role decision for a new thread (launcher process, `skip` mask, helper library),
//! the claim in the parent (or a birth beside a creator that waits on brief children:
//! [`thread::born_beside`]), the birth mask (a roaming thread's starts off its pinned
//! creator's CPU), the new thread's view (its attr mask, else its creator's), and the
//! start-routine trampoline that waits for its birth mask, records the placement and the view
//! in the thread, widens a roaming thread's mask, and arranges its release (and logs the
//! birth, or for a child of a creator that churns brief children lists it in the slot table,
//! its records deferred).
//!
//! The birth mask is set by the parent right after the clone, while the new thread waits at
//! the start of the trampoline ([`Pin`]): glibc's own stopped start, without the attr mask
//! that makes glibc allocate on the program's heap (two calls an allocation profiler counts).
//! A thread born on the one CPU it needs is not waited for, nor is a mask it would inherit
//! anyway set (see [`holds`]). An attr that asks for a mask (a runtime placing its threads) is
//! copied without it, so the shim's choice replaces it and a mask the kernel would refuse
//! cannot fail the call. When the kernel refuses the birth mask (EINVAL: the CPU went
//! offline, the cpuset changed; EPERM: a seccomp filter forbids sched_setaffinity), the
//! thread runs unplaced, with one warning: the runtime must not fail.
//! Must not: let the new thread run its routine before its mask is set; touch the note after
//! publishing the pin (the thread may give it back at once); keep `Drop` values alive in the
//! trampoline's frame (pthread_exit unwinds through it).

use crate::attr::{self, Attr};
use crate::claim::{self, Placement};
use crate::config::{self, Config};
use crate::init;
use crate::log;
use crate::real::{self, StartRoutine};
use crate::role::{self, Role};
use crate::view::{self, ViewCell};
use crate::{affinity, notes, process, sys, thread};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
    /// Its birth mask, as the parent sets it.
    pin: Pin,
}

// Every creation takes a pooled note: a mapping per thread would cost more than the thread.
const _: () = assert!(notes::fits::<Start>());

/// The handshake of a birth mask: the parent sets the new thread's mask after the clone and
/// publishes the outcome; the new thread waits for it before anything else. A thread with no
/// mask to take starts [`Pin::SET`]. As a lock's unlock, the publish makes a system call only
/// for a thread that went to sleep: most threads first run after it.
struct Pin(AtomicU32);

impl Pin {
    const PENDING: u32 = 0;
    const SET: u32 = 1;
    const REFUSED: u32 = 2;
    /// Pending, and the new thread sleeps on it.
    const WAITING: u32 = 3;

    /// Publishes the parent's outcome and wakes the new thread if it sleeps. The note that
    /// holds the pin may be given back as soon as the outcome is seen: only its address is
    /// used after (a wake at an address reused is a spurious wake, which waiters expect).
    fn publish(&self, set: bool) {
        let state = if set { Pin::SET } else { Pin::REFUSED };
        if self.0.swap(state, Ordering::AcqRel) == Pin::WAITING {
            sys::futex_wake(&self.0);
        }
    }

    /// Waits for the parent's outcome: true when the mask is set.
    fn wait(&self) -> bool {
        loop {
            match self.0.load(Ordering::Acquire) {
                Pin::PENDING => {
                    // Lost to a publish, the loop reads its outcome.
                    let _ = self.0.compare_exchange(
                        Pin::PENDING,
                        Pin::WAITING,
                        Ordering::Acquire,
                        Ordering::Acquire,
                    );
                }
                Pin::WAITING => sys::futex_wait(&self.0, Pin::WAITING),
                state => return state == Pin::SET,
            }
        }
    }
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
    // A thread that roams like its creator is born with the creator's mask as it is: a birth
    // mask costs the parent a system call and the thread a wait for it (see Pin), on every
    // thread a churning program creates.
    let inherits = p.roams && creator.roams && creator.slot_now(cfg).is_none();
    (p, inherits)
}

/// Whether the creating thread (placed `creator`) is allowed exactly `set`, so that its child
/// inherits `set` with no mask of its own: a birth mask costs the parent a system call and
/// the thread a wait for it (every child of a creator on the one CPU left, as under `-n 1`).
/// The kernel is asked only when the shim gave the creator that mask (its slot's CPU, or the
/// reservation it roams).
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

/// Undoes what [`newborn`] claimed (`placement`) and counted (`deferred`), for a thread that
/// will not be born, or will run unplaced.
#[inline]
fn unborn(cfg: &Config, placement: &Placement, deferred: bool) {
    claim::release(cfg, placement);
    if deferred {
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

/// The one warning for a new thread left unplaced: the kernel refused it `cpu` with `ret`.
#[cold]
fn warn_unplaced(cpu: Option<usize>, ret: c_int) {
    match cpu {
        Some(cpu) => log::warn_once(format_args!(
            "cannot place a new thread on CPU {cpu} (errno {ret}); it runs unplaced"
        )),
        None => log::warn_once(format_args!(
            "cannot place a new thread on the reservation (errno {ret}); it runs unplaced"
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
    let requested = unsafe { attr::requested(attr) };
    // SAFETY: as above.
    let mut copy = match requested {
        Some(_) => match unsafe { Attr::without_mask(attr) } {
            Some(copy) => Some(copy),
            // SAFETY: the caller's arguments, unchanged.
            None => return unsafe { real_create(thread, attr, routine, arg) },
        },
        None => None,
    };
    let (Some(set_mask), Some(start)) = (real::pthread_setaffinity_np(), notes::take::<Start>())
    else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real_create(thread, attr, routine, arg) };
    };
    let born = newborn(cfg, routine, &requested);
    let first = birth_mask(cfg, &born);
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
            pin: Pin(AtomicU32::new(match first {
                Some(_) => Pin::PENDING,
                None => Pin::SET,
            })),
        })
    };
    let attr = copy.as_mut().map_or(attr, |copy| copy.as_ptr());
    // SAFETY: attr is the caller's or its copy; the trampoline takes ownership of start.
    let ret = unsafe { real_create(thread, attr, trampoline, start.cast()) };
    if ret != 0 {
        // The program's own failure (its attr, EAGAIN ...): the shim asked for nothing more.
        unborn(cfg, &born.placement, born.deferred);
        // SAFETY: on failure the trampoline never ran, so start is still ours.
        unsafe { notes::give_back(start) };
        return ret;
    }
    if let Some((set, _)) = first {
        let set = now_set(cfg, &born.placement, &set);
        let (ptr, len) = set.as_raw();
        // SAFETY: the thread waits in the trampoline until the pin is published, so it exists
        // and *thread names it; ptr/len describe a live CpuSet. glibc's call allocates nothing.
        let refused = unsafe { set_mask(*thread, len, ptr.cast()) };
        if refused != 0 {
            warn_unplaced(born.placement.cpu, refused);
        }
        // SAFETY: start is the live note the thread waits on; nothing of it is read after.
        unsafe { (*start).pin.publish(refused == 0) };
    }
    0
}

/// The birth mask `set`, but for a slotted thread the CPU its slot has now: the housekeeper
/// may have moved its record since the claim.
fn now_set(cfg: &Config, placement: &Placement, set: &CpuSet) -> CpuSet {
    match placement.slot_now(cfg).and_then(|s| cfg.cpu_of_slot(s)) {
        Some(cpu) if !placement.roams => CpuSet::single(cpu),
        _ => *set,
    }
}

/// Runs in the new thread before its start routine: waits for its birth mask, records the
/// placement, logs it, frees the parent's note. Returns the routine and its argument.
///
/// # Safety
/// `start` must be the `Start` that `create` allocated for this thread.
unsafe fn arrive(start: *mut Start) -> (StartRoutine, *mut c_void) {
    // SAFETY: start was written by create; its pin is the one field the parent still writes.
    let pinned = unsafe { (*start).pin.wait() };
    // SAFETY: start was written by create and, its pin published, is this thread's alone.
    let Start {
        routine,
        arg,
        placement,
        requested,
        parent,
        view,
        deferred,
        widens,
        pin: _,
    } = unsafe { start.read() };
    // SAFETY: start came from notes::take and is read out.
    unsafe { notes::give_back(start) };
    if let Some(cfg) = config::ready() {
        if !pinned {
            // Unplaced (the parent warned): nothing recorded.
            unborn(cfg, &placement, deferred);
            return (routine, arg);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_published_before_or_after_the_wait_gives_its_outcome() {
        for set in [true, false] {
            let early = Pin(AtomicU32::new(Pin::PENDING));
            early.publish(set);
            assert_eq!(early.wait(), set);
            // The waiter may sleep before the publish: it is woken with the outcome.
            let late = std::sync::Arc::new(Pin(AtomicU32::new(Pin::PENDING)));
            let waiter = {
                let late = late.clone();
                std::thread::spawn(move || late.wait())
            };
            while late.0.load(Ordering::Acquire) == Pin::PENDING && !waiter.is_finished() {
                std::thread::yield_now();
            }
            late.publish(set);
            assert_eq!(waiter.join().unwrap(), set);
        }
    }
}
