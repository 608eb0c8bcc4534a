//! The parser: `.step` text → [`Graph`], with spans on every entity.
//!
//! Three stages, each small:
//! 1. a hand-written lexer turns bytes into tokens (comments `//` to end of line are skipped);
//! 2. a recursive-descent parser builds a syntax tree following the grammar of docs/IR.md
//!    exactly. The first syntax error ends parsing (there is no recovery: one clear message
//!    beats a cascade of guesses);
//! 3. resolution binds names, checks ops, arities and attributes against the op table and
//!    infers types. It COLLECTS every error of the step, so a user fixes them in one go.
//!
//! Errors that are facts about single tokens (an unknown dtype or role, an integer literal
//! too large for its use) are found in stage 2 but collected with stage 3's.
//!
//! Type inference: each op's row `infer` runs on its input types. A written output type wins
//! (the verifier reports a written type that disagrees with inference); an unwritten one
//! takes the inferred type. When inference fails and some output has no written type, that
//! is an error here. When an input's type is unknown because of an earlier error, the op is
//! skipped silently, so one mistake gives one message.
//!
//! Spans: a value's span is its `%name` at its definition; an op's runs from the op name to
//! its closing parenthesis; an update's covers the statement; a returned value's is its
//! `%name` in the `return` statement. Value names are stored without their `%`.
//!
//! Invariant: `parse` never panics, whatever the input (slicing uses `get`, integer
//! literals are parsed with checked conversions, the token list always ends with an
//! end-of-file token). Errors hold spans, not the source text: `crate::diagnostics::render`
//! attaches the text when showing them.

use std::collections::HashMap;

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::index::{Idx, OpId, ValueId};
use crate::ir::graph::{Graph, Loc, Op, Return, Role, Span, Update, Value, ValueDef};
use crate::ir::ops::{Attr, AttrKind, Attrs, OPS, OpDef, OpKind};
use crate::ir::types::{DType, Shape, TensorType};

