//! clap's view of the command line: the flags of a pinned run ([`RunArgs`]), shared by
//! `goset-run` and `goset ... -- CMD`, and the two programs with `goset`'s subcommands.
//!
//! It owns the spelling, help text and defaults of every flag. It does not check values
//! against each other ([`super::options`] does), nor rewrite the Go goset's spellings
//! ([`super::spelling`]).

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// Flags of a pinned run, shared by `goset-run` and `goset ... -- CMD`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of task CPUs (one per thread the task runs).
    #[arg(short = 'n', long = "count", value_name = "N", default_value_t = 1)]
    pub count: usize,
    /// Noise sampling window in milliseconds before selection (at most 60000; default 250,
    /// or 30 when the node's noise record is recent); 0 ranks by the record alone, or by
    /// topology alone without one.
    #[arg(long, value_name = "MS")]
    pub sample: Option<u64>,
    /// Before selection, probe every candidate CPU for MS ms at once, one busy thread each (as
    /// `goset probe` does, at most 10000): the time each CPU loses to detours counts against
    /// it. 0, the default: no probe.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub probe: u64,
    /// SMT policy: spread = one thread per physical core first; pack = fill a core's siblings first.
    #[arg(long, value_enum, default_value_t = SmtArg::Spread)]
    pub smt: SmtArg,
    /// CPU kinds on a hybrid machine: performance = the fastest kinds first (a slower kind only
    /// where it gives the task more); efficient = the least performant first (background
    /// work); any = kinds ignored; N = only kind N (0 = the least performant, as goset lists
    /// them).
    #[arg(
        long,
        value_name = "performance|efficient|any|N",
        default_value = "performance"
    )]
    pub cpu_kind: String,
    /// Spread the task over as many packages, NUMA nodes, caches and clusters as it can, as
    /// OMP_PROC_BIND=spread does (for codes bound by memory bandwidth); default: as few.
    #[arg(long)]
    pub scatter: bool,
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
    /// its NUMA node for memory. gpu:local-rank: each process near its own GPU (the one its
    /// LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK
    /// or GOSET_INSTANCE names through CUDA_VISIBLE_DEVICES), in a block of its own.
    #[arg(long, value_name = "DEVICE")]
    pub near: Option<String>,
    /// With --near gpu:local-rank, each rank's share, as torchrun's --numa-binding: node (its
    /// GPU's NUMA node), socket (its package), exclusive (the node's cores split among its
    /// GPUs) or cache (one last-level cache each). Default: node.
    #[arg(long, value_name = "MODE")]
    pub near_share: Option<String>,
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
    #[arg(long, value_enum, value_name = "thread|mask", default_value_t = PlacementMode::Thread)]
    pub placement: PlacementMode,
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
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlacementMode {
    /// Each thread on its own planned CPU: libgoset.so in the task, the housekeeper placing
    /// what the shim cannot reach and moving threads by demand and noise.
    #[default]
    Thread,
    /// One shared mask of the selected CPUs for the whole task (the Go goset's model): no
    /// libgoset.so, and the housekeeper only watches.
    Mask,
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
    /// Measure each CPU's detours directly, rank the CPUs by the time they lost, and name
    /// what ran there.
    ///
    /// One busy thread per CPU, all at once, pinned, SCHED_FIFO where permitted, reads the
    /// clock in a tight loop; a gap over the threshold is a detour. A table on stderr, with
    /// the cost in CPU-ms.
    Probe {
        /// Busy time of each probe thread in milliseconds (at most 10000).
        #[arg(long, value_name = "MS", default_value_t = crate::probe::DEFAULT_MS)]
        ms: u64,
        /// The CPUs to probe (cpulist or likwid-pin expressions); default: every online CPU
        /// this process may use.
        #[arg(long, value_name = "LIST")]
        cpus: Option<String>,
        /// A gap between two clock readings longer than this many microseconds is a detour.
        #[arg(long, value_name = "US", default_value_t = 5)]
        threshold_us: u64,
        /// Also write the result as JSON to FILE (- for stdout).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
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
    /// Show what each CPU lost to noise, and to what, over the last seconds, minutes and day,
    /// from the node's noise record (runs keep it; --watch adds to it).
    Noise {
        /// First sample every CPU for DURATION (5s, 2m; a poll of /proc/stat and
        /// /proc/interrupts a second) into the record, and print what that cost.
        #[arg(long, value_name = "DURATION")]
        watch: Option<String>,
        /// Write the report as JSON to FILE (- for stdout).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Print only what the watch cost, and warnings (for the systemd timer's journal).
        #[arg(short, long)]
        quiet: bool,
    },
    /// Print the shell completions of goset and goset-run, for `source <(goset completions
    /// bash)` (make install installs them, goset-bench's too).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
}
