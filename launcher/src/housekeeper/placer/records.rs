//! Writing the housekeeper's records to the placement log.
//!
//! Owns: the shape of a record with `placed_by: "housekeeper"` ([`Placer::write`]), the records
//! written ([`Records`]). Must not: place or move anything.

use super::reason::MoveReason;
use super::{Owned, Placer};
use crate::housekeeper::policy::unplaced::Spot;
use crate::placement_log::Record;
use goset_plan::log::{Event, PlacedBy, Role};
use std::fs::File;
use std::io::Write;

/// Where records go: the placement log, and memory (the report's source when there is no log
/// file).
pub(super) struct Records {
    log: Option<File>,
    written: Vec<Record>,
}

impl Records {
    /// Records to `log` (opened `O_APPEND`), if any, and to memory.
    pub(super) fn new(log: Option<File>) -> Records {
        Records {
            log,
            written: Vec::new(),
        }
    }

    /// Every record written, for tests.
    #[cfg(test)]
    pub(super) fn written(&self) -> &[Record] {
        &self.written
    }

    /// Takes the records written so far.
    pub(super) fn take(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.written)
    }

    /// Appends one record; one `write` on an `O_APPEND` file, so lines of the shim's processes
    /// and the housekeeper's never interleave.
    fn push(&mut self, record: Record) {
        if let Some(f) = &mut self.log {
            let line = serde_json::to_string(&record).expect("record serialises") + "\n";
            let _ = f.write(line.as_bytes());
        }
        self.written.push(record);
    }
}

impl Placer {
    /// Writes one record of thread `tid`, which `o` describes.
    /// `moved`: for an [`Event::Move`] record, the CPU the thread left and why.
    pub(super) fn write(
        &mut self,
        tid: i32,
        o: &Owned,
        event: Event,
        cpu: Option<usize>,
        moved: Option<(Option<usize>, MoveReason)>,
    ) {
        let (from_cpu, reason) = moved.unzip();
        let from_cpu = from_cpu.flatten();
        let record = Record {
            time: crate::housekeeper::unix_now_s(),
            pid: o.pid,
            tid,
            comm: o.comm.clone(),
            exe: String::new(),
            event,
            call: "sched_setaffinity".to_string(),
            requested: None,
            cpu,
            // A thread moved by someone else holds no slot and has no role of goset's.
            slot: match o.spot {
                Spot::Slot(s) if event != Event::Moved => Some(s),
                _ => None,
            },
            role: Some(if event == Event::Moved {
                Role::Moved
            } else {
                o.spot.role()
            }),
            shared: o.shared,
            // A move to no single CPU is one to the whole reservation.
            roams: event == Event::Move && cpu.is_none(),
            placed_by: Some(PlacedBy::Housekeeper),
            from_cpu,
            reason: reason.map(|r| r.to_string()),
            local_rank: None,
            rank_var: None,
            gpu: None,
        };
        self.records.push(record);
    }
}
