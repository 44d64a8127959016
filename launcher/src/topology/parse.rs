//! Pure parsers of the text the topology reader finds: CPU masks and lists, the kernel command
//! line and `isolcpus=`, `/proc/self/status`, `/proc/mounts` and `/proc/self/cgroup`.
//!
//! Owns: turning one file's (or one parameter's) text into values; each parser is unit-tested on
//! captured text. Must not: read files, note errors or decide fallbacks (`sysfs.rs`,
//! `allowed.rs`, `kernel_isolation.rs` do).

use goset_plan::cpulist;
use std::collections::BTreeSet;
use std::fmt;

/// Why a hex CPU mask did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskError(pub String);

impl fmt::Display for MaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad cpu mask: {}", self.0)
    }
}

/// Parses a kernel hex CPU mask (`thread_siblings`, `core_siblings`, node `cpumap`): 32-bit hex
/// words separated by commas, most significant first (`00000000,00000101` = CPUs 0 and 8).
/// Blank input is the empty set. Returns the CPUs ascending.
pub fn parse_mask(text: &str) -> Result<Vec<usize>, MaskError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let words: Vec<&str> = text.split(',').collect();
    let mut cpus = Vec::new();
    for (i, word) in words.iter().rev().enumerate() {
        let word = word.trim();
        if word.is_empty() || word.len() > 8 || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MaskError(format!("word {word:?} is not 1 to 8 hex digits")));
        }
        let bits = u32::from_str_radix(word, 16).map_err(|e| MaskError(e.to_string()))?;
        for bit in 0..32 {
            if bits & (1 << bit) != 0 {
                cpus.push(i * 32 + bit);
            }
        }
    }
    Ok(cpus)
}

/// Parses a kernel cpulist (`0-3,8`) with `goset_plan::cpulist`; returns the CPUs ascending,
/// without duplicates. Blank input is the empty list.
pub fn parse_cpulist(text: &str) -> Result<Vec<usize>, cpulist::CpuListError> {
    let mut set = BTreeSet::new();
    cpulist::parse(text.as_bytes(), &mut |c| {
        set.insert(c);
    })?;
    Ok(set.into_iter().collect())
}

/// Parses `cpu/nohz_full`: a cpulist, except that kernels without nohz_full CPUs print
/// `(null)` (space-padded), which is the empty list.
pub fn parse_nohz_full(text: &str) -> Result<Vec<usize>, cpulist::CpuListError> {
    let t = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    if t == "(null)" {
        return Ok(Vec::new());
    }
    parse_cpulist(t)
}

/// Parses a CPU list from the kernel command line: a cpulist where the item `all` stands for
/// every CPU in `all`.
pub fn parse_param_cpulist(
    value: &str,
    all: &[usize],
) -> Result<Vec<usize>, cpulist::CpuListError> {
    let mut set = BTreeSet::new();
    let mut rest = Vec::new();
    for item in value.trim().split(',') {
        if item.trim() == "all" {
            set.extend(all.iter().copied());
        } else {
            rest.push(item);
        }
    }
    if !rest.is_empty() {
        set.extend(parse_cpulist(&rest.join(","))?);
    }
    Ok(set.into_iter().collect())
}

/// Splits a kernel command line into parameters as the kernel does: separated by white space,
/// double quotes protect spaces (`a="b c"`), the quotes are removed, and everything after a
/// bare `--` belongs to init and is dropped. Each parameter is `(name, value)`, value `None`
/// for a bare flag such as `quiet`.
pub fn parse_cmdline(cmdline: &str) -> Vec<(String, Option<String>)> {
    let mut params = Vec::new();
    let mut token = String::new();
    let mut in_token = false;
    let mut quoted = false;
    let mut chars = cmdline.chars().peekable();
    loop {
        let c = chars.next();
        let ends = match c {
            None => true,
            Some(ch) if ch.is_whitespace() && !quoted => true,
            Some('"') => {
                quoted = !quoted;
                in_token = true;
                false
            }
            Some(ch) => {
                token.push(ch);
                in_token = true;
                false
            }
        };
        if ends && in_token {
            if token == "--" {
                break;
            }
            let (name, value) = match token.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (token.clone(), None),
            };
            params.push((name, value));
            token.clear();
            in_token = false;
        }
        if c.is_none() {
            break;
        }
    }
    params
}

