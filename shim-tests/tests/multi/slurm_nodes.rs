//! `srun --goset` (the SPANK plugin, slurm/goset_spank.c) on a two-node Slurm cluster on this
//! machine: munged on a private socket and key, slurmctld, and two slurmd (`-N n1`, `-N n2`) on
//! loopback ports, each in a mount namespace of its own with a private tmpfs over /run/goset,
//! so that each "node" has its own booking registry and its own copy of goset
//! (`/run/goset/bin`), as separate machines have. Both nodes share this machine's CPUs.
//!
//! The cases: each node's tasks placed in their blocks and booked on their own node; two
//! tasks a node kept apart; the wrapper form; a step without `--goset` untouched; a node whose
//! goset is gone still runs its task, with one line; `#SBATCH --goset` with an srun inside;
//! root-only flags refused and a site default with an opt-out. The cluster is stopped and its
//! files removed afterwards, also when the test fails. Needs root and
//! `apt-get install slurmctld slurmd slurm-client munge libslurm-dev`.

use super::slurm::{find, held, slurm_command, start_munged, stop_daemons, wait_idle};
use shim_tests::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const NODES: [&str; 2] = ["n1", "n2"];

/// Each node's goset-run (and libgoset.so beside it), copied into its private /run/goset: the
/// plugin runs this one, so moving it away breaks one node only.
const NODE_GOSET: &str = "/run/goset/bin/goset-run";

/// Two nodes on this machine; dropping it stops the daemons (the nodes' namespaces and
/// tmpfs go with their slurmd) and removes its directory.
struct TwoNodes {
    dir: tempfile::TempDir,
    /// /run/goset was made here (a mount point for the nodes' tmpfs), and is removed after.
    made_run_goset: bool,
}

impl TwoNodes {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn conf(&self) -> PathBuf {
        self.path("slurm.conf")
    }

    /// Starts the cluster with the plugin built; `None` (skipped) without spank.h.
    fn start() -> Option<TwoNodes> {
        let dir = tempfile::tempdir().unwrap();
        let made_run_goset = !Path::new("/run/goset").exists();
        std::fs::create_dir_all("/run/goset").unwrap();
        let nodes = TwoNodes {
            dir,
            made_run_goset,
        };
        if !shim_tests::tools::build_spank_plugin(&nodes.path("goset_spank.so")) {
            return None;
        }
        for d in ["state", "nodespool"] {
            std::fs::create_dir(nodes.path(d)).unwrap();
        }
        // Slurm's PMIx plugin does not expand %n: each node's spool and PMIx directories are
        // one path, with a private tmpfs over it in each node's namespace.
        let spool = nodes.path("nodespool");
        std::fs::write(
            nodes.path("mpi.conf"),
            format!("PMIxCliTmpDirBase={}\n", spool.display()),
        )
        .unwrap();
        let socket = start_munged(nodes.dir.path());
        let base = 30000 + (std::process::id() % 3000) as u16 * 3;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let cpus = own_allowed().len();
        let node_lines: String = (NODES.iter().enumerate())
            .map(|(i, n)| {
                format!(
                    "NodeName={n} NodeHostname={} NodeAddr=127.0.0.1 Port={} CPUs={cpus} State=UNKNOWN\n",
                    host.trim(),
                    base + 1 + i as u16
                )
            })
            .collect();
        let conf = format!(
            "ClusterName=gosetnodes\nSlurmctldHost=localhost\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n\
             SlurmctldPort={base}\nStateSaveLocation={dir}/state\nSlurmdSpoolDir={dir}/nodespool\n\
             SlurmctldPidFile={dir}/slurmctld.pid\nSlurmdPidFile={dir}/slurmd.%n.pid\n\
             SlurmctldLogFile={dir}/slurmctld.log\nSlurmdLogFile={dir}/slurmd.%n.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/affinity\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nMpiDefault=none\n\
             ReturnToService=2\nJobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             PlugStackConfig={dir}/plugstack.conf\n{node_lines}\
             PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP\n",
            sock = socket.display(),
            dir = nodes.dir.path().display(),
        );
        std::fs::write(nodes.conf(), conf).unwrap();
        nodes.plugstack("");
        let status = Command::new(find("slurmctld").unwrap())
            .arg("-f")
            .arg(nodes.conf())
            .status()
            .unwrap();
        assert!(status.success(), "slurmctld did not start");
        for node in NODES {
            let script = format!(
                "mount -t tmpfs -o mode=755 goset-{node} /run/goset && mkdir /run/goset/bin && \
                 mount -t tmpfs spool-{node} {spool} && \
                 cp {run} {shim} /run/goset/bin/ && exec {slurmd} -N {node} -f {conf}",
                spool = spool.display(),
                run = goset_run_bin().display(),
                shim = shim().display(),
                slurmd = find("slurmd").unwrap().display(),
                conf = nodes.conf().display(),
            );
            let status = Command::new("unshare")
                .args(["-m", "--propagation", "private", "sh", "-c", &script])
                .status()
                .unwrap();
            assert!(status.success(), "slurmd -N {node} did not start");
        }
        wait_idle(&nodes.conf());
        Some(nodes)
    }

