//! goset inside small QEMU guests with the topologies this machine lacks: SMT siblings, several
//! packages and NUMA nodes. One boot per topology runs every scenario; each scenario
//! is checked from inside the guest (the threads' own `Cpus_allowed_list`, `get_mempolicy`,
//! `/proc/self/numa_maps`, sysfs), never from goset's report:
//! - `goset topology --json` against the guest's sysfs (siblings, nodes);
//! - `--smt spread` puts the workers on distinct cores, `--smt pack` fills cores (SMT guests);
//! - `-n` = every CPU gives every thread a CPU of its own, also again and again under a busy
//!   loop, with the shim and with a static program the housekeeper places;
//! - the housekeeper on a core no task CPU is on; a busy CPU's core avoided by `--sample 250`;
//! - with fewer task CPUs than cores, CPU 0's core is left out;
//! - `--numa auto` keeps the task on the biggest node; `--numa` binds memory to the node;
//!   `--numa N` with a node too small for `-n` is a usage error (exit 2) naming the node's size;
//! - libgomp and libomp teams, one thread per planned CPU;
//! - several processes with OpenMP teams (`--per-process`, a user's `OMP_NUM_THREADS`,
//!   `--instances`): each process on one node and on cores no other process uses;
//! - a `taskset` mask and a cgroup v2 cpuset bound the task; an offline CPU is never planned.
//!
//! `GOSET_VM_CONSOLE=DIR` keeps each guest's console in `DIR/console-<smp>.txt`.
//!
//! Needs `qemu-system-x86`, `busybox-static`, `cpio` and a kernel fetched by
//! `shim-tests/vm/fetch-kernel.sh` (into `target/vm/`, or `GOSET_VM_KERNEL`); skips without
//! them, fails under `CI=true`. Software emulation (TCG): a guest takes 80-100 s here.

use shim_tests::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One guest shape: `-smp` and the CPUs of each NUMA node (128 MiB each).
struct Shape {
    name: &'static str,
    smp: &'static str,
    nodes: &'static [&'static str],
    smt: bool,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "2 sockets x 2 cores x 2 threads, 2 nodes",
        smp: "8,sockets=2,cores=2,threads=2",
        nodes: &["0-3", "4-7"],
        smt: true,
    },
    Shape {
        name: "1 socket x 4 cores x 2 threads, 1 node",
        smp: "8,sockets=1,cores=4,threads=2",
        nodes: &["0-7"],
        smt: true,
    },
    Shape {
        name: "6 CPUs in 3 nodes of 1, 2 and 3",
        smp: "6,sockets=1,cores=6,threads=1",
        nodes: &["0", "1-2", "3-5"],
        smt: false,
    },
];

/// A boot never takes longer (about 100 s here for some 60 scenarios, each of which gives up
/// after [`SCENARIO_LIMIT_S`]): a guest past it is killed.
const BOOT_DEADLINE: Duration = Duration::from_secs(480);

fn kernel() -> Option<PathBuf> {
    let path = std::env::var_os("GOSET_VM_KERNEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/vm/vmlinux"));
    if path.is_file() {
        return Some(path);
    }
    missing(
        &format!("the guest kernel {}", path.display()),
        "shim-tests/vm/fetch-kernel.sh",
    );
    None
}

/// The tools a guest needs, or `None` (skipped; failed under CI) when one is missing.
fn tools() -> Option<()> {
    let need = [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("cpio", "cpio"),
        ("gzip", "gzip"),
        ("strip", "binutils"),
    ];
    for (tool, package) in need {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .map_or(true, |s| !s.success())
        {
            missing(
                tool,
                &format!("apt-get install -y --no-install-recommends {package}"),
            );
            return None;
        }
    }
    if !Path::new("/bin/busybox").is_file() {
        missing("/bin/busybox", "apt-get install -y busybox-static");
        return None;
    }
    Some(())
}

/// Copies `file` to the same path under `root`, creating directories.
fn put(root: &Path, file: &Path, at: &str) {
    let dest = root.join(at.trim_start_matches('/'));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(file, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
}

/// The shared libraries `ldd` names for `exe`, the loader included.
fn libraries(exe: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(exe).output().expect("ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split_whitespace().find(|w| w.starts_with('/'))?;
            Some(PathBuf::from(path))
        })
        .collect()
}

/// A scenario gives up after this many seconds (killed by the guest's `timeout`), so that one
/// that hangs is named in the results instead of stalling the guest.
const SCENARIO_LIMIT_S: u32 = 60;

/// How many times the `-n` = every CPU scenario runs under a busy loop, per program kind.
const BUSY_REPEATS: usize = 20;

/// The CPU a noise scenario keeps busy and the CPU a hotplug scenario takes offline: never
/// CPU 0 (whose core is avoided anyway), and on SMT guests a CPU whose sibling is quiet.
const BUSY_CPU: usize = 2;
const OFFLINE_CPU: usize = 3;

/// The programs in the guest, by their paths there.
const RUN: &str = "/opt/goset/goset-run -q --log /tmp/placement.log --sample 0";
const RUN_SAMPLED: &str = "/opt/goset/goset-run -q --log /tmp/placement.log --sample 250";
/// The placement log every run in the guest keeps.
const LOG: &str = "/tmp/placement.log";
const THREADS: &str = "/opt/t/placed_threads";
const THREADS_STATIC: &str = "/opt/t/placed_threads_static";
const NUMA_MEMORY: &str = "/opt/t/numa_memory";
const OMP_GOMP: &str = "/opt/t/omp_gomp";
const OMP_LLVM: &str = "/opt/t/omp_llvm";

