//! `goset-run [OPTIONS] -- CMD [ARGS...]`: run a task with every thread on its own quiet CPU.

fn main() {
    std::process::exit(goset::launch::main_with_args(
        "goset-run",
        std::env::args_os(),
    ))
}
