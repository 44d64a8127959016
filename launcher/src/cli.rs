//! Command-line parsing: clap's view of the flags, the Go goset's spellings, and the typed,
//! validated options the rest of the launcher works with. Nothing here touches the machine.

use crate::error::{Error, Result};
use crate::instances::MAX_INSTANCES;
use crate::select::{NumaChoice, Options as SelectOptions, SmtPolicy};
use crate::topology::CpuExpr;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Options with a value that the Go goset spelled with one dash (`-include 1,2`); the flags in
/// [`BOOLEAN`] are accepted with one dash too.
const SINGLE_DASH_VALUED: &[&str] = &[
    "include", "exclude", "numa", "interval", "sample", "smt", "json", "log", "skip", "fsroot",
    "wait",
];

/// Longest `--wait`: a typo must not block a job slot forever.
pub const MAX_WAIT_S: u64 = 86_400;

/// Longest noise sampling window: a typo such as `--sample 99999999` must not sleep for a day.
pub const MAX_SAMPLE_MS: u64 = 60_000;

/// Flags without a value, which the Go goset also wrote `-flag=true` / `-flag=false`.
const BOOLEAN: &[&str] = &[
    "dry-run",
    "quiet",
    "main-on-housekeeper",
    "die-with-launcher",
    "help",
    "version",
    "cgroup",
    "steer",
    "fence",
    "keep-root",
    "share",
    "no-adapt",
    "adapt",
];