/// The guest's `/init` being written: setup lines, and scenarios between markers.
struct Init(String);

impl Init {
    fn line(&mut self, line: &str) {
        self.0.push_str(line);
        self.0.push('\n');
    }

    /// A scenario: `cmd` under the guest's `timeout`, its exit code, its stderr, and when it
    /// failed (neither 0 nor a usage error) goset-run's placement log, for the message.
    fn scenario(&mut self, name: &str, cmd: &str) {
        self.scenario_after(name, ":", cmd)
    }

    /// A [`Self::scenario`] whose text starts with what `before` prints.
    fn scenario_after(&mut self, name: &str, before: &str, cmd: &str) {
        self.line(&format!(
            "echo '== SCENARIO {name}'\n{before}\nrm -f {LOG}\n\
             timeout -s KILL {SCENARIO_LIMIT_S} {cmd} 2>/tmp/err; rc=$?; echo \"== RC $rc\"\n\
             sed 's/^/stderr /' /tmp/err; case $rc in 0|2) ;; *) sed 's/^/log /' {LOG};; esac"
        ));
    }

    /// A [`Self::scenario`] that keeps goset-run's placement log in its text whatever the
    /// outcome, for the message of a check that fails on a run that succeeded.
    fn scenario_logged(&mut self, name: &str, cmd: &str) {
        self.scenario(name, cmd);
        self.line(&format!("case $rc in 0|2) sed 's/^/log /' {LOG};; esac"));
    }
}

