//! Unit tests of the log tail.

use super::*;
use goset_plan::log::{self as contract, Event, PlacedBy, Role};
use std::io::Write;

/// A record as the shim's log.rs formats it.
fn shim_line(tid: i32, comm: &str, exe: &str, event: &str, cpu: &str) -> String {
    format!(
        "{{\"time\":1.500000,\"pid\":10,\"tid\":{tid},\"comm\":\"{comm}\",\"exe\":\"{exe}\",\
         \"event\":\"{event}\",\"call\":\"pthread_create\",\"requested\":\"0-3\",\"cpu\":{cpu},\
         \"slot\":null,\"role\":\"worker\",\"shared\":false,\"roams\":false,\"placed_by\":\"shim\"}}"
    )
}

/// A line as the shim writes it: thread 11 of process 10 (`/bin/a.out`), asked for `0-3,8`.
fn written_line(event: Event, role: Role) -> Vec<u8> {
    use goset_plan::buf::Buf;
    let requested = goset_plan::cpulist::parse_set(b"0-3,8").unwrap();
    let shim = contract::Record {
        time: 1796276125.25,
        pid: 10,
        tid: 11,
        comm: b"w \"1\"",
        event,
        call: "pthread_create",
        requested: Some(&requested),
        cpu: Some(2),
        slot: None,
        role,
        shared: true,
        roams: false,
    };
    let mut buf = Buf::<640>::new();
    let at = contract::format(&mut buf, &shim, None).unwrap();
    let (head, tail) = buf.as_bytes().split_at(at);
    [head, b"/bin/a.out", tail].concat()
}

/// The shim's own writer (the contract's `format`), its line read back by the launcher's
/// reader (split by [`placement_log::Lines`], parsed, and scanned by the tail) into the same
/// fields, for every event and role the contract names.
#[test]
fn the_shims_writer_and_the_launchers_reader_agree() {
    for event in Event::ALL {
        for role in Role::ALL {
            let line = written_line(event, role);
            let mut read = Vec::new();
            let mut lines = placement_log::Lines::default();
            lines.feed(&line, &mut |r| read.push(r));
            assert_eq!((read.len(), lines.bad_lines), (1, 0), "{line:?}");
            let r = &read[0];
            assert_eq!(
                (r.time, r.pid, r.tid, r.comm.as_str(), r.exe.as_str()),
                (1796276125.25, 10, 11, "w \"1\"", "/bin/a.out")
            );
            assert_eq!(r.event, event);
            assert!(r.is(event));
            assert_eq!(r.role, Some(role));
            assert_eq!(r.placed_by, Some(PlacedBy::Shim));
            assert!(!r.by_housekeeper());
            assert_eq!(
                (r.call.as_str(), r.requested.as_deref(), r.cpu, r.slot),
                ("pthread_create", Some("0-3,8"), Some(2), None)
            );
            assert_eq!((r.shared, r.roams), (true, false));
            let scanned = scan_shim_line(line.strip_suffix(b"\n").unwrap());
            let parsed = Brief {
                pid: r.pid,
                tid: r.tid,
                exe: &r.exe,
                exit: r.is(Event::Exit),
                cpu: r.cpu,
                slot: r.slot,
                roams: r.roams,
                launcher: r.role == Some(Role::Launcher),
            };
            assert_eq!(scanned, Some(parsed));
        }
    }
}

/// The housekeeper's records are the launcher's own, written as the report reads them, and
/// the scanner of the shim's lines passes them by.
#[test]
fn the_housekeepers_records_read_back_as_written() {
    let mut placer = placement_log::Record {
        time: 2.0,
        pid: 10,
        tid: 12,
        comm: String::new(),
        exe: String::new(),
        event: Event::Place,
        call: "sched_setaffinity".into(),
        requested: None,
        cpu: Some(1),
        slot: Some(0),
        role: Some(Role::Worker),
        shared: false,
        roams: false,
        placed_by: Some(PlacedBy::Housekeeper),
        from_cpu: None,
        reason: None,
        local_rank: None,
        rank_var: None,
        gpu: None,
    };
    for event in Event::ALL {
        placer.event = event;
        let line = serde_json::to_string(&placer).unwrap();
        let r = placement_log::parse_line(line.as_bytes()).unwrap();
        assert!(r.is(event) && r.by_housekeeper(), "{line}");
        assert_eq!(r, placer);
        assert_eq!(scan_shim_line(line.as_bytes()), None, "{line}");
    }
}

#[test]
fn past_the_kept_part_the_log_is_freed_once_read() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("log");
    let mut f = std::fs::File::create(&path).unwrap();
    let mut tail = LogTail::new(path.clone());
    tail.free_after(1 << 20);
    // About 4 MiB of records, a poll after each 512 KiB, as a churning task writes them.
    let mut tid = 100;
    while f.metadata().unwrap().len() < 4 << 20 {
        let mut chunk = String::new();
        while chunk.len() < 512 << 10 {
            chunk.push_str(&shim_line(tid, "w", "/x", "create", "1"));
            chunk.push('\n');
            tid += 1;
        }
        f.write_all(chunk.as_bytes()).unwrap();
        tail.poll();
    }
    tail.poll();
    let meta = std::fs::metadata(&path).unwrap();
    let held = meta.blocks() * 512;
    assert!(
        held < meta.len() / 2,
        "{held} bytes held of {}: the part read past 1 MiB was not freed",
        meta.len()
    );
    // Every record was read (the housekeeper's view stays whole), and the report says so.
    assert!(tail.shim.contains_key(&(tid - 1)));
    assert!(tail.freed_records > 0);
    let why = &tail.errors()[0].reason;
    assert!(why.contains("read and freed"), "{why}");
    // A log the user keeps is never freed.
    let kept = dir.path().join("kept");
    std::fs::copy(&path, &kept).unwrap();
    let mut whole = LogTail::new(kept.clone());
    whole.poll();
    assert_eq!(whole.freed_records, 0);
}

