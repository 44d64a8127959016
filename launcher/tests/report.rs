//! What the report shows a user: the Topology and Selection tables agree on a CPU's siblings.

mod common;

use std::collections::BTreeMap;
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
