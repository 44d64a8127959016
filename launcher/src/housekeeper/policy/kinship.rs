//! The kinship rule: how a thread's process stands with the shim ([`kin_of`]), from its
//! executable, its parent's and the shim's records, and what its run time says of a fork or
//! of a program still loading ([`kin_after_run`]).

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
    /// A glibc program whose environment preloads the shim and whose shim has logged nothing
    /// for its current executable yet: the loader is still at work (a large program's
    /// relocations, a slow guest), and its shim places its threads as soon as it runs.
    Loading,
    /// One of goset's own programs (a goset-run inside the task): the shim stays out of it and
    /// it pins itself, so it writes no record; placed, a nested goset-run would read one CPU
    /// as all it may use.
    Goset,
    /// None of these: a static program, or one that dropped the shim.
    Other,
}

/// What [`kin_of`] knows of the task's processes.
///
/// Read by the caller, once a process a poll: `exe`, the executable a process runs now, and
/// `preloads`, whether it is a glibc program whose environment puts the shim in `LD_PRELOAD`.
pub struct Lineage<'a> {
    /// Processes with a live thread the shim logged, and the executable it logged for each.
    pub logged: &'a BTreeMap<i32, Option<String>>,
    /// Each process's parent.
    pub parents: &'a BTreeMap<i32, i32>,
}

/// How process `pid` stands with the shim: goset's own while it runs one of goset's programs;
/// the shim's as long as it runs the executable the shim logged for it; a fork of one (or of a
/// fork of one) while it runs its parent's executable and has logged nothing itself; else
/// loading while it `preloads` the shim (see [`Lineage`]).
pub fn kin_of(
    pid: i32,
    lineage: &Lineage,
    exe: &mut dyn FnMut(i32) -> Option<String>,
    preloads: &mut dyn FnMut(i32) -> bool,
) -> Kin {
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
    let loading = |preloads: &mut dyn FnMut(i32) -> bool| match preloads(pid) {
        true => Kin::Loading,
        false => Kin::Other,
    };
    // Logged under another executable: it exec'd since, and its new image may load a shim.
    if lineage.logged.contains_key(&pid) {
        return loading(preloads);
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
    loading(preloads)
}

/// CPU time after which a fork of the shim's process that wrote no record is not the shim's.
pub const FORK_RUN_NS: u64 = 10_000_000;

/// CPU time after which a [`Kin::Loading`] program that wrote no record will not: the shim's
/// constructor runs once the loader has mapped and relocated the program's libraries, which
/// takes a large program a few milliseconds, and an emulated guest under load some tens.
pub const LOAD_RUN_NS: u64 = 100_000_000;

/// The standing of a thread whose process is `kin` ([`kin_of`]) once the thread has run
/// `ran_ns`: the shim's fork handler runs first thing in a child, so a [`Kin::Fork`] thread that
/// has run [`FORK_RUN_NS`] without a record was made behind libc's back (a raw clone, `_Fork`);
/// a [`Kin::Loading`] one that has run [`LOAD_RUN_NS`] does without the shim (a secure-exec
/// program, whose loader ignores `LD_PRELOAD`).
pub fn kin_after_run(kin: Kin, ran_ns: u64) -> Kin {
    match kin {
        Kin::Fork if ran_ns >= FORK_RUN_NS => Kin::Other,
        Kin::Loading if ran_ns >= LOAD_RUN_NS => Kin::Other,
        _ => kin,
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
        let no = &mut |_: i32| false;
        assert_eq!(kin_of(10, &lineage, &mut exe, no), Kin::Shim);
        assert_eq!(kin_of(11, &lineage, &mut exe, no), Kin::Fork);
        assert_eq!(kin_of(12, &lineage, &mut exe, no), Kin::Fork);
        assert_eq!(kin_of(13, &lineage, &mut exe, no), Kin::Other);
        // After an exec, the logged executable no longer is the one it runs.
        let mut exec = |p: i32| (p == 10).then(|| "/bin/new".to_string());
        assert_eq!(kin_of(10, &lineage, &mut exec, no), Kin::Other);
        assert_eq!(kin_of(11, &lineage, &mut exec, no), Kin::Other);
        // A goset-run the task started, logged or not: goset's own.
        let mut near = |_: i32| Some("/usr/bin/goset-runner".to_string());
        assert_eq!(kin_of(13, &lineage, &mut near, no), Kin::Other);
        let mut nested = |_: i32| Some("/opt/goset/bin/goset-run".to_string());
        assert_eq!(kin_of(13, &lineage, &mut nested, no), Kin::Goset);
        assert_eq!(kin_of(10, &lineage, &mut nested, no), Kin::Goset);
    }

    #[test]
    fn a_program_whose_loader_maps_the_shim_is_left_to_it_for_a_while() {
        let logged = BTreeMap::from([(10, Some("/bin/sh".to_string()))]);
        // 11: a static shell's child that exec'd a glibc program preloading the shim; 10: the
        // shim's process that exec'd one too; 12: a static program.
        let parents = BTreeMap::from([(10, 1), (11, 2), (12, 2)]);
        let lineage = Lineage {
            logged: &logged,
            parents: &parents,
        };
        let mut exe = |p: i32| Some(format!("/bin/prog{p}"));
        let preloads = &mut |p: i32| p != 12;
        assert_eq!(kin_of(11, &lineage, &mut exe, preloads), Kin::Loading);
        assert_eq!(kin_of(10, &lineage, &mut exe, preloads), Kin::Loading);
        assert_eq!(kin_of(12, &lineage, &mut exe, preloads), Kin::Other);
        assert_eq!(kin_after_run(Kin::Loading, LOAD_RUN_NS - 1), Kin::Loading);
        assert_eq!(kin_after_run(Kin::Loading, LOAD_RUN_NS), Kin::Other);
    }
}
