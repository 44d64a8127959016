//! The goset launcher: topology, noise sampling, CPU selection, the pinned run and its report.
//! The binaries `goset-run` and `goset` are thin wrappers over [`launch`] and [`goset_cmd`].

pub(crate) mod booking;
pub(crate) mod bounded;
pub mod cli;
pub mod completions;
pub mod elf;
pub mod error;
pub(crate) mod explain;
pub mod fsroot;
pub mod goset_cmd;
pub mod housekeeper;
pub(crate) mod instances;
pub(crate) mod isolate;
pub mod launch;
pub mod noise;
pub mod output;
pub mod placement_log;
pub(crate) mod privilege;
pub(crate) mod probe;
pub(crate) mod procfs;
pub(crate) mod record;
pub mod report;
pub mod rundir;
pub mod select;
pub(crate) mod signals;
pub(crate) mod spawn;
pub(crate) mod summary;
pub mod task;
pub mod taskenv;
pub mod topology;
