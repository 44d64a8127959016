//! goset-run under a real Slurm, whose ranks book CPUs like concurrent runs: a single-node cluster
//! on this machine (munged, slurmctld and slurmd from Debian's packages, configuration written
//! here, controller and node on localhost), `srun -n 2` and `sbatch` jobs through goset-run. Each
//! rank's busy thread must hold a CPU of its own, read by the thread itself from `/proc` inside the
//! job. The cluster is stopped and its files removed afterwards, also when the test fails. Needs
//! root (the daemons run as root here) and `apt-get install slurmctld slurmd slurm-client munge`.

use shim_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const DAEMONS: [&str; 5] = ["munged", "slurmctld", "slurmd", "srun", "sbatch"];

pub(super) fn find(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// Starts munged with a fresh key of its own, on a socket in `dir` (returned), with its pid
/// file `dir/munged.pid`.
pub(super) fn start_munged(dir: &Path) -> PathBuf {
    let p = |n: &str| dir.join(n);
    let mut key = vec![0u8; 128];
    let mut urandom = std::fs::File::open("/dev/urandom").unwrap();
    std::io::Read::read_exact(&mut urandom, &mut key).unwrap();
    std::fs::write(p("munge.key"), &key).unwrap();
    std::fs::set_permissions(
        p("munge.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let socket = p("munge.sock");
    let status = Command::new(find("munged").unwrap())
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--key-file={}", p("munge.key").display()))
        .arg(format!("--pid-file={}", p("munged.pid").display()))
        .arg(format!("--log-file={}", p("munged.log").display()))
        .arg(format!("--seed-file={}", p("munged.seed").display()))
        .arg("--force")
        .status()
        .unwrap();
    assert!(status.success(), "munged did not start");
    socket
}

/// Stops the daemons whose pid files in `dir` are named, in order: SIGTERM, SIGKILL after 5 s.
pub(super) fn stop_daemons(dir: &Path, pid_files: &[&str]) {
    for pid_file in pid_files {
        let Some(pid) = std::fs::read_to_string(dir.join(pid_file))
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill takes a pid and a signal; SIGKILL after 5 s of SIGTERM.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// A running single-node cluster in a private directory; dropping it stops the daemons (by
/// their pid files) and removes the directory.
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster { dir };
        let p = |n: &str| cluster.path(n);
        for d in ["spool", "state"] {
            std::fs::create_dir(p(d)).unwrap();
        }
        let socket = start_munged(cluster.dir.path());
        // Ports of our own, away from a real cluster's 6817/6818.
        let base = 40000 + (std::process::id() % 10000) as u16 * 2 % 20000;
        let cpus = own_allowed().len();
        let conf = format!(
            "ClusterName=gosettest\nSlurmctldHost=localhost\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n\
             SlurmctldPort={ctld}\nSlurmdPort={d}\nStateSaveLocation={dir}/state\n\
             SlurmdSpoolDir={dir}/spool\nSlurmctldPidFile={dir}/slurmctld.pid\n\
             SlurmdPidFile={dir}/slurmd.pid\nSlurmctldLogFile={dir}/slurmctld.log\n\
             SlurmdLogFile={dir}/slurmd.log\nProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/affinity\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             MpiDefault=none\nReturnToService=2\nJobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             NodeName=localhost CPUs={cpus} State=UNKNOWN\n\
             PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            sock = socket.display(),
            ctld = base,
            d = base + 1,
            dir = cluster.dir.path().display(),
        );
        std::fs::write(cluster.conf(), conf).unwrap();
        for daemon in ["slurmctld", "slurmd"] {
            let status = Command::new(find(daemon).unwrap())
                .arg("-f")
                .arg(cluster.conf())
                .status()
                .unwrap();
            assert!(status.success(), "{daemon} did not start");
        }
        wait_idle(&cluster.conf());
        cluster
    }

    /// A Slurm client command talking to this cluster.
    fn command(&self, name: &str) -> Command {
        slurm_command(&self.conf(), name)
    }
}

/// A Slurm client command talking to the cluster of `conf`.
pub(super) fn slurm_command(conf: &Path, name: &str) -> Command {
    let mut cmd = clean_command(find(name).unwrap_or_else(|| name.into()));
    cmd.env("SLURM_CONF", conf);
    cmd
}

/// Waits until every node of the cluster of `conf` is idle (sinfo's one state).
pub(super) fn wait_idle(conf: &Path) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let out = slurm_command(conf, "sinfo")
            .args(["-h", "-o", "%T"])
            .output();
        let state = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if state.as_deref().is_ok_and(|s| s == "idle") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the nodes never came up: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        stop_daemons(
            self.dir.path(),
            &["slurmd.pid", "slurmctld.pid", "munged.pid"],
        );
    }
}

/// The CPU each busy thread held, from placed_threads' reports.
pub(super) fn held(out: &Outcome) -> Vec<usize> {
    reports(out)
        .iter()
        .filter(|r| r.role == "busy")
        .map(|r| r.field("held").parse().expect("held a CPU"))
        .collect()
}

/// `srun -n 2` of `goset-run -n 1`, with Slurm's binding off and on: the ranks' busy threads
/// on two CPUs.
fn srun_ranks_apart(cluster: &Cluster, threads: &Program) {
    // Slurm's own binding off, only goset's bookings keep the two ranks apart; on, each rank is
    // given one CPU and goset-run stays in it.
    for bind in ["--cpu-bind=none", "--cpu-bind=cores"] {
        let mut srun = cluster.command("srun");
        srun.args(["-n", "2", bind])
            .arg(goset_run_bin())
            .args(["-q", "-n", "1", "--sample", "0", "--"])
            .arg(threads.path())
            .args(["1", "30"]);
        let out = run(srun);
        out.expect_code(0);
        let cpus = held(&out);
        assert_eq!(cpus.len(), 2, "{bind}: {}", out.dump());
        assert_ne!(
            cpus[0],
            cpus[1],
            "{bind}: two ranks on one CPU\n{}",
            out.dump()
        );
    }
}

/// Stops the cluster: every daemon it started ended and its directory removed.
fn stop_and_check_gone(cluster: Cluster) {
    let pids: Vec<i32> = ["slurmd.pid", "slurmctld.pid", "munged.pid"]
        .iter()
        .filter_map(|f| {
            std::fs::read_to_string(cluster.path(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(pids.len(), 3, "each daemon wrote its pid");
    let dir = cluster.dir.path().to_path_buf();
    drop(cluster);
    for pid in pids {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = state
            .rsplit_once(')')
            .map(|(_, r)| r.trim_start().chars().next());
        assert!(
            matches!(state, None | Some(Some('Z'))),
            "daemon {pid} still runs"
        );
    }
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn srun_and_sbatch_through_goset_run_give_each_rank_its_own_cpu() {
    if !is_root() {
        skip_note("a Slurm cluster of our own needs root (CI runs as root)");
        return;
    }
    if DAEMONS.iter().any(|d| find(d).is_none()) {
        return missing(
            "Slurm",
            "apt-get install slurmctld slurmd slurm-client munge",
        );
    }
    let Some(threads) = Program::c("placed_threads.c") else {
        return;
    };
    if own_allowed().len() < 2 {
        return skip_note("needs 2 CPUs");
    }
    let cluster = Cluster::start();
    let _serial = launcher_lock();
    srun_ranks_apart(&cluster, &threads);

    // A batch job.
    let output = cluster.path("job.out");
    let mut sbatch = cluster.command("sbatch");
    sbatch
        .args(["--wait", "-n", "1", "-o"])
        .arg(&output)
        .arg(format!(
            "--wrap={} -q -n 1 --sample 0 -- {} 1 30",
            goset_run_bin().display(),
            threads.path().display()
        ));
    let submitted = run(sbatch);
    submitted.expect_code(0);
    let job = Outcome {
        stdout: std::fs::read_to_string(&output).unwrap_or_default(),
        ..submitted
    };
    assert_eq!(held(&job).len(), 1, "{}", job.stdout);

    stop_and_check_gone(cluster);
}
