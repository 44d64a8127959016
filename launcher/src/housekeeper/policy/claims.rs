//! The claims rule: which threads someone else already placed ([`leave_alone`]), from their
//! masks and the slot claims no logged thread accounts for yet ([`pending_claims`]).

use super::kinship::Kin;
use std::collections::BTreeMap;

/// What `sched_getaffinity` said about a thread nobody claims yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mask {
    /// The CPUs it may run on.
    Cpus(Vec<usize>),
    /// It could not be read (the thread is gone, or not ours): nothing to place.
    Unknown,
}

/// A thread that neither the shim logged nor the housekeeper owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unclaimed {
    /// Thread id.
    pub tid: i32,
    /// Its process.
    pub pid: i32,
    /// Its affinity mask.
    pub mask: Mask,
    /// Its process's standing with the shim.
    pub kin: Kin,
}

/// Slot claims no logged thread accounts for, by `(pid, CPU)`: the shim claims a slot (labelled
/// with the pid, or `-pid` for a thread whose tid does not exist yet) before the thread is born
/// with that slot's CPU as its mask, and the launcher claims for the task's main thread before
/// it execs; the thread's record in the log comes only once it runs, which under load can be
/// long after. `records`: the table's `(label, slot)`s; `own`: the housekeeper's claims among
/// them; `logged`: `(pid, CPU)` of each live thread the shim logged.
pub fn pending_claims(
    records: impl Iterator<Item = (i32, usize)>,
    own: &[(i32, usize)],
    logged: &[(i32, usize)],
    task_cpus: &[usize],
) -> BTreeMap<(i32, usize), u32> {
    let mut pending: BTreeMap<(i32, usize), u32> = BTreeMap::new();
    let key = |label: i32, slot: usize| Some((label.checked_abs()?, *task_cpus.get(slot)?));
    for (label, slot) in records {
        if let Some(k) = key(label, slot) {
            *pending.entry(k).or_default() += 1;
        }
    }
    let own = own.iter().filter_map(|&(label, slot)| key(label, slot));
    for k in own.chain(logged.iter().copied()) {
        if let Some(n) = pending.get_mut(&k) {
            *n = n.saturating_sub(1);
        }
    }
    pending.retain(|_, n| *n > 0);
    pending
}