/// The value of the last `name` parameter on the command line: `None` when absent,
/// `Some("")` for a bare `name` or `name=`.
pub fn cmdline_param(cmdline: &str, name: &str) -> Option<String> {
    parse_cmdline(cmdline)
        .into_iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.unwrap_or_default())
}

/// Splits an `isolcpus=` value into its flags (`nohz`, `domain`, `managed_irq`) and cpulist.
/// Returns `(flags, cpulist, isolates_domains)`: without flags the kernel isolates scheduler
/// domains (the `isolated` file); with flags only when `domain` is among them.
pub fn split_isolcpus(value: &str) -> (Vec<String>, String, bool) {
    let mut flags = Vec::new();
    let mut rest = value.trim();
    loop {
        let (head, tail) = match rest.split_once(',') {
            Some((h, t)) => (h, t),
            None => (rest, ""),
        };
        if !head.is_empty()
            && head.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
            && head != "all"
        {
            flags.push(head.to_string());
            rest = tail;
            if tail.is_empty() {
                break;
            }
        } else {
            break;
        }
    }
    let domains = flags.is_empty() || flags.iter().any(|f| f == "domain");
    (flags, rest.to_string(), domains)
}

/// The `Cpus_allowed_list` value of a `/proc/<pid>/status` text.
pub fn status_allowed_list(status: &str) -> Option<&str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
}

/// Where a cgroup hierarchy that holds the cpuset controller is mounted, from `/proc/mounts`:
/// `(mount point, is_v2)`. Prefers a v1 `cpuset` hierarchy; a v2 mount qualifies when
/// `v2_has_cpuset` says its root lists the controller.
pub fn cpuset_mount(mounts: &str, v2_has_cpuset: &dyn Fn(&str) -> bool) -> Option<(String, bool)> {
    let mut v2 = None;
    for m in crate::procfs::mounts::cgroup_mounts(mounts) {
        match m.version {
            1 if m.controllers.iter().any(|c| c == "cpuset") => return Some((m.path, false)),
            2 if v2.is_none() && v2_has_cpuset(&m.path) => v2 = Some((m.path, true)),
            _ => {}
        }
    }
    v2
}

/// The cgroup path of the cpuset controller from `/proc/self/cgroup`: the v1 line naming
/// `cpuset`, else the v2 (`0::`) line.
pub fn cgroup_cpuset_path(cgroup: &str) -> Option<String> {
    let mut v2 = None;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        if ctrls.split(',').any(|c| c == "cpuset") {
            return Some(path.to_string());
        }
        if ctrls.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    v2
}

