//! The typed, validated options of a pinned run ([`RunOptions`]): every value of
//! [`RunArgs`] checked, alone and against the others, with one clear usage error.
//!
//! It owns the limits on values and the rules that join flags. It reads nothing of the
//! machine beyond whether `--fsroot` is a directory: CPU expressions are parsed here but
//! resolved on the topology by the launch, and `--near`'s device is looked up there too.

use super::args::{PlacementMode, RunArgs, SmtArg};
use crate::error::{Error, Result};
use crate::instances::MAX_INSTANCES;
use crate::select::ranks::ShareMode;
use crate::select::{KindChoice, NumaChoice, Options as SelectOptions, SmtPolicy};
use crate::topology::expr::CpuExpr;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Longest `--wait`: a typo must not block a job slot forever.
pub const MAX_WAIT_S: u64 = 86_400;

/// Parses a duration given to `option`: `5s`, `500ms`, `2m`, `1.5` (seconds), `0`; else the
/// line that says what is accepted.
pub fn parse_duration(text: &str, option: &str) -> std::result::Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    match number.parse::<f64>() {
        Ok(v) if v >= 0.0 && (v * scale) < 1e7 => Ok(Duration::from_secs_f64(v * scale)),
        _ => Err(format!(
            "{option} {text}: not a duration (expected e.g. 5s, 500ms, 2m, 0)"
        )),
    }
}

/// The sampling window without `--sample` and without a recent noise record.
pub const DEFAULT_SAMPLE_MS: u64 = 250;

/// Longest noise sampling window: a typo such as `--sample 99999999` must not sleep for a day.
pub const MAX_SAMPLE_MS: u64 = 60_000;

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
    /// `--near`'s device, as named; looked up in sysfs under `fsroot`. `None` with
    /// `--near gpu:local-rank`, which sets [`RunOptions::ranks`].
    pub near: Option<String>,
    /// `--near gpu:local-rank`: each local rank near its GPU, its share cut this way.
    pub ranks: Option<ShareMode>,
    /// Noise sampling window (`--sample`); `None`: [`DEFAULT_SAMPLE_MS`], or shorter with a
    /// recent noise record.
    pub sample: Option<Duration>,
    /// The detour probe's busy time before selection (`--probe`); zero: none.
    pub probe: Duration,
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
    /// PlacementMode log destination.
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
    pub placement: PlacementMode,
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

fn cpu_kind_arg(text: &str) -> Result<KindChoice> {
    match text {
        "performance" => Ok(KindChoice::Performance),
        "efficient" => Ok(KindChoice::Efficient),
        "any" => Ok(KindChoice::Any),
        n => n.parse().map(KindChoice::Kind).map_err(|_| {
            Error::Usage(format!(
                "--cpu-kind '{n}': expected performance, efficient, any or a kind number (goset lists them)"
            ))
        }),
    }
}

/// What `--near gpu:...` asks for per rank.
pub const LOCAL_RANK: &str = "gpu:local-rank";

/// `--near` and `--near-share`: a device (`None` share), or with `gpu:local-rank` a share
/// mode for each rank (`None` device).
fn near_arg(
    near: Option<&str>,
    share: Option<&str>,
) -> Result<(Option<String>, Option<ShareMode>)> {
    let mode = match share {
        None => None,
        Some(s) => Some(
            (ShareMode::NAMES.iter())
                .find(|(name, _)| *name == s)
                .map(|(_, m)| *m)
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "--near-share '{s}': expected node, socket, exclusive or cache"
                    ))
                })?,
        ),
    };
    match near {
        Some(LOCAL_RANK) => Ok((None, Some(mode.unwrap_or_default()))),
        Some(other) if other.starts_with("gpu:") => Err(Error::Usage(format!(
            "--near '{other}': expected {LOCAL_RANK} (each process near the GPU its local rank \
             names) or gpuN (one GPU for the whole run)"
        ))),
        _ if mode.is_some() => Err(Error::Usage(format!(
            "--near-share needs --near {LOCAL_RANK}: it says how each rank's share is cut"
        ))),
        other => Ok((other.map(str::to_string), None)),
    }
}

