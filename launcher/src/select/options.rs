//! What the user asks of the selection: [`Options`] and its choices.

use crate::topology::Device;

/// How task threads use SMT siblings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SmtPolicy {
    /// One task thread per physical core, best cores first, before any sibling is used.
    #[default]
    Spread,
    /// Both (all) siblings of the best core first, then the next core.
    Pack,
}

/// Which CPU kinds the task takes first (`--cpu-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KindChoice {
    /// The most performant kinds first; a slower kind where it gives the task more (an idle
    /// E-core beats a P-core another task keeps busy, and a P-core's second thread).
    #[default]
    Performance,
    /// The least performant kinds first (background work on E-cores).
    Efficient,
    /// Kinds ignored: noise and compactness alone.
    Any,
    /// Only this kind (its number as `goset` lists kinds: 0 = the least performant).
    Kind(usize),
}

/// NUMA constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NumaChoice {
    /// Task CPUs may span nodes.
    #[default]
    Off,
    /// The node with the most candidates (among those holding every `include` CPU).
    Auto,
    /// This node only.
    Node(usize),
    /// `--numa`'s default with `--near`: the device's node, off when it has none (a device
    /// near every CPU alike must not narrow a task that would span nodes without it).
    Near,
}

/// What the user asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Number of task CPUs (slots).
    pub count: usize,
    /// SMT policy.
    pub smt: SmtPolicy,
    /// CPUs to take first, in this order.
    pub include: Vec<usize>,
    /// CPUs never to use, for the task or the housekeeper.
    pub exclude: Vec<usize>,
    /// NUMA constraint.
    pub numa: NumaChoice,
    /// Book the SMT siblings of the task CPUs idle (`--fence`).
    pub fence: bool,
    /// Quiet CPUs to book idle for moves off a CPU that turns noisy (`--spare`).
    pub spare: usize,
    /// Keep near this device (`--near`).
    pub near: Option<Device>,
    /// Which CPU kinds first (`--cpu-kind`).
    pub cpu_kind: KindChoice,
    /// Spread the task over as many domains as it can (`--scatter`), for codes bound by
    /// memory bandwidth, instead of as few as it can.
    pub scatter: bool,
    /// Threads per process of a task of several (`--per-process`, or `-n`/`--instances`): the
    /// slots are chosen a block of that many at a time, each by the same rule, each near the
    /// blocks before it where that costs it no domain.
    pub block: Option<usize>,
    /// The window the noise scores were measured over, in ms: what tells two interrupt rates
    /// apart. 0 (no measurement) counts as one second.
    pub sample_ms: u64,
    /// Loads closer than this many points are one tier; `None`: [`super::LOAD_TIE_PCT`], what a
    /// sample resolves (a noise record resolves finer).
    pub load_tie_pct: Option<f64>,
}
