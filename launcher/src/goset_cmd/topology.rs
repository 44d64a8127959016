//! `goset topology`: the machine's topology as goset reads it, as a table or as JSON.
//!
//! Must not: read anything but the topology, or sample noise.

use super::{print_json, root_of};
use crate::error::{Error, Result};
use crate::topology::Topology;
use std::path::PathBuf;

/// `goset topology [--json] [--fsroot DIR]`.
pub fn run(fsroot: &Option<PathBuf>, json: bool) -> Result<()> {
    root_of(fsroot)
        .and_then(|root| {
            Topology::read(&root)
                .map_err(|e| Error::System(format!("cannot read the topology: {e}")))
        })
        .and_then(|t| {
            if json {
                return print_json(&t, None);
            }
            crate::output::to_stderr(&crate::report::render_topology(&t));
            Ok(())
        })
}
