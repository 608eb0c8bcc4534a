//! The crate's module architecture, enforced by reading the sources.
//!
//! Two rules, both checked on the non-test code under `src/`:
//!
//! 1. **Layers.** The library's top-level modules may use only the top-level modules that
//!    the `layers` block of docs/ARCHITECTURE.md allows (direct edges, no transitivity), and
//!    that block lists exactly the modules src/lib.rs declares.
//! 2. **No sibling cycles.** At every level of the module tree (the crate root included),
//!    the children of one module never import each other in a cycle. This holds for the
//!    library and for the binary (src/main.rs and its modules); the binary's `memplan::`
//!    paths are the library and are not checked.
//!
//! Why: a layered crate can be read, tested and changed one layer at a time, and a module
//! that is not tangled with its siblings can be moved or split alone. Without a test, each
//! shortcut (`use crate::report::…` from the executor, two sibling files importing each
//! other) looks harmless and the layering erodes.
//!
//! How: `tests/support/rust_source.rs` reads each file (a small lexer drops comments, doc
//! comments, strings and chars; the items under `#[cfg(test)]` and `#[test]` are dropped
//! too) and lists its `use` declarations and `crate::`/`self::`/`super::` paths (and paths
//! that start with a child module's name); this file resolves them. A path resolves to the
//! deepest module of the file tree it names, following item-level `use` imports
//! (`crate::parse` is `crate::ir::parse::parse` through src/lib.rs's `pub use`;
//! `super::Violation` is `checker::violation` when checker/mod.rs re-exports it). Where a
//! module and a function share a name (`crate::plan`), a path followed by `::` is the
//! module, a path in code is the function, and a `use` of the name is the module only if
//! the file then writes `name::…`.
//!
//! Known limits: macros are not expanded (paths inside macro invocations are read as
//! written; a macro defined in one module and invoked in another counts where it is
//! written); names brought in by a glob (`use super::*`) are not traced, the glob counts
//! as a use of the module it names; `#[path]` module declarations are refused; items under
//! `#[cfg(test)]` inside an expression may be skipped a little too far.
//!
//! The rules live in docs/ARCHITECTURE.md; this file only reads them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

#[path = "support/rust_source.rs"]
mod rust_source;
use rust_source::{ModPath, PathKind, Scan, WrittenPath, scan_source};

// ------------------------------------------------------------------------------------------
// The checks
// ------------------------------------------------------------------------------------------

#[test]
fn layers_follow_docs_architecture() {
    let table = match read_layer_table(&read_repo_file("docs/ARCHITECTURE.md")) {
        Ok(table) => table,
        Err(problems) => fail("docs/ARCHITECTURE.md's layers block is unusable", &problems),
    };
    let library = load_library();
    let mut problems = library.problems.clone();
    problems.extend(layer_violations(&library, &table));
    if !problems.is_empty() {
        fail("the library does not follow docs/ARCHITECTURE.md's layers", &problems);
    }
}

#[test]
fn no_import_cycles_between_sibling_modules() {
    let mut problems = Vec::new();
    for krate in std::iter::once(load_library()).chain(load_binaries()) {
        problems.extend(krate.problems.clone());
        problems.extend(sibling_cycles(&krate));
    }
    if !problems.is_empty() {
        fail("sibling modules import each other in a cycle", &problems);
    }
}

/// What an op is lives in its row (docs/ARCHITECTURE.md, "Where an op's facts live"):
/// outside `src/ir/ops`, only the files of the `op-kinds` block name `OpKind` variants, and
/// no `match` on an op's kind has a wildcard arm.
#[test]
fn op_facts_live_in_op_rows() {
    let allowed = match read_op_kinds_block(&read_repo_file("docs/ARCHITECTURE.md")) {
        Ok(allowed) => allowed,
        Err(problems) => fail("docs/ARCHITECTURE.md's op-kinds block is unusable", &problems),
    };
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let files: Vec<String> =
        std::iter::once(load_library()).chain(load_binaries()).flat_map(|krate| krate.files).map(|file| file.path).collect();
    for name in files {
        if name.starts_with("src/ir/ops/") {
            continue;
        }
        let tokens = rust_source::code_tokens(&read_repo_file(&name));
        let names_a_variant = variant_lines(&tokens);
        match allowed.iter().find(|(path, _)| name == *path || (path.ends_with('/') && name.starts_with(path.as_str()))) {
            Some((path, _)) => {
                used.insert(path.clone());
            }
            None => {
                for line in names_a_variant {
                    problems.push(format!("{name}:{line}: names an OpKind variant; read the fact from the op's row instead, or list the file in docs/ARCHITECTURE.md's op-kinds block with what it does"));
                }
            }
        }
        // (src/testing/ draws ops for random steps: a generator may pick among some kinds.)
        for line in wildcard_kind_arms(&tokens).into_iter().filter(|_| !name.starts_with("src/testing/")) {
            problems.push(format!("{name}:{line}: a `_ =>` arm in a match on an op's kind: name every kind, so that a new op must be decided here"));
        }
    }
    for (path, _) in &allowed {
        if !used.contains(path) {
            problems.push(format!("docs/ARCHITECTURE.md's op-kinds block lists `{path}`, which is no file or directory of src/"));
        }
    }
    if !problems.is_empty() {
        fail("op facts outside the op table", &problems);
    }
}

