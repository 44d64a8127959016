//! goset-bench: does pinning pay off on this machine? A fair experiment (interleaved runs of a
//! command bare, under a taskset mask, under goset-run with per-thread placement or one shared
//! mask, and under the shim by hand, on the same CPUs when `--include` fixes them) and its
//! statistics, table, files and plot.
//!
//! Policy (the plan of runs, metric extraction, statistics) is pure; [`experiment`] and
//! [`noise_load`] are the only modules that start processes or threads.

pub mod analysis;
pub mod builtin;
pub mod cache;
pub mod cli;
pub mod experiment;
pub mod files;
pub mod metrics;
pub mod noise_load;
pub mod output;
pub mod plot;
pub mod schedule;
pub mod signals;
pub mod stats;
