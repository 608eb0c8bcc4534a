//! Unit tests of the expansion: structure, names, optimizers, errors. Numerical gradient
//! checks of every rule are in tests/autodiff.rs.

use super::*;
use crate::ir::graph::Backward;
use crate::ir::ops::{Attrs, OPS, OpClass};
use crate::passes::PlanOptions;

/// Parses a forward-only step and asks for `backward %loss with kind(given)`.
fn forward(text: &str, loss: &str, kind: OpKind, given: &[(&'static str, Attr)]) -> Graph {
    let mut g = crate::parse(text).unwrap_or_else(|e| panic!("{e:?}"));
    crate::verify(&g).unwrap();
    let loss = id(&g, loss);
    let attrs = Builder::attrs(kind, given).unwrap();
    g.backward = Some(Backward { loss, optimizer: kind, attrs, span: Span::NONE });
    g
}

fn id(g: &Graph, name: &str) -> ValueId {
    g.values.iter_enumerated().find(|(_, v)| v.name == name).unwrap_or_else(|| panic!("no %{name}")).0
}

fn has(g: &Graph, name: &str) -> bool {
    g.values.iter().any(|v| v.name == name)
}

/// Expands, then checks the result verifies, plans and passes the checker.
fn expand_ok(g: &Graph) -> Graph {
    let e = expand(g).unwrap_or_else(|err| panic!("{err}"));
    assert!(e.backward.is_none());
    crate::verify(&e).unwrap_or_else(|err| panic!("{err:?}\n{}", crate::print(&e)));
    let plan = crate::plan(&e, &PlanOptions::default()).unwrap_or_else(|err| panic!("{err:?}"));
    crate::check(&e, &plan).unwrap();
    e
}

/// The text an expanded step prints, ops only (from the line after `{`).
fn body(g: &Graph) -> String {
    let text = crate::print(g);
    text.split_once(") {\n").unwrap().1.to_string()
}

use crate::ir::graph::Span;

const LINEAR: &str = "step @lin(
  %w: f32[3,2] param,
  %b: f32[2] param,
  %x: f32[4,3] input,
  %y: i32[4] input,
) {
  %h = matmul(%x, %w)
  %z = add(%h, %b)
  %loss = cross_entropy(%z, %y)
  return %loss
}";

#[test]
fn every_differentiable_row_has_a_rule() {
    for row in OPS {
        // (`fill` reads nothing; `detach` passes no gradient by definition; `fused` ops are
        // made after the backward is built.)
        let differentiable =
            row.class == OpClass::Forward && row.kind != OpKind::Fill && row.kind != OpKind::Fused && row.kind != OpKind::FusedNorm && !row.stops_gradient;
        assert_eq!(rules::rule(row.kind).is_some(), differentiable, "{}", row.name);
    }
}

#[test]
fn a_step_without_backward_is_unchanged() {
    let g = crate::parse(LINEAR).unwrap();
    assert_eq!(expand(&g).unwrap(), g);
}

#[test]
fn a_linear_step_expands_to_the_hand_written_backward() {
    let g = forward(LINEAR, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]);
    let e = expand_ok(&g);
    let want = "  %h: f32[4,2] = matmul(%x, %w)
  %z: f32[4,2] = add(%h, %b)
  %loss: f32[] = cross_entropy(%z, %y)
  %loss.grad: f32[] = fill(shape=[], dtype=f32, value=1.0)
  %z.grad: f32[4,2] = cross_entropy_backward(%loss.grad, %z, %y)
  %b.grad: f32[2] = sum(%z.grad, axes=[0])
  %w.grad: f32[3,2] = matmul(%x, %z.grad, transpose_a=true)
  %w.new: f32[3,2] = sgd(%w, %w.grad, lr=0.1)
  %b.new: f32[2] = sgd(%b, %b.grad, lr=0.1)
  update %w <- %w.new
  update %b <- %b.new
  return %loss
}
";
    assert_eq!(body(&e), want);
    // Inputs get no gradient; nothing but the ops above was added.
    assert!(!has(&e, "x.grad") && !has(&e, "y.grad") && !has(&e, "h.grad"));
    assert_eq!(e.args.len(), g.args.len());
}

