//! The housekeeper: while the task runs, the launcher (pinned to the housekeeper CPU) polls
//! telemetry and places the threads the shim could not place.
//!
//! Owns: one poll ([`Housekeeper::poll`]): follow the placement log, walk the task's process
//! tree, read every thread's counters, place unplaced threads, sample CPU frequencies; and what
//! the run adds up to ([`Housekeeper::finish`]). Must not: print, or read any file that makes
//! the kernel interrupt a task CPU (see [`threads`] and [`telemetry`] for the files and why
//! they are silent). The launcher stays single-threaded so that nothing it does (an `munmap`,
//! say) sends TLB shootdowns anywhere: its mm runs on the housekeeper CPU only.
//!
//! The tree: every process found is followed until its `/proc/<pid>/task` is gone, and every
//! thread until its own files are gone or it is a zombie, whether its parent runs or not (a
//! shell or `mpirun` waits in `wait4` for the whole run). New processes are found in
//! `/proc/<pid>/task/<tid>/children` (`CONFIG_PROC_CHILDREN`) of each thread that ran since the
//! last poll (only a running thread forks), of every thread of a process that lost one (its
//! children move to a sibling), and of every thread once a second (a `CLONE_PARENT` child);
//! where that file does not exist, by scanning the ppid of every `/proc/<pid>/stat`. What
//! cannot be counted: a thread or process that is born and ends between two polls; what a
//! thread did after the last poll before it ended; a process whose parent ended before the
//! poll that would have seen it (it is re-parented out of the tree). The `wait4` rusage in the
//! Run table does include all of these. Not followed either: a thread that took the tid of an
//! ended one (a non-leader thread's `execve` takes its process's pid, which was seen as a
//! zombie; pid reuse within a run).

pub mod logtail;
pub mod outcome;
pub mod placer;
pub mod policy;
pub mod telemetry;
pub mod threads;
pub mod tracked;

use crate::fsroot::{FsRoot, ReadError};
use logtail::LogTail;
pub use outcome::{Outcome, ThreadReport};
use placer::{Live, Placer, Policy};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};
use telemetry::CpuSampler;
pub use tracked::Tracked;
use tracked::{Mode, Polled};

/// What the housekeeper needs to know about the plan.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Task CPUs in slot order.
    pub task_cpus: Vec<usize>,
    /// The housekeeper CPU.
    pub housekeeper: usize,
    /// Poll interval.
    pub interval: Duration,
    /// Placement thresholds.
    pub policy: Policy,
}

/// How often every live thread's `children` is read, whether it ran or not: the net under
/// the rule that only a thread that ran can have forked (a `CLONE_PARENT` child joins a
/// parent that did not run; a nohz_full CPU may not update a running thread's run time).
const ALL_CHILDREN_EVERY: Duration = Duration::from_secs(1);

/// The housekeeper's state over one run.
pub struct Housekeeper {
    root: FsRoot,
    settings: Settings,
    cpus: CpuSampler,
    placer: Placer,
    log: Option<LogTail>,
    task: Option<i32>,
    /// Processes of the tree still in `/proc`, with their threads not known to have ended.
    procs: BTreeMap<i32, BTreeSet<i32>>,
    /// Each process's own `stat`, whose thread count says whether its task list changed.
    proc_stats: BTreeMap<i32, threads::Handle>,
    /// Each followed process's start time, as first seen.
    starts: BTreeMap<i32, Option<u64>>,
    /// Every thread seen, by tid.
    threads: BTreeMap<i32, Tracked>,
    /// Tids in order of first sight.
    order: Vec<i32>,
    errors: Vec<ReadError>,
    missing: BTreeSet<&'static str>,
    mode: Mode,
    polls: u64,
    all_children_every: u64,
    /// Polls until the next that reads every thread's `children`.
    polls_to_all_children: u64,
    started: Instant,
    cpu_start: Duration,
}

/// CPU time of the launcher process so far.
pub fn own_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn boot_time_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
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

/// The threads of a process, as `/proc/<pid>/task` lists them.
#[derive(Debug, PartialEq, Eq)]
enum Listing {
    /// Its tids, sorted.
    Tids(Vec<i32>),
    /// The process is gone (reaped).
    Gone,
    /// The directory could not be read, though the process may live (out of descriptors).
    Unreadable(String),
}

