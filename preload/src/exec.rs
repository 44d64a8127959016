//! Exec and spawn: a program started without this plan (its environment drops the shim from
//! `LD_PRELOAD`, as `sudo` and `env -i` do, or hands on other plan variables) cannot place its
//! threads, so it must not keep the one CPU (or the housekeeper CPU) the shim gave the thread
//! that starts it. It starts on every slot's CPU ([`Config::slot_set`]), as under a plain
//! mask, or on what that thread asked for itself. A program that carries the plan places
//! itself, and its mask is left alone.
//!
//! Owns: the `execve`, `execv`, `execvp`, `execvpe`, `fexecve`, `posix_spawn` and
//! `posix_spawnp` hooks' one decision, and putting the caller's mask back when the call
//! returns (a failed exec; a spawn, whose child took the mask at clone). `execl`, `execlp`
//! and `execle` are variadic, which Rust cannot define, and glibc's `system` and `popen`
//! call the exec underneath directly: those programs carry the caller's environment, and so
//! the plan, unless it was changed. Must not: write the shim's state (in a `vfork` child it is
//! the parent's), allocate, or log.

use crate::config::{self, Config};
use crate::{env, process, sys};
use goset_plan::CpuSet;
use libc::c_char;

/// What [`before`] changed: the caller's mask to put back if the call returns.
struct Widened(Option<CpuSet>);

/// Runs `call` (an exec or spawn whose program gets `envp`) with the caller's mask widened
/// when that program will not carry the plan, and puts the mask back if `call` returns.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings.
pub unsafe fn around<T>(envp: *const *const c_char, call: impl FnOnce() -> T) -> T {
    // SAFETY: as the caller vouches.
    let widened = unsafe { before(envp) };
    let ret = call();
    after(widened);
    ret
}

/// Whether a program started with `envp` loads the shim with this process's plan.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn carries_plan(cfg: &Config, envp: *const *const c_char) -> bool {
    // SAFETY: as the caller vouches.
    let get = |name: &[u8]| unsafe { env::get_in(envp, name) };
    let preload = get(b"LD_PRELOAD").unwrap_or(b"");
    let shimmed = preload == env::get(b"LD_PRELOAD").unwrap_or(b"-")
        || preload.windows(8).any(|w| w == b"libgoset");
    shimmed && env::plan_key(get) == cfg.carried
}

/// The mask a program started without the plan gets, from the caller's mask `now`.
fn leaving_mask(cfg: &Config, now: &CpuSet) -> CpuSet {
    if process::own_pid().is_none() {
        // A vfork child: the thread state it would read is its parent's (and reading it may
        // cache a tid there). One CPU of the reservation, or the helper set, is the shim's.
        let the_shims = *now == cfg.helper_set()
            || (now.count() == 1
                && now
                    .first()
                    .is_some_and(|c| cfg.plan.reservation.contains(c)));
        return if the_shims { cfg.slot_set() } else { *now };
    }
    let p = process::recorded();
    if p.role.is_clamped() {
        // A launcher or helper thread holds what it asked for, clamped, else the helper set.
        return if *now == cfg.helper_set() {
            cfg.slot_set()
        } else {
            *now
        };
    }
    // A compute thread holds its own CPU whatever it asked; the program gets what it asked.
    let asked = crate::affinity::own_view()
        .and_then(|v| v.get())
        .map(|asked| asked.intersection(&cfg.task_set()))
        .filter(|inside| !inside.is_empty());
    asked.unwrap_or_else(|| cfg.slot_set())
}

/// Before an exec or spawn with `envp`: widens the caller's mask when the program will not
/// carry the plan.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn before(envp: *const *const c_char) -> Widened {
    let Some(cfg) = config::ready() else {
        return Widened(None);
    };
    // SAFETY: as the caller vouches.
    if unsafe { carries_plan(cfg, envp) } {
        return Widened(None);
    }
    let Some(now) = sys::get_affinity(0) else {
        return Widened(None);
    };
    let wide = leaving_mask(cfg, &now);
    if wide == now || wide.is_empty() || sys::set_affinity(0, &wide) < 0 {
        return Widened(None);
    }
    Widened(Some(now))
}

/// After the call returned (the exec failed, or the spawn is done): the caller's mask back.
fn after(widened: Widened) {
    if let Some(before) = widened.0 {
        sys::set_affinity(0, &before);
    }
}
