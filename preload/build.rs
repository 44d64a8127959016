//! Links libgcc's unwinder (`libgcc_eh.a`) into `libgoset.so` instead of needing
//! `libgcc_s.so.1`: Rust's std refers to `_Unwind_*`, and resolved from the shared library
//! they would make every C program under the shim map and relocate one library more, and run
//! its constructor (a `cpuid` per exec, which traps to the hypervisor in a VM). The copy is
//! private (the cdylib exports only its hooks), so the program's own unwinder, and glibc's
//! for `pthread_exit` and cancellation, are the ones that walk its frames (docs/shim.md).
fn main() {
    println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
}
