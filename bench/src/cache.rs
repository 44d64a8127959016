//! Cache sizes from sysfs (`/sys/devices/system/cpu/cpu0/cache/index*/`), which size the
//! built-in benchmarks' working sets.
//!
//! Owns: reading the cache files under a root. Must not: decide sizes.

use goset::fsroot::FsRoot;

/// The cache sizes of CPU 0, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caches {
    /// The level-2 data or unified cache, if the kernel lists one.
    pub l2: Option<u64>,
    /// The last-level (highest level) data or unified cache, if any.
    pub last: Option<u64>,
}

/// Parses a sysfs cache `size` (`512K`, `32768K`, `1M`, `64`).
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, scale) = match t.as_bytes().last()? {
        b'K' => (&t[..t.len() - 1], 1 << 10),
        b'M' => (&t[..t.len() - 1], 1 << 20),
        b'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.parse::<u64>().ok().map(|n| n * scale)
}

/// CPU 0's caches under `root`; `None` fields where sysfs has nothing (containers, some VMs).
pub fn read(root: &FsRoot) -> Caches {
    let mut l2 = None;
    let mut last: Option<(u32, u64)> = None;
    for index in 0..16 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let Some(kind) = root.read_opt(&format!("{dir}/type")) else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let level = root.read_opt(&format!("{dir}/level"));
        let level: Option<u32> = level.and_then(|l| l.trim().parse().ok());
        let size = root
            .read_opt(&format!("{dir}/size"))
            .and_then(|s| parse_size(&s));
        let (Some(level), Some(size)) = (level, size) else {
            continue;
        };
        if level == 2 {
            l2 = Some(size);
        }
        if !matches!(last, Some((l, _)) if l >= level) {
            last = Some((level, size));
        }
    }
    Caches {
        l2,
        last: last.map(|(_, s)| s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_from_a_sysfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        let put = |index: u32, kind: &str, level: &str, size: &str| {
            let d = dir
                .path()
                .join(format!("sys/devices/system/cpu/cpu0/cache/index{index}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
        };
        put(0, "Data", "1", "32K");
        put(1, "Instruction", "1", "32K");
        put(2, "Unified", "2", "512K");
        put(3, "Unified", "3", "32768K");
        let c = read(&FsRoot::new(dir.path()));
        assert_eq!(c.l2, Some(512 << 10));
        assert_eq!(c.last, Some(32 << 20));
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            read(&FsRoot::new(empty.path())),
            Caches {
                l2: None,
                last: None
            }
        );
    }
}
