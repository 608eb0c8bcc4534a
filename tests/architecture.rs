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
//! How: a small lexer drops comments, doc comments, strings and chars; the items under
//! `#[cfg(test)]` (and `#[test]`) are dropped too; what remains is searched for `use`
//! declarations and `crate::`/`self::`/`super::` paths (and paths that start with a child
//! module's name). A path resolves to the deepest module of the file tree it names,
//! following item-level `use` imports (`crate::parse` is `crate::ir::parse::parse` through
//! src/lib.rs's `pub use`; `super::Violation` is `checker::violation` when checker/mod.rs
//! re-exports it). Where a module and a function share a name (`crate::plan`), a path
//! followed by `::` is the module, a path in code is the function, and a `use` of the
//! name is the module only if the file then writes `name::…`.
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

/// A module's path from its crate's root, without `crate`: `["exec", "cuda", "view"]`.
/// The crate root is the empty path.
type ModPath = Vec<String>;

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
        let tokens = strip_test_code(tokenize(text));
        let scan = scan(&tokens, &module);
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
// The lexer: Rust source as identifiers and punctuation, without comments and literals
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum TokenKind {
    /// An identifier or keyword (`crate`, `use`, `$crate` read as `crate`).
    Ident,
    /// One punctuation character, or `::`.
    Punct,
    /// A string, char or number literal; its text is dropped.
    Literal,
}

#[derive(Clone, Debug)]
struct Token {
    kind: TokenKind,
    text: String,
    /// 1-based.
    line: usize,
}

impl Token {
    fn is(&self, punct: &str) -> bool {
        self.kind == TokenKind::Punct && self.text == punct
    }

    fn is_ident(&self, word: &str) -> bool {
        self.kind == TokenKind::Ident && self.text == word
    }
}

/// Splits Rust source into tokens. Comments (doc comments included) and lifetimes are
/// dropped, literals become [`TokenKind::Literal`] with no text.
fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start_line = line;
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            i = skip_block_comment(&chars, i, &mut line);
        } else if c == '"' {
            i = skip_string(&chars, i + 1, &mut line);
            tokens.push(Token { kind: TokenKind::Literal, text: String::new(), line: start_line });
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                // An escaped char: '\n', '\'', '\u{1F600}'.
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                tokens.push(Token { kind: TokenKind::Literal, text: String::new(), line });
            } else if at(i + 2) == '\'' {
                // A plain char: 'x', '{', '"'.
                i += 3;
                tokens.push(Token { kind: TokenKind::Literal, text: String::new(), line });
            } else {
                // A lifetime or a label: 'a, 'static, 'outer.
                i += 1;
                while i < chars.len() && is_ident_continue(chars[i]) {
                    i += 1;
                }
            }
        } else if c == '$' && is_ident_start(at(i + 1)) {
            // `$crate` in macros is `crate`; other `$name`s are macro variables.
            i += 1;
        } else if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident_continue(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
            if matches!(word.as_str(), "r" | "br" | "cr") && at(i + hashes) == '"' {
                i = skip_raw_string(&chars, i + hashes + 1, hashes, &mut line);
                tokens.push(Token { kind: TokenKind::Literal, text: String::new(), line: start_line });
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&chars, i + 1, &mut line);
                tokens.push(Token { kind: TokenKind::Literal, text: String::new(), line: start_line });
            } else if word == "b" && at(i) == '\'' {
                // A byte char: b'x', b'\''.
                i += if at(i + 1) == '\\' { 3 } else { 2 };
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                tokens.push(Token { kind: TokenKind::Literal, text: String::new(), line });
            } else if word == "r" && hashes == 1 && is_ident_start(at(i + 1)) {
                // A raw identifier: r#type.
                let start = i + 1;
                i = start;
                while i < chars.len() && is_ident_continue(chars[i]) {
                    i += 1;
                }
                let text = chars[start..i].iter().collect();
                tokens.push(Token { kind: TokenKind::Ident, text, line });
            } else {
                tokens.push(Token { kind: TokenKind::Ident, text: word, line });
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && is_ident_continue(chars[i]) {
                i += 1;
            }
            tokens.push(Token { kind: TokenKind::Literal, text: String::new(), line });
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token { kind: TokenKind::Punct, text: "::".to_string(), line });
            i += 2;
        } else {
            tokens.push(Token { kind: TokenKind::Punct, text: c.to_string(), line });
            i += 1;
        }
    }
    tokens
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Skips a `/* … */` comment starting at `start` (nested ones included); returns the index
/// after it.
fn skip_block_comment(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            if chars[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    i
}

/// Skips the rest of a string whose opening quote is just before `start`; returns the
/// index after the closing quote.
fn skip_string(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '"' => return i + 1,
            c => {
                if c == '\n' {
                    *line += 1;
                }
                i += 1;
            }
        }
    }
    i
}

