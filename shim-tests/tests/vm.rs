//! goset inside small QEMU guests with the topologies this machine lacks: SMT siblings, several
//! packages and NUMA nodes (issue 9). One boot per topology runs every scenario; each scenario
//! is checked from inside the guest (the threads' own `Cpus_allowed_list`, sysfs), never from
//! goset's report:
//! - `goset topology --json` against the guest's sysfs (siblings, nodes);
//! - `--smt spread` puts the workers on distinct cores, `--smt pack` fills cores (SMT guests);
//! - `-n` = every CPU gives every thread a CPU of its own; with fewer task CPUs than cores,
//!   CPU 0's core is left out; a `taskset` mask bounds the task;
//! - `--numa auto` keeps the task on the biggest node; `--numa N` with a node too small for
//!   `-n` is a usage error (exit 2) naming the node's size.
//!
//! Needs `qemu-system-x86`, `busybox-static`, `cpio` and a kernel fetched by
//! `shim-tests/vm/fetch-kernel.sh` (into `target/vm/`, or `GOSET_VM_KERNEL`); skips without
//! them, fails under `CI=true`. Software emulation (TCG): a boot takes about 10 s.

mod common;
use common::*;
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

/// A boot never takes longer (its scenarios give up after 30 s each): a guest past it is killed.
const BOOT_DEADLINE: Duration = Duration::from_secs(150);

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

/// The guest's `/init`: the facts of its sysfs, then each scenario between markers.
fn init_script(shape: &Shape) -> String {
    let sizes: Vec<usize> = shape.nodes.iter().map(|l| cpulist(l).len()).collect();
    let biggest = *sizes.iter().max().unwrap();
    let (small, small_size) = sizes
        .iter()
        .enumerate()
        .min_by_key(|(_, s)| **s)
        .map(|(i, s)| (i, *s))
        .unwrap();
    let run = "/opt/goset/goset-run -q --sample 0";
    let threads = "/opt/t/placed_threads";
    let mut s = String::from(
        "#!/bin/busybox sh\n/bin/busybox mkdir -p /bin /proc /sys /dev /tmp /run\n\
         /bin/busybox --install -s /bin\n\
         mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev\n\
         mount -t tmpfs tmp /tmp; mount -t tmpfs run /run\n\
         echo '== BEGIN'\n\
         for c in /sys/devices/system/cpu/cpu[0-9]*; do echo \"sib ${c##*cpu} $(cat $c/topology/thread_siblings_list)\"; done\n\
         for n in /sys/devices/system/node/node[0-9]*; do echo \"node ${n##*node} $(cat $n/cpulist)\"; done\n\
         echo \"topology $(/opt/goset/goset topology --json | tr -d '\\n')\"\n",
    );
    let mut scenario = |name: &str, cmd: &str| {
        s.push_str(&format!(
            "echo '== SCENARIO {name}'\n{cmd} 2>/tmp/err; echo \"== RC $?\"; sed 's/^/stderr /' /tmp/err\n"
        ));
    };
    // The main thread takes slot 0; three workers take the others.
    if shape.smt {
        scenario(
            "spread",
            &format!("{run} -n 4 --smt spread -- {threads} 3 30"),
        );
        scenario("pack", &format!("{run} -n 4 --smt pack -- {threads} 3 30"));
    }
    let all: usize = sizes.iter().sum();
    scenario(
        "every-cpu",
        &format!("{run} -n {all} -- {threads} {} 30", all - 1),
    );
    let workers = biggest - 1;
    if workers > 0 {
        scenario(
            "numa-auto",
            &format!("{run} -n {biggest} --numa auto -- {threads} {workers} 30"),
        );
    }
    // Fewer task CPUs than cores: CPU 0's core (the kernel's favourite for its own work) is
    // left out when the cores are otherwise equal.
    let cores = if shape.smt { all / 2 } else { all };
    scenario(
        "cpu0-core-avoided",
        &format!(
            "{run} -n {} --smt spread -- {threads} {} 30",
            cores - 1,
            cores - 2
        ),
    );
    // The launcher's own mask (taskset) bounds the task.
    scenario(
        "taskset",
        &format!(
            "taskset -c {} {run} -n 2 -- {threads} 1 30",
            shape.nodes.last().unwrap()
        ),
    );
    scenario(
        "numa-too-small",
        &format!(
            "{run} -n {} --numa {small} -- {threads} 1 30",
            small_size + 1
        ),
    );
    s.push_str("echo '== END'\npoweroff -f\n");
    s
}

