//! What the placer's tests share: a slot table, a placer on a fake kernel, threads to place.

pub use super::affinity::Fake;
use super::{Live, Placer};
use crate::housekeeper::policy::activity::Activity;
use crate::housekeeper::policy::kinship::Kin;
use goset_plan::SlotTable;

/// A slot table of `slots` slots, mapped anonymously.
pub fn table(slots: usize) -> &'static SlotTable {
    let t = goset_plan::slots::map(None).unwrap();
    t.init(slots);
    t
}

/// The mask a thread inherits from the test process: wider than the plan's CPUs.
pub const WIDE: &[usize] = &[0, 1, 2, 3];

/// A placer over `t` whose kernel calls land in the returned fake.
pub fn placer(t: &'static SlotTable, task_cpus: Vec<usize>, park_cpu: usize) -> (Placer, Fake) {
    let fake = Fake::default();
    let p = Placer::new(
        t,
        task_cpus,
        park_cpu,
        std::collections::BTreeMap::new(),
        None,
        Box::new(fake.clone()),
    );
    (p, fake)
}

/// A busy thread the shim did not place.
pub fn unplaced(tid: i32, demand: f64) -> Live {
    Live {
        tid,
        pid: std::process::id() as i32,
        age_s: 1.0,
        demand,
        runnable: false,
        activity: ran(demand),
        shim_placed: false,
        shim_cpu: None,
        shim_slot: None,
        shim_roams: false,
        shim_launcher: false,
        kin: Kin::Other,
        read: true,
    }
}

/// What a thread that used `share` of a CPU over a 100 ms poll did: one long run.
pub fn ran(share: f64) -> Activity {
    Activity {
        ran: share,
        runs: (share > 0.0) as u64,
        run_ns: (share * 1e8) as u64,
        voluntary: 0,
        involuntary: 0,
        ran_on: None,
    }
}
