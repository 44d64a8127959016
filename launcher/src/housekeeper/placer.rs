//! Placing the threads the shim could not see: static binaries (Go by default), raw `clone()`,
//! a child that dropped `LD_PRELOAD`.
//!
//! Owns: the placement policy ([`decide`], a pure function of observed thread demand and slot
//! loads) and carrying it out ([`Placer`]: `sched_setaffinity` on the tid, a claim in the
//! shared [`SlotTable`] so that the shim and the housekeeper agree on which slots are taken, and
//! a record with `placed_by: "housekeeper"` in the placement log). Must not: read `/proc`.
//!
//! Policy: threads that burn CPU get the least-loaded slots, the hungriest first; threads that
//! mostly sleep (a runtime's sysmon, GC or I/O threads) go to the housekeeper CPU and move to a
//! slot once they burn CPU; a slotted thread that has slept for a few polls gives its slot back
//! (a runtime's main thread burns while it starts, then waits), and a burning thread that
//! shares a slot moves when a slot is emptier by two or more.

use crate::placement::Record;
use goset_plan::slots::Claim;
use goset_plan::{CpuSet, SlotTable};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

/// Where a thread the housekeeper placed is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spot {
    /// On the CPU of this slot.
    Slot(usize),
    /// On the housekeeper CPU, holding no slot.
    Housekeeper,
}

/// One thread as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View {
    /// Thread id.
    pub tid: i32,
    /// CPU it wanted over the last interval (run time + run-queue wait over wall time; 1.0 =
    /// one CPU), so a busy thread on a contended CPU still counts as busy.
    pub demand: f64,
    /// Where the housekeeper put it; `None`: unplaced, to be placed now.
    pub spot: Option<Spot>,
    /// Consecutive polls with demand below [`Policy::idle`].
    pub idle_polls: u32,
}

/// Thresholds of the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Demand from which a thread burns CPU and deserves a slot.
    pub burn: f64,
    /// Demand under which a poll counts as idle.
    pub idle: f64,
    /// Idle polls after which a slotted thread gives its slot back.
    pub demote_after: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            burn: 0.25,
            idle: 0.05,
            demote_after: 3,
        }
    }
}

/// What to do with one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Claim a slot (the expected one: the least loaded) and move there, giving back any slot
    /// the thread held.
    Claim { tid: i32, slot: usize },
    /// Move to the housekeeper CPU without a slot.
    Housekeeper { tid: i32 },
    /// Give the slot back and move to the housekeeper CPU.
    Demote { tid: i32 },
}

fn least_loaded(load: &[u32]) -> Option<usize> {
    (0..load.len()).min_by_key(|&s| (load[s], s))
}

/// The policy: actions for `threads` given the live count of each slot (`live[s]`, threads of
/// the shim and of the housekeeper alike). Demotions come first so that their slots are free
/// for the burners; burners claim in order of demand (then tid), each taking the least-loaded
/// slot (lowest index on ties, as [`SlotTable::claim`] does).
pub fn decide(threads: &[View], live: &[u32], policy: &Policy) -> Vec<Action> {
    let mut load = live.to_vec();
    let mut actions = Vec::new();
    for t in threads {
        if let Some(Spot::Slot(s)) = t.spot {
            if t.idle_polls >= policy.demote_after && t.demand < policy.burn {
                actions.push(Action::Demote { tid: t.tid });
                if let Some(l) = load.get_mut(s) {
                    *l = l.saturating_sub(1);
                }
            }
        }
    }
    let mut burners: Vec<&View> = threads.iter().filter(|t| t.demand >= policy.burn).collect();
    burners.sort_by(|a, b| b.demand.total_cmp(&a.demand).then(a.tid.cmp(&b.tid)));
    for t in burners {
        let Some(best) = least_loaded(&load) else {
            break;
        };
        match t.spot {
            Some(Spot::Slot(s)) => {
                // Move only when the other slot is emptier by two: with one fewer thread
                // there, moving would just swap which slot is shared.
                let here = load.get(s).copied().unwrap_or(0);
                if load[best] + 1 < here {
                    load[s] -= 1;
                    load[best] += 1;
                    // Claiming anew gives the old slot back first.
                    actions.push(Action::Claim {
                        tid: t.tid,
                        slot: best,
                    });
                }
            }
            _ => {
                load[best] += 1;
                actions.push(Action::Claim {
                    tid: t.tid,
                    slot: best,
                });
            }
        }
    }
    for t in threads {
        if t.spot.is_none() && t.demand < policy.burn {
            actions.push(Action::Housekeeper { tid: t.tid });
        }
    }
    actions
}

