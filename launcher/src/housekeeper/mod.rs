//! The housekeeper: while the task runs, the launcher (pinned to the housekeeper CPU) polls
//! telemetry and places the threads the shim could not place.
//!
//! Owns: one poll ([`Housekeeper::poll`]), as a sequence of steps: follow the placement log,
//! walk the task's process tree and read its threads (`tree`: a state of its own, which hands
//! the rest what it found), tell how each unanswered thread's process stands with the shim,
//! place unplaced threads ([`placer`], by the rules of [`policy`]), sample CPU frequencies
//! ([`cpu_sampler`]), move slots off noisy CPUs ([`policy::noise`]); and what the run adds up
//! to ([`Housekeeper::finish`]). Must not: print, or read any file that makes the kernel
//! interrupt a task CPU (see [`threads`] and [`cpu_sampler`] for the files and why they are
//! silent). The launcher stays single-threaded so that nothing it does (an `munmap`,
//! say) sends TLB shootdowns anywhere: its mm runs on the housekeeper CPU only.
//!
//! The tree: every process found is followed until its `/proc/<pid>/task` is gone, and every
//! thread until its own files are gone or it is a zombie, whether its parent runs or not (a
//! shell or `mpirun` waits in `wait4` for the whole run). New processes are found in
//! `/proc/<pid>/task/<tid>/children` (`CONFIG_PROC_CHILDREN`); whose are read at which poll is
//! the tree walk's rule (`tree`; described in docs/housekeeper.md, `children`); where that
//! file does not exist, by scanning the ppid of every `/proc/<pid>/stat`. What
//! cannot be counted: a thread or process that is born and ends between two polls; what a
//! thread did after the last poll before it ended; a process whose parent ended before the
//! poll that would have seen it (it is re-parented out of the tree). The `wait4` rusage in the
//! Run table does include all of these. Not followed either: a thread that took the tid of an
//! ended one (a non-leader thread's `execve` takes its process's pid, which was seen as a
//! zombie; pid reuse within a run).

pub(crate) mod cpu_sampler;
mod deferred;
#[cfg(test)]
mod fake_proc;
pub(crate) mod logtail;
pub(crate) mod noisewatch;
pub mod outcome;
pub(crate) mod own;
pub(crate) mod placer;
pub(crate) mod policy;
pub(crate) mod threads;
pub(crate) mod tracked;
mod tree;

use crate::fsroot::{FsRoot, ReadError};
use crate::noise::Snapshot;
use cpu_sampler::CpuSampler;
use goset_plan::clock;
use logtail::LogTail;
use noisewatch::NoiseWatch;
use outcome::Outcome;
use placer::{Affinity, Live, Placer};
use policy::cadence;
use policy::kinship::{self, Kin};
use policy::noise::{self, NoiseRule, NoiseStreaks};
use policy::thresholds::Policy;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
pub use tracked::Tracked;
use tree::{Seen, Tree};

/// What the housekeeper needs to know about the plan.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Task CPUs in slot order.
    pub task_cpus: Vec<usize>,
    /// Where threads that hold no slot are parked (helpers, sleepers): the housekeeper CPU, or
    /// under `--cgroup`, whose cpuset holds the task CPUs only, the last task CPU.
    pub park_cpu: usize,
    /// Poll interval.
    pub interval: Duration,
    /// Placement thresholds.
    pub policy: Policy,
    /// CPUs a slot may move to when its CPU turns noisy (`--spare`, `--adapt`); empty: no
    /// such moves.
    pub spares: Vec<usize>,
    /// Thresholds of those moves.
    pub noise_rule: NoiseRule,
    /// The housekeeper CPU: the one the launcher itself runs on (its time there is not noise).
    pub housekeeper_cpu: usize,
    /// Steerable IRQs are moved away for the run (`--steer`): they are not noise.
    pub steer: bool,
    /// The speed of each CPU's kind class in permille of the fastest (a CPU missing: 1000): a
    /// busy thread moves to a free slot of a faster kind.
    pub speed: BTreeMap<usize, u32>,
}

