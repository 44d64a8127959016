//! What this run's isolation (`--cgroup`, `--fence`, `--steer`) is about: the CPUs its group
//! holds and IRQs leave, its memory nodes and journal; and, before selection, undoing what
//! dead runs left changed.
//!
//! The changes themselves, and their undoing, are [`crate::isolate`]'s: this only says what
//! they apply to, and reports what restoring did.

use super::prepare::noise_pool;
use crate::cli::RunOptions;
use crate::error::{Error, Result};
use crate::isolate;
use crate::output;
use crate::rundir;
use crate::select;
use crate::topology::Topology;
use goset_plan::CpuSet;

/// Undoes the journals of dead launchers before this run selects (their IRQs and cgroups
/// would skew the noise and block the group's name), saying so unless `quiet`. What could not
/// be undone is this run's business only when it isolates itself (`isolating`): a plain run
/// says nothing of other runs' leftovers (`goset restore` does).
pub(super) fn restore_dead_runs(quiet: bool, isolating: bool) {
    let (done, journals) = isolate::restore(&rundir::base_dir());
    if done.restored > 0 && !quiet {
        output::to_stderr(&format!(
            "goset-run: undid {} change(s) left by {journals} run(s) whose launcher died\n",
            done.restored
        ));
    }
    if isolating {
        for why in &done.failed {
            output::to_stderr(&format!("goset-run: restore: {why}\n"));
        }
    }
}

/// The group's CPUs (the task CPUs, fenced siblings and `pool`, where slots may move) and the
/// CPUs IRQs leave: the same less the `--adapt` candidates, which this run does not reserve
/// (steering every unused CPU would crowd all IRQs onto the rest); booked spares are left.
fn isolated_cpus(selection: &select::Selection, pool: &[usize]) -> (CpuSet, CpuSet) {
    let mut away: CpuSet = selection.task_cpus.iter().copied().collect();
    for &c in selection.fenced.iter().chain(&selection.spares) {
        away.insert(c);
    }
    let mut group = away;
    for &c in pool {
        group.insert(c);
    }
    (group, away)
}

/// What the isolation of this run is about: the group's CPUs (task CPUs and fenced siblings)
/// and memory nodes (the `--numa` node, else every node of those CPUs), the CPUs IRQs leave
/// and where they go.
pub(super) fn isolation_setup(
    opts: &RunOptions,
    topo: &Topology,
    selection: &select::Selection,
) -> Result<isolate::Setup> {
    let (cpus, away) = isolated_cpus(selection, &noise_pool(opts, selection));
    let mut mems = CpuSet::new();
    match selection.node {
        Some(n) => {
            mems.insert(n);
        }
        None => {
            for c in cpus.iter() {
                mems.insert(topo.cpu(c).and_then(|i| i.node).unwrap_or(0));
            }
        }
    }
    let onto: CpuSet = topo
        .cpus
        .iter()
        .filter(|c| c.online && !away.contains(c.cpu))
        .map(|c| c.cpu)
        .collect();
    let name =
        rundir::own_name().map_err(|e| Error::System(format!("cannot name the journal: {e}")))?;
    Ok(isolate::Setup {
        journals: isolate::journal::dir_in(&rundir::base_dir()),
        name,
        group_name: isolate::cgroup::group_name(&opts.command[0]),
        cpus,
        mems,
        away,
        onto,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapt_candidates_join_the_group_but_keep_their_irqs() {
        let selection = select::Selection {
            task_cpus: vec![2, 3],
            housekeeper_cpu: 0,
            housekeeper_shared: false,
            node: None,
            fenced: vec![6],
            unfenced: Vec::new(),
            spares: vec![4],
            core_cost: Default::default(),
            ranking: vec![2, 3, 4, 5, 7, 0, 1],
            near: None,
            passed_over: Vec::new(),
            perf: Default::default(),
            ranks: Vec::new(),
        };
        let set = |v: &[usize]| v.iter().copied().collect::<CpuSet>();
        // --spare 1: the spare is reserved like a task CPU.
        let (group, away) = isolated_cpus(&selection, &[4]);
        assert_eq!((group, away), (set(&[2, 3, 4, 6]), set(&[2, 3, 4, 6])));
        // --adapt: the candidates may receive the task's threads, and keep their IRQs.
        let adapt = select::Selection {
            spares: Vec::new(),
            ..selection
        };
        let (group, away) = isolated_cpus(&adapt, &[5, 7, 1]);
        assert_eq!((group, away), (set(&[1, 2, 3, 5, 6, 7]), set(&[2, 3, 6])));
    }
}
