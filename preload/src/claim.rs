//! A thread's placement (role, CPU, slot) and the slot-table operations that give and take it.
//!
//! Owns: claiming (fewest-live slot, via the shared table), releasing, adopting the record an
//! exec'd process already holds, and reaping records of processes that died without running
//! exit handlers. Must not: lock or allocate.
//!
//! Records are labelled, since a thread's tid is not known to the parent that claims for it:
//! a main thread's record carries its tid (= pid), any other thread's carries `-pid`.

use crate::config::Config;
use crate::role::Role;
use crate::sys;
use goset_plan::level::Level;
use goset_plan::locality;
use goset_plan::slots::{Claim, Origin};
use goset_plan::{CpuSet, MAX_SLOTS};

mod process_state;
mod reap;

use process_state::state;
pub use process_state::{alive, descends_from};
use reap::reap_if_full;

/// Where a thread runs and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The thread's role.
    pub role: Role,
    /// Its CPU: the slot's, or the housekeeper for helpers; `None`: the reservation.
    pub cpu: Option<usize>,
    /// The slot held.
    pub slot: Option<usize>,
    /// The slot table record, for release.
    pub record: Option<usize>,
    /// Whether another live thread holds the slot too.
    pub shared: bool,
    /// Born while every slot had a running thread: it runs on every slot's CPU (the whole
    /// reservation but the housekeeper's CPU; the kernel balances it) and its slot only counts
    /// it, until the housekeeper moves its record to a slot of its own.
    pub roams: bool,
}

fn field(v: Option<usize>) -> u64 {
    v.map_or(0, |v| (v as u64 + 1) & 0xffff)
}

fn unfield(v: u64) -> Option<usize> {
    let v = v & 0xffff;
    (v != 0).then(|| v as usize - 1)
}

impl Placement {
    /// Not placed.
    pub const UNKNOWN: Placement = Placement {
        role: Role::Unknown,
        cpu: None,
        slot: None,
        record: None,
        shared: false,
        roams: false,
    };

    /// A placement without a slot.
    pub fn unslotted(role: Role, cpu: Option<usize>) -> Placement {
        Placement {
            role,
            cpu,
            ..Placement::UNKNOWN
        }
    }

    /// Packs into one word, for atomics and thread-locals (0 is [`Placement::UNKNOWN`]).
    pub fn pack(&self) -> u64 {
        field(self.cpu)
            | field(self.slot) << 16
            | field(self.record) << 32
            | (self.role as u64) << 48
            | (self.shared as u64) << 56
            | (self.roams as u64) << 57
    }

    /// The inverse of [`Placement::pack`].
    pub fn unpack(v: u64) -> Placement {
        Placement {
            cpu: unfield(v),
            slot: unfield(v >> 16),
            record: unfield(v >> 32),
            role: Role::from_u8((v >> 48) as u8),
            shared: (v >> 56) & 1 != 0,
            roams: (v >> 57) & 1 != 0,
        }
    }

    /// The slot claim to release, if any.
    pub fn claim(&self) -> Option<Claim> {
        self.slot.map(|slot| Claim {
            slot,
            shared: self.shared,
            record: self.record,
        })
    }

    /// The mask this thread is born with.
    pub fn birth_set(&self, cfg: &Config) -> CpuSet {
        match self.cpu {
            Some(cpu) => CpuSet::single(cpu),
            None if self.roams => cfg.slot_set(),
            None => cfg.helper_set(),
        }
    }

    /// The mask a thread created by `creator` starts with: [`Placement::birth_set`], but a
    /// roaming thread whose creator runs pinned starts off the creator's CPU (when another is
    /// left), and `true` says it widens to its whole mask once it runs
    /// ([`Placement::widen`]).
    ///
    /// glibc applies a birth mask after clone, and a clone starts on its creator's CPU; a
    /// widened mask does not move a thread. Born with the whole mask, a roaming thread would
    /// start beside its creator, which is running, and stay there as long as every other CPU
    /// had one runnable thread (a pool's worker spinning before it sleeps), where under a
    /// plain mask the kernel starts it on the least loaded CPU.
    pub fn first_set(&self, cfg: &Config, creator: &Placement) -> (CpuSet, bool) {
        let set = self.birth_set(cfg);
        let creator_cpu = creator.slot_now(cfg).and_then(|s| cfg.cpu_of_slot(s));
        match creator_cpu {
            Some(cpu) if self.roams && self.cpu.is_none() && set.contains(cpu) => {
                let mut away = set;
                away.remove(cpu);
                if away.is_empty() {
                    (set, false)
                } else {
                    (away, true)
                }
            }
            _ => (set, false),
        }
    }

