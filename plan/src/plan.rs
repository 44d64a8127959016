//! The plan file: what the launcher decided, in a form the shim reads without allocating.
//!
//! The launcher writes `<run dir>/plan`; the shim finds the directory in `GOSET_PLAN`. One
//! `key value` pair a line; a line whose first non-blank character is `#` is a comment (a `#`
//! elsewhere is part of the value, as in a log path); unknown keys are ignored so that newer
//! launchers can add keys:
//!
//! ```text
//! goset-plan 1
//! # task CPUs in slot order: slot 0 first
//! cpus 3,1,2
//! # optional
//! housekeeper 0
//! # every CPU the task may use (task CPUs and the housekeeper)
//! reservation 0-3
//! # optional: thread creation indexes that take no slot (likwid-pin's -s)
//! skip 0x1
//! # optional: the first process's main thread runs on the housekeeper
//! main_on_housekeeper 0
//! # optional: where the placement log goes
//! log /tmp/place.log
//! # optional: how the task CPUs group, coarsest first (one line a level, ';' between
//! # groups; see crate::level): NUMA node, package, last-level cache, cluster, core
//! node 0-3;4-7
//! package 0-3;4-7
//! llc 0-3;4-7
//! cluster 0-1;2-3;4-5;6-7
//! core 0-1;2-3;4-5;6-7
//! # optional: goset-run's pid (its child is the task's first process)
//! launcher_pid 4242
//! # optional: SMT siblings are used first (--smt pack); the default spreads over cores
//! smt_pack 1
//! # optional: each process of the task keeps to a block of this many slots (--per-process)
//! per_process 4
//! # optional (--near gpu:local-rank): the machine's GPUs and each local rank's block, see
//! # crate::ranks
//! gpus 2
//! rank_blocks 0:3,1;1:2,0
//! ```

use crate::cpulist::{self, CpuListError};
use crate::cpuset::CpuSet;
use crate::level::{Level, Place, LEVELS};
use crate::ranks::{RankBlocks, RankBlocksError};
use core::fmt;

/// Most task slots a plan holds.
pub const MAX_SLOTS: usize = 1024;
/// Longest log path a plan holds.
pub const MAX_PATH: usize = 512;
/// File name of the plan inside the run directory.
pub const PLAN_FILE: &str = "plan";
/// File name of the slot table inside the run directory.
pub const SLOTS_FILE: &str = "slots";
/// File name of the placement log inside the run directory, when the plan names no other.
pub const LOG_FILE: &str = "placement.log";

/// A parsed plan. Fixed-size so that the shim can keep it in a static.
#[derive(Clone)]
pub struct Plan {
    cpus: [u16; MAX_SLOTS],
    slot_count: usize,
    /// The housekeeper CPU, where helper threads and launcher processes go.
    pub housekeeper: Option<usize>,
    /// Every CPU the task may use; affinity requests of helpers are clamped to it.
    pub reservation: CpuSet,
    /// Bit i set: the thread created i-th (0 = first after the main thread) takes no slot.
    pub skip: u64,
    /// The first process's main thread runs on the housekeeper CPU and takes no slot.
    pub main_on_housekeeper: bool,
    /// The launcher's PID namespace (the inode of its `/proc/self/ns/pid`); 0: not given. The
    /// pids and tids a process of another namespace (a sandbox) sees mean nothing to the
    /// launcher, so such a process places its threads but logs nothing.
    pub pidns: u64,
    /// goset-run's pid: its child is the task's first process; 0: not given (by hand).
    pub launcher_pid: u64,
    /// SMT siblings of a process's own CPUs come before other cores near it (`--smt pack`).
    pub smt_pack: bool,
    /// Slots each process of the task keeps to (`--per-process`); 0: not given.
    pub per_process: usize,
    log: [u8; MAX_PATH],
    log_len: usize,
    /// Each slot's groups ([`Plan::place`]); a level counts only where `levels_given` has it.
    places: [Place; MAX_SLOTS],
    /// Bit `l`: the plan gave level `l`.
    levels_given: u8,
    /// The next slot on the same core, round the core's slots ([`Plan::siblings`]).
    next_on_core: [u16; MAX_SLOTS],
    /// Each local rank's block (`--near gpu:local-rank`); none given: empty.
    pub ranks: RankBlocks,
}