/// A thread the housekeeper placed.
#[derive(Debug, Clone)]
pub struct Owned {
    /// Its process.
    pub pid: i32,
    /// Its name when last placed.
    pub comm: String,
    /// Where it is.
    pub spot: Spot,
    /// The CPU it was moved to.
    pub cpu: usize,
    /// The slot claim, when it holds one.
    pub claim: Option<Claim>,
    /// Consecutive idle polls.
    pub idle_polls: u32,
    /// Its claim shared a slot with another live thread.
    pub shared: bool,
}

/// Carries out the policy on live threads.
pub struct Placer {
    table: &'static SlotTable,
    task_cpus: Vec<usize>,
    housekeeper: usize,
    log: Option<std::fs::File>,
    /// Every record written (the report's source when there is no log file).
    pub records: Vec<Record>,
    /// Threads the housekeeper placed, live or ended, by tid.
    pub owned: BTreeMap<i32, Owned>,
    /// Threads seen unplaced at the previous poll.
    pending: BTreeSet<i32>,
    /// `sched_setaffinity` failures (the reason, once each).
    pub failures: Vec<String>,
}

/// A live thread as the placer needs it.
#[derive(Debug, Clone)]
pub struct Live {
    /// Thread id.
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// Name.
    pub comm: String,
    /// Seconds since the thread started (from `stat` field 22: 10 ms resolution).
    pub age_s: f64,
    /// See [`View::demand`].
    pub demand: f64,
    /// The shim wrote a record for it.
    pub shim_placed: bool,
}

/// A thread younger than this at first sight is given until the next poll: the shim places its
/// threads within microseconds of their birth, and must not find a slot claimed twice.
pub const GRACE_S: f64 = 0.02;

impl Placer {
    /// A placer over `table`, writing records to `log` (the placement log, opened `O_APPEND`).
    pub fn new(
        table: &'static SlotTable,
        task_cpus: Vec<usize>,
        housekeeper: usize,
        log: Option<std::fs::File>,
    ) -> Placer {
        Placer {
            table,
            task_cpus,
            housekeeper,
            log,
            records: Vec::new(),
            owned: BTreeMap::new(),
            pending: BTreeSet::new(),
            failures: Vec::new(),
        }
    }

    /// One poll: `live` are the threads alive now, `ended` those that ended since the last one.
    pub fn step(&mut self, live: &[Live], ended: &[i32], policy: &Policy) {
        for &tid in ended {
            self.pending.remove(&tid);
            if let Some(o) = self.owned.get_mut(&tid) {
                if let Some(c) = o.claim.take() {
                    self.table.release(&c);
                }
                let o = o.clone();
                self.write(tid, &o, "exit", None);
            }
        }
        let mut views = Vec::new();
        let mut pending = BTreeSet::new();
        for t in live {
            if t.shim_placed {
                self.hand_over(t.tid);
                continue;
            }
            if let Some(o) = self.owned.get_mut(&t.tid) {
                o.idle_polls = if t.demand < policy.idle {
                    o.idle_polls + 1
                } else {
                    0
                };
                views.push(View {
                    tid: t.tid,
                    demand: t.demand,
                    spot: Some(o.spot),
                    idle_polls: o.idle_polls,
                });
                continue;
            }
            if self.on_planned_cpu(t.tid) {
                continue;
            }
            if self.pending.contains(&t.tid) || t.age_s >= GRACE_S {
                views.push(View {
                    tid: t.tid,
                    demand: t.demand,
                    spot: None,
                    idle_polls: 0,
                });
            } else {
                pending.insert(t.tid);
            }
        }
        self.pending = pending;
        let live_counts: Vec<u32> = (0..self.table.slot_count())
            .map(|s| self.table.live(s))
            .collect();
        let by_tid: BTreeMap<i32, &Live> = live.iter().map(|t| (t.tid, t)).collect();
        for action in decide(&views, &live_counts, policy) {
            match action {
                Action::Claim { tid, .. } => self.claim(by_tid[&tid]),
                Action::Housekeeper { tid } => {
                    let t = by_tid[&tid];
                    self.apply(t.tid, t.pid, &t.comm, Spot::Housekeeper, None);
                }
                Action::Demote { tid } => {
                    if let Some(c) = self.owned.get_mut(&tid).and_then(|o| o.claim.take()) {
                        self.table.release(&c);
                    }
                    let t = by_tid[&tid];
                    self.apply(t.tid, t.pid, &t.comm, Spot::Housekeeper, None);
                }
            }
        }
    }