/// Parses a sysfs integer attribute such as `core_id` (may be negative).
pub fn parse_id(text: &str) -> Option<i64> {
    text.trim_matches(|c: char| c.is_whitespace() || c == '\0')
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hex_masks_most_significant_word_first() {
        assert_eq!(parse_mask("00000000,00000101\n").unwrap(), vec![0, 8]);
        assert_eq!(parse_mask("00000000,00000202").unwrap(), vec![1, 9]);
        assert_eq!(parse_mask("000000f0").unwrap(), vec![4, 5, 6, 7]);
        assert_eq!(
            parse_mask("00000001,00000000,80000000").unwrap(),
            vec![31, 64]
        );
        assert_eq!(
            parse_mask("00155550").unwrap(),
            vec![4, 6, 8, 10, 12, 14, 16, 18, 20]
        );
        assert_eq!(parse_mask("ffff").unwrap(), (0..16).collect::<Vec<_>>());
        assert_eq!(parse_mask("").unwrap(), Vec::<usize>::new());
        assert_eq!(
            parse_mask("00000000,00000000").unwrap(),
            Vec::<usize>::new()
        );
        assert!(parse_mask("zz").is_err());
        assert!(parse_mask("1,,2").is_err());
        assert!(parse_mask("123456789").is_err());
        assert!(parse_mask("0-3").is_err());
    }

    #[test]
    fn parses_cpulists_and_nohz_full_null() {
        assert_eq!(parse_cpulist("3,0-1\n").unwrap(), vec![0, 1, 3]);
        assert_eq!(parse_cpulist("\n").unwrap(), Vec::<usize>::new());
        assert!(parse_cpulist("x").is_err());
        assert_eq!(
            parse_nohz_full("              (null)\n").unwrap(),
            Vec::<usize>::new()
        );
        assert_eq!(parse_nohz_full("\n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_nohz_full("2-3\n").unwrap(), vec![2, 3]);
        assert_eq!(
            parse_param_cpulist("all", &[0, 1, 2]).unwrap(),
            vec![0, 1, 2]
        );
        assert_eq!(
            parse_param_cpulist("1,3", &[0, 1, 2, 3]).unwrap(),
            vec![1, 3]
        );
        assert_eq!(
            parse_param_cpulist("", &[0, 1]).unwrap(),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn parses_kernel_command_lines() {
        let live = "mitigations=auto,no_guest_host console=ttyS0 quiet rdinit=/process_api -- --addr 0.0.0.0:2024 rcu_nocbs=1";
        let p = parse_cmdline(live);
        assert_eq!(
            p[0],
            (
                "mitigations".to_string(),
                Some("auto,no_guest_host".to_string())
            )
        );
        assert_eq!(p[2], ("quiet".to_string(), None));
        assert_eq!(p.len(), 4, "parameters after -- belong to init: {p:?}");
        assert_eq!(cmdline_param(live, "rcu_nocbs"), None);

        let c = "BOOT_IMAGE=/vmlinuz ro isolcpus=nohz,domain,2-5 nohz_full=2-5 rcu_nocbs  irqaffinity=0-1 \
                 dyndbg=\"file x.c +p\" isolcpus=managed_irq,3-4";
        assert_eq!(cmdline_param(c, "nohz_full").as_deref(), Some("2-5"));
        assert_eq!(cmdline_param(c, "rcu_nocbs").as_deref(), Some(""));
        assert_eq!(cmdline_param(c, "irqaffinity").as_deref(), Some("0-1"));
        assert_eq!(cmdline_param(c, "dyndbg").as_deref(), Some("file x.c +p"));
        assert_eq!(
            cmdline_param(c, "isolcpus").as_deref(),
            Some("managed_irq,3-4"),
            "the last one wins"
        );
        assert_eq!(cmdline_param(c, "nosuch"), None);
        assert_eq!(parse_cmdline("  "), vec![]);
    }

    #[test]
    fn splits_isolcpus_flags() {
        assert_eq!(split_isolcpus("2-5"), (vec![], "2-5".to_string(), true));
        assert_eq!(
            split_isolcpus("nohz,domain,2-5"),
            (
                vec!["nohz".to_string(), "domain".to_string()],
                "2-5".to_string(),
                true
            )
        );
        assert_eq!(
            split_isolcpus("managed_irq,3"),
            (vec!["managed_irq".to_string()], "3".to_string(), false)
        );
        assert_eq!(split_isolcpus("1,3"), (vec![], "1,3".to_string(), true));
    }

    #[test]
    fn reads_status_cgroup_and_mounts() {
        let status =
            "Name:\tcat\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n";
        assert_eq!(status_allowed_list(status), Some("0-1"));
        assert_eq!(status_allowed_list("Name:\tx\n"), None);

        let v1 = "11:pids:/\n6:cpuset:/slurm/job1\n1:name=systemd:/x\n";
        assert_eq!(cgroup_cpuset_path(v1).as_deref(), Some("/slurm/job1"));
        assert_eq!(
            cgroup_cpuset_path("0::/user.slice/a.scope\n").as_deref(),
            Some("/user.slice/a.scope")
        );
        assert_eq!(cgroup_cpuset_path("3:memory:/x\n"), None);

        let mounts = "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n\
                      cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,cpuset 0 0\n";
        assert_eq!(
            cpuset_mount(mounts, &|_| true),
            Some(("/sys/fs/cgroup/cpuset".to_string(), false))
        );
        let v2 = "cgroup2 /sys/fs/my\\040cg cgroup2 rw 0 0\n";
        assert_eq!(
            cpuset_mount(v2, &|d| d == "/sys/fs/my cg"),
            Some(("/sys/fs/my cg".to_string(), true))
        );
        assert_eq!(cpuset_mount(v2, &|_| false), None);
    }

    #[test]
    fn parses_ids() {
        assert_eq!(parse_id("-1\n"), Some(-1));
        assert_eq!(parse_id("8442\n"), Some(8442));
        assert_eq!(parse_id("x"), None);
    }
}
