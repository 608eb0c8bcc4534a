//! Unit tests of the parser: every error kind with its message, label and help; spans;
//! attribute resolution against a fake op row; float literals that read back exactly; a
//! fuzz test that parsing never panics and that printing round-trips; and the ir/invalid
//! corpus, one error per file.

use miette::Diagnostic;

use super::lex::{Sp, Tok, lex};
use super::resolve::{attr_value, resolve_attrs};
use super::syntax::{AttrVal, Parser};
use super::{ParseError, parse};
use crate::index::{OpId, ValueId};
use crate::ir::graph::{Loc, Role, Span};
use crate::ir::ops::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, OpKind};
use crate::ir::types::{DType, TensorType};

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

/// A forward-only step: autodiff writes the gradients, the optimizer and the updates.
const FORWARD: &str = "// forward only
step @fwd(
  %w: f32[4,3] param,
  %b: f32[3] param,
  %x: f32[8,4] input,
  %y: i32[8] input,
) {
  %h = matmul(%x, %w)
  %o = add(%h, %b)
  return %loss
  backward %loss with adam(lr=0.01, eps=1e-6)   // before the loss's definition: any order
  %loss = cross_entropy(%o, %y)
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
    assert_eq!(g.ops[OpId(2)].loc, Some(Loc { file: "mlp.py".into(), line: 14, module: None }));
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
fn parses_a_backward_statement() {
    let g = parse(FORWARD).unwrap();
    let bw = g.backward.as_ref().expect("a backward statement");
    assert_eq!(g.value_name(bw.loss), "%loss");
    assert_eq!(g.def_op(bw.loss), Some(OpId(2)));
    assert_eq!(bw.optimizer, OpKind::Adam);
    // Row order, defaults filled in.
    assert_eq!(
        bw.attrs.0,
        vec![
            ("lr", Attr::Float(0.01)),
            ("beta1", Attr::Float(0.9)),
            ("beta2", Attr::Float(0.999)),
            ("eps", Attr::Float(1e-6)),
        ]
    );
    let (o, l) = bw.span.range().unwrap();
    assert_eq!(&FORWARD[o..o + l], "backward %loss with adam(lr=0.01, eps=1e-6)");
    assert!(g.updates.is_empty());
    assert_eq!(g.returns.len(), 1);
    assert_eq!(g.backward_text().unwrap(), "backward %loss with adam(lr=0.01, eps=1e-6)");
    // A step without one has none.
    assert_eq!(parse(MLP).unwrap().backward, None);
}

/// The optimizer and attributes of `body`'s backward statement.
fn optimizer(body: &str) -> (OpKind, Attrs) {
    let g = parse(&step(body)).unwrap_or_else(|e| panic!("{e:?}"));
    let bw = g.backward.unwrap();
    (bw.optimizer, bw.attrs)
}

#[test]
fn backward_optimizers_and_the_sgd_momentum_sugar() {
    let (kind, attrs) = optimizer("  backward %l with sgd(lr=1)
  %l = relu(%x)");
    assert_eq!((kind, attrs.0), (OpKind::Sgd, vec![("lr", Attr::Float(1.0))]));
    // `sgd` with `momentum` is `sgd_momentum`.
    let (kind, attrs) = optimizer("  %l = relu(%x)
  backward %l with sgd(momentum=0.5, lr=0.1)");
    assert_eq!((kind, attrs.0), (OpKind::SgdMomentum, vec![("lr", Attr::Float(0.1)), ("momentum", Attr::Float(0.5))]));
    let (kind, attrs) = optimizer("  %l = relu(%x)
  backward %l with sgd_momentum(lr=0.1)");
    assert_eq!((kind, attrs.0), (OpKind::SgdMomentum, vec![("lr", Attr::Float(0.1)), ("momentum", Attr::Float(0.9))]));
    let (kind, attrs) = optimizer("  %l = relu(%x)
  backward %l with adam()");
    assert_eq!((kind, attrs), (OpKind::Adam, Attrs::defaults(OpKind::Adam).unwrap()));
    let (kind, attrs) = optimizer("  %l = relu(%x)
  backward %l with adamw(weight_decay=0, lr=0.1)");
    assert_eq!(kind, OpKind::Adamw);
    assert_eq!(attrs.float("weight_decay"), 0.0);
    assert_eq!(attrs.float("lr"), 0.1);
    // Any argument or op output may be named at parse time (the verifier checks the loss).
    let (kind, _) = optimizer("  backward %x with adamw()");
    assert_eq!(kind, OpKind::Adamw);
}

#[test]
fn duplicate_backward() {
    let src = step("  %l = relu(%x)
  backward %l with adam()
  return %l
  backward %l with sgd(lr=0.1)");
    let (e, msg, text) = one_error(&src);
    assert_eq!((msg.as_str(), text.as_str()), ("a step has at most one `backward`", "backward %l with sgd(lr=0.1)"));
    assert!(help(&e).starts_with("one `backward` statement differentiates one loss"), "{}", help(&e));
    let ParseError::DuplicateBackward { first, .. } = e else { panic!() };
    assert_eq!(&src[first.offset()..first.offset() + first.len()], "backward %l with adam()");
}

#[test]
fn backward_with_an_unknown_optimizer_or_an_op_that_is_not_one() {
    let (e, msg, text) = one_error(&step("  %l = relu(%x)
  backward %l with adma(lr=0.1)"));
    assert!(matches!(e, ParseError::UnknownOptimizer { .. }));
    assert_eq!((msg.as_str(), text.as_str()), ("unknown optimizer `adma`", "adma"));
    assert_eq!(help(&e), "did you mean `adam`? the optimizers are sgd, sgd_momentum, adam, adamw");
    let (e, _, _) = one_error(&step("  %l = relu(%x)
  backward %l with rmsprop()"));
    assert_eq!(help(&e), "the optimizers are sgd, sgd_momentum, adam, adamw");
    // Suggestions come from the optimizers only (`relu_` is closest to `relu`).
    let (e, _, _) = one_error(&step("  %l = relu(%x)
  backward %l with relu_()"));
    assert!(matches!(e, ParseError::UnknownOptimizer { .. }));
    assert_eq!(help(&e), "the optimizers are sgd, sgd_momentum, adam, adamw");

    let (e, msg, text) = one_error(&step("  %l = relu(%x)
  backward %l with relu()"));
    assert!(matches!(e, ParseError::NotAnOptimizer { name: "relu", .. }));
    assert_eq!((msg.as_str(), text.as_str()), ("`relu` is not an optimizer", "relu"));
    assert_eq!(
        help(&e),
        "`backward` applies an optimizer to every param the loss depends on; the optimizers are sgd, sgd_momentum, adam, adamw"
    );
    let (_, msg, _) = one_error(&step("  %l = relu(%x)
  backward %l with cross_entropy_backward()"));
    assert_eq!(msg, "`cross_entropy_backward` is not an optimizer");
}

#[test]
fn backward_attributes_resolve_like_an_ops() {
    let body = |call: &str| step(&format!("  %l = relu(%x)
  backward %l with {call}"));
    let (e, msg, text) = one_error(&body("sgd()"));
    assert!(matches!(e, ParseError::MissingAttr { attr: "lr", .. }));
    assert_eq!((msg.as_str(), text.as_str()), ("`sgd` needs attribute `lr`", "sgd()"));
    // The sugar resolves against sgd_momentum's row.
    let (_, msg, text) = one_error(&body("sgd(momentum=0.9)"));
    assert_eq!((msg.as_str(), text.as_str()), ("`sgd_momentum` needs attribute `lr`", "sgd(momentum=0.9)"));
    let (e, msg, text) = one_error(&body("adam(lr=0.1, betta1=0.8)"));
    assert!(matches!(e, ParseError::UnknownAttr { .. }));
    assert_eq!((msg.as_str(), text.as_str()), ("`adam` has no attribute `betta1`", "betta1"));
    assert!(help(&e).starts_with("did you mean `beta1`?"), "{}", help(&e));
    let (e, msg, text) = one_error(&body("adam(lr=0.1, lr=0.2)"));
    assert!(matches!(e, ParseError::DuplicateAttr { .. }));
    assert_eq!((msg.as_str(), text.as_str()), ("attribute `lr` is set twice", "lr"));
    let (_, msg, text) = one_error(&body("adam(lr=true)"));
    assert_eq!((msg.as_str(), text.as_str()), ("attribute `lr` of `adam` takes a number", "true"));
    let (_, msg, _) = one_error(&body("sgd(lr=1e999)"));
    assert_eq!(msg, "`1e999` does not fit a float attribute (f64)");
    // Values in range are the verifier's business: lr=-1 parses.
    let (kind, attrs) = optimizer("  %l = relu(%x)
  backward %l with sgd(lr=-1)");
    assert_eq!((kind, attrs.float("lr")), (OpKind::Sgd, -1.0));
}

#[test]
fn backward_errors_in_names_and_syntax() {
    let (e, msg, text) = one_error(&step("  %loss = relu(%x)
  backward %los with adam()"));
    assert!(matches!(e, ParseError::Undefined { .. }));
    assert_eq!((msg.as_str(), text.as_str()), ("undefined value `%los`", "%los"));
    assert_eq!(help(&e), "did you mean `%loss`?");
    // Name and optimizer errors are collected together.
    let errs = errors(&step("  backward %nope with adma()"));
    let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
    assert_eq!(msgs, ["undefined value `%nope`", "unknown optimizer `adma`"]);

    let (e, msg, text) = one_error(&step("  backward %x adam()"));
    assert!(matches!(e, ParseError::Syntax { .. }));
    assert_eq!((msg.as_str(), text.as_str()), ("expected `with`, found `adam`", "adam"));
    assert!(help(&e).contains("backward %loss with adam(lr=0.001)"), "{}", help(&e));
    let (e, msg, text) = one_error(&step("  backward %x with adam(%x, lr=0.1)"));
    assert_eq!((msg.as_str(), text.as_str()), ("the optimizer of `backward` takes no values", "%x"));
    assert!(help(&e).starts_with("write only attributes"), "{}", help(&e));
    let (_, msg, _) = one_error(&step("  backward loss with adam()"));
    assert_eq!(msg, "expected a value (`%name`), found `loss`");
    let (_, msg, _) = one_error(&step("  backward %x with adam"));
    assert_eq!(msg, "expected `(` after the optimizer name, found `}`");
    let (_, msg, _) = one_error(&step("  backward %x with adam(lr=0.1 eps=1e-8)"));
    assert_eq!(msg, "expected `,` or `)`, found `eps`");
    let (_, msg, _) = one_error(&step("  backward %x with (lr=0.1)"));
    assert_eq!(msg, "expected an optimizer (`sgd`, `sgd_momentum`, `adam` or `adamw`), found `(`");
    let (_, msg, _) = one_error(&step("  frobnicate %x"));
    assert_eq!(msg, "expected a statement (`%v = op(...)`, `update`, `backward`, `custom_backward` or `return`) or `}`, found `frobnicate`");
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
static FAKE: OpDef = OpDef::new("fake", &["x"], &["out"], fake_infer, "a test row").attrs(&[
    AttrSpec { name: "n", kind: AttrKind::Int, default: Some(AttrDefault::Int(-1)) },
    AttrSpec { name: "lr", kind: AttrKind::Float, default: None },
    AttrSpec { name: "dims", kind: AttrKind::Ints, default: Some(AttrDefault::Ints(&[1, 1])) },
    AttrSpec { name: "to", kind: AttrKind::DType, default: None },
]);

/// Resolves the attributes of the first def of `body` against `FAKE`.
fn fake_attrs(body: &str) -> (Option<Attrs>, Vec<ParseError>, String) {
    let src = step(body);
    let (toks, lex_error) = lex(&src);
    let mut p = Parser { src: &src, toks, pos: 0, lex_error, errors: Vec::new() };
    let ast = p.step().unwrap();
    let mut errors = Vec::new();
    let attrs = resolve_attrs(&FAKE, &ast.defs[0].attrs, ast.defs[0].sp, &mut errors);
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
    for base in [MLP, FORWARD] {
        let text = format!("{base}// ünïcödé ✓\n");
        for (i, _) in text.char_indices() {
            check_no_panic(&text[..i]);
        }
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
        "backward",
        "with",
        "adam",
        "sgd",
        "sgd(lr=1, momentum=0.5)",
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
    for i in 0..2000 {
        let mut s = if i % 2 == 0 { MLP } else { FORWARD }.to_string();
        let at = rng.below(s.len());
        let len = rng.below(6).min(s.len() - at);
        if s.is_char_boundary(at) && s.is_char_boundary(at + len) {
            s.replace_range(at..at + len, pieces[rng.below(pieces.len())]);
        }
        check_no_panic(&s);
    }
}

/// Every file in ir/invalid is invalid in one way. Files whose first line says
/// "(verifier)", "(autodiff)" or "(planner)" parse (that layer rejects them); every other
/// file has exactly one parse error.
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
        let later = ["(verifier)", "(autodiff)", "(planner)"].iter().any(|layer| first.contains(layer));
        if src.is_empty() {
            assert!(parse(&src).is_err(), "{name}");
            continue;
        }
        assert!(first.starts_with("// "), "{name}: the first line says what is wrong");
        match parse(&src) {
            Ok(_) => assert!(later, "{name} parses but its comment does not say (verifier), (autodiff) or (planner)"),
            Err(e) => {
                assert!(!later, "{name}: {e:?}");
                assert_eq!(e.errors.len(), 1, "{name}: {e:?}");
            }
        }
    }
    assert!(count >= 16, "only {count} invalid files");
}
