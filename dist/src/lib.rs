//! goset-dist's command line, a library so that tests can read its options from its clap
//! command as they read the other programs' (every output a goset program takes as root is
//! tested from these definitions).

pub mod cli;