/// Flags of a pinned run, shared by `goset-run` and `goset ... -- CMD`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of task CPUs (one per thread the task runs).
    #[arg(short = 'n', long = "count", value_name = "N", default_value_t = 1)]
    pub count: usize,
    /// Noise sampling window in milliseconds before selection (at most 60000); 0 ranks by
    /// topology alone.
    #[arg(long, value_name = "MS", default_value_t = 250)]
    pub sample: u64,
    /// SMT policy: spread = one thread per physical core first; pack = fill a core's siblings first.
    #[arg(long, value_enum, default_value_t = SmtArg::Spread)]
    pub smt: SmtArg,
    /// CPUs to take first, in order: a cpulist (1,3-5 or 0-10:2) or likwid-pin expressions
    /// (S0:0-3, M1:0-1, C0:0-3, N:0-3, E:S0:4:1:2, joined with @).
    #[arg(long, value_name = "LIST")]
    pub include: Option<String>,
    /// CPUs never to use, for the task or the housekeeper (cpulist or likwid-pin expressions).
    #[arg(long, value_name = "LIST")]
    pub exclude: Option<String>,
    /// Keep task CPUs and memory on one NUMA node: a node number, auto (the node with the most
    /// candidates; with --near, the device's node) or off; the Go goset's -1 (auto) and -2
    /// (off) are accepted. Default: off; with --near, the device's node (off if it has none).
    #[arg(long, value_name = "N|auto|off", allow_hyphen_values = true)]
    pub numa: Option<String>,
    /// Keep the task CPUs near a device: a network interface (eth0), a block device
    /// (nvme0n1), a PCI address (0000:3b:00.0 or 3b:00.0) or gpuN (the N-th GPU in PCI bus
    /// order, as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them); its local CPUs and, by default,
    /// its NUMA node for memory.
    #[arg(long, value_name = "DEVICE")]
    pub near: Option<String>,
    /// Housekeeper poll interval in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    pub interval: u64,
    /// Skip mask (hex, as likwid-pin's -s): bit i set means the i-th thread created after the
    /// main thread takes no slot and runs on the housekeeper CPU.
    #[arg(long, value_name = "MASK")]
    pub skip: Option<String>,
    /// Run the first process's main thread on the housekeeper CPU, outside the slots (for
    /// programs whose main thread only coordinates).
    #[arg(long)]
    pub main_on_housekeeper: bool,
    /// Never move a thread after its placement: busy threads doubled up on one CPU stay there,
    /// and a CPU that turns noisy keeps its threads.
    #[arg(long)]
    pub no_adapt: bool,
    /// Book K more quiet CPUs idle: when a task CPU turns noisy mid-run, its threads move to
    /// the quietest spare (shown as + in sel).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub spare: usize,
    /// Without --spare: move the threads of a task CPU that turns noisy to the quietest
    /// candidate CPU the run does not use.
    #[arg(long)]
    pub adapt: bool,
    /// End the task (SIGKILL) when goset-run dies first: killed with SIGKILL or crashed
    /// (otherwise the task goes on alone).
    #[arg(long)]
    pub die_with_launcher: bool,
    /// Threads per process, for a task of several processes (MPI ranks, a script's jobs):
    /// sets OMP_NUM_THREADS and GOMAXPROCS to T for every process, and gives each process a
    /// block of T slots on one node (where T fits), its threads kept together on it.
    #[arg(long, value_name = "T")]
    pub per_process: Option<usize>,
    /// Start K copies of the command, each with a block of N/K slots (or --per-process T),
    /// its own OMP_NUM_THREADS and GOSET_INSTANCE=0..K-1; output lines are prefixed [i].
    #[arg(long, value_name = "K")]
    pub instances: Option<usize>,
    /// Print the selection and exit without running anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Write the report as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep the placement log (one JSON line per placement decision) in FILE; an existing
    /// FILE is truncated, so the report reads this run's records only.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Print nothing but errors.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Read /proc and /sys under DIR instead of / (for --dry-run on a sysfs dump).
    #[arg(long, value_name = "DIR", env = "GOSET_FSROOT")]
    pub fsroot: Option<PathBuf>,
    /// Run the task in a cpuset cgroup of the task CPUs (and fenced siblings), which holds a
    /// thread that resets its own affinity; removed at the end (needs root).
    #[arg(long)]
    pub cgroup: bool,
    /// Move every steerable IRQ off the task (and fenced) CPUs for the run, holding
    /// irqbalance; restored at the end (needs root).
    #[arg(long)]
    pub steer: bool,
    /// Book the SMT siblings of the task CPUs idle inside the cgroup (needs --cgroup).
    #[arg(long)]
    pub fence: bool,
    /// Under sudo, run the task as root instead of the invoking user (SUDO_UID/SUDO_GID).
    #[arg(long)]
    pub keep_root: bool,
    /// When other runs hold the CPUs needed, wait up to SECS seconds for them to free up
    /// (otherwise: exit 1 naming those runs).
    #[arg(long, value_name = "SECS")]
    pub wait: Option<u64>,
    /// Take CPUs other runs booked when needed (the report names them).
    #[arg(long)]
    pub share: bool,
    /// How the task's threads are placed: thread = each thread on its own planned CPU
    /// (libgoset.so and the housekeeper); mask = one shared mask of the selected CPUs for
    /// every thread, as `taskset -c` would (no libgoset.so, no thread placed or moved).
    #[arg(long, value_enum, value_name = "thread|mask", default_value_t = Placement::Thread)]
    pub placement: Placement,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// SMT policy as spelled on the command line.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtArg {
    /// One task thread per physical core before any sibling is used.
    Spread,
    /// Fill every sibling of the best core first.
    Pack,
}

/// How the task's threads are placed (`--placement`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Each thread on its own planned CPU: libgoset.so in the task, the housekeeper placing
    /// what the shim cannot reach and moving threads by demand and noise.
    #[default]
    Thread,
    /// One shared mask of the selected CPUs for the whole task (the Go goset's model): no
    /// libgoset.so, and the housekeeper only watches.
    Mask,
}

impl Placement {
    /// Its name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Thread => "thread",
            Placement::Mask => "mask",
        }
    }
}

/// A shell goset writes completions for (`goset completions SHELL`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// GNU bash, with or without the bash-completion package.
    Bash,
    /// zsh's completion system (compinit).
    Zsh,
    /// fish (3.0 or later).
    Fish,
}

/// `goset-run`: pin a task to the quietest CPUs.
#[derive(Parser, Debug)]
#[command(
    name = "goset-run",
    version,
    about = "Run a task with every thread on its own quiet CPU"
)]
pub struct RunCli {
    #[command(flatten)]
    pub run: RunArgs,
}