#[test]
fn a_value_read_twice_accumulates_with_add() {
    let text = "step @s(
  %w: f32[2,2] param,
  %x: f32[3,2] input,
  %x2: f32[3,2] input,
) {
  %h1 = matmul(%x, %w)
  %h2 = matmul(%x2, %w)
  %s = add(%h1, %h2)
  %d = mul(%s, %s)
  %loss = mean(%d, axes=[0, 1])
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(1.0))]));
    let text = body(&e);
    // mul(%s, %s): two contributions to %s, summed.
    assert!(text.contains("%s.grad.1: f32[3,2] = mul(%d.grad, %s)"), "{text}");
    assert!(text.contains("%s.grad.2: f32[3,2] = mul(%d.grad, %s)"), "{text}");
    assert!(text.contains("%s.grad: f32[3,2] = add(%s.grad.1, %s.grad.2)"), "{text}");
    // %w is read by two matmuls: the later one (h2) contributes first.
    assert!(text.contains("%w.grad.1: f32[2,2] = matmul(%x2, %s.grad, transpose_a=true)"), "{text}");
    assert!(text.contains("%w.grad.2: f32[2,2] = matmul(%x, %s.grad, transpose_a=true)"), "{text}");
    assert!(text.contains("%w.grad: f32[2,2] = add(%w.grad.1, %w.grad.2)"), "{text}");
    // mean's gradient: scaled, reshaped to the keepdim shape, expanded.
    assert!(text.contains("%d.grad.t1: f32[] = mul_scalar(%loss.grad, value=0.16666666666666666)"), "{text}");
    assert!(text.contains("%d.grad.t2: f32[1,1] = reshape(%d.grad.t1, shape=[1, 1])"), "{text}");
    assert!(text.contains("%d.grad: f32[3,2] = expand(%d.grad.t2, shape=[3, 2])"), "{text}");
}

#[test]
fn unreached_params_and_integer_values_get_nothing() {
    let text = "step @s(
  %w: f32[2,2] param,
  %unused: f32[2] param,
  %side: f32[2,2] param,
  %k: i32[2] param,
  %x: f32[3,2] input,
) {
  %h = matmul(%x, %w)
  %kk = add(%k, %k)
  %kf = cast(%kk, to=f32)
  %hk = add(%h, %kf)
  %other = relu(%side)
  %loss = sum(%hk, axes=[0, 1])
  return %loss, %other
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Adam, &[]));
    for name in
        ["unused.new", "unused.m", "side.new", "side.grad", "k.grad", "kk.grad", "k.new", "kf.grad", "other.grad"]
    {
        assert!(!has(&e, name), "%{name} should not exist:\n{}", crate::print(&e));
    }
    let targets: Vec<&str> = e.updates.iter().map(|u| e.values[u.target].name.as_str()).collect();
    assert_eq!(targets, ["w", "w.m", "w.v", "step"]);
}

