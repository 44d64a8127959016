//! CPU kinds (performance and efficiency cores), read as hwloc reads them on Linux, and the
//! performance classes selection ranks them by.
//!
//! Owns: the per-CPU facts that tell kinds apart (`cpu_capacity`, `cpufreq`'s maximum and base
//! frequencies, the Intel hybrid PMU lists, Arm's MIDR), how they make kinds and how kinds are
//! ranked, each CPU's favour (`acpi_cppc/highest_perf`, AMD's preferred-core ranking), and the
//! classes. Must not: select or print.
//!
//! As hwloc does it (`topology-linux.c` and `cpukinds.c`):
//! - each fact partitions the CPUs that have it by its value; kinds are the intersections of
//!   the partitions. A CPU with none of the facts is of no kind; a machine where every CPU has
//!   the same values has one kind;
//! - where every CPU with a maximum frequency has a base frequency, the maxima of one
//!   base-frequency group become the group's lowest when all are within
//!   [`MAX_FREQ_TOLERANCE`] of it (Intel's Turbo Boost Max favoured cores boost a few percent
//!   higher but are no other kind); their favour tells them apart instead;
//! - kinds are ranked from the least performant (0) to the most: by capacity where every kind
//!   has one and no two share it; else by core type (IntelAtom below IntelCore) plus the base
//!   frequency where every kind has one, else the maximum frequency, where that tells every
//!   kind apart; where hwloc cannot rank (a tie), by all the facts in that order;
//! - the base frequency is `cpufreq/base_frequency`, else `acpi_cppc/nominal_freq` (as hwloc
//!   2.11 reads it; 2.9 does not, and ranks the same wherever both can).
//!
//! Kinds that hwloc tells apart by a few percent (GB10's X925 cores at capacity 997, 1017 and
//! 1024) are one core design, binned. A [`CpuKind::class`] groups kinds of one core type
//! (Intel's PMU list, Arm's MIDR part number; kinds without one count as one type) whose speed
//! is within [`CLASS_TOLERANCE`] of the class's fastest: selection ranks classes, and within a
//! class the favoured cores.

use super::sysfs::{Reader, CPU_DIR};
use serde::Serialize;
use std::collections::BTreeMap;

/// A maximum frequency within this share above its group's lowest is the lowest (hwloc's
/// default for `HWLOC_CPUKINDS_MAXFREQ`: 10%).
pub const MAX_FREQ_TOLERANCE: f64 = 0.10;

/// Kinds of one core type whose speed is within this share of the fastest of them are one
/// class.
pub const CLASS_TOLERANCE: f64 = 0.10;

/// One kind of CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuKind {
    /// Its rank, as hwloc's efficiency: 0 is the least performant (most power-efficient).
    pub index: usize,
    /// Its CPUs, ascending.
    pub cpus: Vec<usize>,
    /// The core type where the hardware names it: `IntelCore`, `IntelAtom` (the hybrid PMU
    /// lists), or an Arm core's name (`Cortex-X925`) or `arm:0xIMP:0xPART` from its MIDR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_type: Option<String>,
    /// `cpu_capacity` (the scheduler's relative capacity, 1024 for the biggest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Maximum frequency in MHz (`cpufreq/cpuinfo_max_freq`, after the favoured-core merge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_mhz: Option<u64>,
    /// Base frequency in MHz (`cpufreq/base_frequency`, else `acpi_cppc/nominal_freq`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_mhz: Option<u64>,
    /// Its performance class, 0 the slowest (see the module's doc).
    pub class: usize,
    /// The speed of its class's fastest kind, in permille of the machine's fastest kind: by
    /// capacity, else maximum frequency, else base frequency.
    pub perf: u32,
}

/// What one CPU tells about its kind: the facts hwloc partitions CPUs by.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Facts {
    /// `IntelAtom` or `IntelCore`, from the hybrid PMU lists.
    core_type: Option<String>,
    capacity: Option<u64>,
    max_mhz: Option<u64>,
    base_mhz: Option<u64>,
}