/// The flags `--near gpu:local-rank` cannot go with: each rank's block decides the CPUs and
/// memory follows each rank's threads.
fn check_ranks(args: &RunArgs) -> Result<()> {
    let numa_off = matches!(args.numa.as_deref(), None | Some("off" | "-2"));
    let clash = [
        (args.include.is_some(), "--include"),
        (!numa_off, "--numa"),
        (args.placement == PlacementMode::Mask, "--placement mask"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag));
    match clash {
        Some(flag) => Err(Error::Usage(format!(
            "{flag} with --near {LOCAL_RANK}: each rank's block is chosen near its own GPU (and \
             its memory follows its threads); drop {flag}"
        ))),
        None => Ok(()),
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

    /// The flags that cannot go together, and the counts that must not be zero or too long.
    fn check_combinations(&self) -> Result<()> {
        if let (PlacementMode::Mask, Some(flag)) = (self.placement, self.placing_flag()) {
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
        Ok(())
    }

    /// The poll interval, the sampling window and the command, checked after `-n`'s blocks.
    fn check_timing_and_command(&self) -> Result<()> {
        if self.interval == 0 {
            return Err(Error::Usage("--interval 0: must be at least 1 ms".into()));
        }
        if let Some(ms) = self.sample.filter(|&ms| ms > MAX_SAMPLE_MS) {
            return Err(Error::Usage(format!(
                "--sample {ms}: at most {MAX_SAMPLE_MS} ms (60 s); noise is a rate, a longer window adds nothing"
            )));
        }
        if self.probe > crate::probe::MAX_MS {
            return Err(Error::Usage(format!(
                "--probe {}: at most {} ms (each candidate CPU is kept busy that long)",
                self.probe,
                crate::probe::MAX_MS
            )));
        }
        if self.command.is_empty() && !self.dry_run {
            return Err(Error::Usage(
                "no command given: put it after -- (or use --dry-run)".into(),
            ));
        }
        Ok(())
    }

    /// The root of /proc and /sys, which must be the live machine's unless `--dry-run`.
    fn checked_fsroot(&self) -> Result<crate::fsroot::FsRoot> {
        let root = fsroot(self.fsroot.as_deref())?;
        if !root.is_live() && self.probe > 0 {
            return Err(Error::Usage(format!(
                "--probe {} with --fsroot {}: the probe measures this machine, not a dump",
                self.probe,
                root.dir().display()
            )));
        }
        if !root.is_live() && !self.dry_run {
            return Err(Error::Usage(format!(
                "--fsroot (or GOSET_FSROOT) {}: a dump of another machine works only with --dry-run",
                root.dir().display()
            )));
        }
        Ok(root)
    }

    /// The selection policy of `-n`, `--smt`, `--numa` (by default from `--near`), `--fence`,
    /// `--spare`, `--cpu-kind` and `--scatter`.
    fn select_options(&self) -> Result<SelectOptions> {
        Ok(SelectOptions {
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
            cpu_kind: cpu_kind_arg(&self.cpu_kind)?,
            scatter: self.scatter,
            ..SelectOptions::default()
        })
    }

    /// Checks every value and builds the typed options.
    pub fn validate(&self) -> Result<RunOptions> {
        self.check_combinations()?;
        let per_process = self.per_process_arg()?;
        self.check_timing_and_command()?;
        let root = self.checked_fsroot()?;
        let (near, ranks) = near_arg(self.near.as_deref(), self.near_share.as_deref())?;
        if ranks.is_some() {
            check_ranks(self)?;
        }
        let mut select = SelectOptions {
            block: per_process,
            ..self.select_options()?
        };
        if ranks.is_some() {
            // Each rank's block is chosen on its own, and memory follows each rank's threads.
            (select.block, select.numa) = (None, NumaChoice::Off);
        }
        Ok(RunOptions {
            select,
            include: cpulist_arg("include", &self.include)?,
            exclude: cpulist_arg("exclude", &self.exclude)?,
            near,
            ranks,
            sample: self.sample.map(Duration::from_millis),
            probe: Duration::from_millis(self.probe),
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
mod tests;
