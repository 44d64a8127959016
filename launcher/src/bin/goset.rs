//! `goset`: report the machine (topology, CPU state, isolation, cgroups), or run a task with
//! `goset [OPTIONS] -- CMD` exactly as goset-run does.

fn main() {
    std::process::exit(goset::diag::main_with_args(std::env::args_os()))
}
