//! Exec and spawn: a program the shim's thread starts begins on the mask that thread would
//! hold without the shim: what it asked for itself, else every slot's CPU
//! ([`Config::slot_set`]), never the one CPU (or the housekeeper CPU) the shim gave it. A
//! program without the plan (its environment drops the shim, as `sudo` and `env -i` do) then
//! runs as under a plain mask; one with the plan places itself, and by hand takes no mask the
//! shim gave its parent's thread for a binding from outside (which it would keep: `make`'s
//! `posix_spawn`ed compilers all stayed on the CPU of make's thread).
//!
//! Owns: the `execve`, `execv`, `execvp`, `execvpe`, `fexecve`, `posix_spawn`,
//! `posix_spawnp`, `system` and `popen` hooks' one decision, and putting the caller's mask back
//! when the call returns (a failed exec; a spawn, whose child took the mask at clone).
//! `execl`, `execlp` and `execle` are variadic, which Rust cannot define; they are rarely used
//! from a thread the shim pinned. Must not: write the shim's state (in a `vfork` child it is
//! the parent's), allocate, or log.

use crate::config::{self, Config};
use crate::{process, sys};
use goset_plan::CpuSet;

/// What [`before`] changed: the caller's mask to put back if the call returns.
struct Widened(Option<CpuSet>);

/// Runs `call` (an exec or spawn) with the caller's mask widened to what the program should
/// start with, and puts the mask back if `call` returns.
pub fn around<T>(call: impl FnOnce() -> T) -> T {
    let widened = before();
    let ret = call();
    after(widened);
    ret
}

/// The mask a program started by the calling thread gets, from the caller's mask `now`.
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

/// Before an exec or spawn: widens the caller's mask to what the program should start with.
fn before() -> Widened {
    let Some(cfg) = config::ready() else {
        return Widened(None);
    };
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
