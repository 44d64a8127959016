//! A process's threads as `/proc` shows them: its task directory listed, or the tids born
//! since the last poll looked up one by one.
//!
//! Owns: the directory reads that find threads, and the last pid the kernel handed out. Must
//! not: read a thread's own files (see [`super::threads`]) or keep any state between polls.

use crate::fsroot::FsRoot;

/// The threads of a process, as `/proc/<pid>/task` lists them.
#[derive(Debug, PartialEq, Eq)]
pub enum Listing {
    /// Its tids, sorted.
    Tids(Vec<i32>),
    /// The process is gone (reaped).
    Gone,
    /// The directory could not be read, though the process may live (out of descriptors).
    Unreadable(String),
}

/// The last pid the kernel handed out in the launcher's pid namespace.
pub fn last_pid(root: &FsRoot) -> Option<i32> {
    std::fs::read_to_string(root.path("/proc/sys/kernel/ns_last_pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The threads of process `pid` among tids `born` (those handed out since the last poll):
/// a lookup each, where a listing costs one entry per thread the process has.
pub fn probe_threads(root: &FsRoot, pid: i32, born: std::ops::RangeInclusive<i32>) -> Vec<i32> {
    born.filter(|tid| {
        std::fs::symlink_metadata(root.path(&format!("/proc/{pid}/task/{tid}"))).is_ok()
    })
    .collect()
}

/// The threads of process `pid`, its task directory listed.
pub fn list_threads(root: &FsRoot, pid: i32) -> Listing {
    let dir = match std::fs::read_dir(root.path(&format!("/proc/{pid}/task"))) {
        Ok(d) => d,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
            return Listing::Gone
        }
        Err(e) => return Listing::Unreadable(e.to_string()),
    };
    let mut tids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    // A process being reaped lists nothing: gone as well.
    if tids.is_empty() {
        return Listing::Gone;
    }
    Listing::Tids(tids)
}
