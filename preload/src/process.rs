//! Per-process life: placing the main thread at start, after fork and after exec; the pthread
//! key whose destructor releases a thread's slot; exit; and the log helper every hook uses.
//!
//! Owns: the process's pid and its main thread's placement (atomics, so any thread may read
//! them), the fork child handler and the exit handler. Must not: hold anything across fork
//! (there are no locks), allocate on hook paths.

use crate::claim::{self, Placement};
use crate::config::{self, Config};
use crate::log::{self, Event, Record};
use crate::role::Role;
use crate::{sys, thread};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use goset_plan::{slots, CpuSet};
use libc::c_void;

static PID: AtomicI32 = AtomicI32::new(0);
static MAIN: AtomicU64 = AtomicU64::new(0);
static MAIN_THREAD: AtomicUsize = AtomicUsize::new(0);
static ROOT: AtomicBool = AtomicBool::new(false);
static KEY: AtomicU32 = AtomicU32::new(0);
static KEY_OK: AtomicBool = AtomicBool::new(false);
static HANDLERS: AtomicBool = AtomicBool::new(false);
/// This process runs in a PID namespace other than the launcher's (a sandbox): the pids and
/// tids it sees mean nothing to the launcher, so it writes no records.
static ELSEWHERE: AtomicBool = AtomicBool::new(false);

/// This process's pid, as of init or the last fork.
pub fn pid() -> i32 {
    PID.load(Ordering::Relaxed)
}

/// The raw pid when this process is the one the cached state describes; `None` in a vfork
/// child (it shares its parent's memory and thread-locals, so the cached pid, tid and
/// placements are the parent's) or a child forked behind libc's back (no fork handler ran).
pub fn own_pid() -> Option<i32> {
    let me = sys::getpid();
    (me == pid()).then_some(me)
}

/// Records this process's pid (at init, before the configuration is marked ready).
pub fn set_pid(pid: i32) {
    PID.store(pid, Ordering::Relaxed);
}

/// The placement of this process's main thread.
pub fn main_placement() -> Placement {
    Placement::unpack(MAIN.load(Ordering::Acquire))
}

/// Whether `thread` is this process's main thread.
pub fn is_main_thread(thread: libc::pthread_t) -> bool {
    let main = MAIN_THREAD.load(Ordering::Relaxed);
    main != 0 && main == thread as usize
}

/// Whether this process writes log records: there is a log, and its tids are the launcher's
/// (not in another PID namespace).
pub fn logs() -> bool {
    log::enabled() && !ELSEWHERE.load(Ordering::Relaxed)
}

/// Writes one log record about thread `tid`; `applied` is the mask actually set, if any.
pub fn note(
    event: Event,
    call: &str,
    tid: i32,
    requested: Option<&CpuSet>,
    p: &Placement,
    applied: Option<&CpuSet>,
) {
    if !logs() {
        return;
    }
    let cpu = match applied {
        Some(set) if set.count() == 1 => set.first(),
        Some(_) => None,
        None => p.cpu,
    };
    let comm = sys::thread_name();
    let record = Record {
        time: sys::now(),
        pid: pid(),
        tid,
        comm: crate::role::until_nul(&comm),
        event,
        call,
        requested,
        cpu,
        slot: p.slot,
        role: p.role,
        shared: p.shared,
        roams: p.roams && cpu.is_none(),
    };
    log::emit(&record);
}

/// Called once the configuration is ready (from init): places the main thread and installs
/// the fork and thread-exit handlers.
pub fn start(cfg: &'static Config, call: &str) {
    ROOT.store(cfg.root, Ordering::Relaxed);
    if !HANDLERS.swap(true, Ordering::AcqRel) {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: key is a valid out-pointer; the destructor is an extern "C" fn that never
        // unwinds.
        if unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } == 0 {
            KEY.store(key, Ordering::Relaxed);
            KEY_OK.store(true, Ordering::Release);
        }
        // SAFETY: registering a child handler that is an extern "C" fn and never unwinds.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    }
    place_main(cfg, call, true, None);
}

