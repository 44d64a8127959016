//! What a process is configured with: the [`Config`] type, the one static that holds it (and
//! its plan), and the life-cycle state (uninitialised → initialising → ready | disabled).
//!
//! Owns: the storage, written once, in place, by the one thread that wins
//! [`begin`], and read by everyone after [`publish`] (Release/Acquire on the state). Must not:
//! initialise anything itself (`init`, above every placing module, does that through
//! `load`), or import a module that places threads: they all import this one.

use crate::buf::Exclusive;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, Ordering};
use goset_plan::{CpuSet, Plan, SlotTable};

/// Everything fixed for the life of a process (a forked child keeps its parent's).
pub struct Config {
    /// The plan: task CPUs in slot order, housekeeper, reservation, skip mask.
    pub plan: &'static Plan,
    /// The shared slot table.
    pub table: &'static SlotTable,
    /// This process only launches others (`mpirun`, a shell ...).
    pub launcher: bool,
    /// A launcher that sets a policy and execs its command (`numactl` ...,
    /// [`crate::role::WRAPPERS`]): it runs on the whole reservation, not the housekeeper CPU.
    pub wrapper: bool,
    /// The first process of the task, when it can be told (for `main_on_housekeeper`).
    pub root: bool,
    /// By hand, the CPUs this process started on when they are a strict part of the plan's
    /// and nothing of goset's chose them (`taskset`, `numactl` or `mpirun` bound it before
    /// it started): it keeps them, its threads taking only the slots on those CPUs. Also the
    /// block of slots a process of a multi-process task keeps to ([`crate::block`]). `None`:
    /// every slot.
    pub bound: Option<CpuSet>,
    /// The process is one of several (not the task's first) or keeps to a block: its threads
    /// take the free slots nearest its main thread ([`goset_plan::locality::near_key`]); the
    /// first process of a task without blocks keeps the plan's order.
    pub near: bool,
}

impl Config {
    /// The CPU of `slot` now: where the launcher moved the slot when its planned CPU turned
    /// noisy (kept only inside the reservation: the task can write anything into the table),
    /// else the plan's.
    pub fn cpu_of_slot(&self, slot: usize) -> Option<usize> {
        let planned = self.plan.cpu_of_slot(slot)?;
        let moved = (self.table.moved_cpu(slot)).filter(|&c| self.plan.reservation.contains(c));
        Some(moved.unwrap_or(planned))
    }

    /// Whether this process's threads may take `slot`: its CPU is inside [`Config::bound`].
    pub fn may_take(&self, slot: usize) -> bool {
        match (&self.bound, self.cpu_of_slot(slot)) {
            (None, _) => true,
            (Some(bound), Some(cpu)) => bound.contains(cpu),
            (Some(_), None) => false,
        }
    }

    /// The CPU of every slot this process may take now (see [`Config::cpu_of_slot`],
    /// [`Config::may_take`]): where a roaming thread runs, the kernel balancing it, never on
    /// the housekeeper's CPU unless a slot is there.
    pub fn slot_set(&self) -> CpuSet {
        (0..self.plan.slot_count())
            .filter(|&s| self.may_take(s))
            .filter_map(|s| self.cpu_of_slot(s))
            .collect()
    }

    /// The task's CPUs as this process sees them: the plan's, or the binding it keeps.
    pub fn task_set(&self) -> CpuSet {
        self.bound.unwrap_or_else(|| self.plan.cpu_set())
    }

    /// Where helpers and launcher threads run: the housekeeper, else the whole reservation
    /// (by hand, the binding the process keeps).
    pub fn helper_set(&self) -> CpuSet {
        match (self.plan.housekeeper, self.bound) {
            (Some(hk), _) => CpuSet::single(hk),
            (None, Some(bound)) => bound,
            (None, None) => self.plan.reservation,
        }
    }

    /// Where a launcher process's main thread waits: on the housekeeper CPU when that CPU is
    /// the housekeeper's own, else (it is one of the slots' CPUs, or there is none) on every
    /// slot's CPU, as under a plain mask. Parked on a CPU the task computes on, a shell that
    /// runs a job's loop, started beside the last one, shared that CPU with it while the other
    /// stayed idle until the housekeeper's next poll.
    pub fn launcher_set(&self) -> Option<CpuSet> {
        let slots = self.slot_set();
        match self.plan.housekeeper {
            Some(hk) if !slots.contains(hk) => None,
            _ => Some(slots),
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

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// The plan, filled in place (2.7 KiB: never on a stack).
static PLAN: Exclusive<Plan> = Exclusive::new(Plan::EMPTY);
static CONFIG: Exclusive<MaybeUninit<Config>> = Exclusive::new(MaybeUninit::uninit());

/// The configuration once it is ready; never initialises.
#[inline]
pub fn ready() -> Option<&'static Config> {
    // SAFETY: READY is stored (Release) only after CONFIG was written, and never again after.
    (STATE.load(Ordering::Acquire) == READY).then(|| unsafe { CONFIG.get().assume_init_ref() })
}

/// Whether initialisation failed or was refused: every hook passes through.
#[inline]
pub fn disabled() -> bool {
    STATE.load(Ordering::Relaxed) == DISABLED
}

/// Takes the right to initialise (uninitialised → initialising); true for one thread only.
pub fn begin() -> bool {
    STATE
        .compare_exchange(UNINIT, INITIALISING, Ordering::Acquire, Ordering::Acquire)
        .is_ok()
}

/// The plan, for filling in place.
///
/// # Safety
/// Only by the thread that won [`begin`], before [`publish`] or [`disable`].
pub unsafe fn plan_mut() -> &'static mut Plan {
    // SAFETY: the caller is the one initialising thread; nobody reads the plan before READY.
    unsafe { PLAN.get_mut() }
}

/// Stores the configuration and marks it ready.
///
/// # Safety
/// Only by the thread that won [`begin`], once.
pub unsafe fn publish(config: Config) -> &'static Config {
    // SAFETY: the caller is the one initialising thread; readers wait for READY.
    let slot = unsafe { CONFIG.get_mut() };
    let config = slot.write(config);
    STATE.store(READY, Ordering::Release);
    config
}

/// Marks initialisation failed: every hook passes through from now on.
pub fn disable() {
    STATE.store(DISABLED, Ordering::Release);
}

/// A worker process's configuration for unit tests: `plan` (leaked), a fresh private slot table
/// of its slots, the binding or block `bound`.
#[cfg(test)]
pub fn test_config(plan: Plan, bound: Option<CpuSet>) -> Config {
    let table = goset_plan::slots::map(None).expect("an anonymous mapping");
    table.init(plan.slot_count());
    Config {
        plan: Box::leak(Box::new(plan)),
        table,
        launcher: false,
        wrapper: false,
        root: false,
        near: bound.is_some(),
        bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_slot_is_followed_only_inside_the_reservation() {
        let reservation: CpuSet = [1, 2, 5].into_iter().collect();
        let cfg = test_config(Plan::new(&[1, 2], Some(5), reservation).unwrap(), None);
        let table = cfg.table;
        assert_eq!(cfg.cpu_of_slot(0), Some(1));
        table.move_slot(0, 5);
        assert_eq!(
            cfg.cpu_of_slot(0),
            Some(5),
            "the launcher moved it to a spare"
        );
        // The task wrote a CPU outside its reservation into the table: the plan's stays.
        table.move_slot(1, 40);
        assert_eq!(cfg.cpu_of_slot(1), Some(2));
        assert_eq!(cfg.cpu_of_slot(2), None);
    }
}