    /// Writes plugstack.conf: the plugin, optional, with `args` after the nodes' goset-run.
    /// slurmstepd reads it at each step, srun at each start.
    fn plugstack(&self, args: &str) {
        let line = format!(
            "optional {} goset_run={NODE_GOSET} {args}\n",
            self.path("goset_spank.so").display()
        );
        std::fs::write(self.path("plugstack.conf"), line).unwrap();
    }

    fn command(&self, name: &str) -> Command {
        let mut cmd = slurm_command(&self.conf(), name);
        cmd.current_dir(self.dir.path());
        cmd
    }

    fn srun(&self, args: &[&str]) -> Outcome {
        let mut srun = self.command("srun");
        srun.arg("-l").args(args);
        run(srun)
    }

    /// Runs `script` as root in `node`'s mount namespace.
    fn on_node(&self, node: &str, script: &str) {
        let pid = std::fs::read_to_string(self.path(&format!("slurmd.{node}.pid"))).unwrap();
        let status = Command::new("nsenter")
            .args(["-t", pid.trim(), "-m", "sh", "-c", script])
            .status()
            .unwrap();
        assert!(status.success(), "{node}: {script}");
    }
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        stop_daemons(
            self.dir.path(),
            &[
                "slurmd.n1.pid",
                "slurmd.n2.pid",
                "slurmctld.pid",
                "munged.pid",
            ],
        );
        if self.made_run_goset {
            let _ = std::fs::remove_dir("/run/goset");
        }
    }
}

/// Each task's output (srun -l's `N: ` labels taken off), by task id.
fn by_task(out: &Outcome) -> BTreeMap<u32, Outcome> {
    let mut tasks: BTreeMap<u32, Outcome> = BTreeMap::new();
    for (text, err) in [(&out.stdout, false), (&out.stderr, true)] {
        for line in text.lines() {
            let Some((task, rest)) = line.split_once(": ") else {
                continue;
            };
            let Ok(task) = task.trim().parse::<u32>() else {
                continue;
            };
            let entry = tasks.entry(task).or_insert_with(|| Outcome {
                command: format!("{} (task {task})", out.command),
                status: out.status,
                stdout: String::new(),
                stderr: String::new(),
            });
            let into = if err {
                &mut entry.stderr
            } else {
                &mut entry.stdout
            };
            into.push_str(rest);
            into.push('\n');
        }
    }
    tasks
}

/// The probe's report lines of one task's output, as an Outcome the report parser reads.
fn probe_lines(task: &Outcome) -> Outcome {
    Outcome {
        command: task.command.clone(),
        status: task.status,
        stdout: (task.stdout.lines())
            .filter(|l| l.starts_with("report "))
            .map(|l| format!("{l}\n"))
            .collect(),
        stderr: task.stderr.clone(),
    }
}