/// The guest's `/init`: the facts of its sysfs, then each scenario between markers.
fn init_script(shape: &Shape, llvm: bool) -> String {
    let sizes: Vec<usize> = shape.nodes.iter().map(|l| cpulist(l).len()).collect();
    let biggest = *sizes.iter().max().unwrap();
    let (small, small_size) = sizes
        .iter()
        .enumerate()
        .min_by_key(|(_, s)| **s)
        .map(|(i, s)| (i, *s))
        .unwrap();
    let last_node = shape.nodes.len() - 1;
    let all: usize = sizes.iter().sum();
    let cores = if shape.smt { all / 2 } else { all };
    let mut s = Init(String::from(
        "#!/bin/busybox sh\n/bin/busybox mkdir -p /bin /proc /sys /dev /tmp /run\n\
         /bin/busybox --install -s /bin\n\
         mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev\n\
         mount -t tmpfs tmp /tmp; mount -t tmpfs run /run; mount -t cgroup2 cgroup2 /sys/fs/cgroup\n\
         mkdir /dev/shm; mount -t tmpfs shm /dev/shm\n\
         echo '== BEGIN'\n\
         for c in /sys/devices/system/cpu/cpu[0-9]*; do echo \"sib ${c##*cpu} $(cat $c/topology/thread_siblings_list)\"; done\n\
         for n in /sys/devices/system/node/node[0-9]*; do echo \"node ${n##*node} $(cat $n/cpulist)\"; done\n\
         echo \"topology $(/opt/goset/goset topology --json | tr -d '\\n')\"\n",
    ));
    // The main thread takes slot 0; the workers take the others.
    if shape.smt {
        s.scenario(
            "spread",
            &format!("{RUN} -n 4 --smt spread -- {THREADS} 3 30"),
        );
        s.scenario("pack", &format!("{RUN} -n 4 --smt pack -- {THREADS} 3 30"));
    }
    s.scenario(
        "every-cpu",
        &format!("{RUN} -n {all} -- {THREADS} {} 30 0.2 main", all - 1),
    );
    // Again and again with a busy loop competing for every CPU, with the shim placing the
    // threads and with the housekeeper placing them all (a static program).
    s.line("sh -c 'while :; do :; done' & busy=$!");
    for i in 0..BUSY_REPEATS {
        s.scenario(
            &format!("every-cpu-busy-{i}"),
            &format!("{RUN} -n {all} -- {THREADS} {} 30 0.2 main", all - 1),
        );
        s.scenario(
            &format!("every-cpu-busy-static-{i}"),
            &format!("{RUN} -n {all} -- {THREADS_STATIC} {} 30 0.2 main", all - 1),
        );
    }
    s.line("kill $busy; wait $busy 2>/dev/null");
    // A static program: every thread placed by the housekeeper, which sits on a core of its
    // own (the guests have more cores than 3).
    s.scenario(
        "static",
        &format!("{RUN} -n 3 --smt spread -- {THREADS_STATIC} 3 30 0.2 main,parent"),
    );
    // Noise: a busy loop on a CPU that is otherwise among the quietest.
    s.line(&format!(
        "taskset -c {BUSY_CPU} sh -c 'while :; do :; done' & busy=$!"
    ));
    let noisy_n = cores - 1;
    s.scenario(
        "noise",
        &format!(
            "{RUN_SAMPLED} -n {noisy_n} --smt spread -- {THREADS} {} 30 0.2 main",
            noisy_n - 1
        ),
    );
    s.line("kill $busy; wait $busy 2>/dev/null");
    let workers = biggest - 1;
    if workers > 0 {
        s.scenario(
            "numa-auto",
            &format!("{RUN} -n {biggest} --numa auto -- {THREADS} {workers} 30"),
        );
    }
    s.scenario(
        "memory-numa-auto",
        &format!("{RUN} -n {biggest} --numa auto -- {NUMA_MEMORY}"),
    );
    s.scenario(
        "memory-numa-last",
        &format!("{RUN} -n 1 --numa {last_node} -- {NUMA_MEMORY}"),
    );
    s.scenario("memory-default", &format!("{RUN} -n 2 -- {NUMA_MEMORY}"));
    // Fewer task CPUs than cores: CPU 0's core (the kernel's favourite for its own work) is
    // left out when the cores are otherwise equal.
    s.scenario(
        "cpu0-core-avoided",
        &format!(
            "{RUN} -n {} --smt spread -- {THREADS} {} 30",
            cores - 1,
            cores - 2
        ),
    );
    // OpenMP teams sized by goset (OMP_NUM_THREADS = -n).
    s.scenario("omp-gomp", &format!("{RUN} -n 4 -- {OMP_GOMP}"));
    // Several processes, each with its team: each must keep to one node and to cores of its
    // own (see check_processes).
    for (name, cmd) in process_scenarios(shape, all) {
        s.scenario_logged(&name, &cmd);
    }
    if llvm {
        s.scenario("omp-llvm", &format!("{RUN} -n 6 -- {OMP_LLVM}"));
    }
    // Isolation (`--cgroup`, `--fence`, `--steer`) on cgroup v2, before anything enabled cpuset below the root: the
    // task reports its group and the group's files from inside, then resets its mask to every
    // CPU (taskset) before exec'ing a static program that the housekeeper places.
    let in_group = |program: &str| {
        format!(
            "sh -c 'g=$(cut -d: -f3 /proc/self/cgroup); \
             echo \"cg $g $(cat /sys/fs/cgroup$g/cpuset.cpus) $(cat /sys/fs/cgroup$g/cpuset.mems)\"; \
             exec taskset -c 0-{} {program}'",
            all - 1
        )
    };
    let after_group = "echo \"cgroup-after subtree=[$(cat /sys/fs/cgroup/cgroup.subtree_control)] \
         groups=[$(ls -d /sys/fs/cgroup/goset-* 2>/dev/null)]\"";
    s.scenario(
        "cgroup-v2",
        &format!(
            "{RUN} -n 3 --cgroup -- {}",
            in_group(&format!("{THREADS_STATIC} 2 30 0.2 main"))
        ),
    );
    s.line(after_group);
    if shape.smt {
        s.scenario(
            "fence",
            &format!(
                "{RUN} -n 2 --smt spread --cgroup --fence -- {}",
                in_group(&format!("{THREADS_STATIC} 1 30 0.2 main"))
            ),
        );
        s.line(after_group);
    }
    // --steer: the IRQs before, as the task sees them, and after; the report says which
    // writes the kernel refused.
    let irqs = |tag: &str| {
        format!(
            "for i in /proc/irq/[0-9]*; do echo \"{tag} ${{i##*/}} $(cat $i/smp_affinity_list)\"; done"
        )
    };
    s.scenario_after(
        "steer",
        &irqs("irq-before"),
        &format!(
            "{RUN} -n 2 --steer --json /tmp/steer.json -- sh -c '{}; exec {THREADS} 1 30 0.2 main'",
            irqs("irq-during")
        ),
    );
    s.line(&irqs("irq-after"));
    s.line("echo \"json $(tr -d '\\n' < /tmp/steer.json)\"");
    // The launcher's own mask (taskset) and a cgroup v2 cpuset bound the task.
    s.scenario(
        "taskset",
        &format!(
            "taskset -c {} {RUN} -n 2 -- {THREADS} 1 30",
            shape.nodes.last().unwrap()
        ),
    );
    s.line(
        "echo +cpuset > /sys/fs/cgroup/cgroup.subtree_control; mkdir /sys/fs/cgroup/box; \
         echo 1,3,5 > /sys/fs/cgroup/box/cpuset.cpus",
    );
    let in_box = "sh -c 'echo $$ > /sys/fs/cgroup/box/cgroup.procs && exec \"$@\"' sh";
    s.scenario(
        "cpuset",
        &format!("{in_box} {RUN} -n 3 -- {THREADS} 2 30 0.2 main"),
    );
    s.scenario(
        "cpuset-too-many",
        &format!("{in_box} {RUN} -n 4 -- {THREADS} 3 30"),
    );
    // A CPU taken offline before the run is never planned.
    s.line(&format!(
        "echo 0 > /sys/devices/system/cpu/cpu{OFFLINE_CPU}/online"
    ));
    s.scenario(
        "hotplug",
        &format!("{RUN} -n {} -- {THREADS} {} 30 0.2 main", all - 1, all - 2),
    );
    s.line(&format!(
        "echo 1 > /sys/devices/system/cpu/cpu{OFFLINE_CPU}/online"
    ));
    s.scenario(
        "numa-too-small",
        &format!(
            "{RUN} -n {} --numa {small} -- {THREADS} 1 30",
            small_size + 1
        ),
    );
    s.line("echo '== END'\npoweroff -f");
    s.0
}

