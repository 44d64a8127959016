//! The files a user names for the results (`--json`, `--csv`, `--plot`).
//!
//! Owns: opening them before any run, so that a path that cannot be written is a usage error
//! and not an experiment lost at its end, and, as root, by [`goset_plan::rootfile`]'s rule:
//! never through another user's link, never blocked on a FIFO. Must not: format the results.

use goset::error::Error;
use goset_plan::rootfile::os;
use std::fs::File;
use std::path::{Path, PathBuf};

/// One output, open and not yet emptied (a run that fails keeps the old file).
pub struct Output {
    file: File,
    path: PathBuf,
    option: &'static str,
}

impl Output {
    /// Opens `path` for `option`; a path that cannot be opened is a usage error.
    pub fn open(option: &'static str, path: Option<&Path>) -> Result<Option<Output>, Error> {
        let Some(path) = path else {
            return Ok(None);
        };
        match os::open_output(path) {
            Ok(file) => Ok(Some(Output {
                file,
                path: path.to_path_buf(),
                option,
            })),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Err(Error::Usage(format!(
                "{option} {}: cannot create: a FIFO without a reader or a socket; name a regular file",
                path.display()
            ))),
            Err(e) => Err(Error::Usage(format!(
                "{option} {}: cannot create: {e}",
                path.display()
            ))),
        }
    }

    /// Writes `text` into it, whole (a regular file is emptied first).
    pub fn write(self, text: &str) -> Result<(), Error> {
        os::write_into(self.file, text.as_bytes()).map_err(|e| {
            Error::System(format!(
                "{} {}: cannot write: {e}",
                self.option,
                self.path.display()
            ))
        })
    }
}