/// Places this process's main thread: `creator` is the slot of the thread that forked it
/// (it runs), `None` for a fresh image.
fn place_main(cfg: &Config, call: &str, fresh_image: bool, creator: Option<usize>) {
    let pid = sys::getpid();
    PID.store(pid, Ordering::Relaxed);
    // Checked again after fork: a sandbox's first process is forked by a process outside.
    let elsewhere = match fresh_image {
        true => crate::load::started_elsewhere(),
        false => crate::load::in_other_pidns(cfg.plan),
    };
    ELSEWHERE.store(elsewhere, Ordering::Relaxed);
    // SAFETY: pthread_self has no preconditions.
    MAIN_THREAD.store(unsafe { libc::pthread_self() } as usize, Ordering::Relaxed);
    let plan = &cfg.plan;
    let unslotted = if cfg.launcher {
        Some(Placement::unslotted(Role::Launcher, plan.housekeeper))
    } else if ROOT.load(Ordering::Relaxed) && plan.main_on_housekeeper && plan.housekeeper.is_some()
    {
        Some(Placement::unslotted(Role::Main, plan.housekeeper))
    } else {
        None
    };
    if fresh_image {
        // Threads of this pid's previous image died at exec without releasing their slots; a
        // record the housekeeper made for it, a launcher that computed, is labelled the same.
        cfg.table.release_all(slots::label(pid, false));
    }
    let p = if let Some(p) = unslotted {
        // A slot claimed for this pid (by goset-run before exec, or by the image before an
        // exec) is not this image's to hold.
        cfg.table.release_all(slots::label(pid, true));
        p
    } else {
        // A slot claimed before exec outside the block this process keeps to is given back.
        let adopted = claim::adopt(cfg, slots::label(pid, true)).filter(|p| {
            let inside = p.slot.is_some_and(|s| cfg.may_take(s));
            if !inside {
                claim::release(cfg, p);
            }
            inside
        });
        let label = slots::label(pid, true);
        match adopted {
            Some(p) if !p.shared => p,
            // A slot claimed when the process was forked, which another thread now holds too
            // (xargs's previous job, started on it while this one's fork roamed): the image
            // gives it back and takes the slot the birth rule gives now.
            other => {
                if let Some(old) = other {
                    claim::release(cfg, &old);
                }
                if fresh_image {
                    claim::claim_image(cfg, label)
                } else {
                    claim::claim(cfg, Role::Main, label, creator, None)
                }
            }
        }
    };
    MAIN.store(p.pack(), Ordering::Release);
    if sys::gettid() == pid {
        // So that a main thread that calls pthread_exit releases its slot (the destructor's
        // main-thread branch); exit releases it otherwise. Either takes it from MAIN, once.
        arm_exit_key();
    }
    // A wrapper (numactl ...) reads and sets its binding inside the whole reservation (by
    // hand, inside the binding it was started with).
    let set = if cfg.wrapper {
        cfg.bound.unwrap_or(cfg.plan.reservation)
    } else if cfg.launcher {
        // Its threads are still born on the housekeeper CPU, as helpers are.
        cfg.launcher_set().unwrap_or_else(|| p.birth_set(cfg))
    } else {
        p.birth_set(cfg)
    };
    let ret = sys::set_affinity(pid, &set);
    if let Some(e) = sys::error_of(ret) {
        log::warn_once(format_args!(
            "cannot move the main thread to its CPU (errno {e})"
        ));
    }
    note(Event::Init, call, pid, None, &p, Some(&set));
}

/// The calling thread's placement as recorded: [`Placement::UNKNOWN`] for a thread the shim
/// has not placed. Claims nothing.
pub fn recorded() -> Placement {
    if thread::tid() == pid() {
        main_placement()
    } else {
        thread::state()
    }
}

/// The calling thread's placement; a thread the shim did not see being born (created before
/// init finished, or by raw clone) is placed now.
pub fn current(cfg: &Config, call: &str) -> Placement {
    let tid = thread::tid();
    let p = recorded();
    if tid == pid() || p.role != Role::Unknown {
        return p;
    }
    let p = if cfg.launcher {
        Placement::unslotted(Role::Launcher, cfg.plan.housekeeper)
    } else {
        claim::claim(
            cfg,
            Role::Worker,
            slots::label(pid(), false),
            None,
            main_placement().slot_now(cfg),
        )
    };
    adopt_thread(cfg, tid, p);
    note(Event::Create, call, tid, None, &p, None);
    p
}

