//! `/proc/<pid>/environ`: the environment a process was started with (its `execve`'s; a later
//! `setenv` does not show).

use crate::bounded::read_regular;
use crate::fsroot::FsRoot;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The most of an environment read: a larger one is not looked at.
const MAX_BYTES: u64 = 256 * 1024;

/// Whether process `pid`'s environment puts the shim (a file named
/// [`goset_plan::vars::SHIM_FILE`]) in `LD_PRELOAD`, whose entries are separated by colons or
/// spaces. `false` when the environment cannot be read (another user's, gone, too long).
pub fn preloads_shim(root: &FsRoot, pid: i32) -> bool {
    let Ok(env) = read_regular(&root.path(&format!("/proc/{pid}/environ")), MAX_BYTES) else {
        return false;
    };
    env.split(|&b| b == 0)
        .filter_map(|var| var.strip_prefix(b"LD_PRELOAD="))
        .flat_map(|list| list.split(|&b| b == b':' || b == b' '))
        .any(|entry| {
            let name = Path::new(OsStr::from_bytes(entry)).file_name();
            name.is_some_and(|n| n.as_bytes() == goset_plan::vars::SHIM_FILE.as_bytes())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_is_found_among_preloads_by_its_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let put = |pid: i32, env: &[u8]| {
            let d = dir.path().join(format!("proc/{pid}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("environ"), env).unwrap();
        };
        put(
            1,
            b"A=1\0LD_PRELOAD=/x/libcount.so /run/goset/7/lib/$PLATFORM/libgoset.so\0",
        );
        put(2, b"LD_PRELOAD=/x/libgoset.so.bak:/y/notlibgoset.so\0");
        put(3, b"GOSET_LIB=/x/libgoset.so\0");
        let root = FsRoot::new(dir.path());
        assert!(preloads_shim(&root, 1));
        assert!(!preloads_shim(&root, 2));
        assert!(!preloads_shim(&root, 3));
        assert!(!preloads_shim(&root, 4), "gone");
    }
}
