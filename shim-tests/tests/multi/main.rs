//! Several processes or runs on one machine: process trees by hand, `--per-process` and
//! `--instances`, Open MPI, Slurm, bookings between concurrent runs. One binary; its modules
//! share [`shim_tests::launcher_lock`].

mod booking;
mod by_hand_tree;
mod housekeeper_sharing;
mod mpi;
mod noise_record;
mod process;
mod ranks;
mod slurm;
mod slurm_nodes;
