//! The syntax tree and the recursive-descent parser that builds it from tokens.
//!
//! Follows the grammar of docs/IR.md exactly and stops at the first syntax error (no
//! recovery). Assumes a token list from [`lex`](super::lex::lex) (ending with `Eof` or
//! `Bad`); reading past its end yields `Eof`, so the parser never panics. Establishes: a
//! tree that is syntactically well formed, with the spans of every name, op and statement.
//! Nothing is resolved here (names, ops and attributes stay text), but errors that are facts
//! about single tokens (an unknown dtype or role, a dimension or line number out of range)
//! are collected in [`Parser::errors`] without stopping; the types and locations they spoil
//! are left `None`.

use super::lex::{Sp, Tok, Token, unquote};
use super::suggest::did_you_mean;
use super::{PResult, ParseError, syntax_error};
use crate::ir::graph::{Region, Loc, Role};
use crate::ir::types::{DType, Shape, TensorType};

// ---------------------------------------------------------------------------------------
// Syntax tree.

pub(super) struct Ast {
    pub(super) name: String,
    pub(super) args: Vec<ArgAst>,
    pub(super) defs: Vec<DefAst>,
    pub(super) updates: Vec<UpdateAst>,
    pub(super) returns: Vec<ReturnAst>,
    /// Every `backward` statement in text order (resolution reports all but the first).
    pub(super) backwards: Vec<BackwardAst>,
    pub(super) custom_backwards: Vec<CustomBackwardAst>,
}

/// `custom_backward(N)(%t: f32[4] = %t, %gy: f32[4] = grad %y) -> (%x) { ... }`.
pub(super) struct CustomBackwardAst {
    /// `None`: N out of range (already reported).
    pub(super) region: Option<u32>,
    /// What each argument of the body binds, in argument order.
    pub(super) binds: Vec<BindAst>,
    /// The forward values whose gradients the body returns.
    pub(super) grads: Vec<(String, Sp)>,
    /// The block as a step of its own: its arguments (role `input`), ops and `return`.
    pub(super) body: Ast,
    /// From `custom_backward` through the `)` of the gradient list.
    pub(super) sp: Sp,
}

/// `= %v` (the forward value) or `= grad %y` (its gradient) after a block argument.
pub(super) struct BindAst {
    pub(super) value: (String, Sp),
    pub(super) grad: bool,
}

pub(super) struct ArgAst {
    pub(super) name: String,
    pub(super) sp: Sp,
    /// `None`: the written type was invalid (already reported).
    pub(super) ty: Option<TensorType>,
    /// `None`: unknown role (already reported).
    pub(super) role: Option<Role>,
}

pub(super) struct OutAst {
    pub(super) name: String,
    pub(super) sp: Sp,
    /// `None`: no type written; `Some(None)`: an invalid type (already reported).
    pub(super) ty: Option<Option<TensorType>>,
}

pub(super) struct DefAst {
    pub(super) outs: Vec<OutAst>,
    pub(super) op: String,
    pub(super) op_sp: Sp,
    /// The op name through the closing parenthesis.
    pub(super) sp: Sp,
    pub(super) operands: Vec<(String, Sp)>,
    pub(super) attrs: Vec<AttrAst>,
    /// `checkpoint(N)`, `checkpoint_saved(N)`, `recompute(N)` or `custom(N)` after the call.
    pub(super) region: Option<Region>,
    pub(super) loc: Option<Loc>,
}

pub(super) struct AttrAst {
    pub(super) name: String,
    pub(super) name_sp: Sp,
    pub(super) value: AttrVal,
    pub(super) value_sp: Sp,
}

/// An attribute value as written; its meaning depends on the attribute's kind.
pub(super) enum AttrVal {
    Int(String),
    Float(String),
    /// `true`, `false`, `inf`, a dtype name, or any other word.
    Word(String),
    List(Vec<(String, Sp)>),
    /// A string in quotes, unquoted.
    Str(String),
}

pub(super) struct UpdateAst {
    pub(super) target: (String, Sp),
    pub(super) value: (String, Sp),
    pub(super) sp: Sp,
}

/// `backward %loss with adam(lr=0.01)`.
pub(super) struct BackwardAst {
    pub(super) loss: (String, Sp),
    pub(super) op: String,
    pub(super) op_sp: Sp,
    /// The optimizer name through its closing parenthesis (as [`DefAst::sp`]).
    pub(super) call_sp: Sp,
    pub(super) attrs: Vec<AttrAst>,
    /// The whole statement, from `backward` to `)`.
    pub(super) sp: Sp,
}

