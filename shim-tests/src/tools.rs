//! Compilers for the target programs in `programs/`, each building into a per-test temporary
//! directory, and the skip rule for missing packages: print how to install and skip, except
//! under `CI=true`, where a missing package fails the test.

use super::programs_dir;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tempfile::TempDir;

/// A needed tool or package is missing: under `CI=true` the test fails, otherwise it prints
/// how to install it and the caller skips (returns early).
pub fn missing(what: &str, install: &str) {
    let message = format!("{what} is missing: install it with `{install}`");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message} (CI=true: missing packages fail the tests)");
    }
    skip_note(&message);
}

/// Prints why a test is skipped straight to stderr: the test harness captures `eprintln!`
/// of passing tests, so a skip would otherwise go unseen.
pub fn skip_note(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {message}");
}

/// Builds the Slurm plugin (`slurm/goset_spank.c`, as `make` does) into `out`; false, the
/// test skipped (not under CI), without libslurm-dev's spank.h.
pub fn build_spank_plugin(out: &Path) -> bool {
    if !Path::new("/usr/include/slurm/spank.h").exists() {
        missing("spank.h", "apt-get install -y libslurm-dev");
        return false;
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../slurm/goset_spank.c");
    let built = std::process::Command::new("cc")
        .args(["-O2", "-Wall", "-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(source)
        .output()
        .unwrap_or_else(|e| panic!("cc: {e}"));
    assert!(
        built.status.success(),
        "the Slurm plugin does not build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    true
}

/// Whether `program --version` runs.
pub fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The first of `names` that runs.
fn first_runnable(names: &[String]) -> Option<String> {
    names.iter().find(|n| runs(n)).cloned()
}

/// Directories that hold LLVM's `libomp.so` (`/usr/lib/llvm-*/lib`).
fn libomp_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path().join("lib"))
                .filter(|d| {
                    d.parent()
                        .and_then(Path::file_name)
                        .is_some_and(|n| n.to_string_lossy().starts_with("llvm-"))
                })
                .filter(|d| d.join("libomp.so").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs
}

/// Builds target programs into a temporary directory that lives as long as this value.
pub struct Build {
    dir: TempDir,
}

impl Default for Build {
    fn default() -> Self {
        Self::new()
    }
}

impl Build {
    /// A new, empty temporary directory (`goset-shim-tests-*`).
    pub fn new() -> Build {
        Build {
            dir: tempfile::Builder::new()
                .prefix("goset-shim-tests-")
                .tempdir()
                .expect("temp dir"),
        }
    }

    /// The temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn compile(
        &self,
        compiler: &str,
        args: &[&str],
        source: &str,
        out: &str,
    ) -> Result<PathBuf, String> {
        let src = programs_dir().join(source);
        let exe = self.dir().join(out);
        // A compiler is a busy process: beside another test's task on 2 CPUs it takes a CPU
        // from it (seen: cc1 on the CPU of a musl program's busy thread as it was placed).
        let _alone = super::launcher_lock();
        let output = Command::new(compiler)
            .args(args)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .output()
            .map_err(|e| format!("cannot run {compiler}: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "{compiler} {args:?} {} failed:\n{}{}",
                src.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(exe)
    }

    /// `cc -pthread` (or `$CC`); `None` (skipped) without a C compiler.
    pub fn c(&self, source: &str, out: &str) -> Option<PathBuf> {
        self.c_with(&[], source, out)
    }

    /// `cc -static -pthread`: a program no preload reaches; `None` (skipped) without a C
    /// compiler.
    pub fn c_static(&self, source: &str, out: &str) -> Option<PathBuf> {
        self.c_with(&["-static"], source, out)
    }

    /// `cc -pthread <flags>` (`-static-pie`, say); `None` (skipped) without a C compiler.
    pub fn c_with(&self, flags: &[&str], source: &str, out: &str) -> Option<PathBuf> {
        let cc = first_runnable(&[
            std::env::var("CC").unwrap_or_else(|_| "cc".into()),
            "gcc".into(),
        ]);
        let Some(cc) = cc else {
            missing("a C compiler", "apt-get install -y gcc");
            return None;
        };
        let mut args = vec!["-O1", "-Wall", "-pthread"];
        args.extend_from_slice(flags);
        Some(
            self.compile(&cc, &args, source, out)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// `musl-gcc -pthread`: a dynamic musl program, which libgoset.so cannot load into;
    /// `None` (skipped) without musl-tools.
    pub fn musl(&self, source: &str, out: &str) -> Option<PathBuf> {
        if !runs("musl-gcc") {
            missing("musl-gcc", "apt-get install -y musl-tools");
            return None;
        }
        Some(
            self.compile("musl-gcc", &["-O1", "-Wall", "-pthread"], source, out)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// `gcc -fsanitize=address -pthread`: ASan's runtime (libasan) linked dynamically, which
    /// insists on coming first in the library list; `None` (skipped) without gcc or libasan.
    pub fn asan(&self, source: &str, out: &str) -> Option<PathBuf> {
        if !runs("gcc") {
            missing("gcc (for AddressSanitizer)", "apt-get install -y gcc");
            return None;
        }
        let args = ["-O1", "-g", "-Wall", "-pthread", "-fsanitize=address"];
        match self.compile("gcc", &args, source, out) {
            Ok(exe) => Some(exe),
            Err(e) if e.contains("lasan") => {
                missing(
                    "libasan (gcc's AddressSanitizer runtime)",
                    "apt-get install -y libasan8",
                );
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// `gcc -fopenmp` (libgomp); `None` (skipped) without gcc.
    pub fn gomp(&self, source: &str, out: &str) -> Option<PathBuf> {
        if !runs("gcc") {
            missing("gcc (for libgomp)", "apt-get install -y gcc");
            return None;
        }
        Some(
            self.compile("gcc", &["-O1", "-Wall", "-fopenmp"], source, out)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// `clang -fopenmp` (LLVM libomp), with `clang` or `clang-14` .. `clang-19`; `None`
    /// (skipped) without clang or libomp-dev.
    pub fn llvm_omp(&self, source: &str, out: &str) -> Option<PathBuf> {
        let mut names = vec!["clang".to_string()];
        names.extend((14..=19).rev().map(|v| format!("clang-{v}")));
        let Some(clang) = first_runnable(&names) else {
            missing(
                "clang (for LLVM OpenMP)",
                "apt-get install -y clang libomp-dev",
            );
            return None;
        };
        let dirs = libomp_dirs();
        let mut args = vec!["-O1".to_string(), "-Wall".into(), "-fopenmp=libomp".into()];
        if let Some(dir) = dirs.first() {
            args.push(format!("-L{}", dir.display()));
            args.push(format!("-Wl,-rpath,{}", dir.display()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match self.compile(&clang, &args, source, out) {
            Ok(exe) => Some(exe),
            Err(_) if dirs.is_empty() => {
                missing("LLVM OpenMP (libomp)", "apt-get install -y libomp-dev");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// `mpicc` (Open MPI); `None` (skipped) without it or without `mpirun`.
    pub fn mpi(&self, source: &str, out: &str) -> Option<PathBuf> {
        if !runs("mpicc") || !runs("mpirun") {
            missing(
                "Open MPI (mpicc, mpirun)",
                "apt-get install -y openmpi-bin libopenmpi-dev",
            );
            return None;
        }
        Some(
            self.compile("mpicc", &["-O1", "-Wall"], source, out)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// `rustc -O`: `$RUSTC`, else the rustc beside the cargo that built the tests, else `rustc`.
    pub fn rust(&self, source: &str, out: &str) -> PathBuf {
        let beside_cargo = Path::new(env!("CARGO")).with_file_name("rustc");
        let rustc = std::env::var("RUSTC").ok().or_else(|| {
            beside_cargo
                .is_file()
                .then(|| beside_cargo.display().to_string())
        });
        let rustc = rustc.unwrap_or_else(|| "rustc".into());
        self.compile(&rustc, &["-O", "--edition", "2021"], source, out)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// How `.ci/run` makes the Python environment of `tests/placement/real_runtimes.rs`.
const PYVENV_INSTALL: &str = "apt-get install -y python3-venv python3-pip && \
/usr/bin/python3 -m venv target/pyvenv && target/pyvenv/bin/python -m pip install \
--only-binary=:all: -r shim-tests/runtimes/requirements.txt";

/// The Python of the virtual environment `target/pyvenv` (in the target directory that holds
/// the built binaries) when it imports scikit-learn, numba, onnx and onnxruntime; `None`
/// (skipped, see [`missing`]) otherwise. Looked for once a test process, under
/// [`super::launcher_lock`]: the imports burn a CPU for a second or two, and beside
/// another test's task they took a CPU from it (seen: a doubled-up pair of the task while
/// the other CPU ran this import, and an observer test whose idle CPU was not idle).
pub fn pyvenv_python() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let _alone = super::launcher_lock();
    FOUND.get_or_init(find_pyvenv_python).clone()
}

fn find_pyvenv_python() -> Option<PathBuf> {
    let candidates = super::profile_dir_candidates();
    let python = (candidates.iter())
        .filter_map(|profile| profile.parent())
        .map(|target| target.join("pyvenv/bin/python"))
        .find(|p| p.is_file());
    let imports = python.as_ref().is_some_and(|python| {
        Command::new(python)
            .args(["-c", "import sklearn, numba, onnx, onnxruntime"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !imports {
        missing(
            "the Python venv target/pyvenv (scikit-learn, numba, onnxruntime)",
            PYVENV_INSTALL,
        );
        return None;
    }
    python
}

/// Whether `redis-server` and `redis-benchmark` run; when not, [`missing`] says how to
/// install them (then stop the packaged service: the tests start their own server).
pub fn have_redis() -> bool {
    if runs("redis-server") && runs("redis-benchmark") {
        return true;
    }
    missing(
        "redis (redis-server, redis-benchmark)",
        "apt-get install -y redis-server redis-tools && service redis-server stop; \
         update-rc.d redis-server disable",
    );
    false
}