/// One error in the text of a step.
#[derive(Debug, Error, Diagnostic)]
pub enum ParseError {
    /// The text does not follow the grammar: an unexpected token or character, a missing
    /// name after `%` or `@`, a bad escape in a string. Parsing stops at the first one.
    #[error("{message}")]
    Syntax {
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A string (the file name in `loc("...")`) is not closed on its line.
    #[error("unterminated string")]
    #[diagnostic(help("close the string with `\"` before the end of the line"))]
    UnterminatedString {
        #[label("this string is never closed")]
        span: SourceSpan,
    },

    /// An op name that is not a row of the op table.
    #[error("unknown op `{name}`")]
    UnknownOp {
        name: String,
        #[label("no op has this name")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// An op applied to a number of inputs other than its row's.
    #[error("`{op}` takes {expected} input(s), found {found}")]
    InputCount {
        op: &'static str,
        expected: usize,
        found: usize,
        #[label("{found} input(s) here")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// A definition with a number of outputs other than its op's row.
    #[error("`{op}` has {expected} output(s), found {found}")]
    OutputCount {
        op: &'static str,
        expected: usize,
        found: usize,
        #[label("{found} output(s) here")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// An attribute the op's row does not have.
    #[error("`{op}` has no attribute `{attr}`")]
    UnknownAttr {
        op: &'static str,
        attr: String,
        #[label("unknown attribute")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// The same attribute written twice on one op.
    #[error("attribute `{attr}` is set twice")]
    #[diagnostic(help("keep one of them"))]
    DuplicateAttr {
        attr: String,
        #[label("set again here")]
        span: SourceSpan,
        #[label("first set here")]
        first: SourceSpan,
    },

    /// An attribute without a default that the op does not set.
    #[error("`{op}` needs attribute `{attr}`")]
    MissingAttr {
        op: &'static str,
        attr: &'static str,
        #[label("`{attr}` is not set")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// An attribute value of the wrong kind (a float where a list is expected, ...).
    #[error("attribute `{attr}` of `{op}` takes {expected}")]
    AttrKind {
        op: &'static str,
        attr: &'static str,
        expected: &'static str,
        #[label("not {expected}")]
        span: SourceSpan,
    },

    /// A dtype name that is not one of f32, f16, bf16, i32, i64, bool.
    #[error("unknown dtype `{name}`")]
    UnknownDType {
        name: String,
        #[label("not a dtype")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// An argument role that is not one of param, input, state.
    #[error("unknown role `{name}`")]
    UnknownRole {
        name: String,
        #[label("not a role")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// A number literal that does not fit its use: dimensions are u64, integer attributes
    /// i64, `loc` lines u32; a float literal must be finite (write `inf` for infinity).
    #[error("`{literal}` does not fit {what}")]
    NumberTooLarge {
        literal: String,
        what: &'static str,
        #[label("out of range")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// A use of a value that no argument or op defines.
    #[error("undefined value `%{name}`")]
    Undefined {
        name: String,
        #[label("not defined in this step")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A second definition of a value name (values are defined exactly once).
    #[error("value `%{name}` is defined twice")]
    #[diagnostic(help("every value is defined exactly once; rename one of them"))]
    Redefined {
        name: String,
        #[label("defined again here")]
        span: SourceSpan,
        #[label("first defined here")]
        first: SourceSpan,
    },

    /// An op reads a value that is defined later in the text (but not in a cycle).
    #[error("value `%{name}` is used before its definition")]
    UseBeforeDef {
        name: String,
        #[label("used here")]
        span: SourceSpan,
        #[label("defined later here")]
        def: SourceSpan,
        #[help]
        help: String,
    },

    /// An op reads a value defined later whose definition depends on this op: the values
    /// form a cycle, listed in data-flow order.
    #[error("cycle: {cycle}")]
    #[diagnostic(help(
        "a step is acyclic: each value in the cycle is computed from the one before it; break the cycle"
    ))]
    Cycle {
        name: String,
        cycle: String,
        #[label("`%{name}` is used here, but it depends on this op")]
        span: SourceSpan,
    },

    /// A second `return` statement (a step returns once; list every value in it).
    #[error("a step has at most one `return`")]
    #[diagnostic(help("list every returned value in one statement: `return %a, %b`"))]
    DuplicateReturn {
        #[label("second return")]
        span: SourceSpan,
        #[label("first return")]
        first: SourceSpan,
    },

    /// The op's type rule rejects its input types, and some output has no written type.
    #[error("{op}: {message}")]
    TypeError {
        op: &'static str,
        message: String,
        #[label("the types of this op's inputs do not fit")]
        span: SourceSpan,
    },
}

impl ParseError {
    /// The main span of the error (the offending text).
    pub fn span(&self) -> SourceSpan {
        use ParseError::*;
        match self {
            Syntax { span, .. }
            | UnterminatedString { span }
            | UnknownOp { span, .. }
            | InputCount { span, .. }
            | OutputCount { span, .. }
            | UnknownAttr { span, .. }
            | DuplicateAttr { span, .. }
            | MissingAttr { span, .. }
            | AttrKind { span, .. }
            | UnknownDType { span, .. }
            | UnknownRole { span, .. }
            | NumberTooLarge { span, .. }
            | Undefined { span, .. }
            | Redefined { span, .. }
            | UseBeforeDef { span, .. }
            | Cycle { span, .. }
            | DuplicateReturn { span, .. }
            | TypeError { span, .. } => *span,
        }
    }
}

/// Every error found in one file; render with the file's source attached.
#[derive(Debug, Error, Diagnostic)]
#[error("the step has {} error{}", errors.len(), if errors.len() == 1 { "" } else { "s" })]
pub struct ParseErrors {
    #[related]
    pub errors: Vec<ParseError>,
}

/// Parses the text of one step. On failure, returns the first syntax error, or every
/// name, attribute and type error of the step, in source order.
pub fn parse(src: &str) -> Result<Graph, ParseErrors> {
    let (toks, lex_error) = lex(src);
    let mut parser = Parser { src, toks, pos: 0, lex_error, errors: Vec::new() };
    let ast = match parser.step() {
        Ok(ast) => ast,
        Err(e) => return Err(ParseErrors { errors: vec![e] }),
    };
    let mut errors = parser.errors;
    let graph = resolve(ast, &mut errors);
    if errors.is_empty() {
        Ok(graph)
    } else {
        errors.sort_by_key(|e| e.span().offset());
        Err(ParseErrors { errors })
    }
}

// ---------------------------------------------------------------------------------------
// Lexer.

/// A byte range `[start, end)` of the source.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Sp(usize, usize);

impl Sp {
    fn to(self, other: Sp) -> Sp {
        Sp(self.0.min(other.0), self.1.max(other.1))
    }
}

impl From<Sp> for SourceSpan {
    fn from(sp: Sp) -> SourceSpan {
        (sp.0, sp.1.saturating_sub(sp.0)).into()
    }
}

impl From<Sp> for Span {
    fn from(sp: Sp) -> Span {
        Span::new(sp.0, sp.1)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_]*`: keywords, op, attribute, dtype and role names.
    Ident,
    /// `%name`.
    Value,
    /// `@name`.
    Global,
    Int,
    Float,
    Str,
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Colon,
    Eq,
    Arrow,
    Eof,
    /// Where lexing failed; the parser reports the lexer's error when it reaches it.
    Bad,
}

#[derive(Clone, Copy, Debug)]
struct Token {
    tok: Tok,
    sp: Sp,
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.'
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The span of the (possibly multi-byte) character at byte `i`.
fn char_span(src: &str, i: usize) -> Sp {
    let len = src.get(i..).and_then(|s| s.chars().next()).map_or(1, char::len_utf8);
    Sp(i, i + len)
}

fn syntax(message: impl Into<String>, sp: Sp, help: Option<String>) -> ParseError {
    ParseError::Syntax { message: message.into(), span: sp.into(), help }
}

/// Tokens of `src`, always ending with `Eof` (or `Bad` plus the error that stopped lexing).
fn lex(src: &str) -> (Vec<Token>, Option<ParseError>) {
    let b = src.as_bytes();
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let mut toks = Vec::new();
    let mut i = 0;
    loop {
        // Whitespace and comments.
        loop {
            if at(i).is_ascii_whitespace() && i < b.len() {
                i += 1;
            } else if at(i) == b'/' && at(i + 1) == b'/' {
                while i < b.len() && at(i) != b'\n' {
                    i += 1;
                }
            } else {
                break;
            }
        }
        if i >= b.len() {
            toks.push(Token { tok: Tok::Eof, sp: Sp(b.len(), b.len()) });
            return (toks, None);
        }
        let start = i;
        let punct = |tok| (tok, start + 1);
        let result: Result<(Tok, usize), ParseError> = match at(i) {
            b'(' => Ok(punct(Tok::LParen)),
            b')' => Ok(punct(Tok::RParen)),
            b'{' => Ok(punct(Tok::LBrace)),
            b'}' => Ok(punct(Tok::RBrace)),
            b'[' => Ok(punct(Tok::LBracket)),
            b']' => Ok(punct(Tok::RBracket)),
            b',' => Ok(punct(Tok::Comma)),
            b':' => Ok(punct(Tok::Colon)),
            b'=' => Ok(punct(Tok::Eq)),
            b'<' if at(i + 1) == b'-' => Ok((Tok::Arrow, i + 2)),
            c @ (b'%' | b'@') => {
                let mut j = i + 1;
                while is_name_byte(at(j)) {
                    j += 1;
                }
                if j == i + 1 {
                    let what = if c == b'%' { "a value name after `%`" } else { "a step name after `@`" };
                    Err(syntax(
                        format!("expected {what}"),
                        Sp(i, i + 1),
                        Some("names are letters, digits, `_` and `.`".into()),
                    ))
                } else {
                    Ok((if c == b'%' { Tok::Value } else { Tok::Global }, j))
                }
            }
            b'"' => lex_string(src, i).map(|end| (Tok::Str, end)),
            b'-' if at(i + 1).is_ascii_digit() => Ok(lex_number(b, i)),
            b'-' if b.get(i + 1..i + 4) == Some(b"inf") && !is_ident_byte(at(i + 4)) => Ok((Tok::Float, i + 4)),
            c if c.is_ascii_digit() => Ok(lex_number(b, i)),
            c if is_ident_start(c) => {
                let mut j = i;
                while is_ident_byte(at(j)) {
                    j += 1;
                }
                Ok((Tok::Ident, j))
            }
            _ => {
                let sp = char_span(src, i);
                let ch = src.get(sp.0..sp.1).unwrap_or("?");
                Err(syntax(format!("unexpected character `{}`", ch.escape_debug()), sp, None))
            }
        };
        match result {
            Ok((tok, end)) => {
                toks.push(Token { tok, sp: Sp(start, end) });
                i = end;
            }
            Err(e) => {
                toks.push(Token { tok: Tok::Bad, sp: Sp(start, start) });
                return (toks, Some(e));
            }
        }
    }
}

/// The end of the number starting at `i` (`-` then a digit, or a digit) and its kind.
fn lex_number(b: &[u8], i: usize) -> (Tok, usize) {
    let digit = |j: usize| b.get(j).is_some_and(u8::is_ascii_digit);
    let mut j = i;
    if b.get(j) == Some(&b'-') {
        j += 1;
    }
    while digit(j) {
        j += 1;
    }
    let mut tok = Tok::Int;
    if b.get(j) == Some(&b'.') && digit(j + 1) {
        j += 1;
        while digit(j) {
            j += 1;
        }
        tok = Tok::Float;
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        let mut k = j + 1;
        if matches!(b.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        if digit(k) {
            j = k;
            while digit(j) {
                j += 1;
            }
            tok = Tok::Float;
        }
    }
    (tok, j)
}

/// The end of the string literal opening at `i`; strings end on their line.
fn lex_string(src: &str, i: usize) -> Result<usize, ParseError> {
    let b = src.as_bytes();
    let mut j = i + 1;
    loop {
        match b.get(j) {
            None | Some(b'\n') => return Err(ParseError::UnterminatedString { span: Sp(i, j).into() }),
            Some(b'"') => return Ok(j + 1),
            Some(b'\\') => match b.get(j + 1) {
                Some(b'"' | b'\\' | b'n' | b't') => j += 2,
                None | Some(b'\n') => return Err(ParseError::UnterminatedString { span: Sp(i, j + 1).into() }),
                Some(_) => {
                    let sp = Sp(j, char_span(src, j + 1).1);
                    return Err(syntax(
                        "unknown escape in string",
                        sp,
                        Some("strings know the escapes \\\", \\\\, \\n and \\t".into()),
                    ));
                }
            },
            Some(_) => j += 1,
        }
    }
}

/// The contents of a string literal whose text (quotes included) the lexer accepted.
fn unquote(text: &str) -> String {
    let inner = text.get(1..text.len().saturating_sub(1)).unwrap_or("");
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Syntax tree.

struct Ast {
    name: String,
    args: Vec<ArgAst>,
    defs: Vec<DefAst>,
    updates: Vec<UpdateAst>,
    returns: Vec<ReturnAst>,
}

struct ArgAst {
    name: String,
    sp: Sp,
    /// `None`: the written type was invalid (already reported).
    ty: Option<TensorType>,
    /// `None`: unknown role (already reported).
    role: Option<Role>,
}

struct OutAst {
    name: String,
    sp: Sp,
    /// `None`: no type written; `Some(None)`: an invalid type (already reported).
    ty: Option<Option<TensorType>>,
}

struct DefAst {
    outs: Vec<OutAst>,
    op: String,
    op_sp: Sp,
    /// The op name through the closing parenthesis.
    sp: Sp,
    operands: Vec<(String, Sp)>,
    attrs: Vec<AttrAst>,
    loc: Option<Loc>,
}

struct AttrAst {
    name: String,
    name_sp: Sp,
    value: AttrVal,
    value_sp: Sp,
}

/// An attribute value as written; its meaning depends on the attribute's kind.
enum AttrVal {
    Int(String),
    Float(String),
    /// `true`, `false`, `inf`, a dtype name, or any other word.
    Word(String),
    List(Vec<(String, Sp)>),
}

struct UpdateAst {
    target: (String, Sp),
    value: (String, Sp),
    sp: Sp,
}

struct ReturnAst {
    values: Vec<(String, Sp)>,
    sp: Sp,
}

// ---------------------------------------------------------------------------------------
// Parser.

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    lex_error: Option<ParseError>,
    /// Errors that do not stop parsing (unknown dtypes and roles, out-of-range numbers).
    errors: Vec<ParseError>,
}

type PResult<T> = Result<T, ParseError>;

impl Parser<'_> {
    fn peek(&self) -> Token {
        match self.toks.get(self.pos) {
            Some(t) => *t,
            None => Token { tok: Tok::Eof, sp: Sp(self.src.len(), self.src.len()) },
        }
    }

    fn bump(&mut self) -> Token {
        let t = self.peek();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn text(&self, t: Token) -> &str {
        self.src.get(t.sp.0..t.sp.1).unwrap_or("")
    }

    fn is_keyword(&self, word: &str) -> bool {
        let t = self.peek();
        t.tok == Tok::Ident && self.text(t) == word
    }

    /// The error for the current token when `expected` was wanted.
    fn unexpected(&mut self, expected: &str) -> ParseError {
        self.unexpected_help(expected, None)
    }

    fn unexpected_help(&mut self, expected: &str, help: Option<String>) -> ParseError {
        let t = self.peek();
        if t.tok == Tok::Bad
            && let Some(e) = self.lex_error.take()
        {
            return e;
        }
        let found = match t.tok {
            Tok::Eof | Tok::Bad => "end of file".to_string(),
            Tok::Str => "a string".to_string(),
            _ => format!("`{}`", self.text(t)),
        };
        syntax(format!("expected {expected}, found {found}"), t.sp, help)
    }

    fn expect(&mut self, tok: Tok, expected: &str) -> PResult<Token> {
        if self.peek().tok == tok { Ok(self.bump()) } else { Err(self.unexpected(expected)) }
    }

    fn expect_keyword(&mut self, word: &str, help: Option<String>) -> PResult<Token> {
        if self.is_keyword(word) { Ok(self.bump()) } else { Err(self.unexpected_help(&format!("`{word}`"), help)) }
    }

    /// `%name` → (name without `%`, span of `%name`).
    fn value(&mut self) -> PResult<(String, Sp)> {
        let t = self.expect(Tok::Value, "a value (`%name`)")?;
        Ok((self.text(t).get(1..).unwrap_or("").to_string(), t.sp))
    }

    fn step(&mut self) -> PResult<Ast> {
        self.expect_keyword(
            "step",
            Some("a .step file holds one step: `step @name(%x: f32[4] input) { ... }`".into()),
        )?;
        let name_tok = self.expect(Tok::Global, "the step's name (`@name`)")?;
        let name = self.text(name_tok).get(1..).unwrap_or("").to_string();
        self.expect(Tok::LParen, "`(`")?;
        let mut args = Vec::new();
        while self.peek().tok != Tok::RParen {
            args.push(self.arg()?);
            match self.peek().tok {
                Tok::Comma => {
                    self.bump();
                }
                Tok::RParen => {}
                _ => return Err(self.unexpected("`,` or `)`")),
            }
        }
        self.bump();
        self.expect(Tok::LBrace, "`{`")?;
        let mut ast = Ast { name, args, defs: Vec::new(), updates: Vec::new(), returns: Vec::new() };
        loop {
            let t = self.peek();
            match t.tok {
                Tok::RBrace => break,
                Tok::Value => ast.defs.push(self.def()?),
                Tok::Ident if self.text(t) == "update" => ast.updates.push(self.update()?),
                Tok::Ident if self.text(t) == "return" => ast.returns.push(self.ret()?),
                _ => return Err(self.unexpected("a statement (`%v = op(...)`, `update` or `return`) or `}`")),
            }
        }
        self.bump();
        if self.peek().tok != Tok::Eof {
            return Err(
                self.unexpected_help("end of file after the step's `}`", Some("a file holds exactly one step".into()))
            );
        }
        Ok(ast)
    }

    /// `%x: f32[4] param`
    fn arg(&mut self) -> PResult<ArgAst> {
        let (name, sp) = self.value()?;
        self.expect(Tok::Colon, "`:` and the argument's type")?;
        let ty = self.ty()?;
        let role_tok = self.expect(Tok::Ident, "the argument's role (`param`, `input` or `state`)")?;
        let role_name = self.text(role_tok).to_string();
        let role = Role::from_name(&role_name);
        if role.is_none() {
            let names = ["param", "input", "state"];
            self.errors.push(ParseError::UnknownRole {
                help: did_you_mean(&role_name, names).map_or_else(
                    || "a role is `param` (trained), `input` (fed data) or `state` (optimizer state)".to_string(),
                    |m| format!("did you mean `{m}`? roles are param, input and state"),
                ),
                name: role_name,
                span: role_tok.sp.into(),
            });
        }
        Ok(ArgAst { name, sp, ty, role })
    }

    /// `f32[64,256]`; `None` if the dtype or a dimension is invalid (reported).
    fn ty(&mut self) -> PResult<Option<TensorType>> {
        let dtype_tok = self.expect(Tok::Ident, "a type such as `f32[64,256]`")?;
        let dtype = self.dtype(dtype_tok);
        self.expect(Tok::LBracket, "`[` and the type's shape (`f32[]` for a scalar)")?;
        let mut dims = Vec::new();
        let mut ok = dtype.is_some();
        if self.peek().tok != Tok::RBracket {
            loop {
                let t = self.expect(Tok::Int, "a dimension (an integer)")?;
                let text = self.text(t).to_string();
                match text.parse::<u64>() {
                    Ok(d) => dims.push(d),
                    Err(_) => {
                        ok = false;
                        self.errors.push(ParseError::NumberTooLarge {
                            literal: text,
                            what: "a dimension (u64)",
                            span: t.sp.into(),
                            help: format!("dimensions are integers from 0 to {}", u64::MAX),
                        });
                    }
                }
                match self.peek().tok {
                    Tok::Comma => {
                        self.bump();
                    }
                    Tok::RBracket => break,
                    _ => return Err(self.unexpected("`,` or `]`")),
                }
            }
        }
        self.bump();
        Ok(if ok { dtype.map(|d| TensorType::new(d, Shape(dims))) } else { None })
    }

    /// The dtype named by an identifier token; reports an unknown one.
    fn dtype(&mut self, t: Token) -> Option<DType> {
        let name = self.text(t).to_string();
        let dtype = DType::from_name(&name);
        if dtype.is_none() {
            self.errors.push(unknown_dtype(name, t.sp));
        }
        dtype
    }

    /// `%a, %b: f32[4] = op(%x, k=1) loc("f.py":3)`
    fn def(&mut self) -> PResult<DefAst> {
        let mut outs = Vec::new();
        loop {
            let (name, sp) = self.value()?;
            let ty = if self.peek().tok == Tok::Colon {
                self.bump();
                Some(self.ty()?)
            } else {
                None
            };
            outs.push(OutAst { name, sp, ty });
            match self.peek().tok {
                Tok::Comma => {
                    self.bump();
                }
                Tok::Eq => break,
                _ => return Err(self.unexpected("`,`, `:` or `=`")),
            }
        }
        self.bump();
        let op_tok = self.expect(Tok::Ident, "an op name")?;
        let op = self.text(op_tok).to_string();
        self.expect(Tok::LParen, "`(` after the op name")?;
        let mut operands = Vec::new();
        let mut attrs: Vec<AttrAst> = Vec::new();
        if self.peek().tok != Tok::RParen {
            loop {
                let t = self.peek();
                match t.tok {
                    Tok::Value if attrs.is_empty() => operands.push(self.value()?),
                    Tok::Value => {
                        return Err(syntax(
                            "value after an attribute",
                            t.sp,
                            Some("write every input value before the attributes: `op(%a, %b, name=value)`".into()),
                        ));
                    }
                    Tok::Ident => attrs.push(self.attr()?),
                    _ => return Err(self.unexpected("an input (`%x`) or an attribute (`name=value`)")),
                }
                match self.peek().tok {
                    Tok::Comma => {
                        self.bump();
                    }
                    Tok::RParen => break,
                    _ => return Err(self.unexpected("`,` or `)`")),
                }
            }
        }
        let close = self.bump();
        let sp = op_tok.sp.to(close.sp);
        let loc = if self.is_keyword("loc") { self.loc()? } else { None };
        Ok(DefAst { outs, op, op_sp: op_tok.sp, sp, operands, attrs, loc })
    }

    /// `name=value`
    fn attr(&mut self) -> PResult<AttrAst> {
        let name_tok = self.bump();
        let name = self.text(name_tok).to_string();
        self.expect(Tok::Eq, "`=` after the attribute name")?;
        let t = self.peek();
        let value = match t.tok {
            Tok::Int => AttrVal::Int(self.text(t).to_string()),
            Tok::Float => AttrVal::Float(self.text(t).to_string()),
            Tok::Ident => AttrVal::Word(self.text(t).to_string()),
            Tok::LBracket => {
                self.bump();
                let mut items = Vec::new();
                if self.peek().tok != Tok::RBracket {
                    loop {
                        let item = self.expect(Tok::Int, "an integer")?;
                        items.push((self.text(item).to_string(), item.sp));
                        match self.peek().tok {
                            Tok::Comma => {
                                self.bump();
                            }
                            Tok::RBracket => break,
                            _ => return Err(self.unexpected("`,` or `]`")),
                        }
                    }
                }
                let close = self.peek();
                let value_sp = t.sp.to(close.sp);
                self.bump();
                return Ok(AttrAst { name, name_sp: name_tok.sp, value: AttrVal::List(items), value_sp });
            }
            _ => {
                return Err(
                    self.unexpected("an attribute value (a number, `true`, `false`, a list `[1, 2]` or a dtype)")
                );
            }
        };
        self.bump();
        Ok(AttrAst { name, name_sp: name_tok.sp, value, value_sp: t.sp })
    }

    /// `loc("model.py":14)`; `None` if the line number is out of range (reported).
    fn loc(&mut self) -> PResult<Option<Loc>> {
        self.bump();
        self.expect(Tok::LParen, "`(` after `loc`")?;
        let file_tok = self.expect(Tok::Str, "a file name in quotes")?;
        let file = unquote(self.text(file_tok));
        self.expect(Tok::Colon, "`:` and a line number")?;
        let line_tok = self.expect(Tok::Int, "a line number")?;
        let text = self.text(line_tok).to_string();
        self.expect(Tok::RParen, "`)`")?;
        match text.parse::<u32>() {
            Ok(line) => Ok(Some(Loc { file, line })),
            Err(_) => {
                self.errors.push(ParseError::NumberTooLarge {
                    literal: text,
                    what: "a line number (u32)",
                    span: line_tok.sp.into(),
                    help: format!("line numbers are integers from 0 to {}", u32::MAX),
                });
                Ok(None)
            }
        }
    }

    /// `update %w <- %w_new`
    fn update(&mut self) -> PResult<UpdateAst> {
        let kw = self.bump();
        let target = self.value()?;
        self.expect(Tok::Arrow, "`<-`")?;
        let value = self.value()?;
        Ok(UpdateAst { sp: kw.sp.to(value.1), target, value })
    }

    /// `return %a, %b`
    fn ret(&mut self) -> PResult<ReturnAst> {
        let kw = self.bump();
        let mut values = vec![self.value()?];
        while self.peek().tok == Tok::Comma {
            self.bump();
            values.push(self.value()?);
        }
        let end = values.last().map_or(kw.sp, |v| v.1);
        Ok(ReturnAst { values, sp: kw.sp.to(end) })
    }
}

fn unknown_dtype(name: String, sp: Sp) -> ParseError {
    let names = DType::ALL.map(DType::name);
    let list = names.join(", ");
    // `f64` is closer to `i64` than to any float type: suggest floats for float-like names.
    let floats = names.iter().copied().filter(|n| n.starts_with('f') || n.starts_with("bf"));
    let guess = if name.starts_with('f') { did_you_mean(&name, floats) } else { did_you_mean(&name, names) };
    let help = match guess {
        Some(m) => format!("did you mean `{m}`? dtypes are {list}"),
        None => format!("dtypes are {list}"),
    };
    ParseError::UnknownDType { name, span: sp.into(), help }
}

// ---------------------------------------------------------------------------------------
// Names, ops, attributes and types.

/// Builds the graph, pushing every error into `errors`. The graph is only meaningful when
/// no error was found (values with unknown types get a placeholder type, unknown ops a
/// placeholder kind).
fn resolve(ast: Ast, errors: &mut Vec<ParseError>) -> Graph {
    let placeholder = TensorType::new(DType::F32, Shape::scalar());
    let mut g = Graph::new(ast.name);
    // Per value: whether its type is known, and the span of its definition.
    let mut known: Vec<bool> = Vec::new();
    let mut def_sp: Vec<Sp> = Vec::new();
    let mut bound: HashMap<String, ValueId> = HashMap::new();

    let mut define = |g: &mut Graph, errors: &mut Vec<ParseError>, name: &str, sp: Sp, ty: Option<TensorType>, def| {
        let id = g.values.push(Value {
            name: name.to_string(),
            ty: ty.clone().unwrap_or_else(|| placeholder.clone()),
            def,
            span: sp.into(),
        });
        known.push(ty.is_some());
        def_sp.push(sp);
        match bound.get(name) {
            Some(&first) => errors.push(ParseError::Redefined {
                name: name.to_string(),
                span: sp.into(),
                first: def_sp.get(first.index()).copied().unwrap_or(sp).into(),
            }),
            None => {
                bound.insert(name.to_string(), id);
            }
        }
        id
    };

    for arg in &ast.args {
        let role = arg.role.unwrap_or(Role::Input);
        let id = define(&mut g, errors, &arg.name, arg.sp, arg.ty.clone(), ValueDef::Arg(role));
        g.args.push(id);
    }
    // Outputs of every op, in text order, before looking at any input: uses may name values
    // defined later (an error, but one to explain precisely).
    let mut outputs: Vec<Vec<ValueId>> = Vec::new();
    for (i, def) in ast.defs.iter().enumerate() {
        let op = OpId::new(i);
        let ids = def
            .outs
            .iter()
            .enumerate()
            .map(|(output, out)| define(&mut g, errors, &out.name, out.sp, None, ValueDef::Op { op, output }))
            .collect();
        outputs.push(ids);
    }

    let op_of = |g: &Graph, v: ValueId| g.def_op(v).map(Idx::index);
    // deps[i]: (value, op defining it) for every input of op i that an op defines.
    let deps: Vec<Vec<(ValueId, usize)>> = ast
        .defs
        .iter()
        .map(|def| {
            def.operands
                .iter()
                .filter_map(|(name, _)| bound.get(name))
                .filter_map(|&v| op_of(&g, v).map(|d| (v, d)))
                .collect()
        })
        .collect();

    for (i, def) in ast.defs.iter().enumerate() {
        let row = resolve_op_kind(def, errors);
        let mut inputs = Vec::new();
        let mut inputs_ok = true;
        for (name, sp) in &def.operands {
            let Some(&v) = bound.get(name) else {
                errors.push(undefined(name, *sp, &bound));
                inputs_ok = false;
                continue;
            };
            if let Some(d) = op_of(&g, v).filter(|&d| d >= i) {
                errors.push(later_use(&g, &deps, name, *sp, v, d, i, def_sp.get(v.index()).copied().unwrap_or(*sp)));
                inputs_ok = false;
            }
            inputs.push(v);
        }
        let mut counts_ok = true;
        let mut attrs = None;
        if let Some(row) = row {
            if def.operands.len() != row.inputs.len() {
                counts_ok = false;
                errors.push(ParseError::InputCount {
                    op: row.name,
                    expected: row.inputs.len(),
                    found: def.operands.len(),
                    span: def.sp.into(),
                    help: format!("the signature is {}", signature(row)),
                });
            }
            if def.outs.len() != row.outputs.len() {
                counts_ok = false;
                let first = def.outs.first().map_or(def.sp, |o| o.sp);
                let last = def.outs.last().map_or(def.sp, |o| o.sp);
                errors.push(ParseError::OutputCount {
                    op: row.name,
                    expected: row.outputs.len(),
                    found: def.outs.len(),
                    span: first.to(last).into(),
                    help: format!("the signature is {}", signature(row)),
                });
            }
            attrs = resolve_attrs(row, def, errors);
        }

        // Inference, when everything it needs is known.
        let out_ids = outputs.get(i).cloned().unwrap_or_default();
        let mut inferred: Option<Vec<TensorType>> = None;
        if let (Some(row), Some(attrs)) = (row, &attrs) {
            let all_known = inputs_ok && inputs.iter().all(|v| known.get(v.index()).copied().unwrap_or(false));
            if counts_ok && all_known {
                let tys: Vec<&TensorType> = inputs.iter().map(|&v| &g.values[v].ty).collect();
                match (row.infer)(&tys, attrs) {
                    Ok(t) if t.len() == def.outs.len() => inferred = Some(t),
                    Ok(t) => errors.push(ParseError::TypeError {
                        op: row.name,
                        message: format!(
                            "the op table's type rule gave {} type(s) for {} output(s) (a bug in memplan)",
                            t.len(),
                            def.outs.len()
                        ),
                        span: def.sp.into(),
                    }),
                    Err(message) => {
                        if def.outs.iter().any(|o| o.ty.is_none()) {
                            errors.push(ParseError::TypeError { op: row.name, message, span: def.sp.into() });
                        }
                    }
                }
            }
        }
        for (j, (out, &v)) in def.outs.iter().zip(&out_ids).enumerate() {
            let ty = match &out.ty {
                Some(written) => written.clone(),
                None => inferred.as_ref().and_then(|t| t.get(j).cloned()),
            };
            if let Some(ty) = ty {
                g.values[v].ty = ty;
                if let Some(k) = known.get_mut(v.index()) {
                    *k = true;
                }
            }
        }
        g.ops.push(Op {
            kind: row.map_or(OpKind::Add, |r| r.kind),
            inputs,
            outputs: out_ids,
            attrs: attrs.unwrap_or_default(),
            loc: def.loc.clone(),
            span: def.sp.into(),
        });
    }

    for up in &ast.updates {
        let target = bound.get(&up.target.0).copied();
        let value = bound.get(&up.value.0).copied();
        if target.is_none() {
            errors.push(undefined(&up.target.0, up.target.1, &bound));
        }
        if value.is_none() {
            errors.push(undefined(&up.value.0, up.value.1, &bound));
        }
        if let (Some(target), Some(value)) = (target, value) {
            g.updates.push(Update { target, value, span: up.sp.into() });
        }
    }
    for (k, ret) in ast.returns.iter().enumerate() {
        if k > 0 {
            errors.push(ParseError::DuplicateReturn { span: ret.sp.into(), first: ast.returns[0].sp.into() });
        }
        for (name, sp) in &ret.values {
            match bound.get(name) {
                Some(&value) if k == 0 => g.returns.push(Return { value, span: (*sp).into() }),
                Some(_) => {}
                None => errors.push(undefined(name, *sp, &bound)),
            }
        }
    }
    g
}

/// The row of a def's op, reporting an unknown op name.
fn resolve_op_kind(def: &DefAst, errors: &mut Vec<ParseError>) -> Option<&'static OpDef> {
    let row = OpKind::from_name(&def.op).map(OpKind::def);
    if row.is_none() {
        let help = match did_you_mean(&def.op, OPS.iter().map(|r| r.name)) {
            Some(m) => format!("did you mean `{m}`?"),
            None => "docs/IR.md lists every op".to_string(),
        };
        errors.push(ParseError::UnknownOp { name: def.op.clone(), span: def.op_sp.into(), help });
    }
    row
}

fn undefined(name: &str, sp: Sp, bound: &HashMap<String, ValueId>) -> ParseError {
    ParseError::Undefined {
        name: name.to_string(),
        span: sp.into(),
        help: did_you_mean(name, bound.keys().map(String::as_str)).map(|m| format!("did you mean `%{m}`?")),
    }
}

/// The error for op `user` reading `value` (named `name` at `sp`), which op `def_op` (at or
/// after `user` in the text) defines: a cycle if `def_op` depends on `user`.
#[allow(clippy::too_many_arguments)]
fn later_use(
    g: &Graph,
    deps: &[Vec<(ValueId, usize)>],
    name: &str,
    sp: Sp,
    value: ValueId,
    def_op: usize,
    user: usize,
    def: Sp,
) -> ParseError {
    match dependency_path(deps, def_op, user) {
        Some(path) => {
            let mut names: Vec<String> = path.iter().map(|&v| g.value_name(v)).collect();
            names.push(g.value_name(value));
            if let Some(first) = names.first().cloned() {
                names.push(first);
            }
            ParseError::Cycle { name: name.to_string(), cycle: names.join(" -> "), span: sp.into() }
        }
        None => ParseError::UseBeforeDef {
            name: name.to_string(),
            span: sp.into(),
            def: def.into(),
            help: format!("values must be defined before use; move this op below the definition of `%{name}`"),
        },
    }
}

/// If op `from` depends on op `to` through inputs, the values along the way in data-flow
/// order (the first is an output of `to`); empty when `from == to`.
fn dependency_path(deps: &[Vec<(ValueId, usize)>], from: usize, to: usize) -> Option<Vec<ValueId>> {
    if from == to {
        return Some(Vec::new());
    }
    // prev[op] = (the op that reads it, the value read) on a shortest path from `from`.
    let mut prev: Vec<Option<(usize, ValueId)>> = vec![None; deps.len()];
    let mut queue = std::collections::VecDeque::from([from]);
    let mut seen = vec![false; deps.len()];
    if let Some(s) = seen.get_mut(from) {
        *s = true;
    }
    while let Some(x) = queue.pop_front() {
        for &(v, d) in deps.get(x).map_or(&[][..], Vec::as_slice) {
            if seen.get(d).copied().unwrap_or(true) {
                continue;
            }
            seen[d] = true;
            prev[d] = Some((x, v));
            if d == to {
                let mut path = Vec::new();
                let mut cur = to;
                while cur != from {
                    let (x, v) = prev.get(cur).copied().flatten()?;
                    path.push(v);
                    cur = x;
                }
                return Some(path);
            }
            queue.push_back(d);
        }
    }
    None
}

/// The op's attributes in row order with defaults filled in, or `None` after reporting
/// unknown, duplicate, missing and wrong-kind attributes.
fn resolve_attrs(row: &'static OpDef, def: &DefAst, errors: &mut Vec<ParseError>) -> Option<Attrs> {
    let mut slots: Vec<Option<Attr>> = vec![None; row.attrs.len()];
    let mut seen: Vec<Option<Sp>> = vec![None; row.attrs.len()];
    let mut ok = true;
    for a in &def.attrs {
        let Some(k) = row.attrs.iter().position(|s| s.name == a.name) else {
            ok = false;
            let names: Vec<&str> = row.attrs.iter().map(|s| s.name).collect();
            let help = match did_you_mean(&a.name, names.iter().copied()) {
                Some(m) => format!("did you mean `{m}`? the signature is {}", signature(row)),
                None if names.is_empty() => format!("`{}` takes no attributes", row.name),
                None => format!("the signature is {}", signature(row)),
            };
            errors.push(ParseError::UnknownAttr { op: row.name, attr: a.name.clone(), span: a.name_sp.into(), help });
            continue;
        };
        let (Some(spec), Some(seen_k)) = (row.attrs.get(k), seen.get_mut(k)) else { continue };
        if let Some(first) = *seen_k {
            ok = false;
            errors.push(ParseError::DuplicateAttr {
                attr: a.name.clone(),
                span: a.name_sp.into(),
                first: first.into(),
            });
            continue;
        }
        *seen_k = Some(a.name_sp);
        match attr_value(row.name, spec.name, spec.kind, &a.value, a.value_sp) {
            Ok(v) => slots[k] = Some(v),
            Err(e) => {
                ok = false;
                errors.push(e);
            }
        }
    }
    let mut attrs = Vec::with_capacity(row.attrs.len());
    for ((spec, slot), seen) in row.attrs.iter().zip(slots).zip(&seen) {
        match (slot, spec.default) {
            (Some(v), _) => attrs.push((spec.name, v)),
            (None, Some(d)) if seen.is_none() => attrs.push((spec.name, d.to_attr())),
            (None, _) if seen.is_some() => {} // written but invalid: reported above
            (None, _) => {
                ok = false;
                errors.push(ParseError::MissingAttr {
                    op: row.name,
                    attr: spec.name,
                    span: def.sp.into(),
                    help: format!(
                        "add `{}=...` ({}); the signature is {}",
                        spec.name,
                        spec.kind.describe(),
                        signature(row)
                    ),
                });
            }
        }
    }
    ok.then_some(Attrs(attrs))
}

/// An attribute value of `kind` from its written form.
fn attr_value(op: &'static str, attr: &'static str, kind: AttrKind, value: &AttrVal, sp: Sp) -> PResult<Attr> {
    let wrong = || ParseError::AttrKind { op, attr, expected: kind.describe(), span: sp.into() };
    let int = |text: &str, sp: Sp| {
        text.parse::<i64>().map_err(|_| ParseError::NumberTooLarge {
            literal: text.to_string(),
            what: "an integer attribute (i64)",
            span: sp.into(),
            help: format!("integer attributes are from {} to {}", i64::MIN, i64::MAX),
        })
    };
    match (kind, value) {
        (AttrKind::Int, AttrVal::Int(t)) => int(t, sp).map(Attr::Int),
        (AttrKind::Float, AttrVal::Int(t) | AttrVal::Float(t)) => match t.parse::<f64>() {
            Ok(x) if x.is_finite() || t.contains("inf") => Ok(Attr::Float(x)),
            _ => Err(ParseError::NumberTooLarge {
                literal: t.clone(),
                what: "a float attribute (f64)",
                span: sp.into(),
                help: "write `inf` or `-inf` for an infinity".to_string(),
            }),
        },
        (AttrKind::Float, AttrVal::Word(w)) if w == "inf" => Ok(Attr::Float(f64::INFINITY)),
        (AttrKind::Bool, AttrVal::Word(w)) if w == "true" => Ok(Attr::Bool(true)),
        (AttrKind::Bool, AttrVal::Word(w)) if w == "false" => Ok(Attr::Bool(false)),
        (AttrKind::Ints, AttrVal::List(items)) => {
            items.iter().map(|(t, sp)| int(t, *sp)).collect::<PResult<Vec<i64>>>().map(Attr::Ints)
        }
        (AttrKind::DType, AttrVal::Word(w)) => {
            DType::from_name(w).map(Attr::DType).ok_or_else(|| unknown_dtype(w.clone(), sp))
        }
        _ => Err(wrong()),
    }
}

/// `matmul(a, b) -> out [transpose_a: bool = false, ...]`, for help lines.
fn signature(row: &OpDef) -> String {
    let mut s = format!("{}({}) -> {}", row.name, row.inputs.join(", "), row.outputs.join(", "));
    if !row.attrs.is_empty() {
        let attrs: Vec<String> = row
            .attrs
            .iter()
            .map(|a| {
                let kind = match a.kind {
                    AttrKind::Int => "int",
                    AttrKind::Float => "float",
                    AttrKind::Bool => "bool",
                    AttrKind::Ints => "ints",
                    AttrKind::DType => "dtype",
                };
                match a.default {
                    Some(d) => format!("{}: {kind} = {}", a.name, d.to_attr()),
                    None => format!("{}: {kind} (required)", a.name),
                }
            })
            .collect();
        s.push_str(&format!(" [{}]", attrs.join(", ")));
    }
    s
}

/// The candidate closest to `word` by edit distance, if close enough to be a likely typo.
fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates.into_iter().map(|c| (edit_distance(word, c), c)).filter(|&(d, _)| d <= limit).min().map(|(_, c)| c)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and
/// transpositions of adjacent characters each cost 1.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ops::{AttrDefault, AttrSpec, OpClass};

    const MLP: &str = "// a comment
step @mlp(
  %w1: f32[784,256] param,
  %b1: f32[256] param,
  %x: f32[64,784] input,
  %t: f32[] state,
) {
  %h = matmul(%x, %w1)                 // inferred
  %h2: f32[64,256] = add(%h, %b1)      // written
  %a = relu(%h2) loc(\"mlp.py\":14)
  %g = matmul(%x, %a, transpose_a=true)
  %w1_new = add(%w1, %g)
  update %w1 <- %w1_new
  return %a, %h
}
";

    fn errors(src: &str) -> Vec<ParseError> {
        match parse(src) {
            Ok(g) => panic!("expected errors, parsed {g:?}"),
            Err(e) => e.errors,
        }
    }

    /// The only error of `src`, its message, and the text its main label covers.
    fn one_error(src: &str) -> (ParseError, String, String) {
        let mut errs = errors(src);
        assert_eq!(errs.len(), 1, "{errs:?}");
        let e = errs.remove(0);
        let sp = e.span();
        let text = src.get(sp.offset()..sp.offset() + sp.len()).expect("label inside the source").to_string();
        let msg = e.to_string();
        (e, msg, text)
    }

    fn help(e: &ParseError) -> String {
        e.help().map(|h| h.to_string()).unwrap_or_default()
    }

    fn step(body: &str) -> String {
        format!(
            "step @s(\n  %x: f32[4] input,\n  %y: f32[4] input,\n  %h: f16[4] input,\n  %m: f32[4,8] input,\n) {{\n{body}\n}}\n"
        )
    }

    #[test]
    fn parses_a_small_step() {
        let g = parse(MLP).unwrap();
        assert_eq!(g.name, "mlp");
        let names: Vec<&str> = g.values.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["w1", "b1", "x", "t", "h", "h2", "a", "g", "w1_new"]);
        assert_eq!(g.args.len(), 4);
        assert_eq!(g.role(g.args[0]), Some(Role::Param));
        assert_eq!(g.role(g.args[2]), Some(Role::Input));
        assert_eq!(g.role(g.args[3]), Some(Role::State));
        assert_eq!(g.values[g.args[3]].ty, TensorType::new(DType::F32, vec![]));
        let ty = |name: &str| g.values.iter().find(|v| v.name == name).unwrap().ty.to_string();
        assert_eq!(ty("h"), "f32[64,256]");
        assert_eq!(ty("g"), "f32[784,256]");
        assert_eq!(g.ops.len(), 5);
        let ops: Vec<OpKind> = g.ops.iter().map(|o| o.kind).collect();
        assert_eq!(ops, [OpKind::Matmul, OpKind::Add, OpKind::Relu, OpKind::Matmul, OpKind::Add]);
        // Every attribute of the row, defaults filled in.
        let m = &g.ops[OpId(0)];
        assert_eq!(m.attrs.0, vec![("transpose_a", Attr::Bool(false)), ("transpose_b", Attr::Bool(false))]);
        assert_eq!(g.ops[OpId(3)].attrs.get("transpose_a"), Some(&Attr::Bool(true)));
        assert_eq!(g.ops[OpId(2)].loc, Some(Loc { file: "mlp.py".into(), line: 14 }));
        assert_eq!(g.ops[OpId(2)].attrs, Attrs(vec![]));
        assert_eq!(g.describe_op(OpId(1)), "%h2 = add(%h, %b1)");
        assert_eq!(g.updates.len(), 1);
        assert_eq!(g.value_name(g.updates[0].target), "%w1");
        assert_eq!(g.value_name(g.updates[0].value), "%w1_new");
        let rets: Vec<String> = g.returns.iter().map(|r| g.value_name(r.value)).collect();
        assert_eq!(rets, ["%a", "%h"]);
        // Spans: values at their names, ops from name to `)`, updates the statement.
        let text = |s: Span| {
            let (o, l) = s.range().unwrap();
            &MLP[o..o + l]
        };
        assert_eq!(text(g.values[ValueId(4)].span), "%h");
        assert_eq!(text(g.values[g.args[0]].span), "%w1");
        assert_eq!(text(g.ops[OpId(2)].span), "relu(%h2)");
        assert_eq!(text(g.ops[OpId(3)].span), "matmul(%x, %a, transpose_a=true)");
        assert_eq!(text(g.updates[0].span), "update %w1 <- %w1_new");
        assert_eq!(text(g.returns[1].span), "%h");
    }

    #[test]
    fn statements_in_any_order_and_literals() {
        let src = "step @s.1(%x: f32[2,3] input,) {\n  return %y\n  update %x <- %y\n  %y: f32[2,3] = relu(%x) loc(\"a \\\"q\\\" \\\\ \\n.py\":0)\n}";
        let g = parse(src).unwrap();
        assert_eq!(g.name, "s.1");
        assert_eq!(g.ops[OpId(0)].loc.as_ref().unwrap().file, "a \"q\" \\ \n.py");
        assert_eq!(g.updates.len(), 1);
        assert_eq!(g.returns.len(), 1);
        // No args, no trailing comma, empty body.
        let g = parse("step @e() {}").unwrap();
        assert!(g.args.is_empty() && g.ops.is_empty());
    }

    #[test]
    fn written_type_wins_and_inference_errors_need_an_unwritten_output() {
        // The verifier reports declared-vs-inferred mismatches; the parser keeps the written type.
        let g = parse(&step("  %a: f32[9] = relu(%x)")).unwrap();
        assert_eq!(g.values[ValueId(4)].ty.to_string(), "f32[9]");
        let g = parse(&step("  %a: f32[4] = add(%x, %h)")).unwrap();
        assert_eq!(g.values[ValueId(4)].ty.to_string(), "f32[4]");
    }

    #[test]
    fn syntax_error() {
        let src = step("  %a = relu(%x }");
        let (e, msg, text) = one_error(&src);
        assert!(matches!(e, ParseError::Syntax { .. }));
        assert_eq!(msg, "expected `,` or `)`, found `}`");
        assert_eq!(text, "}");
        let (_, msg, _) = one_error(&step("  %a = relu(%x, k=1, %y)"));
        assert_eq!(msg, "value after an attribute");
        let (_, msg, text) = one_error(&step("  %a = relu(%x) $"));
        assert_eq!((msg.as_str(), text.as_str()), ("unexpected character `$`", "$"));
        let (_, msg, text) = one_error("step @s() {} step");
        assert_eq!((msg.as_str(), text.as_str()), ("expected end of file after the step's `}`, found `step`", "step"));
        // Syntax errors stop at the first one even when later text has a lexer error.
        let (_, msg, _) = one_error("step @s( { $ }");
        assert_eq!(msg, "expected a value (`%name`), found `{`");
    }

    #[test]
    fn empty_file() {
        for src in ["", "  // only a comment\n\n// and another"] {
            let (e, msg, text) = one_error(src);
            assert!(matches!(e, ParseError::Syntax { .. }));
            assert!(msg.starts_with("expected `step`"), "{msg}");
            assert_eq!(e.span().offset(), src.len());
            assert_eq!(text, "");
        }
    }

    #[test]
    fn unterminated_string() {
        let src = step("  %a = relu(%x) loc(\"model.py:3)");
        let (e, msg, text) = one_error(&src);
        assert!(matches!(e, ParseError::UnterminatedString { .. }));
        assert_eq!(msg, "unterminated string");
        assert_eq!(text, "\"model.py:3)");
        let (_, msg, text) = one_error(&step("  %a = relu(%x) loc(\"a\\q\":3)"));
        assert_eq!((msg.as_str(), text.as_str()), ("unknown escape in string", "\\q"));
    }

    #[test]
    fn unknown_op() {
        let (e, msg, text) = one_error(&step("  %a = matmull(%m, %m)"));
        assert!(matches!(e, ParseError::UnknownOp { .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("unknown op `matmull`", "matmull"));
        assert_eq!(help(&e), "did you mean `matmul`?");
        let (e, _, _) = one_error(&step("  %a = frobnicate(%x)"));
        assert_eq!(help(&e), "docs/IR.md lists every op");
    }

    #[test]
    fn wrong_arity() {
        let (e, msg, text) = one_error(&step("  %a = relu(%x, %y)"));
        assert!(matches!(e, ParseError::InputCount { expected: 1, found: 2, .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("`relu` takes 1 input(s), found 2", "relu(%x, %y)"));
        assert_eq!(help(&e), "the signature is relu(x) -> out");
        let (e, msg, text) = one_error(&step("  %a, %b = relu(%x)"));
        assert!(matches!(e, ParseError::OutputCount { expected: 1, found: 2, .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("`relu` has 1 output(s), found 2", "%a, %b"));
    }

    #[test]
    fn attribute_errors() {
        let (e, msg, text) = one_error(&step("  %a = matmul(%m, %m, transpose=true)"));
        assert!(matches!(e, ParseError::UnknownAttr { .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("`matmul` has no attribute `transpose`", "transpose"));
        assert!(help(&e).starts_with("did you mean `transpose_a`?"), "{}", help(&e));
        let (e, _, _) = one_error(&step("  %a = relu(%x, alpha=1)"));
        assert_eq!(help(&e), "`relu` takes no attributes");

        let src = step("  %a = matmul(%m, %m, transpose_b=true, transpose_b=false)");
        let (e, msg, text) = one_error(&src);
        assert_eq!((msg.as_str(), text.as_str()), ("attribute `transpose_b` is set twice", "transpose_b"));
        let ParseError::DuplicateAttr { span, first, .. } = e else { panic!() };
        assert!(first.offset() < span.offset());

        let (e, msg, text) = one_error(&step("  %a = matmul(%m, %m, transpose_a=1)"));
        assert!(matches!(e, ParseError::AttrKind { .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("attribute `transpose_a` of `matmul` takes true or false", "1"));
    }

    // A row with one attribute of each kind, required or not, to test attribute resolution
    // independently of the real table.
    fn fake_infer(inputs: &[&TensorType], _: &Attrs) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone()])
    }
    fn fake_flops(_: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
        0
    }
    static FAKE: OpDef = OpDef {
        kind: OpKind::Add,
        name: "fake",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[
            AttrSpec { name: "n", kind: AttrKind::Int, default: Some(AttrDefault::Int(-1)) },
            AttrSpec { name: "lr", kind: AttrKind::Float, default: None },
            AttrSpec { name: "dims", kind: AttrKind::Ints, default: Some(AttrDefault::Ints(&[1, 1])) },
            AttrSpec { name: "to", kind: AttrKind::DType, default: None },
        ],
        class: OpClass::Forward,
        infer: fake_infer,
        flops: fake_flops,
        view_of: None,
        inplace: &[],
        doc: "a test row",
    };

    /// Resolves the attributes of the first def of `body` against `FAKE`.
    fn fake_attrs(body: &str) -> (Option<Attrs>, Vec<ParseError>, String) {
        let src = step(body);
        let (toks, lex_error) = lex(&src);
        let mut p = Parser { src: &src, toks, pos: 0, lex_error, errors: Vec::new() };
        let ast = p.step().unwrap();
        let mut errors = Vec::new();
        let attrs = resolve_attrs(&FAKE, &ast.defs[0], &mut errors);
        (attrs, errors, src)
    }

    #[test]
    fn attribute_kinds_defaults_and_required() {
        let (attrs, errs, _) = fake_attrs("  %a = fake(%x, to=bf16, lr=1)");
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            attrs.unwrap().0,
            vec![
                ("n", Attr::Int(-1)),
                ("lr", Attr::Float(1.0)),
                ("dims", Attr::Ints(vec![1, 1])),
                ("to", Attr::DType(DType::Bf16)),
            ]
        );
        let (attrs, errs, _) = fake_attrs("  %a = fake(%x, dims=[], lr=-inf, n=9223372036854775807, to=bool)");
        assert!(errs.is_empty(), "{errs:?}");
        let attrs = attrs.unwrap();
        assert_eq!(attrs.ints("dims"), &[] as &[i64]);
        assert_eq!(attrs.float("lr"), f64::NEG_INFINITY);
        assert_eq!(attrs.int("n"), i64::MAX);
        let (attrs, _, _) = fake_attrs("  %a = fake(%x, lr=1e-8, to=i32, dims=[-1, 2])");
        let attrs = attrs.unwrap();
        assert_eq!(attrs.float("lr"), 1e-8);
        assert_eq!(attrs.ints("dims"), &[-1, 2]);
    }

    #[test]
    fn missing_attribute() {
        let (attrs, errs, src) = fake_attrs("  %a = fake(%x, lr=0.1)");
        assert!(attrs.is_none());
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].to_string(), "`fake` needs attribute `to`");
        assert!(matches!(errs[0], ParseError::MissingAttr { attr: "to", .. }));
        let sp = errs[0].span();
        assert_eq!(&src[sp.offset()..sp.offset() + sp.len()], "fake(%x, lr=0.1)");
        assert!(help(&errs[0]).starts_with("add `to=...` (a dtype"));
    }

    #[test]
    fn attribute_values_out_of_range_or_of_the_wrong_kind() {
        let (_, errs, src) =
            fake_attrs("  %a = fake(%x, n=9223372036854775808, lr=1e999, dims=[1, 99999999999999999999], to=f64)");
        let got: Vec<(String, &str)> =
            errs.iter().map(|e| (e.to_string(), &src[e.span().offset()..e.span().offset() + e.span().len()])).collect();
        assert_eq!(
            got,
            [
                ("`9223372036854775808` does not fit an integer attribute (i64)".to_string(), "9223372036854775808"),
                ("`1e999` does not fit a float attribute (f64)".to_string(), "1e999"),
                ("`99999999999999999999` does not fit an integer attribute (i64)".to_string(), "99999999999999999999"),
                ("unknown dtype `f64`".to_string(), "f64"),
            ]
        );
        let (_, errs, _) = fake_attrs("  %a = fake(%x, n=1.5, lr=[1], dims=3, to=1)");
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                "attribute `n` of `fake` takes an integer",
                "attribute `lr` of `fake` takes a number",
                "attribute `dims` of `fake` takes a list of integers like [0, 1]",
                "attribute `to` of `fake` takes a dtype (f32, f16, bf16, i32, i64, bool)",
            ]
        );
    }

    #[test]
    fn unknown_dtype_and_role() {
        let src = "step @s(%x: f64[3] input) {}";
        let (e, msg, text) = one_error(src);
        assert!(matches!(e, ParseError::UnknownDType { .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("unknown dtype `f64`", "f64"));
        assert_eq!(help(&e), "dtypes are f32, f16, bf16, i32, i64, bool");
        let (e, _, _) = one_error("step @s(%x: f3[3] input) {}");
        assert!(help(&e).starts_with("did you mean `f32`?"), "{}", help(&e));
        let (e, msg, text) = one_error("step @s(%x: f32[3] parm) {}");
        assert!(matches!(e, ParseError::UnknownRole { .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("unknown role `parm`", "parm"));
        assert!(help(&e).starts_with("did you mean `param`?"));
    }

    #[test]
    fn numbers_too_large() {
        let (e, msg, text) = one_error("step @s(%x: f32[18446744073709551616] input) {}");
        assert!(matches!(e, ParseError::NumberTooLarge { .. }));
        assert_eq!(
            (msg.as_str(), text.as_str()),
            ("`18446744073709551616` does not fit a dimension (u64)", "18446744073709551616")
        );
        let (_, msg, _) = one_error("step @s(%x: f32[-1] input) {}");
        assert_eq!(msg, "`-1` does not fit a dimension (u64)");
        let (_, msg, text) = one_error(&step("  %a = relu(%x) loc(\"m.py\":4294967296)"));
        assert_eq!((msg.as_str(), text.as_str()), ("`4294967296` does not fit a line number (u32)", "4294967296"));
        // The largest dimension is fine here (its byte size overflows: the verifier's job).
        assert!(parse("step @s(%x: f32[18446744073709551615] input) {}").is_ok());
    }

    #[test]
    fn undefined_and_redefined() {
        let (e, msg, text) = one_error(&step("  %a = relu(%xx)"));
        assert!(matches!(e, ParseError::Undefined { .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("undefined value `%xx`", "%xx"));
        assert_eq!(help(&e), "did you mean `%x`?");
        let (_, msg, _) = one_error(&step("  return %zz"));
        assert_eq!(msg, "undefined value `%zz`");
        let (_, msg, _) = one_error(&step("  update %x <- %zz"));
        assert_eq!(msg, "undefined value `%zz`");

        let src = step("  %a = relu(%x)\n  %a = relu(%y)");
        let (e, msg, text) = one_error(&src);
        assert_eq!((msg.as_str(), text.as_str()), ("value `%a` is defined twice", "%a"));
        let ParseError::Redefined { span, first, .. } = e else { panic!() };
        assert!(first.offset() < span.offset());
        assert_eq!(&src[first.offset()..first.offset() + 2], "%a");
        // An output redefining an argument.
        let (_, msg, _) = one_error(&step("  %x = relu(%y)"));
        assert_eq!(msg, "value `%x` is defined twice");
    }

    #[test]
    fn use_before_definition_and_cycles() {
        let src = step("  %a = relu(%b)\n  %b = relu(%x)");
        let (e, msg, text) = one_error(&src);
        assert_eq!((msg.as_str(), text.as_str()), ("value `%b` is used before its definition", "%b"));
        assert!(help(&e).starts_with("values must be defined before use; move this op below"));
        let ParseError::UseBeforeDef { span, def, .. } = e else { panic!() };
        assert!(def.offset() > span.offset());

        let (e, msg, text) = one_error(&step("  %a = relu(%c)\n  %b = relu(%a)\n  %c = add(%b, %x)"));
        assert!(matches!(e, ParseError::Cycle { .. }));
        assert_eq!((msg.as_str(), text.as_str()), ("cycle: %a -> %b -> %c -> %a", "%c"));
        let (_, msg, _) = one_error(&step("  %a = relu(%a)"));
        assert_eq!(msg, "cycle: %a -> %a");
    }

    #[test]
    fn duplicate_return() {
        let src = step("  return %x\n  return %y");
        let (e, msg, text) = one_error(&src);
        assert_eq!((msg.as_str(), text.as_str()), ("a step has at most one `return`", "return %y"));
        let ParseError::DuplicateReturn { first, .. } = e else { panic!() };
        assert_eq!(&src[first.offset()..first.offset() + first.len()], "return %x");
    }

    #[test]
    fn type_errors() {
        let (e, msg, text) = one_error(&step("  %a = add(%x, %h)"));
        assert!(matches!(e, ParseError::TypeError { .. }));
        assert_eq!(msg, "add: dtypes differ: f32[4] and f16[4] (insert a cast)");
        assert_eq!(text, "add(%x, %h)");
        let (_, msg, _) = one_error(&step("  %a = matmul(%m, %m)"));
        assert!(msg.starts_with("matmul: inner dimensions differ"), "{msg}");
    }

    #[test]
    fn collects_every_semantic_error_without_cascades() {
        let src = step(
            "  %a = relu(%nope)\n  %b = relu(%a)\n  %c = matmull(%x)\n  %d = relu(%c)\n  %e = relu(%x, %y)\n  %f = add(%x, %h)\n  %g = relu(%f)",
        );
        let errs = errors(&src);
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                "undefined value `%nope`",
                "unknown op `matmull`",
                "`relu` takes 1 input(s), found 2",
                "add: dtypes differ: f32[4] and f16[4] (insert a cast)",
            ]
        );
        // An invalid argument type does not cascade into its users.
        let errs = errors("step @s(%x: f64[3] input, %y: f32[99999999999999999999] input) {\n  %a = add(%x, %y)\n}");
        assert_eq!(errs.len(), 2, "{errs:?}");
    }

    #[test]
    fn renders_with_file_line_and_column() {
        let src = step("  %a = relu(%xx)\n  %b = matmull(%m, %m)");
        let errs = parse(&src).unwrap_err();
        let text = crate::diagnostics::render(&errs, "x.step", &src, false);
        // %xx is on line 7, column 13; matmull on line 8, column 8.
        assert!(text.contains("x.step:7:13"), "{text}");
        assert!(text.contains("x.step:8:8"), "{text}");
        assert!(text.contains("not defined in this step"), "{text}");
        assert!(text.contains("did you mean `matmul`?"), "{text}");
        assert!(text.contains("the step has 2 errors"), "{text}");
        // A syntax error at the end of an empty file renders too.
        let errs = parse("").unwrap_err();
        let text = crate::diagnostics::render(&errs, "x.step", "", false);
        assert!(text.contains("expected `step`"), "{text}");
    }

    #[test]
    fn edit_distance_and_suggestions() {
        assert_eq!(edit_distance("relu", "relu"), 0);
        assert_eq!(edit_distance("reul", "relu"), 1);
        assert_eq!(edit_distance("matmull", "matmul"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(did_you_mean("prm", ["param", "input", "state"]), None);
        assert_eq!(did_you_mean("inptu", ["param", "input", "state"]), Some("input"));
    }

    #[test]
    fn printed_floats_read_back() {
        for x in
            [0.001, 1e-8, 1.0, -1.0, 0.0, 1e-5, 0.9, 0.999, 1e300, 5e-324, f64::MAX, f64::INFINITY, f64::NEG_INFINITY]
        {
            let text = format!("{x:?}");
            let (toks, err) = lex(&text);
            assert!(err.is_none() && toks.len() == 2, "{text} is one token");
            let value = match toks[0].tok {
                Tok::Int => AttrVal::Int(text.clone()),
                Tok::Float => AttrVal::Float(text.clone()),
                Tok::Ident => AttrVal::Word(text.clone()),
                other => panic!("{text} lexes as {other:?}"),
            };
            let got = attr_value("op", "x", AttrKind::Float, &value, Sp(0, text.len())).unwrap();
            assert_eq!(got, Attr::Float(x), "{text}");
        }
    }

    /// A tiny deterministic generator for the fuzz test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Parses `src`; if it parses, its printed form must parse back to the same graph.
    fn check_no_panic(src: &str) {
        if let Ok(g) = parse(src) {
            let printed = crate::ir::print::print(&g);
            assert_eq!(parse(&printed).as_ref().ok(), Some(&g), "{printed}");
        }
    }

    #[test]
    fn never_panics() {
        let text = format!("{MLP}// ünïcödé ✓\n");
        for (i, _) in text.char_indices() {
            check_no_panic(&text[..i]);
        }
        let pieces = [
            "step",
            "@s",
            "(",
            ")",
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "=",
            "<-",
            "-",
            "%",
            "%x",
            "%a",
            "f32",
            "f32[4]",
            "input",
            "param",
            "relu",
            "matmul",
            "add",
            "update",
            "return",
            "loc",
            "\"",
            "\"f\"",
            "1",
            "-1",
            "1.5",
            "1e",
            "-inf",
            "inf",
            "true",
            "x=",
            "99999999999999999999999",
            "\\",
            "\n",
            " ",
            "//",
            "é",
            "\0",
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3000 {
            let n = rng.below(40);
            let s: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect::<Vec<_>>().join("");
            check_no_panic(&s);
        }
        for _ in 0..300 {
            let bytes: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
            check_no_panic(&String::from_utf8_lossy(&bytes));
        }
        // Mutations of a valid step: replace a byte range with a piece.
        for _ in 0..1500 {
            let mut s = MLP.to_string();
            let at = rng.below(s.len());
            let len = rng.below(6).min(s.len() - at);
            if s.is_char_boundary(at) && s.is_char_boundary(at + len) {
                s.replace_range(at..at + len, pieces[rng.below(pieces.len())]);
            }
            check_no_panic(&s);
        }
    }

    /// Every file in ir/invalid is invalid in one way. Files whose first line says
    /// "(verifier)" parse (the verifier rejects them); every other file has exactly one
    /// parse error.
    #[test]
    fn invalid_corpus() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ir/invalid");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("step") {
                continue;
            }
            count += 1;
            let src = std::fs::read_to_string(&path).unwrap();
            let first = src.lines().next().unwrap_or("");
            let name = path.display();
            if src.is_empty() {
                assert!(parse(&src).is_err(), "{name}");
                continue;
            }
            assert!(first.starts_with("// "), "{name}: the first line says what is wrong");
            match parse(&src) {
                Ok(_) => assert!(first.contains("(verifier)"), "{name} parses but its comment does not say (verifier)"),
                Err(e) => {
                    assert!(!first.contains("(verifier)"), "{name}: {e:?}");
                    assert_eq!(e.errors.len(), 1, "{name}: {e:?}");
                }
            }
        }
        assert!(count >= 16, "only {count} invalid files");
    }
}