pub(super) struct ReturnAst {
    pub(super) values: Vec<(String, Sp)>,
    pub(super) sp: Sp,
}

impl Ast {
    fn new(name: String, args: Vec<ArgAst>) -> Ast {
        Ast {
            name,
            args,
            defs: Vec::new(),
            updates: Vec::new(),
            returns: Vec::new(),
            backwards: Vec::new(),
            custom_backwards: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parser.

pub(super) struct Parser<'a> {
    pub(super) src: &'a str,
    pub(super) toks: Vec<Token>,
    pub(super) pos: usize,
    pub(super) lex_error: Option<ParseError>,
    /// Errors that do not stop parsing (unknown dtypes and roles, out-of-range numbers).
    pub(super) errors: Vec<ParseError>,
}

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
        syntax_error(format!("expected {expected}, found {found}"), t.sp, help)
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

    pub(super) fn step(&mut self) -> PResult<Ast> {
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
        let mut ast = Ast::new(name, args);
        self.statements(&mut ast)?;
        self.bump();
        if self.peek().tok != Tok::Eof {
            return Err(
                self.unexpected_help("end of file after the step's `}`", Some("a file holds exactly one step".into()))
            );
        }
        Ok(ast)
    }

    /// The statements of a step or a block body, through the closing `}` (not consumed).
    fn statements(&mut self, ast: &mut Ast) -> PResult<()> {
        loop {
            let t = self.peek();
            match t.tok {
                Tok::RBrace => return Ok(()),
                Tok::Value => ast.defs.push(self.def()?),
                Tok::Ident if self.text(t) == "update" => ast.updates.push(self.update()?),
                Tok::Ident if self.text(t) == "return" => ast.returns.push(self.ret()?),
                Tok::Ident if self.text(t) == "backward" => ast.backwards.push(self.backward()?),
                Tok::Ident if self.text(t) == "custom_backward" => {
                    let block = self.custom_backward()?;
                    ast.custom_backwards.push(block);
                }
                _ => {
                    return Err(self.unexpected(
                        "a statement (`%v = op(...)`, `update`, `backward`, `custom_backward` or `return`) or `}`",
                    ));
                }
            }
        }
    }

    /// `custom_backward(N)(%t: f32[4] = %t, %gy: f32[4] = grad %y) -> (%x, %w) { ... }`
    fn custom_backward(&mut self) -> PResult<CustomBackwardAst> {
        let kw = self.bump();
        let region = self.region_number()?;
        self.expect(Tok::LParen, "`(` and the block's arguments")?;
        let (mut args, mut binds) = (Vec::new(), Vec::new());
        while self.peek().tok != Tok::RParen {
            let (name, sp) = self.value()?;
            self.expect(Tok::Colon, "`:` and the argument's type")?;
            let ty = self.ty()?;
            self.expect(Tok::Eq, "`= %value` or `= grad %value`: what the argument holds")?;
            let grad = self.is_keyword("grad");
            if grad {
                self.bump();
            }
            let value = self.value()?;
            args.push(ArgAst { name, sp, ty, role: Some(Role::Input) });
            binds.push(BindAst { value, grad });
            match self.peek().tok {
                Tok::Comma => {
                    self.bump();
                }
                Tok::RParen => {}
                _ => return Err(self.unexpected("`,` or `)`")),
            }
        }
        self.bump();
        self.expect(Tok::RightArrow, "`->` and the values whose gradients the block returns")?;
        self.expect(Tok::LParen, "`(`")?;
        let mut grads = Vec::new();
        while self.peek().tok != Tok::RParen {
            grads.push(self.value()?);
            match self.peek().tok {
                Tok::Comma => {
                    self.bump();
                }
                Tok::RParen => {}
                _ => return Err(self.unexpected("`,` or `)`")),
            }
        }
        let close = self.bump();
        self.expect(Tok::LBrace, "`{`")?;
        let mut body = Ast::new(format!("custom_backward{}", region.unwrap_or(0)), args);
        self.statements(&mut body)?;
        self.bump();
        Ok(CustomBackwardAst { region, binds, grads, body, sp: kw.sp.to(close.sp) })
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
                        return Err(syntax_error(
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
        let region = if ["checkpoint", "checkpoint_saved", "recompute", "custom"].iter().any(|k| self.is_keyword(k)) {
            self.region()?
        } else {
            None
        };
        let loc = if self.is_keyword("loc") { self.loc()? } else { None };
        Ok(DefAst { outs, op, op_sp: op_tok.sp, sp, operands, attrs, region, loc })
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
            Tok::Str => AttrVal::Str(unquote(self.text(t))),
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
                    self.unexpected("an attribute value (a number, `true`, `false`, a list `[1, 2]`, a dtype or a string)")
                );
            }
        };
        self.bump();
        Ok(AttrAst { name, name_sp: name_tok.sp, value, value_sp: t.sp })
    }