/// Skips the rest of a raw string (`r#"…"#` with `hashes` hashes) whose opening quote is
/// just before `start`; returns the index after it.
fn skip_raw_string(chars: &[char], start: usize, hashes: usize, line: &mut usize) -> usize {
    let mut i = start;
    while i < chars.len() {
        if chars[i] == '"' && chars[i + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes {
            return i + 1 + hashes;
        }
        if chars[i] == '\n' {
            *line += 1;
        }
        i += 1;
    }
    i
}

// ------------------------------------------------------------------------------------------
// Test code
// ------------------------------------------------------------------------------------------

/// The tokens without the code compiled only for tests: an item (or field, statement, match
/// arm) under `#[cfg(test)]` or `#[test]`, or the whole file under `#![cfg(test)]`.
fn strip_test_code(tokens: Vec<Token>) -> Vec<Token> {
    // Inner attributes open the file: `#![cfg(test)]` among them makes it test-only.
    let mut i = 0;
    while i + 2 < tokens.len() && tokens[i].is("#") && tokens[i + 1].is("!") && tokens[i + 2].is("[") {
        let end = matching_close(&tokens, i + 2);
        if attribute_is_test_only(&tokens[i + 3..end]) {
            return Vec::new();
        }
        i = end + 1;
    }

    let mut kept = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i].is("#") && tokens.get(i + 1).is_some_and(|token| token.is("[")) {
            let end = matching_close(&tokens, i + 1);
            if attribute_is_test_only(&tokens[i + 2..end]) {
                i = skip_attributes(&tokens, end + 1);
                i = skip_item(&tokens, i);
                continue;
            }
        }
        kept.push(tokens[i].clone());
        i += 1;
    }
    kept
}

/// Whether an attribute (the tokens between `#[` and `]`) compiles its item only for
/// tests: `test`, `cfg(test)`, `cfg(all(test, …))`; not `cfg(any(test, feature = "…"))`.
fn attribute_is_test_only(attribute: &[Token]) -> bool {
    match attribute {
        [word] => word.is_ident("test"),
        [cfg, open, predicate @ .., close] if cfg.is_ident("cfg") && open.is("(") && close.is(")") => {
            cfg_implies_test(predicate)
        }
        _ => false,
    }
}

/// Whether a `cfg` predicate holds only when `test` does.
fn cfg_implies_test(predicate: &[Token]) -> bool {
    match predicate {
        [word] => word.is_ident("test"),
        [all, open, arguments @ .., close] if all.is_ident("all") && open.is("(") && close.is(")") => {
            split_arguments(arguments).iter().any(|argument| cfg_implies_test(argument))
        }
        [any, open, arguments @ .., close] if any.is_ident("any") && open.is("(") && close.is(")") => {
            let arguments = split_arguments(arguments);
            !arguments.is_empty() && arguments.iter().all(|argument| cfg_implies_test(argument))
        }
        _ => false,
    }
}

/// `a, b(c, d), e` as `[a]`, `[b(c, d)]`, `[e]`.
fn split_arguments(tokens: &[Token]) -> Vec<&[Token]> {
    let mut arguments = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, token) in tokens.iter().enumerate() {
        if token.is("(") {
            depth += 1;
        } else if token.is(")") {
            depth -= 1;
        } else if token.is(",") && depth == 0 {
            arguments.push(&tokens[start..i]);
            start = i + 1;
        }
    }
    if start < tokens.len() {
        arguments.push(&tokens[start..]);
    }
    arguments
}

/// The index of the bracket that closes the one at `open`.
fn matching_close(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        if token.is("(") || token.is("[") || token.is("{") {
            depth += 1;
        } else if token.is(")") || token.is("]") || token.is("}") {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
    }
    tokens.len() - 1
}

/// The index after the outer attributes (`#[…]`) that start at `start`.
fn skip_attributes(tokens: &[Token], start: usize) -> usize {
    let mut i = start;
    while i + 1 < tokens.len() && tokens[i].is("#") && tokens[i + 1].is("[") {
        i = matching_close(tokens, i + 1) + 1;
    }
    i
}

