//! Root never writes through another user's link, for every output any goset program takes.
//!
//! The outputs are read from the programs' own clap commands (goset-run, goset, goset-bench,
//! goset-dist, and their subcommands): every option whose value is a path, less the few that
//! are read and never written ([`INPUTS`]), so a new output flag is tested here as soon as it
//! exists. Each is given, as root, a path in a sticky world-writable directory of another
//! user's (where the kernel's `fs.protected_symlinks` lets root follow that user's links, so
//! only goset's own rule stands in the way) holding, in turn: a link to root's 0600 file (to
//! root's directory for a directory option), a path through a link to root's directory, a FIFO
//! with a reader, and a FIFO without one. Root's directory must stay as it was, the FIFO must
//! carry nothing, and every program must end within the watchdog's limit.

use shim_tests::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Path options only read, never written, with why: `(program, --long)`.
const INPUTS: [(&str, &str, &str); 3] = [
    ("goset-run", "--fsroot", "a sysfs dump to read"),
    ("goset-bench", "--goset-run", "the goset-run program to run"),
    ("goset-dist", "--from", "the built programs to install"),
];

/// An output option: its program, the subcommands before it, its long name, and whether its
/// value is a directory.
#[derive(Debug, Clone)]
struct Output {
    program: &'static str,
    subcommands: Vec<String>,
    long: String,
    is_dir: bool,
}

/// Whether `arg` takes a path, by its value hint or its value name.
fn takes_path(arg: &clap::Arg) -> bool {
    use clap::ValueHint::*;
    let names = arg.get_value_names().unwrap_or_default();
    arg.get_action().takes_values()
        && (matches!(
            arg.get_value_hint(),
            AnyPath | FilePath | DirPath | ExecutablePath
        ) || names.iter().any(|n| {
            let n = n.as_str();
            n.contains("FILE") || n.contains("DIR") || n.contains("PATH")
        }))
}

/// Every path option of `cmd` and its subcommands.
fn path_options(
    program: &'static str,
    cmd: &clap::Command,
    subs: &[String],
    out: &mut Vec<Output>,
) {
    for arg in cmd.get_arguments().filter(|a| takes_path(a)) {
        let Some(long) = arg.get_long() else { continue };
        let names = arg.get_value_names().unwrap_or_default();
        out.push(Output {
            program,
            subcommands: subs.to_vec(),
            long: format!("--{long}"),
            is_dir: arg.get_value_hint() == clap::ValueHint::DirPath
                || names.iter().any(|n| n.as_str().contains("DIR")),
        });
    }
    for sub in cmd.get_subcommands() {
        let mut deeper = subs.to_vec();
        deeper.push(sub.get_name().to_string());
        path_options(program, sub, &deeper, out);
    }
}