/// The housekeeper's state over one run.
pub struct Housekeeper {
    root: FsRoot,
    settings: Settings,
    cpus: CpuSampler,
    placer: Placer,
    log: Option<LogTail>,
    /// The shim's threads whose records are deferred.
    deferred: deferred::DeferredWatch,
    /// The task's process tree as walked so far.
    tree: Tree,
    /// The slot table's count of brief threads at the last poll.
    brief_seen: u64,
    polls: u64,
    all_children_every: u64,
    /// Polls until the next that reads every thread's `children`.
    polls_to_all_children: u64,
    started: Instant,
    /// When the task started (until it does, when the housekeeper did), Unix seconds.
    started_unix_s: f64,
    cpu_start: Duration,
    /// Each poll's noise, when slots may move off noisy CPUs.
    noise: Option<NoiseWatch>,
    /// The noise rule's memory.
    streaks: NoiseStreaks,
    /// The CPUs a slot may move to now (a slot's noisy CPU joins them when it leaves).
    spares: Vec<usize>,
}

/// CPU time of the launcher process so far.
pub fn own_cpu_time() -> Duration {
    Duration::from_micros(clock::micros(libc::CLOCK_PROCESS_CPUTIME_ID))
}

fn boot_time_s() -> f64 {
    clock::seconds(libc::CLOCK_BOOTTIME)
}

/// Raises `RLIMIT_NOFILE`'s soft limit to the hard one (1024 is a common soft limit, a few
/// per thread kept open would not go far); returns the soft limit now in force.
fn raise_nofile() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if hard > soft && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// How many descriptors this process holds open now (the count matters only under a low
/// limit): the entries of `/proc/self/fd` but the listing's own, one directory read where asking
/// every number up to 4096 took 4096 system calls, 2 to 4 ms of every launch; without `/proc`,
/// those calls.
fn open_descriptors() -> u64 {
    if let Ok(listing) = std::fs::read_dir("/proc/self/fd") {
        return listing.count().saturating_sub(1) as u64;
    }
    // SAFETY: F_GETFD on any number reads no memory; a closed one fails with EBADF.
    (0..4096)
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .count() as u64
}

impl Housekeeper {
    /// Starts the run's telemetry (the first CPU snapshot), before the task starts. `table` is
    /// the slot table shared with the shim; `log` the placement log, followed and appended to;
    /// `affinity` sets and reads threads' masks ([`placer::Kernel`], or a fake in tests).
    pub fn new(
        root: &FsRoot,
        settings: Settings,
        table: &'static goset_plan::SlotTable,
        log: Option<&std::path::Path>,
        affinity: Box<dyn Affinity>,
    ) -> Housekeeper {
        // Only a regular file: the task may have put a FIFO there, whose open would block.
        let appender = log.and_then(|p| {
            let mut append = std::fs::OpenOptions::new();
            crate::bounded::open_regular(p, append.append(true).create(true)).ok()
        });
        // The noise of a CPU is its busy time less the task's: a thread left unread would
        // hide its run time there, and its CPU would look noisy (one pread a sleeper a
        // poll is the price of --spare).
        let idle_skip_cap = cadence::idle_skip_cap(settings.interval, !settings.spares.is_empty());
        let watched: Vec<usize> = (settings.task_cpus.iter())
            .chain(&settings.spares)
            .copied()
            .collect();
        Housekeeper {
            root: root.clone(),
            cpus: CpuSampler::start(root, &watched, Snapshot::read(root)),
            noise: (!settings.spares.is_empty())
                .then(|| NoiseWatch::start(root, settings.housekeeper_cpu, settings.steer)),
            streaks: NoiseStreaks::default(),
            spares: settings.spares.clone(),
            placer: Placer::new(
                table,
                settings.task_cpus.clone(),
                settings.park_cpu,
                settings.speed.clone(),
                appender,
                affinity,
            ),
            all_children_every: cadence::all_children_polls(settings.interval),
            tree: Tree::new(settings.interval, idle_skip_cap),
            settings,
            log: log.map(|p| LogTail::new(p.to_path_buf())),
            deferred: deferred::DeferredWatch::default(),
            brief_seen: 0,
            polls: 0,
            polls_to_all_children: 0,
            started: Instant::now(),
            started_unix_s: unix_now_s(),
            cpu_start: own_cpu_time(),
        }
    }

    /// The task's process id: the root of the tree to follow. Called once the task runs, so
    /// that the descriptor limit raised here is the launcher's alone.
    pub fn attach(&mut self, pid: i32) {
        threads::set_descriptor_limit(raise_nofile(), open_descriptors());
        self.tree.follow(pid);
        self.cpu_start = own_cpu_time();
        // Move times count from here: the noise sample and the launch came before.
        self.started_unix_s = unix_now_s();
    }

