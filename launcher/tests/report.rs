//! What the report shows a user: the Topology and Selection tables agree on a CPU's siblings,
//! and the JSON report carries the schema version docs/report.md documents, with every
//! top-level key listed there.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Runs one of this package's programs, asserting success; (stdout, stderr).
fn run_ok(bin: &str, args: &[&str]) -> (String, String) {
    let out = Command::new(common::bin(bin))
        .args(args)
        .env_remove("GOSET_FSROOT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{bin} {args:?}: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The cells of column `col` of the table titled `title` in `text`, by CPU. Columns are
/// right-aligned, so a cell ends where its header ends.
fn column(text: &str, title: &str, col: &str) -> BTreeMap<usize, String> {
    let mut lines = text.lines().skip_while(|l| *l != title).skip(1);
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no {title} table: {text}"));
    let end_of = |name: &str| {
        let at = header
            .split_whitespace()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("{title} has no column {name}: {header}"));
        // The end of the at-th header word.
        let mut end = 0;
        for word in header.split_whitespace().take(at + 1) {
            end = header[end..].find(word).unwrap() + end + word.len();
        }
        end
    };
    let (cpu_end, col_end) = (end_of("cpu"), end_of(col));
    let cell = |line: &str, end: usize| -> String {
        let before = &line[..end];
        assert!(
            !before.ends_with(' '),
            "{title}: empty {col} cell in {line:?}"
        );
        before.rsplit(' ').next().unwrap().to_string()
    };
    lines
        .take_while(|l| l.len() >= col_end && l.starts_with("  "))
        .map(|l| (cell(l, cpu_end).parse().unwrap(), cell(l, col_end)))
        .collect()
}

#[test]
fn topology_and_selection_tables_list_the_same_siblings() {
    // HT off (each CPU alone on its core, the case where the Topology table once listed the
    // CPU itself), and SMT2 (CPU 0's sibling is 16).
    for (fixture, cpu, want) in [
        ("offline-cpu0-node0", 4, "-"),
        ("32intel64-2p8co2t+8ve", 0, "16"),
    ] {
        let root = common::fixture_root(fixture);
        let root = root.to_str().unwrap();
        let (_, machine) = run_ok("goset", &["--fsroot", root]);
        let topology = column(&machine, "Topology", "sibl");
        assert_eq!(topology[&cpu], want, "{fixture}: {machine}");
        let (_, dry) = run_ok(
            "goset-run",
            &["--dry-run", "--sample", "0", "-n", "1", "--fsroot", root],
        );
        let selection = column(&dry, "Selection", "sibl");
        assert!(selection.len() > 1, "{fixture}: {dry}");
        for (c, sibl) in &selection {
            assert_eq!(sibl, &topology[c], "{fixture}: cpu {c}");
        }
        // No CPU is its own sibling, in either table.
        for (c, sibl) in &topology {
            assert!(
                sibl.split(',').all(|s| s != c.to_string()),
                "{fixture}: {sibl}"
            );
        }
    }
}

/// The schema version docs/report.md states (its `"schema": N`) and the top-level keys its
/// table lists.
fn documented() -> (u64, BTreeSet<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let version = doc
        .split("\"schema\": ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .expect("docs/report.md states \"schema\": N");
    let keys = (doc.lines())
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .map(str::to_string)
        .collect();
    (version, keys)
}

#[test]
fn the_json_report_starts_with_the_documented_schema_and_keys() {
    let (version, keys) = documented();
    assert_eq!(u64::from(goset::report::model::REPORT_SCHEMA), version);
    let root = common::fixture_root("32intel64-2p8co2t+8ve");
    let dry = [
        "--dry-run",
        "--fsroot",
        root.to_str().unwrap(),
        "--json",
        "-",
    ];
    // A run of the live machine has the keys a dry run leaves out (telemetry).
    let live = [
        "-n", "1", "--sample", "0", "-q", "--json", "-", "--", "true",
    ];
    for args in [&dry[..], &live[..]] {
        let (json, _) = run_ok("goset-run", args);
        assert!(
            json.starts_with(&format!("{{\n  \"schema\": {version},\n")),
            "schema comes first: {json}"
        );
        let report: serde_json::Value = serde_json::from_str(&json).unwrap();
        let top = report.as_object().unwrap();
        for key in top.keys() {
            assert!(keys.contains(key), "{key} is not in docs/report.md's table");
        }
    }
}
