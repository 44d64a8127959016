//! The local rank each process's shim logged on its `init` record (`--near gpu:local-rank`),
//! taken from the log only where sound: the task writes the log, so a record may be forged.

use super::{Log, Record};
use goset_plan::log::{Event, LocalRank, PlacedBy};
use goset_plan::ranks::{LOCAL_RANK_VARS, MAX_LOCAL_RANK};
use std::collections::BTreeMap;

impl Log {
    /// Each process's local rank as its shim logged it (`--near gpu:local-rank`): the last
    /// sound one of its main thread's `init` records (an exec'd image logs again). The task
    /// can write the log: a record is sound where it reads as the shim's, its variable is one
    /// of [`LOCAL_RANK_VARS`], its rank at most [`MAX_LOCAL_RANK`] and its GPU one of the
    /// plan's `gpus` (none without rank blocks); any other is left out, and the report infers
    /// that process's rank from its CPUs.
    pub fn ranks(&self, gpus: usize) -> BTreeMap<i32, LocalRank> {
        let mut out = BTreeMap::new();
        if gpus == 0 {
            return out;
        }
        for r in self.records.iter().filter(|r| r.is(Event::Init)) {
            if let Some(rank) = logged_rank(r, gpus) {
                out.insert(r.pid, rank);
            }
        }
        out
    }
}

/// `r`'s local rank, where sound (see [`Log::ranks`]).
fn logged_rank(r: &Record, gpus: usize) -> Option<LocalRank> {
    if r.tid != r.pid || r.placed_by != Some(PlacedBy::Shim) {
        return None;
    }
    let rank = usize::try_from(r.local_rank?).ok()?;
    let var = LOCAL_RANK_VARS
        .into_iter()
        .find(|&v| Some(v) == r.rank_var.as_deref())?;
    let gpu = match r.gpu {
        Some(g) => Some(usize::try_from(g).ok().filter(|&g| g < gpus)?),
        None => None,
    };
    (rank <= MAX_LOCAL_RANK).then_some(LocalRank { rank, var, gpu })
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::*;
    use goset_plan::log::Role;

    #[test]
    fn a_logged_rank_is_taken_only_where_sound() {
        // The shim's own writer, with the process's rank on its init record.
        let init = |pid: i32, tid: i32, rank: Option<&LocalRank>| {
            let r = goset_plan::log::Record {
                time: 1.0,
                pid,
                tid,
                comm: b"python",
                event: Event::Init,
                call: "init",
                requested: None,
                cpu: Some(4),
                slot: Some(0),
                role: Role::Main,
                shared: false,
                roams: false,
            };
            let mut buf = goset_plan::buf::Buf::<640>::new();
            let at = goset_plan::log::format(&mut buf, &r, rank).unwrap();
            let (head, tail) = buf.as_bytes().split_at(at);
            String::from_utf8([head, b"/usr/bin/python3", tail].concat()).unwrap()
        };
        let rank = |rank, var, gpu| LocalRank { rank, var, gpu };
        let good = [
            init(20, 20, Some(&rank(2, "SLURM_LOCALID", Some(6)))),
            init(30, 30, Some(&rank(0, "LOCAL_RANK", None))),
            // No rank: a process that is no rank.
            init(40, 40, None),
        ];
        // Forged: a variable the shim never reads, a GPU past the machine's, a rank past 9
        // digits, a negative one, a worker thread's, the housekeeper's, a create record's.
        let line = init(50, 50, Some(&rank(1, "LOCAL_RANK", Some(1))));
        let forged = [
            line.replace("\"LOCAL_RANK\"", "\"HOME\"")
                .replace("50", "51"),
            line.replace("\"gpu\":1", "\"gpu\":8").replace("50", "52"),
            line.replace("\"local_rank\":1", "\"local_rank\":1000000000")
                .replace("50", "53"),
            line.replace("\"local_rank\":1", "\"local_rank\":-1")
                .replace("50", "54"),
            init(55, 56, Some(&rank(1, "LOCAL_RANK", Some(1)))),
            line.replace("\"shim\"", "\"housekeeper\"")
                .replace("50", "57"),
            line.replace("\"init\",", "\"create\",").replace("50", "58"),
        ];
        let all: String = good.iter().chain(&forged).map(String::as_str).collect();
        let log = parse(all.as_bytes());
        let ranks = log.ranks(8);
        assert_eq!(
            ranks.into_iter().collect::<Vec<_>>(),
            [
                (20, rank(2, "SLURM_LOCALID", Some(6))),
                (30, rank(0, "LOCAL_RANK", None)),
            ]
        );
        // A log without rank blocks names no rank.
        assert!(log.ranks(0).is_empty());
        // The negative rank is no record at all; the others are records, their ranks unsound.
        assert_eq!(log.bad_lines, 1);
    }
}
