//! The launcher's error type: every failure a user can see, with the exit code it maps to.

use std::fmt;

/// A failure of `goset-run` or `goset`, printed as one line on stderr.
#[derive(Debug)]
pub enum Error {
    /// Bad flags or values: exit 2, nothing changed.
    Usage(String),
    /// The command does not exist: exit 127.
    CommandNotFound(String),
    /// The command exists but cannot be executed: exit 126.
    NotExecutable(String),
    /// The machine did not let us do something we needed: exit 1.
    System(String),
    /// A signal asked goset-run to end before the task was started: exit 128+signal.
    Interrupted(i32),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::CommandNotFound(_) => 127,
            Error::NotExecutable(_) => 126,
            Error::System(_) => 1,
            Error::Interrupted(sig) => 128 + sig,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::System(m) => f.write_str(m),
            Error::CommandNotFound(cmd) => write!(f, "{cmd}: command not found"),
            Error::NotExecutable(m) => f.write_str(m),
            Error::Interrupted(sig) => write!(
                f,
                "{} before the task started: nothing was run",
                crate::signals::name(*sig)
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::select::SelectError> for Error {
    fn from(e: crate::select::SelectError) -> Self {
        Error::Usage(e.to_string())
    }
}

/// Shorthand for launcher results.
pub type Result<T> = std::result::Result<T, Error>;
