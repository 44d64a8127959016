//! Helpers shared by the launcher's integration tests: the built binaries and the topology
//! fixtures of real machines (`tests/fixtures/topology/`, copies of the dumps in the team's
//! shared folder, kept here so that a lone clone runs every test).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Names of every topology fixture.
pub const FIXTURES: [&str; 12] = [
    "128arm-2pa2n8cluster4co",
    "16em64t-4s2c2t-offlines",
    "20em64t-hybrid-1p6c2t+2ca4co1t",
    "22intel64-mtl-6p2t+8e+2lpe",
    "24amd64-zen5+zen5c",
    "256ppc-8n8s4t",
    "32intel64-2p8co2t+8ve",
    "64amd64-4s2n4ca2co",
    "8arm-4a55+4a76",
    "8arm-4a55+4a76-nol3",
    "nvidia-dgx-gb10",
    "offline-cpu0-node0",
];

/// The fixtures folder of the repository.
pub fn fixtures_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/topology");
    assert!(
        dir.is_dir(),
        "topology fixtures not found at {}",
        dir.display()
    );
    dir
}

/// The unpacked dump of fixture `name`, usable as an fsroot. Unpacks once into the target
/// directory; concurrent tests unpack into their own temporary folder and rename it into place.
pub fn fixture_root(name: &str) -> PathBuf {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    let dest = cache.join(name);
    let root = dest.join(name);
    if root.is_dir() {
        return root;
    }
    std::fs::create_dir_all(&cache).unwrap();
    let tmp = cache.join(format!(
        ".{name}.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let tarball = fixtures_dir().join(name).join(format!("{name}.tar.bz2"));
    let status = Command::new("tar")
        .arg("xjf")
        .arg(&tarball)
        .arg("-C")
        .arg(&tmp)
        .status()
        .expect("tar must be installed (apt-get install -y tar bzip2)");
    assert!(status.success(), "could not unpack {}", tarball.display());
    if std::fs::rename(&tmp, &dest).is_err() {
        // Another test won the race; its copy is complete.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    assert!(root.is_dir(), "{} did not hold {name}/", tarball.display());
    root
}

/// hwloc's reading of fixture `name` (its `truth.csv`): one row per CPU, in the file's order,
/// each field by its column's name.
pub fn truth_rows(name: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let path = fixtures_dir().join(name).join("truth.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty());
    let header = csv_fields(lines.next().expect("truth.csv has a header"));
    let rows: Vec<_> = lines
        .map(|l| {
            let f = csv_fields(l);
            assert_eq!(f.len(), header.len(), "{name}: odd truth row {l:?}");
            header.iter().cloned().zip(f).collect()
        })
        .collect();
    assert!(!rows.is_empty(), "{name}: empty truth.csv");
    rows
}

/// Splits one CSV line; fields may be double-quoted (`"0,8"`).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// Path of a binary of this package built by cargo for the tests.
pub fn bin(name: &str) -> PathBuf {
    match name {
        "goset-run" => PathBuf::from(env!("CARGO_BIN_EXE_goset-run")),
        "goset" => PathBuf::from(env!("CARGO_BIN_EXE_goset")),
        other => panic!("unknown binary {other}"),
    }
}