/// The multi-process scenarios of `shape` (`all` CPUs): `procs-P-T-SMT` runs P OpenMP
/// processes of T threads under a shell with `--per-process T`; `procs-implicit` sizes them
/// with the user's `OMP_NUM_THREADS` alone; `instances-K` starts K copies. The uneven guest
/// (nodes of 1, 2 and 3 CPUs) has room for two node-local blocks of 2.
fn process_scenarios(shape: &Shape, all: usize) -> Vec<(String, String)> {
    let jobs = |p: usize, env: &str| {
        let one = format!("{env}{OMP_GOMP} & ");
        format!("sh -c '{}wait'", one.repeat(p))
    };
    let mut out = Vec::new();
    let shapes: &[(usize, usize)] = if shape.smt {
        &[(2, 4), (4, 2)]
    } else {
        &[(2, 2)]
    };
    let policies: &[&str] = if shape.smt {
        &["spread", "pack"]
    } else {
        &["spread"]
    };
    for &(p, t) in shapes {
        for smt in policies {
            out.push((
                format!("procs-{p}-{t}-{smt}"),
                format!(
                    "{RUN} -n {all} --smt {smt} --per-process {t} -- {}",
                    jobs(p, "")
                ),
            ));
        }
    }
    let (p, t) = shapes[shapes.len() - 1];
    out.push((
        format!("procs-implicit-{p}-{t}"),
        format!(
            "{RUN} -n {all} -- {}",
            jobs(p, &format!("OMP_NUM_THREADS={t} "))
        ),
    ));
    let (k, t) = shapes[0];
    out.push((
        format!("instances-{k}-{t}"),
        format!("{RUN} -n {all} --instances {k} --per-process {t} -- {OMP_GOMP}"),
    ));
    out
}

/// Checks the multi-process scenarios: in each, the expected number of processes, each
/// OpenMP team the size asked for, every thread on one CPU, each process's CPUs on one node,
/// and no core shared by two processes. Read from the threads' own reports (`sched_getcpu`,
/// `Cpus_allowed_list`).
fn check_processes(shape: &Shape, c: &Console, node_of: &dyn Fn(usize) -> usize) {
    let name = shape.name;
    let all = c.siblings.len();
    for (scenario, _) in process_scenarios(shape, all) {
        let s = &c.scenarios[&scenario];
        assert_eq!(s.code, 0, "{name}: {scenario}:\n{}", s.text);
        let numbers: Vec<usize> = (scenario.split('-'))
            .filter_map(|w| w.parse().ok())
            .collect();
        let (p, t) = (numbers[0], numbers[1]);
        let team = with_role(&s.reports, "omp");
        let mut by_pid: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for r in &team {
            assert_eq!(
                r.field("team"),
                t.to_string(),
                "{name}: {scenario}: {}",
                r.line
            );
            by_pid.entry(r.pid).or_default().push(r.single_cpu());
        }
        assert_eq!(by_pid.len(), p, "{name}: {scenario}: processes\n{}", s.text);
        let mut core_owner: BTreeMap<Vec<usize>, u32> = BTreeMap::new();
        for (pid, cpus) in &by_pid {
            assert_eq!(cpus.len(), t, "{name}: {scenario}: pid {pid}\n{}", s.text);
            let nodes: BTreeSet<usize> = cpus.iter().map(|&c| node_of(c)).collect();
            assert_eq!(
                nodes.len(),
                1,
                "{name}: {scenario}: pid {pid} straddles nodes {cpus:?}\n{}",
                s.text
            );
            for &cpu in cpus {
                let owner = core_owner.entry(c.siblings[&cpu].clone()).or_insert(*pid);
                assert_eq!(
                    owner, pid,
                    "{name}: {scenario}: core of CPU {cpu} shared\n{}",
                    s.text
                );
            }
        }
    }
}

/// Builds the initramfs for `shape` in `dir`, with the test `programs` at their guest paths.
fn initramfs(dir: &Path, shape: &Shape, programs: &[(&Path, &str)], llvm: bool) -> PathBuf {
    let root = dir.join("root");
    put(&root, Path::new("/bin/busybox"), "/bin/busybox");
    let ours = [
        (goset_run_bin(), "/opt/goset/goset-run"),
        (goset_run_bin().with_file_name("goset"), "/opt/goset/goset"),
        (shim(), "/opt/goset/libgoset.so"),
    ];
    let ours = ours.iter().map(|(path, at)| (path.as_path(), *at));
    for (built_path, at) in ours.chain(programs.iter().copied()) {
        put(&root, built_path, at);
        let dest = root.join(at.trim_start_matches('/'));
        // Debug builds carry ~15 MB of debug info each: the guest needs none of it.
        let _ = Command::new("strip").arg(&dest).status();
        for lib in libraries(built_path) {
            put(&root, &lib, lib.to_str().unwrap());
        }
    }
    let init = root.join("init");
    std::fs::write(&init, init_script(shape, llvm)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
    let image = dir.join("initrd.gz");
    let status = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > \"$2\"")
        .arg("sh")
        .arg(&root)
        .arg(&image)
        .status()
        .unwrap();
    assert!(status.success(), "cpio of the initramfs");
    image
}