/// The kinds and each CPU's favour.
pub(super) struct Kinds {
    pub(super) kinds: Vec<CpuKind>,
    /// Each CPU's kind index.
    pub(super) kind_of: BTreeMap<usize, usize>,
    /// Each CPU's favour, where the firmware ranks cores.
    pub(super) favour: BTreeMap<usize, u64>,
}

impl Reader<'_> {
    /// The kinds of `cpus` (the online CPUs: an offline CPU's files are not trustworthy, and
    /// hwloc gives it no kind).
    pub(super) fn kinds(&mut self, cpus: &[usize]) -> Kinds {
        let core = self.hybrid_list("/sys/devices/cpu_core/cpus");
        let atom = self.hybrid_list("/sys/devices/cpu_atom/cpus");
        let mut facts: BTreeMap<usize, Facts> = BTreeMap::new();
        let mut arm: BTreeMap<usize, String> = BTreeMap::new();
        let mut favour = BTreeMap::new();
        for &cpu in cpus {
            let dir = format!("{CPU_DIR}/cpu{cpu}");
            let number = |r: &mut Self, f: &str| -> Option<u64> {
                r.read_quiet(&format!("{dir}/{f}"))
                    .and_then(|s| s.trim().parse::<u64>().ok())
            };
            let core_type = if core.contains(&cpu) {
                Some("IntelCore".to_string())
            } else if atom.contains(&cpu) {
                Some("IntelAtom".to_string())
            } else {
                None
            };
            if let Some(name) = (self.read_quiet(&format!("{dir}/regs/identification/midr_el1")))
                .and_then(|m| arm_core(&m))
            {
                arm.insert(cpu, name);
            }
            let base_khz = number(self, "cpufreq/base_frequency")
                .or_else(|| number(self, "acpi_cppc/nominal_freq").map(|mhz| mhz * 1000));
            facts.insert(
                cpu,
                Facts {
                    core_type,
                    capacity: number(self, "cpu_capacity"),
                    max_mhz: number(self, "cpufreq/cpuinfo_max_freq").map(|k| k / 1000),
                    base_mhz: base_khz.map(|k| k / 1000),
                },
            );
            if let Some(f) = number(self, "cpufreq/amd_pstate_prefcore_ranking")
                .or_else(|| number(self, "acpi_cppc/highest_perf"))
            {
                favour.insert(cpu, f);
            }
        }
        let (kinds, kind_of) = make_kinds(facts, &arm);
        // Favour that every CPU shares ranks nothing.
        let distinct: std::collections::BTreeSet<u64> = favour.values().copied().collect();
        if distinct.len() < 2 {
            favour.clear();
        }
        Kinds {
            kinds,
            kind_of,
            favour,
        }
    }

    fn hybrid_list(&mut self, file: &str) -> Vec<usize> {
        self.list_file(file).unwrap_or_default()
    }
}

/// An Arm core's name from its `midr_el1` (implementer and part number), or the numbers.
fn arm_core(midr: &str) -> Option<String> {
    let v = u64::from_str_radix(midr.trim().trim_start_matches("0x"), 16).ok()?;
    let implementer = (v >> 24) & 0xff;
    let part = (v >> 4) & 0xfff;
    let name = match (implementer, part) {
        (0x41, 0xd03) => "Cortex-A53",
        (0x41, 0xd04) => "Cortex-A35",
        (0x41, 0xd05) => "Cortex-A55",
        (0x41, 0xd07) => "Cortex-A57",
        (0x41, 0xd08) => "Cortex-A72",
        (0x41, 0xd09) => "Cortex-A73",
        (0x41, 0xd0a) => "Cortex-A75",
        (0x41, 0xd0b) => "Cortex-A76",
        (0x41, 0xd0d) => "Cortex-A77",
        (0x41, 0xd41) => "Cortex-A78",
        (0x41, 0xd44) => "Cortex-X1",
        (0x41, 0xd46) => "Cortex-A510",
        (0x41, 0xd47) => "Cortex-A710",
        (0x41, 0xd48) => "Cortex-X2",
        (0x41, 0xd4d) => "Cortex-A715",
        (0x41, 0xd4e) => "Cortex-X3",
        (0x41, 0xd80) => "Cortex-A520",
        (0x41, 0xd81) => "Cortex-A720",
        (0x41, 0xd82) => "Cortex-X4",
        (0x41, 0xd85) => "Cortex-X925",
        (0x41, 0xd87) => "Cortex-A725",
        (0x41, 0xd0c) => "Neoverse-N1",
        (0x41, 0xd40) => "Neoverse-V1",
        (0x41, 0xd49) => "Neoverse-N2",
        (0x41, 0xd4f) => "Neoverse-V2",
        _ => return Some(format!("arm:{implementer:#x}:{part:#x}")),
    };
    Some(name.to_string())
}