    /// One poll. The cost grows with the threads that ran and were born, not with those that
    /// exist: a process's threads are listed only when its thread count changed, and then only
    /// the tids born since the last poll are looked up if they are few next to its threads; a
    /// thread that keeps sleeping is read less and less often (at least every 250 ms), a main
    /// thread every poll. A thread ends when its own files are gone or it is a zombie, a
    /// process when its `/proc/<pid>/task` is gone. New processes are found in `children`
    /// files as the tree walk's rule says (see the module's doc); once a second every thread is
    /// also read and every process listed.
    pub fn poll(&mut self) {
        self.polls += 1;
        if let Some(log) = &mut self.log {
            log.poll();
            let (table, cpus) = (self.placer.table(), self.placer.task_cpus());
            self.deferred.poll(table, log, cpus, &self.root);
        }
        let all_children = self.polls_to_all_children == 0;
        self.polls_to_all_children = match self.polls_to_all_children {
            0 => self.all_children_every - 1,
            n => n - 1,
        };
        // The task churns brief threads: some are deferred now, or ended since the last poll.
        let table = self.placer.table();
        let churning = table.deferring() > 0 || table.brief() != self.brief_seen;
        self.brief_seen = table.brief();
        let seen = Seen {
            now: Instant::now(),
            boot_s: boot_time_s(),
            all_children,
            churning,
            log: self.log.as_ref(),
            deferring: table.deferring() as usize,
            placed: self.placer.placed(),
        };
        let mut walk = self.tree.walk(&self.root, &seen);
        self.set_kin(&mut walk.live);
        let threads = &self.tree.threads;
        self.placer
            .step(&walk.live, &walk.ended, &self.settings.policy, &|tid| {
                comm_of(threads, tid)
            });
        self.cpus.poll();
        self.move_off_noise(&walk.live, &walk.ended);
    }

    /// Moves each slot whose CPU stays noisier than the quietest spare (see
    /// [`noise::noise_moves`]) to that spare; the CPU it leaves becomes a spare.
    fn move_off_noise(&mut self, live: &[Live], ended: &[i32]) {
        let Some(watch) = &mut self.noise else {
            return;
        };
        for &tid in ended {
            watch.forget(tid);
        }
        let threads = &self.tree.threads;
        let ran = (live.iter().filter(|t| t.read)).filter_map(|t| {
            let x = threads.get(&t.tid)?;
            Some((t.tid, x.cpu_ns(), x.stat.as_ref()?.processor))
        });
        let Some(noise) =
            watch.sample(self.placer.task_cpus(), &self.spares, ran, self.tree.pids())
        else {
            return;
        };
        let pct = |cpu: usize| noise.get(&cpu).copied().flatten().map(|n| n.pct());
        let slots: Vec<noise::SlotNoise> = (self.placer.task_cpus().iter().enumerate())
            .filter_map(|(slot, &cpu)| {
                Some(noise::SlotNoise {
                    slot,
                    cpu,
                    pct: pct(cpu)?,
                })
            })
            .collect();
        let spares: Vec<noise::SpareNoise> = (self.spares.iter())
            .filter_map(|&cpu| {
                Some(noise::SpareNoise {
                    cpu,
                    pct: pct(cpu)?,
                })
            })
            .collect();
        let moves = noise::noise_moves(
            &mut self.streaks,
            &slots,
            &spares,
            &self.settings.noise_rule,
        );
        let threads = &self.tree.threads;
        let comm = |tid: i32| comm_of(threads, tid);
        for m in moves {
            let figures = noise.get(&m.from).copied().flatten().unwrap_or_default();
            let reason = placer::MoveReason::Noise {
                from: m.from,
                from_pct: m.from_pct,
                other_pct: figures.other_pct,
                steal_pct: figures.steal_pct,
                irq_per_s: figures.irq_per_s,
                polls: m.polls,
                to: m.to,
                to_pct: m.to_pct,
            };
            self.placer.move_slot(&m, live, &reason, &comm);
            self.spares.retain(|&c| c != m.to);
            self.spares.push(m.from);
        }
    }

