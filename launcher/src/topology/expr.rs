//! CPU lists as the command line takes them: the kernel's cpulists (`0,2-4`, `0-10:2`) and
//! likwid-pin's CPU expressions, which name CPUs by their place in a domain of the machine.
//!
//! Owns: parsing (no topology needed, so that a typo is refused before the machine is read)
//! and resolving on a [`Topology`] already read. Must not: read files, or decide what the CPUs
//! are for (`--include` and `--exclude` are selection's business).
//!
//! The rules, as likwid-pin(1) and likwid's wiki ("CPU expressions") document them:
//! - A **domain** holds the CPUs goset-run may use (online and allowed: likwid also numbers
//!   inside a cpuset) of the node (`N`), a socket (`S<i>`: packages numbered as hwloc and likwid
//!   number them, 0, 1, ... in order of their lowest CPU), a die (`D<i>`), a NUMA memory domain
//!   (`M<i>`: the kernel's node number, as `--numa` takes it) or a last-level cache (`C<i>`).
//!   Dies and caches are numbered 0, 1, ... in order of their lowest online CPU; a machine whose
//!   sysfs describes no caches has one `C` per socket.
//! - Its CPUs are listed **core by core** (cores in order of their lowest CPU, the hardware
//!   threads of a core together, ascending): likwid-topology's order, on SMT2 `0,4,1,5,...`.
//! - `DOMAIN:INDICES` (also `L:DOMAIN:INDICES`, and `L:INDICES` for `N`) picks by position in
//!   the **compact** order, physical cores first: the first thread of every core, then every
//!   second thread, and so on (a core without a second thread, such as a hybrid CPU's E-core,
//!   has nothing in that round). `INDICES` is a cpulist of positions, in the order written.
//! - `E:DOMAIN:COUNT[:CHUNK:STRIDE]` takes COUNT CPUs in the core-by-core order, CHUNK in a
//!   row, each chunk starting STRIDE positions after the previous one (default 1 and 1): on
//!   SMT2 `E:N:4:1:2` is one thread of each of the first four cores, and `E:N:4:2:4` on
//!   `0,4,1,5,2,6,3,7` is `0,4,2,6`.
//! - `A@B` is A's CPUs then B's; a CPU named twice counts once, where it was first named.
//!
//! likwid's `S:scatter`, `balanced` and `cbalanced` are not taken: goset-run ranks CPUs itself.

use super::{CpuInfo, Topology};
use goset_plan::cpulist::{self, CpuListError};
use goset_plan::cpuset::MAX_CPUS;
use goset_plan::CpuSet;
use std::collections::BTreeSet;
use std::fmt;

/// A parsed CPU list: plain CPU numbers or likwid expressions, joined with `@`. Displays as
/// written, for the messages of what fails to resolve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuExpr {
    text: String,
    parts: Vec<Part>,
}

impl fmt::Display for CpuExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One `@`-separated part.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// A kernel cpulist.
    Cpus(Vec<usize>),
    /// `DOMAIN:INDICES`: positions in the domain's compact order.
    Logical { domain: Domain, indices: Vec<usize> },
    /// `E:DOMAIN:COUNT:CHUNK:STRIDE`: positions in the domain's core-by-core order.
    Select {
        domain: Domain,
        count: usize,
        chunk: usize,
        stride: usize,
    },
}

/// A likwid affinity domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// `N`: the whole machine.
    Node,
    /// `S<i>`: a socket (package).
    Socket(usize),
    /// `D<i>`: a die.
    Die(usize),
    /// `M<i>`: a NUMA node.
    Memory(usize),
    /// `C<i>`: a last-level cache.
    Cache(usize),
}

impl Domain {
    fn parse(text: &str) -> Option<Domain> {
        if text == "N" {
            return Some(Domain::Node);
        }
        let (kind, digits) = text.split_at_checked(1)?;
        let i = small_number(digits)?;
        match kind {
            "S" => Some(Domain::Socket(i)),
            "D" => Some(Domain::Die(i)),
            "M" => Some(Domain::Memory(i)),
            "C" => Some(Domain::Cache(i)),
            _ => None,
        }
    }

    /// The kind's name, singular and plural.
    fn noun(self) -> (&'static str, &'static str) {
        match self {
            Domain::Node => ("node", "nodes"),
            Domain::Socket(_) => ("socket", "sockets"),
            Domain::Die(_) => ("die", "dies"),
            Domain::Memory(_) => ("NUMA domain", "NUMA domains"),
            Domain::Cache(_) => ("last-level cache", "last-level caches"),
        }
    }

