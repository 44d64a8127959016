//! Per-CPU noise: interrupts, softirqs, other tasks' load and hypervisor steal.
//!
//! Owns: parsing `/proc/interrupts`, `/proc/softirqs` and `/proc/stat` under an [`FsRoot`],
//! differencing two snapshots, and the noise score. Must not: select or print.

use crate::fsroot::{FsRoot, ReadError};
use serde::Serialize;
