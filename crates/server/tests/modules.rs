//! The server's modules depend on each other in one direction: no module
//! reaches, through `crate::` paths, a module that reaches it back
//! (ARCHITECTURE.md, "Layers"). A hub that every module imports, and that
//! imports them, is how a crate becomes one knot; this test fails, naming
//! the cycle, when one forms again.
//!
//! A module here is a top-level module of the crate: `src/x.rs` or the
//! folder `src/x/` (a folder's files may use each other freely). The crate
//! root (`lib.rs`) counts as a module too: an item of the root used from
//! a module is an edge to it. Paths are read from the code (`use crate::…`,
//! grouped uses, and `crate::…` paths inline), comments left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate root, as a module name.
const ROOT: &str = "crate";

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn the_server_modules_form_no_import_cycle() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&source);
    assert!(
        graph.len() > 10,
        "expected the server's modules, found {:?}",
        graph.keys()
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the server's modules form an import cycle: {}\n(every edge is a `crate::` path in the first module's files)",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn a_cycle_is_found_and_named() {
    fn edge(graph: &mut Graph, from: &str, to: &str) {
        graph
            .entry(from.to_owned())
            .or_default()
            .insert(to.to_owned());
        graph.entry(to.to_owned()).or_default();
    }
    let mut graph = Graph::new();
    edge(&mut graph, "crate", "node");
    edge(&mut graph, "node", "connection");
    edge(&mut graph, "connection", "info");
    assert_eq!(find_cycle(&graph), None);
    edge(&mut graph, "info", "node");
    let cycle = find_cycle(&graph).expect("a cycle");
    assert_eq!(cycle.first(), cycle.last(), "{cycle:?}");
    let members: BTreeSet<&str> = cycle.iter().map(String::as_str).collect();
    assert_eq!(
        members,
        BTreeSet::from(["connection", "info", "node"]),
        "{cycle:?}"
    );
    assert_eq!(cycle.len(), 4, "{cycle:?}");
}

#[test]
fn paths_are_read_from_uses_groups_and_inline_code_but_not_comments() {
    let modules: BTreeSet<String> = ["budget", "cluster", "net", "info"]
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let text = "use crate::budget::Budget;\n\
                use crate::{cluster::Context, net};\n\
                // crate::info::Info is only mentioned here\n\
                fn f() { crate::net::bind(x); crate::run(); }\n";
    let found = referenced(text, &modules);
    let expected: BTreeSet<String> = ["budget", "cluster", "net", ROOT]
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(found, expected);
}

/// Edges between the crate's top-level modules.
fn module_graph(source: &Path) -> Graph {
    let files = rust_files(source);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|file| module_of(source, file))
        .collect();
    let mut graph = Graph::new();
    for file in &files {
        let Some(module) = module_of(source, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        let targets = graph.entry(module.clone()).or_default();
        for target in referenced(&text, &modules) {
            if target != module {
                targets.insert(target);
            }
        }
    }
    graph
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The top-level module a file belongs to; `main.rs` is another crate.
fn module_of(source: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(source).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "main.rs" => None,
        "lib.rs" => Some(ROOT.to_owned()),
        name => Some(name.trim_end_matches(".rs").to_owned()),
    }
}

/// The modules (or the root) that `crate::` paths in `text` name.
fn referenced(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let names: Vec<&str> = match after.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .collect(),
                None => vec![after],
            };
            for name in names {
                let name: String = name
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() || name == "self" {
                    continue;
                }
                if modules.contains(&name) {
                    found.insert(name);
                } else {
                    found.insert(ROOT.to_owned());
                }
            }
            rest = after;
        }
    }
    found
}

/// A cycle as the modules along it, the first repeated at the end.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        graph: &Graph,
        module: &str,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(module.to_owned(), Mark::Open);
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            match marks.get(next.as_str()).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let start = path.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(graph, next, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(module.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for module in graph.keys() {
        if marks.get(module.as_str()).copied().unwrap_or(Mark::New) == Mark::New {
            let mut path = Vec::new();
            if let Some(cycle) = visit(graph, module, &mut marks, &mut path) {
                return Some(cycle);
            }
        }
    }
    None
}