/// The `op-kinds` block: (path, why) per line.
fn read_op_kinds_block(doc: &str) -> Result<Vec<(String, String)>, Vec<String>> {
    let mut lines = Vec::new();
    let mut blocks = 0;
    let mut inside = false;
    for (index, line) in doc.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            inside = !inside && trimmed.trim_start_matches('`').trim() == "op-kinds";
            blocks += usize::from(inside);
        } else if inside && !trimmed.is_empty() {
            lines.push((index + 1, trimmed));
        }
    }
    if blocks != 1 {
        return Err(vec![format!("docs/ARCHITECTURE.md must hold exactly one ```op-kinds block; it holds {blocks}")]);
    }
    let mut allowed = Vec::new();
    let mut problems = Vec::new();
    for (line, text) in lines {
        match text.split_once(':') {
            Some((path, why)) if path.starts_with("src/") && !why.trim().is_empty() => allowed.push((path.to_string(), why.trim().to_string())),
            _ => problems.push(format!("docs/ARCHITECTURE.md:{line}: expected `src/path: what the file does with op kinds`, found `{text}`")),
        }
    }
    if problems.is_empty() { Ok(allowed) } else { Err(problems) }
}

/// Lines naming an `OpKind` variant: `OpKind::Name` (a capitalised name), or a glob
/// import of the variants (`use …OpKind::*`).
fn variant_lines(tokens: &[(String, usize)]) -> Vec<usize> {
    let mut lines = Vec::new();
    for (i, window) in tokens.windows(3).enumerate() {
        let [(a, line), (b, _), (c, _)] = window else { continue };
        if a == "OpKind" && b == "::" && (c == "*" || c.starts_with(|ch: char| ch.is_ascii_uppercase())) {
            lines.push(*line);
        }
        let _ = i;
    }
    lines.dedup();
    lines
}

/// Lines of `_ =>` arms at the top level of a `match` on an op's kind: its scrutinee names
/// a `kind` (`match op.kind {`, `match (kind, slot) {`; not `kind()` or `kind.…`) and its
/// arms name `OpKind` (or the file imports the variants: `use OpKind::*`).
fn wildcard_kind_arms(tokens: &[(String, usize)]) -> Vec<usize> {
    let globbed = tokens.windows(3).any(|w| w[0].0 == "OpKind" && w[1].0 == "::" && w[2].0 == "*");
    let mut lines = Vec::new();
    for start in (0..tokens.len()).filter(|&i| tokens[i].0 == "match") {
        let Some(open) = (start + 1..tokens.len()).find(|&i| tokens[i].0 == "{") else { continue };
        let on_kind = (start + 1..open).any(|i| tokens[i].0 == "kind" && !matches!(tokens[i + 1].0.as_str(), "." | "("));
        if !on_kind {
            continue;
        }
        let (mut depth, mut arms, mut names_op_kind) = (0usize, Vec::new(), false);
        for i in open..tokens.len() {
            match tokens[i].0.as_str() {
                "{" | "(" | "[" => depth += 1,
                "}" | ")" | "]" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                "OpKind" => names_op_kind = true,
                "_" if depth == 1 && tokens.get(i + 1).is_some_and(|t| t.0 == "=") && tokens.get(i + 2).is_some_and(|t| t.0 == ">") => {
                    arms.push(tokens[i].1)
                }
                _ => {}
            }
        }
        if names_op_kind || globbed {
            lines.extend(arms);
        }
    }
    lines
}

#[test]
fn op_kind_uses_and_wildcard_arms_are_found() {
    let source = "use crate::ir::ops::OpKind;\n\
                  fn f(kind: OpKind) -> u8 {\n\
                  match kind { OpKind::Add => 1, _ => 2 }\n\
                  }\n\
                  fn g(op: &Op) -> bool { op.kind.def().view.is_some() }\n\
                  fn h(x: u8) -> u8 { match x { 0 => 1, _ => 2 } }\n\
                  fn i(e: E, s: S) -> u8 { match e.kind() { K::A => 1, _ => 2 } + match (s.kind, 1) { (K::B, _) => 1, _ => 2 } }\n\
                  #[cfg(test)]\nmod tests { fn t() { let _ = OpKind::Mul; } }\n";
    let tokens = rust_source::code_tokens(source);
    assert_eq!(variant_lines(&tokens), vec![3]);
    // Not `kind()` (an io error's), nor a match on another kind's values (K::A).
    assert_eq!(wildcard_kind_arms(&tokens), vec![3]);
    let glob = rust_source::code_tokens("fn f() { use OpKind::*; match kind { Add => 1, Sub => 2 }; }\n");
    assert_eq!((variant_lines(&glob), wildcard_kind_arms(&glob)), (vec![1], vec![]));
}

/// Prints what the checks above see: for each top-level module of the library, the
/// top-level modules it uses, then every sibling edge at every level, with an example.
/// A debugging aid: `cargo test --test architecture print_ -- --nocapture`.
#[test]
fn print_module_graph() {
    let library = load_library();
    let references = library.references();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in library.modules.iter().filter(|module| module.len() == 1) {
        uses.entry(module[0].clone()).or_default();
    }
    for reference in &references {
        if let (Some(from), Some(to)) = (reference.from.first(), reference.target.first())
            && from != to
        {
            uses.entry(from.clone()).or_default().insert(to.clone());
        }
    }
    println!("top-level modules of the library and the top-level modules they use:");
    for (module, used) in &uses {
        println!("  {module}: {}", used.iter().cloned().collect::<Vec<_>>().join(" "));
    }
    for krate in std::iter::once(library).chain(load_binaries()) {
        println!("sibling edges in the {}:", krate.label);
        for (parent, edges) in sibling_edges(&krate.references()) {
            for ((from, to), example) in edges {
                println!("  {}: {from} -> {to}  ({})", display_module(&parent), example.describe());
            }
        }
    }
}

