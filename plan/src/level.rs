//! The levels at which CPUs group (NUMA node, package, last-level cache, cluster, core), a
//! slot's group at each of them (its [`Place`]), and the distance between two places.
//!
//! Owns: the level names the plan file spells, and the rule for how near two places are.
//! Below [`crate::plan`], which stores a place per slot, and [`crate::locality`], which cuts
//! blocks from them. Must not: allocate.
//!
//! A group's number means nothing but equality: two slots with the same number at a level
//! share that group. Groups nest (one core lies in one cluster, one cache, one package, one
//! node), so the distance is the finest level two slots share.

/// Number of [`Level`]s.
pub const LEVELS: usize = 5;

/// A slot's group at every level, indexed by [`Level`].
pub type Place = [u16; LEVELS];

/// The levels at which CPUs group, coarsest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// NUMA node: where a process's memory lives.
    Node = 0,
    /// Package (socket).
    Package = 1,
    /// Last-level cache (L3 on most x86, the L2 of an ARM cluster).
    Llc = 2,
    /// Cluster (CPUs sharing an L2 where sysfs has `cluster_id`); the core where it has none.
    Cluster = 3,
    /// Physical core: SMT siblings share it.
    Core = 4,
}

impl Level {
    /// Every level, coarsest first.
    pub const ALL: [Level; LEVELS] = [
        Level::Node,
        Level::Package,
        Level::Llc,
        Level::Cluster,
        Level::Core,
    ];

    /// The plan file's key for the level.
    pub fn key(self) -> &'static str {
        match self {
            Level::Node => "node",
            Level::Package => "package",
            Level::Llc => "llc",
            Level::Cluster => "cluster",
            Level::Core => "core",
        }
    }

    /// The level a plan file's key names.
    pub fn from_key(key: &[u8]) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.key().as_bytes() == key)
    }
}

/// How far apart two places are: the number of levels at which they differ. 0 on one core
/// (SMT siblings, or the same CPU), 1 in one cluster, 2 under one last-level cache, 3 in one
/// package and node, 4 in one package or one node, 5 in neither. Counting rather than taking
/// the finest level shared holds whichever way nodes and packages nest: an AMD package of two
/// nodes puts the other node of the package (4) before another package (5), and a cache that
/// spans two nodes (a VM's) does not make them near.
pub fn distance(a: &Place, b: &Place) -> u32 {
    a.iter().zip(b).filter(|(x, y)| x != y).count() as u32
}
