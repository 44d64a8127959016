//! The agent's side of the plugin's socket: a private directory holding it, waiting for a
//! task or the end of the step, and one request answered.
//!
//! Owns: the wire (a request of NUL-separated fields with the task's stderr passed alongside;
//! an answer of `set K=V` and `unset K` lines, then `ok` or `error WHY`), and bounding every
//! read, so that a task that never finishes its request cannot stall the node. Must not:
//! decide what the answer holds ([`super::task`] does).

use super::task::Request;
use crate::error::Result;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

/// The longest request the agent reads (the plugin's is under 12 KiB).
const MAX_REQUEST: usize = 64 << 10;

/// How long a task may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The socket tasks connect to, in a directory only this user may enter; both removed on drop.
pub(super) struct Listener {
    dir: PathBuf,
    socket: UnixListener,
}

impl Listener {
    /// A fresh directory `goset-step.<pid>.<random>` (mode 0700) under the temporary
    /// directory, with the socket `sock` in it.
    pub fn open() -> std::io::Result<Listener> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = None;
        for attempt in 0..16u64 {
            let mut r = [0u8; 8];
            // SAFETY: getrandom writes at most 8 bytes into r.
            unsafe { libc::getrandom(r.as_mut_ptr().cast(), 8, 0) };
            let name = format!(
                "goset-step.{}.{:x}",
                std::process::id(),
                u64::from_ne_bytes(r) ^ attempt
            );
            let dir = base.join(name);
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let socket = UnixListener::bind(dir.join("sock"))?;
                    socket.set_nonblocking(true)?;
                    return Ok(Listener { dir, socket });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EEXIST)))
    }

    /// The socket's path, for the plugin.
    pub fn path(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// Waits up to `timeout` for a task to connect or `life` (the agent's stdin, whose other
    /// end the plugin holds) to close; returns whether the step is over.
    pub fn wait(&self, life: i32, timeout: Duration) -> bool {
        let mut fds = [
            libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: life,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: fds is a live array of two pollfd.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) } <= 0 {
            return false;
        }
        // The plugin writes nothing: readable or hung up, stdin is at its end.
        fds[1].revents != 0
    }

    /// A task waiting to be served, if any.
    pub fn accept(&self) -> Option<UnixStream> {
        self.socket.accept().ok().map(|(s, _)| s)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Reads the request on `conn` and answers it with `start`'s outcome; returns what `start`
/// made and the task's stderr.
pub(super) fn answer<T>(
    mut conn: UnixStream,
    start: impl FnOnce(Request) -> Result<(T, Vec<String>)>,
) -> (Option<T>, Option<OwnedFd>) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = conn.set_write_timeout(Some(REQUEST_TIMEOUT));
    let (bytes, stderr) = match read_request(&conn) {
        Ok(r) => r,
        Err(e) => {
            let _ = conn.write_all(format!("error cannot read the request: {e}\n").as_bytes());
            return (None, None);
        }
    };
    let peer = peer_pid(&conn);
    let outcome = Request::parse(&bytes)
        .and_then(|req| match peer {
            // The plugin asks from inside the task: a request for another process is refused.
            Some(pid) if pid == req.pid => Ok(req),
            _ => Err(format!("a request for pid {} from pid {peer:?}", req.pid)),
        })
        .and_then(|req| start(req).map_err(|e| e.to_string()));
    match outcome {
        Ok((made, lines)) => {
            let mut text = lines.join("\n");
            text.push_str(if lines.is_empty() { "ok\n" } else { "\nok\n" });
            let _ = conn.write_all(text.as_bytes());
            (Some(made), stderr)
        }
        Err(why) => {
            let _ = conn.write_all(format!("error {}\n", why.replace('\n', " ")).as_bytes());
            (None, None)
        }
    }
}

/// The pid of the process at the other end of `conn` (`SO_PEERCRED`).
fn peer_pid(conn: &UnixStream) -> Option<i32> {
    // SAFETY: a zeroed ucred is valid; getsockopt fills at most its size.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len point to live values of the sizes stated.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred.pid)
}

/// The request's bytes up to the plugin's end of writing, and the descriptor sent with them.
fn read_request(conn: &UnixStream) -> std::io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut bytes = Vec::new();
    let mut fd = None;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let (n, got) = recv_with_fd(conn.as_raw_fd(), &mut buf)?;
        if got.is_some() && fd.is_none() {
            fd = got;
        }
        if n == 0 {
            return Ok((bytes, fd));
        }
        bytes.extend_from_slice(&buf[..n]);
        if bytes.len() > MAX_REQUEST {
            return Err(std::io::Error::other(format!("over {MAX_REQUEST} bytes")));
        }
    }
}

/// One `recvmsg`, with a descriptor passed alongside (close-on-exec) if there is one.
fn recv_with_fd(sock: i32, buf: &mut [u8]) -> std::io::Result<(usize, Option<OwnedFd>)> {
    // Room for one descriptor's control message, aligned as cmsghdr wants.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: msg points to live buffers of the sizes it states.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fd = None;
    // SAFETY: the CMSG macros walk the control buffer recvmsg filled, within msg_controllen.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(&msg);
        while !cm.is_null() {
            if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*cm).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(cm) as *const i32;
                for i in 0..count {
                    let got = OwnedFd::from_raw_fd(data.add(i).read_unaligned());
                    if fd.is_none() {
                        fd = Some(got);
                    }
                }
            }
            cm = libc::CMSG_NXTHDR(&msg, cm);
        }
    }
    Ok((n as usize, fd))
}

/// Whether `path` is a socket this agent made (for tests).
#[cfg(test)]
fn is_socket(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends a request for `pid` and returns the answer it gets from one [`answer`].
    fn ask(listener: &Listener, pid: u32) -> (Option<u32>, String) {
        let path = listener.path();
        let client = std::thread::spawn(move || {
            let mut s = UnixStream::connect(&path).unwrap();
            let req = format!("task\x000\x005\x00{pid}\x00n1\x000-1\x00/\x00\x00probe\x00");
            s.write_all(req.as_bytes()).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut answer = String::new();
            std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
            answer
        });
        let (life, _plugin) = std::io::pipe().unwrap();
        assert!(!listener.wait(life.as_raw_fd(), Duration::from_secs(10)));
        let conn = (0..1000)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                listener.accept()
            })
            .unwrap();
        let (made, _) = answer(conn, |req| Ok((req.global, vec!["set A=1".into()])));
        (made, client.join().unwrap())
    }

    #[test]
    fn a_tasks_own_request_is_answered_another_pids_refused_and_all_removed() {
        let listener = Listener::open().unwrap();
        assert!(is_socket(&listener.path()));
        assert_eq!(
            ask(&listener, std::process::id()),
            (Some(5), "set A=1\nok\n".to_string())
        );
        let (made, said) = ask(&listener, 1);
        assert_eq!(made, None);
        assert!(
            said.starts_with("error a request for pid 1 from pid Some("),
            "{said}"
        );
        let dir = listener.path().parent().unwrap().to_path_buf();
        drop(listener);
        assert!(!dir.exists());
    }
}