/// Kinds from each CPU's facts: the maximum-frequency merge, the partition, the ranking and
/// the classes. `arm` names the Arm core of each CPU (from its MIDR): it names a kind whose
/// CPUs all share one, and splits classes, but, as in hwloc, not kinds.
fn make_kinds(
    mut facts: BTreeMap<usize, Facts>,
    arm: &BTreeMap<usize, String>,
) -> (Vec<CpuKind>, BTreeMap<usize, usize>) {
    merge_favoured_max(&mut facts);
    let mut groups: BTreeMap<Facts, Vec<usize>> = BTreeMap::new();
    for (&cpu, f) in facts.iter().filter(|(_, f)| **f != Facts::default()) {
        groups.entry(f.clone()).or_default().push(cpu);
    }
    let mut groups: Vec<(Facts, Vec<usize>)> = groups.into_iter().collect();
    rank(&mut groups);
    for (f, cpus) in &mut groups {
        if f.core_type.is_none() {
            let names: std::collections::BTreeSet<Option<&String>> =
                cpus.iter().map(|c| arm.get(c)).collect();
            if let [Some(name)] = names.into_iter().collect::<Vec<_>>()[..] {
                f.core_type = Some(name.clone());
            }
        }
    }
    let speed = |f: &Facts| -> Option<u64> { f.capacity.or(f.max_mhz).or(f.base_mhz) };
    let fastest = groups
        .iter()
        .filter_map(|(f, _)| speed(f))
        .max()
        .unwrap_or(0);
    // Classes, from the fastest kind down: a kind joins the class above it when it has the
    // same core type and is within the tolerance of that class's fastest.
    let mut class_top: Vec<(Option<String>, Option<u64>)> = Vec::new();
    let mut class_rev = vec![0usize; groups.len()];
    for (i, (f, _)) in groups.iter().enumerate().rev() {
        let joins = class_top.last().is_some_and(|(t, top)| {
            *t == f.core_type
                && match (top, speed(f)) {
                    (Some(top), Some(s)) => (s as f64) >= (*top as f64) * (1.0 - CLASS_TOLERANCE),
                    (None, None) => true,
                    _ => false,
                }
        });
        if !joins {
            class_top.push((f.core_type.clone(), speed(f)));
        }
        class_rev[i] = class_top.len() - 1;
    }
    let classes = class_top.len();
    let mut kind_of = BTreeMap::new();
    let kinds = (groups.into_iter().enumerate())
        .map(|(index, (f, cpus))| {
            for &c in &cpus {
                kind_of.insert(c, index);
            }
            let top = class_top[class_rev[index]].1;
            CpuKind {
                index,
                cpus,
                perf: match (top, fastest) {
                    (Some(t), f) if f > 0 => (t * 1000 / f) as u32,
                    _ => 1000,
                },
                class: classes - 1 - class_rev[index],
                core_type: f.core_type,
                capacity: f.capacity,
                max_mhz: f.max_mhz,
                base_mhz: f.base_mhz,
            }
        })
        .collect();
    (kinds, kind_of)
}