    /// The shim has a record for a thread the housekeeper placed (it was racing with ld.so):
    /// the shim owns it from now on. A main thread's claim was adopted by the shim (it looks
    /// its pid up in the table), so it is left; any other claim is given back.
    fn hand_over(&mut self, tid: i32) {
        if let Some(mut o) = self.owned.remove(&tid) {
            if let Some(c) = o.claim.take() {
                if tid != o.pid {
                    self.table.release(&c);
                }
            }
        }
    }

    /// Whether the thread's mask is a single planned CPU: placed by someone (the shim before
    /// an exec into a static binary, or the program itself); the housekeeper leaves it.
    fn on_planned_cpu(&self, tid: i32) -> bool {
        let pid = nix::unistd::Pid::from_raw(tid);
        match nix::sched::sched_getaffinity(pid) {
            Ok(set) => {
                let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
                    .filter(|&c| set.is_set(c).unwrap_or(false))
                    .collect();
                cpus.len() == 1 && self.task_cpus.contains(&cpus[0])
            }
            // Gone or not ours: nothing to place.
            Err(_) => true,
        }
    }

    fn claim(&mut self, t: &Live) {
        let old = self.owned.get_mut(&t.tid).and_then(|o| o.claim.take());
        if let Some(c) = old {
            self.table.release(&c);
        }
        let Some(claim) = self.table.claim(t.tid) else {
            return;
        };
        self.apply(t.tid, t.pid, &t.comm, Spot::Slot(claim.slot), Some(claim));
    }

    fn apply(&mut self, tid: i32, pid: i32, comm: &str, spot: Spot, claim: Option<Claim>) {
        let cpu = match spot {
            Spot::Slot(s) => self.task_cpus.get(s).copied().unwrap_or(self.housekeeper),
            Spot::Housekeeper => self.housekeeper,
        };
        let (mask, len) = CpuSet::single(cpu).as_raw();
        // SAFETY: mask points to a live cpu_set_t-sized buffer of `len` bytes.
        let rc = unsafe { libc::sched_setaffinity(tid, len, mask as *const libc::cpu_set_t) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if let Some(c) = claim {
                self.table.release(&c);
            }
            if e.raw_os_error() != Some(libc::ESRCH) {
                let why = format!("cpu {cpu}: {e}");
                if !self.failures.contains(&why) {
                    self.failures.push(why);
                }
            }
            return;
        }
        let owned = Owned {
            pid,
            comm: comm.to_string(),
            spot,
            cpu,
            shared: claim.is_some_and(|c| c.shared),
            claim,
            idle_polls: 0,
        };
        self.write(tid, &owned, "place", Some(cpu));
        self.owned.insert(tid, owned);
    }

    /// Appends one record; one `write` on an `O_APPEND` file, so lines of the shim's processes
    /// and the housekeeper's never interleave.
    fn write(&mut self, tid: i32, o: &Owned, event: &str, cpu: Option<usize>) {
        let record = Record {
            time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            pid: o.pid,
            tid,
            comm: o.comm.clone(),
            exe: String::new(),
            event: event.to_string(),
            call: "sched_setaffinity".to_string(),
            requested: None,
            cpu,
            slot: match o.spot {
                Spot::Slot(s) => Some(s),
                Spot::Housekeeper => None,
            },
            role: role_of(o.spot).to_string(),
            shared: o.shared,
            placed_by: Some("housekeeper".to_string()),
        };
        if let Some(f) = &mut self.log {
            let line = serde_json::to_string(&record).expect("record serialises") + "\n";
            let _ = f.write(line.as_bytes());
        }
        self.records.push(record);
    }

    /// Gives back every claim still held (the task ended).
    pub fn release_all(&mut self) {
        for o in self.owned.values_mut() {
            if let Some(c) = o.claim.take() {
                self.table.release(&c);
            }
        }
    }
}