fn list_threads(root: &FsRoot, pid: i32) -> Listing {
    let dir = match std::fs::read_dir(root.path(&format!("/proc/{pid}/task"))) {
        Ok(d) => d,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
            return Listing::Gone
        }
        Err(e) => return Listing::Unreadable(e.to_string()),
    };
    let mut tids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    // A process being reaped lists nothing: gone as well.
    if tids.is_empty() {
        return Listing::Gone;
    }
    Listing::Tids(tids)
}

impl Housekeeper {
    /// Starts the run's telemetry (the first CPU snapshot), before the task starts. `table` is
    /// the slot table shared with the shim; `log` the placement log, followed and appended to.
    pub fn new(
        root: &FsRoot,
        settings: Settings,
        table: &'static goset_plan::SlotTable,
        log: Option<&std::path::Path>,
    ) -> Housekeeper {
        // Only a regular file: the task may have put a FIFO there, whose open would block.
        let appender = log.and_then(|p| {
            let mut append = std::fs::OpenOptions::new();
            crate::bounded::open_regular(p, append.append(true).create(true)).ok()
        });
        let every = ALL_CHILDREN_EVERY.as_nanos() / settings.interval.as_nanos().max(1);
        Housekeeper {
            root: root.clone(),
            cpus: CpuSampler::start(root, &settings.task_cpus),
            placer: Placer::new(
                table,
                settings.task_cpus.clone(),
                settings.housekeeper,
                appender,
            ),
            all_children_every: every.clamp(1, u64::MAX as u128) as u64,
            settings,
            log: log.map(|p| LogTail::new(p.to_path_buf())),
            task: None,
            procs: BTreeMap::new(),
            proc_stats: BTreeMap::new(),
            starts: BTreeMap::new(),
            threads: BTreeMap::new(),
            order: Vec::new(),
            errors: Vec::new(),
            missing: BTreeSet::new(),
            mode: Mode::default(),
            polls: 0,
            polls_to_all_children: 0,
            started: Instant::now(),
            cpu_start: own_cpu_time(),
        }
    }

    /// The task's process id: the root of the tree to follow. Called once the task runs, so
    /// that the descriptor limit raised here is the launcher's alone.
    pub fn attach(&mut self, pid: i32) {
        threads::set_descriptor_limit(raise_nofile());
        self.task = Some(pid);
        self.procs.entry(pid).or_default();
        self.cpu_start = own_cpu_time();
    }

