//! The node's layers, kept by a test: the modules under `src/` import each other only
//! downwards, and never in a circle.
//!
//! Layers, top to bottom (a module may import its own layer and the layers below):
//!
//! | layer | folder or file | may import |
//! | --- | --- | --- |
//! | wiring | `server.rs` | everything below |
//! | front ends | `front/` | node, config, cluster, core, devices, net, telemetry |
//! | node state | `node.rs` | config, cluster, core, devices, net, telemetry |
//! | configuration | `config.rs` | cluster, core, devices, net, telemetry |
//! | cluster agent | `registry.rs` | core, devices, net, telemetry |
//! | core | `core/` | devices, telemetry |
//! | devices | `device/` | telemetry |
//! | net | `net/` | telemetry |
//! | telemetry | `telemetry/` | nothing |
//!
//! An import is a `crate::…`, `super::…` or `self::…` path in a file's code (comments,
//! strings and the file's `#[cfg(test)]` module left out, as are the test modules kept
//! in files of their own, `tests.rs` and `*_tests.rs`: tests may reach anywhere),
//! resolved to the file of the longest module prefix it names. Every import between two
//! files counts, within a layer too, so a circle of any length fails the test, naming
//! its files. A folder's `mod.rs` naming its own children by their bare names
//! (`mod state; use state::Phase;`) declares them rather than imports them and is not
//! counted; a child's `super::` is. `lib.rs` and `main.rs` declare the modules and are
//! not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers from the top; each may import those after it, and itself.
const LAYERS: [&str; 9] = [
    "server",
    "front",
    "node",
    "config",
    "registry",
    "core",
    "device",
    "net",
    "telemetry",
];

/// The layers `net` and `device` are side by side: neither may import the other.
const APART: [(&str, &str); 2] = [("net", "device"), ("device", "net")];

/// Source files by path relative to `src/`, with their text.
type Tree = BTreeMap<String, String>;

fn read_tree(root: &Path) -> Tree {
    let mut tree = Tree::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                tree.insert(rel, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    tree
}

/// The module path of a file: `core/slot.rs` is `[core, slot]`, `net/tls/mod.rs` is
/// `[net, tls]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file that defines the longest prefix of module path `path`, if any.
fn resolve(tree: &Tree, path: &[String]) -> Option<String> {
    (0..=path.len()).rev().find_map(|n| {
        let prefix = path[..n].join("/");
        let candidates = if n == 0 {
            vec!["lib.rs".to_string()]
        } else {
            vec![format!("{prefix}.rs"), format!("{prefix}/mod.rs")]
        };
        candidates.into_iter().find(|c| tree.contains_key(c))
    })
}

/// The code of a file without its comments, string contents and test module.
fn code_of(text: &str) -> String {
    let text = match text
        .find("#[cfg(test)]\nmod ")
        .or_else(|| text.find("#[cfg(test)]\npub mod "))
    {
        Some(at) => &text[..at],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        let mut in_string = false;
        let mut escaped = false;
        for c in line.chars() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    in_string = false;
                    out.push(c);
                }
                continue;
            }
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
        out.push('\n');
    }
    out
}

/// Every path `crate::a::b`, `super::a`, `self::a` in `code`, with the items of a
/// `{…}` group after it as paths of their own, relative to module `me`.
fn paths_in(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for head in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(head) {
            let start = from + at;
            from = start + head.len();
            if start > 0
                && (bytes[start - 1].is_ascii_alphanumeric()
                    || bytes[start - 1] == b'_'
                    || bytes[start - 1] == b':')
            {
                continue;
            }
            let mut base: Vec<String> = match head {
                "crate::" => Vec::new(),
                // A file's module is its own path; `super` is its parent, whether the
                // file is `x.rs` or `x/mod.rs`.
                "super::" => me[..me.len().saturating_sub(1)].to_vec(),
                _ => me.to_vec(),
            };
            let rest = &code[from..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let mut segments: Vec<&str> =
                rest[..end].split("::").filter(|s| !s.is_empty()).collect();
            while segments.first() == Some(&"super") {
                base.pop();
                segments.remove(0);
            }
            let mut path = base.clone();
            path.extend(segments.iter().map(|s| s.to_string()));
            found.push(path.clone());
            if rest[end..].starts_with('{') {
                let close = rest[end..].find('}').map_or(rest.len(), |c| end + c);
                for item in rest[end + 1..close].split(',') {
                    let item = item.trim().split(" as ").next().unwrap_or("").trim();
                    if item.is_empty() || item == "self" || item == "*" {
                        continue;
                    }
                    let mut p = path.clone();
                    p.extend(item.split("::").map(String::from));
                    found.push(p);
                }
            }
        }
    }
    found
}

