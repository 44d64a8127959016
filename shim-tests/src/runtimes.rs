//! Builds the common compilers do not cover, for the tests of runtimes that size their pools
//! from the mask and of programs the shim cannot reach: a Go program built with or without cgo
//! (`None`, the test skips, see [`super::missing`], without golang-go), and the workspace's own
//! `src/bin` programs.

use super::{missing, programs_dir, Build};
use std::path::PathBuf;
use std::process::Command;

/// A program built by a runtime's own tool, in a temporary directory that lives as long as
/// this value.
pub struct Built {
    _build: Build,
    /// The executable.
    pub path: PathBuf,
}

fn run_tool(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// `go build` of `source`, with cgo on (dynamically linked, so the shim reaches it) or off
/// (static); caches in the temporary directory (HOME may be unwritable); `None` (skipped)
/// without golang-go.
pub fn go(source: &str, cgo: bool) -> Option<Built> {
    let works = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        missing("go", "apt-get install -y golang-go");
        return None;
    }
    let build = Build::new();
    let dir = build.dir().to_path_buf();
    let src = dir.join(source);
    std::fs::copy(programs_dir().join(source), &src).expect("copy the Go source");
    let path = dir.join("go_program");
    let mut cmd = Command::new("go");
    cmd.arg("build")
        .arg("-o")
        .arg(&path)
        .arg(&src)
        .current_dir(&dir)
        .env("CGO_ENABLED", if cgo { "1" } else { "0" })
        .env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOTOOLCHAIN", "local")
        .env("GO111MODULE", "off")
        .env_remove("GOFLAGS");
    // A busy process beside another test's task: see Build's compile.
    let alone = super::launcher_lock();
    run_tool(&mut cmd).unwrap_or_else(|e| panic!("{e}"));
    drop(alone);
    Some(Built {
        _build: build,
        path,
    })
}

/// The workspace's own binary `name` (from `src/bin`), built by `cargo build --workspace`.
pub fn workspace_bin(name: &str) -> PathBuf {
    super::built(name)
}