/// Panics with `title` and every problem, one per line.
fn fail(title: &str, problems: &[String]) -> ! {
    panic!("{title}: {} problem(s)\n\n{}\n", problems.len(), problems.join("\n"));
}

/// Every reference from one top-level module of the library into another that the layer
/// table does not allow, and every mismatch between the table and src/lib.rs.
fn layer_violations(library: &Crate, table: &LayerTable) -> Vec<String> {
    let mut problems = Vec::new();
    let declared: BTreeSet<String> =
        library.modules.iter().filter(|module| module.len() == 1).map(|module| module[0].clone()).collect();
    for module in &declared {
        if !table.allowed.contains_key(module) {
            problems.push(format!(
                "src/lib.rs declares module `{module}` but docs/ARCHITECTURE.md's layers block does not list it"
            ));
        }
    }
    for module in table.allowed.keys() {
        if !declared.contains(module) {
            problems
                .push(format!("docs/ARCHITECTURE.md lists module `{module}` but src/lib.rs declares no such module"));
        }
    }
    // One line per file, line and module used: `use crate::b::{C, D};` is one problem.
    let mut forbidden: BTreeMap<(String, usize, String, String), Vec<String>> = BTreeMap::new();
    for reference in library.references() {
        let (Some(from), Some(to)) = (reference.from.first(), reference.target.first()) else {
            continue; // src/lib.rs itself, or an item of the crate root
        };
        // A module the table does not list is reported above, once.
        let Some(allowed) = table.allowed.get(from) else { continue };
        if from != to && !allowed.contains(to) {
            let key = (reference.file.clone(), reference.line, from.clone(), to.clone());
            forbidden.entry(key).or_default().push(format!("`{}`{}", reference.written, reference.resolution_note()));
        }
    }
    for ((file, line, from, _), paths) in forbidden {
        let allowed: Vec<&str> = table.allowed[&from].iter().map(String::as_str).collect();
        problems.push(format!(
            "{file}:{line}: module `{from}` uses {} but docs/ARCHITECTURE.md allows {from} -> {{{}}}",
            paths.join(", "),
            allowed.join(", ")
        ));
    }
    problems
}

/// Every cycle among the children of one module, at every level of `krate`'s module tree:
/// the chain of modules, then one example reference per edge.
fn sibling_cycles(krate: &Crate) -> Vec<String> {
    let mut problems = Vec::new();
    for (parent, edges) in sibling_edges(&krate.references()) {
        let graph: BTreeMap<String, BTreeSet<String>> = edges.keys().fold(BTreeMap::new(), |mut graph, (from, to)| {
            graph.entry(from.clone()).or_default().insert(to.clone());
            graph
        });
        for cycle in find_cycles(&graph) {
            let chain: Vec<String> = cycle.iter().map(|child| display_child(&parent, child)).collect();
            let mut message = format!("{}: import cycle {} -> {}", krate.label, chain.join(" -> "), chain[0]);
            for (k, from) in cycle.iter().enumerate() {
                let to = &cycle[(k + 1) % cycle.len()];
                let example = &edges[&(from.clone(), to.clone())];
                message.push_str(&format!(
                    "\n    {} -> {}: {}",
                    display_child(&parent, from),
                    display_child(&parent, to),
                    example.describe()
                ));
            }
            problems.push(message);
        }
    }
    problems
}

/// The edges between siblings, by parent: child `a` of `P` -> child `b` of `P` when code
/// in `a`'s subtree uses an item in `b`'s subtree, with the first such reference (files
/// in path order, lines in order). A use of an ancestor's own items is no sibling edge.
fn sibling_edges(references: &[Reference]) -> BTreeMap<ModPath, BTreeMap<(String, String), Reference>> {
    let mut edges: BTreeMap<ModPath, BTreeMap<(String, String), Reference>> = BTreeMap::new();
    for reference in references {
        let (from, to) = (&reference.from, &reference.target);
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common < from.len() && common < to.len() {
            edges
                .entry(from[..common].to_vec())
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_insert_with(|| reference.clone());
        }
    }
    edges
}

/// Every elementary cycle of `graph`, each once, starting at its smallest node.
fn find_cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    /// Extends `path` (which starts at `start`) through nodes after `start`.
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &String,
        path: &mut Vec<String>,
        cycles: &mut Vec<Vec<String>>,
    ) {
        let last = path.last().unwrap().clone();
        for next in graph.get(&last).into_iter().flatten() {
            if next == start {
                cycles.push(path.clone());
            } else if next > start && !path.contains(next) && cycles.len() < MAX_CYCLES {
                path.push(next.clone());
                walk(graph, start, path, cycles);
                path.pop();
            }
        }
    }
    /// Enough to show the tangle; the graphs are small and this is never reached in practice.
    const MAX_CYCLES: usize = 100;

    let mut cycles = Vec::new();
    for start in graph.keys() {
        walk(graph, start, &mut vec![start.clone()], &mut cycles);
    }
    cycles
}

