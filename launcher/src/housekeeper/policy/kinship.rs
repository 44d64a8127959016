//! The kinship rule: how a thread's process stands with the shim ([`kin_of`]), from its
//! executable, its parent's and the shim's records, and what its run time says of a fork
//! ([`kin_after_run`]).

use std::collections::BTreeMap;

/// How a thread's process stands with the shim, from the kernel's view of it (its executable,
/// its parent) and the shim's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kin {
    /// The shim logged a thread of this process while it ran its current executable.
    Shim,
    /// A fork of such a process that still runs its parent's executable: the shim's fork
    /// handler places it when it first runs.
    Fork,
    /// One of goset's own programs (a goset-run inside the task): the shim stays out of it and
    /// it pins itself, so it writes no record; placed, a nested goset-run would read one CPU
    /// as all it may use.
    Goset,
    /// None of these: a static program, or one that dropped the shim.
    Other,
}

/// What [`kin_of`] knows of the task's processes.
pub struct Lineage<'a> {
    /// Processes with a live thread the shim logged, and the executable it logged for each.
    pub logged: &'a BTreeMap<i32, Option<String>>,
    /// Each process's parent.
    pub parents: &'a BTreeMap<i32, i32>,
}

/// How process `pid` stands with the shim: goset's own while it runs one of goset's programs;
/// the shim's as long as it runs the executable the shim logged for it; a fork of one (or of a fork of one) while it runs its parent's
/// executable and has logged nothing itself. `exe` reads the executable a process runs now.
pub fn kin_of(pid: i32, lineage: &Lineage, exe: &mut dyn FnMut(i32) -> Option<String>) -> Kin {
    if exe(pid).is_some_and(|e| goset_plan::plan::is_goset_program(e.as_bytes())) {
        return Kin::Goset;
    }
    let is_shims = |p: i32, exe: &mut dyn FnMut(i32) -> Option<String>| {
        lineage
            .logged
            .get(&p)
            .is_some_and(|logged| logged.is_some() && exe(p) == *logged)
    };
    if is_shims(pid, exe) {
        return Kin::Shim;
    }
    if lineage.logged.contains_key(&pid) {
        return Kin::Other;
    }
    let mut child = pid;
    // A chain of forks is as deep as the tree; a cycle (pid reuse) ends here.
    for _ in 0..lineage.parents.len() {
        let Some(&parent) = lineage.parents.get(&child) else {
            break;
        };
        let child_exe = exe(child);
        if child_exe.is_none() || child_exe != exe(parent) || lineage.logged.contains_key(&child) {
            break;
        }
        if is_shims(parent, exe) {
            return Kin::Fork;
        }
        child = parent;
    }
    Kin::Other
}

/// CPU time after which a fork of the shim's process that wrote no record is not the shim's.
pub const FORK_RUN_NS: u64 = 10_000_000;

/// The standing of a thread whose process is `kin` ([`kin_of`]) once the thread has run
/// `ran_ns`: the shim's fork handler runs first thing in a child, so a [`Kin::Fork`] thread that
/// has run [`FORK_RUN_NS`] without a record was made behind libc's back (a raw clone, `_Fork`).
pub fn kin_after_run(kin: Kin, ran_ns: u64) -> Kin {
    if kin == Kin::Fork && ran_ns >= FORK_RUN_NS {
        Kin::Other
    } else {
        kin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_the_shims_while_it_runs_what_the_shim_logged_and_so_are_its_forks() {
        let logged = BTreeMap::from([(10, Some("/bin/app".to_string()))]);
        // 11 and 12 fork from 10 and 11; 13 is 10's child that exec'd another program.
        let parents = BTreeMap::from([(10, 1), (11, 10), (12, 11), (13, 10)]);
        let lineage = Lineage {
            logged: &logged,
            parents: &parents,
        };
        let mut exe = |p: i32| match p {
            13 => Some("/bin/other".to_string()),
            1 => Some("/sbin/init".to_string()),
            _ => Some("/bin/app".to_string()),
        };
        assert_eq!(kin_of(10, &lineage, &mut exe), Kin::Shim);
        assert_eq!(kin_of(11, &lineage, &mut exe), Kin::Fork);
        assert_eq!(kin_of(12, &lineage, &mut exe), Kin::Fork);
        assert_eq!(kin_of(13, &lineage, &mut exe), Kin::Other);
        // After an exec, the logged executable no longer is the one it runs.
        let mut exec = |p: i32| (p == 10).then(|| "/bin/new".to_string());
        assert_eq!(kin_of(10, &lineage, &mut exec), Kin::Other);
        assert_eq!(kin_of(11, &lineage, &mut exec), Kin::Other);
        // A goset-run the task started, logged or not: goset's own.
        let mut near = |_: i32| Some("/usr/bin/goset-runner".to_string());
        assert_eq!(kin_of(13, &lineage, &mut near), Kin::Other);
        let mut nested = |_: i32| Some("/opt/goset/bin/goset-run".to_string());
        assert_eq!(kin_of(13, &lineage, &mut nested), Kin::Goset);
        assert_eq!(kin_of(10, &lineage, &mut nested), Kin::Goset);
    }
}