/// Why a plan is unusable. The shim warns with it and passes calls through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// The first line is not `goset-plan 1`.
    NotAPlan,
    /// A key's value does not parse; the key is named.
    BadValue(&'static str, Option<CpuListError>),
    /// No `cpus` line, or an empty one.
    NoCpus,
    /// More CPUs than [`MAX_SLOTS`], or a log path longer than [`MAX_PATH`].
    TooLong(&'static str),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::NotAPlan => {
                f.write_str("not a goset plan (first line must be 'goset-plan 1')")
            }
            PlanError::BadValue(key, Some(e)) => write!(f, "bad '{key}' value: {e}"),
            PlanError::BadValue(key, None) => write!(f, "bad '{key}' value"),
            PlanError::NoCpus => f.write_str("the plan lists no cpus"),
            PlanError::TooLong(key) => write!(f, "'{key}' is too long"),
        }
    }
}

impl Default for Plan {
    fn default() -> Self {
        Plan::EMPTY
    }
}

/// The plan's error for a rank line's.
fn rank_error(key: &'static str, e: RankBlocksError) -> PlanError {
    match e {
        RankBlocksError::Bad(e) => PlanError::BadValue(key, e),
        RankBlocksError::TooMany => PlanError::TooLong(key),
    }
}

fn parse_number(key: &'static str, v: &[u8]) -> Result<u64, PlanError> {
    let (digits, radix) = match v.strip_prefix(b"0x") {
        Some(hex) => (hex, 16),
        None => (v, 10),
    };
    if digits.is_empty() || digits.len() > 16 {
        return Err(PlanError::BadValue(key, None));
    }
    let mut n: u64 = 0;
    for &d in digits {
        let digit = (d as char)
            .to_digit(radix)
            .ok_or(PlanError::BadValue(key, None))?;
        n = n
            .checked_mul(radix as u64)
            .ok_or(PlanError::BadValue(key, None))?
            + digit as u64;
    }
    Ok(n)
}

impl Plan {
    /// A plan with no CPUs; a constant, so that the shim can keep its plan in a static and
    /// fill it in place (a plan is 2.7 KiB: too big for the stacks the shim runs on).
    pub const EMPTY: Plan = Plan {
        cpus: [0; MAX_SLOTS],
        slot_count: 0,
        housekeeper: None,
        reservation: CpuSet::new(),
        skip: 0,
        main_on_housekeeper: false,
        pidns: 0,
        launcher_pid: 0,
        smt_pack: false,
        per_process: 0,
        log: [0; MAX_PATH],
        log_len: 0,
        places: [[0; LEVELS]; MAX_SLOTS],
        levels_given: 0,
        next_on_core: [0; MAX_SLOTS],
        ranks: RankBlocks::EMPTY,
    };

    /// In place: a plan with the given task CPUs in slot order and nothing else (the shim's
    /// `GOSET_CPUS` mode); the reservation is the same CPUs.
    pub fn set_with_cpus(&mut self, text: &[u8]) -> Result<(), PlanError> {
        self.clear();
        self.set_cpus(text)?;
        self.reservation = self.cpu_set();
        Ok(())
    }

    /// In place: a plan whose task CPUs are the CPUs of `set` in ascending order (the shim's
    /// mode without `GOSET_PLAN` or `GOSET_CPUS`: the CPUs the process may use at start).
    pub fn set_from_set(&mut self, set: &CpuSet) -> Result<(), PlanError> {
        self.clear();
        for cpu in set.iter().take(MAX_SLOTS) {
            self.cpus[self.slot_count] = cpu as u16;
            self.slot_count += 1;
        }
        if self.slot_count == 0 {
            return Err(PlanError::NoCpus);
        }
        self.reservation = *set;
        Ok(())
    }

    /// Empties the plan field by field (no 2.7 KiB temporary); the CPU array past
    /// `slot_count` is never read, so it is left as it is.
    fn clear(&mut self) {
        self.slot_count = 0;
        self.housekeeper = None;
        self.reservation = CpuSet::new();
        self.skip = 0;
        self.main_on_housekeeper = false;
        self.pidns = 0;
        self.launcher_pid = 0;
        self.smt_pack = false;
        self.per_process = 0;
        self.log_len = 0;
        self.levels_given = 0;
        self.ranks.clear();
    }

