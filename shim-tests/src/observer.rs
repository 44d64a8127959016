//! Watches a running task from `/proc`, from outside: every [`PERIOD`] it reads each thread's
//! run time (`/proc/<pid>/task/<tid>/schedstat`, first field: nanoseconds on a CPU) and the CPU
//! it last ran on (`stat` field 39, `processor`) for every process of the task's tree, and
//! reports pairs of threads that stayed doubled up on one CPU while both burned.
//!
//! The rule: no two threads may each burn at least [`SHARE`] of a window on the same CPU for
//! [`WINDOWS`] consecutive windows. Two busy threads on one CPU each get about half of it, so
//! "more than half" would almost never be seen; and the kernel adds a running thread's time to
//! its `schedstat` at scheduler ticks and switches, so a 20 ms window's figure is off by up to a
//! tick either way. 0.4 of the window, as measured between the two reads of that thread (the
//! sampler's sleep is never exact), still catches two threads sharing a CPU and cannot be
//! reached by a thread that merely runs beside a busy one for a moment. (Two spinning threads
//! that take turns tick by tick on a 250 Hz kernel read 60/40, 40/60, ...: a window a little
//! over 20 ms puts one of them just under 40%, so a pair doubled up for seconds shows as many
//! streaks of three or more windows rather than one.) A thread counts on a
//! CPU in a window only when `processor` names that CPU at both ends: a thread that moved
//! within the window cannot be said to have shared either CPU all along. And a window counts
//! only while some CPU the task has run on had no thread of it burning: with more busy threads
//! than CPUs (an OpenBLAS worker still spinning beside an OpenMP team) some must share, under
//! any placement or a plain mask; the rule is that they never share while a CPU is left idle.
//! So a streak is a finding only when another CPU the task has run on was idle (`/proc/stat`:
//! idle and iowait) for at least [`SHARE`] of the streak: a CPU taken by another process or by
//! the hypervisor (steal) is not left idle, and a plain mask would double the pair up too. Such
//! streaks are kept apart ([`Watch::excused`]) and shown with each CPU's idle and steal shares.
//!
//! The task's tree is found by a parent-pid scan of `/proc` (`/proc/<pid>/task/*/children`
//! needs `CONFIG_PROC_CHILDREN`, which not every kernel has): every process whose ancestor is
//! the root. Under goset-run the root is goset-run itself and its own threads (the
//! housekeeper) are left out: the task is its child.

use goset::noise::{CpuTimes, USER_HZ};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the observer reads `/proc`.
pub const PERIOD: Duration = Duration::from_millis(20);
/// The share of a window that counts as burning (see the module's note for why not 0.5).
pub const SHARE: f64 = 0.4;
/// How many windows in a row make a doubled-up pair.
pub const WINDOWS: usize = 3;

/// The environment variable [`Root::Tagged`] looks for in the environment of a child of this
/// test process, to find a process that another function (such as `run()`) starts.
pub const TAG_VAR: &str = "SHIM_TESTS_OBSERVE";

/// A tag no other run of this test process carries, for [`Root::Tagged`].
pub fn tag() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    format!("{}-{n}", std::process::id())
}

/// Where the task's tree starts.
#[derive(Debug, Clone)]
pub enum Root {
    /// A process this test started itself.
    Pid(i32),
    /// The child of this test process whose environment holds `SHIM_TESTS_OBSERVE=<tag>`
    /// (looked for until it turns up).
    Tagged(String),
}

/// A thread as the observer saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    /// Its process.
    pub pid: i32,
    /// The thread.
    pub tid: i32,
    /// Its name when last read.
    pub comm: String,
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tid {} ({}, pid {})", self.tid, self.comm, self.pid)
    }
}

