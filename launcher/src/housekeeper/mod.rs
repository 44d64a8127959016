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
//! Processes of the tree are found through `/proc/<pid>/task/<tid>/children` of every live
//! thread (`CONFIG_PROC_CHILDREN`), or, where that file does not exist, by scanning the ppid of
//! every `/proc/<pid>/stat`. What cannot be counted: a thread or process that is born and ends
//! between two polls; what a thread did after the last poll before it ended; a process whose
//! parent ended before the poll that would have seen it (it is re-parented out of the tree).
//! The `wait4` rusage in the Run table does include all of these.

pub mod logtail;
pub mod outcome;
pub mod placer;
pub mod telemetry;
pub mod threads;

use crate::fsroot::{FsRoot, ReadError};
use crate::noise::USER_HZ;
use logtail::LogTail;
pub use outcome::{Outcome, ThreadReport};
use placer::{Live, Placer, Policy};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};
use telemetry::CpuSampler;
use threads::{Read, SchedStat, Stat, Switches, ThreadFiles};

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

/// One thread followed over the run.
#[derive(Debug)]
pub struct Tracked {
    /// Process id.
    pub pid: i32,
    files: Option<ThreadFiles>,
    /// Last `stat`.
    pub stat: Option<Stat>,
    /// Last `schedstat`.
    pub sched: Option<SchedStat>,
    /// Last context switch and migration counters.
    pub switches: Option<Switches>,
    /// CPUs it ran on (stat field 39 at each poll after which it had run).
    pub seen_on: BTreeSet<usize>,
    /// Polls at which it had run outside the CPU assigned to it at the poll before.
    pub drift_polls: u32,
    /// Polls that read it.
    pub polls: u32,
    /// It ended (or became a zombie).
    pub ended: bool,
    assigned: Option<usize>,
    demand_base: Option<(Instant, u64)>,
}

/// The housekeeper's state over one run.
pub struct Housekeeper {
    root: FsRoot,
    settings: Settings,
    cpus: CpuSampler,
    placer: Placer,
    log: Option<LogTail>,
    task: Option<i32>,
    procs: BTreeSet<i32>,
    /// Every thread seen, by tid.
    threads: BTreeMap<i32, Tracked>,
    /// Tids in order of first sight.
    order: Vec<i32>,
    errors: Vec<ReadError>,
    missing: BTreeSet<&'static str>,
    scan_ppids: bool,
    polls: u64,
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

impl Housekeeper {
    /// Starts the run's telemetry (the first CPU snapshot), before the task starts. `table` is
    /// the slot table shared with the shim; `log` the placement log, followed and appended to.
    pub fn new(
        root: &FsRoot,
        settings: Settings,
        table: &'static goset_plan::SlotTable,
        log: Option<&std::path::Path>,
    ) -> Housekeeper {
        let appender = log.and_then(|p| {
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(p)
                .ok()
        });
        Housekeeper {
            root: root.clone(),
            cpus: CpuSampler::start(root, &settings.task_cpus),
            placer: Placer::new(
                table,
                settings.task_cpus.clone(),
                settings.housekeeper,
                appender,
            ),
            settings,
            log: log.map(|p| LogTail::new(p.to_path_buf())),
            task: None,
            procs: BTreeSet::new(),
            threads: BTreeMap::new(),
            order: Vec::new(),
            errors: Vec::new(),
            missing: BTreeSet::new(),
            scan_ppids: false,
            polls: 0,
            started: Instant::now(),
            cpu_start: own_cpu_time(),
        }
    }

    /// The task's process id: the root of the tree to follow.
    pub fn attach(&mut self, pid: i32) {
        self.task = Some(pid);
        self.procs.insert(pid);
        self.cpu_start = own_cpu_time();
    }