    fn set_cpus(&mut self, text: &[u8]) -> Result<(), PlanError> {
        let mut count = 0usize;
        let mut overflow = false;
        let cpus = &mut self.cpus;
        cpulist::parse(text, &mut |cpu| {
            if count < MAX_SLOTS {
                cpus[count] = cpu as u16;
                count += 1;
            } else {
                overflow = true;
            }
        })
        .map_err(|e| PlanError::BadValue("cpus", Some(e)))?;
        if overflow {
            return Err(PlanError::TooLong("cpus"));
        }
        if count == 0 {
            return Err(PlanError::NoCpus);
        }
        self.slot_count = count;
        Ok(())
    }

    /// Parses a plan file's bytes.
    pub fn parse(text: &[u8]) -> Result<Plan, PlanError> {
        let mut plan = Plan::EMPTY;
        plan.parse_into(text)?;
        Ok(plan)
    }

    /// [`Plan::parse`] in place; on error the plan is left partly filled.
    pub fn parse_into(&mut self, text: &[u8]) -> Result<(), PlanError> {
        let mut lines = text.split(|&c| c == b'\n');
        let header = lines.next().unwrap_or_default();
        if header.trim_ascii() != b"goset-plan 1" {
            return Err(PlanError::NotAPlan);
        }
        self.clear();
        let mut reservation_given = false;
        for raw in lines {
            let line = raw.trim_ascii();
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            let (key, value) = match line.iter().position(|&c| c == b' ') {
                Some(at) => (&line[..at], line[at + 1..].trim_ascii()),
                None => (line, &b""[..]),
            };
            match key {
                b"cpus" => self.set_cpus(value)?,
                b"housekeeper" => {
                    let cpu = parse_number("housekeeper", value)? as usize;
                    if cpu >= crate::cpuset::MAX_CPUS {
                        return Err(PlanError::BadValue(
                            "housekeeper",
                            Some(CpuListError::TooLarge),
                        ));
                    }
                    self.housekeeper = Some(cpu);
                }
                b"reservation" => {
                    self.reservation = cpulist::parse_set(value)
                        .map_err(|e| PlanError::BadValue("reservation", Some(e)))?;
                    reservation_given = true;
                }
                b"skip" => self.skip = parse_number("skip", value)?,
                b"pidns" => self.pidns = parse_number("pidns", value)?,
                b"launcher_pid" => self.launcher_pid = parse_number("launcher_pid", value)?,
                b"main_on_housekeeper" => {
                    self.main_on_housekeeper = parse_number("main_on_housekeeper", value)? != 0
                }
                b"smt_pack" => self.smt_pack = parse_number("smt_pack", value)? != 0,
                b"per_process" => {
                    self.per_process =
                        parse_number("per_process", value)?.min(MAX_SLOTS as u64) as usize
                }
                b"gpus" => (self.ranks.parse_gpus(value)).map_err(|e| rank_error("gpus", e))?,
                b"rank_blocks" => self.set_rank_blocks(value)?,
                b"node" | b"package" | b"llc" | b"cluster" | b"core" => {
                    let level = Level::from_key(key).ok_or(PlanError::NotAPlan)?;
                    self.set_groups(level, value)?;
                }
                b"log" => {
                    if value.len() >= MAX_PATH {
                        return Err(PlanError::TooLong("log"));
                    }
                    self.log[..value.len()].copy_from_slice(value);
                    self.log_len = value.len();
                }
                _ => {}
            }
        }
        if self.slot_count == 0 {
            return Err(PlanError::NoCpus);
        }
        if !reservation_given {
            self.reservation = self.cpu_set();
            if let Some(hk) = self.housekeeper {
                self.reservation.insert(hk);
            }
        }
        Ok(())
    }

    /// Sets the rank blocks from a `rank_blocks` value (see [`crate::ranks`]) over the task
    /// CPUs already set: the plan file's line, or by hand `GOSET_RANK_BLOCKS`.
    pub fn set_rank_blocks(&mut self, text: &[u8]) -> Result<(), PlanError> {
        (self.ranks.parse_blocks(text, &self.cpus[..self.slot_count]))
            .map_err(|e| rank_error("rank_blocks", e))
    }

