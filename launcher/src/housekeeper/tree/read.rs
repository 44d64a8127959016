//! Reading a process's threads at one visit: each at most once a poll, a sleeping one left
//! unread as it was, with what the shim's records say of it; the threads between polls
//! ([`Known`]), and the files a read found missing or failing, each noted once.

use super::{Pass, Seen, Tree, Visit};
use crate::fsroot::ReadError;
use crate::housekeeper::logtail::ShimThread;
use crate::housekeeper::placer::Live;
use crate::housekeeper::policy::activity::Activity;
use crate::housekeeper::policy::kinship::Kin;
use crate::housekeeper::threads;
use crate::housekeeper::tracked::{Polled, Tracked};

/// A live thread between reads: what the placer saw of it at its last read, and how many
/// polls it is left unread (see [`cadence::idle_skip`]). Kept beside its process's other
/// threads, so that a poll passes over a sleeping thread without touching its [`Tracked`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Rest {
    last: Live,
    skip: u32,
}

/// A process's live threads between polls, sorted by tid: a poll walks them in order, and
/// a lookup is a binary search in one contiguous array.
#[derive(Debug, Default)]
pub(super) struct Known(pub(super) Vec<(i32, Rest)>);

impl Known {
    pub(super) fn get(&self, tid: i32) -> Option<&Rest> {
        let at = self.0.binary_search_by_key(&tid, |e| e.0).ok()?;
        Some(&self.0[at].1)
    }

    pub(super) fn contains(&self, tid: i32) -> bool {
        self.get(tid).is_some()
    }

    pub(super) fn tids(&self) -> impl Iterator<Item = i32> + '_ {
        self.0.iter().map(|e| e.0)
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The figures of a thread's read that the placer sees (see [`Live`]).
struct Figures {
    age_s: f64,
    demand: f64,
    runnable: bool,
    activity: Activity,
}

/// What the placer sees of a live thread.
fn live_view(pid: i32, tid: i32, figures: Figures, shim: Option<ShimThread>) -> Live {
    let Figures {
        age_s,
        demand,
        runnable,
        activity,
    } = figures;
    Live {
        tid,
        pid,
        age_s,
        demand,
        runnable,
        activity,
        shim_placed: shim.is_some(),
        shim_cpu: shim.and_then(|s| s.cpu),
        shim_slot: shim.and_then(|s| s.slot),
        shim_roams: shim.is_some_and(|s| s.roams),
        // A launcher's main thread only: its other threads (mpirun's event and progress
        // threads) stay parked like helpers.
        shim_launcher: tid == pid && shim.is_some_and(|s| s.launcher),
        kin: Kin::Other,
        read: true,
    }
}

impl Tree {
    /// Reads each of `tids` of process `v.pid`, at most once a poll (a second read would see no
    /// time pass and make a busy thread look idle); a thread asleep at its last reads may be
    /// left unread, as it was then. The live ones join `v.alive` and `p.out.live`, the ended ones
    /// `v.lost`.
    pub(super) fn read_listed(&mut self, v: &mut Visit, tids: Vec<i32>, p: &mut Pass) {
        for tid in tids {
            let resting = (v.known.get(tid).copied()).filter(|r| r.skip > 0);
            if let Some(mut rest) = resting {
                // Alive until a read or a listing says otherwise.
                rest.skip -= 1;
                p.out.live.push(unread_view(p.seen, v.pid, tid, &rest));
                v.alive.0.push((tid, rest));
                continue;
            }
            if self.threads.get(&tid).is_some_and(|t| t.ended) || self.left_for_now(v, tid, p) {
                continue;
            }
            match self.read_thread(v.pid, tid, p) {
                Some(rest) => {
                    v.alive.0.push((tid, rest));
                    p.out.live.push(rest.last);
                }
                None => {
                    v.lost.insert(tid);
                }
            }
        }
    }

