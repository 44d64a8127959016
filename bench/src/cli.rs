//! goset-bench's command line: clap's parse, the Go predecessor's spellings, and the checks
//! that turn it into an experiment or a usage error (exit 2, nothing run).

use crate::analysis::Choice;
use crate::builtin::Builtin;
use crate::experiment::Stream;
use crate::noise_load::NoiseSpec;
use crate::schedule::Mode;
use crate::stats::Better;
use clap::Parser;
use goset::error::Error;
use regex::Regex;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Options that take a value and are accepted with one dash too (Go spellings).
const SINGLE_DASH_VALUED: &[&str] = &[
    "bench",
    "runs",
    "warmup",
    "settle",
    "seed",
    "modes",
    "match",
    "topk",
    "noise",
    "json",
    "csv",
    "plot",
    "timeout",
    "unit",
    "better",
    "from",
    "resamples",
    "confidence",
    "taskset",
    "goset-arg",
];

/// Flags accepted with one dash and as `-name=true` / `-name=false`.
const BOOLEAN: &[&str] = &["cgroup", "steer", "fence", "dump", "help", "version"];

/// Does pinning pay off on this machine? Runs a command (or a built-in benchmark) bare, pinned
/// with a taskset mask to a CPU chosen in rotation, and under goset-run (and with --modes, under
/// goset-run --placement mask or the shim alone), interleaved, and compares the numbers it
/// prints: each mode's median and spread, and goset's differences with a bootstrap confidence
/// interval.
#[derive(Debug, Parser)]
#[command(name = "goset-bench", version)]
pub struct BenchCli {
    /// A built-in benchmark instead of a command: jitter (ms per iteration), chase (ns per
    /// load, a ring that fits L2), matmul (MFLOP/s), stream (MB/s).
    #[arg(long, value_name = "NAME")]
    pub bench: Option<String>,
    /// Task CPUs (goset-run -n), taskset CPUs per run, and a built-in's worker threads.
    #[arg(short = 'n', default_value_t = 1)]
    pub n: usize,
    /// Counted runs per mode.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Rounds run first and discarded.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// Idle time before each run (`5s`, `500ms`, `0`).
    #[arg(long, default_value = "0", value_name = "DUR")]
    pub settle: String,
    /// Seed of the order of modes within each round (printed; random when not given).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The modes to run, comma-separated: baseline, taskset, goset, mask (goset-run
    /// --placement mask), shim (libgoset.so by hand); default baseline,taskset,goset.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub modes: Option<Vec<String>>,
    /// Whether to run the taskset mode (Go's `-taskset=true`); with --modes, --modes decides.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub taskset: Option<bool>,
    /// goset-run --cgroup (needs root).
    #[arg(long)]
    pub cgroup: bool,
    /// goset-run --steer (needs root).
    #[arg(long)]
    pub steer: bool,
    /// goset-run --fence (brings --cgroup; needs root).
    #[arg(long)]
    pub fence: bool,
    /// CPUs for goset-run --include; naming -n CPUs, they are every pinned mode's CPUs
    /// (taskset, goset, mask and shim runs all use them).
    #[arg(long, value_name = "LIST")]
    pub include: Option<String>,
    /// One more argument for goset-run (repeatable), e.g. --goset-arg=--smt=spread.
    #[arg(long = "goset-arg", allow_hyphen_values = true, value_name = "ARG")]
    pub goset_arg: Vec<String>,
    /// The goset-run to use (default: beside goset-bench, else on PATH).
    #[arg(long, value_name = "PATH")]
    pub goset_run: Option<PathBuf>,
    /// A background load of ours on these CPUs for the whole experiment, busy DUTY of each
    /// PERIOD (default 50% of 10 ms): `0`, `0-1:30%`, `1:10%/5s` (0.5 s of every 5 s).
    #[arg(long, value_name = "CPULIST[:DUTY[/PERIOD]]")]
    pub noise: Option<String>,
    /// With --noise: start the load in each run, SECS after the run starts (a CPU that turns
    /// noisy mid-run), rather than for the whole experiment: `2`, `2s`, `500ms`.
    #[arg(long = "noise-at", value_name = "SECS")]
    pub noise_at: Option<String>,
    /// Run the command once, bare, and list the metrics its output gives.
    #[arg(long)]
    pub dump: bool,
    /// Only the metrics whose key this regular expression matches.
    #[arg(long = "match", value_name = "REGEX")]
    pub matching: Option<String>,
    /// At most this many metrics shown.
    #[arg(long, default_value_t = 8)]
    pub topk: usize,
    /// The unit of the metrics a regex matches: `REGEX=UNIT` (repeatable).
    #[arg(long, value_name = "REGEX=UNIT")]
    pub unit: Vec<String>,
    /// The direction of the metrics a regex matches: `REGEX=lower` or `REGEX=higher`.
    #[arg(long, value_name = "REGEX=lower|higher")]
    pub better: Vec<String>,
    /// Which output the numbers are read from.
    #[arg(long, value_enum, default_value = "stdout")]
    pub from: Stream,
    /// Bootstrap resamples per comparison.
    #[arg(long, default_value_t = 2000)]
    pub resamples: usize,
    /// Confidence of the intervals, in (0, 1).
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// A run that takes longer is ended and discarded (`60s`; default: no limit).
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// Results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Every run's metrics as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// The runs as an SVG plot.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Internal: run a built-in benchmark's workers and print its metric.
    #[arg(long, hide = true, value_name = "NAME")]
    pub worker: Option<String>,
    /// The command to measure, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Parses goset-bench's arguments (Go spellings accepted).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<BenchCli, clap::Error> {
    BenchCli::try_parse_from(goset::cli::normalize_go_spellings(
        args,
        SINGLE_DASH_VALUED,
        BOOLEAN,
    ))
}

