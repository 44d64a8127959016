//! Run directories on a temporary root: creating, keeping, sweeping and refusing.

use super::*;
use std::os::unix::ffi::OsStrExt;

#[test]
fn root_sweeps_a_dead_sudo_runs_directory_given_to_its_user() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: chown to another user needs root (CI runs as root)");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    // pid 1 did not start at tick 1: a dead launcher's, given to nobody (a sudo run's).
    let dead = base.path().join("1-1");
    std::fs::create_dir(&dead).unwrap();
    std::fs::write(dead.join("plan"), "").unwrap();
    std::os::unix::fs::chown(&dead, Some(65534), Some(65534)).unwrap();
    // A live launcher's stays, whoever owns it; so does a link.
    let live = base.path().join(own_name().unwrap());
    std::fs::create_dir(&live).unwrap();
    std::os::unix::fs::chown(&live, Some(65534), Some(65534)).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), base.path().join("2-1")).unwrap();
    sweep(base.path());
    assert!(!dead.exists(), "swept");
    assert!(live.exists() && elsewhere.path().exists());
}

#[test]
fn run_directory_names_are_pid_and_start_time_in_one_spelling() {
    assert_eq!(parse_name("42-1234"), Some((42, 1234)));
    for odd in [
        "42", "042-1", "42-01", "+42-1", "42-+1", "0-5", "42-1-2", "a-1", "42-", "-1", "",
    ] {
        assert_eq!(parse_name(odd), None, "{odd}");
    }
    let own = own_name().unwrap();
    let (pid, start) = parse_name(&own).unwrap();
    assert_eq!(pid, std::process::id());
    assert_eq!(
        crate::procfs::pid_stat::start_ticks(&FsRoot::default(), pid),
        Some(start),
        "this process is its own live launcher"
    );
}

#[test]
fn platform_names_cover_glibcs_intel_names_on_x86_64() {
    assert_eq!(
        platform_names(Some(b"x86_64")),
        [&b"x86_64"[..], b"haswell", b"xeon_phi"]
    );
    assert_eq!(platform_names(Some(b"aarch64")), [&b"aarch64"[..]]);
    for bad in [&b""[..], b".", b"..", b"a/b"] {
        assert!(platform_names(Some(bad)).is_empty(), "{bad:?}");
    }
    assert!(platform_names(None).is_empty());
}

#[test]
fn preload_names_the_platform_links_unless_the_path_would_be_misread() {
    let shim = Path::new("/opt/goset/libgoset.so");
    let entry = |dir: &str, links| preload_entry(Path::new(dir), shim, links);
    assert_eq!(
        entry("/run/user/1000/goset/42", true),
        "/run/user/1000/goset/42/lib/$PLATFORM/libgoset.so"
    );
    assert_eq!(entry("/run/user/1000/goset/42", false), shim);
    for odd in ["/tmp/a b/42", "/tmp/a:b/42", "/tmp/$HOME/42"] {
        assert_eq!(entry(odd, true), shim, "{odd}");
    }
}

#[test]
fn links_point_at_the_shim_and_go_with_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    let shim = tmp.path().join("libgoset.so");
    std::fs::write(&shim, b"x").unwrap();
    link_shim(&dir, &shim, &[b"x86_64", b"haswell"]).unwrap();
    for name in ["x86_64", "haswell"] {
        let sub = dir.join("lib").join(name);
        assert_eq!(std::fs::read_link(sub.join("libgoset.so")).unwrap(), shim);
        assert!(!sub.join(PROBE).exists(), "the probe is removed");
    }
    assert!(!link_shim(&dir, &shim, &[]).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(shim.is_file(), "removing the links keeps the shim");
}

#[test]
fn the_loader_expands_platform_to_one_of_this_machines_names() {
    let tmp = tempfile::tempdir().unwrap();
    let platform = at_platform();
    let names = platform_names(platform.as_deref());
    let lib = tmp.path().join("lib");
    for name in &names {
        std::fs::create_dir_all(lib.join(std::ffi::OsStr::from_bytes(name))).unwrap();
    }
    assert!(loader_expands(&lib, &names), "{names:?}");
    // The probe fails when no link has the loader's name. Another directory: the loader
    // keeps a name it once resolved as another name of the object.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(other.join("no-such-platform")).unwrap();
    assert!(!loader_expands(&other, &[b"no-such-platform"]));
}