#[test]
fn every_optimizer_gets_its_state() {
    // sgd: no state.
    let e = expand_ok(&forward(LINEAR, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    assert_eq!(e.args.len(), 4);
    // sgd_momentum: one momentum buffer per param, updated in place.
    let given = [("lr", Attr::Float(0.1)), ("momentum", Attr::Float(0.8))];
    let e = expand_ok(&forward(LINEAR, "loss", OpKind::SgdMomentum, &given));
    let new_args: Vec<(&str, Option<Role>, String)> =
        e.args[4..].iter().map(|&a| (e.values[a].name.as_str(), e.role(a), e.values[a].ty.to_string())).collect();
    assert_eq!(
        new_args,
        [
            ("w.momentum", Some(Role::State), "f32[3,2]".to_string()),
            ("b.momentum", Some(Role::State), "f32[2]".to_string())
        ]
    );
    let text = body(&e);
    assert!(
        text.contains(
            "%w.new: f32[3,2], %w.momentum.new: f32[3,2] = sgd_momentum(%w, %w.grad, %w.momentum, lr=0.1, momentum=0.8)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "update %w.momentum <- %w.momentum.new\n  update %b <- %b.new\n  update %b.momentum <- %b.momentum.new"
        ),
        "{text}"
    );
    // adam and adamw: two moments per param and one step count, incremented once.
    for kind in [OpKind::Adam, OpKind::Adamw] {
        let e = expand_ok(&forward(LINEAR, "loss", kind, &[("lr", Attr::Float(0.01))]));
        let names: Vec<&str> = e.args[4..].iter().map(|&a| e.values[a].name.as_str()).collect();
        assert_eq!(names, ["w.m", "w.v", "b.m", "b.v", "step"]);
        assert!(e.args[4..].iter().all(|&a| e.role(a) == Some(Role::State)));
        assert_eq!(e.values[id(&e, "step")].ty.to_string(), "f32[]");
        let text = body(&e);
        assert_eq!(text.matches("add_scalar").count(), 1, "{text}");
        assert!(text.contains("%step.new: f32[] = add_scalar(%step, value=1.0)"), "{text}");
        let call = format!(
            "%b.new: f32[2], %b.m.new: f32[2], %b.v.new: f32[2] = {kind}(%b, %b.grad, %b.m, %b.v, %step.new, lr=0.01)"
        );
        assert!(text.contains(&call), "{text}");
        let targets: Vec<&str> = e.updates.iter().map(|u| e.values[u.target].name.as_str()).collect();
        assert_eq!(targets, ["w", "w.m", "w.v", "b", "b.m", "b.v", "step"]);
    }
}

#[test]
fn taken_names_get_suffixes() {
    let text = "step @s(
  %w: f32[2,2] param,
  %step: f32[] state,
  %x: f32[3,2] input,
) {
  %h = matmul(%x, %w)
  %w.grad = relu(%h)
  %w.m = mul_scalar(%w.grad, value=2.0)
  %loss = mean(%w.m, axes=[0, 1])
  %w.new = add_scalar(%loss, value=1.0)
  return %loss, %w.new, %step
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Adam, &[]));
    for name in ["w.grad_1", "w.m_1", "w.m_1.new", "w.new_1", "step_1", "step_1.new", "w.grad.grad", "w.m.grad"] {
        assert!(has(&e, name), "%{name} missing:\n{}", crate::print(&e));
    }
    let w = id(&e, "w");
    let adam = e.ops.iter().find(|op| op.kind == OpKind::Adam).unwrap();
    assert_eq!(adam.inputs[0], w);
    assert_eq!(e.values[adam.inputs[1]].name, "w.grad_1");
}

#[test]
fn layer_norm_names_every_output() {
    let text = "step @s(
  %g: f32[4] param,
  %x: f32[3,4] input,
) {
  %ones = fill(shape=[4], dtype=f32, value=0.0)
  %y = layer_norm(%x, %g, %ones)
  %loss = sum(%y, axes=[0, 1])
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    let text = body(&e);
    // Only gamma wants a gradient; dx and dbeta stay unused temporaries of their inputs.
    assert!(
        text.contains(
            "%x.grad.t1: f32[3,4], %g.grad: f32[4], %ones.grad.t1: f32[4] = layer_norm_backward(%y.grad, %x, %g)"
        ),
        "{text}"
    );
}

