//! `goset-bench`: see the crate documentation and docs/goset-bench.md.

use goset::error::Error;
use goset_bench::analysis::{self, Choice, MetricResult};
use goset_bench::builtin::{self, Builtin, Sizes};
use goset_bench::cli::{self, BenchCli, Target};
use goset_bench::experiment::{self, Run, Setup};
use goset_bench::files::Output;
use goset_bench::metrics::{self, infer_better};
use goset_bench::noise_load::{NoiseLoad, NoiseSpec};
use goset_bench::output::{self, About};
use goset_bench::schedule::{self, Planned};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

fn main() {
    goset_bench::signals::install();
    let cli = cli::parse(std::env::args_os())
        .unwrap_or_else(|e| goset::cli::exit_on_clap_error(e, "goset-bench"));
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("goset-bench: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// goset-run: `--goset-run`, else beside this executable, else on PATH.
fn goset_run(cli: &BenchCli) -> Result<PathBuf, Error> {
    if let Some(p) = &cli.goset_run {
        return goset::task::resolve_command(p.as_os_str());
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("goset-run")))
        .filter(|p| p.is_file());
    match beside {
        Some(p) => Ok(p),
        None => goset::task::resolve_command("goset-run".as_ref()),
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// A private directory for goset-run's per-run reports, removed with what is left in it.
struct ReportDir(PathBuf);

impl ReportDir {
    fn create() -> Result<ReportDir, Error> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("goset-bench-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::System(format!("cannot create {}: {e}", dir.display())))?;
        Ok(ReportDir(dir))
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `--json`, `--csv` and `--plot`, opened before any run.
struct Outputs {
    json: Option<Output>,
    csv: Option<Output>,
    plot: Option<Output>,
}

impl Outputs {
    fn open(cli: &BenchCli) -> Result<Outputs, Error> {
        Ok(Outputs {
            json: Output::open("--json", cli.json.as_deref())?,
            csv: Output::open("--csv", cli.csv.as_deref())?,
            plot: Output::open("--plot", cli.plot.as_deref())?,
        })
    }
}

fn run(cli: BenchCli) -> Result<i32, Error> {
    if let Some(name) = &cli.worker {
        return worker(name, cli.n);
    }
    let opts = options(&cli)?;
    let mut choice = cli::choice(&cli, opts.seed)?;
    let (command, shown) = command(&opts.target, cli.n, &mut choice)?;
    let (setup, _reports) = setup(&cli, &opts, command)?;
    if cli.dump {
        return dump(&setup);
    }
    let outputs = Outputs::open(&cli)?;
    // The load for the whole experiment; with --noise-at it runs in each run, and this one
    // (never busy) only checks its CPUs before the first.
    let idle_until = if setup.noise_at.is_some() {
        Duration::MAX
    } else {
        Duration::ZERO
    };
    let whole = (opts.noise_spec.as_ref())
        .map(|spec| NoiseLoad::start(spec, idle_until))
        .transpose()
        .map_err(Error::System)?;
    let _noise = whole.filter(|_| setup.noise_at.is_none());
    let plan = schedule::plan(&opts.modes, cli.runs, cli.warmup, opts.seed);
    let runs = make_runs(&cli, &opts, &setup, &plan, &shown);
    let warnings = tell_about_runs(&runs);
    let results = analysis::analyse(&runs, &opts.modes, &choice);
    let about = About {
        command: shown,
        modes: opts.modes.clone(),
        runs: cli.runs,
        warmup: cli.warmup,
        settle_s: opts.settle.as_secs_f64(),
        seed: opts.seed,
        resamples: choice.resamples,
        confidence: choice.confidence,
        goset_args: (setup.goset_args.iter())
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        noise: cli.noise.clone(),
    };
    write_results(outputs, &about, &results, &runs, &warnings)
}

/// `--worker`: the builtin benchmark itself, its numbers on stdout.
fn worker(name: &str, n: usize) -> Result<i32, Error> {
    let bench = Builtin::parse(name)
        .ok_or_else(|| Error::Usage(format!("--worker {name}: not a benchmark")))?;
    let sizes = Sizes::for_caches(goset_bench::cache::read(&Default::default()));
    for line in builtin::run(bench, n, sizes) {
        println!("{line}");
    }
    Ok(0)
}

/// The options the experiment is made of, checked, with the seed it is ordered by.
struct Options {
    target: Target,
    modes: Vec<schedule::Mode>,
    settle: Duration,
    timeout: Option<Duration>,
    noise_spec: Option<NoiseSpec>,
    noise_at: Option<Duration>,
    seed: u64,
}

/// Reads and checks the options; a usage error before anything has run.
fn options(cli: &BenchCli) -> Result<Options, Error> {
    let target = cli::target(cli)?;
    let modes = cli::modes(cli)?;
    let settle = cli::parse_duration(&cli.settle, "--settle")?;
    let timeout = (cli.timeout.as_deref())
        .map(|t| cli::parse_duration(t, "--timeout"))
        .transpose()?;
    let noise_spec = cli::noise(cli)?;
    let noise_at = (cli.noise_at.as_deref())
        .map(|t| cli::parse_duration(t, "--noise-at"))
        .transpose()?;
    if noise_at.is_some() && noise_spec.is_none() {
        return Err(Error::Usage(
            "--noise-at needs --noise CPULIST: which CPUs turn noisy".into(),
        ));
    }
    if cli.n == 0 {
        return Err(Error::Usage("-n 0: at least one CPU (-n 1)".into()));
    }
    if cli.runs == 0 {
        return Err(Error::Usage("--runs 0: at least one run per mode".into()));
    }
    cli::check_cpus(cli.n, noise_spec.as_ref(), &allowed_cpus())?;
    let seed = cli.seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        t.map_or(1, |d| d.as_nanos() as u64 % 1_000_000_007)
    });
    Ok(Options {
        target,
        modes,
        settle,
        timeout,
        noise_spec,
        noise_at,
        seed,
    })
}

/// The command each run starts, and how it is shown: a builtin is this executable as its
/// `--worker`, and its numbers are compared unless `--match` says otherwise.
fn command(
    target: &Target,
    n: usize,
    choice: &mut Choice,
) -> Result<(Vec<OsString>, String), Error> {
    Ok(match target {
        Target::Builtin(b) => {
            let exe = std::env::current_exe()
                .map_err(|e| Error::System(format!("cannot find goset-bench itself: {e}")))?;
            if choice.matching.is_none() {
                choice.matching = Some(regex::Regex::new(&format!("^{}$", b.name())).unwrap());
            }
            let args = [format!("--worker={}", b.name()), format!("-n{n}")];
            let mut command = vec![exe.into_os_string()];
            command.extend(args.map(OsString::from));
            (command, format!("--bench {} -n {n}", b.name()))
        }
        Target::Command(c) => {
            let mut c = c.clone();
            let shown = c
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            c[0] = goset::task::resolve_command(&c[0])?.into_os_string();
            (c, shown)
        }
    })
}

/// The arguments every goset-run run is given before `--`.
fn goset_args(cli: &BenchCli) -> Vec<OsString> {
    let mut goset_args: Vec<OsString> = vec!["-q".into(), "-n".into(), cli.n.to_string().into()];
    // Fencing books siblings inside the task's cpuset: --fence brings --cgroup (as Go's
    // `-fence=true` did), where goset-run alone would refuse it.
    for (on, flag) in [
        (cli.cgroup || cli.fence, "--cgroup"),
        (cli.steer, "--steer"),
        (cli.fence, "--fence"),
    ] {
        if on {
            goset_args.push(flag.into());
        }
    }
    if let Some(list) = &cli.include {
        goset_args.extend(["--include".into(), list.into()]);
    }
    goset_args.extend(cli.goset_arg.iter().map(OsString::from));
    goset_args
}

/// How the runs are made, and the directory their reports go to (kept while it lives).
fn setup(
    cli: &BenchCli,
    opts: &Options,
    command: Vec<OsString>,
) -> Result<(Setup, Option<ReportDir>), Error> {
    let modes = &opts.modes;
    let goset_args = goset_args(cli);
    let fixed = if cli.dump {
        None
    } else {
        cli::check_goset_args(&goset_args, modes, cli.n)?
    };
    // Shim runs take their CPUs from goset-run (unless --include fixes them) and libgoset.so
    // from beside it.
    let needs_goset =
        !cli.dump && (modes.iter()).any(|&m| m.uses_goset_run() || m == schedule::Mode::Shim);
    let goset_run = if needs_goset {
        goset_run(cli)?
    } else {
        PathBuf::from("goset-run")
    };
    let shim = match modes.contains(&schedule::Mode::Shim) && !cli.dump {
        true => Some(
            goset::rundir::find_shim_for(Some(&goset_run))?.ok_or_else(|| {
                Error::System(format!(
                    "--modes shim: libgoset.so not found beside {} (build it, or set {})",
                    goset_run.display(),
                    goset::rundir::LIB_ENV
                ))
            })?,
        ),
        false => None,
    };
    let reports = (!cli.dump && modes.iter().any(|m| m.uses_goset_run()))
        .then(ReportDir::create)
        .transpose()?;
    let setup = Setup {
        command,
        goset_run,
        goset_args,
        taskset_width: cli.n,
        allowed: allowed_cpus(),
        fixed,
        shim,
        report_dir: reports.as_ref().map(|r| r.0.clone()),
        settle: opts.settle,
        timeout: opts.timeout,
        stream: cli.from,
        noise_at: (opts.noise_at).and_then(|at| Some((opts.noise_spec.clone()?, at))),
    };
    Ok((setup, reports))
}

/// Makes the planned runs, with a progress bar on stderr under a line saying what they are.
fn make_runs(
    cli: &BenchCli,
    opts: &Options,
    setup: &Setup,
    plan: &[Planned],
    shown: &str,
) -> Vec<Run> {
    eprintln!(
        "goset-bench: {shown}: {} modes x {} runs{}, interleaved, seed {}",
        opts.modes.len(),
        cli.runs,
        if cli.warmup > 0 {
            format!(" (+{} warm-up rounds)", cli.warmup)
        } else {
            String::new()
        },
        opts.seed
    );
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(plan.len() as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} runs, ETA {eta} {msg}")
            .expect("valid template"),
    );
    let runs = experiment::run_all(setup, plan, &mut |r| {
        bar.set_message(format!("(last: {})", r.planned.mode.name()));
        bar.inc(1);
    });
    bar.finish_and_clear();
    runs
}

/// Says on stderr which runs were discarded and why, and what else to doubt; returns the
/// warnings, for the JSON.
fn tell_about_runs(runs: &[Run]) -> Vec<String> {
    for r in runs.iter().filter(|r| r.discarded.is_some()) {
        let Planned { round, mode, .. } = r.planned;
        let why = r.discarded.as_deref().unwrap_or_default();
        let tail = r
            .stderr_tail
            .as_deref()
            .unwrap_or_default()
            .replace('\n', " | ");
        eprintln!(
            "goset-bench: run {round} ({}) discarded: {why}: {tail}",
            mode.name()
        );
    }
    if runs.iter().any(|r| r.samples.len() == metrics::MAX_SAMPLES) {
        eprintln!(
            "goset-bench: warning: the command prints more than {} numbers a run: only the first \
             {} of each run are kept and compared",
            metrics::MAX_SAMPLES,
            metrics::MAX_SAMPLES
        );
    }
    let warnings = analysis::drift_warnings(runs);
    for w in &warnings {
        eprintln!("goset-bench: warning: {w}");
    }
    warnings
}

/// Writes `--json` and `--csv` (even with nothing to compare), then `--plot` and the table.
fn write_results(
    outputs: Outputs,
    about: &About,
    results: &[MetricResult],
    runs: &[Run],
    warnings: &[String],
) -> Result<i32, Error> {
    if let Some(out) = outputs.json {
        out.write(&output::json(about, results, runs, warnings))?;
    }
    if let Some(out) = outputs.csv {
        out.write(&output::csv(results, runs))?;
    }
    if results.is_empty() {
        return Err(Error::System(
            "no metric to compare: no counted run printed a number that changed (see --dump, \
             --match, and the discarded runs above)"
                .into(),
        ));
    }
    if let Some(out) = outputs.plot {
        out.write(&goset_bench::plot::render(results).map_err(Error::System)?)?;
    }
    print!("{}", output::table(about, results, runs));
    Ok(0)
}

/// `--dump`: one bare run, and every metric of its output: key, value, unit, direction.
fn dump(setup: &Setup) -> Result<i32, Error> {
    let planned = Planned {
        round: 0,
        mode: schedule::Mode::Baseline,
        warmup: false,
    };
    let run = experiment::run_one(setup, planned, 0);
    if let Some(why) = &run.discarded {
        eprintln!("goset-bench: the run was not clean ({why}); its numbers follow");
    }
    println!("key\tvalue\tunit\tbetter");
    for s in &run.samples {
        let better = infer_better(&s.key, s.unit.as_deref());
        let unit = s.unit.as_deref().unwrap_or("-");
        println!("{}\t{}\t{unit}\t{better:?}", s.key, s.value);
    }
    Ok(i32::from(run.discarded.is_some()))
}