    /// One poll. Every process of the tree found so far is listed and every thread not known
    /// to have ended is read, whether its parent ran or not; a thread ends when its own files
    /// are gone or it is a zombie, a process when its `/proc/<pid>/task` is gone. New
    /// processes are found in the `children` of the threads that ran (only a running thread
    /// forks), of every thread of a process that lost a thread (its children move to a
    /// sibling), and of every thread once a second.
    pub fn poll(&mut self) {
        self.polls += 1;
        if let Some(log) = &mut self.log {
            log.poll();
        }
        let now = Instant::now();
        let boot_s = boot_time_s();
        let all_children = self.polls_to_all_children == 0;
        self.polls_to_all_children = match self.polls_to_all_children {
            0 => self.all_children_every - 1,
            n => n - 1,
        };
        let mut live = Vec::new();
        let mut ended = Vec::new();
        let mut queue: VecDeque<i32> = self.procs.keys().copied().collect();
        let mut visited = BTreeSet::new();
        let mut found = Vec::new();
        while let Some(pid) = queue.pop_front() {
            if !visited.insert(pid) {
                continue;
            }
            let known = self.procs.remove(&pid).unwrap_or_default();
            // Listing /proc/<pid>/task builds a dentry per thread: skip it while the thread
            // count is what we know (a thread that ends shows as a failed read below, and the
            // once-a-second poll lists anyway).
            let (count, start) = self.process_stat(pid);
            let recorded = self.starts.entry(pid).or_insert(start);
            let reused = matches!((*recorded, start), (Some(a), Some(b)) if a != b);
            if recorded.is_none() {
                *recorded = start;
            }
            if reused {
                // The pid was reused by an unrelated process: ours is gone.
                self.starts.remove(&pid);
                self.proc_stats.remove(&pid);
                self.end(known, &mut ended);
                continue;
            }
            let unchanged = !all_children && !known.is_empty() && count == Some(known.len());
            let listing = if unchanged {
                Listing::Tids(known.iter().copied().collect())
            } else {
                list_threads(&self.root, pid)
            };
            let tids = match listing {
                Listing::Tids(t) => t,
                Listing::Gone => {
                    self.proc_stats.remove(&pid);
                    self.starts.remove(&pid);
                    self.end(known, &mut ended);
                    continue;
                }
                Listing::Unreadable(why) => {
                    // Not gone: its threads are neither read nor ended this time.
                    self.note_failed("/proc/<pid>/task", why);
                    self.procs.insert(pid, known);
                    continue;
                }
            };
            let mut alive = BTreeSet::new();
            let mut lost = BTreeSet::new();
            let first = live.len();
            // Each thread is read at most once a poll: a second read would see no time pass
            // and make a busy thread look idle.
            let read_each = |hk: &mut Self,
                             tids: Vec<i32>,
                             found: &mut Vec<i32>,
                             live: &mut Vec<Live>,
                             alive: &mut BTreeSet<i32>,
                             lost: &mut BTreeSet<i32>| {
                for tid in tids {
                    if hk.threads.get(&tid).is_some_and(|t| t.ended) {
                        continue;
                    }
                    match hk.read_thread(pid, tid, now, boot_s, all_children, found) {
                        Some(l) => {
                            alive.insert(tid);
                            live.push(l);
                        }
                        None => {
                            lost.insert(tid);
                        }
                    }
                }
            };
            read_each(self, tids, &mut found, &mut live, &mut alive, &mut lost);
            if unchanged && !lost.is_empty() {
                // A thread ended while the count held, so another was born: list, and read
                // only the threads not read above.
                if let Listing::Tids(now_listed) = list_threads(&self.root, pid) {
                    let new: Vec<i32> = now_listed
                        .into_iter()
                        .filter(|t| !alive.contains(t) && !lost.contains(t))
                        .collect();
                    read_each(self, new, &mut found, &mut live, &mut alive, &mut lost);
                }
            }
            lost.extend(known.difference(&alive));
            if !lost.is_empty() && !all_children && !self.mode.no_children {
                // A thread's children move to a live sibling when it ends, maybe one that sleeps.
                for l in &live[first..] {
                    if let Some(t) = self.threads.get_mut(&l.tid) {
                        t.children(&mut found);
                    }
                }
            }
            self.end(lost, &mut ended);
            self.procs.insert(pid, alive);
            for child in found.drain(..) {
                self.procs.entry(child).or_default();
                queue.push_back(child);
            }
        }
        ended.sort_unstable();
        ended.dedup();
        if self.mode.no_children {
            self.scan_for_children(&visited);
        }
        self.placer.step(&live, &ended, &self.settings.policy);
        self.cpus.poll();
    }

    /// Process `pid`'s thread count and start time (clock ticks after boot), from its own
    /// `stat`; the start time tells a reused pid from the process we followed.
    fn process_stat(&mut self, pid: i32) -> (Option<usize>, Option<u64>) {
        let root = &self.root;
        let handle = self
            .proc_stats
            .entry(pid)
            .or_insert_with(|| threads::Handle::new(root.path(&format!("/proc/{pid}/stat"))));
        match handle.read() {
            threads::Read::Text(text) => (
                threads::parse_num_threads(&text),
                threads::parse_stat(&text).map(|s| s.start_ticks),
            ),
            _ => (None, None),
        }
    }

    /// Marks `tids` ended (their files gone without a read noticing) and adds them to `ended`.
    fn end(&mut self, tids: BTreeSet<i32>, ended: &mut Vec<i32>) {
        for tid in tids {
            if let Some(t) = self.threads.get_mut(&tid) {
                if !t.ended {
                    t.ended = true;
                    t.close();
                }
            }
            ended.push(tid);
        }
    }

    fn note_missing(&mut self, file: &'static str, reason: &str) {
        if self.missing.insert(file) {
            self.errors.push(ReadError {
                file: threads::pattern(file),
                reason: reason.to_string(),
            });
        }
    }

    fn note_failed(&mut self, file: &str, why: String) {
        let file = if file.starts_with('/') {
            file.to_string()
        } else {
            threads::pattern(file)
        };
        let e = ReadError { file, reason: why };
        if !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }

    /// Reads one thread; `None` when it has ended. The processes it forked join `found`.
    fn read_thread(
        &mut self,
        pid: i32,
        tid: i32,
        now: Instant,
        boot_s: f64,
        all_children: bool,
        found: &mut Vec<i32>,
    ) -> Option<Live> {
        if !self.threads.contains_key(&tid) {
            self.order.push(tid);
            self.threads.insert(tid, Tracked::new(&self.root, pid, tid));
        }
        let t = self.threads.get_mut(&tid).expect("inserted above");
        let polled = t.read(self.mode, now, boot_s, all_children, found)?;
        let shim = self.log.as_ref().and_then(|l| l.shim.get(&tid)).copied();
        // The assignment as of this poll, checked against where it runs by the next one.
        t.assigned = match (shim, self.placer.owned.get(&tid)) {
            (Some(s), _) => s.cpu,
            (None, Some(o)) => Some(o.cpu),
            _ => None,
        };
        let Polled {
            comm,
            age_s,
            demand,
            missing,
            failed,
        } = polled;
        for f in missing {
            let why = match f {
                "sched" => "missing (CONFIG_SCHED_DEBUG off): migrations n/a, switches from status",
                "schedstat" => "missing (CONFIG_SCHED_INFO off): run delay n/a, cpu time in ticks",
                _ => "missing (CONFIG_PROC_CHILDREN off): children found by scanning /proc/*/stat",
            };
            self.note_missing(f, why);
            match f {
                "sched" => self.mode.no_sched = true,
                "schedstat" => self.mode.no_schedstat = true,
                _ => self.mode.no_children = true,
            }
        }
        for (f, why) in failed {
            self.note_failed(f, why);
        }
        Some(Live {
            tid,
            pid,
            comm,
            age_s,
            demand,
            shim_placed: shim.is_some(),
            shim_cpu: shim.and_then(|s| s.cpu),
        })
    }

    /// Without `children` files: processes whose parent is in the tree.
    fn scan_for_children(&mut self, known: &BTreeSet<i32>) {
        for name in self.root.list("/proc") {
            let Ok(pid) = name.parse::<i32>() else {
                continue;
            };
            if known.contains(&pid) {
                continue;
            }
            let Ok(text) = self.root.read(&format!("/proc/{pid}/stat")) else {
                continue;
            };
            if threads::parse_stat(&text).is_some_and(|s| known.contains(&s.ppid)) {
                self.procs.entry(pid).or_default();
            }
        }
    }

    /// Ends the run: the closing CPU snapshot, slots given back, everything gathered.
    pub fn finish(mut self) -> Outcome {
        // The task was reaped after the last poll: whatever is gone now ended (a path walk per
        // thread, once).
        for (tid, t) in self.threads.iter_mut() {
            if !t.ended && !self.root.exists(&format!("/proc/{}/task/{tid}", t.pid)) {
                t.ended = true;
            }
            t.close();
        }
        self.placer.release_all();
        let cpu_s = own_cpu_time().saturating_sub(self.cpu_start).as_secs_f64();
        let wall_s = self.started.elapsed().as_secs_f64();
        let (cpus, all, mut errors) = self.cpus.finish();
        errors.extend(self.errors);
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
            cpu_s,
            cpus,
            all,
            threads: self.threads,
            order: self.order,
            owned: self.placer.owned,
            records: std::mem::take(&mut self.placer.records),
            errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell that waits (never runs again) above a shell that waits above `sleep`: both
    /// below the sleeping parent stay followed, poll after poll, until they are gone.
    #[test]
    fn processes_below_a_sleeping_parent_stay_followed() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sh -c 'sleep 5; exit 0'; exit 0"])
            .spawn()
            .expect("sh");
        let table = goset_plan::slots::map(None).unwrap();
        table.init(1);
        let me = nix::unistd::gettid().as_raw();
        let settings = Settings {
            task_cpus: vec![usize::MAX - 1],
            housekeeper: usize::MAX - 2,
            interval: Duration::from_millis(100),
            policy: Policy::default(),
        };
        let mut hk = Housekeeper::new(&FsRoot::default(), settings, table, None);
        hk.attach(child.id() as i32);
        let comms = |hk: &Housekeeper| -> Vec<(String, bool)> {
            hk.order
                .iter()
                .map(|t| &hk.threads[t])
                .map(|t| {
                    (
                        t.stat.as_ref().map_or("?".into(), |s| s.comm.clone()),
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
            assert_eq!(hk.procs.len(), 3, "{:?}", hk.procs);
        }
        let sleep = *hk.order.last().unwrap();
        assert_ne!(sleep, me);
        // SAFETY: kill signals a pid this test started (its grandchild).
        unsafe { libc::kill(sleep, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while !hk.threads[&sleep].ended {
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