#[test]
fn attention_has_one_backward_op_reading_out_and_lse() {
    let text = "step @s(
  %wq: f32[2,4,3] param,
  %k: f32[1,5,3] input,
  %v: f32[1,5,2] input,
) {
  %q = mul_scalar(%wq, value=2.0)
  %o, %lse = attention(%q, %k, %v, causal=true, scale=0.5)
  %loss = sum(%o, axes=[0, 1, 2])
  return %loss, %lse
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    let text = body(&e);
    // Only q wants a gradient: dk and dv stay unused temporaries of k and v; lse, returned
    // but not on the loss's path, needs none.
    let want = "%q.grad: f32[2,4,3], %k.grad.t1: f32[1,5,3], %v.grad.t1: f32[1,5,2] = \
                attention_backward(%o.grad, %q, %k, %v, %o, %lse, causal=true, scale=0.5)";
    assert!(text.contains(want), "{text}");
    assert_eq!(e.ops.iter().filter(|op| op.kind == OpKind::AttentionBackward).count(), 1);
}

#[test]
fn dropout_backward_regenerates_the_mask_from_the_seed() {
    let text = "step @s(
  %w: f32[4,3] param,
  %x: f32[2,4] input,
  %seed: i64[] input,
) {
  %h = matmul(%x, %w)
  %d = dropout(%h, %seed, p=0.25, stream=3)
  %loss = sum(%d, axes=[0, 1])
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    let text = body(&e);
    // The same seed value and attributes as the forward; nothing but the seed and dy read.
    let want = "%h.grad: f32[2,3] = dropout_backward(%d.grad, %seed, p=0.25, stream=3)";
    assert!(text.contains(want), "{text}");
    assert_eq!(e.ops.iter().filter(|op| op.kind == OpKind::DropoutBackward).count(), 1);
    // The integer seed gets no gradient, and the forward's output is not read by backward.
    assert!(!has(&e, "seed.grad"), "{text}");
    let d = id(&e, "d");
    assert!(e.ops.iter().all(|op| op.kind == OpKind::Sum || !op.inputs.contains(&d)), "{text}");
}

#[test]
fn a_loss_through_lse_is_an_error() {
    let text = "step @s(
  %q: f32[2,4,3] param,
  %k: f32[1,5,3] input,
  %v: f32[1,5,2] input,
) {
  %o, %lse = attention(%q, %k, %v, scale=0.5)
  %a = sum(%o, axes=[0, 1, 2])
  %b = sum(%lse, axes=[0, 1])
  %loss = add(%a, %b)
  return %loss
}";
    let e = expand(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "%q reaches the loss through %lse, the `lse` output of `%o, %lse = attention(%q, %k, %v, scale=0.5)`, \
         which has no gradient"
    );
    let shown = crate::diagnostics::render(&e, "s.step", text, false);
    assert!(shown.contains("s.step:6:14") && shown.contains("not differentiable"), "{shown}");
}

#[test]
fn errors_name_the_problem() {
    let sgd = [("lr", Attr::Float(0.1))];
    let err = |g: &Graph| expand(g).unwrap_err();

    let only_inputs = "step @s(%w: f32[2] param, %x: f32[2] input) {
  %loss = sum(%x, axes=[0])
  return %loss, %w
}";
    let e = err(&forward(only_inputs, "loss", OpKind::Sgd, &sgd));
    assert_eq!(e.to_string(), "the loss %loss does not depend on any param");

    let through_backward = "step @s(%w: f32[2] param, %x: f32[2] input) {
  %d = relu_backward(%x, %w)
  %loss = sum(%d, axes=[0])
  return %loss
}";
    let e = err(&forward(through_backward, "loss", OpKind::Sgd, &sgd));
    assert_eq!(
        e.to_string(),
        "%w reaches the loss through `%d = relu_backward(%x, %w)`, and relu_backward has no gradient rule"
    );
    // The label points at the op in the source.
    let shown = crate::diagnostics::render(&e, "s.step", through_backward, false);
    assert!(shown.contains("s.step:2:8") && shown.contains("not differentiable"), "{shown}");

    // The verifier's rules on `backward` hold for `expand` too: it refuses unverified steps.
    let invalid = |g: &Graph, needle: &str| match err(g) {
        AutodiffError::Invalid(errors) => {
            let all: Vec<String> = errors.errors.iter().map(ToString::to_string).collect();
            assert!(all.iter().any(|e| e.contains(needle)), "{needle:?} not in {all:?}");
        }
        other => panic!("expected the verifier's verdict, got {other}"),
    };
    let vector = "step @s(%w: f32[2] param) {
  %l = relu(%w)
  return %l
}";
    invalid(&forward(vector, "l", OpKind::Sgd, &sgd), "not a float scalar");
    let argument = "step @s(%w: f32[] param) {
  %l = relu(%w)
  return %l
}";
    invalid(&forward(argument, "w", OpKind::Sgd, &sgd), "argument");
    invalid(&forward(argument, "l", OpKind::Relu, &[]), "not an optimizer");
    invalid(&forward(argument, "l", OpKind::Sgd, &[("lr", Attr::Float(-1.0))]), "lr=-1.0 must be a finite number >= 0");
    let mut g = forward(argument, "l", OpKind::Sgd, &sgd);
    g.backward.as_mut().unwrap().attrs = Attrs(vec![("lr", Attr::Int(1))]);
    invalid(&g, "lr");
    let mut g = forward(argument, "l", OpKind::Sgd, &sgd);
    let (w, l) = (id(&g, "w"), id(&g, "l"));
    g.updates.push(Update { target: w, value: l, span: Span::NONE });
    invalid(&g, "update");
}