/// Builds the initramfs for `shape` in `dir`.
fn initramfs(dir: &Path, shape: &Shape, threads: &Path) -> PathBuf {
    let root = dir.join("root");
    put(&root, Path::new("/bin/busybox"), "/bin/busybox");
    for (built_path, at) in [
        (goset_run_bin(), "/opt/goset/goset-run"),
        (goset_run_bin().with_file_name("goset"), "/opt/goset/goset"),
        (shim(), "/opt/goset/libgoset.so"),
        (threads.to_path_buf(), "/opt/t/placed_threads"),
    ] {
        put(&root, &built_path, at);
        let dest = root.join(at.trim_start_matches('/'));
        // Debug builds carry ~15 MB of debug info each: the guest needs none of it.
        let _ = Command::new("strip").arg(&dest).status();
        for lib in libraries(&built_path) {
            put(&root, &lib, lib.to_str().unwrap());
        }
    }
    let init = root.join("init");
    std::fs::write(&init, init_script(shape)).unwrap();
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
            } else if let Some(r) = parse_line(line) {
                s.reports.push(r);
            }
        } else if let Some(rest) = line.strip_prefix("sib ") {
            let (cpu, list) = rest.split_once(' ').unwrap_or((rest, ""));
            let cpu = cpu
                .parse()
                .unwrap_or_else(|_| panic!("odd line {line:?}:\n{text}"));
            siblings.insert(cpu, cpulist(list));
        } else if let Some(rest) = line.strip_prefix("node ") {
            let (id, list) = rest.split_once(' ').unwrap_or((rest, ""));
            let id = id
                .parse()
                .unwrap_or_else(|_| panic!("odd line {line:?}:\n{text}"));
            nodes.insert(id, cpulist(list));
        } else if let Some(json) = line.strip_prefix("topology ") {
            topology = serde_json::from_str(json).expect("goset topology --json is JSON");
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

/// The CPU each busy worker was allowed at the end (one each, or the scenario failed).
fn worker_cpus(name: &str, s: &Scenario) -> Vec<usize> {
    assert_eq!(s.code, 0, "{name}:\n{}", s.text);
    let workers: Vec<&Report> = with_role(&s.reports, "busy");
    assert!(!workers.is_empty(), "{name}: no reports:\n{}", s.text);
    workers
        .iter()
        .map(|r| {
            assert_eq!(r.allowed.len(), 1, "{name}: {}", r.line);
            r.allowed[0]
        })
        .collect()
}

fn check(shape: &Shape, c: &Console) {
    let name = shape.name;
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
    let core_of = |cpu: usize| c.siblings[&cpu].clone();
    if shape.smt {
        // Spread: every worker on a core of its own; pack: the workers fill whole cores.
        let spread = worker_cpus("spread", &c.scenarios["spread"]);
        let cores: BTreeSet<Vec<usize>> = spread.iter().map(|&p| core_of(p)).collect();
        assert_eq!(cores.len(), spread.len(), "{name}: spread {spread:?}");
        let pack = worker_cpus("pack", &c.scenarios["pack"]);
        let cores: BTreeSet<Vec<usize>> = pack.iter().map(|&p| core_of(p)).collect();
        assert_eq!(cores.len(), pack.len().div_ceil(2), "{name}: pack {pack:?}");
    }
    // -n = every CPU: every worker on a CPU of its own (the main thread holds the last).
    let every = worker_cpus("every-cpu", &c.scenarios["every-cpu"]);
    let distinct: BTreeSet<usize> = every.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        c.siblings.len() - 1,
        "{name}: every-cpu {every:?}"
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
        let node = c.nodes.values().find(|cpus| cpus.contains(&on[0])).unwrap();
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
    let avoided = worker_cpus("cpu0-core-avoided", &c.scenarios["cpu0-core-avoided"]);
    let core0 = core_of(0);
    assert!(
        avoided.iter().all(|p| !core0.contains(p)),
        "{name}: {avoided:?} on CPU 0's core {core0:?}"
    );
    let last: Vec<usize> = cpulist(shape.nodes.last().unwrap());
    let bounded = worker_cpus("taskset", &c.scenarios["taskset"]);
    assert!(
        bounded.iter().all(|p| last.contains(p)),
        "{name}: taskset {bounded:?}"
    );
    let small = &c.scenarios["numa-too-small"];
    assert_eq!(small.code, 2, "{name}: numa-too-small:\n{}", small.text);
    assert!(small.stderr.contains("holds"), "{name}: {}", small.stderr);
}

#[test]
fn goset_in_guests_with_smt_and_numa() {
    let (Some(kernel), Some(())) = (kernel(), tools()) else {
        return;
    };
    let Some(threads) = Program::c("placed_threads.c") else {
        return;
    };
    for shape in &SHAPES {
        let dir = tempfile::tempdir().unwrap();
        let initrd = initramfs(dir.path(), shape, threads.path());
        let started = Instant::now();
        let text = boot(shape, &kernel, &initrd);
        eprintln!(
            "{}: booted and checked in {:?}",
            shape.name,
            started.elapsed()
        );
        check(shape, &parse_console(&text));
    }
}
