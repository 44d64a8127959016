//! The goset launcher: topology, noise sampling, CPU selection, the pinned run and its report.
//! The binaries `goset-run` and `goset` are thin wrappers over [`launch`] and [`goset_cmd`].

pub mod booking;
pub mod bounded;
pub mod cli;
pub mod completions;
pub mod elf;
pub mod error;
pub mod explain;
pub mod fsroot;
pub mod goset_cmd;
pub mod housekeeper;
pub mod instances;
pub mod isolate;
pub mod launch;
pub mod noise;
pub mod output;
pub mod placement_log;
pub mod privilege;
pub mod probe;
pub mod procfs;
pub mod record;
pub mod report;
pub mod rundir;
pub mod select;
pub mod signals;
pub mod spawn;
pub mod summary;
pub mod task;
pub mod taskenv;
pub mod topology;
