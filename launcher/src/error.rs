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

    /// This error as it is printed: a failure for want of descriptors (EMFILE, wherever it
    /// struck, a path given by the user included) is the machine's, exit 1, and also names the
    /// limit, the cause the user can change.
    pub fn naming_limits(self) -> Error {
        let text = self.to_string();
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE).to_string();
        match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
            Ok((soft, _)) if text.contains(&emfile) => Error::System(format!(
                "{text}; the descriptor limit (ulimit -n) {soft} is too low for this run"
            )),
            _ => self,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lack_of_descriptors_names_the_limit() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let e = Error::Usage(format!("--json x: cannot create: {emfile}")).naming_limits();
        assert_eq!(e.exit_code(), 1);
        let line = e.to_string();
        assert!(line.starts_with("--json x: cannot create: "), "{line}");
        assert!(
            line.contains("; the descriptor limit (ulimit -n) "),
            "{line}"
        );
        assert!(line.ends_with(" is too low for this run"), "{line}");
        let other = Error::Usage("-n 0: must be at least 1".into()).naming_limits();
        assert_eq!(
            (other.exit_code(), other.to_string().as_str()),
            (2, "-n 0: must be at least 1")
        );
    }
}