/// Boots `shape` and returns what the guest printed on its serial console. A guest that does
/// not finish in [`BOOT_DEADLINE`] is killed and booted once more: under software emulation a
/// guest has been seen to stall (1 run of the test in about 17 here, cause not yet found); a
/// second stall fails the test, with what the guest printed.
fn boot(shape: &Shape, kernel: &Path, initrd: &Path) -> String {
    match boot_once(shape, kernel, initrd) {
        Ok(text) => text,
        Err(stalled) => {
            // Straight to stderr: the harness keeps a passing test's eprintln! to itself.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "{}: the guest ran past {BOOT_DEADLINE:?}, killed; booting again. It printed:\n{stalled}",
                shape.name
            );
            boot_once(shape, kernel, initrd).unwrap_or_else(|text| {
                panic!(
                    "{}: the guest ran past {BOOT_DEADLINE:?} twice: killed\n{text}",
                    shape.name
                )
            })
        }
    }
}

/// One boot: the console, or `Err` with what it printed when it ran past the deadline.
fn boot_once(shape: &Shape, kernel: &Path, initrd: &Path) -> Result<String, String> {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args([
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max,vendor=GenuineIntel",
    ])
    .args(["-smp", shape.smp])
    .args(["-m", &(128 * shape.nodes.len()).to_string()]);
    for (id, cpus) in shape.nodes.iter().enumerate() {
        cmd.args(["-object", &format!("memory-backend-ram,id=m{id},size=128M")]);
        let cpus = cpus.replace(',', ",cpus=");
        cmd.args([
            "-numa",
            &format!("node,nodeid={id},cpus={cpus},memdev=m{id}"),
        ]);
    }
    cmd.arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            "console=ttyS0 mitigations=off panic=-1 quiet",
            "-nographic",
            "-no-reboot",
            "-display",
            "none",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: prctl in the child before exec; no memory is passed.
    unsafe {
        cmd.pre_exec(|| {
            // QEMU dies with the test, however the test ends.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start qemu-system-x86_64");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = out.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).replace('\r', "")
    });
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > BOOT_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(reader.join().unwrap())
}

/// One scenario's exit code, reports and stderr.
struct Scenario {
    code: i32,
    reports: Vec<Report>,
    stderr: String,
    text: String,
}

/// What the guest printed, split: sysfs facts, the topology JSON, the scenarios.
struct Console {
    siblings: BTreeMap<usize, Vec<usize>>,
    nodes: BTreeMap<usize, Vec<usize>>,
    topology: serde_json::Value,
    scenarios: BTreeMap<String, Scenario>,
}

/// `<number> <cpulist>` of a `sib` or `node` line.
fn number_and_cpus(rest: &str, text: &str) -> (usize, Vec<usize>) {
    let (number, list) = rest.split_once(' ').unwrap_or((rest, ""));
    let number = (number.parse()).unwrap_or_else(|_| panic!("odd line {rest:?}:\n{text}"));
    (number, cpulist(list))
}

/// A line without the `[i] ` that goset-run puts before each line of copy `i`
/// (`--instances`).
fn strip_instance(line: &str) -> &str {
    line.strip_prefix('[')
        .and_then(|rest| rest.split_once("] "))
        .filter(|(i, _)| i.parse::<usize>().is_ok())
        .map_or(line, |(_, rest)| rest)
}

fn parse_console(text: &str) -> Console {
    let body = text
        .split_once("== BEGIN\n")
        .and_then(|(_, rest)| rest.split_once("== END"))
        .map(|(body, _)| body)
        .unwrap_or_else(|| panic!("the guest did not run its checks:\n{text}"));
    let (mut siblings, mut nodes) = (BTreeMap::new(), BTreeMap::new());
    let mut topology = serde_json::Value::Null;
    let mut scenarios = BTreeMap::new();
    let mut current: Option<(String, Scenario)> = None;
    for line in body.lines() {
        if let Some(name) = line.strip_prefix("== SCENARIO ") {
            let fresh = Scenario {
                code: -1,
                reports: Vec::new(),
                stderr: String::new(),
                text: String::new(),
            };
            if let Some((n, s)) = current.replace((name.to_string(), fresh)) {
                scenarios.insert(n, s);
            }
        } else if let Some((_, s)) = current.as_mut() {
            s.text.push_str(line);
            s.text.push('\n');
            if let Some(rc) = line.strip_prefix("== RC ") {
                s.code = rc.trim().parse().unwrap();
            } else if let Some(err) = line.strip_prefix("stderr ") {
                s.stderr.push_str(err);
                s.stderr.push('\n');
            } else if let Some(r) = parse_line(strip_instance(line)) {
                s.reports.push(r);
            }
        } else if let Some(rest) = line.strip_prefix("sib ") {
            let (cpu, list) = number_and_cpus(rest, text);
            siblings.insert(cpu, list);
        } else if let Some(rest) = line.strip_prefix("node ") {
            let (id, list) = number_and_cpus(rest, text);
            nodes.insert(id, list);
        } else if let Some(json) = line.strip_prefix("topology ") {
            topology = serde_json::from_str(json).unwrap_or_else(|e| {
                panic!("goset topology --json is not JSON ({e}): {json}\n{text}")
            });
        }
    }
    if let Some((n, s)) = current {
        scenarios.insert(n, s);
    }
    Console {
        siblings,
        nodes,
        topology,
        scenarios,
    }
}

/// The one CPU each thread of `roles` was allowed at the end (one each, or the scenario failed).
fn cpus_of(name: &str, s: &Scenario, roles: &[&str]) -> Vec<usize> {
    assert_eq!(s.code, 0, "{name}:\n{}", s.text);
    let threads: Vec<&Report> = roles
        .iter()
        .flat_map(|r| with_role(&s.reports, r))
        .collect();
    assert!(!threads.is_empty(), "{name}: no reports:\n{}", s.text);
    threads
        .iter()
        .map(|r| {
            assert_eq!(r.allowed.len(), 1, "{name}: {}\n{}", r.line, s.text);
            r.allowed[0]
        })
        .collect()
}

/// The CPU each busy worker was allowed at the end.
fn worker_cpus(name: &str, s: &Scenario) -> Vec<usize> {
    cpus_of(name, s, &["busy"])
}

/// The CPU each busy worker and the main thread held while they all ran (`held=`: placed_threads
/// with "main" exits 0 only once they all differed for its hold time; a mask read later, at
/// the report, may already show a sleeper moved).
fn task_cpus(name: &str, s: &Scenario) -> Vec<usize> {
    assert_eq!(s.code, 0, "{name}:\n{}", s.text);
    let threads: Vec<&Report> = ["busy", "main"]
        .iter()
        .flat_map(|role| with_role(&s.reports, role))
        .collect();
    let cpus: Vec<usize> = threads
        .iter()
        .map(|r| {
            let held = r.field("held").parse();
            held.unwrap_or_else(|_| panic!("{name}: never held one CPU: {}", r.line))
        })
        .collect();
    let distinct: BTreeSet<usize> = cpus.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        cpus.len(),
        "{name}: two task threads share a CPU {cpus:?}\n{}",
        s.text
    );
    cpus
}

