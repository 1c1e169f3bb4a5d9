//! The runtime's modules import downward only (ARCHITECTURE.md, "The runtime's layers"): no
//! import circle between its top-level modules (`api/`, `lease/`, `wait/`, `backend/`, the
//! leaves), nor between the files of one folder. A folder's `mod.rs` is the folder itself,
//! above its files: what it defines (a trait, the types every file shares) is not an edge.
//!
//! The imports are read off the sources: every `crate::x`, `super::x` and `crate::folder::x`
//! path outside comments, strings and test modules, `use` groups included.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// `text` without comments, string literals and its `#[cfg(test)] mod tests` (which ends
/// every file that has one).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if !escaped && c == '"' {
                        break;
                    }
                    escaped = !escaped && c == '\\';
                }
                out.push_str("\"\"");
            }
            // A char literal that would open a string: '"'.
            '\'' if chars.peek() == Some(&'"') => {
                chars.next();
                chars.next();
            }
            c => out.push(c),
        }
    }
    out
}

/// The first segment of every path that starts with `prefix` in `code`, and of each path in
/// a `prefix{…}` group.
fn heads_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut heads = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for part in group.split(',') {
                let head = part.trim().split("::").next().unwrap_or_default();
                heads.insert(head.trim().to_owned());
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            heads.insert(head);
        }
    }
    heads
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("the sources are readable") {
        let path = entry.expect("the sources are readable").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The module `path` belongs to among `dir`'s entries: `x` for `dir/x.rs` or `dir/x/…`.
fn module_in(dir: &Path, path: &Path) -> String {
    let first = path
        .strip_prefix(dir)
        .expect("under its folder")
        .components()
        .next()
        .expect("a file has a name");
    let name = first.as_os_str().to_string_lossy();
    name.strip_suffix(".rs").unwrap_or(&name).to_owned()
}

/// A circle in `graph`, as the names along it, if there is one.
fn circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_top_level_modules_import_downward_only() {
    let src = src();
    let mut graph = Graph::new();
    let files = rust_files(&src);
    let modules: BTreeSet<String> = files.iter().map(|f| module_in(&src, f)).collect();
    for file in &files {
        let module = module_in(&src, file);
        if module == "lib" {
            continue;
        }
        let code = code_of(&fs::read_to_string(file).expect("readable"));
        let edges = graph.entry(module.clone()).or_default();
        for head in heads_after(&code, "crate::") {
            if head != module && modules.contains(&head) && head != "lib" {
                edges.insert(head);
            }
        }
    }
    assert!(graph.len() > 5, "the modules were read: {graph:?}");
    assert_eq!(circle(&graph), None, "an import circle between modules");
}

#[test]
fn the_files_of_each_folder_import_downward_only() {
    let src = src();
    let mut folders = 0;
    for entry in fs::read_dir(&src).expect("readable") {
        let folder = entry.expect("readable").path();
        if !folder.is_dir() {
            continue;
        }
        folders += 1;
        let name = folder
            .file_name()
            .expect("named")
            .to_string_lossy()
            .into_owned();
        let files = rust_files(&folder);
        let siblings: BTreeSet<String> = files
            .iter()
            .map(|f| module_in(&folder, f))
            .filter(|m| m != "mod")
            .collect();
        let mut graph = Graph::new();
        for file in &files {
            let module = module_in(&folder, file);
            if module == "mod" {
                continue;
            }
            let code = code_of(&fs::read_to_string(file).expect("readable"));
            // `super::` means the folder only in a file directly inside it.
            let direct = file.parent() == Some(folder.as_path());
            let mut heads = heads_after(&code, &format!("crate::{name}::"));
            if direct {
                heads.extend(heads_after(&code, "super::"));
            }
            let edges = graph.entry(module.clone()).or_default();
            for head in heads {
                if head != module && siblings.contains(&head) {
                    edges.insert(head);
                }
            }
        }
        assert_eq!(circle(&graph), None, "an import circle inside `{name}/`");
    }
    assert!(folders >= 5, "the folders were read");
}

#[test]
fn a_circle_is_found_and_comments_and_strings_are_not_imports() {
    let code = code_of("use super::{a, b::C};\n// super::c\nlet s = \"super::d\";\nsuper::e::f();");
    let heads: Vec<String> = heads_after(&code, "super::").into_iter().collect();
    assert_eq!(heads, ["a", "b", "e"]);
    let mut graph = Graph::new();
    graph.entry("a".into()).or_default().insert("b".into());
    assert_eq!(circle(&graph), None);
    graph.entry("b".into()).or_default().insert("a".into());
    assert_eq!(
        circle(&graph),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