/// Makes `p` the calling thread's placement and arranges its release when the thread ends.
pub fn adopt_thread(_cfg: &Config, tid: i32, p: Placement) {
    thread::set_state(p);
    // SAFETY: pthread_self has no preconditions.
    thread::register(tid, unsafe { libc::pthread_self() }, p);
    arm_exit_key();
}

/// Makes the key destructor run when the calling thread ends.
fn arm_exit_key() {
    if KEY_OK.load(Ordering::Acquire) {
        // SAFETY: the key was created by pthread_key_create; a non-NULL value makes its
        // destructor run when this thread ends (return, pthread_exit or cancellation).
        unsafe {
            libc::pthread_setspecific(KEY.load(Ordering::Relaxed), core::ptr::dangling::<c_void>())
        };
    }
}

/// The key destructor: runs in an ending thread (any way it ends); releases its slot.
extern "C" fn on_thread_exit(_value: *mut c_void) {
    let Some(cfg) = config::ready() else {
        return;
    };
    let Some(_guard) = thread::Guard::enter() else {
        return;
    };
    let tid = thread::tid();
    if tid == pid() {
        // The main thread called pthread_exit.
        release_main(cfg);
        return;
    }
    let brief = thread::ending();
    let (p, entry) = thread::take_state();
    thread::unregister(entry);
    if p.role != Role::Unknown {
        claim::release(cfg, &p);
        // Its records deferred (and not written by the exit handler meanwhile): counted when
        // it ended briefly, else written now, late.
        if thread::take_deferred().is_some_and(|i| cfg.table.undefer(i, tid)) {
            cfg.table.deferring_done();
            if brief {
                cfg.table.count_brief();
                return;
            }
            note_created(cfg, tid, None, &p);
        }
        note(Event::Exit, "exit", tid, None, &p, None);
    }
}

/// Writes the `create` record of thread `tid`, born with placement `p` (asking for
/// `requested`, if it did).
pub fn note_created(cfg: &Config, tid: i32, requested: Option<&CpuSet>, p: &Placement) {
    let born = p.birth_set(cfg);
    note(
        Event::Create,
        "pthread_create",
        tid,
        requested,
        p,
        Some(&born),
    );
}

/// In the exit handler: writes the `create` records of this process's threads that still
/// live with their records deferred (they die with the process, and would go unreported).
fn write_deferred(cfg: &Config) {
    for (index, d) in cfg.table.deferred() {
        let Some(known) = thread::find_tid(d.tid) else {
            continue;
        };
        if cfg.table.undefer(index, d.tid) {
            cfg.table.deferring_done();
            note_created(cfg, d.tid, None, &known.placement);
        }
    }
}

/// Releases the main thread's slot; idempotent (the placement is taken from `MAIN`), so the
/// key destructor after `pthread_exit` and the exit handler never both release it.
fn release_main(cfg: &Config) {
    let p = Placement::unpack(MAIN.swap(0, Ordering::AcqRel));
    if p.role != Role::Unknown {
        claim::release(cfg, &p);
        note(Event::Exit, "exit", pid(), None, &p, None);
    }
}

/// The exit handler: the main thread's slot, and those of threads that die with the process.
pub fn at_exit() {
    let Some(cfg) = config::ready() else {
        return;
    };
    if PID.load(Ordering::Relaxed) != sys::getpid() {
        return;
    }
    write_deferred(cfg);
    release_main(cfg);
    cfg.table.release_all(slots::label(pid(), false));
    cfg.table.release_block(pid() as u32);
}

/// In a forked child: only the forking thread survives; it becomes the main thread and
/// claims its own slot (a launcher's child stays unslotted until it execs).
extern "C" fn after_fork_child() {
    let Some(cfg) = config::ready() else {
        return;
    };
    // The forking thread, whose placement this thread still holds: it ran to fork. Whether
    // it was the main thread is told by its pthread handle (the cached pid and tid are still
    // the parent's, or the tid was never cached).
    // SAFETY: pthread_self has no preconditions.
    let was_main = is_main_thread(unsafe { libc::pthread_self() });
    let forker = if was_main {
        main_placement()
    } else {
        thread::state()
    };
    let creator = forker.slot_now(cfg);
    thread::forget(was_main);
    thread::clear_registry();
    crate::notes::reset_after_fork();
    log::after_fork();
    ROOT.store(false, Ordering::Relaxed);
    place_main(cfg, "fork", false, creator);
}
