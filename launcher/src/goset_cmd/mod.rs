//! The `goset` command, one file per subcommand: without one, the machine's diagnostics
//! ([`diagnostics`]); `topology`, `noise`, `probe`, `restore`, `rm-cgroup` and `completions`; with `-- CMD`, a
//! pinned run exactly as goset-run does it ([`crate::launch`]).
//!
//! Owns: parsing `goset`'s command line, picking the subcommand, and its exit code. It is the
//! top of the launcher: nothing imports it but the `goset` binary. Must not: hold what a
//! subcommand does (each file does) or anything a lower module needs: a parser that two
//! modules share belongs below, in [`crate::procfs`] or [`crate::topology`].

pub(crate) mod diagnostics;
pub(crate) mod noise;
pub(crate) mod probe;
pub(crate) mod restore;
pub(crate) mod rm_cgroup;
pub(crate) mod topology;

use crate::cli::{GosetCli, GosetCommand};
use crate::error::{Error, Result};
use crate::fsroot::FsRoot;
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The root a subcommand reads under: `--fsroot DIR` (a machine dump), else `/`.
fn root_of(fsroot: &Option<PathBuf>) -> Result<FsRoot> {
    crate::cli::fsroot(fsroot.as_deref())
}

/// Writes `value` as pretty JSON to `dest`; `-` or none is stdout, so `--json -` pipes. A
/// file is opened by [`goset_plan::rootfile`]'s rule: one that cannot be is a usage error.
fn print_json(value: &impl Serialize, dest: Option<&Path>) -> Result<()> {
    use goset_plan::rootfile::os;
    let text = serde_json::to_string_pretty(value).expect("report serialises") + "\n";
    match dest {
        Some(path) if path.as_os_str() != "-" => {
            let file = os::open_output(path).map_err(|e| {
                Error::Usage(format!("--json {}: cannot create: {e}", path.display()))
            })?;
            os::write_into(file, text.as_bytes())
                .map_err(|e| Error::System(format!("cannot write {}: {e}", path.display())))
        }
        _ => crate::output::to_stdout(&text)
            .map_err(|e| Error::System(format!("cannot write to stdout: {e}"))),
    }
}

/// The whole of `goset`; returns the exit code.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
    use clap::Parser;
    crate::cli::ignore_empty_env();
    let args = crate::cli::normalize_args(args);
    let cli = GosetCli::try_parse_from(args)
        .unwrap_or_else(|e| crate::cli::exit_on_clap_error(e, "goset"));
    let result = match &cli.command {
        Some(GosetCommand::Topology { json, fsroot }) => topology::run(fsroot, *json),
        Some(GosetCommand::Noise { watch, json, quiet }) => {
            noise::run(watch.as_deref(), json.as_deref(), *quiet)
        }
        Some(GosetCommand::Probe {
            ms,
            cpus,
            threshold_us,
            json,
        }) => probe::run(&probe::ProbeArgs {
            ms: *ms,
            cpus,
            threshold_us: *threshold_us,
            json,
        }),
        Some(GosetCommand::Restore) => restore::run(),
        Some(GosetCommand::RmCgroup { name }) => rm_cgroup::run(name),
        Some(GosetCommand::Completions { shell }) => {
            crate::output::to_stdout(&crate::completions::goset_scripts(*shell))
                .map_err(|e| Error::System(format!("cannot write the completions: {e}")))
        }
        None if cli.run.command.is_empty() && !cli.run.dry_run => root_of(&cli.run.fsroot)
            .and_then(|root| diagnostics::gather(&root))
            .and_then(|d| match &cli.run.json {
                Some(path) => print_json(&d, Some(path)),
                None => {
                    crate::output::to_stderr(&diagnostics::render(&d));
                    Ok(())
                }
            }),
        None => return crate::launch::run_args("goset", &cli.run),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let e = e.naming_limits();
            crate::output::to_stderr(&format!("goset: {e}\n"));
            e.exit_code()
        }
    }
}