/// `goset`: report the machine, or run a task like goset-run.
#[derive(Parser, Debug)]
#[command(
    name = "goset",
    version,
    about = "Noise-aware CPU pinning: report the machine, or run a task (goset [OPTIONS] -- CMD)",
    args_conflicts_with_subcommands = true
)]
pub struct GosetCli {
    #[command(subcommand)]
    pub command: Option<GosetCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands of `goset`.
#[derive(Subcommand, Debug)]
pub enum GosetCommand {
    /// Print the topology (CPUs, cores, packages, NUMA nodes, isolation).
    Topology {
        /// Print JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Read /proc and /sys under DIR instead of /.
        #[arg(long, value_name = "DIR", env = "GOSET_FSROOT")]
        fsroot: Option<PathBuf>,
    },
    /// Undo what runs whose launcher died (kill -9, OOM) left changed: cgroups, IRQ affinity,
    /// irqbalance. Idempotent.
    Restore,
    /// Remove a goset cgroup left behind, moving its processes to the parent group first (the
    /// Go goset's -rm-cgroup).
    RmCgroup {
        /// The group's name, as bare goset lists it (goset-<task>).
        name: String,
    },
    /// Print the shell completions of goset and goset-run, for `source <(goset completions
    /// bash)` (make install installs them, goset-bench's too).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// Rewrites the Go goset's spellings into clap's: `-include X` → `--include X`, and for flags
/// without a value `-quiet=true` → `--quiet`, `-quiet=false` → dropped. Arguments after `--`
/// are untouched; a value option keeps its value as written (`--json=false` names a file).
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    for arg in args.iter_mut().take_while(|a| *a != "--") {
        if arg == "-rm-cgroup" || arg == "--rm-cgroup" {
            *arg = "rm-cgroup".into();
        }
    }
    normalize_go_spellings(args, SINGLE_DASH_VALUED, BOOLEAN)
}

/// The rewriting of [`normalize_args`] for any program: options named in `valued` (they take a
/// value) or `boolean` (flags) are accepted with one dash too, and a flag as `-name=true` or
/// `-name=false`. The first argument (the program) and everything after `--` are untouched.
pub fn normalize_go_spellings(
    args: impl IntoIterator<Item = OsString>,
    valued: &[&str],
    boolean: &[&str],
) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut passthrough = false;
    for (i, arg) in args.into_iter().enumerate() {
        if i == 0 || passthrough {
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        let long = text.strip_prefix("--").or_else(|| {
            let rest = text.strip_prefix('-')?;
            let name = rest.split('=').next()?;
            (valued.contains(&name) || boolean.contains(&name)).then_some(rest)
        });
        let Some(long) = long else {
            out.push(arg);
            continue;
        };
        match long.split_once('=') {
            Some((name, "true")) if boolean.contains(&name) => out.push(format!("--{name}").into()),
            Some((name, "false")) if boolean.contains(&name) => {}
            Some((name, value)) => out.push(format!("--{name}={value}").into()),
            None => out.push(format!("--{long}").into()),
        }
    }
    out
}

/// Treats an empty `GOSET_FSROOT` as unset (clap would take it for a missing value). Called
/// first thing, while the launcher has one thread.
pub fn ignore_empty_env() {
    if std::env::var_os("GOSET_FSROOT").is_some_and(|v| v.is_empty()) {
        std::env::remove_var("GOSET_FSROOT");
    }
}

/// Prints clap's outcome: help and version on stdout (exit 0); errors as one line on stderr
/// (exit 2).
pub fn exit_on_clap_error(err: clap::Error, program: &str) -> ! {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => err.exit(),
        _ => {
            // clap's first paragraph as one line: a missing argument's name, or the values an
            // option accepts, come on its second line.
            let rendered = err.render().to_string();
            let first: Vec<&str> = (rendered.lines().map(str::trim))
                .take_while(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.strip_prefix("error: ").unwrap_or(&first);
            crate::output::to_stderr(&format!("{program}: {first} (see --help)\n"));
            std::process::exit(2)
        }
    }
}

/// The root of `/proc` and `/sys`: `/` unless `--fsroot` (or `GOSET_FSROOT`) names a directory.
pub fn fsroot(dir: Option<&std::path::Path>) -> Result<crate::fsroot::FsRoot> {
    match dir {
        None => Ok(crate::fsroot::FsRoot::default()),
        Some(d) if d.is_dir() => Ok(crate::fsroot::FsRoot::new(d)),
        Some(d) => Err(Error::Usage(format!(
            "--fsroot {}: not a directory (it must hold a dump's proc/ and sys/)",
            d.display()
        ))),
    }
}

/// Validated options of a pinned run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Selection policy; `include`, `exclude` and `near` are left empty here and filled in
    /// once the machine is read, from the fields of the same names below.
    pub select: SelectOptions,
    /// `--include`, parsed: resolved on the topology (likwid expressions name CPUs by place).
    pub include: CpuExpr,
    /// `--exclude`, parsed.
    pub exclude: CpuExpr,
    /// `--near`'s device, as named; looked up in sysfs under `fsroot`.
    pub near: Option<String>,
    /// Noise sampling window.
    pub sample: Duration,
    /// Housekeeper poll interval.
    pub interval: Duration,
    /// Skip mask for the shim.
    pub skip: u64,
    /// Threads (and the block of slots) of each process: `--per-process`, or `N/K` with
    /// `--instances K`.
    pub per_process: Option<usize>,
    /// Copies of the command to start (`--instances`); `None`: one, not numbered.
    pub instances: Option<usize>,
    /// See [`RunArgs::main_on_housekeeper`].
    pub main_on_housekeeper: bool,
    /// Busy threads the shim placed are spread by demand (not `--no-adapt`).
    pub adapt: bool,
    /// Where a task CPU that turns noisy hands its threads (`--spare`, `--adapt`).
    pub noise_moves: NoiseMoves,
    /// See [`RunArgs::die_with_launcher`].
    pub die_with_launcher: bool,
    /// Selection only.
    pub dry_run: bool,
    /// JSON report destination.
    pub json: Option<PathBuf>,
    /// Placement log destination.
    pub log: Option<PathBuf>,
    /// Errors only.
    pub quiet: bool,
    /// `--cgroup`, `--fence`, `--steer`.
    pub isolation: crate::isolate::Request,
    /// See [`RunArgs::keep_root`].
    pub keep_root: bool,
    /// See [`RunArgs::wait`].
    pub wait: Option<Duration>,
    /// See [`RunArgs::share`].
    pub share: bool,
    /// See [`RunArgs::placement`].
    pub placement: Placement,
    /// Root of /proc and /sys.
    pub fsroot: crate::fsroot::FsRoot,
    /// The task's argv.
    pub command: Vec<OsString>,
}

