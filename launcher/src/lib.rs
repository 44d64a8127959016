//! The goset launcher: topology, noise sampling, CPU selection, reservation, the pinned run and
//! its report. The binaries `goset-run` and `goset` are thin wrappers over [`cli`].

pub mod fsroot;
pub mod noise;
pub mod topology;
