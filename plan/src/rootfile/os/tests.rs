use super::super::walk::{open_in, split, walk, Calls, Refusal};
use super::super::Owned;
use super::Libc;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A fresh directory of this test's, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("goset-walk-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(dir)
    }

    /// A directory in it with `mode`.
    fn dir(&self, name: &str, mode: u32) -> PathBuf {
        let d = self.0.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn walked(path: &Path, as_root: bool) -> Result<Owned, Refusal> {
    let dir = walk(&Libc, path.as_os_str().as_bytes(), as_root, None)?;
    Libc.close(dir.fd);
    Ok(dir.owned)
}

#[test]
fn a_path_splits_into_its_directory_and_its_name() {
    assert_eq!(split(b"log"), (&b"."[..], &b"log"[..]));
    assert_eq!(split(b"/log"), (&b"/"[..], &b"log"[..]));
    assert_eq!(split(b"/tmp/x/log"), (&b"/tmp/x"[..], &b"log"[..]));
    assert_eq!(split(b"a/.."), (&b"a"[..], &b""[..]));
    assert_eq!(split(b"a/"), (&b"a"[..], &b""[..]));
}

#[test]
fn a_link_planted_as_a_directory_where_others_write_is_not_followed_by_root() {
    let s = Scratch::new("link");
    let shared = s.dir("shared", 0o1777);
    let target = s.dir("target", 0o700);
    std::os::unix::fs::symlink(&target, shared.join("l")).unwrap();
    assert_eq!(walked(&shared.join("l"), true), Err(Refusal::Link));
    assert_eq!(walked(&shared.join("l/."), true), Err(Refusal::Link));
    // Another user follows links as the kernel does; root does in its own directories.
    assert!(walked(&shared.join("l"), false).is_ok());
    std::os::unix::fs::symlink(&target, s.0.join("own")).unwrap();
    let trusted = walked(&s.0.join("own"), true);
    // The scratch directory is root's 0755 only when the test runs as root.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(trusted.unwrap().mode & 0o7777, 0o700);
    } else {
        assert_eq!(trusted, Err(Refusal::Link));
    }
}

#[test]
fn a_directory_others_write_on_the_way_must_be_sticky() {
    let s = Scratch::new("sticky");
    let open = s.dir("open", 0o777);
    std::fs::create_dir(open.join("sub")).unwrap();
    assert_eq!(walked(&open.join("sub"), true), Err(Refusal::Swappable));
    assert!(walked(&open.join("sub"), false).is_ok());
}

#[test]
fn a_file_planted_where_others_write_is_refused_and_a_missing_one_made() {
    let s = Scratch::new("file");
    let shared = s.dir("shared", 0o1777);
    let victim = s.0.join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    std::os::unix::fs::symlink(&victim, shared.join("link")).unwrap();
    std::fs::hard_link(&victim, shared.join("hard")).unwrap();
    let dir = walk(&Libc, shared.as_os_str().as_bytes(), true, None).unwrap();
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_NONBLOCK;
    assert_eq!(
        open_in(&Libc, &dir, b"link", flags, 0o600),
        Err(Refusal::Link)
    );
    assert_eq!(
        open_in(&Libc, &dir, b"hard", flags, 0o600),
        Err(Refusal::NotTheirs)
    );
    let fd = open_in(&Libc, &dir, b"new", flags, 0o600).unwrap();
    Libc.close(fd);
    Libc.close(dir.fd);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    assert!(shared.join("new").is_file());
}

#[test]
fn missing_directories_are_made_with_the_mode_asked_whatever_the_umask() {
    let s = Scratch::new("make");
    let deep = s.0.join("a/b/c");
    // SAFETY: umask cannot fail; the test's threads make no files meanwhile with theirs.
    let old = unsafe { libc::umask(0o077) };
    let dir = walk(&Libc, deep.as_os_str().as_bytes(), true, Some(0o755));
    unsafe { libc::umask(old) };
    let dir = dir.unwrap();
    Libc.close(dir.fd);
    for d in ["a", "a/b", "a/b/c"] {
        let mode = std::fs::metadata(s.0.join(d)).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{d}");
    }
}