    /// How the process of each thread that nobody answers for stands with the shim (see
    /// [`Kin`]): from the executable the shim logged for it, the one it runs now, its parent's,
    /// and whether it preloads the shim. Only those processes are looked up, once a poll.
    fn set_kin(&self, live: &mut [Live]) {
        let open = |t: &Live| !t.shim_placed && !self.placer.owned.contains_key(&t.tid);
        if !live.iter().any(open) {
            return;
        }
        let shim_exes = self.log.as_ref().map(|l| &l.exes);
        let logged: BTreeMap<i32, Option<String>> = live
            .iter()
            .filter(|t| t.shim_placed)
            .map(|t| (t.pid, shim_exes.and_then(|x| x.get(&t.pid)).cloned()))
            .collect();
        let parents: BTreeMap<i32, i32> = live
            .iter()
            .filter_map(|t| Some((t.pid, self.tree.threads.get(&t.tid)?.stat.as_ref()?.ppid)))
            .collect();
        let lineage = kinship::Lineage {
            logged: &logged,
            parents: &parents,
        };
        let mut exes: BTreeMap<i32, Option<String>> = BTreeMap::new();
        let mut exe = |pid: i32| -> Option<String> {
            let root = &self.root;
            exes.entry(pid)
                .or_insert_with(|| {
                    let link = std::fs::read_link(root.path(&format!("/proc/{pid}/exe"))).ok()?;
                    Some(link.to_string_lossy().into_owned())
                })
                .clone()
        };
        let root = &self.root;
        let mut preloads = |pid: i32| {
            let exe = crate::elf::read_file(&root.path(&format!("/proc/{pid}/exe")));
            exe.loads_shim() && crate::procfs::environ::preloads_shim(root, pid)
        };
        let mut kins: BTreeMap<i32, Kin> = BTreeMap::new();
        for t in live.iter_mut().filter(|t| open(t)) {
            let kin = *kins
                .entry(t.pid)
                .or_insert_with(|| kinship::kin_of(t.pid, &lineage, &mut exe, &mut preloads));
            // A thread never read has run no time that counts.
            let ran_ns = (self.tree.threads.get(&t.tid)).map_or(0, |x| x.cpu_ns());
            t.kin = kinship::kin_after_run(kin, ran_ns);
        }
    }

    /// [`LogTail::free_after`]).
    pub fn free_log_after(&mut self, kept: u64) {
        if let Some(log) = self.log.as_mut() {
            log.free_after(kept);
        }
    }

    /// The run's opening snapshot of the CPU counters, taken before the task started: one
    /// reading of `/proc/interrupts`, `/proc/softirqs` and `/proc/stat` an instant, which the
    /// noise record's feed starts from too.
    pub fn opening(&self) -> &Snapshot {
        self.cpus.opening()
    }

    /// Ends the run at `closing`, the run's closing snapshot of the CPU counters (shared with
    /// the noise record's feed): slots given back, everything gathered.
    pub fn finish(mut self, closing: &Snapshot) -> Outcome {
        // While the task ran: not the closing below (a path walk and the closing of its files
        // per thread, 40-60 ms for 3000 threads), which takes nothing from the task.
        let cpu_s = own_cpu_time().saturating_sub(self.cpu_start).as_secs_f64();
        let wall_s = self.started.elapsed().as_secs_f64();
        // A path walk per thread, once.
        self.tree.close(&self.root);
        self.placer.release_all();
        let brief = self.placer.table().brief();
        let records = self.placer.take_records();
        let (cpus, all, mut errors) = self.cpus.finish(closing);
        errors.extend(self.tree.errors);
        errors.extend(self.log.iter().flat_map(LogTail::errors));
        for why in &self.placer.failures {
            errors.push(ReadError {
                file: "sched_setaffinity(<tid>)".into(),
                reason: why.clone(),
            });
        }
        Outcome {
            settings: self.settings,
            polls: self.polls,
            wall_s,
            started_unix_s: self.started_unix_s,
            cpu_s,
            cpus,
            all,
            threads: self.tree.threads,
            order: self.tree.order,
            owned: self.placer.owned,
            records,
            errors,
            brief,
        }
    }
}

/// Thread `tid`'s name as its last read found it (empty when never read).
fn comm_of(threads: &HashMap<i32, Tracked>, tid: i32) -> String {
    (threads.get(&tid).and_then(|t| t.stat.as_ref())).map_or_else(String::new, |s| s.comm.clone())
}

