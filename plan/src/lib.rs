//! The contract between `goset-run` and `libgoset.so`.
//!
//! This crate owns the things both sides must agree on, and nothing else:
//! - [`log`]: the placement log's names (events, roles, who placed a thread) and the shim's
//!   record layout: its writer, and the scanner ([`log::scan`]) the launcher follows it with;
//! - [`buf`]: the fixed buffer the shim builds its paths and log lines in;
//! - [`cpulist`]: the kernel's cpulist syntax (`1,3-5`, `0-10:2`), parsed without allocation;
//! - [`plan`]: the plan file the launcher writes into the run directory and the shim reads;
//! - [`level`]: the levels at which CPUs group, a slot's place at each, how near two places are;
//! - [`locality`]: which slots are near a process, and the blocks a multi-process task is cut into;
//! - [`ranks`]: the block of each local rank near its GPU (`--near gpu:local-rank`), and the
//!   variables a process's local rank and visible GPUs are read from;
//! - [`slots`]: the slot table, a fixed layout of atomics shared (mmap) by every process of a task,
//!   and the label its thread records carry ([`slots::label`]);
//! - [`vars`]: the names of the environment variables that hand the plan on;
//! - [`clock`]: the one clock, read through the vDSO, never a clock another preload replaced;
//! - [`raw`]: the system call entry, for what must reach the kernel and nothing else;
//! - [`descriptor`]: the numbers the launcher and the shim keep their descriptors at in a task;
//! - [`rootfile`]: when root may write a file at a name a user gave (the log, the report).
//!
//! Everything the shim calls here is allocation-free and lock-free, so it is safe on hook paths,
//! after `fork` and in a `vfork` child. The launcher-only helpers (formatting the plan) allocate.

pub mod buf;
pub mod clock;
pub mod cpulist;
pub mod cpuset;
pub mod descriptor;
pub mod level;
pub mod locality;
pub mod log;
pub mod plan;
pub mod ranks;
pub mod raw;
pub mod rootfile;
pub mod slots;
pub mod vars;

pub use cpulist::CpuListError;
pub use cpuset::{CpuSet, MAX_CPUS};
pub use plan::{Plan, PlanError, MAX_SLOTS};
pub use slots::SlotTable;
