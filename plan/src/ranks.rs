//! Rank blocks (`--near gpu:local-rank`): the block of slots each local rank of a task keeps
//! to, near its own GPU, and how a process finds its local rank and its GPU.
//!
//! Owns: the plan's `gpus` and `rank_blocks` lines (the launcher writes them, the shim reads
//! them), the names of the variables that carry a local rank and the visible GPUs, and the
//! choice of a rank's block. The launcher cuts the blocks (`launcher/src/select/ranks.rs`);
//! the shim claims one at a process's birth (`preload/src/rank.rs`). Must not: allocate on
//! the shim's side (parsing and choosing work on fixed arrays and byte slices).
//!
//! ```text
//! # the machine's GPUs (gpuN numbers them), then each rank's block in rank order:
//! # its GPU's number, ':', its CPUs
//! gpus 8
//! rank_blocks 0:0-3;1:4-7;2:8-11
//! ```

use crate::cpulist::{self, CpuListError};
use crate::MAX_SLOTS;

/// A slot in no rank block (the same value as `locality::NO_BLOCK`).
pub const NO_BLOCK: u16 = u16::MAX;

/// Why a `gpus` or `rank_blocks` value is unusable (the plan names the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankBlocksError {
    /// Not a number, an entry without `GPU:`, or a bad cpulist.
    Bad(Option<CpuListError>),
    /// More than [`MAX_RANK_BLOCKS`] blocks, or a GPU number past `u16`.
    TooMany,
}

/// Most rank blocks a plan holds.
pub const MAX_RANK_BLOCKS: usize = 256;

/// Where a process's local rank is read, first match wins: torchrun, Slurm, Open MPI, MPICH
/// and Intel MPI (two names), goset-run's `--instances`.
pub const LOCAL_RANK_VARS: [&str; 6] = [
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "GOSET_INSTANCE",
];

/// Where a process's visible GPUs are read, first set and non-empty wins: CUDA, then ROCm's
/// two names.
pub const VISIBLE_VARS: [&str; 3] = [
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
];

/// Each slot's rank block, and each block's GPU. Fixed-size, inside the plan's static.
#[derive(Clone)]
pub struct RankBlocks {
    /// The machine's GPUs (0: no rank blocks).
    gpus: usize,
    /// Blocks given.
    count: usize,
    /// Each block's GPU number.
    gpu_of: [u16; MAX_RANK_BLOCKS],
    /// Each slot's block, [`NO_BLOCK`] for none.
    of_slot: [u16; MAX_SLOTS],
}

/// A process's GPU, as its environment says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankGpu {
    /// GPU number `gpu` (as `gpuN` counts), for local rank `rank`.
    Gpu { rank: usize, gpu: usize },
    /// The variable named holds an entry that is no index (a UUID, `MIG-...`): sysfs cannot
    /// tell which GPU it is.
    NotAnIndex { rank: usize, var: &'static str },
    /// No local rank in the environment.
    NoRank,
}

/// The highest local rank a variable can give (9 digits): what the launcher accepts from a
/// process's log record of it.
pub const MAX_LOCAL_RANK: usize = 999_999_999;

/// A non-negative decimal number of at most 9 digits.
fn number(text: &[u8]) -> Option<usize> {
    let t = text.trim_ascii();
    if t.is_empty() || t.len() > 9 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(t.iter().fold(0, |n, &d| n * 10 + (d - b'0') as usize))
}

/// The local rank in an environment (`get` looks a name up): the first of
/// [`LOCAL_RANK_VARS`] set to a number, with that variable's name.
pub fn local_rank<'a>(get: impl Fn(&str) -> Option<&'a [u8]>) -> Option<(usize, &'static str)> {
    LOCAL_RANK_VARS
        .iter()
        .find_map(|&name| Some((get(name).and_then(number)?, name)))
}

/// The first of [`VISIBLE_VARS`] set and not blank, with its value.
pub fn visible<'a>(get: impl Fn(&str) -> Option<&'a [u8]>) -> Option<(&'static str, &'a [u8])> {
    VISIBLE_VARS.iter().find_map(|&name| {
        get(name)
            .filter(|v| !v.trim_ascii().is_empty())
            .map(|v| (name, v))
    })
}

/// The GPU of local rank `rank` where `gpus` GPUs are on the machine: entry `rank` of the
/// first visible-devices variable set (wrapping round its entries when ranks outnumber them),
/// else GPU `rank` (wrapping round the machine's GPUs).
pub fn gpu_of_rank<'a>(
    rank: usize,
    gpus: usize,
    get: impl Fn(&str) -> Option<&'a [u8]>,
) -> RankGpu {
    let Some((var, list)) = visible(get) else {
        return RankGpu::Gpu {
            rank,
            gpu: rank % gpus.max(1),
        };
    };
    let entries = list.split(|&c| c == b',').count();
    let pick = list
        .split(|&c| c == b',')
        .nth(rank % entries)
        .unwrap_or_default();
    if list.split(|&c| c == b',').any(|e| number(e).is_none()) {
        return RankGpu::NotAnIndex { rank, var };
    }
    RankGpu::Gpu {
        rank,
        gpu: number(pick).unwrap_or(0),
    }
}