/// Which unclaimed threads are left alone: the kernel's view of a thread (its mask) decides
/// whether it is placed, never how long its record takes to come. Left alone are:
/// - a thread allowed one planned CPU on which its process holds a claim that no logged thread
///   accounts for (`pending`, see [`pending_claims`]): the shim placed it, its record is yet
///   to come; the main thread takes its process's claim first, then the oldest thread;
/// - a thread allowed every planned CPU (more than one) whose process holds a claim no logged
///   thread accounts for, on any slot: the shim let it roam (born while every slot had a
///   running thread), its record is yet to come;
/// - every thread of a [`Kin::Fork`] process: the shim's fork handler places it; and of a
///   [`Kin::Loading`] one: its shim places it once the loader is done;
/// - every thread of a [`Kin::Goset`] process (a nested goset-run): it places itself;
/// - a thread allowed the park CPU only, in a [`Kin::Shim`] process: a helper or launcher
///   thread the shim put there;
/// - a thread allowed a single planned CPU that is not the park CPU and that no other
///   thread of the tree has (`assigned`: the CPU of each live thread the shim logged or the
///   housekeeper owns): the program pinned it itself;
/// - a thread whose mask cannot be read: nothing to place.
///
/// A mask inherited from a creator is no placement: a launcher's children (moved to the
/// park CPU by the shim) inherit `{park_cpu}`, every thread of a static program
/// inherits its main thread's CPU, and a thread born by raw `clone` its creator's, so a CPU two
/// threads share without a pending claim is nobody's placement.
pub fn leave_alone(
    unclaimed: &[Unclaimed],
    pending: &BTreeMap<(i32, usize), u32>,
    assigned: &[usize],
    task_cpus: &[usize],
    park_cpu: usize,
) -> Vec<bool> {
    let single = |t: &Unclaimed| match &t.mask {
        Mask::Cpus(c) if c.len() == 1 => Some(c[0]),
        _ => None,
    };
    let mut holders: BTreeMap<usize, usize> = BTreeMap::new();
    for &cpu in assigned {
        *holders.entry(cpu).or_default() += 1;
    }
    for cpu in unclaimed.iter().filter_map(single) {
        *holders.entry(cpu).or_default() += 1;
    }
    // Main threads first, then by age (tids grow with age, short of wrapping).
    let mut order: Vec<usize> = (0..unclaimed.len()).collect();
    order.sort_by_key(|&i| (unclaimed[i].tid != unclaimed[i].pid, unclaimed[i].tid));
    let mut planned = task_cpus.to_vec();
    planned.sort_unstable();
    let roams = |t: &Unclaimed| matches!(&t.mask, Mask::Cpus(c) if c.len() > 1 && *c == planned);
    let mut pending = pending.clone();
    let mut left = vec![false; unclaimed.len()];
    for i in order {
        let t = &unclaimed[i];
        left[i] = match (t.kin, &t.mask, single(t)) {
            (_, Mask::Unknown, _) => true,
            (Kin::Fork | Kin::Loading | Kin::Goset, _, _) => true,
            (_, _, Some(cpu)) => {
                let claim = pending.get_mut(&(t.pid, cpu)).filter(|n| **n > 0);
                let claimed = claim.map(|n| *n -= 1).is_some();
                claimed
                    || (cpu == park_cpu && t.kin == Kin::Shim)
                    || (cpu != park_cpu && task_cpus.contains(&cpu) && holders[&cpu] == 1)
            }
            (_, _, None) if roams(t) => {
                let claim = (pending.iter_mut())
                    .find(|((pid, _), n)| *pid == t.pid && **n > 0)
                    .map(|(_, n)| n);
                claim.map(|n| *n -= 1).is_some()
            }
            _ => false,
        };
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    fn un(tid: i32, pid: i32, mask: Mask, kin: Kin) -> Unclaimed {
        Unclaimed {
            tid,
            pid,
            mask,
            kin,
        }
    }

    fn one(cpu: usize) -> Mask {
        Mask::Cpus(vec![cpu])
    }

    const NONE: &BTreeMap<(i32, usize), u32> = &BTreeMap::new();

    #[test]
    fn an_inherited_mask_is_no_placement() {
        let other = |tid: i32, cpu: usize| un(tid, 10, one(cpu), Kin::Other);
        // -n 2 on 2 CPUs: task CPUs 1 and 0, the housekeeper shares CPU 0. A static program
        // run by `sh` (moved to CPU 0 by the shim): every thread inherited {0}.
        let threads = [other(10, 0), other(11, 0), other(12, 0)];
        assert_eq!(leave_alone(&threads, NONE, &[0], &[1, 0], 0), [false; 3]);
        // Even alone, {housekeeper} is not a placement of a process the shim is not in.
        assert_eq!(leave_alone(&[other(10, 0)], NONE, &[], &[1, 0], 0), [false]);
        // Two threads inheriting the planned CPU of a main thread the shim placed before it
        // exec'd a static binary: the CPU is the main thread's.
        let threads = [other(11, 1), other(12, 1)];
        assert_eq!(
            leave_alone(&threads, NONE, &[1], &[1, 0], 0),
            [false, false]
        );
        assert_eq!(
            leave_alone(&[other(11, 1)], NONE, &[1], &[1, 0], 0),
            [false]
        );
        // A thread the program pinned itself on a planned CPU of its own is left; a mask of
        // several CPUs, or one outside the plan, is not a placement; an unreadable one is
        // nothing to place.
        let threads = [
            other(20, 1),
            un(21, 10, Mask::Cpus(vec![0, 1]), Kin::Other),
            other(22, 5),
            un(23, 10, Mask::Unknown, Kin::Other),
        ];
        assert_eq!(
            leave_alone(&threads, NONE, &[], &[1, 2], 0),
            [true, false, false, true]
        );
    }

    #[test]
    fn claims_no_logged_thread_accounts_for_are_pending() {
        // Process 10: main (label 10) and two threads (-10) on slot 0, one thread on slot 1;
        // the main thread is logged on CPU 4 (slot 0). The housekeeper's own claim for
        // thread 33 (label 33, slot 1) is not the shim's. A label whose slot is past the
        // plan is nobody's.
        let records = [(10, 0), (-10, 0), (-10, 0), (-10, 1), (33, 1), (-10, 9)];
        let p = pending_claims(records.into_iter(), &[(33, 1)], &[(10, 4)], &[4, 5]);
        assert_eq!(p, BTreeMap::from([((10, 4), 2), ((10, 5), 1)]));
        assert!(pending_claims([(i32::MIN, 0)].into_iter(), &[], &[], &[4]).is_empty());
    }

    #[test]
    fn a_thread_born_on_its_slot_waits_for_its_record_however_long() {
        // -n 2 on 2 CPUs (task CPUs 1 and 0, housekeeper 0). The main thread is logged on
        // CPU 1; two workers were born, one on each CPU, with a claim each, but have not run
        // to write their records. A third thread was cloned raw by the main thread: it
        // inherited {1} and no claim covers it.
        let pending = BTreeMap::from([((10, 1), 1), ((10, 0), 1)]);
        let threads = [
            un(13, 10, one(1), Kin::Shim),
            un(11, 10, one(1), Kin::Shim),
            un(12, 10, one(0), Kin::Shim),
        ];
        assert_eq!(
            leave_alone(&threads, &pending, &[1], &[1, 0], 0),
            [false, true, true],
            "the oldest thread on CPU 1 takes its claim"
        );
        // The task's main thread, born on slot 0 by the launcher's claim before the shim's
        // init has run, takes the claim before any thread that inherited its CPU.
        let pending = BTreeMap::from([((20, 1), 1)]);
        let threads = [
            un(21, 20, one(1), Kin::Other),
            un(20, 20, one(1), Kin::Other),
        ];
        assert_eq!(
            leave_alone(&threads, &pending, &[], &[1, 0], 0),
            [false, true]
        );
        // A thread the shim let roam (every slot ran a thread) is allowed every planned CPU;
        // its claim is on some slot. One claim covers one roaming thread; without a claim, a
        // thread with every planned CPU (a static program's) is placed.
        let pending = BTreeMap::from([((30, 0), 1)]);
        let every = Mask::Cpus(vec![0, 1]);
        let threads = [
            un(31, 30, every.clone(), Kin::Shim),
            un(32, 30, every.clone(), Kin::Shim),
            un(41, 40, every, Kin::Other),
        ];
        assert_eq!(
            leave_alone(&threads, &pending, &[], &[1, 0], 0),
            [true, false, false]
        );
    }

    #[test]
    fn a_fork_and_a_helper_of_a_shim_process_are_the_shims() {
        // A fork that has not run its fork handler yet, whatever its mask; a helper born on
        // the housekeeper CPU (here also a task CPU) in a process the shim is in. The same
        // masks in a static program are inherited.
        let threads = [
            un(30, 30, one(1), Kin::Fork),
            un(31, 31, Mask::Cpus(vec![0, 1]), Kin::Fork),
            un(41, 40, one(0), Kin::Shim),
            un(51, 50, one(0), Kin::Other),
        ];
        assert_eq!(
            leave_alone(&threads, NONE, &[1, 1], &[1, 0], 0),
            [true, true, true, false]
        );
    }

    #[test]
    fn a_nested_goset_run_is_left_to_place_itself() {
        // It writes no record and holds no claim: the same masks in another program are
        // placed.
        let threads = [
            un(60, 60, Mask::Cpus(vec![0, 1]), Kin::Goset),
            un(61, 60, one(1), Kin::Goset),
            un(70, 70, Mask::Cpus(vec![0, 1]), Kin::Other),
        ];
        assert_eq!(
            leave_alone(&threads, NONE, &[1], &[1, 0], 0),
            [true, true, false]
        );
    }
}
