//! `goset` without a command: what the machine looks like to a pinning tool.
//!
//! Owns the diagnostics report (topology summary, per-CPU state, isolation parameters, cgroup
//! controllers, irqbalance) and `goset topology`. With `-- CMD` it hands over to [`crate::launch`].

use crate::cli::{GosetCli, GosetCommand};
use crate::error::{Error, Result};
use crate::fsroot::FsRoot;
use crate::topology::Topology;
use std::ffi::OsString;
use std::path::PathBuf;

fn read_topology(fsroot: &Option<PathBuf>) -> Result<Topology> {
    let root = fsroot.as_deref().map_or_else(FsRoot::default, FsRoot::new);
    Topology::read(&root).map_err(|e| Error::System(format!("cannot read the topology: {e}")))
}

/// `goset topology [--json]`.
fn topology(json: bool, fsroot: &Option<PathBuf>) -> Result<i32> {
    let topo = read_topology(fsroot)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&topo).expect("topology serialises")
        );
    } else {
        print!("{}", crate::report::render_topology(&topo));
    }
    Ok(0)
}

/// The whole of `goset`; returns the exit code.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
    use clap::Parser;
    let args = crate::cli::normalize_args(args);
    let cli = GosetCli::try_parse_from(args)
        .unwrap_or_else(|e| crate::cli::exit_on_clap_error(e, "goset"));
    let result = match &cli.command {
        Some(GosetCommand::Topology { json, fsroot }) => topology(*json, fsroot),
        None if cli.run.command.is_empty() && !cli.run.dry_run => {
            diagnostics(&cli.run.fsroot, cli.run.json.as_ref())
        }
        None => return crate::launch::run_args("goset", &cli.run),
    };
    result.unwrap_or_else(|e| {
        eprintln!("goset: {e}");
        e.exit_code()
    })
}

/// The diagnostics report (text on stdout: there is no task), or JSON with `--json FILE|-`.
fn diagnostics(fsroot: &Option<PathBuf>, json: Option<&PathBuf>) -> Result<i32> {
    let topo = read_topology(fsroot)?;
    match json {
        Some(path) => {
            let text = serde_json::to_string_pretty(&topo).expect("serialises") + "\n";
            if path.as_os_str() == "-" {
                print!("{text}");
            } else {
                std::fs::write(path, text)
                    .map_err(|e| Error::System(format!("cannot write {}: {e}", path.display())))?;
            }
        }
        None => print!("{}", crate::report::render_topology(&topo)),
    }
    Ok(0)
}
