//! The modules of the launcher, the contract (`plan`) and the shim (`preload`) form layers: at
//! every level of a crate's module tree, the paths one module names into its siblings point
//! down, so the import graph of the top-level modules, and that of the children of any module
//! (`housekeeper::policy::*`, say), has no cycle.
//!
//! Why a test: a circle (`cli → isolate → isolate/cgroup → diag → cli` once) makes a low module
//! depend on the top command, and nothing in the compiler refuses it. This reads the sources,
//! resolves each `crate::`, `super::` and `self::` path to the module it names, builds one graph
//! per parent module (a file counts as the child of that parent it lies in: `isolate/cgroup.rs`
//! is `isolate` among the top-level modules) and names the first cycle it finds, with the lines
//! that make each edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`["housekeeper", "policy"]`; the root is empty).
type ModPath = Vec<String>;

/// Module → the sibling modules it names, each edge with the `file:line`s that name it.
type Graph = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// The code of `code` that counts: comment lines blanked (doc links such as
/// [`crate::launch`] are not imports), and an inline test module at the end left out (its
/// `super` is the file's module, not the file's parent).
fn kept_code(code: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = code.lines().peekable();
    while let Some(l) = lines.next() {
        let next_is_mod = lines
            .peek()
            .is_some_and(|n| n.trim_start().starts_with("mod "));
        if l.trim() == "#[cfg(test)]"
            && next_is_mod
            && lines.peek().is_some_and(|n| n.ends_with('{'))
        {
            break;
        }
        kept.push(if l.trim_start().starts_with("//") {
            ""
        } else {
            l
        });
    }
    kept.join("\n")
}

/// The path of module names at the start of `s` (`a::b::{...}` gives `a`, `b`); `self` and
/// glob items end it.
fn leading_path(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in s.trim_start().split("::") {
        let name: String = (part.trim_start().chars())
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || name == "self" {
            break;
        }
        let whole = part.trim() == name;
        out.push(name);
        if !whole {
            break;
        }
    }
    out
}

/// The items of a `{...}` group whose text starts after its `{`, each with its offset: the
/// top-level items, split at commas outside nested groups.
fn group_items(group: &str) -> Vec<(usize, &str)> {
    let (mut depth, mut start, mut items) = (0usize, 0usize, Vec::new());
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push((start, &group[start..j]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push((start, &group[start..j]));
                start = j + 1;
            }
            _ => {}
        }
    }
    items
}

/// The paths that the code of module `me` names through `crate::`, `super::` or `self::`,
/// resolved from the crate root, with the 1-based line of each (a `use a::{b, c::d}` group
/// gives one path an item).
fn named_paths(code: &str, me: &[String]) -> Vec<(ModPath, usize)> {
    let kept = kept_code(code);
    let line_of = |at: usize| kept[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut at = 0;
    while at < kept.len() {
        let rest = &kept[at..];
        let Some(head) = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| rest.starts_with(h))
        else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        // `goset_crate::x` is another path; only a whole `crate` counts.
        let before = kept[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            at += head.len();
            continue;
        }
        let start = at;
        let mut base: ModPath = match head {
            "crate::" => Vec::new(),
            "super::" => me[..me.len().saturating_sub(1)].to_vec(),
            _ => me.to_vec(),
        };
        at += head.len();
        while kept[at..].starts_with("super::") {
            base.pop();
            at += "super::".len();
        }
        let prefix: String = kept[at..]
            .split('{')
            .next()
            .unwrap_or("")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let path = leading_path(&prefix);
        base.extend(path);
        at += prefix.len();
        // `crate::{a, b}` or `super::m::{x, y}`: a group right after a `::`.
        let opens_group = prefix.is_empty() || prefix.ends_with("::");
        if let Some(group) = kept[at..].strip_prefix('{').filter(|_| opens_group) {
            for (offset, item) in group_items(group) {
                // The empty item after a trailing comma names nothing.
                let item = leading_path(item);
                if !item.is_empty() {
                    found.push(([base.as_slice(), &item].concat(), line_of(at + 1 + offset)));
                }
            }
        } else {
            found.push((base, line_of(start)));
        }
    }
    found
}

