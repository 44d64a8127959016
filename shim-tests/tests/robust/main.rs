//! What hostile input and odd environments cannot break: bad plans, hostile files and tasks,
//! descriptors, small stacks, what outlives a killed launcher. One binary; its modules share
//! [`shim_tests::launcher_lock`].

mod bad_input;
mod descriptors;
mod heap;
mod hostile_files;
mod hostile_task;
mod lifetimes;
mod private_base;
mod root_outputs;
mod small_stacks;
