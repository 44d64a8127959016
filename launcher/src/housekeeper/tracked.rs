//! One thread followed over the run: what one poll reads of it.
//!
//! Owns: deciding which of a thread's files a poll reads (`schedstat`; `stat`, `sched` and
//! `children` only when it ran since the last read, or when asked to), how often a thread that
//! keeps sleeping is read ([`idle_skip`]), and what the reads add up to (CPUs seen on, drift,
//! demand). Must not: place threads, or decide that a thread ended for any reason but its own
//! files: a thread that sleeps is read less often, never forgotten.

use super::policy::activity::Activity;
use super::policy::cadence::{idle_skip, RESTS_AFTER};
use super::threads::{self, Read, SchedStat, Switches, ThreadFiles};
use crate::fsroot::FsRoot;
use crate::noise::USER_HZ;
use crate::procfs::pid_stat::{self, PidStat};
use std::collections::BTreeSet;
use std::time::Instant;

/// One thread followed over the run.
#[derive(Debug)]
pub struct Tracked {
    /// Process id.
    pub pid: i32,
    files: Option<ThreadFiles>,
    /// Last `stat`.
    pub stat: Option<PidStat>,
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
    /// It ended: its files are gone, or it is a zombie.
    pub ended: bool,
    /// The CPU assigned to it as of the last poll (the shim's or the housekeeper's).
    pub assigned: Option<usize>,
    demand_base: Option<(Instant, u64)>,
    /// Reads in a row that found it had not run since the read before.
    idle_reads: u32,
}

/// How a poll reads threads: which files are known missing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mode {
    /// `schedstat` is missing (`CONFIG_SCHED_INFO` off).
    pub no_schedstat: bool,
    /// `sched` is missing (`CONFIG_SCHED_DEBUG` off): switches come from `status`.
    pub no_sched: bool,
    /// `children` is missing: the tree is found by a ppid scan instead.
    pub no_children: bool,
}

/// What one read of a live thread found.
#[derive(Debug, Default)]
pub struct Polled {
    /// Seconds since it started.
    pub age_s: f64,
    /// CPU wanted over the last interval (see [`super::policy::unplaced::View::demand`]).
    pub demand: f64,
    /// Runnable (`R` in `stat`) at this read and the one before: it wants a CPU, however
    /// little it got. On an overcommitted host (a VM's vCPUs starved) a busy thread can go
    /// reads without run time, and its state is what tells it from a sleeper. One read is not
    /// enough: a thread that wakes often for an instant (Go's sysmon behind a busy thread) is
    /// caught runnable now and then, and would be given a slot and taken off it by turns.
    pub runnable: bool,
    /// What it did since the read before (all 0 at first sight).
    pub activity: Activity,
    /// Files that do not exist (a kernel option is off).
    pub missing: Vec<&'static str>,
    /// Files that failed, with the reason.
    pub failed: Vec<(&'static str, String)>,
}

/// What a thread's last read found, kept through the next read to tell what it did since.
struct Before {
    sched: Option<SchedStat>,
    switches: Option<Switches>,
    /// Its CPU time in ticks (`stat`).
    ticks: Option<u64>,
}

/// Marks the end of a read: `None`, the thread ended.
fn gone(t: &mut Tracked) -> Option<Polled> {
    t.ended = true;
    t.files = None;
    None
}

impl Tracked {
    /// A thread first seen now.
    pub fn new(root: &FsRoot, pid: i32, tid: i32) -> Tracked {
        Tracked {
            pid,
            files: Some(ThreadFiles::new(root, pid, tid)),
            stat: None,
            sched: None,
            switches: None,
            seen_on: BTreeSet::new(),
            drift_polls: 0,
            polls: 0,
            ended: false,
            assigned: None,
            demand_base: None,
            idle_reads: 0,
        }
    }