    /// Gives a roaming thread started by [`Placement::first_set`] its whole mask; the calling
    /// thread must be that thread. A housekeeper that gave it a slot meanwhile (it moves the
    /// record, then the thread) keeps its move: the thread goes to that slot's CPU.
    pub fn widen(&self, cfg: &Config) {
        sys::set_affinity(0, &self.birth_set(cfg));
        if let Some(cpu) = self.slot_now(cfg).and_then(|s| cfg.cpu_of_slot(s)) {
            sys::set_affinity(0, &CpuSet::single(cpu));
        }
    }

    /// The slot whose CPU this thread runs on now: its record's, as the table says now (the
    /// housekeeper may have moved it off a crowded slot, or given a roaming thread a slot of
    /// its own); `None` for a thread on no slot's CPU (a helper, a roaming thread).
    pub fn slot_now(&self, cfg: &Config) -> Option<usize> {
        let slot = self.slot?;
        let now = (self.record)
            .and_then(|r| cfg.table.record_slot(r))
            .unwrap_or(slot);
        (!self.roams || now != slot).then_some(now)
    }

    /// The mask applied when this thread asks for `requested`: its own CPU (its slot's now,
    /// see [`Placement::slot_now`]: the answer must not undo the housekeeper's move), the
    /// slots' CPUs for a roaming thread, and for helpers and launcher threads the request
    /// clamped to the reservation.
    pub fn answer(&self, cfg: &Config, requested: &CpuSet) -> CpuSet {
        let now = self.slot_now(cfg).and_then(|slot| cfg.cpu_of_slot(slot));
        match now.or(self.cpu) {
            Some(cpu) if !self.role.is_clamped() => CpuSet::single(cpu),
            None if self.roams => cfg.slot_set(),
            _ => cfg.clamp(requested),
        }
    }
}

/// How near slot `s` is for a thread of this process whose main thread holds `anchor`
/// (`None`: the main thread itself); `None` when the process may not take `s`. A slot in
/// another process's block comes after every other; then, for a process that keeps its
/// threads near ([`Config::near`]), the slots nearest its main thread
/// ([`locality::near_key`]), or for a main thread the slots where its node, package and cache
/// have the most room ([`first_key`]; `unsettled`: see [`Unsettled`]).
fn nearness(
    cfg: &Config,
    me: u32,
    s: usize,
    anchor: Option<usize>,
    unsettled: Option<&Unsettled>,
) -> Option<u32> {
    if !cfg.may_take(s) {
        return None;
    }
    let table = cfg.table;
    let foreign = cfg.bound.is_none() && table.owner(s).is_some_and(|o| o != me);
    let near = match (cfg.near, unsettled) {
        (false, _) => 0,
        (true, Some(unsettled)) => first_key(cfg, me, s, unsettled),
        (true, None) => {
            let core_free = cfg.plan.siblings(s).all(|t| table.live(t) == 0);
            locality::near_key(cfg.plan, s, anchor, core_free)
        }
    };
    Some(near | (foreign as u32) << 31)
}

/// Other processes, at most [`LOOKS`], whose main thread holds a slot (the slot is kept here)
/// while they hold no block yet: each will take more of the room around its slot as soon as
/// its shim starts, or the housekeeper placed it before its shim ran. Two processes starting
/// together must not both count that room as theirs.
type Unsettled = [Option<usize>; LOOKS];

/// [`Unsettled`] as the table stands, for process `me`'s first claim.
fn unsettled(cfg: &Config, me: u32) -> Unsettled {
    let table = cfg.table;
    let slots = table.slot_count();
    let mut out = [None; LOOKS];
    let others = (table.records())
        .filter(|&(label, _)| label > 0 && label as u32 != me)
        .filter(|&(label, _)| !(0..slots).any(|t| table.owner(t) == Some(label as u32)));
    for (cell, (_, slot)) in out.iter_mut().zip(others) {
        *cell = Some(slot);
    }
    out
}