#[test]
fn reshape_of_a_gradient_copies_only_where_its_layout_needs_it() {
    // %t.grad is an expand of the scalar seed (every stride 0): any reshape of its
    // transpose is a view, as in PyTorch.
    let text = "step @s(
  %w: f32[2,3] param,
) {
  %r = reshape(%w, shape=[3, 2])
  %t = transpose(%r, perm=[1, 0])
  %loss = sum(%t, axes=[0, 1])
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    let text = body(&e);
    assert!(text.contains("%r.grad: f32[3,2] = transpose(%t.grad, perm=[1, 0])"), "{text}");
    assert!(text.contains("%w.grad: f32[2,3] = reshape(%r.grad, shape=[2, 3])"), "{text}");
    // A dense gradient transposed cannot be flattened back without a copy.
    let text = "step @s(
  %w: f32[2,3] param,
) {
  %r = reshape(%w, shape=[3, 2])
  %t = transpose(%r, perm=[1, 0])
  %a = relu(%t)
  %loss = sum(%a, axes=[0, 1])
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    let text = body(&e);
    assert!(text.contains("%r.grad: f32[3,2] = transpose(%t.grad, perm=[1, 0])"), "{text}");
    assert!(text.contains("%w.grad.t1: f32[3,2] = contiguous(%r.grad)"), "{text}");
    assert!(text.contains("%w.grad: f32[2,3] = reshape(%w.grad.t1, shape=[2, 3])"), "{text}");
}