    /// CPU time it used as of its last read, in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        match (&self.sched, &self.stat) {
            (Some(s), _) => s.runtime_ns,
            (None, Some(st)) => st.cpu_ticks * (1_000_000_000 / USER_HZ),
            (None, None) => 0,
        }
    }

    /// After a read: how many polls to leave it unread, by [`idle_skip`] up to `cap`.
    pub fn rest_polls(&self, cap: u32) -> u32 {
        idle_skip(self.idle_reads, cap)
    }

    /// Drops the open files (the run is over).
    pub fn close(&mut self) {
        self.files = None;
    }

    /// Reads `children` into `out`; `false` when the file is missing.
    pub fn children(&mut self, out: &mut Vec<i32>) -> bool {
        let Some(files) = self.files.as_mut() else {
            return true;
        };
        match files.children.read() {
            Read::Text(s) => out.extend(threads::parse_children(&s)),
            Read::Missing => return false,
            _ => {}
        }
        true
    }

    /// One poll of a thread not known to have ended; `None` when it has. The processes it
    /// forked join `children` when it ran since the last poll, or always with `all_children`.
    /// A thread `exiting` (its exit record is in the log) has its run time read and nothing
    /// else: its other files would be opened again for a thread about to be gone (3000
    /// sleepers that wake to end, at once), and a thread that forks as it ends leaves its
    /// children to its process's leader, whose `children` are read when it loses a thread.
    pub fn read(
        &mut self,
        mode: Mode,
        now: Instant,
        boot_s: f64,
        all_children: bool,
        exiting: bool,
        children: &mut Vec<i32>,
    ) -> Option<Polled> {
        let mut out = Polled::default();
        self.files.as_ref()?;
        let before = Before {
            sched: self.sched,
            switches: self.switches,
            ticks: self.stat.as_ref().map(|s| s.cpu_ticks),
        };
        // schedstat first: the cheapest file, and it says whether the thread ran since the
        // last poll. One that did not cannot have switched, migrated, forked or moved, so its
        // other files are not read: a sleeping thread costs one pread a poll. Ran means
        // scheduled in again, or its run time grew: a thread that never leaves its CPU is
        // scheduled in once, and one caught running by the last poll may have forked after it.
        if !mode.no_schedstat && self.read_schedstat(&mut out).is_none() {
            return gone(self);
        }
        let scheduled = match (before.sched, self.sched) {
            _ if exiting && self.stat.is_some() => false,
            (Some(p), Some(s)) => s.timeslices != p.timeslices || s.runtime_ns != p.runtime_ns,
            _ => true,
        };
        let was_runnable = self.stat.as_ref().is_some_and(|s| s.state == 'R');
        let Some(stat) = self.stat_now(mode, scheduled, &mut out) else {
            return gone(self);
        };
        if !mode.no_children && (scheduled || all_children && !exiting) && !self.children(children)
        {
            out.missing.push("children");
        }
        // Ran since the last poll: only then is stat's processor where it ran since.
        let ran = match (self.sched, before.ticks) {
            (Some(_), _) => scheduled,
            (None, Some(p)) => stat.cpu_ticks != p,
            (None, None) => true,
        };
        out.runnable = stat.state == 'R' && was_runnable;
        self.note_ran(&stat, ran);
        if self.idle_reads == RESTS_AFTER {
            // From now on it rests, and its reads take one file until it runs again.
            if let Some(files) = self.files.as_mut() {
                files.rest(mode.no_schedstat);
            }
        }
        let base = match self.sched {
            Some(s) => s.runtime_ns.saturating_add(s.run_delay_ns),
            None => stat.cpu_ticks * (1_000_000_000 / USER_HZ),
        };
        out.age_s = (boot_s - stat.start_ticks as f64 / USER_HZ as f64).max(0.0);
        (out.demand, out.activity) = self.demand_since(now, base, &before, &stat, ran, out.age_s);
        self.demand_base = Some((now, base));
        self.polls += 1;
        self.stat = Some(stat);
        Some(out)
    }

    /// Reads `schedstat` into [`Tracked::sched`]; `None` when the thread is gone.
    fn read_schedstat(&mut self, out: &mut Polled) -> Option<()> {
        match self.files.as_mut()?.schedstat.read() {
            Read::Text(s) => self.sched = threads::parse_schedstat(&s).or(self.sched),
            Read::Gone => return None,
            Read::Missing => out.missing.push("schedstat"),
            Read::Failed(why) => out.failed.push(("schedstat", why)),
        }
        Some(())
    }

    /// Its `stat` now, with its switch counters read when it is read; `None` when it ended (a
    /// zombie, or its files gone). A thread that did not run since the last read (`scheduled`)
    /// and was not runnable then is as it was: nothing is read.
    fn stat_now(&mut self, mode: Mode, scheduled: bool, out: &mut Polled) -> Option<PidStat> {
        // A thread last seen runnable that did not run since is starved or asleep: its state
        // is read again to tell which (one pread, until it shows asleep).
        if let Some(st) = self
            .stat
            .as_ref()
            .filter(|st| !scheduled && st.state != 'R')
        {
            return Some(st.clone());
        }
        let files = self.files.as_mut()?;
        let stat = match files.stat.read() {
            Read::Text(s) => pid_stat::parse_pid_stat(&s),
            _ => None,
        };
        let stat = stat.filter(|s| !matches!(s.state, 'Z' | 'X'))?;
        let switches = if mode.no_sched {
            files.status.read()
        } else {
            files.sched.read()
        };
        match switches {
            Read::Text(s) if mode.no_sched => {
                self.switches = threads::parse_status_switches(&s).or(self.switches)
            }
            Read::Text(s) => self.switches = threads::parse_sched(&s).or(self.switches),
            Read::Missing if !mode.no_sched => out.missing.push("sched"),
            Read::Failed(why) => out.failed.push(("sched", why)),
            _ => {}
        }
        Some(stat)
    }

    /// Counts its reads in a row without a run, and, when it `ran` since the last read, the
    /// CPU it ran on and whether that was other than the one assigned to it (drift).
    fn note_ran(&mut self, stat: &PidStat, ran: bool) {
        self.idle_reads = if ran || stat.state == 'R' {
            0
        } else {
            self.idle_reads.saturating_add(1)
        };
        if let Some(cpu) = stat.processor.filter(|_| ran) {
            self.seen_on.insert(cpu);
            if self.assigned.is_some_and(|a| a != cpu) && self.polls > 0 {
                self.drift_polls += 1;
            }
        }
    }

    /// The CPU it wanted (see [`Polled::demand`]) and what it did, since the last read (`base`:
    /// its run time and run delay now, in ns), or since birth at first sight (`age_s`).
    fn demand_since(
        &self,
        now: Instant,
        base: u64,
        before: &Before,
        stat: &PidStat,
        ran: bool,
        age_s: f64,
    ) -> (f64, Activity) {
        let Some((then, was)) = self.demand_base else {
            // First sight: since birth; one tick at least, as start times count in ticks.
            let age = age_s.max(1.0 / USER_HZ as f64);
            // What it did since birth: a thread born since the last poll ran since it.
            let mut did = activity(
                Some(SchedStat::default()),
                self.sched,
                Some(Switches::default()),
                self.switches,
                age,
            );
            if self.sched.is_none() {
                let ns = stat.cpu_ticks * (1_000_000_000 / USER_HZ);
                did.run_ns = ns;
                did.ran = ns as f64 / 1e9 / age;
            }
            did.ran_on = stat.processor.filter(|_| ran);
            return (base as f64 / 1e9 / age, did);
        };
        let dt = now.saturating_duration_since(then).as_secs_f64();
        if dt <= 0.0 {
            return (0.0, Activity::default());
        }
        let mut did = activity(before.sched, self.sched, before.switches, self.switches, dt);
        if self.sched.is_none() && ran {
            // Without schedstat: run time in ticks, the runs unknown.
            let ns = (stat.cpu_ticks - before.ticks.unwrap_or(stat.cpu_ticks))
                * (1_000_000_000 / USER_HZ);
            did.run_ns = ns.max(1);
            did.ran = ns as f64 / 1e9 / dt;
        }
        did.ran_on = stat.processor.filter(|_| ran);
        (base.saturating_sub(was) as f64 / 1e9 / dt, did)
    }
}