/// `srun -N2 -n2 --cpus-per-task=2 --goset`: on each node the probe's two busy threads each
/// hold a CPU of their own, both in the block the task's report names, and the task sees its
/// own node's booking only.
fn each_node_places_and_books_its_own(nodes: &TwoNodes, probe: &Program) {
    let pattern = nodes.path("g-%j.%t.%N.json");
    let goset = format!("--goset=--sample=0,--json={}", pattern.display());
    let script = format!(
        "cat /run/goset/bookings/*.booking; echo; exec {} 2 30",
        probe.path().display()
    );
    let out = nodes.srun(&[
        "-N2",
        "-n2",
        "--cpus-per-task=2",
        &goset,
        "sh",
        "-c",
        &script,
    ]);
    out.expect_code(0);
    let tasks = by_task(&out);
    for (t, node) in NODES.iter().enumerate() {
        let task = &tasks[&(t as u32)];
        let bookings: Vec<&str> = (task.stdout.lines())
            .filter(|l| l.contains("\"slurm\""))
            .collect();
        assert_eq!(bookings.len(), 1, "task {t}: {}", out.dump());
        assert!(
            bookings[0].contains(&format!("node {node}\"")),
            "task {t} on {node} sees another node's booking: {}",
            bookings[0]
        );
        let report = std::fs::read_dir(nodes.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(&format!(".{t}.{node}.json")))
            .unwrap_or_else(|| panic!("no report of task {t} on {node}: {}", out.dump()));
        let block = shim_tests::launch::planned_cpus(&shim_tests::launch::json(&report));
        let cpus = held(&probe_lines(task));
        assert_eq!(cpus.len(), 2, "task {t}: {}", out.dump());
        assert_ne!(cpus[0], cpus[1], "task {t}: two busy threads on one CPU");
        for c in cpus {
            assert!(
                block.contains(&(c as i64)),
                "task {t}: cpu {c} outside its block {block:?}"
            );
        }
        assert!(
            task.stderr.contains(&format!("goset {node} step ")),
            "no summary line of {node}: {}",
            out.dump()
        );
    }
}

/// `srun -N2 -n4`, two tasks on each node of two CPUs: the tasks of one node apart, or one
/// line naming the task that holds the CPUs. It ends: never a hang.
fn two_tasks_a_node_apart(nodes: &TwoNodes, probe: &Program) {
    let path = probe.path().display().to_string();
    let out = nodes.srun(&["-N2", "-n4", "--goset=--sample=0", &path, "1", "30"]);
    out.expect_code(0);
    let tasks = by_task(&out);
    for pair in [[0u32, 1], [2, 3]] {
        let cpus: Vec<Vec<usize>> = pair.iter().map(|t| held(&probe_lines(&tasks[t]))).collect();
        let refused = pair.iter().any(|t| {
            tasks[t].stderr.contains("runs as Slurm placed it")
                && tasks[t].stderr.contains("by task")
        });
        assert!(
            refused || cpus[0] != cpus[1],
            "tasks {pair:?} of one node share a CPU: {}",
            out.dump()
        );
    }
}

/// The wrapper form: goset-run inside each task books on that task's node.
fn wrapper_on_both_nodes(nodes: &TwoNodes, probe: &Program) {
    let run = goset_run_bin().display().to_string();
    let path = probe.path().display().to_string();
    let out = nodes.srun(&[
        "-N2", "-n2", &run, "-q", "-n", "1", "--sample", "0", "--", &path, "1", "30",
    ]);
    out.expect_code(0);
    let tasks = by_task(&out);
    for t in 0..2u32 {
        assert_eq!(held(&probe_lines(&tasks[&t])).len(), 1, "{}", out.dump());
    }
}

