//! Unit tests of the scanner: the writer's lines read back, and lines it must refuse.

use super::*;
use crate::buf::Buf;
use crate::log::{escape, format, Record};
use crate::{cpulist, CpuSet};

/// `r` as the shim's log writes it, with `exe` spliced in, without the newline.
fn written(r: &Record, exe: &str) -> Vec<u8> {
    let mut buf = Buf::<640>::new();
    let at = format(&mut buf, r, None).unwrap();
    let (head, tail) = buf.as_bytes().split_at(at);
    let line = [head, exe.as_bytes(), tail].concat();
    line.strip_suffix(b"\n").unwrap().to_vec()
}

fn record<'a>(requested: Option<&'a CpuSet>, comm: &'a [u8]) -> Record<'a> {
    Record {
        time: 1796276125.25,
        pid: 10,
        tid: 11,
        comm,
        event: Event::Create,
        call: "pthread_create",
        requested,
        cpu: Some(2),
        slot: Some(7),
        role: Role::Worker,
        shared: false,
        roams: false,
    }
}

/// Every field the writer wrote, read back equal, for every event and role and for the
/// optional fields both present and absent.
#[test]
fn the_writers_lines_are_read_back_field_for_field() {
    let mask = cpulist::parse_set(b"0-3,8").unwrap();
    let comms: [&[u8]; 3] = [b"worker-1", b"w \"1\"\\\t", b"bad \xff utf-8"];
    for event in Event::ALL {
        for role in Role::ALL {
            for (i, comm) in comms.into_iter().enumerate() {
                let odd = i % 2 == 1;
                let r = Record {
                    time: 1796276125.0 + i as f64 * 0.25,
                    pid: 10 + i as i32,
                    tid: i32::MAX - i as i32,
                    event,
                    role,
                    requested: (!odd).then_some(&mask),
                    cpu: (!odd).then_some(1023),
                    slot: odd.then_some(0),
                    shared: odd,
                    roams: !odd,
                    ..record(None, comm)
                };
                let line = written(&r, "/usr/bin/a.out");
                let got = shim_line(&line).unwrap_or_else(|| panic!("{line:?}"));
                let mut comm_escaped = Buf::<64>::new();
                escape(&mut comm_escaped, r.comm).unwrap();
                let want = ShimLine {
                    time: r.time,
                    pid: r.pid,
                    tid: r.tid,
                    comm_escaped: comm_escaped.as_bytes(),
                    exe: "/usr/bin/a.out",
                    event,
                    call: "pthread_create",
                    requested: r.requested.map(|_| "0-3,8"),
                    cpu: r.cpu,
                    slot: r.slot,
                    role,
                    shared: r.shared,
                    roams: r.roams,
                };
                assert_eq!(got, want, "{}", String::from_utf8_lossy(&line));
            }
        }
    }
}

/// A mask whose cpulist did not fit is read as the writer marked it.
#[test]
fn a_mask_too_long_to_write_is_read_as_marked() {
    let every_other: CpuSet = (0..crate::MAX_CPUS).step_by(2).collect();
    let line = written(&record(Some(&every_other), b"w"), "/x");
    assert_eq!(shim_line(&line).unwrap().requested, Some("(too long)"));
}

/// No prefix of a line is a record, and none makes the scanner read past it.
#[test]
fn a_truncated_line_is_refused() {
    let line = written(&record(None, b"w"), "/x");
    assert!(shim_line(&line).is_some());
    for end in 0..line.len() {
        assert_eq!(shim_line(&line[..end]), None, "{end}");
    }
}

/// Huge lines are scanned in one pass: a name of a mebibyte is still a record, a number of a
/// mebibyte of digits is not.
#[test]
fn a_huge_line_is_scanned_or_refused_whole() {
    let line = written(&record(None, b"w"), "/x");
    let text = String::from_utf8(line).unwrap();
    let long_name = text.replace(
        "\"comm\":\"w\"",
        &format!("\"comm\":\"{}\"", "a".repeat(1 << 20)),
    );
    assert_eq!(
        shim_line(long_name.as_bytes()).unwrap().comm_escaped.len(),
        1 << 20
    );
    let long_pid = text.replace("\"pid\":10", &format!("\"pid\":{}", "9".repeat(1 << 20)));
    assert_eq!(shim_line(long_pid.as_bytes()), None);
}

/// Any line not in the writer's exact layout is left to a full parser.
#[test]
fn lines_in_another_layout_are_refused() {
    let line = String::from_utf8(written(&record(None, b"w"), "/x")).unwrap();
    let edits: &[(&str, &str)] = &[
        // Fields in another order.
        ("\"pid\":10,\"tid\":11", "\"tid\":11,\"pid\":10"),
        ("\"cpu\":2,\"slot\":7", "\"slot\":7,\"cpu\":2"),
        // Numbers the writer never writes, or that do not fit.
        ("\"cpu\":2", "\"cpu\":02"),
        ("\"cpu\":2", "\"cpu\":-2"),
        ("\"cpu\":2", "\"cpu\":2.5"),
        ("\"cpu\":2", "\"cpu\":1234567890123456789"),
        ("\"pid\":10", "\"pid\":2147483648"),
        ("1796276125.250000", "1796276125.25"),
        ("1796276125.250000", "1796276125.25000x"),
        ("\"shared\":false", "\"shared\":0"),
        // Names no writer of goset uses, another placer, an escaped path.
        ("\"event\":\"create\"", "\"event\":\"created\""),
        ("\"role\":\"worker\"", "\"role\":\"boss\""),
        ("\"placed_by\":\"shim\"", "\"placed_by\":\"housekeeper\""),
        ("\"exe\":\"/x\"", "\"exe\":\"/a\\\"b\""),
        // A raw control character, and text after the record.
        ("\"comm\":\"w\"", "\"comm\":\"w\u{1}\""),
        ("\"shim\"}", "\"shim\"} "),
    ];
    for (from, to) in edits {
        assert!(line.contains(from), "{from}");
        let edited = line.replace(from, to);
        assert_eq!(shim_line(edited.as_bytes()), None, "{edited}");
    }
}
