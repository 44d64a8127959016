//! The registry of bookings: live and dead launchers, forged files, links, the lock, Slurm steps.

use super::*;

fn booking(pid: u32, start: u64, cpus: &[usize]) -> Booking {
    Booking {
        pid,
        start,
        uid: 0,
        command: "bench".into(),
        slurm: None,
        cpus: cpus.to_vec(),
        housekeeper_cpu: 0,
    }
}

/// A process named goset-run (a copy of sleep), as a live launcher looks in /proc.
fn fake_launcher(dir: &Path) -> std::process::Child {
    let exe = dir.join("goset-run");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let child = std::process::Command::new(&exe).arg("30").spawn().unwrap();
    // The copy's own name shows once it has exec'd.
    let stat = format!("/proc/{}/stat", child.id());
    while !std::fs::read_to_string(&stat)
        .unwrap_or_default()
        .contains("(goset-run)")
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

#[test]
fn a_live_launchers_booking_is_seen_and_a_dead_ones_swept() {
    let dir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let reg = Registry::at(dir.path()).unwrap();
    // Another live launcher (a child: not one this process runs under) with its own start
    // time is live; with another start time it is a dead launcher whose pid was reused.
    let mut other = fake_launcher(bin.path());
    let pid = other.id();
    let start =
        crate::procfs::pid_stat::start_ticks(&crate::fsroot::FsRoot::default(), pid).unwrap();
    let live = reg.book(&booking(pid, start, &[2, 3])).unwrap();
    std::mem::forget(reg.book(&booking(pid, start + 1, &[4])).unwrap());
    std::fs::write(dir.path().join("junk.booking"), "x").unwrap();
    let stale_file = dir.path().join(format!("{pid}-{}.booking", start + 1));
    // Half-written files: a dead launcher's (killed before its rename) and a live one's.
    let stale_tmp = dir
        .path()
        .join(format!(".{pid}-{}.booking.1f.tmp", start + 1));
    let live_tmp = dir.path().join(format!(".{pid}-{start}.booking.2e.tmp"));
    std::fs::write(&stale_tmp, "{").unwrap();
    std::fs::write(&live_tmp, "{").unwrap();
    let before_sweep = reg.live(false).len();
    let exists_before = stale_file.exists();
    let held = reg.lock(None).map_err(|_| ()).unwrap();
    let seen = reg.live(true);
    drop(held);
    drop(live);
    let after = reg.live(true);
    let _ = other.kill();
    let _ = other.wait();
    assert_eq!((before_sweep, exists_before), (1, true));
    assert_eq!(seen, vec![booking(pid, start, &[2, 3])]);
    assert!(!stale_file.exists(), "swept");
    assert!(
        !stale_tmp.exists(),
        "a dead launcher's half-written file swept"
    );
    assert!(live_tmp.exists(), "a live launcher's kept");
    assert_eq!(booked_cpus(&seen), vec![2, 3]);
    assert!(after.is_empty(), "removed when the run ends");
}

#[test]
fn a_forged_booking_does_not_count_and_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let reg = Registry::at(dir.path()).unwrap();
    let mut launcher = fake_launcher(bin.path());
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let at = |pid: u32| {
        (
            pid,
            crate::procfs::pid_stat::start_ticks(&crate::fsroot::FsRoot::default(), pid).unwrap(),
        )
    };
    // A live process that is no launcher, and a file that claims a uid it is not owned by.
    let (pid, start) = at(sleeper.id());
    let not_a_launcher = reg.book(&booking(pid, start, &[1])).unwrap();
    let (pid, start) = at(launcher.id());
    let mut forged = booking(pid, start, &[2]);
    forged.uid = euid() + 1;
    let path = dir.path().join(format!("{pid}-{start}.booking"));
    std::fs::write(&path, serde_json::to_vec(&forged).unwrap()).unwrap();
    let seen = reg.live(true);
    let gone = (
        !dir.path()
            .join(format!(
                "{}-{}.booking",
                at(sleeper.id()).0,
                at(sleeper.id()).1
            ))
            .exists(),
        !path.exists(),
    );
    drop(not_a_launcher);
    for c in [&mut launcher, &mut sleeper] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(gone, (true, true), "both swept");
}

#[test]
fn a_link_planted_at_a_temporary_name_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::at(dir.path()).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let b = booking(std::process::id(), 7, &[1]);
    // The names a booking's temporary file used to have, and a few more guesses.
    for name in [
        ".{p}-7.booking.tmp",
        ".{p}-7.booking.0.tmp",
        ".{p}-7.booking.1.tmp",
    ] {
        let name = name.replace("{p}", &b.pid.to_string());
        std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
    }
    let booked = reg.book(&b).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let written = std::fs::read(dir.path().join(format!("{}-7.booking", b.pid))).unwrap();
    assert_eq!(serde_json::from_slice::<Booking>(&written).unwrap(), b);
    drop(booked);
}

#[test]
fn the_lock_is_the_owners_alone_and_a_held_lock_names_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    // A lock file left world-readable (anyone could open it and hold it) is narrowed.
    let lock = dir.path().join("lock");
    std::fs::write(&lock, "").unwrap();
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
    let first = Registry::at(dir.path()).unwrap();
    let mode = std::fs::metadata(&lock).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    // Held by another open of the file: a bounded wait, then the holder is named.
    let second = Registry::at(dir.path()).unwrap();
    let held = first.lock(None).map_err(|_| ()).unwrap();
    let waited = second.lock(Some(Instant::now() + Duration::from_millis(100)));
    drop(held);
    match waited {
        Err(LockError::Held(who)) => {
            assert!(
                who.contains(&format!("pid {}", std::process::id())),
                "{who}"
            )
        }
        other => panic!("expected the lock to be held: {:?}", other.map(|_| ())),
    }
    assert!(second.lock(None).is_ok());
}

#[test]
fn an_unsafe_registry_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Registry::at(&open).unwrap_err();
    assert!(e.to_string().contains("sticky"), "{e}");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(Registry::at(&open).is_ok());
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&open, &link).unwrap();
    assert!(Registry::at(&link).is_err(), "a link is not followed");
}

#[test]
fn the_holder_is_read_from_proc_locks() {
    let text = "1: POSIX  ADVISORY  WRITE 99 00:19:11 0 EOF\n\
                2: FLOCK  ADVISORY  WRITE 1234 00:19:5678 0 EOF\n";
    assert_eq!(holder_of(text, 5678), Some(1234));
    assert_eq!(
        holder_of(text, 11),
        None,
        "a POSIX lock is not the registry's"
    );
    assert_eq!(holder_of(text, 1), None);
}

#[test]
fn the_launchers_this_process_runs_under_are_its_ancestry() {
    // SAFETY: getppid cannot fail.
    let parent = unsafe { libc::getppid() } as u32;
    let mine = ancestry();
    assert_eq!(mine[0], std::process::id());
    assert!(mine.contains(&parent), "{mine:?}");
}

#[test]
fn slurm_steps_are_named_from_sruns_variables() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
    };
    let step = slurm_step(env(&[
        ("SLURM_JOB_ID", "42"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "1"),
    ]));
    assert_eq!(step.as_deref(), Some("42.0 task 1"));
    assert_eq!(slurm_step(env(&[])), None);
}