#[test]
fn math_rules_write_pytorchs_formulas_with_existing_ops() {
    let text = "step @s(
  %w: f32[3] param,
) {
  %e = exp(%w)
  %p0 = pow_scalar(%e, exponent=0.0)
  %p1 = pow_scalar(%e, exponent=1.0)
  %p2 = pow_scalar(%e, exponent=2.5)
  %r = rsqrt(%p2)
  %q = sqrt(%p1)
  %s1 = add(%p0, %r)
  %s2 = add(%s1, %q)
  %n = neg(%s2)
  %l = log(%e)
  %s3 = add(%n, %l)
  %loss = sum(%s3, axes=[0])
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(1.0))]));
    let text = body(&e);
    for line in [
        // log: dy / x; neg: -dy (add passes dy through: %n.grad is %s3.grad).
        "%e.grad.1: f32[3] = div(%s3.grad, %e)",
        "%s2.grad: f32[3] = neg(%s3.grad)",
        // sqrt and rsqrt from their outputs.
        "%p1.grad.t1: f32[3] = div(%s2.grad, %q)",
        "%p1.grad: f32[3] = mul_scalar(%p1.grad.t1, value=0.5)",
        "%p2.grad.t1: f32[3] = pow_scalar(%r, exponent=3.0)",
        "%p2.grad.t2: f32[3] = mul(%s2.grad, %p2.grad.t1)",
        "%p2.grad: f32[3] = mul_scalar(%p2.grad.t2, value=-0.5)",
        // e·x^(e-1): pow_scalar, mul_scalar, mul.
        "%e.grad.t2: f32[3] = pow_scalar(%e, exponent=1.5)",
        "%e.grad.t3: f32[3] = mul_scalar(%e.grad.t2, value=2.5)",
        "%e.grad.2: f32[3] = mul(%p2.grad, %e.grad.t3)",
        // exponent 0: zeros; exponent 1: the gradient itself (%p1.grad, added as it arrives).
        "%e.grad.4: f32[3] = fill(shape=[3], dtype=f32)",
        "%e.grad.t6: f32[3] = add(%e.grad.t5, %p1.grad)",
        // exp: from its output.
        "%w.grad: f32[3] = mul(%e.grad, %e)",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    // No x^(e-1) for e = 0 or 1: the forward's pow_scalar(exponent=0) is the only one.
    assert!(!text.contains("exponent=-1.0") && text.matches("exponent=0.0").count() == 1, "{text}");
}

#[test]
fn attributes_reach_the_backward_ops() {
    let text = "step @s(
  %w: f32[4,3] param,
  %g: f32[3] param,
  %y: i32[4] input,
) {
  %a = gelu(%w, approximate=false)
  %n = rms_norm(%a, %g, eps=0.001)
  %loss = cross_entropy(%n, %y, ignore_index=0, label_smoothing=0.1)
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(1.0))]));
    let text = body(&e);
    for line in [
        "%n.grad: f32[4,3] = cross_entropy_backward(%loss.grad, %n, %y, ignore_index=0, label_smoothing=0.1)",
        "%a.grad: f32[4,3], %g.grad: f32[3] = rms_norm_backward(%n.grad, %a, %g, eps=0.001)",
        "%w.grad: f32[4,3] = gelu_backward(%a.grad, %w, approximate=false)",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
}

