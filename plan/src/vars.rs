//! The environment variables through which goset-run (or a user, by hand) hands the shim its
//! plan, and the shim hands it on to the programs a task starts.
//!
//! Owns: their names, so that the launcher, which sets and clears them, and the shim, which
//! reads them, spell them one way. What each carries is documented in docs/shim.md and, for
//! the descriptors goset-run hands on, docs/goset-run.md. Plain `str`s: the shim compares
//! them with its environment's bytes (`as_bytes`, const) and copies them where libc wants a
//! NUL-terminated name, so no second spelling is needed.

/// The run directory goset-run made for the task (the plan file, the slot table, the log).
pub const PLAN: &str = "GOSET_PLAN";

/// By hand, without a plan: the task CPUs as a cpulist, in slot order.
pub const CPUS: &str = "GOSET_CPUS";

/// By hand, with `GOSET_CPUS`: each local rank's block near its GPU, as the plan's
/// `rank_blocks` line writes them (`0:0-3;1:4-7`: GPU number, `:`, CPUs; see
/// [`crate::ranks`]).
pub const RANK_BLOCKS: &str = "GOSET_RANK_BLOCKS";

/// The slot table every process of the task shares, as `/proc/<pid>/fd/<n>`: the descriptor
/// goset-run hands the task, or the table the first process started by hand made.
pub const SLOTS: &str = "GOSET_SLOTS";

/// Where the shim writes the placement log instead of the plan's: a file, or `stderr`.
pub const LOG: &str = "GOSET_LOG";

/// A descriptor of the placement log, open for appending, that goset-run's task inherits: a
/// process that may not open the log itself (it switched to another user) writes there.
pub const LOG_FD: &str = "GOSET_LOG_FD";

/// The shim's file name, as `LD_PRELOAD` names it (in the run directory, or where installed).
pub const SHIM_FILE: &str = "libgoset.so";