/// How the code under an attribute ends.
#[derive(PartialEq)]
enum Shape {
    /// `use`, `let`, `const`, `static`, `type`: at a `;`.
    Statement,
    /// `fn`, `mod`, `struct`, `impl`, …: at a `;` or after its `{ … }`.
    Item,
    /// A field, a variant, a match arm, an expression: at a `,`, a `;` or after a `{ … }`.
    Fragment,
}

/// The index after the item (or field, statement, match arm) starting at `start`.
fn skip_item(tokens: &[Token], start: usize) -> usize {
    let mut first = start;
    if tokens.get(first).is_some_and(|token| token.is_ident("pub")) {
        first += 1;
        if tokens.get(first).is_some_and(|token| token.is("(")) {
            first = matching_close(tokens, first) + 1;
        }
    }
    let keyword = tokens.get(first).map(|token| token.text.as_str()).unwrap_or("");
    let next = tokens.get(first + 1).map(|token| token.text.as_str()).unwrap_or("");
    let shape = match keyword {
        "const" if matches!(next, "fn" | "unsafe" | "async" | "extern") => Shape::Item,
        "use" | "let" | "const" | "static" | "type" => Shape::Statement,
        "fn" | "mod" | "struct" | "enum" | "union" | "impl" | "trait" | "extern" | "unsafe" | "async"
        | "macro_rules" => Shape::Item,
        _ => Shape::Fragment,
    };

    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate().skip(start) {
        if token.is("(") || token.is("[") || token.is("{") {
            depth += 1;
        } else if token.is(")") || token.is("]") || token.is("}") {
            if depth == 0 {
                return i; // closes the code around the attribute's item
            }
            depth -= 1;
            if depth == 0 && token.is("}") && shape != Shape::Statement {
                return i + 1;
            }
        } else if depth == 0 && (token.is(";") || (token.is(",") && shape == Shape::Fragment)) {
            return i + 1;
        }
    }
    tokens.len()
}

// ------------------------------------------------------------------------------------------
// Paths and module declarations
// ------------------------------------------------------------------------------------------

/// What a file's (non-test) tokens declare and use.
#[derive(Debug, Default)]
struct Scan {
    /// `mod x;` declarations (files to read).
    declarations: Vec<Declaration>,
    /// Every path that may lead into the crate: `use` trees (flattened) and paths in code.
    paths: Vec<WrittenPath>,
    /// Functions, constants, statics and macros defined at a module's item level, with the
    /// module (a name that may also be a module's: `fn syntax` beside `mod syntax;`).
    values: Vec<(ModPath, String)>,
    /// Lines of `#[path = …]` attributes.
    path_attributes: Vec<usize>,
}

#[derive(Debug)]
struct Declaration {
    /// The declared module: the file's module, the inline modules around the declaration,
    /// then the name.
    module: ModPath,
    line: usize,
}

#[derive(Debug)]
struct WrittenPath {
    /// The module the path is written in: the file's, or an inline `mod x { … }` in it.
    scope: ModPath,
    /// As written: `["super", "view", "View"]`; a `use` group's `self` is dropped.
    segments: Vec<String>,
    /// The line of the path's last segment.
    line: usize,
    kind: PathKind,
    /// For a `use`: the name it brings in (`as` included), `None` for `as _`.
    alias: Option<String>,
    /// For a `use`: whether it is an item of its module (not inside a function or block),
    /// so that its name is visible as `module::name`.
    item_level: bool,
}

#[derive(Debug)]
enum PathKind {
    /// A leaf of a `use` tree.
    Use,
    /// A `use` tree's `*`: `segments` are the globbed module.
    Glob,
    /// A path in code (a type, a call, a macro's argument, `impl crate::x::T for`).
    Code,
}

