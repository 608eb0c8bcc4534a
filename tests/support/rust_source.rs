//! Rust source as tests/architecture.rs reads it: a small lexer that drops comments (doc
//! comments included), strings and chars; the items under `#[cfg(test)]` (and `#[test]`)
//! dropped; then the `mod` declarations, the `use` declarations (groups flattened) and the
//! `crate::`/`self::`/`super::` paths of what remains ([`scan_source`]). It resolves
//! nothing: tests/architecture.rs turns the paths into modules.
//!
//! Known limits: macros are not expanded (paths inside macro invocations are read as
//! written); items under `#[cfg(test)]` inside an expression may be skipped a little too
//! far.

/// A module's path from its crate's root, without `crate`: `["exec", "cuda", "view"]`.
/// The crate root is the empty path.
pub type ModPath = Vec<String>;

/// What a file's non-test code declares and uses (`module`: the module the file is).
pub fn scan_source(text: &str, module: &[String]) -> Scan {
    scan(&strip_test_code(tokenize(text)), module)
}

/// The tokens of a file's non-test code, as (text, line): identifiers, keywords and
/// punctuation (`::` is one token, every other punctuation character one), comments
/// dropped and literals as empty text.
pub fn code_tokens(text: &str) -> Vec<(String, usize)> {
    strip_test_code(tokenize(text)).into_iter().map(|t| (t.text, t.line)).collect()
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
pub struct Scan {
    /// `mod x;` declarations (files to read).
    pub declarations: Vec<Declaration>,
    /// Every path that may lead into the crate: `use` trees (flattened) and paths in code.
    pub paths: Vec<WrittenPath>,
    /// Functions, constants, statics and macros defined at a module's item level, with the
    /// module (a name that may also be a module's: `fn syntax` beside `mod syntax;`).
    pub values: Vec<(ModPath, String)>,
    /// Lines of `#[path = …]` attributes.
    pub path_attributes: Vec<usize>,
}

#[derive(Debug)]
pub struct Declaration {
    /// The declared module: the file's module, the inline modules around the declaration,
    /// then the name.
    pub module: ModPath,
    pub line: usize,
}

#[derive(Debug)]
pub struct WrittenPath {
    /// The module the path is written in: the file's, or an inline `mod x { … }` in it.
    pub scope: ModPath,
    /// As written: `["super", "view", "View"]`; a `use` group's `self` is dropped.
    pub segments: Vec<String>,
    /// The line of the path's last segment.
    pub line: usize,
    pub kind: PathKind,
    /// For a `use`: the name it brings in (`as` included), `None` for `as _`.
    pub alias: Option<String>,
    /// For a `use`: whether it is an item of its module (not inside a function or block),
    /// so that its name is visible as `module::name`.
    pub item_level: bool,
}

#[derive(Debug)]
pub enum PathKind {
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
