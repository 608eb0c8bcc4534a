//! The lexer: source bytes → tokens with byte spans ([`Sp`]).
//!
//! Assumes nothing about the input: any `&str` lexes without panicking (bytes are read with
//! `get`, spans of multi-byte characters are whole characters). Establishes: the token list
//! ends with exactly one `Eof` token, or with a `Bad` token together with the error that
//! stopped lexing (the parser reports that error when it reaches the `Bad` token, so a
//! syntax error earlier in the text wins). Whitespace and `//` comments produce no token.
//! Literals are only delimited here; their values are read where they are used (strings by
//! [`unquote`], numbers with checked conversions by the parser and by resolution).

use miette::SourceSpan;

use super::{ParseError, syntax_error};
use crate::ir::graph::Span;

/// A byte range `[start, end)` of the source.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Sp(pub(super) usize, pub(super) usize);

impl Sp {
    pub(super) fn to(self, other: Sp) -> Sp {
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
pub(super) enum Tok {
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
    /// `<-` (an update).
    Arrow,
    /// `->` (a `custom_backward` block's gradients).
    RightArrow,
    Eof,
    /// Where lexing failed; the parser reports the lexer's error when it reaches it.
    Bad,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) sp: Sp,
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

/// Tokens of `src`, always ending with `Eof` (or `Bad` plus the error that stopped lexing).
pub(super) fn lex(src: &str) -> (Vec<Token>, Option<ParseError>) {
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
            b'-' if at(i + 1) == b'>' => Ok((Tok::RightArrow, i + 2)),
            c @ (b'%' | b'@') => {
                let mut j = i + 1;
                while is_name_byte(at(j)) {
                    j += 1;
                }
                if j == i + 1 {
                    let what = if c == b'%' { "a value name after `%`" } else { "a step name after `@`" };
                    Err(syntax_error(
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
                Err(syntax_error(format!("unexpected character `{}`", ch.escape_debug()), sp, None))
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
                Some(b'u') if unicode_escape(&src[j..]).is_some() => j += src[j..].find('}').map_or(2, |k| k + 1),
                None | Some(b'\n') => return Err(ParseError::UnterminatedString { span: Sp(i, j + 1).into() }),
                Some(_) => {
                    let sp = Sp(j, char_span(src, j + 1).1);
                    return Err(syntax_error(
                        "unknown escape in string",
                        sp,
                        Some("strings know the escapes \\\", \\\\, \\n, \\t and \\u{1b} (a character by its hexadecimal code)".into()),
                    ));
                }
            },
            Some(_) => j += 1,
        }
    }
}

/// The character of a `\u{HEX}` escape at the start of `text` (1 to 6 hexadecimal digits
/// naming a character), if it is one.
fn unicode_escape(text: &str) -> Option<char> {
    let digits = text.strip_prefix("\\u{")?.split('}').next().filter(|d| (1..=6).contains(&d.len()) && d.chars().all(|c| c.is_ascii_hexdigit()))?;
    text.get(3 + digits.len()..)?.starts_with('}').then_some(())?;
    char::from_u32(u32::from_str_radix(digits, 16).ok()?)
}

/// The contents of a string literal whose text (quotes included) the lexer accepted.
pub(super) fn unquote(text: &str) -> String {
    let inner = text.get(1..text.len().saturating_sub(1)).unwrap_or("");
    let mut out = String::with_capacity(inner.len());
    let mut rest = inner;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        if c != '\\' {
            out.push(c);
            continue;
        }
        match rest.chars().next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('u') => {
                // The lexer accepted it: `\u{HEX}`.
                let escape = format!("\\{}", &rest[..rest.find('}').map_or(rest.len(), |k| k + 1)]);
                out.extend(unicode_escape(&escape));
                rest = &rest[escape.len() - 1..];
                continue;
            }
            Some(other) => out.push(other),
            None => {}
        }
        rest = rest.get(1..).unwrap_or("");
    }
    out
}