impl RankBlocks {
    /// No rank blocks.
    pub const EMPTY: RankBlocks = RankBlocks {
        gpus: 0,
        count: 0,
        gpu_of: [0; MAX_RANK_BLOCKS],
        of_slot: [NO_BLOCK; MAX_SLOTS],
    };

    /// Whether the plan gives rank blocks.
    pub fn given(&self) -> bool {
        self.count > 0
    }

    /// The machine's GPUs: the `gpus` line's, at least one past the highest GPU a block names
    /// (by hand there is no `gpus` line).
    pub fn gpus(&self) -> usize {
        let named = self.gpu_of[..self.count]
            .iter()
            .max()
            .map_or(0, |&g| g as usize + 1);
        self.gpus.max(named)
    }

    /// How many blocks.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Block `b`'s GPU.
    pub fn gpu_of(&self, b: usize) -> Option<usize> {
        (b < self.count).then(|| self.gpu_of[b] as usize)
    }

    /// Slot `slot`'s block ([`NO_BLOCK`]: none).
    pub fn of_slot(&self, slot: usize) -> u16 {
        self.of_slot.get(slot).copied().unwrap_or(NO_BLOCK)
    }

    /// Back to none (before a plan is parsed in place).
    pub(crate) fn clear(&mut self) {
        self.gpus = 0;
        self.count = 0;
        self.of_slot.fill(NO_BLOCK);
    }

    /// The `gpus` line's value.
    pub(crate) fn parse_gpus(&mut self, value: &[u8]) -> Result<(), RankBlocksError> {
        self.gpus = number(value).ok_or(RankBlocksError::Bad(None))?;
        Ok(())
    }

    /// The `rank_blocks` line's value (or `GOSET_RANK_BLOCKS`'s), for the task CPUs `cpus` in
    /// slot order (the `cpus` line must come first). A CPU of no slot is ignored; a slot in two
    /// blocks stays in the first.
    pub(crate) fn parse_blocks(
        &mut self,
        value: &[u8],
        cpus: &[u16],
    ) -> Result<(), RankBlocksError> {
        let bad = RankBlocksError::Bad;
        if cpus.is_empty() {
            return Err(bad(None));
        }
        self.count = 0;
        self.of_slot.fill(NO_BLOCK);
        for entry in value.split(|&c| c == b';') {
            let at = entry.iter().position(|&c| c == b':').ok_or(bad(None))?;
            let gpu = number(&entry[..at]).ok_or(bad(None))?;
            if self.count >= MAX_RANK_BLOCKS || gpu > u16::MAX as usize {
                return Err(RankBlocksError::TooMany);
            }
            let b = self.count as u16;
            let of_slot = &mut self.of_slot;
            cpulist::parse(&entry[at + 1..], &mut |cpu| {
                for (slot, &c) in cpus.iter().enumerate() {
                    if c as usize == cpu && of_slot[slot] == NO_BLOCK {
                        of_slot[slot] = b;
                    }
                }
            })
            .map_err(|e| bad(Some(e)))?;
            self.gpu_of[self.count] = gpu as u16;
            self.count += 1;
        }
        Ok(())
    }

    /// Sets the blocks (launcher side): the machine's GPU count, and each rank's GPU and the
    /// slots of its block. False, and nothing set, past [`MAX_RANK_BLOCKS`].
    pub fn set(&mut self, gpus: usize, blocks: &[(usize, Vec<usize>)]) -> bool {
        if blocks.len() > MAX_RANK_BLOCKS || blocks.iter().any(|(g, _)| *g > u16::MAX as usize) {
            return false;
        }
        self.clear();
        self.gpus = gpus;
        for (b, (gpu, slots)) in blocks.iter().enumerate() {
            self.gpu_of[b] = *gpu as u16;
            for &s in slots.iter().filter(|&&s| s < MAX_SLOTS) {
                self.of_slot[s] = b as u16;
            }
        }
        self.count = blocks.len();
        true
    }

    /// The plan file's `gpus` and `rank_blocks` lines (launcher side), `cpu_of` giving each
    /// slot's CPU; nothing without blocks.
    pub fn to_text(&self, slots: usize, cpu_of: impl Fn(usize) -> usize) -> String {
        if !self.given() {
            return String::new();
        }
        let entries: Vec<String> = (0..self.count)
            .map(|b| {
                let set: crate::CpuSet = (0..slots)
                    .filter(|&s| self.of_slot(s) as usize == b)
                    .map(&cpu_of)
                    .collect();
                format!("{}:{set}", self.gpu_of[b])
            })
            .collect();
        format!("gpus {}\nrank_blocks {}\n", self.gpus, entries.join(";"))
    }

