//! A made-up `/proc` under a temporary directory, for the walk's and the poll's tests: each
//! thread's `stat`, `schedstat`, `sched` and `children`, and `ns_last_pid`.

use crate::fsroot::FsRoot;
use std::path::PathBuf;

/// One thread of the made-up `/proc`, as its files say.
#[derive(Clone, Copy)]
pub struct Thread {
    /// Its process.
    pub pid: i32,
    /// Its thread id.
    pub tid: i32,
    /// Its process's parent.
    pub ppid: i32,
    /// Field 20 of its `stat`: its process's thread count.
    pub count: usize,
    /// Field 22: its process's start time, in ticks after boot.
    pub start: u64,
    /// The run time in `schedstat`: a thread whose run time grows ran since the last poll.
    pub runtime_ns: u64,
}

/// A `/proc` under a temporary directory.
pub struct FakeProc {
    dir: tempfile::TempDir,
}

impl FakeProc {
    /// An empty one.
    pub fn new() -> FakeProc {
        FakeProc {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The root to read it under.
    pub fn root(&self) -> FsRoot {
        FsRoot::new(self.dir.path())
    }

    /// The real directory of thread `tid` of process `pid`.
    pub fn task_dir(&self, pid: i32, tid: i32) -> PathBuf {
        self.dir.path().join(format!("proc/{pid}/task/{tid}"))
    }

    /// Writes thread `t`'s files in place: the walk keeps them open and reads them again.
    pub fn put(&self, t: Thread) {
        let dir = self.task_dir(t.pid, t.tid);
        std::fs::create_dir_all(&dir).unwrap();
        // Fields 3 to 52, as proc(5) numbers them: field n is fields[n - 3].
        let mut fields = vec!["0".to_string(); 50];
        fields[0] = "S".into();
        fields[4 - 3] = t.ppid.to_string();
        fields[20 - 3] = t.count.to_string();
        fields[22 - 3] = t.start.to_string();
        let stat = format!("{} (t{}) {}\n", t.tid, t.tid, fields.join(" "));
        std::fs::write(dir.join("stat"), stat).unwrap();
        let slices = t.runtime_ns / 1_000_000;
        std::fs::write(
            dir.join("schedstat"),
            format!("{} 0 {slices}\n", t.runtime_ns),
        )
        .unwrap();
        std::fs::write(dir.join("sched"), "nr_switches : 0\n").unwrap();
        if !dir.join("children").exists() {
            std::fs::write(dir.join("children"), "").unwrap();
        }
    }

    /// Thread `t`'s `children` file.
    pub fn children(&self, t: Thread, pids: &[i32]) {
        let text: Vec<String> = pids.iter().map(|p| format!("{p} ")).collect();
        std::fs::write(self.task_dir(t.pid, t.tid).join("children"), text.concat()).unwrap();
    }

    /// Thread `tid` of process `pid` ends: its files, which the walk keeps open, read as empty
    /// (as a gone thread's do), and its directory goes.
    pub fn end(&self, pid: i32, tid: i32) {
        let dir = self.task_dir(pid, tid);
        for f in ["stat", "schedstat", "sched", "children"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Process `pid`, whose threads have all ended, is reaped.
    pub fn reap(&self, pid: i32) {
        std::fs::remove_dir_all(self.dir.path().join(format!("proc/{pid}"))).unwrap();
    }

    /// The last pid the kernel handed out.
    pub fn last_pid(&self, pid: i32) {
        let dir = self.dir.path().join("proc/sys/kernel");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ns_last_pid"), format!("{pid}\n")).unwrap();
    }
}

/// `count` threads of process `pid`, tids `pid`, `pid + 1`, ...: none has run.
pub fn process(pid: i32, ppid: i32, count: usize) -> Vec<Thread> {
    (0..count as i32)
        .map(|i| Thread {
            pid,
            tid: pid + i,
            ppid,
            count,
            start: 1000,
            runtime_ns: 0,
        })
        .collect()
}