/// `crate::exec::cuda::view` for the child `view` of `exec::cuda`.
fn display_child(parent: &[String], child: &str) -> String {
    let mut path = parent.to_vec();
    path.push(child.to_string());
    display_module(&path)
}

/// `crate::a::b`, or `crate` for the root.
fn display_module(module: &[String]) -> String {
    std::iter::once("crate").chain(module.iter().map(String::as_str)).collect::<Vec<_>>().join("::")
}

// ------------------------------------------------------------------------------------------
// The layer table
// ------------------------------------------------------------------------------------------

/// docs/ARCHITECTURE.md's `layers` block: for each top-level module of the library, the
/// top-level modules it may use.
#[derive(Debug)]
struct LayerTable {
    allowed: BTreeMap<String, BTreeSet<String>>,
}

/// Reads the one fenced code block whose info string is `layers`: one line per module,
/// `name: dep dep …`; `#` starts a comment line.
fn read_layer_table(doc: &str) -> Result<LayerTable, Vec<String>> {
    let mut blocks: Vec<Vec<(usize, &str)>> = Vec::new();
    let mut in_fence = false;
    let mut in_layers = false;
    for (index, line) in doc.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            if in_fence {
                in_fence = false;
                in_layers = false;
            } else {
                in_fence = true;
                in_layers = trimmed.trim_start_matches('`').trim() == "layers";
                if in_layers {
                    blocks.push(Vec::new());
                }
            }
        } else if in_layers {
            blocks.last_mut().unwrap().push((index + 1, trimmed));
        }
    }
    if blocks.len() != 1 {
        return Err(vec![format!(
            "docs/ARCHITECTURE.md must hold exactly one ```layers block; it holds {}",
            blocks.len()
        )]);
    }

    let mut allowed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for &(line, text) in &blocks[0] {
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let Some((name, deps)) = text.split_once(':') else {
            problems.push(format!("docs/ARCHITECTURE.md:{line}: expected `module: dep dep ...`, found `{text}`"));
            continue;
        };
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            problems.push(format!("docs/ARCHITECTURE.md:{line}: `{name}` is not a module name"));
            continue;
        }
        if allowed.contains_key(name) {
            problems.push(format!("docs/ARCHITECTURE.md:{line}: module `{name}` is listed twice"));
            continue;
        }
        allowed.insert(name.to_string(), deps.split_whitespace().map(str::to_string).collect());
    }
    for (name, deps) in &allowed {
        for dep in deps {
            if !allowed.contains_key(dep) {
                problems.push(format!("docs/ARCHITECTURE.md: `{name}` may use `{dep}`, which has no line of its own"));
            }
        }
    }
    if problems.is_empty() { Ok(LayerTable { allowed }) } else { Err(problems) }
}

// ------------------------------------------------------------------------------------------
// Crates, their files and their references
// ------------------------------------------------------------------------------------------

/// One crate of the package: its module tree (from the `mod` declarations of its non-test
/// code) and what each file uses.
struct Crate {
    /// `library` or `binary src/main.rs`: how reports name the crate.
    label: String,
    /// Every module that has a file, the root excluded.
    modules: BTreeSet<ModPath>,
    /// The non-test files, in path order.
    files: Vec<SourceFile>,
    /// For each module, the names its item-level `use` declarations bring in, and what
    /// they name (absolute): `[] -> {"parse" -> ["ir", "parse", "parse"]}` for src/lib.rs.
    imports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    /// The functions, constants, statics and macros defined at each module's item level, by
    /// path: `["ir", "parse", "syntax"]` for `fn syntax` in src/ir/parse/mod.rs.
    values: BTreeSet<ModPath>,
    /// Declarations this test cannot follow.
    problems: Vec<String>,
}

/// One source file, scanned.
struct SourceFile {
    /// Relative to the package: `src/exec/cuda/view.rs`.
    path: String,
    /// The module the file is: `src/a/b.rs` and `src/a/b/mod.rs` are both `a::b`.
    module: ModPath,
    scan: Scan,
}

/// A use of a module's item by a file's (non-test) code.
#[derive(Clone, Debug)]
struct Reference {
    file: String,
    line: usize,
    /// The module of the file.
    from: ModPath,
    /// The path as written (groups flattened): `super::view::View`.
    written: String,
    /// The path without `self`/`super`: `crate::exec::cuda::view::View`.
    absolute: String,
    /// The deepest module the path names: `exec::cuda::view`.
    target: ModPath,
}

impl Reference {
    /// ` (= crate::a::b::C)` when the path as written does not show where it leads.
    fn resolution_note(&self) -> String {
        let target = display_module(&self.target);
        if self.absolute.starts_with(&format!("{target}::")) || self.absolute == target {
            if self.absolute == self.written { String::new() } else { format!(" (= `{}`)", self.absolute) }
        } else {
            format!(" (into `{target}`)")
        }
    }

    /// `src/a.rs:12 uses `crate::b::C``.
    fn describe(&self) -> String {
        format!("{}:{} uses `{}`{}", self.file, self.line, self.written, self.resolution_note())
    }
}