/// Two threads that each burned at least [`SHARE`] of every window on `cpu` from `from_s` to
/// `to_s` (seconds since the observer started; `epoch_from` is `from_s` as Unix time, to
/// compare with the placement log's `time`).
#[derive(Debug, Clone)]
pub struct Doubled {
    /// The CPU both burned on.
    pub cpu: i32,
    /// One of the two threads.
    pub a: Seen,
    /// The other.
    pub b: Seen,
    /// When the streak began, in seconds since the observer started.
    pub from_s: f64,
    /// When it ended, likewise.
    pub to_s: f64,
    /// `from_s` as Unix time.
    pub epoch_from: f64,
    /// Each window's shares of the two threads.
    pub shares: Vec<(f64, f64)>,
    /// Each other CPU the task ran on: its idle and steal shares over the streak.
    pub others: Vec<(i32, f64, f64)>,
}

impl fmt::Display for Doubled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shares: Vec<String> = (self.shares.iter())
            .map(|(a, b)| format!("{:.0}/{:.0}", a * 100.0, b * 100.0))
            .collect();
        let others: Vec<String> = (self.others.iter())
            .map(|(cpu, idle, steal)| format!("cpu {cpu} {:.0}/{:.0}", idle * 100.0, steal * 100.0))
            .collect();
        write!(
            f,
            "cpu {}: {} and {} from {:.2} s to {:.2} s (unix {:.3}), {} windows, % of each window: {}; \
             other cpus idle/steal %: {}",
            self.cpu,
            self.a,
            self.b,
            self.from_s,
            self.to_s,
            self.epoch_from,
            self.shares.len(),
            shares.join(" "),
            others.join(" ")
        )
    }
}

/// One thread's run over the whole watch.
#[derive(Debug, Clone)]
pub struct ThreadSummary {
    /// The thread.
    pub seen: Seen,
    /// Run time between its first and last read, in seconds.
    pub run_s: f64,
    /// Every CPU `processor` named.
    pub cpus: BTreeSet<i32>,
}

/// What the observer found.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    /// The root it found (`None`: the tagged process never showed up).
    pub root: Option<i32>,
    /// How many windows held at least one thread of the task.
    pub windows: usize,
    /// Every thread of the task it saw.
    pub threads: Vec<ThreadSummary>,
    /// Streaks of two task threads on one CPU while another CPU of the task was left idle.
    pub doubled: Vec<Doubled>,
    /// Streaks while no other CPU of the task was left idle (see the module's note).
    pub excused: Vec<Doubled>,
}

impl Watch {
    /// The threads that ran at least 50 ms, busiest first, one a line.
    fn busy_threads(&self) -> String {
        let mut busy: Vec<&ThreadSummary> =
            self.threads.iter().filter(|t| t.run_s >= 0.05).collect();
        busy.sort_by(|x, y| y.run_s.total_cmp(&x.run_s));
        let lines: Vec<String> = (busy.iter())
            .map(|t| format!("  {} ran {:.2} s on cpus {:?}", t.seen, t.run_s, t.cpus))
            .collect();
        lines.join("\n")
    }

    /// Everything, for messages.
    pub fn summary(&self) -> String {
        let lines = |pairs: &[Doubled]| {
            let lines: Vec<String> = pairs.iter().map(|d| format!("\n  {d}")).collect();
            lines.concat()
        };
        format!(
            "root {:?}, {} windows; doubled-up pairs ({}):{}\nnot counted, no other CPU left \
             idle ({}):{}\nbusy threads:\n{}",
            self.root,
            self.windows,
            self.doubled.len(),
            lines(&self.doubled),
            self.excused.len(),
            lines(&self.excused),
            self.busy_threads()
        )
    }

    /// The tids of the doubled-up threads.
    pub fn doubled_tids(&self) -> BTreeSet<i32> {
        (self.doubled.iter())
            .flat_map(|d| [d.a.tid, d.b.tid])
            .collect()
    }
}

/// The busiest processes of the machine now, from `ps`, for failure messages: what else held
/// the CPUs.
pub fn busiest_processes() -> String {
    let out = std::process::Command::new("ps")
        .args(["-eo", "pid,psr,pcpu,etime,args", "--sort=-pcpu"])
        .output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let text = text.unwrap_or_default();
    text.lines().take(8).collect::<Vec<_>>().join("\n")
}