/// The memory policy `numa_memory` reported: (get_mempolicy mode, its nodes, numa_maps's
/// policy word, the nodes holding the buffer's pages).
fn memory_of(name: &str, s: &Scenario) -> (i32, String, String, Vec<String>) {
    assert_eq!(s.code, 0, "{name}:\n{}", s.text);
    let mem = with_role(&s.reports, "mem");
    assert_eq!(mem.len(), 1, "{name}:\n{}", s.text);
    let r = mem[0];
    let on: Vec<String> = r
        .extra
        .keys()
        .filter(|k| k.starts_with('N'))
        .cloned()
        .collect();
    (
        r.field("policy").parse().unwrap(),
        r.field("nodes").to_string(),
        r.field("map").to_string(),
        on,
    )
}

fn check(shape: &Shape, c: &Console) {
    let name = shape.name;
    for (scenario, s) in &c.scenarios {
        assert_ne!(
            s.code, 137,
            "{name}: {scenario} ran past {SCENARIO_LIMIT_S} s:\n{}",
            s.text
        );
    }
    // Topology: goset's siblings and nodes are the guest's sysfs.
    let cpus = c.topology["cpus"].as_array().expect("cpus");
    assert_eq!(cpus.len(), c.siblings.len(), "{name}");
    for cpu in cpus {
        let id = cpu["cpu"].as_u64().unwrap() as usize;
        let sib: Vec<usize> = (cpu["siblings"].as_array().unwrap().iter())
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(sib, c.siblings[&id], "{name}: siblings of cpu {id}");
    }
    let nodes: BTreeMap<usize, Vec<usize>> = (c.topology["nodes"].as_array().unwrap().iter())
        .map(|n| {
            let cpus = n["cpus"].as_array().unwrap();
            let cpus = cpus.iter().map(|v| v.as_u64().unwrap() as usize).collect();
            (n["id"].as_u64().unwrap() as usize, cpus)
        })
        .collect();
    assert_eq!(nodes, c.nodes, "{name}: NUMA nodes");
    let expected: BTreeMap<usize, Vec<usize>> = shape
        .nodes
        .iter()
        .enumerate()
        .map(|(i, l)| (i, cpulist(l)))
        .collect();
    assert_eq!(
        c.nodes, expected,
        "{name}: the guest has the nodes asked for"
    );
    let all = c.siblings.len();
    let core_of = |cpu: usize| c.siblings[&cpu].clone();
    let node_of = |cpu: usize| {
        *c.nodes
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .unwrap()
            .0
    };
    check_processes(shape, c, &node_of);
    if shape.smt {
        // Spread: every worker on a core of its own; pack: the workers fill whole cores.
        let spread = worker_cpus("spread", &c.scenarios["spread"]);
        let cores: BTreeSet<Vec<usize>> = spread.iter().map(|&p| core_of(p)).collect();
        assert_eq!(cores.len(), spread.len(), "{name}: spread {spread:?}");
        let pack = worker_cpus("pack", &c.scenarios["pack"]);
        let cores: BTreeSet<Vec<usize>> = pack.iter().map(|&p| core_of(p)).collect();
        assert_eq!(cores.len(), pack.len().div_ceil(2), "{name}: pack {pack:?}");
    }
    // -n = every CPU: every thread on a CPU of its own, also under a busy loop.
    let every = task_cpus("every-cpu", &c.scenarios["every-cpu"]);
    assert_eq!(every.len(), all, "{name}: every-cpu {every:?}");
    for i in 0..BUSY_REPEATS {
        for kind in ["every-cpu-busy", "every-cpu-busy-static"] {
            let scenario = format!("{kind}-{i}");
            let cpus = task_cpus(&scenario, &c.scenarios[&scenario]);
            assert_eq!(cpus.len(), all, "{name}: {scenario} {cpus:?}");
        }
    }
    // The housekeeper (every thread of goset-run) on a core no task CPU is on; the static
    // program's busy threads hold the task CPUs, its main thread (waiting in join) is sent to
    // the housekeeper CPU.
    let s = &c.scenarios["static"];
    let placed = task_cpus("static", s);
    let busy = &placed[..placed.len() - 1];
    let parent = cpus_of("static", s, &["parent"]);
    let housekeeper = parent[0];
    assert!(
        parent.iter().all(|&p| p == housekeeper),
        "{name}: goset-run's threads on {parent:?}"
    );
    let beside: Vec<usize> = core_of(housekeeper)
        .into_iter()
        .filter(|p| busy.contains(p))
        .collect();
    assert!(
        beside.is_empty(),
        "{name}: the housekeeper on {housekeeper} shares a core with the task {busy:?}"
    );
    assert_eq!(
        placed.last(),
        Some(&housekeeper),
        "{name}: the sleeping main thread is not on the housekeeper CPU\n{}",
        s.text
    );
    // Noise: the busy CPU and its siblings are left out.
    let quiet = task_cpus("noise", &c.scenarios["noise"]);
    let noisy = core_of(BUSY_CPU);
    assert!(
        quiet.iter().all(|p| !noisy.contains(p)),
        "{name}: {quiet:?} on the busy core {noisy:?}"
    );
    if let Some(s) = c.scenarios.get("numa-auto") {
        // One of the biggest nodes holds every worker, each on a CPU of its own.
        let biggest = c.nodes.values().map(Vec::len).max().unwrap();
        let on = worker_cpus("numa-auto", s);
        let distinct: BTreeSet<usize> = on.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            on.len(),
            "{name}: numa-auto shares a CPU {on:?}"
        );
        let node = &c.nodes[&node_of(on[0])];
        assert_eq!(
            node.len(),
            biggest,
            "{name}: numa-auto on a smaller node {node:?}"
        );
        assert!(
            on.iter().all(|p| node.contains(p)),
            "{name}: {on:?} not in {node:?}"
        );
    }
    // --numa binds memory to the node of the CPUs (get_mempolicy and numa_maps agree); without
    // it the policy is the default.
    let auto = &c.scenarios["memory-numa-auto"];
    let node = node_of(cpus_of("memory-numa-auto", auto, &["mem"])[0]);
    let last = c.nodes.len() - 1;
    for (scenario, node) in [("memory-numa-auto", node), ("memory-numa-last", last)] {
        let (policy, nodes, map, on) = memory_of(scenario, &c.scenarios[scenario]);
        let text = &c.scenarios[scenario].text;
        assert_eq!(
            (policy, nodes, map, on),
            (
                2,
                node.to_string(),
                format!("bind:{node}"),
                vec![format!("N{node}")]
            ),
            "{name}: {scenario}:\n{text}"
        );
    }
    let (policy, _, map, _) = memory_of("memory-default", &c.scenarios["memory-default"]);
    assert_eq!(
        (policy, map.as_str()),
        (0, "default"),
        "{name}: memory-default"
    );
    let avoided = worker_cpus("cpu0-core-avoided", &c.scenarios["cpu0-core-avoided"]);
    let core0 = core_of(0);
    assert!(
        avoided.iter().all(|p| !core0.contains(p)),
        "{name}: {avoided:?} on CPU 0's core {core0:?}"
    );
    // OpenMP teams: one thread per planned CPU.
    for (scenario, team) in [("omp-gomp", 4), ("omp-llvm", 6)] {
        let Some(s) = c.scenarios.get(scenario) else {
            continue;
        };
        let cpus = cpus_of(scenario, s, &["omp"]);
        let distinct: BTreeSet<usize> = cpus.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            team,
            "{name}: {scenario} {cpus:?}\n{}",
            s.text
        );
        for r in with_role(&s.reports, "omp") {
            assert_eq!(r.field("team"), team.to_string(), "{name}: {}", r.line);
        }
    }
    check_isolation(shape, c);
    let last_cpus: Vec<usize> = cpulist(shape.nodes.last().unwrap());
    let bounded = worker_cpus("taskset", &c.scenarios["taskset"]);
    assert!(
        bounded.iter().all(|p| last_cpus.contains(p)),
        "{name}: taskset {bounded:?}"
    );
    let boxed = task_cpus("cpuset", &c.scenarios["cpuset"]);
    assert!(
        boxed.iter().all(|p| [1, 3, 5].contains(p)),
        "{name}: cpuset 1,3,5 but {boxed:?}"
    );
    let crowded = &c.scenarios["cpuset-too-many"];
    assert_eq!(
        crowded.code, 2,
        "{name}: cpuset-too-many:\n{}",
        crowded.text
    );
    let online = task_cpus("hotplug", &c.scenarios["hotplug"]);
    assert!(
        online.len() == all - 1 && !online.contains(&OFFLINE_CPU),
        "{name}: hotplug (CPU {OFFLINE_CPU} offline) {online:?}"
    );
    let small = &c.scenarios["numa-too-small"];
    assert_eq!(small.code, 2, "{name}: numa-too-small:\n{}", small.text);
    assert!(small.stderr.contains("holds"), "{name}: {}", small.stderr);
}