    /// `checkpoint(N)`, `checkpoint_saved(N)`, `recompute(N)` or `custom(N)`; `None` if N
    /// is out of range (reported).
    fn region(&mut self) -> PResult<Option<Region>> {
        let kw = self.bump();
        let make = match self.text(kw) {
            "recompute" => Region::Recompute,
            "custom" => Region::Custom,
            "checkpoint_saved" => Region::CheckpointSaved,
            _ => Region::Checkpoint,
        };
        Ok(self.region_number()?.map(make))
    }

    /// `(N)` after a region keyword; `None` if N is out of range (reported).
    fn region_number(&mut self) -> PResult<Option<u32>> {
        self.expect(Tok::LParen, "`(` and a region number")?;
        let n_tok = self.expect(Tok::Int, "a region number")?;
        self.expect(Tok::RParen, "`)` after the region number")?;
        Ok(self.u32_of(n_tok, "a region number (u32)", "region numbers"))
    }

    /// The value of the integer token `tok` as a u32; `None` if it is out of range
    /// (reported as `what`, with `plural` in the hint).
    fn u32_of(&mut self, tok: Token, what: &'static str, plural: &str) -> Option<u32> {
        let text = self.text(tok).to_string();
        let parsed = text.parse::<u32>().ok();
        if parsed.is_none() {
            self.errors.push(ParseError::NumberTooLarge {
                literal: text,
                what,
                span: tok.sp.into(),
                help: format!("{plural} are integers from 0 to {}", u32::MAX),
            });
        }
        parsed
    }

    /// `loc("model.py":14)` or `loc("model.py":14, "blocks.3.attn")` (with the module
    /// path); `None` if the line number is out of range (reported).
    fn loc(&mut self) -> PResult<Option<Loc>> {
        self.bump();
        self.expect(Tok::LParen, "`(` after `loc`")?;
        let file_tok = self.expect(Tok::Str, "a file name in quotes")?;
        let file = unquote(self.text(file_tok));
        self.expect(Tok::Colon, "`:` and a line number")?;
        let line_tok = self.expect(Tok::Int, "a line number")?;
        let module = if self.peek().tok == Tok::Comma {
            self.bump();
            let module_tok = self.expect(Tok::Str, "a module path in quotes")?;
            Some(unquote(self.text(module_tok)))
        } else {
            None
        };
        self.expect(Tok::RParen, "`)` (or `,` and a module path in quotes)")?;
        Ok(self.u32_of(line_tok, "a line number (u32)", "line numbers").map(|line| Loc { file, line, module }))
    }

    /// `update %w <- %w_new`
    fn update(&mut self) -> PResult<UpdateAst> {
        let kw = self.bump();
        let target = self.value()?;
        self.expect(Tok::Arrow, "`<-`")?;
        let value = self.value()?;
        Ok(UpdateAst { sp: kw.sp.to(value.1), target, value })
    }

    /// `backward %loss with adam(lr=0.01)`: the optimizer call holds attributes only.
    fn backward(&mut self) -> PResult<BackwardAst> {
        let kw = self.bump();
        let loss = self.value()?;
        self.expect_keyword(
            "with",
            Some("write the optimizer after `with`: `backward %loss with adam(lr=0.001)`".into()),
        )?;
        let op_tok = self.expect(Tok::Ident, "an optimizer (`sgd`, `sgd_momentum`, `adam` or `adamw`)")?;
        let op = self.text(op_tok).to_string();
        self.expect(Tok::LParen, "`(` after the optimizer name")?;
        let mut attrs = Vec::new();
        if self.peek().tok != Tok::RParen {
            loop {
                let t = self.peek();
                match t.tok {
                    Tok::Ident => attrs.push(self.attr()?),
                    Tok::Value => {
                        return Err(syntax_error(
                            "the optimizer of `backward` takes no values",
                            t.sp,
                            Some(
                                "write only attributes (`adam(lr=0.001)`): autodiff supplies each param, its gradient and the optimizer state"
                                    .into(),
                            ),
                        ));
                    }
                    _ => return Err(self.unexpected("an attribute (`name=value`)")),
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
        let call_sp = op_tok.sp.to(close.sp);
        Ok(BackwardAst { loss, op, op_sp: op_tok.sp, call_sp, attrs, sp: kw.sp.to(close.sp) })
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

pub(super) fn unknown_dtype(name: String, sp: Sp) -> ParseError {
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