/// Where the housekeeper may move a task CPU's threads when the CPU turns noisy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoiseMoves {
    /// Never (the default without `--spare` or `--adapt`).
    Off,
    /// To the CPUs booked idle for it (`--spare K`).
    Spares,
    /// To any candidate CPU the run does not use (`--adapt`).
    Unused,
}

fn cpulist_arg(flag: &str, value: &Option<String>) -> Result<CpuExpr> {
    let Some(text) = value else {
        return Ok(CpuExpr::default());
    };
    CpuExpr::parse(text).map_err(|e| Error::Usage(format!("--{flag} '{text}': {e}")))
}

fn numa_arg(text: &str) -> Result<NumaChoice> {
    match text {
        "off" | "-2" => Ok(NumaChoice::Off),
        "auto" | "-1" => Ok(NumaChoice::Auto),
        n => n.parse().map(NumaChoice::Node).map_err(|_| {
            Error::Usage(format!(
                "--numa '{n}': expected a node number, auto (-1) or off (-2)"
            ))
        }),
    }
}

fn skip_arg(value: &Option<String>) -> Result<u64> {
    let Some(text) = value else { return Ok(0) };
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    u64::from_str_radix(hex, 16).map_err(|_| {
        Error::Usage(format!(
            "--skip '{text}': expected a hex mask such as 0x1 (at most 64 bits)"
        ))
    })
}

