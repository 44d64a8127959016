//! The kernel's `/proc`, read as files under an [`FsRoot`](crate::fsroot::FsRoot), one module
//! per file as `/proc` lays them out (the way the `procfs` crate does).
//!
//! Owns: the one parser of each `/proc` file that more than one part of the launcher reads:
//! [`mounts`] (cgroup hierarchies in `/proc/mounts`), [`pid_stat`] (`/proc/<pid>/stat`, and the
//! [`ProcessId`] that tells a process from an earlier one with the same pid) and [`environ`]
//! (whether a process preloads the shim). Must not: import
//! any other launcher module but `fsroot` and `bounded`, decide anything, or print. It sits at
//! the bottom so that the housekeeper, isolation, run directories and bookings can all read a
//! process without importing each other.

pub mod environ;
pub mod mounts;
pub mod pid_stat;

pub use pid_stat::ProcessId;
