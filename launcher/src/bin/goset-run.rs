//! `goset-run [OPTIONS] -- CMD [ARGS...]`: run a task with every thread on its own quiet CPU.

fn main() {
    std::process::exit(goset::launch::main_with_args(
        "goset-run",
        std::env::args_os(),
    ))
}

/// Runs before Rust's runtime replaces closed standard descriptors with `/dev/null`.
#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDIO: extern "C" fn() = goset::task::note_closed_stdio;