/// The module a source file is (`isolate/cgroup.rs` → `isolate::cgroup`, `isolate/mod.rs` →
/// `isolate`, `lib.rs` → the root); `None` for the binaries, which sit above every module.
fn module_of(rel: &Path) -> Option<ModPath> {
    let mut parts: ModPath = (rel.components())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs").unwrap_or(&last).to_string();
    let is_root = parts.is_empty() && (stem == "lib" || stem == "main");
    if stem != "mod" && !is_root {
        parts.push(stem);
    }
    Some(parts)
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

/// The import graphs of the crate whose sources are in `src`, one for the children of each
/// module: an edge from `a` to `b` when a file in child `a` names a path into sibling `b`.
fn graphs_of(src: &Path) -> BTreeMap<ModPath, Graph> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: BTreeSet<ModPath> = files
        .iter()
        .filter_map(|f| module_of(f.strip_prefix(src).unwrap()))
        .collect();
    let mut graphs: BTreeMap<ModPath, Graph> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(src).unwrap();
        let Some(me) = module_of(rel) else {
            continue;
        };
        for depth in 0..me.len() {
            let graph = graphs.entry(me[..depth].to_vec()).or_default();
            graph.entry(me[depth].clone()).or_default();
        }
        let code = std::fs::read_to_string(file).unwrap();
        for (to, line) in named_paths(&code, &me) {
            let shared = me.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if shared >= me.len() || shared >= to.len() || !modules.contains(&to[..=shared]) {
                continue;
            }
            let graph = graphs.entry(me[..shared].to_vec()).or_default();
            let edges = graph.entry(me[shared].clone()).or_default();
            let at = format!("{}:{line}", rel.display());
            edges.entry(to[shared].clone()).or_default().push(at);
        }
    }
    graphs
}

/// The children of its own module that the code of a module file re-exports (`pub use
/// outcome::{Outcome, ..}` or `pub(crate) use self::slots::Slot` give `outcome`, `slots`).
fn reexported_children(code: &str) -> BTreeSet<String> {
    let kept = kept_code(code);
    let mut out = BTreeSet::new();
    for stmt in kept.split(';') {
        let stmt = stmt.trim_start();
        let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .into_iter()
            .find_map(|p| stmt.strip_prefix(p))
        else {
            continue;
        };
        let rest = rest.trim_start();
        let rest = rest.strip_prefix("self::").unwrap_or(rest);
        if ["crate::", "super::"].iter().any(|h| rest.starts_with(h)) {
            continue;
        }
        if let Some(first) = leading_path(rest).first().filter(|_| rest.contains("::")) {
            out.insert(first.clone());
        }
    }
    out
}

/// Each import of a module from one of its ancestors' own items (not a module) where that
/// ancestor re-exports an item of the child the importer lies in: a circle between the two
/// files that the graphs of siblings do not show (`housekeeper/outcome.rs` naming
/// `super::Settings` while `housekeeper/mod.rs` has `pub use outcome::Outcome`). Each as
/// `importer -> ancestor::item (ancestor's file re-exports child): file:line`.
fn imports_meeting_a_reexport(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: BTreeMap<ModPath, PathBuf> = files
        .iter()
        .filter_map(|f| Some((module_of(f.strip_prefix(src).unwrap())?, f.clone())))
        .collect();
    let reexports: BTreeMap<&ModPath, BTreeSet<String>> = (modules.iter())
        .map(|(m, f)| (m, reexported_children(&std::fs::read_to_string(f).unwrap())))
        .collect();
    let mut found = Vec::new();
    // A test module's `super::*` is the view of its module's own tests, not an import.
    for (me, file) in modules
        .iter()
        .filter(|(m, _)| m.last().is_none_or(|l| l != "tests"))
    {
        let code = std::fs::read_to_string(file).unwrap();
        for (to, line) in named_paths(&code, me) {
            for depth in 0..me.len() {
                let ancestor = &me[..depth];
                let is_item =
                    to.len() == depth + 1 && to[..depth] == *ancestor && !modules.contains_key(&to);
                if is_item && reexports[&ancestor.to_vec()].contains(&me[depth]) {
                    found.push(format!(
                        "{} -> {} ({} re-exports {}): {}:{line}",
                        me.join("::"),
                        to.join("::"),
                        match ancestor.join("::") {
                            a if a.is_empty() => "the crate root".to_string(),
                            a => a,
                        },
                        me[depth],
                        file.strip_prefix(src).unwrap().display()
                    ));
                }
            }
        }
    }
    found
}