impl RunArgs {
    /// The threads of each process: `--per-process`, else with `--instances K` the `N/K` each
    /// copy gets; checked against `-n` and each other.
    fn per_process_arg(&self) -> Result<Option<usize>> {
        let n = self.count;
        if let Some(t) = self.per_process {
            if t == 0 || t > n {
                return Err(Error::Usage(format!(
                    "--per-process {t}: must be 1 to -n ({n}), the threads each process runs"
                )));
            }
        }
        let Some(k) = self.instances else {
            return Ok(self.per_process);
        };
        if k == 0 || k > n.min(MAX_INSTANCES) {
            return Err(Error::Usage(format!(
                "--instances {k}: must be 1 to -n ({n}), at most {MAX_INSTANCES}: each copy \
                 needs a CPU of its own"
            )));
        }
        match self.per_process {
            Some(t) if t * k > n => Err(Error::Usage(format!(
                "--instances {k} with --per-process {t}: {k} x {t} = {} CPUs, more than -n {n}",
                t * k
            ))),
            Some(t) => Ok(Some(t)),
            None if !n.is_multiple_of(k) => Err(Error::Usage(format!(
                "--instances {k}: -n {n} does not split into {k} equal blocks; give -n a \
                 multiple of {k}, or --per-process T with {k} x T <= {n}"
            ))),
            None => Ok(Some(n / k)),
        }
    }

