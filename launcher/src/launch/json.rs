//! Where the JSON report (`--json FILE`) goes: its layout is the run's one report model,
//! [`crate::report::model::Report`] (described in docs/report.md).
//!
//! It owns opening the destination before anything runs and writing the report after. It does
//! not gather the report's parts (the launch fills them in), and prints nothing but a failure
//! to write.

use crate::error::{Error, Result};
use crate::output;
use crate::report::model::Report;
use std::path::Path;

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
    pub(super) fn write(self, program: &str, report: &Report) -> bool {
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