/// Parses `5s`, `500ms`, `2m`, `1.5` (seconds), `0` ([`goset::cli::parse_duration`]).
pub fn parse_duration(text: &str, option: &str) -> Result<Duration, Error> {
    goset::cli::parse_duration(text, option).map_err(Error::Usage)
}

/// The modes asked for, in table order.
pub fn modes(cli: &BenchCli) -> Result<Vec<Mode>, Error> {
    let mut modes = match &cli.modes {
        Some(names) => {
            let mut out = Vec::new();
            for name in names {
                let mode = Mode::parse(name.trim()).ok_or_else(|| {
                    Error::Usage(format!(
                        "--modes: '{name}' is not a mode ({})",
                        Mode::names()
                    ))
                })?;
                if !out.contains(&mode) {
                    out.push(mode);
                }
            }
            out
        }
        None => Mode::DEFAULT.to_vec(),
    };
    if cli.modes.is_none() && cli.taskset == Some(false) {
        modes.retain(|&m| m != Mode::Taskset);
    }
    modes.sort();
    if modes.is_empty() {
        return Err(Error::Usage("--modes: no mode given".into()));
    }
    Ok(modes)
}

/// goset-run's flags that goset-bench sets itself, run by run.
const OWN_GOSET_FLAGS: [(&str, &str); 3] = [
    (
        "--placement",
        "--modes mask runs goset-run --placement mask",
    ),
    ("--json", "to read each run's CPUs from goset-run's report"),
    ("--dry-run", "every run runs the command"),
];