/// A main thread's order: its node with the most room first, then its package, then its
/// cache. Room is the free slots (no live thread, in no other process's block), less one for
/// each [`Unsettled`] process there. O(slots²): once a process.
fn first_key(cfg: &Config, me: u32, s: usize, unsettled: &Unsettled) -> u32 {
    let (plan, table) = (cfg.plan, cfg.table);
    let here = plan.place(s);
    let mut room = [0u32; 3];
    for t in 0..plan.slot_count() {
        if table.live(t) > 0 || table.owner(t).is_some_and(|o| o != me) {
            continue;
        }
        let there = plan.place(t);
        for (l, r) in [Level::Node, Level::Package, Level::Llc]
            .iter()
            .zip(&mut room)
        {
            *r += u32::from(there[*l as usize] == here[*l as usize]);
        }
    }
    for there in unsettled.iter().flatten().map(|&u| plan.place(u)) {
        for (l, r) in [Level::Node, Level::Package, Level::Llc]
            .iter()
            .zip(&mut room)
        {
            *r = r.saturating_sub(u32::from(there[*l as usize] == here[*l as usize]));
        }
    }
    // 10 bits a level (at most MAX_SLOTS free), most room first.
    let max = MAX_SLOTS as u32;
    room.iter()
        .fold(0, |key, &r| key << 10 | (max - r.min(max)).min(1023))
}

/// Claims a slot for a new thread labelled `label`, created by a thread running on slot
/// `creator` (see [`goset_plan::slots::birth_key`]), whose process's main thread holds
/// `anchor` (`None` for the main thread itself): a slot with no running thread if there is
/// one, the nearest first ([`nearness`]), else the thread roams the reservation
/// ([`Placement::roams`]).
pub fn claim(
    cfg: &Config,
    role: Role,
    label: i32,
    creator: Option<usize>,
    anchor: Option<usize>,
) -> Placement {
    let origin = Origin {
        creator,
        ..Origin::default()
    };
    claim_from(cfg, role, label, origin, anchor)
}

/// Claims a slot for the main thread of a new image, labelled `label`, placing itself: as
/// [`claim`] without a creator, but one of several processes keeps the CPU it runs on among
/// slots otherwise alike, and takes its waiting parent's place there (see [`Origin`]); a
/// task's first process keeps the plan's order.
pub fn claim_image(cfg: &Config, label: i32) -> Placement {
    let here = cfg.near.then(|| here(cfg)).flatten();
    let origin = Origin {
        here,
        parent_waits: here.is_some_and(|slot| parent_waits_on(cfg, slot)),
        ..Origin::default()
    };
    claim_from(cfg, Role::Main, label, origin, None)
}

fn claim_from(
    cfg: &Config,
    role: Role,
    label: i32,
    origin: Origin,
    anchor: Option<usize>,
) -> Placement {
    reap_if_full(cfg);
    let main = role == Role::Main;
    // A label is the pid or its negative (goset_plan::slots::label): no system call here.
    let me = label.unsigned_abs();
    let unsettled = (main && cfg.near).then(|| unsettled(cfg, me));
    let born = cfg.table.claim_birth_within(
        label,
        origin,
        cfg.table.slot_count(),
        |s| nearness(cfg, me, s, anchor, unsettled.as_ref()),
        |s| main && runs_there(cfg, s, me),
    );
    match born {
        Some(b) if b.roams && cfg.bound.is_some() => {
            let roaming = Placement {
                role,
                cpu: None,
                slot: Some(b.claim.slot),
                record: b.claim.record,
                shared: b.claim.shared,
                roams: true,
            };
            own_free_slot(cfg, me, label, role, b.claim.slot).map_or(roaming, |pinned| {
                cfg.table.release(&b.claim);
                pinned
            })
        }
        Some(b) => Placement {
            role,
            cpu: cfg.cpu_of_slot(b.claim.slot).filter(|_| !b.roams),
            slot: Some(b.claim.slot),
            record: b.claim.record,
            shared: b.claim.shared,
            roams: b.roams,
        },
        None => Placement::unslotted(role, None),
    }
}

