//! The run's report as one set of types: what `goset-run` tells of a run, built from the
//! domain's values, read by every output (the stderr tables in [`crate::report`], the JSON
//! report that [`crate::launch`] writes with `--json`).
//!
//! Owns: every field of the JSON report, its name and its type, in this folder alone (the
//! domain types carry no serde), and [`REPORT_SCHEMA`]. `tests.rs` holds the report to the
//! committed `launcher/tests/fixtures/report-schema/<REPORT_SCHEMA>.json`. Must not: render
//! text, or read anything.
//!
//! - `selection.rs`: [`SelectionReport`], the decision and its per-CPU rows;
//! - `run.rs`: [`RunReport`], how the task ran, and the placement mode;
//! - `threads.rs`: [`ThreadReport`], each thread;
//! - `processes.rs`: [`ProcessReport`], each process;
//! - `telemetry.rs`: [`TelemetryReport`], the task CPUs and the housekeeper;
//! - `isolation.rs`: [`IsolationReport`], what isolation changed and undid;
//! - `record.rs`: [`RecordUse`], what the noise record knew against what the run saw;
//! - here: the whole [`Report`], other runs' bookings and the files that could not be read.

pub(crate) mod isolation;
pub(crate) mod processes;
pub(crate) mod record;
pub(crate) mod run;
pub(crate) mod selection;
pub(crate) mod telemetry;
#[cfg(test)]
mod tests;
pub(crate) mod threads;

pub use isolation::IsolationReport;
pub use processes::ProcessReport;
pub use record::RecordUse;
pub use run::{PlacementMode, RunReport};
pub use selection::{selection_report, SelectionReport};
pub use telemetry::TelemetryReport;
pub use threads::ThreadReport;

use crate::booking::Booking;
use crate::fsroot::ReadError;
use serde::Serialize;

/// The version of the JSON report's layout, its top-level `schema`: raised when a key is
/// removed, renamed or changes meaning, not when one is added (docs/report.md).
pub const REPORT_SCHEMA: u32 = 1;

/// A run's report (the JSON of `--json FILE`, described in docs/report.md).
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// [`REPORT_SCHEMA`], first, so that a reader can check it before the rest.
    pub schema: u32,
    /// The selection and its per-CPU rows.
    pub selection: &'a SelectionReport,
    /// How the threads were placed (`--placement`).
    pub placement: PlacementMode,
    /// How the task ran; absent with `--dry-run`.
    pub run: Option<RunReport>,
    /// Where each thread was placed (the placement log) and what it did (the housekeeper).
    pub threads: Vec<ThreadReport>,
    /// Each process of the task: its threads' CPUs and nodes, with `--instances` its copy
    /// and ending; empty with `--dry-run`.
    pub processes: Vec<ProcessReport>,
    /// Per task CPU counters over the run and the housekeeper's cost; absent with `--dry-run`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryReport>,
    /// What `--cgroup`, `--fence` and `--steer` changed and how it was undone; absent without
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationReport>,
    /// What the node's noise record knew of the task CPUs, and what the run saw; absent off
    /// the live machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_record: Option<RecordUse>,
    /// Other runs' bookings when this one selected.
    pub bookings: Vec<BookingReport>,
    /// Files that could not be read, once each.
    pub errors: Vec<ReadErrorReport>,
}

impl<'a> Report<'a> {
    /// The report of a run that has selected and not run (yet): the selection, other runs'
    /// bookings and the files that could not be read; the launch fills in the rest.
    pub fn selected(
        selection: &'a SelectionReport,
        placement: PlacementMode,
        bookings: &[Booking],
        errors: &[ReadError],
    ) -> Report<'a> {
        Report {
            schema: REPORT_SCHEMA,
            selection,
            placement,
            run: None,
            threads: Vec::new(),
            processes: Vec::new(),
            telemetry: None,
            isolation: None,
            noise_record: None,
            bookings: bookings.iter().map(BookingReport::from).collect(),
            errors: errors.iter().map(ReadErrorReport::from).collect(),
        }
    }
}

/// Another run's booking (see [`crate::booking`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BookingReport {
    /// Its launcher's pid.
    pub pid: u32,
    /// Its launcher's start time (`stat` field 22).
    pub start: u64,
    /// The user it runs for.
    pub uid: u32,
    /// Its command line.
    pub command: String,
    /// Its Slurm job and step (`SLURM_JOB_ID.SLURM_STEP_ID`, task `SLURM_PROCID`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm: Option<String>,
    /// Its task CPUs.
    pub cpus: Vec<usize>,
    /// Its housekeeper's CPU.
    pub housekeeper: usize,
}

impl BookingReport {
    /// How the run is named (see [`crate::booking::who`]).
    pub fn who(&self) -> String {
        crate::booking::who(self.pid, &self.command, self.slurm.as_deref())
    }
}

impl From<&Booking> for BookingReport {
    fn from(b: &Booking) -> BookingReport {
        BookingReport {
            pid: b.pid,
            start: b.start,
            uid: b.uid,
            command: b.command.clone(),
            slurm: b.slurm.clone(),
            cpus: b.cpus.clone(),
            housekeeper: b.housekeeper_cpu,
        }
    }
}

/// A file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadErrorReport {
    /// The path.
    pub file: String,
    /// Why.
    pub reason: String,
}

impl From<&ReadError> for ReadErrorReport {
    fn from(e: &ReadError) -> ReadErrorReport {
        ReadErrorReport {
            file: e.file.clone(),
            reason: e.reason.clone(),
        }
    }
}