/// Every output option of every goset program, from their clap commands.
fn outputs() -> Vec<Output> {
    use clap::CommandFactory;
    let programs: [(&'static str, clap::Command); 4] = [
        ("goset-run", goset::cli::RunCli::command()),
        ("goset", goset::cli::GosetCli::command()),
        ("goset-bench", goset_bench::cli::BenchCli::command()),
        ("goset-dist", goset_dist::cli::Cli::command()),
    ];
    let mut all = Vec::new();
    for (program, cmd) in &programs {
        path_options(program, cmd, &[], &mut all);
    }
    for (program, long, why) in INPUTS {
        let known = all.iter().any(|o| o.long == long && o.program == program);
        assert!(
            known,
            "{program} {long} ({why}) is not an option any more: update INPUTS"
        );
    }
    // goset takes goset-run's flags, --fsroot too.
    let input = |o: &Output| {
        let program = if o.program == "goset" {
            "goset-run"
        } else {
            o.program
        };
        INPUTS.iter().any(|(p, l, _)| *p == program && *l == o.long)
    };
    all.retain(|o| !input(o));
    all
}

/// The command lines that make `o`'s program write `path`: the output flag, and what a run
/// needs around it. goset writes its own report, or runs a task as goset-run does.
fn commands(o: &Output, path: &Path) -> Vec<Command> {
    let bin = match o.program {
        "goset-run" => goset_run_bin(),
        "goset" => goset_bin(),
        "goset-bench" => goset_bench_bin(),
        _ => goset_run_bin().with_file_name(o.program),
    };
    let task: &[&str] = &["-n", "1", "--sample", "0", "--", "true"];
    let tails: Vec<&[&str]> = match o.program {
        "goset-run" => vec![task],
        "goset" => vec![&[], task],
        "goset-bench" => vec![&[
            "--runs", "1", "--warmup", "0", "--modes", "baseline", "--", "true",
        ]],
        _ => vec![&[]],
    };
    tails
        .into_iter()
        .map(|tail| {
            let mut cmd = clean_command(&bin);
            cmd.args(&o.subcommands).arg(&o.long).arg(path).args(tail);
            cmd
        })
        .collect()
}

/// Root's directory the planted links point to, with its 0600 file.
struct Victim {
    dir: PathBuf,
    file: PathBuf,
}

impl Victim {
    const TEXT: &'static str = "root's own\n";

    fn new(under: &Path) -> Victim {
        let dir = under.join("root-only");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, Self::TEXT).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        Victim { dir, file }
    }

    /// Fails unless the directory holds its one file, unchanged, as it was made.
    fn check(&self, what: &str) {
        let names: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["secret"],
            "{what}: something was written into root's directory"
        );
        let meta = std::fs::symlink_metadata(&self.file).unwrap();
        assert_eq!(
            meta.mode() & 0o7777,
            0o600,
            "{what}: root's file changed mode"
        );
        let text = std::fs::read_to_string(&self.file).unwrap();
        assert!(
            text == Self::TEXT,
            "{what}: root's file written ({} bytes)",
            text.len()
        );
    }
}

/// A FIFO another user made at `path`.
fn plant_fifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    give_away(path);
}

/// Runs every command of `o` at `path`; each must end in time (run's watchdog), and `victim`
/// must stay as it was.
fn run_all(o: &Output, path: &Path, victim: &Victim, case: &str) {
    for cmd in commands(o, path) {
        let what = format!("{case}: {cmd:?}");
        let out = run(cmd);
        victim.check(&format!("{what}\n{}", out.stderr));
    }
}

#[test]
fn as_root_no_output_of_any_program_goes_through_a_planted_link_or_fifo() {
    if !is_root() {
        skip_note("as_root_no_output_...: the link rule is root's (run as root to test it)");
        return;
    }
    let outputs = outputs();
    for long in [
        "--json",
        "--log",
        "--csv",
        "--plot",
        "--prefix",
        "--destdir",
        "--out",
    ] {
        assert!(
            outputs.iter().any(|o| o.long == long),
            "{long} not found among {outputs:?}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let victim = Victim::new(tmp.path());
    // Another user's sticky world-writable directory: the kernel follows that user's links in
    // it, so goset's rule alone must refuse them.
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    give_away(&shared);
    let dir_link = shared.join("dir");
    std::os::unix::fs::symlink(&victim.dir, &dir_link).unwrap();
    give_away(&dir_link);
    for o in &outputs {
        let name = format!("{}{}", o.program, o.long);
        let link = shared.join(&name);
        let target = if o.is_dir { &victim.dir } else { &victim.file };
        std::os::unix::fs::symlink(target, &link).unwrap();
        give_away(&link);
        run_all(o, &link, &victim, "a link at the output");
        std::fs::remove_file(&link).unwrap();
        run_all(
            o,
            &dir_link.join(&name),
            &victim,
            "a directory link in the path",
        );
        plant_fifo(&link);
        run_all(o, &link, &victim, "a FIFO without a reader");
        // A reader that never reads: whatever is written stays in the FIFO to be seen.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&link)
            .unwrap();
        run_all(o, &link, &victim, "a FIFO with a reader");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_fifo());
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut &reader, &mut got);
        assert!(
            got.is_empty(),
            "{name}: {} bytes written into another user's FIFO",
            got.len()
        );
        std::fs::remove_file(&link).unwrap();
    }
}