/// A sampler thread, started by [`Observer::start`] and ended by [`Observer::finish`].
pub struct Observer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Watch>>,
}

impl Observer {
    /// Starts watching the tree under `root`; `with_root` false leaves the root process's own
    /// threads out (goset-run).
    pub fn start(root: Root, with_root: bool) -> Observer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || Sampler::new(root, with_root).watch(&flag));
        Observer {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the sampler and returns what it found.
    pub fn finish(mut self) -> Watch {
        self.stop.store(true, Ordering::SeqCst);
        let handle = self.handle.take().expect("finish once");
        handle.join().expect("the observer thread panicked")
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One read of one thread.
#[derive(Clone)]
struct Read {
    seen: Seen,
    run_ns: u64,
    cpu: i32,
    at: Instant,
}

/// A pair's current streak of windows on one CPU.
struct Streak {
    from: Instant,
    to: Instant,
    shares: Vec<(f64, f64)>,
    a: Seen,
    b: Seen,
    /// Each CPU's [`cpu_times`] when the streak began, and after its last window.
    times_from: BTreeMap<usize, CpuTimes>,
    times_to: BTreeMap<usize, CpuTimes>,
}

/// Every online CPU's times now, from the launcher's own `/proc/stat` parser (empty when it
/// cannot be read: no CPU is then known idle or not).
pub fn cpu_times() -> BTreeMap<usize, CpuTimes> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    goset::noise::parse_proc_stat(&text).map_or_else(|_| BTreeMap::new(), |stat| stat.cpus)
}

/// The share of CPU `cpu`'s accounted time between two [`cpu_times`] readings that it was
/// idle (idle and iowait); `None` when either reading lacks it or no tick passed.
pub fn idle_share(
    cpu: usize,
    from: &BTreeMap<usize, CpuTimes>,
    to: &BTreeMap<usize, CpuTimes>,
) -> Option<f64> {
    let d = to.get(&cpu)?.since(from.get(&cpu)?);
    let total = d.total();
    (total > 0).then(|| (d.idle + d.iowait) as f64 / total as f64)
}

struct Sampler {
    root: Root,
    root_pid: Option<i32>,
    with_root: bool,
    own_pid: i32,
    /// Parent of every process seen in `/proc` (read once per pid).
    parents: HashMap<i32, i32>,
    started: Instant,
    started_epoch: f64,
    last: HashMap<i32, Read>,
    first: HashMap<i32, Read>,
    cpus_seen: HashMap<i32, BTreeSet<i32>>,
    streaks: HashMap<(i32, i32, i32), Streak>,
    /// [`cpu_times`] at the end of the last window.
    times: BTreeMap<usize, CpuTimes>,
    watch: Watch,
}

/// `/proc/<pid>/stat` or a thread's `stat`: (comm, the fields after it, from field 3 on).
fn read_stat(path: &str) -> Option<(String, Vec<String>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    let rest = text[close + 1..].split_whitespace().map(str::to_string);
    Some((comm, rest.collect()))
}

/// Field `n` (1-based, as in proc(5)) of a split `stat`.
fn field(fields: &[String], n: usize) -> Option<i64> {
    fields.get(n - 3)?.parse().ok()
}

fn proc_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    (dir.filter_map(Result::ok))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

impl Sampler {
    fn new(root: Root, with_root: bool) -> Sampler {
        let started_epoch = (SystemTime::now().duration_since(UNIX_EPOCH))
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let root_pid = match root {
            Root::Pid(pid) => Some(pid),
            Root::Tagged(_) => None,
        };
        Sampler {
            root,
            root_pid,
            with_root,
            own_pid: std::process::id() as i32,
            parents: HashMap::new(),
            started: Instant::now(),
            started_epoch,
            last: HashMap::new(),
            first: HashMap::new(),
            cpus_seen: HashMap::new(),
            streaks: HashMap::new(),
            times: BTreeMap::new(),
            watch: Watch::default(),
        }
    }

    fn watch(mut self, stop: &AtomicBool) -> Watch {
        let mut next = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            self.sample();
            next += PERIOD;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
        }
        let open: Vec<(i32, i32, i32)> = self.streaks.keys().copied().collect();
        for key in open {
            self.close_streak(key);
        }
        self.watch.root = self.root_pid;
        self.watch
            .doubled
            .sort_by(|x, y| x.from_s.total_cmp(&y.from_s));
        for (tid, first) in &self.first {
            let last = &self.last[tid];
            self.watch.threads.push(ThreadSummary {
                seen: last.seen.clone(),
                run_s: last.run_ns.saturating_sub(first.run_ns) as f64 / 1e9,
                cpus: self.cpus_seen.remove(tid).unwrap_or_default(),
            });
        }
        self.watch.threads.sort_by_key(|t| t.seen.tid);
        self.watch
    }

    /// Learns the parent of every new pid in `/proc`, forgets those gone, and finds the root.
    fn scan(&mut self) {
        let pids = proc_pids();
        let present: BTreeSet<i32> = pids.iter().copied().collect();
        self.parents.retain(|pid, _| present.contains(pid));
        for pid in pids {
            if self.parents.contains_key(&pid) {
                continue;
            }
            if let Some(ppid) =
                read_stat(&format!("/proc/{pid}/stat")).and_then(|(_, f)| field(&f, 4))
            {
                self.parents.insert(pid, ppid as i32);
            }
        }
        if self.root_pid.is_none() {
            self.root_pid = self.find_tagged();
        }
    }

    /// The child of this process whose environment holds the tag (re-read every time: a child
    /// forked but not yet exec'd still has this process's environment).
    fn find_tagged(&self) -> Option<i32> {
        let Root::Tagged(tag) = &self.root else {
            return None;
        };
        let wanted = format!("{TAG_VAR}={tag}");
        (self.parents.iter())
            .filter(|(_, &ppid)| ppid == self.own_pid)
            .map(|(&pid, _)| pid)
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == wanted.as_bytes()))
            })
    }

    /// The processes of the task: the root's descendants (and the root, `with_root`).
    fn tree(&self) -> Vec<i32> {
        let Some(root) = self.root_pid else {
            return Vec::new();
        };
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for (&pid, &ppid) in &self.parents {
            children.entry(ppid).or_default().push(pid);
        }
        let mut tree = Vec::new();
        let mut todo = vec![root];
        while let Some(pid) = todo.pop() {
            if pid != root || self.with_root {
                tree.push(pid);
            }
            todo.extend(children.get(&pid).into_iter().flatten());
        }
        tree
    }

    fn read_threads(pid: i32) -> Vec<Read> {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        let mut reads = Vec::new();
        for entry in dir.filter_map(Result::ok) {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let base = format!("/proc/{pid}/task/{tid}");
            let run_ns = std::fs::read_to_string(format!("{base}/schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok());
            let stat = read_stat(&format!("{base}/stat"));
            let at = Instant::now();
            let (Some(run_ns), Some((comm, fields))) = (run_ns, stat) else {
                continue;
            };
            let Some(cpu) = field(&fields, 39) else {
                continue;
            };
            reads.push(Read {
                seen: Seen { pid, tid, comm },
                run_ns,
                cpu: cpu as i32,
                at,
            });
        }
        reads
    }

    fn sample(&mut self) {
        self.scan();
        let reads: Vec<Read> = self
            .tree()
            .into_iter()
            .flat_map(Self::read_threads)
            .collect();
        let times = cpu_times();
        let times_before = std::mem::replace(&mut self.times, times.clone());
        // Each CPU's burning threads in this window, with their shares.
        let mut on_cpu: BTreeMap<i32, Vec<(Read, f64)>> = BTreeMap::new();
        let mut window: Option<(Instant, Instant)> = None;
        for read in &reads {
            let tid = read.seen.tid;
            self.cpus_seen.entry(tid).or_default().insert(read.cpu);
            self.first.entry(tid).or_insert_with(|| read.clone());
            if let Some(before) = self.last.get(&tid) {
                let span = read.at.duration_since(before.at).as_secs_f64();
                let burned = read.run_ns.saturating_sub(before.run_ns) as f64 / 1e9;
                let (from, to) = window.get_or_insert((before.at, read.at));
                *from = (*from).min(before.at);
                *to = (*to).max(read.at);
                if span > 0.0 && before.cpu == read.cpu && burned >= SHARE * span {
                    on_cpu
                        .entry(read.cpu)
                        .or_default()
                        .push((read.clone(), burned / span));
                }
            }
            self.last.insert(tid, read.clone());
        }
        let Some((from, to)) = window else {
            return;
        };
        self.watch.windows += 1;
        let mut hit: BTreeSet<(i32, i32, i32)> = BTreeSet::new();
        let task_cpus: BTreeSet<i32> = self.cpus_seen.values().flatten().copied().collect();
        let one_idle = task_cpus.iter().any(|c| !on_cpu.contains_key(c));
        for (&cpu, burning) in on_cpu.iter().filter(|_| one_idle) {
            for (i, (a, share_a)) in burning.iter().enumerate() {
                for (b, share_b) in &burning[i + 1..] {
                    let (a, b, share_a, share_b) = if a.seen.tid < b.seen.tid {
                        (a, b, *share_a, *share_b)
                    } else {
                        (b, a, *share_b, *share_a)
                    };
                    let key = (cpu, a.seen.tid, b.seen.tid);
                    hit.insert(key);
                    let streak = self.streaks.entry(key).or_insert_with(|| Streak {
                        from,
                        to,
                        shares: Vec::new(),
                        a: a.seen.clone(),
                        b: b.seen.clone(),
                        times_from: times_before.clone(),
                        times_to: BTreeMap::new(),
                    });
                    streak.to = to;
                    streak.times_to.clone_from(&times);
                    streak.shares.push((share_a, share_b));
                    streak.a.comm.clone_from(&a.seen.comm);
                    streak.b.comm.clone_from(&b.seen.comm);
                }
            }
        }
        let ended: Vec<(i32, i32, i32)> = (self.streaks.keys())
            .filter(|k| !hit.contains(k))
            .copied()
            .collect();
        for key in ended {
            self.close_streak(key);
        }
    }

    /// Ends a streak, keeping it as a finding when it lasted [`WINDOWS`] windows.
    fn close_streak(&mut self, key: (i32, i32, i32)) {
        let Some(streak) = self.streaks.remove(&key) else {
            return;
        };
        if streak.shares.len() < WINDOWS {
            return;
        }
        let from_s = streak.from.duration_since(self.started).as_secs_f64();
        let ticks = streak.to.duration_since(streak.from).as_secs_f64() * USER_HZ as f64;
        let task_cpus: BTreeSet<i32> = self.cpus_seen.values().flatten().copied().collect();
        let others: Vec<(i32, f64, f64)> = (task_cpus.into_iter())
            .filter(|&c| c != key.0)
            .filter_map(|c| {
                let cpu = usize::try_from(c).ok()?;
                let (from, to) = (streak.times_from.get(&cpu)?, streak.times_to.get(&cpu)?);
                let share = |a: u64, b: u64| b.saturating_sub(a) as f64 / ticks.max(1.0);
                let idle = share(from.idle + from.iowait, to.idle + to.iowait);
                Some((c, idle, share(from.steal, to.steal)))
            })
            .collect();
        // Unknown idle times (no /proc/stat) leave the streak a finding.
        let left_idle = others.is_empty() || others.iter().any(|&(_, idle, _)| idle >= SHARE);
        let doubled = Doubled {
            cpu: key.0,
            a: streak.a,
            b: streak.b,
            from_s,
            to_s: streak.to.duration_since(self.started).as_secs_f64(),
            epoch_from: self.started_epoch + from_s,
            shares: streak.shares,
            others,
        };
        if left_idle {
            self.watch.doubled.push(doubled);
        } else {
            self.watch.excused.push(doubled);
        }
    }
}