/// The role the report shows for a thread the housekeeper placed.
pub fn role_of(spot: Spot) -> &'static str {
    match spot {
        Spot::Slot(_) => "worker",
        Spot::Housekeeper => "helper",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(tid: i32, demand: f64, spot: Option<Spot>, idle_polls: u32) -> View {
        View {
            tid,
            demand,
            spot,
            idle_polls,
        }
    }

    #[test]
    fn burners_take_least_loaded_slots_hungriest_first_sleepers_go_home() {
        let p = Policy::default();
        // Slot 0 holds a shim thread; a Go program: two spinning threads, sysmon, an idle M.
        let threads = [
            v(10, 0.01, None, 0),
            v(11, 0.6, None, 0),
            v(12, 1.0, None, 0),
            v(13, 0.0, None, 0),
        ];
        let a = decide(&threads, &[1, 0, 0], &p);
        assert_eq!(
            a,
            vec![
                Action::Claim { tid: 12, slot: 1 },
                Action::Claim { tid: 11, slot: 2 },
                Action::Housekeeper { tid: 10 },
                Action::Housekeeper { tid: 13 },
            ]
        );
        // More burners than slots: they share, the least loaded first.
        let a = decide(&threads, &[0, 0], &p);
        assert_eq!(
            &a[..2],
            &[
                Action::Claim { tid: 12, slot: 0 },
                Action::Claim { tid: 11, slot: 1 }
            ]
        );
        assert!(decide(&[], &[0], &p).is_empty());
    }

    #[test]
    fn a_sleeper_that_starts_burning_moves_to_a_slot() {
        let p = Policy::default();
        let a = decide(&[v(5, 0.9, Some(Spot::Housekeeper), 0)], &[1, 0], &p);
        assert_eq!(a, vec![Action::Claim { tid: 5, slot: 1 }]);
        let a = decide(&[v(5, 0.1, Some(Spot::Housekeeper), 0)], &[1, 0], &p);
        assert!(a.is_empty(), "{a:?}");
    }

    #[test]
    fn an_idle_slot_holder_gives_its_slot_to_a_burner() {
        let p = Policy::default();
        // A static program's main thread took slot 0 while it started, then waits in join;
        // its two workers burn, one of them sharing slot 0.
        let threads = [
            v(1, 0.0, Some(Spot::Slot(0)), 3),
            v(2, 1.0, Some(Spot::Slot(1)), 0),
            v(3, 1.0, Some(Spot::Slot(0)), 0),
        ];
        let a = decide(&threads, &[2, 1], &p);
        assert_eq!(a, vec![Action::Demote { tid: 1 }]);
        // Not idle for long enough: it keeps the slot.
        let threads = [v(1, 0.0, Some(Spot::Slot(0)), 2), threads[1], threads[2]];
        assert!(decide(&threads, &[2, 1], &p).is_empty());
    }

    #[test]
    fn a_burner_sharing_a_slot_moves_only_when_another_is_emptier_by_two() {
        let p = Policy::default();
        let threads = [v(7, 1.0, Some(Spot::Slot(0)), 0)];
        assert_eq!(
            decide(&threads, &[2, 0], &p),
            vec![Action::Claim { tid: 7, slot: 1 }]
        );
        assert!(decide(&threads, &[2, 1], &p).is_empty());
        assert!(decide(&threads, &[1, 0], &p).is_empty());
    }

    fn table(slots: usize) -> &'static SlotTable {
        let t = goset_plan::slots::map(None).unwrap();
        t.init(slots);
        t
    }

    #[test]
    fn places_an_unplaced_thread_and_releases_its_slot_when_it_ends() {
        let t = table(1);
        let me = nix::unistd::gettid().as_raw();
        let home = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        // The only CPU this test may rely on is one it already runs on.
        let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
            .filter(|&c| home.is_set(c).unwrap_or(false))
            .collect();
        if cpus.len() < 2 {
            eprintln!("skipped: needs a mask of two CPUs, so that one CPU is a placement");
            return;
        }
        let cpu = cpus[0];
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        // Two task CPUs so that the thread's mask (the test's) is not a single planned CPU.
        let mut p = Placer::new(t, vec![cpu, usize::MAX - 1], cpu, None);
        let live = |demand| Live {
            tid,
            pid: me,
            comm: "w".into(),
            age_s: 1.0,
            demand,
            shim_placed: false,
        };
        p.step(&[live(1.0)], &[], &Policy::default());
        assert_eq!(t.live(0), 1, "{:?}", p.failures);
        assert_eq!(p.owned[&tid].spot, Spot::Slot(0));
        let mask = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)).unwrap();
        assert!(mask.is_set(cpu).unwrap());
        assert_eq!(p.records[0].placed_by.as_deref(), Some("housekeeper"));
        done_tx.send(()).unwrap();
        h.join().unwrap();
        p.step(&[], &[tid], &Policy::default());
        assert_eq!(t.live(0), 0);
        assert_eq!(p.records.last().unwrap().event, "exit");
    }
}