/// The words after `prefix` on the scenario's first line that starts with it.
fn line_after<'a>(name: &str, s: &'a Scenario, prefix: &str) -> Vec<&'a str> {
    let line = (s.text.lines())
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("{name}: no '{prefix}' line:\n{}", s.text));
    line.split_whitespace().collect()
}

/// Each IRQ's affinity on the scenario's lines tagged `tag`.
fn irqs_of(s: &Scenario, tag: &str) -> BTreeMap<String, String> {
    (s.text.lines())
        .filter_map(|l| l.strip_prefix(tag)?.strip_prefix(' '))
        .filter_map(|l| l.split_once(' '))
        .map(|(irq, aff)| (irq.to_string(), aff.trim().to_string()))
        .collect()
}

/// cgroup v2 (the group from inside the task, its cpuset, a mask reset by the task clamped to
/// it, everything undone after), fenced siblings, steered IRQs.
fn check_isolation(shape: &Shape, c: &Console) {
    let name = shape.name;
    let core_of = |cpu: usize| c.siblings[&cpu].clone();
    let mut scenarios = vec!["cgroup-v2"];
    if shape.smt {
        scenarios.push("fence");
    }
    for scenario in scenarios {
        let s = &c.scenarios[scenario];
        let held = task_cpus(scenario, s);
        let cg = line_after(scenario, s, "cg ");
        assert!(
            cg[0].starts_with("/goset-sh"),
            "{name}: {scenario} group {cg:?}"
        );
        let cpus = cpulist(cg[1]);
        // The task CPUs, and with --fence their siblings.
        let mut planned: BTreeSet<usize> = held.iter().copied().collect();
        if scenario == "fence" {
            planned.extend(held.iter().flat_map(|&p| core_of(p)));
        }
        assert_eq!(
            cpus.iter().copied().collect::<BTreeSet<_>>(),
            planned,
            "{name}: {scenario}: cpuset.cpus {} for threads on {held:?}\n{}",
            cg[1],
            s.text
        );
        let nodes: BTreeSet<usize> = cpus
            .iter()
            .map(|&p| *c.nodes.iter().find(|(_, l)| l.contains(&p)).unwrap().0)
            .collect();
        assert_eq!(
            cpulist(cg[2]).into_iter().collect::<BTreeSet<_>>(),
            nodes,
            "{name}: {scenario}: cpuset.mems"
        );
        assert_eq!(
            line_after(scenario, s, "cgroup-after "),
            ["subtree=[]", "groups=[]"],
            "{name}: {scenario}: the group and +cpuset are undone"
        );
    }
    let s = &c.scenarios["steer"];
    assert_eq!(s.code, 0, "{name}: steer:\n{}", s.text);
    let json_line = line_after("steer", s, "json ").join(" ");
    let report: serde_json::Value = serde_json::from_str(&json_line).unwrap();
    let task: Vec<usize> = (report["selection"]["task_cpus"].as_array().unwrap().iter())
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let refused: Vec<String> = (report["isolation"]["steer"]["refused"].as_array().unwrap())
        .iter()
        .map(|pair| pair[0].as_u64().unwrap().to_string())
        .collect();
    let (before, during) = (irqs_of(s, "irq-before"), irqs_of(s, "irq-during"));
    assert!(
        !before.is_empty(),
        "{name}: the guest has IRQs:\n{}",
        s.text
    );
    for (irq, aff) in &during {
        assert!(
            refused.contains(irq) || !cpulist(aff).iter().any(|p| task.contains(p)),
            "{name}: irq {irq} on {aff} during the run, task on {task:?}\n{}",
            s.text
        );
    }
    assert_eq!(irqs_of(s, "irq-after"), before, "{name}: IRQs restored");
}