    fn number(self) -> usize {
        match self {
            Domain::Node => 0,
            Domain::Socket(i) | Domain::Die(i) | Domain::Memory(i) | Domain::Cache(i) => i,
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let letter = match self {
            Domain::Node => return f.write_str("N"),
            Domain::Socket(_) => 'S',
            Domain::Die(_) => 'D',
            Domain::Memory(_) => 'M',
            Domain::Cache(_) => 'C',
        };
        write!(f, "{letter}{}", self.number())
    }
}

/// Why a CPU list did not parse or resolve; each names the part at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprError {
    /// A plain cpulist that does not parse.
    List(CpuListError),
    /// A part that is neither a cpulist nor a likwid expression.
    Syntax(String),
    /// A domain's positions that are not a list of numbers.
    Indices { part: String, error: CpuListError },
    /// `E:` with a count, chunk or stride that selects nothing sensible.
    Select { part: String, why: &'static str },
    /// A domain this machine does not have, or where goset-run may use no CPU.
    NoDomain { domain: Domain, known: Vec<usize> },
    /// A position past the domain's last CPU.
    OutOfRange {
        domain: Domain,
        index: usize,
        holds: usize,
    },
}

/// What is accepted, for the messages of bad syntax.
const ACCEPTED: &str = "expected a cpu list (0,2-4 or 0-10:2) or a likwid expression: \
     DOMAIN:INDICES with DOMAIN N, S<i>, D<i>, M<i> or C<i> (S0:0-3), L:DOMAIN:INDICES, or \
     E:DOMAIN:COUNT[:CHUNK:STRIDE] (E:S0:4:1:2), joined with @";

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExprError::List(e) => write!(f, "{e}"),
            ExprError::Syntax(part) => write!(f, "'{part}': {ACCEPTED}"),
            ExprError::Indices { part, error } => {
                write!(f, "'{part}': the positions in the domain: {error}")
            }
            ExprError::Select { part, why } => {
                write!(f, "'{part}': {why} (E:DOMAIN:COUNT[:CHUNK:STRIDE])")
            }
            ExprError::NoDomain { domain, known } => {
                let (one, many) = domain.noun();
                let known: CpuSet = known.iter().copied().collect();
                write!(
                    f,
                    "{domain}: no {one} {} with CPUs goset-run may use ({many}: {})",
                    domain.number(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.to_string()
                    }
                )
            }
            ExprError::OutOfRange {
                domain,
                index,
                holds,
            } => write!(
                f,
                "{domain}:{index}: {domain} holds {holds} CPUs goset-run may use (positions 0-{})",
                holds.saturating_sub(1)
            ),
        }
    }
}

impl std::error::Error for ExprError {}

/// A number of an expression: digits only, below [`MAX_CPUS`] (no CPU, count or stride
/// beyond the CPUs a machine may have means anything).
fn small_number(text: &str) -> Option<usize> {
    if text.is_empty() || text.len() > 7 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&n| n < MAX_CPUS)
}

/// The items of a cpulist, in the order written.
fn list(text: &str) -> Result<Vec<usize>, CpuListError> {
    let mut items = Vec::new();
    cpulist::parse(text.as_bytes(), &mut |c| items.push(c))?;
    Ok(items)
}

impl CpuExpr {
    /// Parses `text`: `@`-separated parts, each a kernel cpulist (it starts with a digit) or a
    /// likwid expression (it starts with a letter). Blank text is the empty list.
    pub fn parse(text: &str) -> Result<CpuExpr, ExprError> {
        if text.trim().is_empty() {
            return Ok(CpuExpr::default());
        }
        let parts = text.split('@').map(|p| parse_part(p.trim()));
        Ok(CpuExpr {
            text: text.to_string(),
            parts: parts.collect::<Result<_, _>>()?,
        })
    }

    /// The CPUs named, in order, each once: on `topo` for the likwid parts; plain CPU numbers
    /// are taken as written (whether the machine has them is selection's question).
    pub fn resolve(&self, topo: &Topology) -> Result<Vec<usize>, ExprError> {
        let mut cpus: Vec<usize> = Vec::new();
        for part in &self.parts {
            let named = match part {
                Part::Cpus(c) => c.clone(),
                Part::Logical { domain, indices } => {
                    let compact = compact(&cores_of(topo, *domain)?);
                    at_positions(*domain, &compact, indices.iter().copied())?
                }
                &Part::Select {
                    domain,
                    count,
                    chunk,
                    stride,
                } => {
                    let order: Vec<usize> = cores_of(topo, domain)?.concat();
                    let positions = (0..count).map(|i| (i / chunk) * stride + i % chunk);
                    at_positions(domain, &order, positions)?
                }
            };
            for c in named {
                if !cpus.contains(&c) {
                    cpus.push(c);
                }
            }
        }
        Ok(cpus)
    }
}