/// The layers of a graph, lowest first: a module's layer is one above the highest of the
/// modules it imports (0 for one that imports none). The graph must have no cycle.
fn layers(graph: &Graph) -> Vec<Vec<String>> {
    fn layer_of(m: &str, graph: &Graph, memo: &mut BTreeMap<String, usize>) -> usize {
        if let Some(&l) = memo.get(m) {
            return l;
        }
        let l = (graph.get(m).into_iter().flat_map(|e| e.keys()))
            .map(|n| layer_of(n, graph, memo) + 1)
            .max()
            .unwrap_or(0);
        memo.insert(m.to_string(), l);
        l
    }
    let mut memo = BTreeMap::new();
    let mut out: Vec<Vec<String>> = Vec::new();
    for m in graph.keys() {
        let l = layer_of(m, graph, &mut memo);
        if out.len() <= l {
            out.resize(l + 1, Vec::new());
        }
        out[l].push(m.clone());
    }
    out
}

/// The layer table as docs/architecture.md writes it.
fn layer_table(layers: &[Vec<String>]) -> String {
    let mut out = String::from("| layer | modules |\n|---|---|\n");
    for (i, mods) in layers.iter().enumerate() {
        let names: Vec<String> = mods.iter().map(|m| format!("`{m}`")).collect();
        out.push_str(&format!("| {i} | {} |\n", names.join(", ")));
    }
    out
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

/// Fails, naming the first cycle and the module whose children it joins, unless the modules
/// of the crate in `dir` (beside the launcher's own directory) form layers at every level;
/// `min_modules` (top-level modules) guards against reading nothing.
fn assert_layered(dir: &str, min_modules: usize) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir)
        .join("src");
    let graphs = graphs_of(&src);
    let top = graphs.get(&Vec::new()).map_or(0, |g| g.len());
    assert!(
        top >= min_modules
            && graphs
                .values()
                .flat_map(|g| g.values())
                .any(|e| !e.is_empty()),
        "the sources of {dir}/src were read: {graphs:?}"
    );
    let met = imports_meeting_a_reexport(&src);
    assert!(
        met.is_empty(),
        "{dir}/src: a module imports an item of an ancestor that re-exports from it; name the \
         item where it is defined (or move it below both):\n{}",
        met.join("\n")
    );
    for (parent, graph) in &graphs {
        if let Some(cycle) = find_cycle(graph) {
            let among = match parent.join("::") {
                p if p.is_empty() => "the top-level modules".to_string(),
                p => format!("the children of {p}"),
            };
            panic!("{dir}/src, {among}: {}", describe(&cycle, graph));
        }
    }
}

#[test]
fn the_launchers_imports_point_down() {
    assert_layered("launcher", 10);
}