/// What a thread did between two reads `dt` seconds apart: run time and runs from
/// `schedstat`, switches from `sched` (or `status`). Counters that went back (never, short of
/// a reused tid) count as nothing.
fn activity(
    before: Option<SchedStat>,
    now: Option<SchedStat>,
    switches_before: Option<Switches>,
    switches_now: Option<Switches>,
    dt: f64,
) -> Activity {
    let mut a = Activity::default();
    if let (Some(b), Some(n)) = (before, now) {
        a.run_ns = n.runtime_ns.saturating_sub(b.runtime_ns);
        a.runs = n.timeslices.saturating_sub(b.timeslices);
        a.ran = a.run_ns as f64 / 1e9 / dt;
    }
    if let (Some(b), Some(n)) = (switches_before, switches_now) {
        a.voluntary = n.voluntary.saturating_sub(b.voluntary);
        a.involuntary = n.involuntary.saturating_sub(b.involuntary);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn activity_is_the_difference_of_two_reads() {
        let sched = |runtime_ns, timeslices| SchedStat {
            runtime_ns,
            run_delay_ns: 0,
            timeslices,
        };
        let sw = |voluntary, involuntary| Switches {
            migrations: None,
            voluntary,
            involuntary,
        };
        let a = activity(
            Some(sched(1_000, 10)),
            Some(sched(51_001_000, 30)),
            Some(sw(5, 1)),
            Some(sw(23, 3)),
            0.1,
        );
        assert_eq!(
            (a.run_ns, a.runs, a.voluntary, a.involuntary),
            (51_000_000, 20, 18, 2)
        );
        assert!((a.ran - 0.51).abs() < 1e-9);
        assert_eq!(
            activity(None, Some(sched(5, 5)), None, None, 0.1),
            Activity::default()
        );
    }

    #[test]
    fn a_thread_that_rests_keeps_one_file_open_and_opens_the_others_when_it_runs_unless_it_ends() {
        let (tx, rx) = std::sync::mpsc::channel::<bool>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            // Asleep until told to spin for a moment, then asleep again until told to end.
            while rx.recv().unwrap() {
                let until = Instant::now() + Duration::from_millis(30);
                while Instant::now() < until {}
                tid_tx.send(0).unwrap();
            }
        });
        let tid = tid_rx.recv().unwrap();
        let _limit = (threads::LIMIT_SET.lock()).unwrap_or_else(|e| e.into_inner());
        let root = FsRoot::default();
        let mut t = Tracked::new(&root, std::process::id() as i32, tid);
        fn read_as(t: &mut Tracked, exiting: bool) -> Vec<&'static str> {
            t.read(
                Mode::default(),
                Instant::now(),
                0.0,
                false,
                exiting,
                &mut Vec::new(),
            )
            .expect("alive");
            t.files.as_ref().unwrap().kept()
        }
        let read = |t: &mut Tracked| read_as(t, false);
        // Until the thread blocks (after its start or a spin, it may still be on its way).
        let asleep = || {
            let stat = format!("/proc/self/task/{tid}/stat");
            for _ in 0..200 {
                let text = std::fs::read_to_string(&stat).unwrap_or_default();
                if pid_stat::parse_pid_stat(&text).is_some_and(|s| s.state == 'S') {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let all = ["stat", "schedstat", "sched", "children"];
        // Asleep at each read, it rests after two reads that found it had not run.
        asleep();
        assert_eq!(
            read(&mut t),
            all,
            "a thread read since it ran keeps its files"
        );
        assert_eq!(read(&mut t), all, "idle once");
        assert_eq!(read(&mut t), ["schedstat"], "idle twice: it rests");
        assert!(t.rest_polls(10) > 0);
        // It runs: the next read opens the others again.
        tx.send(true).unwrap();
        tid_rx.recv().unwrap();
        asleep();
        assert_eq!(read(&mut t), all);
        assert_eq!(read(&mut t), all, "idle once");
        assert_eq!(read(&mut t), ["schedstat"], "idle twice: it rests");
        // It runs as it ends (its exit record read): its run time is read, nothing else.
        let ran = t.cpu_ns();
        tx.send(true).unwrap();
        tid_rx.recv().unwrap();
        asleep();
        assert_eq!(read_as(&mut t, true), ["schedstat"]);
        assert!(t.cpu_ns() > ran, "its run time read");
        tx.send(false).unwrap();
        sleeper.join().unwrap();
    }
}