#[test]
fn goset_in_guests_with_smt_and_numa() {
    let (Some(kernel), Some(())) = (kernel(), tools()) else {
        return;
    };
    let (Some(threads), Some(threads_static), Some(numa_memory), Some(gomp)) = (
        Program::c("placed_threads.c"),
        Program::c_static("placed_threads.c"),
        Program::c("numa_memory.c"),
        Program::gomp("omp.c"),
    ) else {
        return;
    };
    let llvm = Program::llvm_omp("omp.c");
    let mut programs = vec![
        (threads.path(), THREADS),
        (threads_static.path(), THREADS_STATIC),
        (numa_memory.path(), NUMA_MEMORY),
        (gomp.path(), OMP_GOMP),
    ];
    if let Some(llvm) = &llvm {
        programs.push((llvm.path(), OMP_LLVM));
    }
    for shape in &SHAPES {
        let dir = tempfile::tempdir().unwrap();
        let initrd = initramfs(dir.path(), shape, &programs, llvm.is_some());
        let started = Instant::now();
        let text = boot(shape, &kernel, &initrd);
        if let Some(dir) = std::env::var_os("GOSET_VM_CONSOLE") {
            let file = Path::new(&dir).join(format!("console-{}.txt", shape.smp));
            std::fs::write(&file, &text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
        eprintln!(
            "{}: booted and checked in {:?}",
            shape.name,
            started.elapsed()
        );
        check(shape, &parse_console(&text));
    }
}
