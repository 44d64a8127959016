//! Rust `std::thread`: a program built with rustc, its threads each on a planned CPU.

use shim_tests::*;

#[test]
fn std_threads_by_hand() {
    let prog = Program::rust("rust_threads.rs");
    threads_on_plan(&prog, Mode::ByHand("1,0"), &[1, 3]);
}

#[test]
fn std_threads_under_goset_run() {
    let prog = Program::rust("rust_threads.rs");
    threads_on_plan(&prog, Mode::goset_run(2), &[1, 3]);
}