    /// One poll.
    pub fn poll(&mut self) {
        self.polls += 1;
        if let Some(log) = &mut self.log {
            log.poll();
        }
        let now = Instant::now();
        let boot_s = boot_time_s();
        let mut live = Vec::new();
        let mut ended = Vec::new();
        let mut queue: VecDeque<i32> = self.procs.iter().copied().collect();
        let mut visited = BTreeSet::new();
        while let Some(pid) = queue.pop_front() {
            if !visited.insert(pid) {
                continue;
            }
            let tids = self.list_threads(pid);
            if tids.is_empty() {
                self.procs.remove(&pid);
            }
            for tid in tids {
                if self.threads.get(&tid).is_some_and(|t| t.ended) {
                    continue;
                }
                match self.read_thread(pid, tid, now, boot_s, &mut queue) {
                    Some(l) => live.push(l),
                    None => ended.push(tid),
                }
            }
        }
        // Threads of processes that vanished, and threads that left their process's list.
        let live_tids: BTreeSet<i32> = live.iter().map(|l: &Live| l.tid).collect();
        for (&tid, t) in self.threads.iter_mut() {
            if !t.ended && !live_tids.contains(&tid) {
                t.ended = true;
                t.files = None;
                ended.push(tid);
            }
        }
        ended.sort_unstable();
        ended.dedup();
        if self.scan_ppids {
            self.scan_for_children(&visited);
        }
        self.placer.step(&live, &ended, &self.settings.policy);
        self.cpus.poll();
    }

    fn list_threads(&self, pid: i32) -> Vec<i32> {
        let mut tids: Vec<i32> = self
            .root
            .list(&format!("/proc/{pid}/task"))
            .iter()
            .filter_map(|t| t.parse().ok())
            .collect();
        tids.sort_unstable();
        tids
    }

    fn note_missing(&mut self, file: &'static str, reason: &str) {
        if self.missing.insert(file) {
            self.errors.push(ReadError {
                file: threads::pattern(file),
                reason: reason.to_string(),
            });
        }
    }

    fn note_failed(&mut self, file: &'static str, why: String) {
        let e = ReadError {
            file: threads::pattern(file),
            reason: why,
        };
        if !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }

    /// Reads one thread; `None` when it has ended. Its children join `queue`.
    fn read_thread(
        &mut self,
        pid: i32,
        tid: i32,
        now: Instant,
        boot_s: f64,
        queue: &mut VecDeque<i32>,
    ) -> Option<Live> {
        if !self.threads.contains_key(&tid) {
            self.order.push(tid);
            self.threads.insert(
                tid,
                Tracked {
                    pid,
                    files: Some(ThreadFiles::new(&self.root, pid, tid)),
                    stat: None,
                    sched: None,
                    switches: None,
                    seen_on: BTreeSet::new(),
                    drift_polls: 0,
                    polls: 0,
                    ended: false,
                    assigned: None,
                    demand_base: None,
                },
            );
        }
        let t = self.threads.get_mut(&tid).expect("inserted above");
        let files = t.files.as_mut()?;
        let skip_sched = self.missing.contains("schedstat");
        let use_status = self.missing.contains("sched");
        let mut missing = Vec::new();
        let mut failed = Vec::new();
        let prev_slices = t.sched.map(|s| s.timeslices);
        // schedstat first: the cheapest file, and it says whether the thread was scheduled
        // since the last poll. One that was not cannot have switched, migrated, forked or
        // moved, so its other files are not read: a sleeping thread costs one pread a poll.
        if !skip_sched {
            match files.schedstat.read() {
                Read::Text(s) => t.sched = threads::parse_schedstat(&s).or(t.sched),
                Read::Gone => {
                    t.ended = true;
                    t.files = None;
                    return None;
                }
                Read::Missing => missing.push("schedstat"),
                Read::Failed(why) => failed.push(("schedstat", why)),
            }
        }
        let scheduled = match (prev_slices, t.sched) {
            (Some(p), Some(s)) => s.timeslices != p,
            _ => true,
        };
        let prev_ticks = t.stat.as_ref().map(|s| s.cpu_ticks);
        let stat = match &t.stat {
            Some(st) if !scheduled => st.clone(),
            _ => {
                let stat = match files.stat.read() {
                    Read::Text(s) => threads::parse_stat(&s),
                    _ => None,
                };
                let Some(stat) = stat.filter(|s| !matches!(s.state, 'Z' | 'X')) else {
                    t.ended = true;
                    t.files = None;
                    return None;
                };
                let switches = if use_status {
                    files.status.read()
                } else {
                    files.sched.read()
                };
                match switches {
                    Read::Text(s) if use_status => {
                        t.switches = threads::parse_status_switches(&s).or(t.switches)
                    }
                    Read::Text(s) => t.switches = threads::parse_sched(&s).or(t.switches),
                    Read::Missing if !use_status => missing.push("sched"),
                    Read::Failed(why) => failed.push(("sched", why)),
                    _ => {}
                }
                if !self.scan_ppids {
                    match files.children.read() {
                        Read::Text(s) => queue.extend(threads::parse_children(&s)),
                        Read::Missing => missing.push("children"),
                        _ => {}
                    }
                }
                stat
            }
        };
        // Ran since the last poll: only then is stat's processor where it ran since.
        let ran = match (t.sched, prev_ticks) {
            (Some(_), _) => scheduled,
            (None, Some(p)) => stat.cpu_ticks != p,
            (None, None) => true,
        };
        if let Some(cpu) = stat.processor.filter(|_| ran) {
            t.seen_on.insert(cpu);
            if t.assigned.is_some_and(|a| a != cpu) && t.polls > 0 {
                t.drift_polls += 1;
            }
        }
        let base = match t.sched {
            Some(s) => s.runtime_ns.saturating_add(s.run_delay_ns),
            None => stat.cpu_ticks * (1_000_000_000 / USER_HZ),
        };
        let age_s = (boot_s - stat.start_ticks as f64 / USER_HZ as f64).max(0.0);
        let demand = match t.demand_base {
            Some((then, was)) => {
                let dt = now.saturating_duration_since(then).as_secs_f64();
                if dt > 0.0 {
                    base.saturating_sub(was) as f64 / 1e9 / dt
                } else {
                    0.0
                }
            }
            // First sight: since birth; one tick at least, as start times count in ticks.
            None => base as f64 / 1e9 / age_s.max(1.0 / USER_HZ as f64),
        };
        t.demand_base = Some((now, base));
        t.polls += 1;
        let shim = self.log.as_ref().and_then(|l| l.shim.get(&tid)).copied();
        // The assignment as of this poll, checked against where it runs by the next one.
        t.assigned = match (shim, self.placer.owned.get(&tid)) {
            (Some(s), _) => s.cpu,
            (None, Some(o)) => Some(o.cpu),
            _ => None,
        };
        let comm = stat.comm.clone();
        t.stat = Some(stat);
        for f in missing {
            let why = match f {
                "sched" => "missing (CONFIG_SCHED_DEBUG off): migrations n/a, switches from status",
                "schedstat" => "missing (CONFIG_SCHED_INFO off): run delay n/a, cpu time in ticks",
                _ => "missing (CONFIG_PROC_CHILDREN off): children found by scanning /proc/*/stat",
            };
            self.note_missing(f, why);
            self.scan_ppids |= f == "children";
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
                self.procs.insert(pid);
            }
        }
    }

    /// Ends the run: the closing CPU snapshot, slots given back, everything gathered.
    pub fn finish(mut self) -> Outcome {
        for t in self.threads.values_mut() {
            t.files = None;
        }
        self.placer.release_all();
        let cpu_s = own_cpu_time().saturating_sub(self.cpu_start).as_secs_f64();
        let wall_s = self.started.elapsed().as_secs_f64();
        let (cpus, all, mut errors) = self.cpus.finish();
        errors.extend(self.errors);
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