/// docs/architecture.md's layer table is the one the launcher's imports give.
#[test]
fn the_documented_layers_are_the_launchers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let graphs = graphs_of(&root.join("launcher/src"));
    let want = layer_table(&layers(&graphs[&Vec::new()]));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let table: String = (doc.lines())
        .skip_while(|l| !l.starts_with("| layer |"))
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        table, want,
        "docs/architecture.md's layer table is not the launcher's; it is now:\n{want}"
    );
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
fn paths_are_read_from_uses_groups_and_expressions_but_not_comments() {
    let code = "use crate::fsroot::FsRoot;\n\
        use crate::{\n    cli::{A, B},\n    error,\n};\n\
        /// See [`crate::launch`].\n\
        // crate::diag is not an import\n\
        let x = crate::procfs::pid_stat::read(&root, 1);\n\
        let y = goset_crate::z;\n\
        use super::super::tree::Walk;\n\
        use super::{demand::wanted, thresholds::Policy};\n\
        #[cfg(test)]\n\
        mod tests {\n    use super::placement::View;\n}\n";
    let me: ModPath = ["housekeeper", "policy", "placement"]
        .map(String::from)
        .to_vec();
    let found = named_paths(code, &me);
    let paths: Vec<String> = found.iter().map(|(p, _)| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "fsroot::FsRoot",
            "cli",
            "error",
            "procfs::pid_stat::read",
            "housekeeper::tree::Walk",
            "housekeeper::policy::demand::wanted",
            "housekeeper::policy::thresholds::Policy",
        ]
    );
    assert_eq!(found[3].1, 8, "line numbers count the comment lines too");
    let module = |p: &str| module_of(Path::new(p)).map(|m| m.join("::"));
    assert_eq!(
        module("isolate/cgroup.rs").as_deref(),
        Some("isolate::cgroup")
    );
    assert_eq!(module("isolate/mod.rs").as_deref(), Some("isolate"));
    assert_eq!(module("rundir.rs").as_deref(), Some("rundir"));
    assert_eq!(module("lib.rs").as_deref(), Some(""));
    assert_eq!(module("bin/goset.rs"), None);
}

/// A directory of source files, `(path, code)`, for the tests of the graphs.
fn sources(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, code) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, code).unwrap();
    }
    dir
}

#[test]
fn a_circle_between_the_children_of_a_module_is_found() {
    let dir = sources(&[
        ("lib.rs", "pub mod housekeeper;\n"),
        ("housekeeper/mod.rs", "pub mod policy;\n"),
        (
            "housekeeper/policy/mod.rs",
            "pub mod demand;\npub mod placement;\n",
        ),
        (
            "housekeeper/policy/demand.rs",
            "use super::placement::Policy;\n",
        ),
        (
            "housekeeper/policy/placement.rs",
            "use crate::housekeeper::policy::demand::wanted;\n",
        ),
    ]);
    let graphs = graphs_of(dir.path());
    let policy: ModPath = ["housekeeper", "policy"].map(String::from).to_vec();
    let graph = &graphs[&policy];
    let cycle = find_cycle(graph).expect("the circle is found");
    assert_eq!(cycle, ["demand", "placement", "demand"]);
    let text = describe(&cycle, graph);
    assert!(
        text.contains("demand -> placement: housekeeper/policy/demand.rs:1"),
        "{text}"
    );
    assert_eq!(find_cycle(&graphs[&Vec::new()]), None, "{graphs:?}");
}

#[test]
fn a_child_importing_from_a_parent_that_reexports_it_is_found() {
    let dir = sources(&[
        ("lib.rs", "pub mod housekeeper;\n"),
        (
            "housekeeper/mod.rs",
            "pub mod outcome;\npub mod policy;\npub mod tracked;\npub use outcome::Outcome;\n\
             pub use tracked::Tracked;\npub struct Settings;\n",
        ),
        (
            "housekeeper/outcome.rs",
            "use super::tracked::Tracked;\nuse super::{Settings, Tracked as T};\n",
        ),
        ("housekeeper/tracked.rs", "pub struct Tracked;\n"),
        // Its parent re-exports nothing of it.
        ("housekeeper/policy.rs", "use super::Settings;\n"),
    ]);
    assert_eq!(
        imports_meeting_a_reexport(dir.path()),
        [
            "housekeeper::outcome -> housekeeper::Settings (housekeeper re-exports outcome): \
             housekeeper/outcome.rs:2",
            "housekeeper::outcome -> housekeeper::Tracked (housekeeper re-exports outcome): \
             housekeeper/outcome.rs:2",
        ]
    );
    let mut graph = Graph::new();
    graph.entry("a".into()).or_default();
    graph
        .entry("b".into())
        .or_default()
        .insert("a".into(), Vec::new());
    assert_eq!(
        layer_table(&layers(&graph)),
        "| layer | modules |\n|---|---|\n| 0 | `a` |\n| 1 | `b` |\n"
    );
}