/// Each file's imports of other files.
fn imports(tree: &Tree) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for (file, text) in tree {
        if file == "main.rs"
            || file == "tests.rs"
            || file.ends_with("/tests.rs")
            || file.ends_with("_tests.rs")
        {
            continue;
        }
        let me = module_of(file);
        let mut out = BTreeSet::new();
        for path in paths_in(&code_of(text), &me) {
            if let Some(target) = resolve(tree, &path) {
                if &target != file {
                    out.insert(target);
                }
            }
        }
        edges.insert(file.clone(), out);
    }
    edges
}

fn layer_of(file: &str) -> &str {
    let top = file.split('/').next().unwrap();
    top.strip_suffix(".rs").unwrap_or(top)
}

/// Imports that go upwards, or between the side-by-side layers.
fn layer_violations(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let rank = |l: &str| LAYERS.iter().position(|x| *x == l);
    let mut wrong = Vec::new();
    for (from, tos) in edges {
        let Some(from_rank) = rank(layer_of(from)) else {
            continue;
        };
        for to in tos {
            let (fl, tl) = (layer_of(from), layer_of(to));
            let upward = rank(tl).is_none_or(|r| r < from_rank);
            if upward || APART.contains(&(fl, tl)) {
                wrong.push(format!("{from} ({fl}) imports {to} ({tl})"));
            }
        }
    }
    wrong
}

/// The circles of the import graph (strongly connected components of two or more
/// files), each sorted.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iteratively: a deep graph cannot overflow the stack.
    let nodes: Vec<&String> = edges.keys().collect();
    let index_of: BTreeMap<&String, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges[*n]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut found) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = succ[v].get(*child) {
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                loop {
                    let w = stack.pop().unwrap();
                    on_stack[w] = false;
                    component.push(nodes[w].clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    found.push(component);
                }
            }
        }
    }
    found
}

#[test]
fn the_node_modules_import_only_downwards_and_never_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let tree = read_tree(&src);
    assert!(
        tree.len() > 40,
        "read {} files from {}",
        tree.len(),
        src.display()
    );
    let edges = imports(&tree);
    for layer in LAYERS {
        assert!(
            edges.keys().any(|f| layer_of(f) == layer),
            "no file of layer {layer}: the table of layers is out of date"
        );
    }
    for file in edges.keys() {
        assert!(
            LAYERS.contains(&layer_of(file)) || file == "lib.rs",
            "{file} is in no layer: put it in one of {LAYERS:?}"
        );
    }
    let wrong = layer_violations(&edges);
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
    let found = circles(&edges);
    assert!(found.is_empty(), "import circles:\n{found:#?}");
}

fn tree_of(files: &[(&str, &str)]) -> Tree {
    files
        .iter()
        .map(|(f, t)| (f.to_string(), t.to_string()))
        .collect()
}

#[test]
fn an_upward_import_is_found() {
    let tree = tree_of(&[
        ("lib.rs", "pub mod core; pub mod node;"),
        ("core/mod.rs", "pub mod slot;"),
        ("core/slot.rs", "use crate::node::Node;"),
        ("node.rs", "use crate::core::slot::Slot;"),
    ]);
    let wrong = layer_violations(&imports(&tree));
    assert_eq!(wrong, ["core/slot.rs (core) imports node.rs (node)"]);
}

#[test]
fn a_circle_within_a_layer_is_found_through_groups_and_super() {
    let tree = tree_of(&[
        ("lib.rs", ""),
        ("front/mod.rs", ""),
        ("front/http/mod.rs", ""),
        ("front/http/route.rs", "use super::{v2::pick, parse};"),
        ("front/http/v2.rs", "fn f() { super::route::refuse(); }"),
        (
            "front/http/parse.rs",
            "// use super::route; in a comment\nconst S: &str = \"crate::front::http::route\";",
        ),
    ]);
    let edges = imports(&tree);
    assert_eq!(
        circles(&edges),
        [vec![
            "front/http/route.rs".to_string(),
            "front/http/v2.rs".to_string()
        ]]
    );
    assert!(
        edges["front/http/parse.rs"].is_empty(),
        "comments and strings are not imports"
    );
}

#[test]
fn test_modules_may_reach_anywhere() {
    let tree = tree_of(&[
        ("lib.rs", ""),
        ("net/mod.rs", ""),
        (
            "net/netio.rs",
            "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::node::Node;\n}\n",
        ),
        ("node.rs", "use crate::net::netio;"),
    ]);
    assert!(layer_violations(&imports(&tree)).is_empty());
}