impl Crate {
    /// Builds the crate from its scanned files.
    fn new(label: &str, modules: BTreeSet<ModPath>, mut files: Vec<SourceFile>, problems: Vec<String>) -> Crate {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut imports: BTreeMap<ModPath, BTreeMap<String, ModPath>> = BTreeMap::new();
        for file in &files {
            for path in &file.scan.paths {
                let (PathKind::Use, Some(name), true) = (&path.kind, &path.alias, path.item_level) else {
                    continue;
                };
                if let Some(absolute) = make_absolute(path, &modules) {
                    imports.entry(path.scope.clone()).or_default().insert(name.clone(), absolute);
                }
            }
        }
        let mut values = BTreeSet::new();
        for file in &files {
            for (scope, name) in &file.scan.values {
                let mut path = scope.clone();
                path.push(name.clone());
                values.insert(path);
            }
        }
        Crate { label: label.to_string(), modules, files, imports, values, problems }
    }

    /// Every reference of every file into the crate, in file and line order.
    fn references(&self) -> Vec<Reference> {
        let mut references = Vec::new();
        for file in &self.files {
            for path in &file.scan.paths {
                let Some(absolute) = make_absolute(path, &self.modules) else { continue };
                let leaf_may_be_module = match path.kind {
                    PathKind::Code => false,
                    PathKind::Glob => true,
                    PathKind::Use => !self.is_module_and_value(&absolute) || file.uses_as_module(path),
                };
                let mut written = path.segments.join("::");
                if matches!(path.kind, PathKind::Glob) {
                    written.push_str("::*");
                }
                references.push(Reference {
                    file: file.path.clone(),
                    line: path.line,
                    from: file.module.clone(),
                    written,
                    absolute: display_module(&absolute) + if matches!(path.kind, PathKind::Glob) { "::*" } else { "" },
                    target: self.resolve(&absolute, leaf_may_be_module, 0),
                });
            }
        }
        references
    }

    /// Whether `path` names both a module and a function, constant or macro: `crate::plan`
    /// (`pub mod plan;` and `pub use passes::plan;`), `super::syntax` (`mod syntax;` and
    /// `fn syntax`). Only a value can share a module's name, so an import of that name in
    /// the parent counts.
    fn is_module_and_value(&self, path: &[String]) -> bool {
        let Some((name, parent)) = path.split_last() else { return false };
        let imported = self.imports.get(parent).is_some_and(|names| names.contains_key(name));
        self.modules.contains(path) && (imported || self.values.contains(path))
    }

    /// The deepest module an absolute path names, following imports. A path's last segment
    /// is a module only in a `use` (in code, `crate::plan(…)` is the function that src/lib.rs
    /// re-exports, while `crate::plan::Plan` is in the module `plan`).
    fn resolve(&self, path: &[String], leaf_may_be_module: bool, hops: usize) -> ModPath {
        /// Imports that import imports; more than this is a loop.
        const MAX_HOPS: usize = 16;
        let mut module: ModPath = Vec::new();
        for (k, segment) in path.iter().enumerate() {
            let is_leaf = k + 1 == path.len();
            let mut child = module.clone();
            child.push(segment.clone());
            if self.modules.contains(&child) && (!is_leaf || leaf_may_be_module) {
                module = child;
                continue;
            }
            let imported = self.imports.get(&module).and_then(|names| names.get(segment));
            if let (Some(target), true) = (imported, hops < MAX_HOPS) {
                let mut followed = target.clone();
                followed.extend_from_slice(&path[k + 1..]);
                return self.resolve(&followed, leaf_may_be_module, hops + 1);
            }
            break;
        }
        module
    }
}

