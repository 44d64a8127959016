//! The guest's `/init`: the facts of its sysfs, then every scenario between markers, in the
//! order the guest runs them (later ones change the guest: cpusets, an offline CPU).

use crate::Shape;
use shim_tests::cpulist;

/// A scenario gives up after this many seconds (killed by the guest's `timeout`), so that one
/// that hangs is named in the results instead of stalling the guest.
pub(crate) const SCENARIO_LIMIT_S: u32 = 60;

/// How many times the `-n` = every CPU scenario runs under a busy loop, per program kind.
pub(crate) const BUSY_REPEATS: usize = 20;

/// The CPU a noise scenario keeps busy and the CPU a hotplug scenario takes offline: never
/// CPU 0 (whose core is avoided anyway), and on SMT guests a CPU whose sibling is quiet.
pub(crate) const BUSY_CPU: usize = 2;
pub(crate) const OFFLINE_CPU: usize = 3;

/// The programs in the guest, by their paths there.
pub(crate) const RUN: &str = "/opt/goset/goset-run -q --log /tmp/placement.log --sample 0";
pub(crate) const RUN_SAMPLED: &str =
    "/opt/goset/goset-run -q --log /tmp/placement.log --sample 250";
/// The placement log every run in the guest keeps.
pub(crate) const LOG: &str = "/tmp/placement.log";
pub(crate) const THREADS: &str = "/opt/t/placed_threads";
pub(crate) const THREADS_STATIC: &str = "/opt/t/placed_threads_static";
pub(crate) const NUMA_MEMORY: &str = "/opt/t/numa_memory";
pub(crate) const OMP_GOMP: &str = "/opt/t/omp_gomp";
pub(crate) const OMP_LLVM: &str = "/opt/t/omp_llvm";
pub(crate) const RANK_WORKER: &str = "/opt/t/rank_worker";

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

/// What the scenarios of a shape are sized by.
#[derive(Clone, Copy)]
struct Sizes {
    /// Every CPU.
    all: usize,
    /// Cores (CPUs on SMT guests are two a core).
    cores: usize,
    /// CPUs of a biggest node.
    biggest: usize,
    /// A smallest node and its CPUs.
    small: usize,
    small_size: usize,
    last_node: usize,
}

impl Sizes {
    fn of(shape: &Shape) -> Sizes {
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
        Sizes {
            all,
            cores,
            biggest,
            small,
            small_size,
            last_node,
        }
    }
}

/// `--near gpu:local-rank` with gpu0 on node 0 and gpu1 on node 1 (see `qemu.rs`): a shell
/// forks 4 workers with `LOCAL_RANK=0..3` (ranks 2 and 3 wrap round to GPUs 0 and 1); the dry
/// run's Ranks table (see `crate::ranks`). The bandwidth of ranks near and far from their
/// GPU's node is `launcher/bench/ranks-guest.sh`'s: a guest boot has no time to spare for it.
fn gpu_ranks(s: &mut Init) {
    let ranks = "--near gpu:local-rank -n 8 --per-process 2";
    let workers: String = (0..4)
        .map(|r| format!("LOCAL_RANK={r} {RANK_WORKER} & "))
        .collect();
    s.scenario(
        "gpu-ranks",
        &format!("{RUN} {ranks} --json /tmp/ranks.json -- sh -c '{workers}wait'"),
    );
    s.line("echo \"json $(tr -d '\\n' < /tmp/ranks.json)\"");
    s.scenario(
        "gpu-ranks-dry",
        &format!("/opt/goset/goset-run --sample 0 {ranks} --dry-run"),
    );
}

/// The guest's `/init`: the facts of its sysfs, then each scenario between markers. The noise
/// record is off, as in every test (docs/testing.md): one scenario's busy loops must not rank a
/// later scenario's CPUs.
pub(crate) fn init_script(shape: &Shape, llvm: bool) -> String {
    let sizes = Sizes::of(shape);
    let mut s = Init(String::from(
        "#!/bin/busybox sh\n/bin/busybox mkdir -p /bin /proc /sys /dev /tmp /run\n\
         /bin/busybox --install -s /bin\n\
         mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev\n\
         mount -t tmpfs tmp /tmp; mount -t tmpfs run /run; mount -t cgroup2 cgroup2 /sys/fs/cgroup\n\
         mkdir /dev/shm; mount -t tmpfs shm /dev/shm\n\
         export GOSET_NOISE_DIR=none\n\
         echo '== BEGIN'\n\
         for c in /sys/devices/system/cpu/cpu[0-9]*; do echo \"sib ${c##*cpu} $(cat $c/topology/thread_siblings_list)\"; done\n\
         for n in /sys/devices/system/node/node[0-9]*; do echo \"node ${n##*node} $(cat $n/cpulist)\"; done\n\
         echo \"topology $(/opt/goset/goset topology --json | tr -d '\\n')\"\n",
    ));
    placement(&mut s, shape, sizes);
    numa_and_teams(&mut s, shape, sizes, llvm);
    isolation(&mut s, shape, sizes);
    if shape.gpus {
        gpu_ranks(&mut s);
    }
    bounds(&mut s, shape, sizes);
    s.line("echo '== END'\npoweroff -f");
    s.0
}

/// Where the threads go: SMT policies, every CPU (also under a busy loop), a static program,
/// a noisy CPU.
fn placement(s: &mut Init, shape: &Shape, sizes: Sizes) {
    let Sizes { all, cores, .. } = sizes;
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
}

/// NUMA placement and memory binding, CPU 0's core, OpenMP teams and several processes.
fn numa_and_teams(s: &mut Init, shape: &Shape, sizes: Sizes, llvm: bool) {
    let Sizes {
        all,
        biggest,
        last_node,
        cores,
        ..
    } = sizes;
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
}

/// `--cgroup`, `--fence` and `--steer`.
fn isolation(s: &mut Init, shape: &Shape, sizes: Sizes) {
    let all = sizes.all;
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
}

/// What bounds the task from outside: a `taskset` mask, a cpuset, an offline CPU, a node too
/// small.
fn bounds(s: &mut Init, shape: &Shape, sizes: Sizes) {
    let Sizes {
        all,
        small,
        small_size,
        ..
    } = sizes;
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
}

/// The multi-process scenarios of `shape` (`all` CPUs): `procs-P-T-SMT` runs P OpenMP
/// processes of T threads under a shell with `--per-process T`; `procs-implicit` sizes them
/// with the user's `OMP_NUM_THREADS` alone; `instances-K` starts K copies. The uneven guest
/// (nodes of 1, 2 and 3 CPUs) has room for two node-local blocks of 2.
pub(crate) fn process_scenarios(shape: &Shape, all: usize) -> Vec<(String, String)> {
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