/// Scans the tokens of the file of `module` for `mod` declarations, `use` trees and paths.
fn scan(tokens: &[Token], module: &[String]) -> Scan {
    let mut result = Scan::default();
    // The inline modules we are in, with the brace depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let scope = |inline: &Vec<(String, usize)>| -> ModPath {
        module.iter().cloned().chain(inline.iter().map(|(name, _)| name.clone())).collect()
    };
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        let next = tokens.get(i + 1);
        let after = tokens.get(i + 2);
        if token.is("{") {
            depth += 1;
        } else if token.is("}") {
            if inline.last().is_some_and(|&(_, inner)| inner == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
        } else if token.is("#") && next.is_some_and(|t| t.is("[")) && after.is_some_and(|t| t.is_ident("path")) {
            result.path_attributes.push(token.line);
        } else if token.is_ident("mod") && next.is_some_and(|t| t.kind == TokenKind::Ident) {
            let name = next.unwrap().text.clone();
            if after.is_some_and(|t| t.is(";")) {
                let mut declared = scope(&inline);
                declared.push(name);
                result.declarations.push(Declaration { module: declared, line: token.line });
            } else if after.is_some_and(|t| t.is("{")) {
                inline.push((name, depth + 1));
            }
            i += 2;
            continue;
        } else if (token.is_ident("fn") || token.is_ident("const") || token.is_ident("static"))
            && next.is_some_and(|t| {
                t.kind == TokenKind::Ident
                    && !matches!(t.text.as_str(), "fn" | "mut" | "unsafe" | "async" | "extern" | "_")
            })
            && depth == inline.last().map_or(0, |&(_, inner)| inner)
        {
            result.values.push((scope(&inline), next.unwrap().text.clone()));
        } else if token.is_ident("macro_rules") && after.is_some_and(|t| t.kind == TokenKind::Ident) {
            result.values.push((scope(&inline), after.unwrap().text.clone()));
        } else if token.is_ident("use") && next.is_some_and(|t| !t.is("<")) {
            // (`use<'a, T>` in `impl Trait + use<…>` is no declaration.)
            let item_level = depth == inline.last().map_or(0, |&(_, inner)| inner);
            let mut leaves = Vec::new();
            i += 1;
            read_use_tree(tokens, &mut i, Vec::new(), &mut leaves);
            for (segments, line, kind, alias) in leaves {
                result.paths.push(WrittenPath { scope: scope(&inline), segments, line, kind, alias, item_level });
            }
            while i < tokens.len() && !tokens[i].is(";") {
                i += 1;
            }
        } else if token.kind == TokenKind::Ident
            && next.is_some_and(|t| t.is("::"))
            && after.is_some_and(|t| t.kind == TokenKind::Ident)
            && (i == 0 || !tokens[i - 1].is("::"))
        {
            let mut segments = vec![token.text.clone()];
            let mut last = i;
            while last + 2 < tokens.len() && tokens[last + 1].is("::") && tokens[last + 2].kind == TokenKind::Ident {
                segments.push(tokens[last + 2].text.clone());
                last += 2;
            }
            result.paths.push(WrittenPath {
                scope: scope(&inline),
                segments,
                line: tokens[last].line,
                kind: PathKind::Code,
                alias: None,
                item_level: false,
            });
            i = last + 1;
            continue;
        }
        i += 1;
    }
    result
}

/// One leaf of a `use` tree: segments, line, kind, the name it brings in.
type UseLeaf = (Vec<String>, usize, PathKind, Option<String>);

/// Reads a `use` tree starting at `*i` under `prefix` (the segments of enclosing groups);
/// leaves `*i` after it.
fn read_use_tree(tokens: &[Token], i: &mut usize, prefix: Vec<String>, leaves: &mut Vec<UseLeaf>) {
    let mut segments = prefix;
    while *i < tokens.len() {
        let token = &tokens[*i];
        if token.is("::") {
            *i += 1;
        } else if token.is("{") {
            *i += 1;
            while *i < tokens.len() && !tokens[*i].is("}") && !tokens[*i].is(";") {
                read_use_tree(tokens, i, segments.clone(), leaves);
                if *i < tokens.len() && tokens[*i].is(",") {
                    *i += 1;
                }
            }
            if *i < tokens.len() && tokens[*i].is("}") {
                *i += 1;
            }
            return;
        } else if token.is("*") {
            leaves.push((segments, token.line, PathKind::Glob, None));
            *i += 1;
            return;
        } else if token.kind == TokenKind::Ident {
            segments.push(token.text.clone());
            let line = token.line;
            *i += 1;
            if *i < tokens.len() && tokens[*i].is("::") {
                continue;
            }
            // `use a::{self}` brings in `a` itself.
            if segments.len() > 1 && segments.last().unwrap() == "self" {
                segments.pop();
            }
            let mut alias = segments.last().cloned();
            if *i + 1 < tokens.len() && tokens[*i].is_ident("as") {
                alias = Some(tokens[*i + 1].text.clone()).filter(|name| name != "_");
                *i += 2;
            }
            leaves.push((segments, line, PathKind::Use, alias));
            return;
        } else {
            // Not a use tree after all (`,`, `}`, `;`, or malformed): leave it to the caller.
            if !token.is(",") && !token.is("}") && !token.is(";") {
                *i += 1;
            }
            return;
        }
    }
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