/// The path without `crate`, `self` and `super`, or `None` when it does not start in this
/// crate (`std::…`, a type's associated item, a local enum's variants).
fn make_absolute(path: &WrittenPath, modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let segments = &path.segments;
    let first = segments.first()?.as_str();
    let (mut base, mut rest): (ModPath, &[String]) = match first {
        "crate" => (Vec::new(), &segments[1..]),
        "self" => (path.scope.clone(), &segments[1..]),
        "super" => (path.scope.clone(), &segments[..]),
        _ => {
            // A child module of the current one, named without `self::` (2018 paths).
            let mut child = path.scope.clone();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
            (path.scope.clone(), &segments[..])
        }
    };
    while rest.first().map(String::as_str) == Some("super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The library: src/lib.rs and the files it declares.
fn load_library() -> Crate {
    load_crate("library", &package_dir().join("src/lib.rs"))
}

/// Each binary: src/main.rs, src/bin/*.rs and src/bin/*/main.rs, with their files.
fn load_binaries() -> Vec<Crate> {
    let src = package_dir().join("src");
    let mut roots = vec![src.join("main.rs")];
    if let Ok(entries) = fs::read_dir(src.join("bin")) {
        let mut entries: Vec<PathBuf> = entries.map(|entry| entry.unwrap().path()).collect();
        entries.sort();
        for entry in entries {
            if entry.is_dir() {
                roots.push(entry.join("main.rs"));
            } else if entry.extension().is_some_and(|extension| extension == "rs") {
                roots.push(entry);
            }
        }
    }
    roots
        .into_iter()
        .filter(|root| root.is_file())
        .map(|root| {
            let label = format!("binary {}", relative_path(&root));
            load_crate(&label, &root)
        })
        .collect()
}

/// Reads the crate rooted at `root` by following its non-test `mod` declarations.
fn load_crate(label: &str, root: &Path) -> Crate {
    let mut modules = BTreeSet::new();
    let mut files = Vec::new();
    let mut problems = Vec::new();
    let mut queue: Vec<(PathBuf, ModPath)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((file, module)) = queue.pop() {
        let path = relative_path(&file);
        let text = fs::read_to_string(&file).unwrap_or_else(|error| panic!("cannot read {path}: {error}"));
        let source = SourceFile::parse(&path, module.clone(), &text);
        for &line in &source.scan.path_attributes {
            problems
                .push(format!("{path}:{line}: a #[path] module declaration; tests/architecture.rs cannot follow it"));
        }
        // `mod x;` in src/lib.rs, src/a/mod.rs or src/a.rs: src/x.rs, src/a/x.rs, src/a/x.rs.
        let is_dir_owner = module.is_empty() || file.file_name().is_some_and(|name| name == "mod.rs");
        let dir = if is_dir_owner { file.parent().unwrap().to_path_buf() } else { file.with_extension("") };
        for declaration in &source.scan.declarations {
            let mut base = dir.clone();
            for inline in &declaration.module[module.len()..declaration.module.len() - 1] {
                base.push(inline);
            }
            let name = declaration.module.last().unwrap();
            let candidates = [base.join(format!("{name}.rs")), base.join(name).join("mod.rs")];
            match candidates.into_iter().find(|candidate| candidate.is_file()) {
                Some(child_file) => {
                    modules.insert(declaration.module.clone());
                    queue.push((child_file, declaration.module.clone()));
                }
                None => problems.push(format!(
                    "{path}:{}: `mod {name};` has neither {name}.rs nor {name}/mod.rs",
                    declaration.line
                )),
            }
        }
        files.push(source);
    }
    Crate::new(label, modules, files, problems)
}

impl SourceFile {
    /// Whether the name a `use` brings in is used as a module in this file (`syntax::Ast`),
    /// not only called (`syntax(…)`).
    fn uses_as_module(&self, import: &WrittenPath) -> bool {
        let Some(name) = &import.alias else { return false };
        self.scan.paths.iter().any(|path| path.segments.len() > 1 && &path.segments[0] == name)
    }

    /// Scans the non-test code of `text`, the file of `module`.
    fn parse(path: &str, module: ModPath, text: &str) -> SourceFile {
        let scan = scan_source(text, &module);
        SourceFile { path: path.to_string(), module, scan }
    }
}

fn package_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_repo_file(path: &str) -> String {
    fs::read_to_string(package_dir().join(path)).unwrap_or_else(|error| panic!("cannot read {path}: {error}"))
}

/// `src/a/b.rs` for a file of the package.
fn relative_path(file: &Path) -> String {
    let relative = file.strip_prefix(package_dir()).unwrap_or(file);
    relative.components().map(|part| part.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

// ------------------------------------------------------------------------------------------
// The scanner, on snippets
// ------------------------------------------------------------------------------------------

/// The references that a file of module `module` (`a::b`, or an empty string for the root)
/// makes, in a crate whose modules are `modules`, as `LINE: written -> target`.
fn references_in(source: &str, module: &str, modules: &[&str]) -> Vec<String> {
    let to_path = |text: &str| -> ModPath { text.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect() };
    let modules: BTreeSet<ModPath> = modules.iter().map(|module| to_path(module)).collect();
    let file = SourceFile::parse("src/snippet.rs", to_path(module), source);
    let krate = Crate::new("snippet", modules, vec![file], Vec::new());
    krate
        .references()
        .iter()
        .map(|reference| format!("{}: {} -> {}", reference.line, reference.written, display_module(&reference.target)))
        .collect()
}

#[test]
fn scanner_reads_nested_groups_self_renames_and_globs() {
    let source = "use crate::a::{b::{C, d}, e};\n\
                  pub(crate) use crate::a::{self, F as G};\n\
                  pub(super) use crate::a::b::*;\n\
                  use crate::a::b::{self as bee};\n\
                  use std::collections::BTreeMap;\n";
    assert_eq!(
        references_in(source, "x", &["a", "a::b", "x"]),
        [
            "1: crate::a::b::C -> crate::a::b",
            "1: crate::a::b::d -> crate::a::b",
            "1: crate::a::e -> crate::a",
            "2: crate::a -> crate::a",
            "2: crate::a::F -> crate::a",
            "3: crate::a::b::* -> crate::a::b",
            "4: crate::a::b -> crate::a::b",
        ]
    );
}

#[test]
fn scanner_reads_paths_in_code_types_impls_and_macros() {
    let source = "fn f(x: crate::a::B) -> Vec<crate::c::D> {\n\
                  \x20   let y = crate::a::b::f(1);\n\
                  \x20   let z = crate::c::E { x: 1 };\n\
                  \x20   println!(\"{}\", crate::c::g());\n\
                  \x20   $crate::c::h!()\n\
                  }\n\
                  impl crate::a::T for S {}\n\
                  fn g() { Self::x(); self.y(); Vec::<u8>::new(); }\n";
    assert_eq!(
        references_in(source, "x", &["a", "a::b", "c", "x"]),
        [
            "1: crate::a::B -> crate::a",
            "1: crate::c::D -> crate::c",
            "2: crate::a::b::f -> crate::a::b",
            "3: crate::c::E -> crate::c",
            "4: crate::c::g -> crate::c",
            "5: crate::c::h -> crate::c",
            "7: crate::a::T -> crate::a",
        ]
    );
}

#[test]
fn scanner_resolves_self_super_and_child_paths() {
    // The file src/a/b.rs (or src/a/b/mod.rs): `super` is `a`.
    let source = "use super::c::D;\n\
                  use super::super::e::F;\n\
                  use self::g::H;\n\
                  use g::I;\n\
                  fn f() { super::c::d(); self::g::h(); g::i(); }\n\
                  mod inner { use super::g::J; use super::super::K; }\n";
    assert_eq!(
        references_in(source, "a::b", &["a", "a::b", "a::b::g", "a::c", "e"]),
        [
            "1: super::c::D -> crate::a::c",
            "2: super::super::e::F -> crate::e",
            "3: self::g::H -> crate::a::b::g",
            "4: g::I -> crate::a::b::g",
            "5: super::c::d -> crate::a::c",
            "5: self::g::h -> crate::a::b::g",
            "5: g::i -> crate::a::b::g",
            "6: super::g::J -> crate::a::b::g",
            "6: super::super::K -> crate::a",
        ]
    );
}

#[test]
fn scanner_follows_imports_and_tells_a_module_from_a_function_of_the_same_name() {
    // Like src/lib.rs: `crate::plan` is both the module `plan` and the function
    // `passes::plan`; `crate::Graph` is `ir::graph::Graph`.
    let source = "pub mod plan;\n\
                  pub use passes::plan;\n\
                  pub use ir::graph::Graph;\n\
                  fn f() { crate::plan(); crate::plan::Plan::new(); crate::Graph::new(); }\n\
                  use crate::plan as the_module;\n\
                  fn g() { the_module::Plan::new(); }\n\
                  use crate::plan as the_function;\n\
                  fn h() { the_function(); }\n";
    assert_eq!(
        references_in(source, "", &["ir", "ir::graph", "passes", "plan"]),
        [
            "2: passes::plan -> crate::passes",
            "3: ir::graph::Graph -> crate::ir::graph",
            "4: crate::plan -> crate::passes",
            "4: crate::plan::Plan::new -> crate::plan",
            "4: crate::Graph::new -> crate::ir::graph",
            "5: crate::plan -> crate::plan",
            "7: crate::plan -> crate::passes",
        ]
    );
}

#[test]
fn scanner_tells_a_child_module_from_a_parents_function_of_the_same_name() {
    // Like src/ir/parse: mod.rs declares `mod syntax;` and defines `fn syntax`; lex.rs
    // imports the name to call the function, resolve.rs to use the module.
    let parent = "mod lex;\nmod resolve;\nmod syntax;\npub(crate) fn syntax() {}\n";
    let lex = "use super::{Error, syntax};\nfn f() { syntax(); }\n";
    let resolve = "use super::syntax;\nfn f() { syntax::Ast::new(); }\n";
    let files =
        [("src/p/mod.rs", "p", parent), ("src/p/lex.rs", "p::lex", lex), ("src/p/resolve.rs", "p::resolve", resolve)];
    let to_path = |text: &str| -> ModPath { text.split("::").map(str::to_string).collect() };
    let modules = ["p", "p::lex", "p::resolve", "p::syntax"].iter().map(|module| to_path(module)).collect();
    let files = files.iter().map(|&(path, module, text)| SourceFile::parse(path, to_path(module), text)).collect();
    let krate = Crate::new("snippet", modules, files, Vec::new());
    let targets: Vec<String> = krate
        .references()
        .iter()
        .map(|r| format!("{}:{}: {} -> {}", r.file, r.line, r.written, display_module(&r.target)))
        .collect();
    assert_eq!(
        targets,
        [
            "src/p/lex.rs:1: super::Error -> crate::p",
            "src/p/lex.rs:1: super::syntax -> crate::p",
            "src/p/resolve.rs:1: super::syntax -> crate::p::syntax",
        ]
    );
}

#[test]
fn scanner_follows_a_parents_imports_but_not_its_own_items() {
    // src/a/mod.rs imports `View` from its child `view`; its child `gemm` uses both.
    let parent = SourceFile::parse("src/a/mod.rs", vec!["a".into()], "pub use view::View;\npub struct Own;\n");
    let child = SourceFile::parse("src/a/gemm.rs", vec!["a".into(), "gemm".into()], "use super::{View, Own};\n");
    let modules = [vec!["a".to_string()], vec!["a".into(), "gemm".into()], vec!["a".into(), "view".into()]];
    let krate = Crate::new("snippet", modules.into_iter().collect(), vec![parent, child], Vec::new());
    let targets: Vec<String> =
        krate.references().iter().map(|r| format!("{} -> {}", r.written, display_module(&r.target))).collect();
    // Files in path order: src/a/gemm.rs, then src/a/mod.rs.
    assert_eq!(targets, ["super::View -> crate::a::view", "super::Own -> crate::a", "view::View -> crate::a::view"]);
    let edges = sibling_edges(&krate.references());
    assert_eq!(edges.len(), 1);
    assert!(edges[&vec!["a".to_string()]].contains_key(&("gemm".to_string(), "view".to_string())));
}

#[test]
fn scanner_ignores_comments_strings_chars_and_doc_links() {
    let source = "//! See [`crate::a::A`].\n\
                  /// Uses [`crate::a::B`] and `crate::a::C`.\n\
                  /* crate::a::D /* nested crate::a::E */ crate::a::F */\n\
                  fn f<'a>(x: &'a str) -> char {\n\
                  \x20   let s = \"crate::a::G \\\" crate::a::H\";\n\
                  \x20   let r = r#\"crate::a::I \" crate::a::J\"#;\n\
                  \x20   let b = (b\"crate::a::K\", br\"crate::a::L\", b'\"', '\\'', '\"');\n\
                  \x20   let c = '{'; let d: &'a str = \"\"; // crate::a::M\n\
                  \x20   crate::b::ok(c, 'x', r\"crate::a::N\")\n\
                  }\n";
    assert_eq!(references_in(source, "x", &["a", "b", "x"]), ["9: crate::b::ok -> crate::b"]);
}

#[test]
fn scanner_skips_test_code_to_its_matching_brace() {
    let source = "use crate::a::A;\n\
                  #[cfg(test)]\n\
                  mod tests {\n\
                  \x20   use crate::b::B;\n\
                  \x20   fn f() -> char { let s = \"}\"; let c = '}'; /* } */ '{' }\n\
                  \x20   fn g<'a>(x: &'a str) { crate::b::g() }\n\
                  }\n\
                  #[cfg(test)]\n\
                  #[path = \"../elsewhere.rs\"]\n\
                  mod helpers;\n\
                  #[test]\n\
                  fn lone_test() { crate::b::h(); }\n\
                  #[cfg(all(test, feature = \"cuda\"))]\n\
                  use crate::b::C;\n\
                  struct S { #[cfg(test)] x: crate::b::D, y: crate::a::E }\n\
                  #[cfg(any(test, feature = \"testing\"))]\n\
                  use crate::a::F;\n\
                  #[cfg(feature = \"cuda\")]\n\
                  use crate::a::G;\n\
                  #[cfg(not(test))]\n\
                  use crate::a::H;\n\
                  fn after() { crate::a::i(); }\n";
    assert_eq!(
        references_in(source, "x", &["a", "b", "x"]),
        [
            "1: crate::a::A -> crate::a",
            "15: crate::a::E -> crate::a",
            "17: crate::a::F -> crate::a",
            "19: crate::a::G -> crate::a",
            "21: crate::a::H -> crate::a",
            "22: crate::a::i -> crate::a",
        ]
    );
    let scan = SourceFile::parse("src/x.rs", vec!["x".into()], source).scan;
    assert!(scan.declarations.is_empty(), "a #[cfg(test)] module's file is not read: {:?}", scan.declarations);
    assert!(scan.path_attributes.is_empty(), "test code's #[path] is no concern");
}

#[test]
fn scanner_finds_module_declarations() {
    let source = "pub mod a;\npub(crate) mod b;\n#[cfg(feature = \"cuda\")]\nmod c;\nmod inline { mod d; }\n\
                  #[cfg(test)]\nmod tests;\n";
    let scan = SourceFile::parse("src/lib.rs", Vec::new(), source).scan;
    let declared: Vec<(String, usize)> =
        scan.declarations.iter().map(|d| (display_module(&d.module), d.line)).collect();
    assert_eq!(
        declared,
        [
            ("crate::a".to_string(), 1),
            ("crate::b".to_string(), 2),
            ("crate::c".to_string(), 4),
            ("crate::inline::d".to_string(), 5),
        ]
    );
}

#[test]
fn a_whole_file_under_cfg_test_is_skipped() {
    assert!(references_in("#![cfg(test)]\nuse crate::a::A;\n", "x", &["a", "x"]).is_empty());
    assert_eq!(
        references_in("#![allow(dead_code)]\nuse crate::a::A;\n", "x", &["a", "x"]),
        ["2: crate::a::A -> crate::a"]
    );
}

#[test]
fn cycles_are_found_once_each() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("gemm", "lower view"), ("lower", "gemm view"), ("view", "gemm"), ("x", "y")]
            .into_iter()
            .map(|(from, to)| (from.to_string(), to.split(' ').map(str::to_string).collect()))
            .collect();
    assert_eq!(find_cycles(&graph), [vec!["gemm", "lower"], vec!["gemm", "lower", "view"], vec!["gemm", "view"]]);
}

#[test]
fn the_layer_table_is_read_from_one_block() {
    let doc = "# Title\n\n```rust\nx: y\n```\n\n```layers\n# leaves\nindex:\nir: index\n\nplan: index ir\n```\n";
    let table = read_layer_table(doc).unwrap();
    let rendered: Vec<String> = table
        .allowed
        .iter()
        .map(|(name, deps)| format!("{name}: {}", deps.iter().cloned().collect::<Vec<_>>().join(" ")))
        .collect();
    assert_eq!(rendered, ["index: ", "ir: index", "plan: index ir"]);

    assert!(read_layer_table("no block").is_err());
    assert!(read_layer_table("```layers\na:\n```\n```layers\nb:\n```\n").is_err());
    let problems = read_layer_table("```layers\na: b\na:\nnot a line\n```\n").unwrap_err();
    assert_eq!(problems.len(), 3, "{problems:?}");
}