/// A worker born beside `creator` (the creating thread's placement), with its mask: on its
/// slot, counted there once more, on its CPU, or roaming like it. Unslotted, on the creator's
/// CPU, when the creator holds no slot.
pub fn beside(cfg: &Config, label: i32, creator: &Placement) -> Placement {
    let slot = creator
        .slot_now(cfg)
        .or(creator.slot.filter(|_| creator.roams));
    let Some(claim) = slot.and_then(|s| cfg.table.claim_at(label, s)) else {
        return Placement::unslotted(Role::Worker, creator.cpu);
    };
    let roams = creator.roams && creator.slot_now(cfg).is_none();
    Placement {
        role: Role::Worker,
        cpu: cfg.cpu_of_slot(claim.slot).filter(|_| !roams),
        slot: Some(claim.slot),
        record: claim.record,
        shared: claim.shared,
        roams,
    }
}

/// For a process that keeps to its own slots (a block, a binding) whose every slot looked
/// busy: one of them that no thread of this process holds (`me`: its pid). What runs there
/// is another process's (a shell the housekeeper placed before the block was taken), which
/// the housekeeper moves out of the block; the new thread takes that slot rather than roam.
/// Off the hot path: only when a birth would roam (`roaming`: the slot that birth counts on,
/// whose record is the new thread's own).
fn own_free_slot(
    cfg: &Config,
    me: u32,
    label: i32,
    role: Role,
    roaming: usize,
) -> Option<Placement> {
    let table = cfg.table;
    let mine = |s: usize| {
        let held = (table.records())
            .filter(|&(l, at)| at == s && l.unsigned_abs() == me)
            .count();
        held - usize::from(s == roaming).min(held)
    };
    let slot = (0..table.slot_count())
        .filter(|&s| cfg.may_take(s) && mine(s) == 0)
        .min_by_key(|&s| (table.live(s), s))?;
    let claim = table.claim_at(label, slot)?;
    Some(Placement {
        role,
        cpu: cfg.cpu_of_slot(slot),
        slot: Some(slot),
        record: claim.record,
        shared: claim.shared,
        roams: false,
    })
}

/// Gives back a placement's slot.
pub fn release(cfg: &Config, p: &Placement) {
    if let Some(c) = p.claim() {
        cfg.table.release(&c);
    }
}

/// The slot a process's main thread already holds (an exec'd process keeps its slot).
pub fn adopt(cfg: &Config, pid: i32) -> Option<Placement> {
    let (record, slot) = cfg.table.find(pid)?;
    Some(Placement {
        role: Role::Main,
        cpu: cfg.cpu_of_slot(slot),
        slot: Some(slot),
        record: Some(record),
        shared: cfg.table.live(slot) > 1,
        roams: false,
    })
}

/// Processes whose running a claim looks at, at most: one `/proc` read each.
const LOOKS: usize = 8;

/// Whether the main thread of a process other than `me` that holds `slot` runs now (state R in
/// `/proc`). Asked by hand only (a housekeeper's counts say it otherwise), and only for a
/// process's claim (a fork, an exec): a process that starts costs far more than these reads,
/// a `pthread_create` stays free of them. xargs's third job was born beside its first, which
/// still computed, when nothing told the shim so after its first 100 ms.
fn runs_there(cfg: &Config, slot: usize, me: u32) -> bool {
    (cfg.table.main_holders(slot))
        .filter(|&pid| pid as u32 != me)
        .take(LOOKS)
        .any(|pid| state(pid) == Some(b'R'))
}

/// The slot whose CPU the calling thread runs on now (see [`Origin::here`]).
fn here(cfg: &Config) -> Option<usize> {
    let cpu = sys::current_cpu()?;
    (0..cfg.table.slot_count()).find(|&s| cfg.cpu_of_slot(s) == Some(cpu))
}

/// Whether this process's parent's main thread holds `slot` and does not run now: it waits
/// for this process (see [`Origin::parent_waits`]). One `/proc` read, only when it holds it.
fn parent_waits_on(cfg: &Config, slot: usize) -> bool {
    let parent = sys::getppid();
    let holds = cfg.table.main_holders(slot).any(|pid| pid == parent);
    holds && state(parent) != Some(b'R')
}

#[cfg(test)]
mod tests;