/// Seconds since the Unix epoch (the placement log's `time`).
pub(super) fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fake_proc::{process, FakeProc};
    use placer::testing;
    use policy::claims::Mask;

    fn settings(task_cpus: Vec<usize>, housekeeper_cpu: usize) -> Settings {
        Settings {
            task_cpus,
            park_cpu: housekeeper_cpu,
            interval: Duration::from_millis(100),
            policy: Policy::default(),
            spares: Vec::new(),
            noise_rule: NoiseRule::default(),
            housekeeper_cpu,
            steer: false,
            speed: BTreeMap::new(),
        }
    }

    /// Poll by poll on a made-up `/proc` and a fake kernel: nothing here runs or is pinned, so
    /// the test holds on a machine of any number of CPUs. A thread the shim never saw that
    /// keeps computing is pinned to a task CPU; its sleeping main thread is parked.
    #[test]
    fn a_poll_offline_pins_a_busy_thread_nobody_placed_and_parks_its_sleeping_main_thread() {
        let fake = FakeProc::new();
        let mut threads = process(100, 1, 2);
        threads.iter().for_each(|&t| fake.put(t));
        let kernel = testing::Fake::default();
        for t in &threads {
            kernel.put(t.tid, testing::WIDE);
        }
        let table = testing::table(2);
        let mut hk = Housekeeper::new(
            &fake.root(),
            settings(vec![2, 3], 1),
            table,
            None,
            Box::new(kernel.clone()),
        );
        hk.attach(100);
        let mask = |tid| kernel.get(tid);
        for _ in 0..10 {
            // Ten seconds of run time between polls: busy whatever the wall clock says.
            threads[1].runtime_ns += 10_000_000_000;
            fake.put(threads[1]);
            hk.poll();
        }
        assert!(
            matches!(mask(101), Mask::Cpus(c) if c == [2] || c == [3]),
            "{:?}",
            mask(101)
        );
        assert_eq!(mask(100), Mask::Cpus(vec![1]));
        let out = hk.finish(&Snapshot::read(&fake.root()));
        assert_eq!(out.order, [100, 101]);
        assert_eq!(out.owned.len(), 2, "{:?}", out.owned.keys());
    }

    /// A shell that waits (never runs again) above a shell that waits above `sleep`: both
    /// below the sleeping parent stay followed, poll after poll, until they are gone.
    #[test]
    fn processes_below_a_sleeping_parent_stay_followed() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sh -c 'sleep 5; exit 0'; exit 0"])
            .spawn()
            .expect("sh");
        let table = testing::table(1);
        let me = nix::unistd::gettid().as_raw();
        let mut hk = Housekeeper::new(
            &FsRoot::default(),
            settings(vec![usize::MAX - 1], usize::MAX - 2),
            table,
            None,
            Box::new(placer::Kernel),
        );
        hk.attach(child.id() as i32);
        let comms = |hk: &Housekeeper| -> Vec<(String, bool)> {
            hk.tree
                .order
                .iter()
                .map(|t| &hk.tree.threads[t])
                .map(|t| {
                    (
                        t.stat.as_ref().map_or("?".into(), |s| s.comm.to_string()),
                        t.ended,
                    )
                })
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(3);
        while !comms(&hk).iter().any(|(c, _)| c == "sleep") {
            assert!(
                Instant::now() < deadline,
                "sleep not found: {:?}",
                comms(&hk)
            );
            std::thread::sleep(Duration::from_millis(50));
            hk.poll();
        }
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(50));
            hk.poll();
            let seen = comms(&hk);
            assert_eq!(seen.len(), 3, "{seen:?}");
            assert!(seen.iter().all(|(_, ended)| !ended), "{seen:?}");
            assert_eq!(hk.tree.pids().count(), 3);
        }
        let sleep = *hk.tree.order.last().unwrap();
        assert_ne!(sleep, me);
        // SAFETY: kill signals a pid this test started (its grandchild).
        unsafe { libc::kill(sleep, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while !hk.tree.threads[&sleep].ended {
            assert!(Instant::now() < deadline, "{:?}", comms(&hk));
            std::thread::sleep(Duration::from_millis(20));
            hk.poll();
        }
        child.wait().unwrap();
        hk.poll();
        assert!(
            comms(&hk).iter().all(|(_, ended)| *ended),
            "{:?}",
            comms(&hk)
        );
    }
}