    /// Task CPUs in slot order.
    pub fn cpus(&self) -> impl Iterator<Item = usize> + '_ {
        self.cpus[..self.slot_count].iter().map(|&c| c as usize)
    }

    /// The CPU of `slot`.
    pub fn cpu_of_slot(&self, slot: usize) -> Option<usize> {
        (slot < self.slot_count).then(|| self.cpus[slot] as usize)
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.slot_count
    }

    /// Task CPUs as a set.
    pub fn cpu_set(&self) -> CpuSet {
        self.cpus().collect()
    }

    /// A hash of the task CPUs in slot order (FNV-1a, never 0), which tells a process handed
    /// a slot table through the environment whether the table was made for its plan.
    pub fn cpus_hash(&self) -> u32 {
        cpus_hash(self.cpus())
    }

    /// Slot `slot`'s group at every level (see [`crate::level`]): the plan's, and where
    /// the plan gives no level, one node, package, cache and cluster, and a core of its own.
    pub fn place(&self, slot: usize) -> Place {
        let mut place = [0; LEVELS];
        if let Some(given) = self.places.get(slot) {
            for (l, p) in place.iter_mut().enumerate() {
                if self.levels_given & (1 << l) != 0 {
                    *p = given[l];
                } else if l == Level::Core as usize {
                    *p = slot as u16;
                }
            }
        }
        place
    }

    /// Whether the plan says how its CPUs group (any level given).
    pub fn has_places(&self) -> bool {
        self.levels_given != 0
    }

    /// Sets every slot's group at `level` from `text`: groups of CPUs separated by `;`, each a
    /// cpulist, numbered in the order written. A CPU in no group is a group of its own.
    fn set_groups(&mut self, level: Level, text: &[u8]) -> Result<(), PlanError> {
        let l = level as usize;
        let key = level.key();
        let count = self.slot_count;
        if count == 0 {
            return Err(PlanError::BadValue(key, None));
        }
        // Groups are numbered after the slots, so that an ungrouped slot's own number (its
        // index) never equals a group's.
        for (slot, place) in self.places[..count].iter_mut().enumerate() {
            place[l] = slot as u16;
        }
        for (g, group) in text.split(|&c| c == b';').enumerate() {
            let id = (count + g).min(u16::MAX as usize) as u16;
            let (cpus, places) = (&self.cpus[..count], &mut self.places);
            cpulist::parse(group, &mut |cpu| {
                for (slot, &c) in cpus.iter().enumerate() {
                    if c as usize == cpu {
                        places[slot][l] = id;
                    }
                }
            })
            .map_err(|e| PlanError::BadValue(key, Some(e)))?;
        }
        self.levels_given |= 1 << l;
        if level == Level::Core {
            self.link_cores();
        }
        Ok(())
    }

    /// Links each slot to the next slot of its core (O(slots²), once per plan).
    fn link_cores(&mut self) {
        let n = self.slot_count;
        let core = Level::Core as usize;
        for s in 0..n {
            let id = self.places[s][core];
            let next = (1..n)
                .map(|i| (s + i) % n)
                .find(|&t| self.places[t][core] == id)
                .unwrap_or(s);
            self.next_on_core[s] = next as u16;
        }
    }

    /// The other slots on `slot`'s core (its SMT siblings' slots); none where the plan gives
    /// no cores.
    pub fn siblings(&self, slot: usize) -> impl Iterator<Item = usize> + '_ {
        let given = self.levels_given & (1 << Level::Core as usize) != 0 && slot < self.slot_count;
        let mut at = slot;
        core::iter::from_fn(move || {
            if !given {
                return None;
            }
            at = self.next_on_core[at] as usize;
            (at != slot).then_some(at)
        })
    }

    /// Sets the groups of every slot at every level (launcher side): `places[slot]`.
    pub fn set_places(&mut self, places: &[Place]) {
        let n = places.len().min(self.slot_count);
        self.places[..n].copy_from_slice(&places[..n]);
        self.levels_given = (1 << LEVELS) - 1;
        self.link_cores();
    }

    /// The log path, when the plan names one.
    pub fn log_path(&self) -> Option<&[u8]> {
        (self.log_len > 0).then(|| &self.log[..self.log_len])
    }

    /// Sets the log path (launcher side). False, and nothing set, for a path the plan cannot
    /// carry as it is: too long, holding a newline, or with blanks at either end (the parser
    /// trims them).
    pub fn set_log_path(&mut self, path: &[u8]) -> bool {
        if path.len() >= MAX_PATH || path.contains(&b'\n') || path.trim_ascii() != path {
            return false;
        }
        self.log[..path.len()].copy_from_slice(path);
        self.log_len = path.len();
        true
    }

    /// Builds a plan from the launcher's decision; `None` when there are no CPUs or more than
    /// [`MAX_SLOTS`].
    pub fn new(cpus: &[usize], housekeeper: Option<usize>, reservation: CpuSet) -> Option<Plan> {
        if cpus.is_empty()
            || cpus.len() > MAX_SLOTS
            || cpus.iter().any(|&c| c >= crate::cpuset::MAX_CPUS)
        {
            return None;
        }
        let mut plan = Plan::EMPTY;
        for (slot, &cpu) in cpus.iter().enumerate() {
            plan.cpus[slot] = cpu as u16;
        }
        plan.slot_count = cpus.len();
        plan.housekeeper = housekeeper;
        plan.reservation = reservation;
        Some(plan)
    }

    /// The plan file's text (launcher side).
    pub fn to_text(&self) -> String {
        use fmt::Write;
        let mut out = String::from("goset-plan 1\ncpus ");
        let cpus: Vec<String> = self.cpus().map(|c| c.to_string()).collect();
        out.push_str(&cpus.join(","));
        out.push('\n');
        if let Some(hk) = self.housekeeper {
            let _ = writeln!(out, "housekeeper {hk}");
        }
        let _ = writeln!(out, "reservation {}", self.reservation);
        if self.skip != 0 {
            let _ = writeln!(out, "skip {:#x}", self.skip);
        }
        if self.main_on_housekeeper {
            out.push_str("main_on_housekeeper 1\n");
        }
        if self.pidns != 0 {
            let _ = writeln!(out, "pidns {}", self.pidns);
        }
        if let Some(log) = self.log_path() {
            let _ = writeln!(out, "log {}", String::from_utf8_lossy(log));
        }
        if self.launcher_pid != 0 {
            let _ = writeln!(out, "launcher_pid {}", self.launcher_pid);
        }
        if self.smt_pack {
            out.push_str("smt_pack 1\n");
        }
        if self.per_process != 0 {
            let _ = writeln!(out, "per_process {}", self.per_process);
        }
        if self.has_places() {
            for level in Level::ALL {
                let _ = writeln!(out, "{} {}", level.key(), self.groups_text(level));
            }
        }
        out.push_str(&(self.ranks).to_text(self.slot_count, |s| self.cpus[s] as usize));
        out
    }

    /// One level's groups as the plan file writes them: `0-3;4-7`, in order of first slot.
    fn groups_text(&self, level: Level) -> String {
        let mut groups: Vec<(u16, CpuSet)> = Vec::new();
        for slot in 0..self.slot_count {
            let id = self.place(slot)[level as usize];
            let cpu = self.cpus[slot] as usize;
            match groups.iter_mut().find(|(g, _)| *g == id) {
                Some((_, set)) => {
                    set.insert(cpu);
                }
                None => groups.push((id, CpuSet::single(cpu))),
            }
        }
        let texts: Vec<String> = groups.iter().map(|(_, set)| set.to_string()).collect();
        texts.join(";")
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("cpus", &self.cpus().collect::<Vec<_>>())
            .field("housekeeper", &self.housekeeper)
            .field("reservation", &self.reservation)
            .field("skip", &self.skip)
            .field("main_on_housekeeper", &self.main_on_housekeeper)
            .field("pidns", &self.pidns)
            .field("smt_pack", &self.smt_pack)
            .field("per_process", &self.per_process)
            .field("rank_blocks", &self.ranks.count())
            .field("log", &self.log_path().map(String::from_utf8_lossy))
            .finish()
    }
}

/// goset's own programs: the shim stays out of them entirely (a goset-run started inside a
/// goset task must pin itself and its task with the real calls, not be placed as a worker),
/// and goset-run starts them on the task's CPUs, not on a slot.
const GOSET_PROGRAMS: &[&[u8]] = &[b"goset-run", b"goset"];

/// Whether executable path `exe` (as `/proc/<pid>/exe` resolves it) is one of goset's own
/// programs.
pub fn is_goset_program(exe: &[u8]) -> bool {
    let name = exe.rsplit(|&c| c == b'/').next().unwrap_or(exe);
    GOSET_PROGRAMS.contains(&name)
}

/// [`Plan::cpus_hash`] of the task CPUs `cpus`, in slot order.
pub fn cpus_hash(cpus: impl Iterator<Item = usize>) -> u32 {
    let h = cpus.fold(0x811c_9dc5u32, |h, cpu| {
        (h ^ cpu as u32).wrapping_mul(0x0100_0193)
    });
    h.max(1)
}

#[cfg(test)]
mod tests;
