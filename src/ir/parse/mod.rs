//! The parser: `.step` text → [`Graph`], with spans on every entity.
//!
//! Three stages, each small and each in its own file:
//! 1. `lex`: a hand-written lexer turns bytes into tokens (comments `//` to end of line are
//!    skipped);
//! 2. `syntax`: a recursive-descent parser builds a syntax tree following the grammar of
//!    docs/IR.md exactly. The first syntax error ends parsing (there is no recovery: one
//!    clear message beats a cascade of guesses);
//! 3. `resolve`: resolution binds names, checks ops, arities and attributes against the op
//!    table and infers types. It COLLECTS every error of the step, so a user fixes them in
//!    one go.
//!
//! This file holds the errors ([`ParseError`], [`ParseErrors`]) and [`parse`], which runs
//! the three stages; the unit tests are in `tests`. `suggest` (did-you-mean suggestions
//! for help texts) serves stages 2 and 3 and depends on neither.
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
//! its closing parenthesis; an update's and a `backward`'s cover the statement; a returned
//! value's is its `%name` in the `return` statement. Value names are stored without their `%`.
//!
//! Invariant: `parse` never panics, whatever the input (slicing uses `get`, integer
//! literals are parsed with checked conversions, the token list always ends with an
//! end-of-file token). Errors hold spans, not the source text: `crate::diagnostics::render`
//! attaches the text when showing them.

mod lex;
mod resolve;
mod suggest;
mod syntax;
#[cfg(test)]
mod tests;

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::ir::graph::Graph;
use lex::{Sp, lex};
use resolve::resolve;
use syntax::Parser;

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

    /// A `backward` statement names an optimizer that is not a row of the op table.
    #[error("unknown optimizer `{name}`")]
    UnknownOptimizer {
        name: String,
        #[label("no optimizer has this name")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// A `backward` statement names an op that is not an optimizer (`relu`, `matmul`, ...).
    #[error("`{name}` is not an optimizer")]
    NotAnOptimizer {
        name: &'static str,
        #[label("not an optimizer")]
        span: SourceSpan,
        #[help]
        help: String,
    },

    /// A second `backward` statement (a step is differentiated once, for one loss).
    #[error("a step has at most one `backward`")]
    #[diagnostic(help(
        "one `backward` statement differentiates one loss and updates every param it depends on; keep one (sum the losses first to train on several)"
    ))]
    DuplicateBackward {
        #[label("second backward")]
        span: SourceSpan,
        #[label("first backward")]
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
            | UnknownOptimizer { span, .. }
            | NotAnOptimizer { span, .. }
            | DuplicateBackward { span, .. }
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

/// The result of a parsing step that stops at its error.
type PResult<T> = Result<T, ParseError>;

/// A syntax error at `sp`.
fn syntax_error(message: impl Into<String>, sp: Sp, help: Option<String>) -> ParseError {
    ParseError::Syntax { message: message.into(), span: sp.into(), help }
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
    let graph = resolve(&ast, &mut errors);
    if errors.is_empty() {
        Ok(graph)
    } else {
        errors.sort_by_key(|e| e.span().offset());
        Err(ParseErrors { errors })
    }
}
