//! A built target program and the two ways a test runs it: by hand under the shim with
//! `GOSET_CPUS`, or under `goset-run -n N --json FILE`. Either way the run comes back with the
//! plan its reports are checked against.

use super::{by_hand, cpulist, reports, run, run_under_goset, Build, Outcome, Report, Selection};
use std::path::{Path, PathBuf};

/// How a test runs its program, and so where its plan comes from.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// `LD_PRELOAD=libgoset.so GOSET_CPUS=<cpus>`: the plan is that cpulist.
    ByHand(&'a str),
    /// `goset-run -n <n> --sample 0 --json FILE <extra...>`: the plan is the selection's
    /// `task_cpus`.
    GosetRun(usize, &'a [&'a str]),
}

impl Mode<'static> {
    /// `goset-run -n <n>` without further options.
    pub const fn goset_run(n: usize) -> Mode<'static> {
        Mode::GosetRun(n, &[])
    }
}

impl Mode<'_> {
    /// How many CPUs the plan holds.
    pub fn slots(&self) -> usize {
        match self {
            Mode::ByHand(cpus) => cpulist(cpus).len(),
            Mode::GosetRun(n, _) => *n,
        }
    }
}

/// A finished run and what it is checked against.
pub struct Run {
    /// How the program ended and what it printed.
    pub outcome: Outcome,
    /// The planned CPUs in slot order: `GOSET_CPUS` by hand, `task_cpus` under goset-run.
    pub plan: Vec<usize>,
    /// The `--json` selection, under goset-run only.
    pub selection: Option<Selection>,
}

impl Run {
    /// The program's reports (every stdout line must be one).
    pub fn reports(&self) -> Vec<Report> {
        reports(&self.outcome)
    }

    /// The housekeeper CPU the selection names; panics by hand or when there is none.
    pub fn housekeeper(&self) -> usize {
        self.selection
            .as_ref()
            .expect("a selection: the program ran under goset-run")
            .housekeeper
            .expect("the selection names a housekeeper")
    }
}

/// A target program from `programs/`, built into a temporary directory of its own that lives
/// as long as this value. The constructors return `None` (the test skips, see
/// [`super::missing`]) when the compiler they need is missing.
pub struct Program {
    _build: Build,
    path: PathBuf,
}

impl Program {
    fn build(
        source: &str,
        compile: impl FnOnce(&Build, &str, &str) -> Option<PathBuf>,
    ) -> Option<Self> {
        let build = Build::new();
        let out = Path::new(source)
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a source file name");
        let path = compile(&build, source, out)?;
        Some(Program {
            _build: build,
            path,
        })
    }

    /// A C program: `cc -pthread`.
    pub fn c(source: &str) -> Option<Self> {
        Self::build(source, Build::c)
    }

    /// A static C program: `cc -static -pthread`.
    pub fn c_static(source: &str) -> Option<Self> {
        Self::build(source, Build::c_static)
    }

    /// A C program with gcc OpenMP (libgomp).
    pub fn gomp(source: &str) -> Option<Self> {
        Self::build(source, Build::gomp)
    }

    /// A C program with LLVM OpenMP (libomp).
    pub fn llvm_omp(source: &str) -> Option<Self> {
        Self::build(source, Build::llvm_omp)
    }

    /// An Open MPI program: `mpicc` (skipped also without `mpirun`).
    pub fn mpi(source: &str) -> Option<Self> {
        Self::build(source, Build::mpi)
    }

    /// A Rust program: `rustc -O` (never skipped: the tests themselves need rustc).
    pub fn rust(source: &str) -> Self {
        Self::build(source, |build, source, out| Some(build.rust(source, out)))
            .expect("rustc builds")
    }

    /// The executable.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The executable's path as text, for passing it to another program.
    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("UTF-8 temp path")
    }

    /// Runs `program args` with `env` the way `mode` says.
    pub fn run(&self, mode: Mode, args: &[&str], env: &[(&str, &str)]) -> Run {
        match mode {
            Mode::ByHand(cpus) => {
                let mut cmd = by_hand(&self.path, cpus);
                cmd.args(args).envs(env.iter().copied());
                Run {
                    outcome: run(cmd),
                    plan: cpulist(cpus),
                    selection: None,
                }
            }
            Mode::GosetRun(n, extra) => {
                let (outcome, selection) = run_under_goset(n, extra, &self.path, args, env);
                Run {
                    outcome,
                    plan: selection.task_cpus.clone(),
                    selection: Some(selection),
                }
            }
        }
    }
}