    /// The block local rank `rank` on GPU `gpu` takes: the block whose slot `own` (the slot
    /// the process runs on) lies in, when that block is `gpu`'s and held by a live process
    /// (`held`): a child of that rank, which keeps to its parent's block; else the `rank`-th
    /// block when it is `gpu`'s and free; else `gpu`'s first free block. `None`: every block
    /// of the GPU is held, or it has none.
    pub fn choose(
        &self,
        rank: usize,
        gpu: usize,
        own: Option<usize>,
        held: impl Fn(u16) -> bool,
    ) -> Option<u16> {
        let mine = |b: u16| self.gpu_of(b as usize) == Some(gpu);
        if let Some(b) = own.map(|s| self.of_slot(s)).filter(|&b| b != NO_BLOCK) {
            if mine(b) && held(b) {
                return Some(b);
            }
        }
        let free = |b: u16| mine(b) && !held(b);
        let by_rank = u16::try_from(rank).ok().filter(|&b| free(b));
        by_rank.or_else(|| (0..self.count as u16).find(|&b| free(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a [u8]> {
        move |name| {
            (pairs.iter())
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_bytes())
        }
    }

    #[test]
    fn the_local_rank_is_the_first_variable_that_holds_a_number() {
        assert_eq!(local_rank(env(&[])), None);
        let instance = [("GOSET_INSTANCE", "3")];
        assert_eq!(local_rank(env(&instance)), Some((3, "GOSET_INSTANCE")));
        let both = [("SLURM_LOCALID", "2"), ("LOCAL_RANK", "5")];
        let first = Some((5, "LOCAL_RANK"));
        assert_eq!(local_rank(env(&both)), first, "torchrun's comes first");
        let odd = [("LOCAL_RANK", "x"), ("PMI_LOCAL_RANK", " 7\n")];
        assert_eq!(local_rank(env(&odd)), Some((7, "PMI_LOCAL_RANK")));
        assert_eq!(local_rank(env(&[("LOCAL_RANK", "-1")])), None);
    }

    #[test]
    fn a_rank_uses_the_gpu_its_visible_list_names() {
        let gpu = |rank, gpu| RankGpu::Gpu { rank, gpu };
        assert_eq!(gpu_of_rank(3, 8, env(&[])), gpu(3, 3));
        assert_eq!(
            gpu_of_rank(9, 8, env(&[])),
            gpu(9, 1),
            "wraps round the GPUs"
        );
        let four = [("CUDA_VISIBLE_DEVICES", "4,5,6,7")];
        assert_eq!(gpu_of_rank(1, 8, env(&four)), gpu(1, 5));
        assert_eq!(gpu_of_rank(5, 8, env(&four)), gpu(5, 5));
        let one = [("CUDA_VISIBLE_DEVICES", "6")];
        assert_eq!(gpu_of_rank(2, 8, env(&one)), gpu(2, 6), "one GPU a rank");
        let rocm = [("CUDA_VISIBLE_DEVICES", ""), ("HIP_VISIBLE_DEVICES", "2,3")];
        assert_eq!(gpu_of_rank(0, 8, env(&rocm)), gpu(0, 2));
        let uuid = [(
            "CUDA_VISIBLE_DEVICES",
            "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
        )];
        assert_eq!(
            gpu_of_rank(0, 8, env(&uuid)),
            RankGpu::NotAnIndex {
                rank: 0,
                var: "CUDA_VISIBLE_DEVICES"
            }
        );
    }

    #[test]
    fn blocks_survive_the_plan_line_and_ranks_choose_their_gpus() {
        let cpus: Vec<u16> = vec![0, 1, 2, 3, 4, 5, 6, 7];
        let mut r = RankBlocks::EMPTY;
        // Two ranks a GPU on GPUs 0 and 1: blocks 0 and 2 are GPU 0's.
        r.parse_blocks(b"0:0-1;1:4-5;0:2-3;1:6-7", &cpus).unwrap();
        assert_eq!(r.count(), 4);
        assert_eq!(
            (0..8).map(|s| r.of_slot(s)).collect::<Vec<_>>(),
            [0, 0, 2, 2, 1, 1, 3, 3]
        );
        let text = r.to_text(8, |s| s);
        assert!(
            text.ends_with("rank_blocks 0:0-1;1:4-5;0:2-3;1:6-7\n"),
            "{text}"
        );
        let none = |_| false;
        assert_eq!(r.choose(0, 0, None, none), Some(0));
        assert_eq!(r.choose(2, 0, None, none), Some(2));
        assert_eq!(
            r.choose(2, 0, None, |b| b == 2),
            Some(0),
            "the GPU's free one"
        );
        assert_eq!(r.choose(2, 0, None, |b| b == 2 || b == 0), None);
        // A child of rank 1 (its slot in block 1, held by the rank) keeps to it.
        assert_eq!(r.choose(1, 1, Some(5), |b| b == 1), Some(1));
        // A slot in a block of another GPU says nothing.
        assert_eq!(r.choose(0, 0, Some(5), |b| b == 1), Some(0));
        assert_eq!(r.choose(0, 3, None, none), None, "a GPU without blocks");
        assert!(r.parse_blocks(b"0-1", &cpus).is_err());
        assert!(r.parse_blocks(b"x:0-1", &cpus).is_err());
        assert!(r.parse_blocks(b"0:0-1", &[]).is_err());
    }
}
