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
//! - a `taskset` mask and a cgroup v2 cpuset bound the task; an offline CPU is never planned;
//! - on the two-node guest, two display devices behind PCI expander bridges on nodes 0 and 1
//!   stand in for GPUs: under `--near gpu:local-rank`, 4 workers a shell forks with
//!   `LOCAL_RANK=0..3` have every thread, the one started before `main` too, born on the block
//!   near their GPU.
//!
//! `GOSET_VM_CONSOLE=DIR` keeps each guest's console in `DIR/console-<smp>.txt`.
//!
//! Needs `qemu-system-x86`, `busybox-static`, `cpio` and a kernel fetched by
//! `shim-tests/vm/fetch-kernel.sh` (into `target/vm/`, or `GOSET_VM_KERNEL`); skips without
//! them, fails under `CI=true`. Software emulation (TCG): a guest takes 80-100 s here.

mod checks;
mod console;
mod image;
mod qemu;
mod ranks;
mod script;

use shim_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One guest shape: `-smp` and the CPUs of each NUMA node (128 MiB each).
pub(crate) struct Shape {
    pub(crate) name: &'static str,
    pub(crate) smp: &'static str,
    pub(crate) nodes: &'static [&'static str],
    pub(crate) smt: bool,
    /// Two display devices stand in for GPUs, behind PCI expander bridges on nodes 0 and 1.
    pub(crate) gpus: bool,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "2 sockets x 2 cores x 2 threads, 2 nodes",
        smp: "8,sockets=2,cores=2,threads=2",
        nodes: &["0-3", "4-7"],
        smt: true,
        gpus: true,
    },
    Shape {
        name: "1 socket x 4 cores x 2 threads, 1 node",
        smp: "8,sockets=1,cores=4,threads=2",
        nodes: &["0-7"],
        smt: true,
        gpus: false,
    },
    Shape {
        name: "6 CPUs in 3 nodes of 1, 2 and 3",
        smp: "6,sockets=1,cores=6,threads=1",
        nodes: &["0", "1-2", "3-5"],
        smt: false,
        gpus: false,
    },
];

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
    let Some(rank_worker) = Program::c("rank_worker.c") else {
        return;
    };
    let llvm = Program::llvm_omp("omp.c");
    let mut programs = vec![
        (rank_worker.path(), script::RANK_WORKER),
        (threads.path(), script::THREADS),
        (threads_static.path(), script::THREADS_STATIC),
        (numa_memory.path(), script::NUMA_MEMORY),
        (gomp.path(), script::OMP_GOMP),
    ];
    if let Some(llvm) = &llvm {
        programs.push((llvm.path(), script::OMP_LLVM));
    }
    for shape in &SHAPES {
        let dir = tempfile::tempdir().unwrap();
        let initrd = image::initramfs(dir.path(), shape, &programs, llvm.is_some());
        let started = Instant::now();
        let text = qemu::boot(shape, &kernel, &initrd);
        if let Some(dir) = std::env::var_os("GOSET_VM_CONSOLE") {
            let file = Path::new(&dir).join(format!("console-{}.txt", shape.smp));
            std::fs::write(&file, &text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
        eprintln!(
            "{}: booted and checked in {:?}",
            shape.name,
            started.elapsed()
        );
        checks::check(shape, &console::parse(&text));
    }
}