    /// The first flag given that places or moves threads, which `--placement mask` (one
    /// shared mask, nothing placed) cannot honour.
    fn placing_flag(&self) -> Option<&'static str> {
        [
            (self.skip.is_some(), "--skip"),
            (self.main_on_housekeeper, "--main-on-housekeeper"),
            (self.spare > 0, "--spare"),
            (self.adapt, "--adapt"),
            (self.log.is_some(), "--log"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// Checks every value and builds the typed options.
    pub fn validate(&self) -> Result<RunOptions> {
        if let (Placement::Mask, Some(flag)) = (self.placement, self.placing_flag()) {
            return Err(Error::Usage(format!(
                "{flag} with --placement mask: one shared mask places and moves no thread (and \
                 logs no placement); drop {flag}, or use --placement thread"
            )));
        }
        if self.fence && !self.cgroup {
            return Err(Error::Usage(
                "--fence needs --cgroup: the siblings are booked idle inside the task's cpuset"
                    .into(),
            ));
        }
        if self.no_adapt && (self.adapt || self.spare > 0) {
            return Err(Error::Usage(format!(
                "--no-adapt with {}: spares are only for moves; drop one of them",
                if self.adapt { "--adapt" } else { "--spare" }
            )));
        }
        if self.wait.is_some_and(|w| w > MAX_WAIT_S) {
            return Err(Error::Usage(format!(
                "--wait {}: at most {MAX_WAIT_S} s (a day)",
                self.wait.unwrap_or_default()
            )));
        }
        if self.count == 0 {
            return Err(Error::Usage("-n 0: must be at least 1".into()));
        }
        let per_process = self.per_process_arg()?;
        if self.interval == 0 {
            return Err(Error::Usage("--interval 0: must be at least 1 ms".into()));
        }
        if self.sample > MAX_SAMPLE_MS {
            return Err(Error::Usage(format!(
                "--sample {}: at most {MAX_SAMPLE_MS} ms (60 s); noise is a rate, a longer window adds nothing",
                self.sample
            )));
        }
        if self.command.is_empty() && !self.dry_run {
            return Err(Error::Usage(
                "no command given: put it after -- (or use --dry-run)".into(),
            ));
        }
        let root = fsroot(self.fsroot.as_deref())?;
        if !root.is_live() && !self.dry_run {
            return Err(Error::Usage(format!(
                "--fsroot (or GOSET_FSROOT) {}: a dump of another machine works only with --dry-run",
                root.dir().display()
            )));
        }
        Ok(RunOptions {
            select: SelectOptions {
                count: self.count,
                smt: match self.smt {
                    SmtArg::Spread => SmtPolicy::Spread,
                    SmtArg::Pack => SmtPolicy::Pack,
                },
                numa: match (&self.numa, &self.near) {
                    (Some(numa), _) => numa_arg(numa)?,
                    (None, Some(_)) => NumaChoice::Near,
                    (None, None) => NumaChoice::Off,
                },
                fence: self.fence,
                spare: self.spare,
                ..SelectOptions::default()
            },
            include: cpulist_arg("include", &self.include)?,
            exclude: cpulist_arg("exclude", &self.exclude)?,
            near: self.near.clone(),
            sample: Duration::from_millis(self.sample),
            interval: Duration::from_millis(self.interval),
            skip: skip_arg(&self.skip)?,
            main_on_housekeeper: self.main_on_housekeeper,
            adapt: !self.no_adapt,
            noise_moves: match (self.spare, self.adapt) {
                (0, false) => NoiseMoves::Off,
                (0, true) => NoiseMoves::Unused,
                _ => NoiseMoves::Spares,
            },
            per_process,
            instances: self.instances,
            die_with_launcher: self.die_with_launcher,
            dry_run: self.dry_run,
            json: self.json.clone(),
            log: self.log.clone(),
            quiet: self.quiet,
            isolation: crate::isolate::Request {
                cgroup: self.cgroup,
                fence: self.fence,
                steer: self.steer,
            },
            keep_root: self.keep_root,
            wait: self.wait.map(Duration::from_secs),
            share: self.share,
            placement: self.placement,
            fsroot: root,
            command: self.command.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(args: &[&str]) -> Vec<String> {
        normalize_args(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn accepts_go_spellings() {
        assert_eq!(
            norm(&[
                "goset",
                "-n",
                "2",
                "-include",
                "1,3",
                "-numa=-1",
                "-dry-run=true",
                "-die-with-launcher",
                "--",
                "-include"
            ]),
            [
                "goset",
                "-n",
                "2",
                "--include",
                "1,3",
                "--numa=-1",
                "--dry-run",
                "--die-with-launcher",
                "--",
                "-include"
            ]
        );
        assert_eq!(norm(&["goset", "-quiet=false", "-x"]), ["goset", "-x"]);
        assert_eq!(
            norm(&["goset", "-rm-cgroup", "goset-a", "-cgroup=true"]),
            ["goset", "rm-cgroup", "goset-a", "--cgroup"]
        );
        assert_eq!(
            norm(&["goset", "--json=false", "-json="]),
            ["goset", "--json=false", "--json="]
        );
    }

    fn parse(args: &[&str]) -> std::result::Result<RunOptions, String> {
        let cli = RunCli::try_parse_from(normalize_args(args.iter().map(OsString::from)))
            .map_err(|e| e.to_string())?;
        cli.run.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn validates_values_with_one_clear_message() {
        let o = parse(&[
            "goset-run",
            "-n",
            "3",
            "--numa",
            "-1",
            "-exclude",
            "0-4:2",
            "--",
            "true",
        ])
        .unwrap();
        assert_eq!(o.select.numa, NumaChoice::Auto);
        let plain = crate::topology::Topology::default();
        assert_eq!(o.exclude.resolve(&plain).unwrap(), vec![0, 2, 4]);
        assert_eq!(
            parse(&["goset-run", "--numa", "-2", "--dry-run"])
                .unwrap()
                .select
                .numa,
            NumaChoice::Off
        );
        assert_eq!(
            parse(&["goset-run", "--include", "1-x", "--", "true"]).unwrap_err(),
            "--include '1-x': expected a cpu list such as 0,2-4 or 0-10:2 (numbers, ranges, strides)"
        );
        assert_eq!(
            parse(&["goset-run", "--numa", "x", "--dry-run"]).unwrap_err(),
            "--numa 'x': expected a node number, auto (-1) or off (-2)"
        );
        assert!(parse(&["goset-run", "-n", "1"])
            .unwrap_err()
            .starts_with("no command given"));
        assert_eq!(
            parse(&["goset-run", "--skip", "0x3", "--", "x"])
                .unwrap()
                .skip,
            3
        );
        assert!(parse(&["goset-run", "--skip", "zz", "--", "x"]).is_err());
        for conflict in [["--no-adapt", "--adapt"], ["--no-adapt", "--spare=1"]] {
            let mut args = vec!["goset-run"];
            args.extend(conflict);
            args.extend(["--", "x"]);
            let e = parse(&args).unwrap_err();
            assert!(e.starts_with("--no-adapt with --"), "{e}");
        }
        let moves = |args: &[&str]| parse(args).unwrap().noise_moves;
        assert_eq!(moves(&["goset-run", "--", "x"]), NoiseMoves::Off);
        assert_eq!(
            moves(&["goset-run", "-adapt", "--", "x"]),
            NoiseMoves::Unused
        );
        assert_eq!(
            moves(&["goset-run", "--spare", "2", "--adapt", "--", "x"]),
            NoiseMoves::Spares
        );
        assert!(parse(&["goset-run", "--fsroot", "/tmp", "--", "x"]).is_err());
        assert!(
            parse(&["goset-run", "--fsroot", "/", "--", "x"]).is_ok(),
            "/ is the live machine"
        );
        assert!(
            parse(&["goset-run", "--fsroot", "/etc/passwd", "--dry-run"])
                .unwrap_err()
                .starts_with("--fsroot /etc/passwd: not a directory")
        );
        assert!(
            parse(&["goset-run", "-steer", "-cgroup", "--", "x"])
                .unwrap()
                .isolation
                .steer
        );
        assert!(parse(&["goset-run", "-fence", "--", "x"])
            .unwrap_err()
            .starts_with("--fence needs --cgroup"));
    }

    #[test]
    fn near_binds_its_node_by_default_and_expressions_are_checked_before_the_machine() {
        let numa = |args: &[&str]| parse(args).unwrap().select.numa;
        assert_eq!(numa(&["goset-run", "--dry-run"]), NumaChoice::Off);
        assert_eq!(
            numa(&["goset-run", "--near", "gpu0", "--dry-run"]),
            NumaChoice::Near
        );
        assert_eq!(
            numa(&["goset-run", "--near", "gpu0", "--numa", "auto", "--dry-run"]),
            NumaChoice::Auto
        );
        assert_eq!(
            numa(&["goset-run", "--near", "eth0", "--numa", "off", "--dry-run"]),
            NumaChoice::Off
        );
        assert_eq!(
            numa(&["goset-run", "--near=eth0", "-numa", "1", "--dry-run"]),
            NumaChoice::Node(1)
        );
        let o = parse(&["goset-run", "--near", "eth0", "--dry-run"]).unwrap();
        assert_eq!(o.near.as_deref(), Some("eth0"));
        let e = parse(&["goset-run", "--exclude", "S0:0@T1:0", "--dry-run"]).unwrap_err();
        assert!(
            e.starts_with("--exclude 'S0:0@T1:0': 'T1:0': expected a cpu list (0,2-4 or 0-10:2) or a likwid expression"),
            "{e}"
        );
        assert!(parse(&["goset-run", "--include", "E:S0:4:1:2@N:0", "--dry-run"]).is_ok());
    }

    #[test]
    fn placement_mask_keeps_selection_and_isolation_but_refuses_thread_moves() {
        assert_eq!(
            parse(&["goset-run", "--", "x"]).unwrap().placement,
            Placement::Thread
        );
        let o = parse(&[
            "goset-run",
            "--placement",
            "mask",
            "-n",
            "2",
            "--include=1",
            "--numa=auto",
            "--cgroup",
            "--steer",
            "--fence",
            "--no-adapt",
            "--",
            "x",
        ])
        .unwrap();
        assert_eq!(o.placement, Placement::Mask);
        assert_eq!(
            (
                o.include.resolve(&Default::default()).unwrap(),
                o.isolation.fence
            ),
            (vec![1], true)
        );
        assert_eq!(
            parse(&["goset-run", "--placement=thread", "--dry-run"])
                .unwrap()
                .placement,
            Placement::Thread
        );
        for (flag, args) in [
            ("--skip", &["--skip", "0x1"][..]),
            ("--main-on-housekeeper", &["--main-on-housekeeper"]),
            ("--spare", &["--spare", "1"]),
            ("--adapt", &["--adapt"]),
            ("--log", &["--log", "/tmp/x.log"]),
        ] {
            let mut all = vec!["goset-run", "--placement", "mask"];
            all.extend(args);
            all.extend(["--", "x"]);
            let e = parse(&all).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "{flag} with --placement mask: one shared mask places and moves no thread \
                     (and logs no placement); drop {flag}, or use --placement thread"
                )
            );
            // The same flags are fine with per-thread placement.
            all.drain(1..3);
            assert!(parse(&all).is_ok(), "{all:?}");
        }
        // A bad mode is clap's usage error (exit 2), naming the accepted values.
        let e =
            RunCli::try_parse_from(["goset-run", "--placement", "core", "--", "x"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
        assert!(e.to_string().contains("thread, mask"), "{e}");
        assert_eq!(e.exit_code(), 2);
        // New: no Go spelling with one dash.
        assert!(RunCli::try_parse_from(normalize_args(
            ["goset-run", "-placement", "mask", "--", "x"].map(OsString::from)
        ))
        .is_err());
    }
}
