//! Command-line parsing: clap's view of the flags (`args`), the Go goset's spellings
//! (`spelling`), and the typed, validated options the rest of the launcher works with
//! (`options`); here, the steps around clap that every program of goset takes. Nothing here
//! touches the machine.

mod args;
mod options;
mod spelling;

pub use args::{GosetCli, GosetCommand, PlacementMode, RunArgs, RunCli, Shell, SmtArg};
pub use options::{
    fsroot, parse_duration, NoiseMoves, RunOptions, DEFAULT_SAMPLE_MS, MAX_SAMPLE_MS, MAX_WAIT_S,
};
pub use spelling::{normalize_args, normalize_go_spellings};

/// Treats an empty `GOSET_FSROOT` as unset (clap would take it for a missing value). Called
/// first thing, while the launcher has one thread.
pub fn ignore_empty_env() {
    if std::env::var_os("GOSET_FSROOT").is_some_and(|v| v.is_empty()) {
        std::env::remove_var("GOSET_FSROOT");
    }
}

/// Prints clap's outcome: help and version on stdout (exit 0); errors as one line on stderr
/// (exit 2).
pub fn exit_on_clap_error(err: clap::Error, program: &str) -> ! {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => err.exit(),
        _ => {
            let first = clap_error_line(&err);
            crate::output::to_stderr(&format!("{program}: {first} (see --help)\n"));
            std::process::exit(2)
        }
    }
}

/// clap's first paragraph of an error as one line: a missing argument's name, or the values an
/// option accepts, come on its second line.
pub fn clap_error_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let first: Vec<&str> = (rendered.lines().map(str::trim))
        .take_while(|l| !l.is_empty())
        .collect();
    let first = first.join(" ");
    first.strip_prefix("error: ").unwrap_or(&first).to_string()
}
