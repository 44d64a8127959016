//! `goset`: report the machine (topology, CPU state, isolation, cgroups), or run a task with
//! `goset [OPTIONS] -- CMD` exactly as goset-run does.

fn main() {
    std::process::exit(goset::goset_cmd::main_with_args(std::env::args_os()))
}

/// Runs before Rust's runtime replaces closed standard descriptors with `/dev/null`.
#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDIO: extern "C" fn() = goset::task::note_closed_stdio;
