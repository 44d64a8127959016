//! The report on stderr: the tables of a dry run and of a finished run, or with `--quiet` the
//! errors of this run only.
//!
//! It owns which tables are shown, and in what order. It renders through [`crate::report`]
//! and writes nothing itself: the launch prints what it returns.

use crate::booking::Booking;
use crate::cli::RunOptions;
use crate::fsroot::ReadError;
use crate::report;
use crate::report::model::{BookingReport, ReadErrorReport, Report, SelectionReport};

/// What every report on stderr starts with (the selection, how threads are placed, other runs'
/// bookings), and what it is rendered from.
pub(super) struct Head<'a> {
    pub opts: &'a RunOptions,
    pub sel_report: &'a SelectionReport,
    /// Other runs' bookings when this one selected.
    pub bookings: &'a [Booking],
}

impl Head<'_> {
    fn render(&self) -> String {
        let booked: Vec<BookingReport> = self.bookings.iter().map(BookingReport::from).collect();
        let bookings = report::render_bookings(
            &booked,
            if self.opts.share {
                "Bookings of other runs (--share: their CPUs may be shared)"
            } else {
                "Bookings of other runs (their CPUs left out)"
            },
        );
        format!(
            "{}{}{}{bookings}",
            report::banner(),
            report::render_selection(self.sel_report),
            report::render_placement(self.opts.placement.into(), &self.sel_report.selection)
        )
    }

    /// What a dry run prints: the head and the files that could not be read.
    pub(super) fn dry_run(&self, errors: &[ReadError]) -> String {
        if self.opts.quiet {
            return quiet_errors(errors);
        }
        let errors: Vec<ReadErrorReport> = errors.iter().map(ReadErrorReport::from).collect();
        self.render() + &self.sharing(&[]) + &report::telemetry::render_errors(&errors)
    }

    /// The CPUs shared with other runs' housekeepers or tasks: with the runs seen at selection,
    /// and with `later` ones (booked since: the registry read as the run ends).
    fn sharing(&self, later: &[Booking]) -> String {
        let others: Vec<BookingReport> = (self.bookings.iter().chain(later))
            .map(BookingReport::from)
            .collect();
        let sel = &self.sel_report.selection;
        let shared = report::sharing::find(&sel.task_cpus, sel.housekeeper, &others);
        report::sharing::render(&shared)
    }

    /// What a finished run prints, all of it read from the run's `report`: the head, then what
    /// the run did (per-CPU telemetry, the processes, the threads, the moves, the run's totals),
    /// what isolation changed, and the files that could not be read. `errors` are the same
    /// files as the report's, for `--quiet` to tell the machine's facts from this run's.
    pub(super) fn finished(
        &self,
        report: &Report,
        errors: &[ReadError],
        later: &[Booking],
    ) -> String {
        use report::telemetry as tele;
        if self.opts.quiet {
            return quiet_errors(errors);
        }
        let brief = report.telemetry.as_ref().map_or(0, |t| t.totals.brief);
        let threads_table = if report.threads.is_empty() {
            String::new()
        } else {
            tele::render_threads(&report.threads, brief)
        };
        let iso = report.isolation.as_ref();
        let iso_table = iso
            .map(|r| report::isolation::render_isolation(r, &report.selection.selection))
            .unwrap_or_default();
        let irq_drift = iso.and_then(|r| r.steer.as_ref()).map(|s| s.drift);
        let ran = |f: &dyn Fn(&report::model::TelemetryReport) -> String| {
            report.telemetry.as_ref().map_or_else(String::new, f)
        };
        let run_table = (report.run.as_ref().zip(report.telemetry.as_ref()))
            .map(|(run, tele)| tele::render_run(run, tele, irq_drift, report.placement))
            .unwrap_or_default();
        format!(
            "{}{}{}{}{}{}{}{iso_table}{}",
            self.render(),
            self.sharing(later),
            ran(&tele::render_telemetry)
                + &(report.noise_record.as_ref())
                    .map_or_else(String::new, report::record::render_known_and_seen),
            report::processes::render(&report.processes),
            threads_table,
            ran(&tele::render_moves),
            run_table,
            tele::render_errors(&report.errors),
        )
    }
}

/// What `--quiet` prints: the Errors table without the machine's facts (no cpufreq or thermal
/// driver, as on every VM), which are not errors of this run.
fn quiet_errors(errors: &[ReadError]) -> String {
    let of_this_run: Vec<ReadErrorReport> = errors
        .iter()
        .filter(|e| !e.is_machine_fact())
        .map(ReadErrorReport::from)
        .collect();
    report::telemetry::render_errors(&of_this_run)
}