/// A step without `--goset`: no libgoset.so, no plan, Slurm's own mask (as
/// `--cpu-bind=verbose` states it), and not a word from goset.
fn untouched_without_goset(nodes: &TwoNodes) {
    let out = nodes.srun(&[
        "-N2",
        "-n2",
        "--cpu-bind=verbose",
        "sh",
        "-c",
        "echo \"preload=$LD_PRELOAD plan=$GOSET_PLAN\"; grep Cpus_allowed: /proc/self/status",
    ]);
    out.expect_code(0);
    assert!(!out.stderr.contains("goset"), "{}", out.dump());
    // Both masks in hex: /proc's groups of 32 bits joined by commas, Slurm's `mask 0x..`.
    let hex = |text: &str, key: &str| {
        let (_, rest) = text.split_once(key)?;
        let digits: String = (rest.split_whitespace().next()?.chars())
            .filter(|c| *c != ',')
            .collect();
        u128::from_str_radix(&digits, 16).ok()
    };
    let tasks = by_task(&out);
    assert_eq!(tasks.len(), 2, "{}", out.dump());
    for (t, task) in tasks {
        assert!(
            task.stdout.contains("preload= plan=\n"),
            "task {t}: {}",
            out.dump()
        );
        let seen = hex(&task.stdout, "Cpus_allowed:");
        let slurm = hex(&task.stderr, "mask 0x");
        assert!(seen.is_some() && seen == slurm, "task {t}: {}", out.dump());
    }
}

/// A node whose goset-run is gone: its task runs as Slurm placed it, with one line saying
/// why; the other node's task is placed.
fn broken_node_still_runs(nodes: &TwoNodes, probe: &Program) {
    nodes.on_node("n2", &format!("mv {NODE_GOSET} {NODE_GOSET}.away"));
    let path = probe.path().display().to_string();
    let out = nodes.srun(&["-N2", "-n2", "--goset=--sample=0", &path, "1", "30"]);
    nodes.on_node("n2", &format!("mv {NODE_GOSET}.away {NODE_GOSET}"));
    out.expect_code(0);
    let tasks = by_task(&out);
    let lines: Vec<&str> = tasks[&1].stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.dump());
    assert!(
        lines[0].starts_with("goset: task 1 runs as Slurm placed it: ")
            && lines[0].contains(NODE_GOSET),
        "{}",
        out.dump()
    );
    assert!(
        tasks[&0].stderr.contains("goset n1 step "),
        "{}",
        out.dump()
    );
}

/// `#SBATCH --goset` reaches the srun inside the batch script (not the script itself).
fn sbatch_with_goset(nodes: &TwoNodes, probe: &Program) {
    let script = nodes.path("job.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n#SBATCH -N2\n#SBATCH -n2\n#SBATCH --goset=--sample=0\nsrun -l {} 1 30\n",
            probe.path().display()
        ),
    )
    .unwrap();
    let output = nodes.path("job.out");
    let mut sbatch = nodes.command("sbatch");
    sbatch.arg("--wait").arg("-o").arg(&output).arg(&script);
    let submitted = run(sbatch);
    submitted.expect_code(0);
    let job = Outcome {
        stdout: std::fs::read_to_string(&output).unwrap_or_default(),
        ..submitted
    };
    let tasks = by_task(&job);
    for (t, node) in NODES.iter().enumerate() {
        let task = &tasks[&(t as u32)];
        assert_eq!(held(&probe_lines(task)).len(), 1, "{}", job.stdout);
        assert!(
            task.stdout.contains(&format!("goset {node} step ")),
            "{}",
            job.stdout
        );
    }
}

/// `--goset` is in the help of srun, sbatch and salloc.
fn listed_in_help(nodes: &TwoNodes) {
    for program in ["srun", "sbatch", "salloc"] {
        let help = nodes.command(program).arg("--help").output().unwrap();
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(text.contains("--goset=[ARGS]"), "{program} --help:\n{text}");
    }
}

/// Root-only flags are refused inside a job; `default=on` places a step without `--goset`,
/// and `--goset=off` opts out.
fn root_flags_and_site_default(nodes: &TwoNodes, probe: &Program) {
    let out = nodes.srun(&["-N1", "-n1", "--goset=--cgroup", "true"]);
    out.expect_code(0);
    assert!(
        out.stderr.contains("--cgroup needs root on the node")
            && out.stderr.contains("allow_root_flags"),
        "{}",
        out.dump()
    );
    nodes.plugstack("default=on");
    let path = probe.path().display().to_string();
    let on = nodes.srun(&["-N1", "-n1", &path, "1", "30"]);
    let off = nodes.srun(&["-N1", "-n1", "--goset=off", &path, "1", "30"]);
    nodes.plugstack("");
    on.expect_code(0);
    // Either node may run it.
    assert!(
        NODES
            .iter()
            .any(|n| on.stderr.contains(&format!("goset {n} step "))),
        "{}",
        on.dump()
    );
    off.expect_code(0);
    assert!(!off.stderr.contains("goset"), "{}", off.dump());
}

