//! The JSON report (`--json FILE`): its layout ([`JsonReport`], described in docs/report.md)
//! and where it goes.
//!
//! It owns opening the destination before anything runs and writing the report after. It does
//! not gather the report's parts (the launch fills them in), and prints nothing but a failure
//! to write.

use crate::booking::Booking;
use crate::cli::Placement;
use crate::error::{Error, Result};
use crate::fsroot::ReadError;
use crate::housekeeper::outcome::TelemetryReport;
use crate::housekeeper::ThreadReport;
use crate::isolate::IsolationReport;
use crate::output;
use crate::report::processes::ProcessReport;
use crate::report::SelectionReport;
use crate::summary::RunSummary;
use serde::Serialize;
use std::path::Path;

/// The version of the JSON report's layout, its top-level `schema`: raised when a key is
/// removed, renamed or changes meaning, not when one is added (docs/report.md).
pub const REPORT_SCHEMA: u32 = 1;

/// The JSON report (`--json FILE`), described in docs/report.md.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// [`REPORT_SCHEMA`], first, so that a reader can check it before the rest.
    pub schema: u32,
    /// The selection and its per-CPU rows.
    pub selection: &'a SelectionReport,
    /// How the threads were placed (`--placement`): `thread` (each on its own CPU) or `mask`
    /// (one shared mask of the task CPUs).
    pub placement: Placement,
    /// How the task ran; absent with `--dry-run`.
    pub run: Option<RunSummary>,
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
    pub noise_record: Option<crate::report::record::RecordUse>,
    /// Other runs' bookings when this one selected.
    pub bookings: Vec<Booking>,
    /// Files that could not be read, once each.
    pub errors: Vec<ReadError>,
}

impl<'a> JsonReport<'a> {
    /// The report of a dry run: the selection, and nothing run.
    pub(super) fn dry_run(
        selection: &'a SelectionReport,
        placement: Placement,
        bookings: Vec<Booking>,
        errors: Vec<ReadError>,
    ) -> JsonReport<'a> {
        JsonReport {
            schema: REPORT_SCHEMA,
            selection,
            placement,
            run: None,
            threads: Vec::new(),
            processes: Vec::new(),
            telemetry: None,
            isolation: None,
            noise_record: None,
            bookings,
            errors,
        }
    }
}

/// Where `--json` goes, opened before anything runs (by the rules of [`goset_plan::rootfile`]) so
/// that a bad path is a usage error and not a lost report after the task ran.
pub(super) enum JsonSink {
    None,
    Stdout,
    File(std::fs::File, std::path::PathBuf),
}

impl JsonSink {
    /// Opens `--json`'s destination (`-` is stdout); a path that cannot be created is a usage
    /// error.
    pub(super) fn open(path: Option<&Path>) -> Result<JsonSink> {
        match path {
            None => Ok(JsonSink::None),
            Some(p) if p == Path::new("-") => Ok(JsonSink::Stdout),
            // Not truncated yet: a run that fails before the report leaves the old file.
            Some(p) => goset_plan::rootfile::os::open_output(p)
                .map(|f| JsonSink::File(f, p.to_path_buf()))
                .map_err(|e| Error::Usage(format!("--json {}: cannot create: {e}", p.display()))),
        }
    }

    /// Writes the report; a failure is one line on stderr, and `false` (see [`with_report`]).
    pub(super) fn write(self, program: &str, report: &JsonReport) -> bool {
        use std::io::Write;
        let text = serde_json::to_string_pretty(report).expect("report serialises") + "\n";
        let (result, name) = match self {
            JsonSink::None => return true,
            JsonSink::Stdout => (output::to_stdout(&text), "-".into()),
            // Only a regular file is emptied: a pipe or a terminal (`/dev/stdout`) cannot be.
            JsonSink::File(mut f, path) => (
                f.metadata()
                    .and_then(|m| if m.is_file() { f.set_len(0) } else { Ok(()) })
                    .and_then(|_| f.write_all(text.as_bytes())),
                path.display().to_string(),
            ),
        };
        if let Err(e) = result {
            output::to_stderr(&format!("{program}: cannot write --json {name}: {e}\n"));
            return false;
        }
        true
    }
}

/// goset-run's exit status once the report was written (`written`) or not: the task's own
/// status when it failed (it must not be lost), else 1 for a report that could not be written.
pub(super) fn with_report(task_status: i32, written: bool) -> i32 {
    match (task_status, written) {
        (0, false) => 1,
        (status, _) => status,
    }
}

#[cfg(test)]
mod tests {
    use super::with_report;

    #[test]
    fn a_report_not_written_fails_the_run_but_never_hides_the_tasks_own_failure() {
        assert_eq!(with_report(0, true), 0);
        assert_eq!(with_report(0, false), 1);
        assert_eq!(with_report(3, false), 3);
        assert_eq!(with_report(3, true), 3);
    }
}

#[cfg(test)]
#[path = "json_golden.rs"]
mod golden;
