//! The node's noise record: what each CPU lost, and to what, over the last seconds, minutes
//! and day, kept beside the bookings so that every run knows what the runs and watches before
//! it saw, not only its own moment's sample.
//!
//! - `decay.rs`: [`Record`] and its arithmetic (pure): decayed sums per CPU and horizon, an
//!   observation or a probe added, two records merged, the view at an instant, the checks a
//!   record from a file must pass;
//! - `feed.rs`: two counter snapshots as observations of every CPU; [`feed::Feed`], fed as a
//!   run goes;
//! - `file.rs`: where the record lives, whose it may be, reading and replacing it;
//! - `blend.rs`: a fresh sample and the record combined into selection's scores (pure).
//!
//! `goset noise` (`goset_cmd/noise.rs`) watches into it and shows it (`report/record.rs`); a
//! run's launch feeds it (`launch/cpus.rs`, `launch/execute.rs`). A direct probe adds its
//! result with [`Record::add_probe`] and [`file::save`].
//!
//! Sources, per CPU and horizon: other tasks' load (user, nice and system time), irq and
//! softirq time (where the kernel accounts it), steal, detours a direct probe measured, and
//! interrupt and softirq rates. The format, the horizons and the trust rules are in
//! docs/decisions.md ("Noise record").

pub mod blend;
pub mod decay;
pub mod feed;
pub mod file;

pub use decay::{Record, View, HORIZONS_S, HORIZON_NAMES, MINUTES};

#[cfg(test)]
mod tests;
