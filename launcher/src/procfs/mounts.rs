//! `/proc/mounts` (the same lines as `/proc/self/mounts`): the mounted cgroup hierarchies.
//!
//! Owns: the one parser of cgroup mounts, with the octal escapes the kernel writes for a space,
//! tab, newline or backslash in a mount point. Must not: read the hierarchies themselves (v2's
//! `cgroup.controllers` is the caller's, which knows its root).

use crate::fsroot::{FsRoot, ReadError};
use serde::Serialize;

/// The v1 mount options that name a controller (the rest are mount flags or `name=`).
const V1_CONTROLLERS: &[&str] = &[
    "cpuset",
    "cpu",
    "cpuacct",
    "memory",
    "devices",
    "freezer",
    "blkio",
    "pids",
    "net_cls",
    "perf_event",
    "hugetlb",
    "rdma",
    "misc",
];

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CgroupMount {
    /// 1 or 2.
    pub version: u8,
    /// Mount point, its escapes decoded.
    pub path: String,
    /// Controllers: the v1 mount options that name controllers, or v2's `cgroup.controllers`.
    pub controllers: Vec<String>,
}

/// The cgroup hierarchies `/proc/mounts` under `root` lists.
pub fn read(root: &FsRoot) -> Result<Vec<CgroupMount>, ReadError> {
    root.read("/proc/mounts").map(|text| cgroup_mounts(&text))
}

/// Cgroup hierarchies from `/proc/mounts` text; v2 controllers are filled in by the caller.
pub fn cgroup_mounts(mounts: &str) -> Vec<CgroupMount> {
    mounts
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (path, fstype, options) = (f.get(1)?, f.get(2)?, f.get(3).unwrap_or(&""));
            let version = match *fstype {
                "cgroup" => 1,
                "cgroup2" => 2,
                _ => return None,
            };
            let controllers = if version == 1 {
                options
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o))
                    .map(str::to_string)
                    .collect()
            } else {
                Vec::new()
            };
            Some(CgroupMount {
                version,
                path: unescape(path),
                controllers,
            })
        })
        .collect()
}

/// Decodes the octal escapes (`\040` for a space) of a `/proc/mounts` field: the kernel writes
/// them so that white space can separate the fields.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cgroup_hierarchies_from_mounts() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
            cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n\
            cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0\n\
            cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        let m = cgroup_mounts(mounts);
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].version, m[0].controllers.clone()),
            (1, vec!["cpuset".to_string()])
        );
        assert!(m[1].controllers.is_empty());
        assert_eq!(
            (m[2].version, m[2].path.as_str()),
            (2, "/sys/fs/cgroup/unified")
        );
    }

    #[test]
    fn a_mount_point_with_a_space_is_decoded() {
        let m = cgroup_mounts(
            "cgroup2 /sys/fs/my\\040cg cgroup2 rw 0 0\n\
             cgroup /mnt/a\\134b\\011c cgroup rw,cpuset 0 0\n",
        );
        assert_eq!(m[0].path, "/sys/fs/my cg");
        assert_eq!(m[1].path, "/mnt/a\\b\tc");
        // A backslash not followed by three octal digits is kept as it is.
        assert_eq!(unescape("/a\\09x\\"), "/a\\09x\\");
    }
}
