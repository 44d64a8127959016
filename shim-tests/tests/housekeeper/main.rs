//! Threads the shim cannot reach, placed by the housekeeper; its telemetry, and its moves by
//! demand and away from noise. One binary; its modules share [`shim_tests::launcher_lock`].

mod busy_aware;
mod musl;
mod noise_moves;
mod rebalance;
mod static_every_cpu;
mod threads;