#[test]
fn the_shims_lines_are_scanned_as_a_json_parser_reads_them() {
    let cases = [
        shim_line(11, "a", "/bin/a.out", "create", "2"),
        shim_line(
            12,
            "my \\\"app\\\",\\\"tid\\\":9",
            "/bin/a.out",
            "exit",
            "null",
        ),
        shim_line(13, "back\\\\", "/x", "set", "0"),
        shim_line(14, "a", "/x", "exit", "1").replace("1.500000", "1796276125.000001"),
    ];
    for line in &cases {
        let scanned = scan_shim_line(line.as_bytes()).unwrap_or_else(|| panic!("{line}"));
        let r = placement_log::parse_line(line.as_bytes()).expect("valid JSON");
        let parsed = Brief {
            pid: r.pid,
            tid: r.tid,
            exe: &r.exe,
            exit: r.is(Event::Exit),
            cpu: r.cpu,
            slot: r.slot,
            roams: r.roams,
            launcher: r.role == Some(Role::Launcher),
        };
        assert_eq!(scanned, parsed, "{line}");
    }
    // Anything else is left to the parser: another writer's layout, an escaped path, a
    // torn line, the housekeeper's records.
    let escaped = shim_line(14, "a", "/odd\\\"dir/a", "create", "1");
    assert!(placement_log::parse_line(escaped.as_bytes()).is_some());
    for line in [
        escaped,
        shim_line(15, "a", "/x", "create", "1")[1..].to_string(),
        r#"{"time":1.0,"pid":1,"tid":6,"event":"place","cpu":1,"placed_by":"housekeeper"}"#
            .to_string(),
        shim_line(16, "a", "/x", "create", "99999999999999999999"),
        // What a parser would read otherwise, or refuse.
        shim_line(17, "a", "/x", "create", "007"),
        shim_line(18, "a", "/x", "create", "2.5"),
        shim_line(19, "a", "/x", "create", "2")
            .replace("\"requested\":\"0-3\"", "\"requested\":{\"cpu\":9}"),
        shim_line(20, "a\u{1}b", "/x", "create", "2"),
        shim_line(21, "a", "/x", "create", "2").replace("1.500000", "1.5"),
    ] {
        assert_eq!(scan_shim_line(line.as_bytes()), None, "{line}");
    }
}

#[test]
fn reads_appended_lines_and_waits_for_a_torn_one() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("log");
    let mut tail = LogTail::new(path.clone());
    tail.poll();
    assert!(tail.shim.is_empty());
    let mut f = std::fs::File::create(&path).unwrap();
    let rec = |tid: i32, event: &str, by: &str| {
        format!(
            r#"{{"time":1.0,"pid":1,"tid":{tid},"event":"{event}","cpu":1,"slot":0,"role":"worker","placed_by":"{by}"}}"#
        )
    };
    let line = rec(5, "create", "shim");
    write!(
        f,
        "{}\n{}\n{}",
        line,
        rec(6, "place", "housekeeper"),
        &line[..10]
    )
    .unwrap();
    tail.poll();
    assert_eq!(tail.shim.keys().copied().collect::<Vec<_>>(), vec![5]);
    assert_eq!(tail.shim[&5].cpu, Some(1));
    // The rest of the torn line, then an exit.
    write!(f, "{}\n{}\n", &line[10..], rec(5, "exit", "shim")).unwrap();
    tail.poll();
    assert!(tail.shim[&5].exited);
    // Forgotten at the poll after; a new thread with its tid starts afresh.
    tail.poll();
    assert!(tail.shim.is_empty());
    writeln!(f, "{}", rec(5, "create", "shim")).unwrap();
    tail.poll();
    assert!(!tail.shim[&5].exited);
}

#[test]
fn a_log_longer_than_the_reports_cap_is_followed_to_its_end() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("log");
    let rec = |tid: i32| {
        format!(r#"{{"time":1.0,"pid":1,"tid":{tid},"event":"create","cpu":1,"role":"worker"}}"#)
    };
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "{}", rec(5)).unwrap();
    // A sparse run of zeros without a newline (one long line), then a record past the cap.
    f.set_len(MAX_BYTES + 100).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    write!(f, "\n{}\n", rec(6)).unwrap();
    let mut tail = LogTail::new(path.clone());
    let polls = MAX_BYTES / MAX_POLL + 2;
    for _ in 0..polls {
        tail.poll();
    }
    assert_eq!(tail.shim.keys().copied().collect::<Vec<_>>(), [5, 6]);
    let reasons: Vec<String> = tail.errors().into_iter().map(|e| e.reason).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].starts_with(&format!("over {MAX_BYTES} bytes")));
    assert!(reasons[1].starts_with("1 line(s) longer than"));
}
