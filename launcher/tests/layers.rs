//! The modules of the launcher, the contract (`plan`) and the shim (`preload`) form layers:
//! every `crate::` path in a crate's `src` points down, so the import graph of its top-level
//! modules has no cycle.
//!
//! Why a test: a circle (`cli → isolate → isolate/cgroup → diag → cli` once) makes a low module
//! depend on the top command, and nothing in the compiler refuses it. This reads the sources,
//! builds the graph at top-level-module granularity (`isolate/cgroup.rs` counts as `isolate`)
//! and names the first cycle it finds, with the lines that make each edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the modules it names, each edge with the `file:line`s that name it.
type Graph = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// The first top-level module names after each `crate::` in `code` (comment lines left out:
/// doc links such as [`crate::launch`] are not imports), with the 1-based line of each.
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let kept: String = code
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| kept[..at].matches('\n').count() + 1;
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = kept[from..].find("crate::") {
        let start = from + i;
        let after = start + "crate::".len();
        from = after;
        // `goset_crate::x` is another path; only a whole `crate` counts.
        let before = kept[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &kept[after..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::x, b};`, possibly over several lines: each top-level item.
            let (mut depth, mut item_start) = (0usize, 0usize);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.push((
                            ident(&group[item_start..j]),
                            line_of(after + 1 + item_start),
                        ));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.push((
                            ident(&group[item_start..j]),
                            line_of(after + 1 + item_start),
                        ));
                        item_start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.push((ident(rest), line_of(start)));
        }
    }
    found.retain(|(name, _)| !name.is_empty() && name != "self");
    found
}

/// The top-level module a source file belongs to (`isolate/cgroup.rs` → `isolate`); `None` for
/// the crate root and the binaries, which sit above every module.
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" | "bin" => None,
        f => Some(f.strip_suffix(".rs").unwrap_or(f).to_string()),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The import graph of the crate whose sources are in `src`.
fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_of(f.strip_prefix(src).unwrap()))
        .collect();
    let mut graph = Graph::new();
    for file in &files {
        let rel = file.strip_prefix(src).unwrap();
        let Some(from) = module_of(rel) else {
            continue;
        };
        let edges = graph.entry(from.clone()).or_default();
        let code = std::fs::read_to_string(file).unwrap();
        for (to, line) in crate_paths(&code) {
            if to != from && modules.contains(&to) {
                let at = format!("{}:{line}", rel.display());
                edges.entry(to).or_default().push(at);
            }
        }
    }
    graph
}

/// A cycle in `graph` as the modules along it, the first repeated at the end; `None` if the
/// graph is a layering.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let at = path.iter().position(|m| m == next).unwrap();
                    let mut cycle = path[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(c) = visit(next, graph, marks, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if !marks.contains_key(node) {
            if let Some(c) = visit(node, graph, &mut marks, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The cycle with the lines behind each of its edges, for the failure message.
fn describe(cycle: &[String], graph: &Graph) -> String {
    let mut out = format!("import cycle: {}\n", cycle.join(" -> "));
    for pair in cycle.windows(2) {
        let at = &graph[&pair[0]][&pair[1]];
        out.push_str(&format!(
            "  {} -> {}: {}\n",
            pair[0],
            pair[1],
            at.join(", ")
        ));
    }
    out
}

/// Fails, naming the first cycle, unless the modules of the crate in `dir` (beside the
/// launcher's own directory) form layers; `min_modules` guards against reading nothing.
fn assert_layered(dir: &str, min_modules: usize) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir)
        .join("src");
    let graph = graph_of(&src);
    assert!(
        graph.len() >= min_modules && graph.values().any(|e| !e.is_empty()),
        "the sources of {dir}/src were read: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("{dir}/src: {}", describe(&cycle, &graph));
    }
}

#[test]
fn the_launchers_imports_point_down() {
    assert_layered("launcher", 10);
}

#[test]
fn the_contracts_imports_point_down() {
    assert_layered("plan", 5);
}

#[test]
fn the_shims_imports_point_down() {
    assert_layered("preload", 10);
}

#[test]
fn a_cycle_in_a_small_graph_is_found_and_named() {
    let graph_from = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string())
                .or_default()
                .insert(b.to_string(), vec![format!("{a}.rs:1")]);
            g.entry(b.to_string()).or_default();
        }
        g
    };
    let layered = graph_from(&[("cli", "isolate"), ("isolate", "procfs"), ("cli", "procfs")]);
    assert_eq!(find_cycle(&layered), None);

    let circle = graph_from(&[
        ("cli", "isolate"),
        ("isolate", "cgroup"),
        ("cgroup", "diag"),
        ("diag", "cli"),
        ("diag", "procfs"),
    ]);
    let cycle = find_cycle(&circle).expect("the circle is found");
    assert_eq!(cycle, ["cgroup", "diag", "cli", "isolate", "cgroup"]);
    let text = describe(&cycle, &circle);
    assert!(text.starts_with("import cycle: cgroup -> diag -> cli -> isolate -> cgroup\n"));
    assert!(text.contains("  diag -> cli: diag.rs:1\n"), "{text}");
}

#[test]
fn crate_paths_are_read_from_uses_groups_and_expressions_but_not_comments() {
    let code = "use crate::fsroot::FsRoot;\n\
        use crate::{\n    cli::{A, B},\n    error,\n};\n\
        /// See [`crate::launch`].\n\
        // crate::diag is not an import\n\
        let x = crate::procfs::pid_stat::read(&root, 1);\n\
        let y = goset_crate::z;\n";
    let found: Vec<(String, usize)> = crate_paths(code);
    let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["fsroot", "cli", "error", "procfs"]);
    assert_eq!(found[3].1, 8, "line numbers count the comment lines too");
    assert_eq!(
        module_of(Path::new("isolate/cgroup.rs")).as_deref(),
        Some("isolate")
    );
    assert_eq!(module_of(Path::new("rundir.rs")).as_deref(), Some("rundir"));
    assert_eq!(module_of(Path::new("bin/goset.rs")), None);
}