/// A linear layer on batched rows (`x[B, T, K] @ w[N, K]ᵀ`) gets its weight gradient from
/// one 2-D product over the flattened rows: no `[B, N, K]` per-batch temporary, and the
/// rows are views of `x` and `dy` (both dense). A transposed `x` flattens through a copy.
#[test]
fn a_batched_linear_layer_gets_its_weight_gradient_from_flattened_rows() {
    let step = |x_op: &str| {
        format!(
            "step @lin(
  %w: f32[6,5] param,
  %x0: f32[4,3,5] input,
  %y: i32[12] input,
) {{
  %x = {x_op}
  %h = matmul(%x, %w, transpose_b=true)
  %z = reshape(%h, shape=[12, 6])
  %loss = cross_entropy(%z, %y)
  return %loss
}}"
        )
    };
    let e = expand_ok(&forward(&step("relu(%x0)"), "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    assert!(e.values.iter().all(|v| v.ty.dims() != [4, 6, 5]), "{}", body(&e));
    let dw = e.ops.iter().find(|op| op.outputs.iter().any(|&o| e.values[o].name == "w.grad")).unwrap();
    assert_eq!(dw.kind, OpKind::Matmul);
    let shapes: Vec<&[u64]> = dw.inputs.iter().map(|&v| e.values[v].ty.dims()).collect();
    assert_eq!(shapes, [&[12, 6][..], &[12, 5][..]], "{}", body(&e));
    assert!(!body(&e).contains("contiguous"), "{}", body(&e));
    // x[b] transposed to [3, 5] rows from a [4, 5, 3] input: its rows are not a view.
    let transposed = step("transpose(%x0, perm=[0, 2, 1])").replace("f32[4,3,5] input", "f32[4,5,3] input");
    let e = expand_ok(&forward(&transposed, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    assert!(e.values.iter().all(|v| v.ty.dims() != [4, 6, 5]), "{}", body(&e));
    assert_eq!(e.ops.iter().filter(|op| op.kind == OpKind::Contiguous).count(), 1, "{}", body(&e));
}

#[test]
fn masks_and_resampling_expand_to_their_rules() {
    let text = "step @s(
  %a: f32[2,3] param,
  %b: f32[3] param,
  %x: f32[1,2,4,4] param,
  %cond: bool[2,1] input,
  %pad: bool[4] input,
) {
  %s = where(%cond, %a, %b)
  %m = masked_fill(%x, %pad, value=-inf)
  %p = adaptive_avg_pool2d(%m, output_size=[3, 3])
  %u = upsample_nearest2d(%p, output_size=[6, 6])
  %l1 = sum(%s, axes=[0, 1])
  %l2 = mean(%u, axes=[0, 1, 2, 3])
  %loss = add(%l1, %l2)
  return %loss
}";
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    let text = body(&e);
    // The resampling gradients take x's shape, not x.
    let up = "%p.grad: f32[1,2,3,3] = upsample_nearest2d_backward(%u.grad, shape=[1, 2, 3, 3], output_size=[6, 6])";
    assert!(text.contains(up), "{text}");
    let pool = "%m.grad: f32[1,2,4,4] = adaptive_avg_pool2d_backward(%p.grad, shape=[1, 2, 4, 4], output_size=[3, 3])";
    assert!(text.contains(pool), "{text}");
    // masked_fill passes dy through where the mask is false.
    assert!(text.contains("%x.grad: f32[1,2,4,4] = masked_fill(%m.grad, %pad, value=0.0)"), "{text}");
    // where: a's share through where with a zero scalar; b's through masked_fill, summed
    // over the rows it was broadcast along.
    assert!(text.contains("%a.grad.t1: f32[] = fill(shape=[], dtype=f32)"), "{text}");
    assert!(text.contains("%a.grad: f32[2,3] = where(%cond, %s.grad, %a.grad.t1)"), "{text}");
    assert!(text.contains("%b.grad.t1: f32[2,3] = masked_fill(%s.grad, %cond, value=0.0)"), "{text}");
    assert!(text.contains("%b.grad: f32[3] = sum(%b.grad.t1, axes=[0])"), "{text}");
}

#[test]
fn a_loss_through_bce_targets_is_an_error() {
    let text = "step @s(
  %w: f32[4,3] param,
  %x: f32[2,4] input,
  %y: f32[2,3] input,
) {
  %z = matmul(%x, %w)
  %t = sigmoid(%z)
  %loss = bce_with_logits(%y, %t)
  return %loss
}";
    let e = expand(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))])).unwrap_err();
    assert!(matches!(e, AutodiffError::NoGradientInto { input: "targets", .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "%w reaches the loss through %t, the `targets` input of `%loss = bce_with_logits(%y, %t)`, which takes no gradient"
    );
    let shown = crate::diagnostics::render(&e, "s.step", text, false);
    assert!(shown.contains("s.step:8:11") && shown.contains("not differentiable"), "{shown}");
    // Through the logits (targets an input) it differentiates.
    let fine = text.replace("bce_with_logits(%y, %t)", "bce_with_logits(%t, %y)");
    let e = expand_ok(&forward(&fine, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    assert!(body(&e).contains("%t.grad: f32[2,3] = bce_with_logits_backward(%loss.grad, %t, %y)"), "{}", body(&e));
}

/// The line each op of the expanded `text` sits on (ops only), by its first output's name.
fn op_line<'a>(text: &'a str, name: &str) -> &'a str {
    let prefix = format!("  %{name}: ");
    text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no %{name} in\n{text}"))
}

/// A gradient is attributed where the value it is the gradient of is: the logits' gradient,
/// which the loss's backward computes, carries the head's line and module (through the
/// caller's view of the logits); an activation's gradient its own module's, not that of the
/// op whose backward computed it; a param's gradient, and a multi-output backward op whose
/// outputs belong to different ops, the op differentiated.
#[test]
fn gradients_carry_the_location_of_the_value_they_are_the_gradient_of() {
    let text = r#"step @lm(
  %emb.weight: f32[8] param,
  %norm.weight: f32[8] param,
  %norm.bias: f32[8] param,
  %head.weight: f32[16,8] param,
  %x: f32[2,3,8] input,
  %y: i64[6] input,
) {
  %emb = mul(%x, %emb.weight) loc("m.py":4, "emb")
  %norm = layer_norm(%emb, %norm.weight, %norm.bias) loc("m.py":5, "norm")
  %head = matmul(%norm, %head.weight, transpose_b=true) loc("m.py":6, "head")
  %head.reshape = reshape(%head, shape=[6, 16]) loc("m.py":7, "")
  %loss = cross_entropy(%head.reshape, %y) loc("m.py":7, "")
  return %loss
}"#;
    let e = expand_ok(&forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]));
    let printed = body(&e);
    let at = |name: &str| op_line(&printed, name).rsplit_once(" loc(").map(|(_, l)| l.trim_end_matches(')').to_string());
    // The logits' gradient and its reshape back: the head's (the view followed to the matmul).
    assert!(op_line(&printed, "head.reshape.grad").contains("= cross_entropy_backward("), "{printed}");
    assert_eq!(at("head.reshape.grad").as_deref(), Some(r#""m.py":6, "head""#), "{printed}");
    assert_eq!(at("head.grad").as_deref(), Some(r#""m.py":6, "head""#), "{printed}");
    // The head's backward computes the norm's output gradient: the norm's.
    assert_eq!(at("norm.grad").as_deref(), Some(r#""m.py":5, "norm""#), "{printed}");
    // A param's gradient (its temporaries too): the op differentiated.
    assert_eq!(at("head.weight.grad").as_deref(), Some(r#""m.py":6, "head""#), "{printed}");
    assert_eq!(at("head.weight.grad.t1").as_deref(), Some(r#""m.py":6, "head""#), "{printed}");
    // layer_norm_backward gives %emb's gradient and the norm's params': mixed owners keep
    // the norm's location.
    assert!(op_line(&printed, "emb.grad").contains("= layer_norm_backward("), "{printed}");
    assert_eq!(at("emb.grad").as_deref(), Some(r#""m.py":5, "norm""#), "{printed}");
    assert_eq!(at("emb.weight.grad").as_deref(), Some(r#""m.py":4, "emb""#), "{printed}");
    // The seed carries no location (the `backward` statement).
    assert_eq!(at("loss.grad"), None, "{printed}");
}

/// Without `loc(...)`, a gradient op carries the span of the op that made its value (reports
/// then locate it at that op's line of the .step file).
#[test]
fn without_locations_a_gradient_takes_its_values_span() {
    let text = "step @s(
  %w: f32[3,4] param,
  %x: f32[2,3] input,
  %y: i64[2] input,
) {
  %h = matmul(%x, %w)
  %t = tanh(%h)
  %loss = cross_entropy(%t, %y)
  return %loss
}";
    let g = forward(text, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]);
    let e = expand_ok(&g);
    let span_of = |graph: &Graph, name: &str| graph.ops[graph.def_op(id(graph, name)).unwrap()].span.range().unwrap();
    assert_eq!(span_of(&e, "t.grad"), span_of(&g, "t"), "cross_entropy's backward writes %t's gradient");
    assert_eq!(span_of(&e, "h.grad"), span_of(&g, "h"), "tanh's backward writes %h's gradient");
    assert_eq!(span_of(&e, "w.grad"), span_of(&g, "h"), "a param's: the op differentiated");
    assert_ne!(span_of(&g, "t"), span_of(&g, "loss"));
}