/// An Open MPI job across the two nodes (`srun --mpi=pmix`), each rank a 2-thread OpenMP
/// team: every rank's threads each on a CPU of their own, in the block its node gave it.
fn mpi_ranks_keep_to_their_nodes_blocks(nodes: &TwoNodes) {
    if !shim_tests::tools::runs("mpicc") {
        return missing(
            "Open MPI (mpicc)",
            "apt-get install -y openmpi-bin libopenmpi-dev",
        );
    }
    let mpi_list = nodes.command("srun").arg("--mpi=list").output().unwrap();
    let listed =
        String::from_utf8_lossy(&mpi_list.stdout) + String::from_utf8_lossy(&mpi_list.stderr);
    if !listed.contains("pmix") {
        return missing(
            "Slurm's PMIx plugin",
            "apt-get install slurmd (Debian's has mpi/pmix)",
        );
    }
    let rank = nodes.path("mpi_omp");
    let built = Command::new("mpicc")
        .args(["-fopenmp", "-O1", "-I"])
        .arg(programs_dir())
        .arg("-o")
        .arg(&rank)
        .arg(programs_dir().join("mpi_omp.c"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let pattern = nodes.path("mpi-%t.%N.json");
    let goset = format!("--goset=--sample=0,--json={}", pattern.display());
    let rank = rank.display().to_string();
    let out = nodes.srun(&[
        "-N2",
        "-n2",
        "--cpus-per-task=2",
        "--mpi=pmix",
        &goset,
        &rank,
    ]);
    out.expect_code(0);
    let tasks = by_task(&out);
    for (t, node) in NODES.iter().enumerate() {
        let team = shim_tests::report::reports(&probe_lines(&tasks[&(t as u32)]));
        let block = shim_tests::launch::planned_cpus(&shim_tests::launch::json(
            &nodes.path(&format!("mpi-{t}.{node}.json")),
        ));
        let mut cpus: Vec<usize> = team.iter().map(|r| r.single_cpu()).collect();
        assert_eq!(cpus.len(), 2, "rank {t}: {}", out.dump());
        assert!(
            cpus.iter().all(|&c| block.contains(&(c as i64))),
            "rank {t} on {node}: {cpus:?} outside its block {block:?}"
        );
        cpus.sort_unstable();
        cpus.dedup();
        assert_eq!(
            cpus.len(),
            2,
            "rank {t}: two threads on one CPU: {}",
            out.dump()
        );
    }
}

#[test]
fn srun_goset_places_every_nodes_tasks_on_two_nodes() {
    if !is_root() {
        return skip_note("a Slurm cluster of our own needs root (CI runs as root)");
    }
    let daemons = [
        "munged",
        "slurmctld",
        "slurmd",
        "srun",
        "sbatch",
        "unshare",
        "nsenter",
    ];
    if daemons.iter().any(|d| find(d).is_none()) {
        return missing(
            "Slurm",
            "apt-get install slurmctld slurmd slurm-client munge",
        );
    }
    let Some(probe) = Program::c("placed_threads.c") else {
        return;
    };
    if own_allowed().len() < 2 {
        return skip_note("needs 2 CPUs");
    }
    let _serial = launcher_lock();
    let Some(nodes) = TwoNodes::start() else {
        return;
    };
    listed_in_help(&nodes);
    each_node_places_and_books_its_own(&nodes, &probe);
    two_tasks_a_node_apart(&nodes, &probe);
    wrapper_on_both_nodes(&nodes, &probe);
    untouched_without_goset(&nodes);
    broken_node_still_runs(&nodes, &probe);
    sbatch_with_goset(&nodes, &probe);
    root_flags_and_site_default(&nodes, &probe);
    mpi_ranks_keep_to_their_nodes_blocks(&nodes);
}
