//! Why no selection is possible: [`SelectError`], each variant a usage error with its one line.

use std::fmt;

/// Why no selection is possible. Every variant is a usage error (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// Every online, allowed CPU is excluded (or the launcher may use none).
    NoCandidates,
    /// `-n` is 0 or larger than the candidates.
    CountOutOfRange { requested: usize, available: usize },
    /// `--numa N` names a node the machine does not have (or that has no CPU).
    UnknownNode { node: usize, known: Vec<usize> },
    /// The node cannot hold `-n` CPUs.
    NodeTooSmall {
        node: usize,
        holds: usize,
        requested: usize,
    },
    /// `--numa auto`: even the biggest node cannot hold `-n` CPUs.
    NoNodeLargeEnough {
        node: usize,
        holds: usize,
        requested: usize,
    },
    /// `--include` names CPUs that are not candidates (offline, not allowed, excluded, or on
    /// another node).
    IncludeNotCandidate { cpus: Vec<usize> },
    /// `--include` lists more CPUs than `-n`.
    IncludeTooMany { listed: usize, requested: usize },
    /// `--fence` with no candidate left outside the task CPUs for the housekeeper.
    NoRoomToFence { requested: usize, available: usize },
    /// `--spare K`: fewer than K candidates are left outside the task CPUs (and fence).
    NoRoomForSpares {
        requested: usize,
        spare: usize,
        left: usize,
    },
    /// `--near`: fewer than `-n` candidates are local to the device.
    TooFewNear {
        device: String,
        holds: usize,
        requested: usize,
    },
    /// `--near` with `--numa N` where the device is on another node.
    NearOtherNode {
        device: String,
        device_node: usize,
        numa: usize,
    },
    /// `--include` names candidates that are not local to `--near`'s device.
    IncludeNotNear { cpus: Vec<usize>, device: String },
    /// `--cpu-kind N` names a kind the machine does not have.
    UnknownKind { kind: usize, kinds: usize },
    /// `--cpu-kind N`: the kind holds fewer than `-n` candidate CPUs.
    KindTooSmall {
        kind: usize,
        holds: usize,
        requested: usize,
    },
}

fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::NoCandidates => f.write_str(
                "no candidate CPUs: every online CPU that goset-run may use is excluded",
            ),
            SelectError::CountOutOfRange { requested, available } => write!(
                f,
                "-n {requested}: must be between 1 and {available} (the candidate CPUs: online, allowed and not excluded)"
            ),
            SelectError::UnknownNode { node, known } => {
                write!(f, "--numa {node}: no such NUMA node with CPUs; nodes are {}", list(known))
            }
            SelectError::NodeTooSmall { node, holds, requested } => write!(
                f,
                "--numa {node}: node {node} holds {holds} candidate CPUs, fewer than -n {requested}"
            ),
            SelectError::NoNodeLargeEnough { node, holds, requested } => write!(
                f,
                "--numa auto: no node holds -n {requested} candidate CPUs (the biggest, node {node}, holds {holds})"
            ),
            SelectError::IncludeNotCandidate { cpus } => write!(
                f,
                "--include {}: not candidate CPUs (offline, not allowed, excluded or outside the NUMA node)",
                list(cpus)
            ),
            SelectError::IncludeTooMany { listed, requested } => {
                write!(f, "--include lists {listed} CPUs but -n is {requested}")
            }
            SelectError::NoRoomToFence { requested, available } => write!(
                f,
                "-n {requested} with --fence: the {available} candidate CPUs leave none outside the task for the housekeeper; use -n {} or less",
                available.saturating_sub(1)
            ),
            SelectError::NoRoomForSpares { requested, spare, left } => write!(
                f,
                "--spare {spare}: -n {requested} leaves {left} candidate CPUs outside the task; use --spare {left} or less"
            ),
            SelectError::TooFewNear { device, holds, requested } => write!(
                f,
                "--near {device}: {holds} candidate CPUs are local to it, fewer than -n {requested}"
            ),
            SelectError::NearOtherNode { device, device_node, numa } => write!(
                f,
                "--numa {numa} with --near {device}: the device is on node {device_node}; give --numa {device_node}, auto or off"
            ),
            SelectError::UnknownKind { kind, kinds } => write!(
                f,
                "--cpu-kind {kind}: no such CPU kind; {}",
                match kinds {
                    0 | 1 => "this machine has one kind, 0".to_string(),
                    n => format!("kinds are 0 (the least performant) to {}", n - 1),
                }
            ),
            SelectError::KindTooSmall { kind, holds, requested } => write!(
                f,
                "--cpu-kind {kind}: kind {kind} holds {holds} candidate CPUs, fewer than -n {requested}"
            ),
            SelectError::IncludeNotNear { cpus, device } => write!(
                f,
                "--include {}: not local to --near {device}",
                list(cpus)
            ),
        }
    }
}

impl std::error::Error for SelectError {}