/// Checks goset-run's arguments (`goset_args`, before `--`) once, as goset-run would check
/// them for each run of `modes` (mask runs add `--placement mask`; shim runs ask goset-run
/// for its selection), so that a flag it refuses is one usage error before any run rather
/// than every such run discarded. Returns the CPUs `--include` fixes for every pinned mode:
/// the list when it names `n` CPUs (see [`crate::schedule::fixed_cpus`]).
pub fn check_goset_args(
    goset_args: &[OsString],
    modes: &[Mode],
    n: usize,
) -> Result<Option<Vec<usize>>, Error> {
    let args = goset::cli::normalize_args(
        std::iter::once(OsString::from("goset-run")).chain(goset_args.iter().cloned()),
    );
    for arg in args.iter().skip(1).take_while(|a| *a != "--") {
        let text = arg.to_string_lossy();
        for (flag, why) in OWN_GOSET_FLAGS {
            if text == flag || text.starts_with(&format!("{flag}=")) {
                return Err(Error::Usage(format!(
                    "--goset-arg={text}: goset-bench sets {flag} itself ({why})"
                )));
            }
        }
    }
    // Every mode's CPUs follow --include, so the flags are checked even without goset runs.
    let mut include = Vec::new();
    let mask = modes.contains(&Mode::Mask);
    for placement in std::iter::once(None).chain(mask.then_some(Some("mask"))) {
        let mut all = args.clone();
        if let Some(p) = placement {
            all.extend(["--placement", p].map(OsString::from));
        }
        all.push("--dry-run".into());
        let refused = |e: &dyn std::fmt::Display| {
            let e = e.to_string();
            let e = e.lines().next().unwrap_or_default();
            let e = e.strip_prefix("error: ").unwrap_or(e);
            Error::Usage(match placement {
                None => format!("goset-run refuses its flags: {e}"),
                Some(p) => format!("--modes {p}: goset-run --placement {p} refuses its flags: {e}"),
            })
        };
        let cli = goset::cli::RunCli::try_parse_from(&all).map_err(|e| refused(&e))?;
        let opts = cli.run.validate().map_err(|e| refused(&e))?;
        // A likwid expression names CPUs by their place on the machine, --near a device on it.
        let topo = goset::topology::Topology::read(&opts.fsroot).map_err(|e| refused(&e))?;
        include = (goset::launch::machine_options(&opts, &topo))
            .map_err(|e| refused(&e))?
            .include;
    }
    let fixed = crate::schedule::fixed_cpus(&include, n);
    let named = crate::schedule::distinct(&include).len();
    if fixed.is_none() && named > n {
        return Err(Error::Usage(format!(
            "--include names {named} CPUs but -n is {n}: name -n of them to fix every mode's CPUs"
        )));
    }
    Ok(fixed)
}

/// `text` as a regular expression; a bad one is one line naming `what` and the fault (the
/// regex crate's message draws it over several lines).
fn regex(text: &str, what: &str) -> Result<Regex, Error> {
    Regex::new(text).map_err(|e| {
        let e = e.to_string();
        let fault = e
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        let fault = fault.trim().trim_start_matches("error: ");
        Error::Usage(format!("{what}: bad regular expression: {fault}"))
    })
}

/// Checks that the CPUs asked for are among `allowed` (this process's): `-n` of them, and the
/// noise load's, so that no run is started that could only fail.
pub fn check_cpus(n: usize, noise: Option<&NoiseSpec>, allowed: &[usize]) -> Result<(), Error> {
    let set: goset_plan::CpuSet = allowed.iter().copied().collect();
    if n > allowed.len() {
        return Err(Error::Usage(format!(
            "-n {n}: must be between 1 and {} (the CPUs this process may run on: {set})",
            allowed.len()
        )));
    }
    let outside = noise.and_then(|spec| spec.cpus.iter().find(|c| !allowed.contains(c)));
    match outside {
        Some(cpu) => Err(Error::Usage(format!(
            "--noise: CPU {cpu} is not one this process may run on ({set})"
        ))),
        None => Ok(()),
    }
}

/// `REGEX=VALUE` pairs of `option`.
fn pairs<T>(
    items: &[String],
    option: &str,
    value: impl Fn(&str) -> Option<T>,
    accepted: &str,
) -> Result<Vec<(Regex, T)>, Error> {
    items
        .iter()
        .map(|item| {
            let bad = || Error::Usage(format!("{option} {item}: expected REGEX={accepted}"));
            let (re, v) = item.rsplit_once('=').ok_or_else(bad)?;
            let re = regex(re, &format!("{option} {item}"))?;
            Ok((re, value(v).ok_or_else(bad)?))
        })
        .collect()
}

/// The metric choices of the command line.
pub fn choice(cli: &BenchCli, bootstrap_seed: u64) -> Result<Choice, Error> {
    let matching = match &cli.matching {
        Some(m) => Some(regex(m, &format!("--match {m}"))?),
        None => None,
    };
    if !(cli.confidence > 0.0 && cli.confidence < 1.0) {
        return Err(Error::Usage(format!(
            "--confidence {}: must be between 0 and 1, e.g. 0.95",
            cli.confidence
        )));
    }
    Ok(Choice {
        matching,
        topk: cli.topk,
        units: pairs(&cli.unit, "--unit", |u| Some(u.to_string()), "UNIT")?,
        better: pairs(
            &cli.better,
            "--better",
            |b| match b {
                "lower" => Some(Better::Lower),
                "higher" => Some(Better::Higher),
                _ => None,
            },
            "lower|higher",
        )?,
        resamples: cli.resamples.max(1),
        confidence: cli.confidence,
        seed: bootstrap_seed,
    })
}

