//! The structure the contributor guide promises, checked from the source:
//! inside each crate no file imports a file that imports it back (through
//! any chain); no module does either, a folder counted as one module among
//! its siblings at every level; no file imports a name through the crate
//! root's re-exports (`crate::Error`) instead of the module that defines it;
//! and the Python client's modules import no circle. A file's imports
//! are the `crate::` and `super::` paths it names (outside its `#[cfg(test)]`
//! module), each resolved to the module file that defines the name, through
//! the `pub use` of a module that only hands the name on. A parent naming its
//! children (`mod a;`, `a::f()`) is the tree itself, not an import.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The tree checked: this workspace, or `STRUCTURE_ROOT` (another checkout).
fn workspace() -> PathBuf {
    std::env::var_os("STRUCTURE_ROOT").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        PathBuf::from,
    )
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of `file` under `src` (`a::b` for `src/a/b.rs` and
/// `src/a/b/mod.rs`; empty for the crate root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Where the file's test module starts: `#[cfg(test)]`, then any other
/// attributes, then `mod`.
fn test_module(text: &str) -> Option<usize> {
    text.match_indices("#[cfg(test)]\n")
        .map(|(i, _)| i)
        .find(|&i| {
            text[i..]
                .lines()
                .skip(1)
                .find(|l| !l.trim_start().starts_with("#["))
                .is_some_and(|l| l.starts_with("mod "))
        })
}

/// The code before the file's test module, without comments (doc links
/// name paths that are not imports). A `//` after `:` is a URL's.
fn code_of(text: &str) -> String {
    let code = test_module(text).map_or(text, |i| &text[..i]);
    code.lines()
        .map(|line| {
            let cut = line
                .match_indices("//")
                .find(|(i, _)| *i == 0 || line.as_bytes()[i - 1] != b':')
                .map_or(line.len(), |(i, _)| i);
            &line[..cut]
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `crate::` or `super::` reference in `code` names, braces of
/// a `use` expanded: each as (the prefix it starts from, its segments).
fn references(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let start = if rest.starts_with("crate::") {
            Some("crate")
        } else if rest.starts_with("super::") {
            Some("super")
        } else {
            None
        };
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        match start {
            Some(kind) if boundary => {
                let mut segments = Vec::new();
                let mut j = i;
                // super::super::...
                while code[j..].starts_with("super::") {
                    segments.push("super".to_owned());
                    j += "super::".len();
                }
                if kind == "crate" {
                    j += "crate::".len();
                }
                let (paths, end) = path_tail(code, j);
                for tail in paths {
                    let mut full = segments.clone();
                    full.extend(tail);
                    out.push((kind.to_owned(), full));
                }
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    out
}

/// The paths starting at `at`: `a::b::C`, or `a::{b::C, D}` expanded.
fn path_tail(code: &str, at: usize) -> (Vec<Vec<String>>, usize) {
    let mut segs = Vec::new();
    let mut i = at;
    loop {
        let word: String = code[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !word.is_empty() {
            i += word.len();
            segs.push(word);
            if code[i..].starts_with("::") {
                i += 2;
                continue;
            }
            return (vec![segs], i);
        }
        if code[i..].starts_with('{') {
            let mut paths = Vec::new();
            i += 1;
            loop {
                let skip =
                    code[i..].len() - code[i..].trim_start_matches([' ', '\n', ',', '\t']).len();
                i += skip;
                if code[i..].starts_with('}') {
                    i += 1;
                    break;
                }
                if i >= code.len() {
                    break;
                }
                let (inner, end) = path_tail(code, i);
                for p in inner {
                    let mut full = segs.clone();
                    full.extend(p);
                    paths.push(full);
                }
                // `as` renames and `self` are part of a leaf; skip to the next item.
                let next = code[end..].find([',', '}']).map_or(code.len(), |k| end + k);
                i = next.max(end);
            }
            return (paths, i);
        }
        return (vec![segs], i);
    }
}

struct Crate {
    /// Module path to file.
    files: BTreeMap<Vec<String>, PathBuf>,
    /// For each module, the names it hands on: name to the path it names.
    reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    /// The module file a path from `from` names.
    fn resolve(&self, from: &[String], is_mod_file: bool, path: &[String]) -> Option<Vec<String>> {
        let mut abs: Vec<String> = Vec::new();
        let mut rest = path;
        if rest.first().is_some_and(|s| s == "super") {
            abs = from.to_vec();
            // `super` of module a::b is a, whether its file is `a/b.rs` or
            // `a/b/mod.rs`.
            let _ = is_mod_file;
            abs.pop();
            rest = &rest[1..];
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        abs.extend(rest.iter().cloned());
        self.file_of(&abs, 0)
    }

    /// The longest prefix of `abs` that is a module, following re-exports.
    fn file_of(&self, abs: &[String], depth: usize) -> Option<Vec<String>> {
        for n in (0..=abs.len()).rev() {
            let module = &abs[..n];
            if self.files.contains_key(module) {
                if depth < 8
                    && let Some(name) = abs.get(n)
                    && let Some(target) = self.reexports.get(module).and_then(|r| r.get(name))
                {
                    let mut next = target.clone();
                    next.extend(abs[n + 1..].iter().cloned());
                    return self.file_of(&next, depth + 1);
                }
                return Some(module.to_vec());
            }
        }
        None
    }
}

/// The strongly connected groups of more than one node in `edges`.
fn circles<T: Ord + Clone>(edges: &BTreeMap<T, BTreeSet<T>>) -> Vec<Vec<T>> {
    // Reachability by depth-first search from each node; fine for a few
    // hundred files.
    let reach = |from: &T| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for m in edges.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    stack.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<T, BTreeSet<T>> = edges.keys().map(|k| (k.clone(), reach(k))).collect();
    let mut groups: Vec<Vec<T>> = Vec::new();
    let mut placed = BTreeSet::new();
    for (a, from_a) in &reaches {
        if placed.contains(a) || !from_a.contains(a) {
            continue;
        }
        let group: Vec<T> = from_a
            .iter()
            .filter(|b| reaches.get(*b).is_some_and(|r| r.contains(a)))
            .cloned()
            .collect();
        if group.len() > 1 {
            placed.extend(group.iter().cloned());
            groups.push(group);
        }
    }
    groups
}

/// A crate's files (paths under `src`) and each one's imports of the others,
/// with the imports that name a re-export of the crate root.
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
    through_root: Vec<String>,
}

fn crate_circles(src: &Path) -> Vec<Vec<String>> {
    circles(&crate_graph(src).edges)
}

/// The strongly connected sets of modules in every folder of `src`: each
/// child of the folder (a file, or a subfolder with all under it) is one
/// node, and an import between files under two children is an arrow between
/// them.
fn module_circles(src: &Path) -> Vec<Vec<String>> {
    let graph = crate_graph(src);
    let mut folders: BTreeSet<PathBuf> = BTreeSet::new();
    for file in graph.edges.keys() {
        let mut dir = Path::new(file).parent();
        while let Some(d) = dir {
            folders.insert(d.to_path_buf());
            dir = d.parent();
        }
    }
    let mut found = Vec::new();
    for folder in folders {
        // The child of `folder` that holds `file`, if any.
        let child = |file: &str| -> Option<String> {
            let rest = Path::new(file).strip_prefix(&folder).ok()?;
            let first = rest.iter().next()?.to_string_lossy().into_owned();
            Some(if rest.iter().count() > 1 {
                folder.join(&first).display().to_string() + "/"
            } else {
                folder.join(&first).display().to_string()
            })
        };
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, tos) in &graph.edges {
            let Some(a) = child(from) else { continue };
            let entry = edges.entry(a.clone()).or_default();
            for to in tos {
                if let Some(b) = child(to)
                    && b != a
                {
                    entry.insert(b);
                }
            }
        }
        found.extend(circles(&edges));
    }
    found
}

/// Every `crate::Name` in `src` that names a re-export of the crate root.
fn imports_through_root(src: &Path) -> Vec<String> {
    crate_graph(src).through_root
}

fn crate_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let has_lib = src.join("lib.rs").exists();
    files.retain(|f| {
        let rel = f.strip_prefix(src).unwrap_or(f);
        !(rel.starts_with("bin") || has_lib && rel == Path::new("main.rs"))
    });
    let mut krate = Crate {
        files: BTreeMap::new(),
        reexports: BTreeMap::new(),
    };
    let mut texts = BTreeMap::new();
    for f in &files {
        let module = module_of(src, f);
        let text = std::fs::read_to_string(f).unwrap_or_default();
        krate.files.insert(module.clone(), f.clone());
        texts.insert(module, (f.clone(), text));
    }
    // The names each module hands on: `pub use crate::a::B;`, `pub use a::B;`.
    for (module, (_, text)) in &texts {
        let mut names = BTreeMap::new();
        for line in code_of(text).lines() {
            let Some(rest) = line.trim().strip_prefix("pub use ") else {
                continue;
            };
            let rest = rest.trim_end_matches(';');
            let (base, relative) = match rest.strip_prefix("crate::") {
                Some(r) => (Vec::new(), r),
                None => (module.clone(), rest.strip_prefix("self::").unwrap_or(rest)),
            };
            for path in path_tail(relative, 0).0 {
                if let Some(name) = path.last() {
                    let mut full = base.clone();
                    full.extend(path.iter().cloned());
                    names.insert(name.clone(), full);
                }
            }
        }
        krate.reexports.insert(module.clone(), names);
    }
    let root_names = krate
        .reexports
        .get(&Vec::new())
        .cloned()
        .unwrap_or_default();
    let mut through_root = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, (file, text)) in &texts {
        let is_mod_file = file.file_name().is_some_and(|n| n == "mod.rs");
        let name = file.strip_prefix(src).unwrap_or(file).display().to_string();
        let entry = edges.entry(name.clone()).or_default();
        for (kind, path) in references(&code_of(text)) {
            if kind == "crate"
                && !module.is_empty()
                && let Some(first) = path.first()
                && root_names.contains_key(first)
                && !krate.files.contains_key(std::slice::from_ref(first))
            {
                through_root.push(format!("{name}: crate::{}", path.join("::")));
            }
            if let Some(target) = krate.resolve(module, is_mod_file, &path)
                && &target != module
                && let Some(target_file) = krate.files.get(&target)
            {
                let target_name = target_file
                    .strip_prefix(src)
                    .unwrap_or(target_file)
                    .display()
                    .to_string();
                entry.insert(target_name);
            }
        }
    }
    Graph {
        edges,
        through_root,
    }
}

#[test]
fn no_file_of_a_crate_imports_one_that_imports_it_back() {
    let root = workspace().join("crates");
    let mut found = Vec::new();
    for e in std::fs::read_dir(&root).unwrap().flatten() {
        let src = e.path().join("src");
        if src.is_dir() {
            for c in crate_circles(&src) {
                found.push(format!(
                    "{}: {}",
                    e.file_name().to_string_lossy(),
                    c.join(" <-> ")
                ));
            }
        }
    }
    assert!(found.is_empty(), "file circles:\n{}", found.join("\n"));
}

/// Each crate's `src`, by crate folder name.
fn crate_sources() -> Vec<(String, PathBuf)> {
    let root = workspace().join("crates");
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path().join("src"),
            )
        })
        .filter(|(_, src)| src.is_dir())
        .collect();
    out.sort();
    out
}

#[test]
fn no_module_of_a_crate_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for (name, src) in crate_sources() {
        for c in module_circles(&src) {
            found.push(format!("{name}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "module circles:\n{}", found.join("\n"));
}

#[test]
fn no_file_imports_a_name_through_the_crate_root() {
    let mut found = Vec::new();
    for (name, src) in crate_sources() {
        for f in imports_through_root(&src) {
            found.push(format!("{name}/src/{f}"));
        }
    }
    assert!(
        found.is_empty(),
        "names imported through lib.rs instead of their module:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_module_of_the_python_client_imports_one_that_imports_it_back() {
    let pkg = workspace().join("python/src/rollpoint");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in std::fs::read_dir(&pkg).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(module) = name.strip_suffix(".py") else {
            continue;
        };
        if module == "__init__" {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        let entry = edges.entry(module.to_owned()).or_default();
        for line in text.lines() {
            // `from .x import ...` at any indent (a TYPE_CHECKING import counts).
            if let Some(rest) = line.trim().strip_prefix("from .")
                && let Some((target, _)) = rest.split_once(' ')
                && !target.is_empty()
            {
                entry.insert(target.split('.').next().unwrap_or(target).to_owned());
            }
        }
    }
    let found = circles(&edges);
    assert!(found.is_empty(), "module circles: {found:?}");
}

#[test]
fn the_check_finds_a_circle_it_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use a::A;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "use crate::{A, c::{self}};\npub struct B;\n",
    )
    .unwrap();
    let found = crate_circles(src);
    assert_eq!(
        found,
        [vec!["a.rs".to_owned(), "b.rs".to_owned()]],
        "through lib's re-export"
    );
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
    )
    .unwrap();
    assert!(
        crate_circles(src).is_empty(),
        "a test module's imports do not count"
    );
}

#[test]
fn the_check_finds_a_module_circle_and_a_root_import() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("a")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\npub use c::C;\n",
    )
    .unwrap();
    std::fs::write(src.join("a/mod.rs"), "mod x;\nmod y;\n").unwrap();
    // No two files import each other: a/x -> b -> a/y, a circle only between modules.
    std::fs::write(src.join("a/x.rs"), "use crate::b::B;\npub struct X;\n").unwrap();
    std::fs::write(src.join("a/y.rs"), "pub struct Y;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::a::y::Y;\npub struct B;\n").unwrap();
    std::fs::write(src.join("c.rs"), "pub struct C;\n").unwrap();
    assert!(crate_circles(src).is_empty(), "no file circle");
    assert_eq!(
        module_circles(src),
        [vec!["a/".to_owned(), "b.rs".to_owned()]],
        "the folder is one module"
    );
    assert!(imports_through_root(src).is_empty());
    std::fs::write(src.join("a/y.rs"), "use crate::C;\npub struct Y;\n").unwrap();
    assert_eq!(imports_through_root(src), ["a/y.rs: crate::C"]);
    std::fs::write(src.join("b.rs"), "pub struct B;\n").unwrap();
    assert!(module_circles(src).is_empty(), "the circle is gone");
}