    /// Whether `tid`, never seen, is left unread this poll: while the shim defers the records
    /// of some of the task's threads, a thread born since the last poll that the log does not
    /// name is most likely one of them, about to end (read, it would join the known threads,
    /// end, and make the count fail to add up at the next poll, which would list again). It
    /// counts among the deferred threads ([`cadence::adds_up`]); one that lives on is read at the
    /// next poll that finds it.
    fn left_for_now(&self, v: &Visit, tid: i32, p: &Pass) -> bool {
        v.deferring > 0
            && p.born.as_ref().is_some_and(|b| b.contains(&tid))
            && !self.threads.contains_key(&tid)
            && shim_of(p.seen, tid).is_none()
    }

    /// Reads the threads of `listed` not read above, keeping `v.alive` sorted.
    pub(super) fn read_new(&mut self, v: &mut Visit, listed: Vec<i32>, p: &mut Pass) {
        let new: Vec<i32> = listed
            .into_iter()
            .filter(|&t| !v.alive.contains(t) && !v.lost.contains(&t))
            .collect();
        self.read_listed(v, new, p);
        v.alive.0.sort_unstable_by_key(|e| e.0);
    }

    fn note_missing(&mut self, file: &'static str, reason: &str) {
        if self.missing.insert(file) {
            self.errors.push(ReadError {
                file: threads::pattern(file),
                reason: reason.to_string(),
            });
        }
    }

    pub(super) fn note_failed(&mut self, file: &str, why: String) {
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

    /// Reads one thread; `None` when it has ended. The processes it forked join `p.found`.
    fn read_thread(&mut self, pid: i32, tid: i32, p: &mut Pass) -> Option<Rest> {
        let shim = shim_of(p.seen, tid);
        // Where it should have run since the last read: the shim's CPU, or the one the
        // housekeeper gave it.
        let assigned = match shim {
            Some(s) => s.cpu,
            None => p.seen.placed.cpu_of(tid),
        };
        let t = match self.threads.entry(tid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                self.order.push(tid);
                e.insert(Tracked::new(p.root, pid, tid))
            }
        };
        t.assigned = assigned;
        let exiting = shim.is_some_and(|s| s.exited);
        let polled = t.read(
            self.mode,
            p.seen.now,
            p.seen.boot_s,
            p.seen.all_children,
            exiting,
            &mut p.found,
        )?;
        // A main thread is read every poll: it is the one that usually forks (a shell, a
        // launcher), and a fork is found in the children of a thread read as having run.
        let skip = if tid == pid {
            0
        } else {
            t.rest_polls(p.rest_cap)
        };
        let Polled {
            age_s,
            demand,
            runnable,
            activity,
            missing,
            failed,
        } = polled;
        let figures = Figures {
            age_s,
            demand,
            runnable,
            activity,
        };
        self.note_files(missing, failed);
        Some(Rest {
            last: live_view(pid, tid, figures, shim),
            skip,
        })
    }

    /// Notes the files a read found missing (the kernel lacks them: the mode changes for
    /// every later read) and those it failed to read, each once.
    fn note_files(&mut self, missing: Vec<&'static str>, failed: Vec<(&'static str, String)>) {
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
    }
}

/// What the shim's records say of `tid`, with the CPU the housekeeper moved it to since.
fn shim_of(seen: &Seen, tid: i32) -> Option<ShimThread> {
    let mut shim = seen.log.and_then(|l| l.shim.get(&tid)).copied()?;
    if let Some(cpu) = seen.placed.relocated(tid, shim.cpu) {
        shim.cpu = Some(cpu);
    }
    Some(shim)
}

/// A thread left unread this poll as the placer sees it: as at its last read, asleep,
/// nothing done since.
fn unread_view(seen: &Seen, pid: i32, tid: i32, rest: &Rest) -> Live {
    let last = &rest.last;
    let figures = Figures {
        age_s: last.age_s,
        demand: last.demand,
        runnable: last.runnable,
        activity: Activity::default(),
    };
    Live {
        read: false,
        ..live_view(pid, tid, figures, shim_of(seen, tid))
    }
}