/// What is measured: a built-in (its name) or the command.
pub enum Target {
    /// `--bench NAME`.
    Builtin(Builtin),
    /// `-- CMD ARGS`.
    Command(Vec<OsString>),
}

/// The target of the command line: exactly one of --bench and a command.
pub fn target(cli: &BenchCli) -> Result<Target, Error> {
    match (&cli.bench, cli.command.is_empty()) {
        (Some(_), false) => Err(Error::Usage(
            "--bench and a command: give one (--bench NAME, or -- CMD ARGS)".into(),
        )),
        (None, true) => Err(Error::Usage(
            "nothing to measure: give --bench NAME (jitter, chase, matmul, stream) or -- CMD ARGS"
                .into(),
        )),
        (Some(name), true) => Builtin::parse(name).map(Target::Builtin).ok_or_else(|| {
            Error::Usage(format!(
                "--bench {name}: not a benchmark (jitter, chase, matmul, stream)"
            ))
        }),
        (None, false) => Ok(Target::Command(cli.command.clone())),
    }
}

/// The noise load asked for.
pub fn noise(cli: &BenchCli) -> Result<Option<NoiseSpec>, Error> {
    cli.noise
        .as_deref()
        .map(|n| crate::noise_load::parse(n).map_err(Error::Usage))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> BenchCli {
        parse(args.iter().map(OsString::from)).unwrap()
    }

    #[test]
    fn go_spellings_and_modes() {
        let c = cli(&[
            "goset-bench",
            "-bench",
            "jitter",
            "-runs",
            "4",
            "-n",
            "1",
            "-settle",
            "5s",
            "-fence=true",
            "-cgroup",
            "-taskset=false",
        ]);
        assert_eq!((c.bench.as_deref(), c.runs, c.n), (Some("jitter"), 4, 1));
        assert!(c.fence && c.cgroup && !c.steer);
        assert_eq!(modes(&c).unwrap(), [Mode::Baseline, Mode::Goset]);
        assert_eq!(
            parse_duration(&c.settle, "--settle").unwrap(),
            Duration::from_secs(5)
        );
        let c = cli(&[
            "goset-bench",
            "--modes",
            "goset,baseline",
            "--",
            "echo",
            "-x",
        ]);
        assert_eq!(modes(&c).unwrap(), [Mode::Baseline, Mode::Goset]);
        assert_eq!(c.command, ["echo", "-x"]);
        let c = cli(&["goset-bench", "-taskset=true", "--", "true"]);
        assert_eq!(modes(&c).unwrap(), Mode::DEFAULT);
    }

    #[test]
    fn mask_and_shim_modes_and_the_cpus_include_fixes() {
        let c = cli(&["goset-bench", "--modes", "shim,mask,goset", "--", "true"]);
        assert_eq!(modes(&c).unwrap(), [Mode::Goset, Mode::Mask, Mode::Shim]);
        let c = cli(&["goset-bench", "--", "true"]);
        assert_eq!(modes(&c).unwrap(), Mode::DEFAULT, "the default stays");
        let args = |a: &[&str]| -> Vec<OsString> {
            ["-q", "-n", "2"]
                .iter()
                .chain(a)
                .map(OsString::from)
                .collect()
        };
        let all = Mode::ALL;
        assert_eq!(check_goset_args(&args(&[]), &all, 2).unwrap(), None);
        assert_eq!(
            check_goset_args(&args(&["--include", "3,1,3"]), &all, 2).unwrap(),
            Some(vec![3, 1]),
            "in the order given, as goset-run takes them"
        );
        // Fewer than -n: goset-run picks the rest, so nothing is fixed.
        assert_eq!(
            check_goset_args(&args(&["--include=1"]), &all, 2).unwrap(),
            None
        );
        let refused = |a: &[&str], modes: &[Mode]| {
            check_goset_args(&args(a), modes, 2)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(&["--include", "0-2"], &all),
            "--include names 3 CPUs but -n is 2: name -n of them to fix every mode's CPUs"
        );
        // likwid expressions and --near are looked up on this machine before any run.
        assert_eq!(
            check_goset_args(&args(&["--include=N:0"]), &all, 2).unwrap(),
            None
        );
        assert!(refused(&["--include=S99:0"], &[Mode::Goset]).starts_with(
            "goset-run refuses its flags: --include 'S99:0': S99: no socket 99 with CPUs \
             goset-run may use (sockets: "
        ));
        assert!(refused(&["--near", "no-such-nic"], &[Mode::Goset])
            .starts_with("goset-run refuses its flags: --near no-such-nic: no such network"));
        assert_eq!(
            refused(&["--spare=1"], &[Mode::Baseline, Mode::Mask]),
            "--modes mask: goset-run --placement mask refuses its flags: --spare with \
             --placement mask: one shared mask places and moves no thread (and logs no \
             placement); drop --spare, or use --placement thread"
        );
        assert!(check_goset_args(&args(&["--spare=1"]), &[Mode::Goset, Mode::Shim], 2).is_ok());
        assert!(refused(&["--numa", "x"], &[Mode::Goset])
            .starts_with("goset-run refuses its flags: --numa 'x'"));
        assert!(refused(&["--smt", "odd"], &[Mode::Taskset])
            .starts_with("goset-run refuses its flags: invalid value 'odd'"));
        // goset-run's selection flags pass through, checked as goset-run checks them.
        assert!(check_goset_args(&args(&["--cpu-kind=efficient", "--scatter"]), &all, 2).is_ok());
        assert!(refused(&["--cpu-kind", "odd"], &[Mode::Goset])
            .starts_with("goset-run refuses its flags: --cpu-kind 'odd': expected performance"));
        for own in ["--placement=mask", "--json", "-dry-run"] {
            let e = refused(&[own, "x"], &all);
            assert!(e.contains("goset-bench sets --"), "{e}");
        }
    }

    #[test]
    fn bad_values_are_usage_errors_naming_them() {
        let c = cli(&["goset-bench", "--modes", "fast", "--", "true"]);
        assert_eq!(
            modes(&c).unwrap_err().to_string(),
            "--modes: 'fast' is not a mode (baseline, taskset, goset, mask, shim)"
        );
        let c = cli(&["goset-bench", "--bench", "nope"]);
        assert!(matches!(target(&c), Err(Error::Usage(m)) if m.contains("--bench nope")));
        let c = cli(&["goset-bench"]);
        assert!(target(&c).is_err());
        assert!(parse_duration("5 parsecs", "--settle").is_err());
        assert_eq!(
            parse_duration("250ms", "--settle").unwrap(),
            Duration::from_millis(250)
        );
        let c = cli(&["goset-bench", "--better", "x=sideways", "--", "true"]);
        assert!(choice(&c, 0)
            .unwrap_err()
            .to_string()
            .contains("REGEX=lower|higher"));
        for bad in [
            &["--match", "("][..],
            &["--unit", "a[=ms"],
            &["--better", "(=lower"],
        ] {
            let c = cli(&[&["goset-bench"][..], bad, &["--", "true"]].concat());
            let e = choice(&c, 0).unwrap_err().to_string();
            assert_eq!(e.lines().count(), 1, "{e}");
            assert!(e.contains("bad regular expression: unclosed"), "{e}");
        }
        assert!(parse(["goset-bench", "--runs", "x"].map(OsString::from)).is_err());
    }

    #[test]
    fn cpus_this_process_may_not_run_on_are_refused_before_any_run() {
        assert!(check_cpus(2, None, &[0, 1]).is_ok());
        let e = check_cpus(3, None, &[0, 1]).unwrap_err().to_string();
        assert_eq!(
            e,
            "-n 3: must be between 1 and 2 (the CPUs this process may run on: 0-1)"
        );
        let noise = crate::noise_load::parse("5").unwrap();
        let e = check_cpus(1, Some(&noise), &[0, 1]).unwrap_err();
        assert!(matches!(e, Error::Usage(m) if m.starts_with("--noise: CPU 5 ")));
        let noise = crate::noise_load::parse("1").unwrap();
        assert!(check_cpus(1, Some(&noise), &[0, 1]).is_ok());
    }
}
