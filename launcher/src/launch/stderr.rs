//! The report on stderr: the tables of a dry run and of a finished run, or with `--quiet` the
//! errors of this run only.
//!
//! It owns which tables are shown, and in what order. It renders through [`crate::report`]
//! and writes nothing itself: the launch prints what it returns.

use super::execute::Executed;
use crate::booking::Booking;
use crate::cli::RunOptions;
use crate::fsroot::ReadError;
use crate::isolate::IsolationReport;
use crate::report::processes::ProcessReport;
use crate::report::{self, SelectionReport};
use crate::select::Selection;

/// What every report on stderr starts with (the selection, how threads are placed, other runs'
/// bookings), and what it is rendered from.
pub(super) struct Head<'a> {
    pub opts: &'a RunOptions,
    pub sel_report: &'a SelectionReport,
    pub selection: &'a Selection,
    /// Other runs' bookings when this one selected.
    pub bookings: &'a [Booking],
}

impl Head<'_> {
    fn render(&self) -> String {
        let bookings = report::render_bookings(
            self.bookings,
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
            report::render_placement(self.opts.placement, self.selection)
        )
    }

    /// What a dry run prints: the head and the files that could not be read.
    pub(super) fn dry_run(&self, errors: &[ReadError]) -> String {
        if self.opts.quiet {
            return quiet_errors(errors);
        }
        self.render() + &self.sharing(&[]) + &report::telemetry::render_errors(errors)
    }

    /// The CPUs shared with other runs' housekeepers or tasks: with the runs seen at selection,
    /// and with `later` ones (booked since: the registry read as the run ends).
    fn sharing(&self, later: &[Booking]) -> String {
        let others: Vec<Booking> = self.bookings.iter().chain(later).cloned().collect();
        let sel = self.selection;
        let shared = report::sharing::find(&sel.task_cpus, sel.housekeeper_cpu, &others);
        report::sharing::render(&shared)
    }

    /// What a finished run prints: the head, then what the run did (per-CPU telemetry, the
    /// processes, the threads, the moves, the run's totals), what isolation changed, and the
    /// files that could not be read.
    pub(super) fn finished(
        &self,
        run: &Executed,
        processes: &[ProcessReport],
        iso_report: Option<&IsolationReport>,
        errors: &[ReadError],
        later: &[Booking],
    ) -> String {
        use report::telemetry as tele;
        if self.opts.quiet {
            return quiet_errors(errors);
        }
        let threads_table = if run.threads.is_empty() {
            String::new()
        } else {
            tele::render_threads(&run.threads, run.telemetry.totals.brief)
        };
        let iso_table = iso_report
            .map(|r| report::isolation::render_isolation(r, self.selection))
            .unwrap_or_default();
        let irq_drift = iso_report.and_then(|r| r.steer.as_ref()).map(|s| s.drift);
        format!(
            "{}{}{}{}{}{}{}{iso_table}{}",
            self.render(),
            self.sharing(later),
            tele::render_telemetry(&run.telemetry)
                + &(run.record_use.as_ref())
                    .map_or_else(String::new, report::record::render_known_and_seen),
            report::processes::render(processes),
            threads_table,
            tele::render_moves(&run.telemetry),
            tele::render_run(&run.summary, &run.telemetry, irq_drift, self.opts.placement),
            tele::render_errors(errors),
        )
    }
}

/// What `--quiet` prints: the Errors table without the machine's facts (no cpufreq or thermal
/// driver, as on every VM), which are not errors of this run.
fn quiet_errors(errors: &[ReadError]) -> String {
    let of_this_run: Vec<ReadError> = errors
        .iter()
        .filter(|e| !e.is_machine_fact())
        .cloned()
        .collect();
    report::telemetry::render_errors(&of_this_run)
}