/// Within each group of CPUs of one base frequency, the maximum frequencies become the
/// group's lowest when they are all within [`MAX_FREQ_TOLERANCE`] of it; only where every CPU
/// with a maximum has a base frequency, as hwloc does.
fn merge_favoured_max(facts: &mut BTreeMap<usize, Facts>) {
    if facts
        .values()
        .any(|f| f.max_mhz.is_some() && f.base_mhz.is_none())
    {
        return;
    }
    let mut range: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for f in facts.values() {
        if let (Some(m), Some(b)) = (f.max_mhz, f.base_mhz) {
            let e = range.entry(b).or_insert((m, m));
            *e = (e.0.min(m), e.1.max(m));
        }
    }
    for f in facts.values_mut() {
        if let (Some(_), Some(b)) = (f.max_mhz, f.base_mhz) {
            let (low, high) = range[&b];
            if ((high - low) as f64) < low as f64 * MAX_FREQ_TOLERANCE {
                f.max_mhz = Some(low);
            }
        }
    }
}

/// Orders kinds from the least performant to the most, as hwloc's default ranking does:
/// by capacity where every kind has one and no two share it (the order hwloc's `cpu_capacity`
/// registration forces); else by core type (IntelAtom below IntelCore) plus the base
/// frequency where every kind has one, else the maximum frequency, where that tells every
/// kind apart. Where hwloc cannot rank (two kinds tie), by all the facts in that order.
fn rank(groups: &mut [(Facts, Vec<usize>)]) {
    let type_rank = |f: &Facts| match f.core_type.as_deref() {
        Some("IntelAtom") => 1u64,
        Some("IntelCore") => 2,
        _ => 0,
    };
    let every = |k: &dyn Fn(&Facts) -> Option<u64>| groups.iter().all(|(f, _)| k(f).is_some());
    let apart = |k: &dyn Fn(&Facts) -> u64| {
        let set: std::collections::BTreeSet<u64> = groups.iter().map(|(f, _)| k(f)).collect();
        set.len() == groups.len()
    };
    let capacity = |f: &Facts| f.capacity.unwrap_or(0);
    if every(&|f: &Facts| f.capacity) && apart(&capacity) {
        groups.sort_by_key(|(f, _)| capacity(f));
        return;
    }
    let have_base = every(&|f: &Facts| f.base_mhz);
    let have_max = every(&|f: &Facts| f.max_mhz);
    let have_type = groups.iter().all(|(f, _)| type_rank(f) > 0);
    let score = |f: &Facts| {
        let freq = if have_base { f.base_mhz } else { f.max_mhz };
        (type_rank(f) << 20) + freq.unwrap_or(0)
    };
    if (have_base || have_max || have_type) && apart(&score) {
        groups.sort_by_key(|(f, _)| score(f));
        return;
    }
    groups.sort_by_key(|(f, c)| (type_rank(f), f.base_mhz, f.max_mhz, f.capacity, c[0]));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(capacity: Option<u64>, max: Option<u64>) -> Facts {
        Facts {
            core_type: None,
            capacity,
            max_mhz: max,
            base_mhz: None,
        }
    }

    #[test]
    fn gb10s_five_capacities_are_five_kinds_in_two_classes() {
        let mut facts = BTreeMap::new();
        let caps = [
            (0..5, 718, 2808),
            (5..10, 997, 3900),
            (10..15, 731, 2808),
            (15..19, 1017, 3900),
            (19..20, 1024, 3900),
        ];
        for (cpus, cap, max) in caps {
            for c in cpus {
                facts.insert(c, f(Some(cap), Some(max)));
            }
        }
        let arm: BTreeMap<usize, String> = (0..20)
            .map(|c| {
                (
                    c,
                    if c % 10 < 5 {
                        "Cortex-A725"
                    } else {
                        "Cortex-X925"
                    }
                    .to_string(),
                )
            })
            .collect();
        let (kinds, kind_of) = make_kinds(facts, &arm);
        let sets: Vec<Vec<usize>> = kinds.iter().map(|k| k.cpus.clone()).collect();
        assert_eq!(
            sets,
            [
                (0..5).collect::<Vec<_>>(),
                (10..15).collect(),
                (5..10).collect(),
                (15..19).collect(),
                vec![19]
            ]
        );
        let classes: Vec<usize> = kinds.iter().map(|k| k.class).collect();
        assert_eq!(classes, [0, 0, 1, 1, 1]);
        assert_eq!(kinds[0].perf, 731 * 1000 / 1024);
        assert_eq!(kinds[4].perf, 1000);
        assert_eq!(kind_of[&12], 1);
        assert_eq!(kinds[2].core_type.as_deref(), Some("Cortex-X925"));
        // The same speeds without MIDR: one class all the same, by speed alone.
        let (plain, _) = make_kinds(
            (0..20)
                .map(|c| (c, f(Some(if c % 10 < 5 { 718 } else { 1024 }), None)))
                .collect(),
            &BTreeMap::new(),
        );
        assert_eq!(plain.iter().map(|k| k.class).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn the_same_facts_everywhere_are_one_kind_and_no_facts_none() {
        let facts: BTreeMap<usize, Facts> =
            (0..4).map(|c| (c, f(Some(1024), Some(3000)))).collect();
        let (kinds, _) = make_kinds(facts, &BTreeMap::new());
        assert_eq!(kinds.len(), 1);
        assert_eq!((kinds[0].class, kinds[0].perf), (0, 1000));
        let none: BTreeMap<usize, Facts> = (0..4).map(|c| (c, Facts::default())).collect();
        assert!(make_kinds(none, &BTreeMap::new()).0.is_empty());
    }

    #[test]
    fn a_favoured_cores_higher_boost_is_no_other_kind() {
        let mut facts = BTreeMap::new();
        for c in 0..4 {
            let max = if c == 2 { 5200 } else { 5000 };
            facts.insert(
                c,
                Facts {
                    base_mhz: Some(1900),
                    ..f(None, Some(max))
                },
            );
        }
        for c in 4..8 {
            facts.insert(
                c,
                Facts {
                    base_mhz: Some(1400),
                    ..f(None, Some(3900))
                },
            );
        }
        let (kinds, _) = make_kinds(facts, &BTreeMap::new());
        assert_eq!(kinds.len(), 2);
        assert_eq!(kinds[1].cpus, [0, 1, 2, 3]);
        assert_eq!(kinds[1].max_mhz, Some(5000));
        assert_eq!(kinds[0].perf, 3900 * 1000 / 5000);
    }

    #[test]
    fn midr_names_the_arm_core() {
        assert_eq!(
            arm_core("0x00000000410fd851").as_deref(),
            Some("Cortex-X925")
        );
        assert_eq!(
            arm_core("0x00000000410fd871").as_deref(),
            Some("Cortex-A725")
        );
        assert_eq!(
            arm_core("0x00000000510f8000").as_deref(),
            Some("arm:0x51:0x800")
        );
        assert_eq!(arm_core("junk"), None);
    }

    #[test]
    fn without_base_frequencies_maxima_split_kinds_and_a_capacity_tie_ranks_by_frequency() {
        // RK3588: A55 at 414, two A76 pairs at 1024 but 2400 and 2256 MHz.
        let facts: BTreeMap<usize, Facts> = (0..8)
            .map(|c| {
                let (cap, max) = match c {
                    0..=3 => (414, 1800),
                    4 | 5 => (1024, 2400),
                    _ => (1024, 2256),
                };
                (c, f(Some(cap), Some(max)))
            })
            .collect();
        let (kinds, _) = make_kinds(facts, &BTreeMap::new());
        let sets: Vec<Vec<usize>> = kinds.iter().map(|k| k.cpus.clone()).collect();
        assert_eq!(sets, [vec![0, 1, 2, 3], vec![6, 7], vec![4, 5]]);
        assert_eq!(kinds.iter().map(|k| k.class).collect::<Vec<_>>(), [0, 1, 1]);
    }
}
