//! Where the shim and goset-run put each thread of one task: by runtime, by the calls a task
//! makes, under `--placement mask`, and goset-run's own run on this machine. One binary, so
//! the helpers of `shim_tests` compile once; its modules share [`shim_tests::launcher_lock`].

mod asan;
mod brief_children;
mod edge_cases;
mod fork_exec;
mod launcher_options;
mod linkage;
mod live_run;
mod many_threads;
mod mask;
mod nested_tools;
mod openmp_gcc;
mod openmp_llvm;
mod pool;
mod probe;
mod programs;
mod pthreads;
mod real_runtimes;
mod roaming_start;
mod runtimes;
mod rust_threads;
mod sandboxes;
mod self_pin;
mod views;