fn parse_part(part: &str) -> Result<Part, ExprError> {
    let syntax = || ExprError::Syntax(part.to_string());
    if part.starts_with(|c: char| c.is_ascii_digit()) {
        return list(part).map(Part::Cpus).map_err(ExprError::List);
    }
    let fields: Vec<&str> = part.split(':').collect();
    match fields.as_slice() {
        ["E", domain, numbers @ ..] => {
            let domain = Domain::parse(domain).ok_or_else(syntax)?;
            let numbers: Vec<usize> = (numbers.iter())
                .map(|n| small_number(n))
                .collect::<Option<_>>()
                .ok_or_else(syntax)?;
            let (count, chunk, stride) = match numbers[..] {
                [count] => (count, 1, 1),
                [count, chunk, stride] => (count, chunk, stride),
                _ => return Err(syntax()),
            };
            let why = if count == 0 {
                Some("COUNT must be at least 1")
            } else if chunk == 0 {
                Some("CHUNK must be at least 1")
            } else if stride < chunk {
                Some("STRIDE must be at least CHUNK, or chunks would overlap")
            } else {
                None
            };
            match why {
                Some(why) => Err(ExprError::Select {
                    part: part.to_string(),
                    why,
                }),
                None => Ok(Part::Select {
                    domain,
                    count,
                    chunk,
                    stride,
                }),
            }
        }
        // `L:` names the node's domain unless a domain follows.
        ["L", rest @ ..] => match rest.first().and_then(|d| Domain::parse(d)) {
            Some(domain) => logical(part, domain, &rest[1..]),
            None => logical(part, Domain::Node, rest),
        },
        [domain, rest @ ..] => logical(part, Domain::parse(domain).ok_or_else(syntax)?, rest),
        [] => Err(syntax()),
    }
}

/// `DOMAIN:INDICES`, the fields after the domain rejoined (a stride `0-6:2` has a colon).
fn logical(part: &str, domain: Domain, fields: &[&str]) -> Result<Part, ExprError> {
    let text = fields.join(":");
    if text.trim().is_empty() {
        return Err(ExprError::Syntax(part.to_string()));
    }
    let indices = list(&text).map_err(|error| ExprError::Indices {
        part: part.to_string(),
        error,
    })?;
    Ok(Part::Logical { domain, indices })
}

/// The CPUs at `positions` of `order`, a domain's list.
fn at_positions(
    domain: Domain,
    order: &[usize],
    positions: impl Iterator<Item = usize>,
) -> Result<Vec<usize>, ExprError> {
    positions
        .map(|index| {
            order.get(index).copied().ok_or(ExprError::OutOfRange {
                domain,
                index,
                holds: order.len(),
            })
        })
        .collect()
}

/// The physical-cores-first order of a domain given core by core: every core's first thread,
/// then every second thread, ...
fn compact(cores: &[Vec<usize>]) -> Vec<usize> {
    let widest = cores.iter().map(Vec::len).max().unwrap_or(0);
    (0..widest)
        .flat_map(|round| {
            cores
                .iter()
                .filter_map(move |core| core.get(round).copied())
        })
        .collect()
}

/// Which domain of `domain`'s kind `cpu` is in, by number; `None` where the topology does not
/// say (a CPU without a `topology` directory, or on no online node).
fn number_of(topo: &Topology, domain: Domain, cpu: &CpuInfo) -> Option<usize> {
    // Dies and caches have no number of their own: the n-th distinct one, by lowest CPU.
    let nth = |key: &dyn Fn(&CpuInfo) -> Option<(usize, i64)>| {
        let mine = key(cpu)?;
        let mut seen: Vec<(usize, i64)> = Vec::new();
        for c in topo.cpus.iter().filter(|c| c.online) {
            match key(c) {
                Some(k) if k == mine => return Some(seen.len()),
                Some(k) if !seen.contains(&k) => seen.push(k),
                _ => {}
            }
        }
        None
    };
    match domain {
        Domain::Node => Some(0),
        Domain::Socket(_) => cpu.package_index,
        Domain::Memory(_) => cpu.node,
        Domain::Die(_) => nth(&|c| Some((c.package_index?, c.die.unwrap_or(-1)))),
        Domain::Cache(_) => nth(&|c| match c.llc {
            Some(l) => Some((l, -1)),
            None => Some((c.package_index?, -2)),
        }),
    }
}

/// The CPUs goset-run may use in `domain`, core by core (cores in order of their lowest CPU,
/// each core's threads ascending).
fn cores_of(topo: &Topology, domain: Domain) -> Result<Vec<Vec<usize>>, ExprError> {
    let usable = || topo.cpus.iter().filter(|c| c.online && c.allowed);
    // Each core by its lowest CPU, in order of first appearance (CPUs ascending).
    let mut cores: Vec<(usize, Vec<usize>)> = Vec::new();
    for info in usable().filter(|c| number_of(topo, domain, c) == Some(domain.number())) {
        let core = info.siblings.first().copied().unwrap_or(info.cpu);
        match cores.iter_mut().find(|(k, _)| *k == core) {
            Some((_, cpus)) => cpus.push(info.cpu),
            None => cores.push((core, vec![info.cpu])),
        }
    }
    if cores.is_empty() {
        let known: BTreeSet<usize> = usable()
            .filter_map(|c| number_of(topo, domain, c))
            .collect();
        return Err(ExprError::NoDomain {
            domain,
            known: known.into_iter().collect(),
        });
    }
    Ok(cores.into_iter().map(|(_, cpus)| cpus).collect())
}

#[cfg(test)]
mod tests;
