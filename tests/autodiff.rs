//! Autodiff end to end: the expanded forward-only MLP equals the hand-written mlp.step bit
//! for bit; the gradients of every differentiable op family match central finite
//! differences in f64; every optimizer's expansion runs planned and unplanned alike; the
//! `expand` command.

use std::path::Path;
use std::process::Command;

use indexmap::IndexMap;
use memplan::analysis::classes::{Class, classify};
use memplan::autodiff::Builder;
use memplan::exec::Dense;
use memplan::exec::cpu::{Placement, advance, run_step};
use memplan::exec::data::init_args;
use memplan::exec::dense::eval_dense;
use memplan::ir::graph::{Backward, Graph, Return, Span};
use memplan::ir::ops::{Attr, OpKind};
use memplan::passes::{PlanOptions, ScheduleKind};
use memplan::{ValueId, check, expand, parse, plan, verify};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn id(g: &Graph, name: &str) -> ValueId {
    g.values.indices().find(|&v| g.values[v].name == name).unwrap_or_else(|| panic!("no %{name}"))
}

fn with_backward(mut g: Graph, loss: &str, kind: OpKind, given: &[(&'static str, Attr)]) -> Graph {
    let loss = id(&g, loss);
    let attrs = Builder::attrs(kind, given).unwrap();
    g.backward = Some(Backward { loss, optimizer: kind, attrs, span: Span::NONE });
    g
}

/// Expands and checks the result verifies, plans and passes the checker.
fn expand_and_plan(g: &Graph) -> (Graph, memplan::Plan) {
    let e = expand(g).unwrap_or_else(|err| panic!("{err}"));
    verify(&e).unwrap_or_else(|err| panic!("{err:?}\n{}", memplan::print(&e)));
    let plan = plan(&e, &PlanOptions::default()).unwrap_or_else(|err| panic!("{err:?}"));
    check(&e, &plan).unwrap_or_else(|v| panic!("{v}"));
    (e, plan)
}

/// ir/models/mlp.step cut after its loss: the same args, the forward ops up to and
/// including `%loss`, `return %loss`, and `backward %loss with sgd(lr=0.1)`.
fn forward_mlp() -> (Graph, Graph) {
    let text = std::fs::read_to_string(root().join("ir/models/mlp.step")).unwrap();
    let hand = parse(&text).unwrap();
    let mut g = Graph::new(hand.name.clone());
    let mut map: IndexMap<ValueId, ValueId> = IndexMap::new();
    for &a in &hand.args {
        let v = &hand.values[a];
        map.insert(a, g.add_arg(v.name.clone(), v.ty.clone(), hand.role(a).unwrap()));
    }
    let loss = id(&hand, "loss");
    for op in &hand.ops {
        let inputs = op.inputs.iter().map(|i| map[i]).collect();
        let outputs = op.outputs.iter().map(|&o| (hand.values[o].name.clone(), hand.values[o].ty.clone())).collect();
        let new = g.add_op(op.kind, inputs, op.attrs.clone(), outputs);
        g.ops[new].loc = op.loc.clone();
        for (&o, &n) in op.outputs.iter().zip(&g.ops[new].outputs) {
            map.insert(o, n);
        }
        if op.outputs.contains(&loss) {
            break;
        }
    }
    g.returns.push(Return { value: map[&loss], span: Span::NONE });
    let g = with_backward(g, "loss", OpKind::Sgd, &[("lr", Attr::Float(0.1))]);
    verify(&g).unwrap();
    (hand, g)
}

#[test]
fn the_expanded_mlp_equals_the_hand_written_one_bit_for_bit() {
    let (hand, forward) = forward_mlp();
    assert_eq!(forward.ops.len(), 6);
    let (expanded, plan) = expand_and_plan(&forward);
    assert_eq!(expanded.ops.len(), hand.ops.len(), "{}", memplan::print(&expanded));
    let args = init_args(&hand, 3).unwrap();
    let planned = run_step(&expanded, Placement::Planned(&plan), &args).unwrap();
    let unplanned = run_step(&expanded, Placement::Unplanned, &args).unwrap();
    assert!(planned.differences(&unplanned).is_empty(), "{:?}", planned.differences(&unplanned));
    let reference = run_step(&hand, Placement::Unplanned, &args).unwrap();
    assert_eq!(planned.returns["loss"], reference.returns["loss"]);
    for p in ["w1", "b1", "w2", "b2"] {
        assert_eq!(planned.updated[p], reference.updated[p], "the new %{p} differs from mlp.step's");
    }
    assert_eq!(planned.updated.len(), 4);
    // And again after a step of training.
    let args = advance(&args, &planned);
    let next = run_step(&expanded, Placement::Planned(&plan), &args).unwrap();
    assert_eq!(next.updated, run_step(&hand, Placement::Unplanned, &args).unwrap().updated);
}

#[test]
fn every_optimizer_expansion_trains_planned_and_unplanned_alike() {
    let text = "step @small(
  %w1: f32[6,5] param,
  %b1: f32[5] param,
  %w2: f32[5,3] param,
  %x: f32[4,6] input,
  %y: i32[4] input,
) {
  %h = matmul(%x, %w1)
  %h2 = add(%h, %b1)
  %a = gelu(%h2)
  %o = matmul(%a, %w2)
  %loss = cross_entropy(%o, %y)
  return %loss
}";
    let optimizers: [(OpKind, &[(&'static str, Attr)]); 4] = [
        (OpKind::Sgd, &[("lr", Attr::Float(0.5))]),
        (OpKind::SgdMomentum, &[("lr", Attr::Float(0.2)), ("momentum", Attr::Float(0.5))]),
        (OpKind::Adam, &[("lr", Attr::Float(0.05))]),
        (OpKind::Adamw, &[("lr", Attr::Float(0.05)), ("weight_decay", Attr::Float(0.1))]),
    ];
    for (kind, given) in optimizers {
        let g = with_backward(parse(text).unwrap(), "loss", kind, given);
        let (e, plan) = expand_and_plan(&g);
        let mut args = init_args(&e, 1).unwrap();
        let mut losses = Vec::new();
        for _ in 0..4 {
            let planned = run_step(&e, Placement::Planned(&plan), &args).unwrap();
            let unplanned = run_step(&e, Placement::Unplanned, &args).unwrap();
            assert!(planned.differences(&unplanned).is_empty(), "{kind}: {:?}", planned.differences(&unplanned));
            losses.push(planned.loss().unwrap());
            args = advance(&args, &planned);
        }
        assert!(losses[3] < losses[0], "{kind}: the loss does not fall: {losses:?}");
        if matches!(kind, OpKind::Adam | OpKind::Adamw) {
            assert_eq!(args["step"].to_f64(), [4.0], "{kind}: the step count counts steps");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Gradient checks: the gradients the expansion computes, evaluated in f64 by the dense
// interpreter, against central differences of the forward loss.

const H: f64 = 1e-6;
const TOL: f64 = 1e-6;

/// One small step per op family. Every step ends in a scalar `%loss`; random weights `%r*`
/// keep the loss from being symmetric in its inputs.
struct Case {
    family: &'static str,
    text: &'static str,
    /// Integer inputs, by name.
    ints: &'static [(&'static str, &'static [f64])],
    /// Adjusts a random float argument (away from kinks and ties).
    fix: fn(&str, &mut Dense),
}

fn no_fix(_: &str, _: &mut Dense) {}

const CASES: &[Case] = &[
    Case {
        family: "slice, select, cat (views and their gradients), slice_scatter",
        text: "step @s(
  %a: f32[4,6] param, %b: f32[4,2] param, %c: f32[3,4,6] param, %d: f32[4,2] param,
  %r: f32[4,4] input, %r2: f32[3,3] input,
) {
  %s1 = slice(%a, axis=1, start=1, end=6, step=2)
  %s2 = slice(%a, axis=-1, start=0, end=2)
  %j = cat(%s1, %s2, %b, axis=1)
  %t = transpose(%c, perm=[0, 2, 1])
  %u = select(%t, axis=1, index=3)
  %v = slice(%u, axis=1, start=1, end=4)
  %z = slice_scatter(%j, %d, axis=-1, start=2, end=6, step=2)
  %w1 = mul(%z, %z)
  %m = slice(%w1, axis=1, start=0, end=7, step=2)
  %x = mul(%m, %r)
  %y = mul(%v, %r2)
  %l1 = sum(%x, axes=[0, 1])
  %l2 = sum(%y, axes=[0, 1])
  %loss = add(%l1, %l2)
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "matmul (transposes, broadcast batch)",
        text: "step @s(
  %a: f32[2,3,4] param, %b: f32[4,5] param, %c: f32[3,5] param, %d: f32[1,3,2] param, %e: f32[3,4] param,
  %r: f32[2,4,2] input,
) {
  %m1 = matmul(%a, %b)
  %m2 = matmul(%m1, %c, transpose_b=true)
  %m3 = matmul(%d, %m2, transpose_a=true)
  %m4 = matmul(%e, %m3, transpose_a=true, transpose_b=true)
  %w = mul(%m4, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "add/sub/mul/div with broadcasting, add_scalar, mul_scalar",
        text: "step @s(
  %p: f32[3,1] param, %q: f32[4] param, %s: f32[2,3,4] param, %q2: f32[1,4] param,
  %r: f32[2,3,4] input,
) {
  %t1 = add(%s, %p)
  %t2 = sub(%q, %t1)
  %t3 = mul(%t2, %p)
  %sq = mul(%q2, %q2)
  %den = add_scalar(%sq, value=1.0)
  %t4 = div(%t3, %den)
  %t5 = mul_scalar(%t4, value=-1.5)
  %t6 = div(%p, %den)
  %t7 = sub(%t5, %t6)
  %w = mul(%t7, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "relu, gelu, softmax",
        text: "step @s(
  %x: f32[3,4] param, %z: f32[3,4] param,
  %r: f32[3,4] input,
) {
  %h = relu(%x)
  %z2 = mul_scalar(%z, value=2.0)
  %g = gelu(%z2)
  %hg = add(%h, %g)
  %y0 = softmax(%hg, axis=0)
  %y1 = softmax(%y0)
  %w = mul(%y1, %r)
  %loss = sum(%w, axes=[0, 1])
}",
        ints: &[],
        fix: |name, x| {
            if name == "x" {
                for v in &mut x.data {
                    *v += if *v < 0.0 { -0.1 } else { 0.1 };
                }
            }
        },
    },
    Case {
        family: "neg, exp, log, sqrt, rsqrt, pow_scalar",
        text: "step @s(
  %x: f32[2,3] param, %z: f32[2,3] param,
  %r: f32[2,3] input,
) {
  %l = log(%x)
  %s = sqrt(%x)
  %q = rsqrt(%x)
  %p = pow_scalar(%x, exponent=2.5)
  %p3 = pow_scalar(%z, exponent=3.0)
  %p1 = pow_scalar(%z, exponent=1.0)
  %p0 = pow_scalar(%z, exponent=0.0)
  %e = exp(%z)
  %n = neg(%e)
  %t1 = add(%l, %s)
  %t2 = add(%t1, %q)
  %t3 = add(%t2, %p)
  %t4 = add(%t3, %p3)
  %t5 = add(%t4, %p1)
  %t6 = add(%t5, %p0)
  %t7 = add(%t6, %n)
  %w = mul(%t7, %r)
  %loss = sum(%w, axes=[0, 1])
}",
        ints: &[],
        // log, sqrt, rsqrt and a fractional power need x > 0.
        fix: |name, x| {
            if name == "x" {
                for v in &mut x.data {
                    *v = v.abs() + 0.5;
                }
            }
        },
    },
    Case {
        family: "silu, sigmoid, tanh, hardswish, hardsigmoid, exact gelu",
        text: "step @s(
  %x: f32[3,4] param, %z: f32[3,4] param, %h: f32[3,4] param,
  %r: f32[3,4] input,
) {
  %x3 = mul_scalar(%x, value=3.0)
  %a = silu(%x3)
  %b = sigmoid(%x3)
  %c = tanh(%z)
  %z3 = mul_scalar(%z, value=3.0)
  %d = gelu(%z3, approximate=false)
  %h5 = mul_scalar(%h, value=5.0)
  %e = hardswish(%h5)
  %f = hardsigmoid(%h5)
  %t1 = add(%a, %b)
  %t2 = add(%t1, %c)
  %t3 = add(%t2, %d)
  %t4 = add(%t3, %e)
  %t5 = add(%t4, %f)
  %w = mul(%t5, %r)
  %loss = sum(%w, axes=[0, 1])
}",
        ints: &[],
        // hardswish and hardsigmoid have kinks at ±3, where 5·h = ±3.
        fix: |name, x| {
            if name == "h" {
                for v in &mut x.data {
                    if (v.abs() - 0.6).abs() < 0.05 {
                        *v *= 0.8;
                    }
                }
            }
        },
    },
    Case {
        family: "rms_norm",
        text: "step @s(
  %x: f32[2,3,5] param, %gamma: f32[5] param,
  %r: f32[2,3,5] input,
) {
  %y = rms_norm(%x, %gamma, eps=0.01)
  %w = mul(%y, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "layer_norm",
        text: "step @s(
  %x: f32[2,3,5] param, %gamma: f32[5] param, %beta: f32[5] param,
  %r: f32[2,3,5] input,
) {
  %y = layer_norm(%x, %gamma, %beta)
  %w = mul(%y, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "batch_norm",
        text: "step @s(
  %x: f32[2,3,2,2] param, %gamma: f32[3] param, %beta: f32[3] param,
  %r: f32[2,3,2,2] input,
) {
  %y = batch_norm(%x, %gamma, %beta, eps=0.001)
  %w = mul(%y, %r)
  %loss = sum(%w, axes=[0, 1, 2, 3])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "conv2d (stride, padding)",
        text: "step @s(
  %x: f32[2,2,5,5] param, %k: f32[3,2,3,3] param,
  %r: f32[2,3,3,3] input,
) {
  %y = conv2d(%x, %k, stride=[2, 2], padding=[1, 1])
  %w = mul(%y, %r)
  %loss = sum(%w, axes=[0, 1, 2, 3])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "conv2d (groups, dilation)",
        text: "step @s(
  %x: f32[2,4,6,6] param, %k: f32[6,2,3,3] param, %d: f32[4,1,3,3] param,
  %r: f32[2,6,4,3] input, %q: f32[2,4,2,2] input,
) {
  %y = conv2d(%x, %k, stride=[1, 2], padding=[1, 1], dilation=[2, 1], groups=2)
  %z = conv2d(%x, %d, stride=[2, 1], dilation=[1, 2], groups=4)
  %wy = mul(%y, %r)
  %wz = mul(%z, %q)
  %ly = sum(%wy, axes=[0, 1, 2, 3])
  %lz = sum(%wz, axes=[0, 1, 2, 3])
  %loss = add(%ly, %lz)
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "conv_transpose2d (stride, output_padding, dilation, groups)",
        text: "step @s(
  %x: f32[2,4,3,3] param, %k: f32[4,3,3,3] param, %d: f32[4,1,2,2] param,
  %r: f32[2,6,6,6] input, %q: f32[2,4,6,4] input,
) {
  %y = conv_transpose2d(%x, %k, stride=[2, 2], padding=[1, 1], output_padding=[1, 1], groups=2)
  %z = conv_transpose2d(%x, %d, padding=[0, 1], output_padding=[1, 0], dilation=[2, 3], groups=4)
  %wy = mul(%y, %r)
  %wz = mul(%z, %q)
  %ly = sum(%wy, axes=[0, 1, 2, 3])
  %lz = sum(%wz, axes=[0, 1, 2, 3])
  %loss = add(%ly, %lz)
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "max_pool2d",
        text: "step @s(
  %x: f32[1,2,5,5] param,
  %r: f32[1,2,3,3] input,
) {
  %y = max_pool2d(%x, kernel=[3, 3], stride=[2, 2], padding=[1, 1])
  %w = mul(%y, %r)
  %loss = sum(%w, axes=[0, 1, 2, 3])
}",
        ints: &[],
        // Distinct values at least 0.01 apart: no window has a tie within ±h.
        fix: |name, x| {
            if name == "x" {
                let n = x.data.len();
                for (i, v) in x.data.iter_mut().enumerate() {
                    *v = ((i * 37 + 11) % n) as f64 * 0.01 - 0.2;
                }
            }
        },
    },
    Case {
        family: "embedding",
        text: "step @s(
  %table: f32[5,3] param,
  %ids: i32[2,3] input,
  %r: f32[2,3,3] input,
) {
  %e = embedding(%table, %ids)
  %w = mul(%e, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[("ids", &[1.0, 4.0, 1.0, 0.0, 4.0, 4.0])],
        fix: no_fix,
    },
    Case {
        family: "sum/mean",
        text: "step @s(
  %x: f32[2,3,4] param,
  %r1: f32[2,1,4] input, %r2: f32[3] input,
) {
  %s = sum(%x, axes=[1], keepdim=true)
  %m = mean(%x, axes=[0, -1])
  %ws = mul(%s, %r1)
  %wm = mul(%m, %r2)
  %l1 = sum(%ws, axes=[0, 1, 2])
  %l2 = mean(%wm, axes=[0])
  %loss = add(%l1, %l2)
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "reshape/transpose/expand/contiguous",
        text: "step @s(
  %x: f32[2,3] param, %q: f32[3,1] param,
  %r1: f32[4,6] input, %r2: f32[2,3,4] input,
) {
  %t = transpose(%x, perm=[1, 0])
  %c = contiguous(%t)
  %rs = reshape(%c, shape=[1, 6])
  %e = expand(%rs, shape=[4, 6])
  %e2 = expand(%q, shape=[2, 3, 4])
  %w1 = mul(%e, %r1)
  %w2 = mul(%e2, %r2)
  %l1 = sum(%w1, axes=[0, 1])
  %l2 = sum(%w2, axes=[0, 1, 2])
  %loss = add(%l1, %l2)
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "cast",
        text: "step @s(
  %x: f32[3] param,
  %r: f32[3] input,
) {
  %same = cast(%x, to=f32)
  %half = cast(%same, to=f16)
  %back = cast(%half, to=f32)
  %w = mul(%back, %r)
  %loss = sum(%w, axes=[0])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "causal_mask",
        text: "step @s(
  %x: f32[2,3,3] param,
  %r: f32[2,3,3] input,
) {
  %m = causal_mask(%x)
  %y = softmax(%m)
  %w = mul(%y, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "attention (causal, 2 query heads per key/value head, T < S, E != Ev)",
        text: "step @s(
  %q: f32[2,4,3,3] param, %k: f32[2,2,5,3] param, %v: f32[2,2,5,2] param,
  %r: f32[2,4,3,2] input,
) {
  %o, %lse = attention(%q, %k, %v, causal=true, scale=0.6)
  %w = mul(%o, %r)
  %loss = sum(%w, axes=[0, 1, 2, 3])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "attention (4 query heads per key/value head, T > S, q projected and split into heads)",
        text: "step @s(
  %x: f32[6,4] param, %wq: f32[4,8] param, %k: f32[1,3,2] param, %v: f32[1,3,3] param,
  %r: f32[4,6,3] input,
) {
  %qp = matmul(%x, %wq)
  %qs = reshape(%qp, shape=[6, 4, 2])
  %qh = transpose(%qs, perm=[1, 0, 2])
  %o, %lse = attention(%qh, %k, %v, scale=0.8)
  %w = mul(%o, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "attention with out rows before heads (transpose_out), its heads merged by a reshape view",
        text: "step @s(
  %q: f32[2,2,3,4] param, %k: f32[2,2,3,4] param, %v: f32[2,2,3,2] param,
  %r: f32[2,3,4] input,
) {
  %o, %lse = attention(%q, %k, %v, causal=true, scale=0.5, transpose_out=true)
  %m = reshape(%o, shape=[2, 3, 4])
  %w = mul(%m, %r)
  %loss = sum(%w, axes=[0, 1, 2])
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "dropout (p = 0.5, and p = 0, the identity; the seed fixes the masks, so dropout is linear)",
        text: "step @s(
  %x: f32[6,5] param, %z: f32[6,5] param,
  %seed: i64[] input, %r: f32[6,5] input,
) {
  %d = dropout(%x, %seed, p=0.5, stream=0)
  %e = dropout(%z, %seed, p=0.0, stream=1)
  %m = mul(%d, %e)
  %w = mul(%m, %r)
  %loss = sum(%w, axes=[0, 1])
}",
        ints: &[("seed", &[-1234567.0])],
        fix: no_fix,
    },
    Case {
        family: "cross_entropy",
        text: "step @s(
  %logits: f32[4,5] param,
  %labels: i32[4] input,
) {
  %z = mul_scalar(%logits, value=2.0)
  %loss = cross_entropy(%z, %labels)
}",
        ints: &[("labels", &[0.0, 4.0, 2.0, 2.0])],
        fix: no_fix,
    },
    Case {
        family: "cross_entropy with ignored rows and label smoothing",
        text: "step @s(
  %logits: f32[4,5] param,
  %labels: i32[4] input, %labels2: i64[4] input,
) {
  %z = mul_scalar(%logits, value=2.0)
  %l1 = cross_entropy(%z, %labels, label_smoothing=0.2)
  %l2 = cross_entropy(%logits, %labels2, ignore_index=1, label_smoothing=1.0)
  %loss = add(%l1, %l2)
}",
        ints: &[("labels", &[0.0, -100.0, 2.0, -100.0]), ("labels2", &[1.0, 4.0, 1.0, 3.0])],
        fix: no_fix,
    },
    Case {
        family: "cross_entropy of bf16 logits with an f32 loss (f32_loss)",
        text: "step @s(
  %logits: bf16[4,5] param,
  %labels: i64[4] input,
) {
  %z = mul_scalar(%logits, value=2.0)
  %loss: f32[] = cross_entropy(%z, %labels, ignore_index=2, label_smoothing=0.2, f32_loss=true)
}",
        ints: &[("labels", &[0.0, 4.0, 2.0, 1.0])],
        fix: no_fix,
    },
    Case {
        family: "adaptive_avg_pool2d (overlapping bins, more bins than rows), upsample_nearest2d (up by 7/3, down)",
        text: "step @s(
  %x: f32[2,2,5,4] param, %z: f32[1,2,3,2] param,
  %r1: f32[2,2,3,6] input, %r2: f32[1,2,7,1] input,
) {
  %p = adaptive_avg_pool2d(%x, output_size=[3, 6])
  %u = upsample_nearest2d(%z, output_size=[7, 1])
  %w1 = mul(%p, %r1)
  %w2 = mul(%u, %r2)
  %l1 = sum(%w1, axes=[0, 1, 2, 3])
  %l2 = sum(%w2, axes=[0, 1, 2, 3])
  %loss = add(%l1, %l2)
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "bce_with_logits",
        text: "step @s(
  %x: f32[3,4] param,
  %t: f32[3,4] input,
) {
  %z = mul_scalar(%x, value=3.0)
  %p = sigmoid(%t)
  %loss = bce_with_logits(%z, %p)
}",
        ints: &[],
        fix: no_fix,
    },
    Case {
        family: "where, masked_fill (broadcast masks, operands and a scalar param)",
        text: "step @s(
  %a: f32[2,3] param, %b: f32[3] param, %c: f32[] param, %x: f32[2,2,3] param,
  %cond: bool[2,1] input, %mask: bool[3] input,
  %r: f32[2,3] input, %r2: f32[2,2,3] input,
) {
  %s = where(%cond, %a, %b)
  %s2 = where(%mask, %c, %s)
  %m = masked_fill(%x, %mask, value=-1.5)
  %w = mul(%s2, %r)
  %w2 = mul(%m, %r2)
  %l1 = sum(%w, axes=[0, 1])
  %l2 = sum(%w2, axes=[0, 1, 2])
  %loss = add(%l1, %l2)
}",
        ints: &[("cond", &[1.0, 0.0]), ("mask", &[0.0, 1.0, 0.0])],
        fix: no_fix,
    },
];

fn case_args(g: &Graph, case: &Case) -> IndexMap<String, Dense> {
    let mut args = IndexMap::new();
    for (i, &a) in g.args.iter().enumerate() {
        let v = &g.values[a];
        let shape: Vec<usize> = v.ty.dims().iter().map(|&d| d as usize).collect();
        let t = match case.ints.iter().find(|(n, _)| *n == v.name) {
            Some((_, data)) => Dense::new(shape, data.to_vec()),
            None => {
                let mut t = memplan::testing::rand_dense(&shape, 17 + i as u64);
                (case.fix)(&v.name, &mut t);
                t
            }
        };
        args.insert(v.name.clone(), t);
    }
    args
}

/// The loss of the forward graph at `args`, in f64.
fn loss_at(g: &Graph, loss: ValueId, args: &IndexMap<String, Dense>) -> f64 {
    eval_dense(g, args).unwrap()[loss].data[0]
}

fn norm(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

#[test]
fn gradients_match_finite_differences_for_every_op_family() {
    for case in CASES {
        let family = case.family;
        let text = case.text.replace("\n}", "\n  return %loss\n}");
        let g = with_backward(
            parse(&text).unwrap_or_else(|e| panic!("{family}: {e:?}")),
            "loss",
            OpKind::Sgd,
            &[("lr", Attr::Float(1.0))],
        );
        verify(&g).unwrap_or_else(|e| panic!("{family}: {e:?}"));
        let (e, _) = expand_and_plan(&g);
        let args = case_args(&g, case);
        let values = eval_dense(&e, &args).unwrap_or_else(|err| panic!("{family}: {err}"));
        let loss = id(&g, "loss");
        assert_eq!(values[loss].data[0], loss_at(&g, loss, &args), "{family}: the expansion changed the forward loss");
        let mut checked = 0;
        for op in e.ops.iter().filter(|op| op.kind == OpKind::Sgd) {
            let (p, grad) = (op.inputs[0], op.inputs[1]);
            let name = e.values[p].name.clone();
            let analytic = &values[grad];
            assert_eq!(analytic.shape, args[&name].shape, "{family}: d%{name} has the wrong shape");
            let mut numeric = Vec::with_capacity(analytic.data.len());
            let mut probe = args.clone();
            for i in 0..analytic.data.len() {
                let x0 = args[&name].data[i];
                probe[&name].data[i] = x0 + H;
                let up = loss_at(&g, loss, &probe);
                probe[&name].data[i] = x0 - H;
                let down = loss_at(&g, loss, &probe);
                probe[&name].data[i] = x0;
                numeric.push((up - down) / (2.0 * H));
            }
            let diff = norm(analytic.data.iter().zip(&numeric).map(|(a, n)| a - n));
            let scale = norm(analytic.data.iter().copied()).max(norm(numeric.iter().copied())).max(1e-8);
            assert!(
                diff / scale < TOL,
                "gradient check failed for {family}, d%{name}: relative error {:e}\n analytic {:?}\n numeric  {:?}",
                diff / scale,
                analytic.data,
                numeric
            );
            assert!(norm(numeric.iter().copied()) > 1e-3, "{family}: d%{name} is ~0, the check would prove nothing");
            // sgd with lr=1: the new param is p - grad.
            let new = &values[op.outputs[0]];
            assert!(new.data.iter().zip(&args[&name].data).zip(&analytic.data).all(|((n, p), g)| *n == p - g));
            checked += 1;
        }
        let params = g.args.iter().filter(|&&a| g.role(a) == Some(memplan::ir::graph::Role::Param)).count();
        assert_eq!(checked, params, "{family}: every param gets a gradient");
    }
}

/// The point of fused attention: the expanded step of ir/features/fused_attention.step
/// holds no T×T value (T = 8), where the same block written with matmul, causal_mask and
/// softmax (ir/features/attention.step) holds several; the backward reads the forward's
/// `out` and `lse`, which the plan keeps as activations.
#[test]
fn fused_attention_keeps_no_attention_matrix() {
    let square = |g: &Graph| g.values.iter().filter(|v| v.ty.dims().ends_with(&[8, 8])).count();
    let load = |file: &str| parse(&std::fs::read_to_string(root().join(file)).unwrap()).unwrap();
    assert!(square(&load("ir/features/attention.step")) >= 4);
    let (e, _) = expand_and_plan(&load("ir/features/fused_attention.step"));
    assert_eq!(square(&e), 0, "{}", memplan::print(&e));
    let backward: Vec<_> = e.ops.iter().filter(|op| op.kind == OpKind::AttentionBackward).collect();
    assert_eq!(backward.len(), 1);
    let names: Vec<&str> = backward[0].inputs.iter().map(|&v| e.values[v].name.as_str()).collect();
    assert_eq!(names, ["y.grad", "q.bhte", "k.bhte", "v.bhte", "y", "lse"]);
    let classes = classify(&e);
    for saved in ["y", "lse"] {
        assert_eq!(classes[id(&e, saved)], Class::Activation, "%{saved}");
    }
}

// ---------------------------------------------------------------------------------------
// The command line.

fn memplan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the memplan binary runs")
}

#[test]
fn expand_prints_a_full_step_unchanged() {
    let expand = memplan(&["expand", "ir/models/mlp.step"]);
    assert!(expand.status.success(), "{}", String::from_utf8_lossy(&expand.stderr));
    let print = memplan(&["print", "ir/models/mlp.step"]);
    assert_eq!(expand.stdout, print.stdout);
    let bad = memplan(&["expand", "ir/invalid/cycle.step"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cycle.step"));
}

/// `detach` stops the gradient: a param that reaches the loss only through one (`%v`)
/// gets no gradient, no state and no update, and a value read both directly and through
/// a detach (`%a`) takes the gradient of the direct path only. So the expansion trains
/// `%w` exactly as the same step does with the detached values fed in as inputs.
#[test]
fn detach_stops_the_gradient_as_a_constant_input_would() {
    let body = "  %h = matmul(%x, %w)
  %a = tanh(%h)
  %m = mul(%a, %ad)
  %d = sub(%m, %td)
  %sq = mul(%d, %d)
  %loss = sum(%sq, axes=[0, 1])
  backward %loss with adam(lr=0.1)
  return %loss";
    let detached = format!(
        "step @d(%w: f32[3,4] param, %v: f32[3,4] param, %x: f32[2,3] input) {{
  %t = matmul(%x, %v)
  %td = detach(%t)
  %ha = matmul(%x, %w)
  %aa = tanh(%ha)
  %ad = detach(%aa)
{body}, %aa, %t\n}}"
    );
    let constant = format!("step @c(%w: f32[3,4] param, %x: f32[2,3] input, %ad: f32[2,4] input, %td: f32[2,4] input) {{\n{body}\n}}");
    let (detached, plan_d) = expand_and_plan(&parse(&detached).unwrap());
    let (constant, plan_c) = expand_and_plan(&parse(&constant).unwrap());
    // %v: no gradient, no Adam moments, no update; %w: all three.
    let names: Vec<&str> = detached.args.iter().map(|&a| detached.values[a].name.as_str()).collect();
    assert_eq!(names, ["w", "v", "x", "w.m", "w.v", "step"], "{}", memplan::print(&detached));
    let args = init_args(&detached, 5).unwrap();
    let d = run_step(&detached, Placement::Planned(&plan_d), &args).unwrap();
    assert_eq!(d.updated.keys().collect::<Vec<_>>(), ["w", "w.m", "w.v", "step"]);
    let mut inputs = args.clone();
    inputs.shift_remove("v");
    inputs.insert("ad".into(), d.returns["aa"].clone());
    inputs.insert("td".into(), d.returns["t"].clone());
    let c = run_step(&constant, Placement::Planned(&plan_c), &inputs).unwrap();
    assert_eq!(d.returns["loss"], c.returns["loss"]);
    for name in ["w", "w.m", "w.v", "step"] {
        assert_eq!(d.updated[name], c.updated[name], "%{name}");
    }
}

/// A recurrence reading one weight at each of `n` steps, `h[t+1] = tanh(h[t] @ w)`, as
/// Hugging Face Mamba's slow path and RNNs do.
fn recurrence(n: usize) -> String {
    let mut text = String::from("step @rnn(%w: f32[64,64] param, %h0: f32[4,64] input) {\n");
    for t in 0..n {
        text += &format!("  %p{t} = matmul(%h{t}, %w)\n  %h{} = tanh(%p{t})\n", t + 1);
    }
    text + &format!("  %loss = sum(%h{n}, axes=[0, 1])\n  backward %loss with sgd(lr=0.1)\n  return %loss\n}}")
}

#[test]
fn a_weight_read_at_every_step_holds_one_gradient() {
    // PyTorch adds each contribution to w's gradient into one buffer as it arrives; so does
    // the expansion, so the backward of 64 steps holds one or two gradients of w, not 64.
    let n = 64;
    let e = expand(&parse(&recurrence(n)).unwrap()).unwrap();
    let text = memplan::print(&e);
    assert_eq!(text.matches("= add(%w.grad").count(), n - 1, "{text}");
    let w_bytes = 64 * 64 * 4;
    let activations = 2 * n as u64 * 4 * 64 * 4;
    for schedule in [ScheduleKind::Program, ScheduleKind::Memory] {
        let options = PlanOptions { schedule, ..PlanOptions::default() };
        let p = plan(&e, &options).unwrap();
        check(&e, &p).unwrap_or_else(|v| panic!("{v}"));
        // The forward's values, w and at most three gradients of w (running sum, the new
        // contribution, the update's input) and a few of h.
        assert!(p.arena_bytes <= activations + 4 * w_bytes + 8 * 1024, "{schedule:?}: {} B", p.arena_bytes);
    }
    // The running sum is the gradient: the same values as summing at the end.
    let args = init_args(&e, 3).unwrap();
    let planned = run_step(&e, Placement::Planned(&plan(&e, &PlanOptions::default()).unwrap()), &args).unwrap();
    let unplanned = run_step(&e, Placement::Unplanned, &args).unwrap();
    assert_eq!(planned.updated["w"], unplanned.updated["w"]);
}

#[test]
fn checkpointed_regions_are_recomputed_with_the_same_results() {
    // ir/features/checkpoint.step, and the same step with its checkpoint(N) marks removed.
    let text = std::fs::read_to_string(root().join("ir/features/checkpoint.step")).unwrap();
    let plain_text: String = text
        .lines()
        .map(|line| match line.find(" checkpoint(") {
            Some(at) => format!("{}{}\n", &line[..at], &line[at + " checkpoint(0)".len()..]),
            None => format!("{line}\n"),
        })
        .collect();
    assert!(!plain_text.contains("checkpoint(") || plain_text.contains("// The user"), "{plain_text}");
    let (checkpointed, plan_c) = expand_and_plan(&parse(&text).unwrap());
    let (plain, plan_p) = expand_and_plan(&parse(&plain_text).unwrap());
    let printed = memplan::print(&checkpointed);
    // Each region runs again up to the last value its gradients read (the gelu), reading
    // the region's input as kept: PyTorch's non-reentrant checkpoint.
    for line in [
        "%a2.recompute: f32[512,256] = matmul(%h1, %w3, transpose_b=true) recompute(1)",
        "%g2.recompute: f32[512,256] = gelu(%a2.recompute) recompute(1)",
        "%w4.grad: f32[64,256] = matmul(%h2.grad, %g2.recompute, transpose_a=true)",
        "%a1.grad: f32[512,256] = gelu_backward(%g1.grad, %a1.recompute)",
    ] {
        assert!(printed.contains(line), "{line} not in\n{printed}");
    }
    assert_eq!(printed.matches(" recompute(").count(), 4, "{printed}");
    // Same numbers: the recomputes compute the same bits.
    let args = init_args(&plain, 11).unwrap();
    let c = run_step(&checkpointed, Placement::Planned(&plan_c), &args).unwrap();
    let p = run_step(&plain, Placement::Planned(&plan_p), &args).unwrap();
    assert_eq!(c.returns["loss"], p.returns["loss"]);
    assert_eq!(c.updated, p.updated);
    // Less memory in program order: no region's a and g are kept for the backward.
    let program = PlanOptions { schedule: ScheduleKind::Program, ..PlanOptions::default() };
    let (c_prog, p_prog) = (plan(&checkpointed, &program).unwrap(), plan(&plain, &program).unwrap());
    check(&checkpointed, &c_prog).unwrap_or_else(|v| panic!("{v}"));
    check(&plain, &p_prog).unwrap_or_else(|v| panic!("{v}"));
    assert!(c_prog.arena_bytes < p_prog.arena_bytes, "{} vs {}", c_prog.arena_bytes, p_prog.arena_bytes);
}

/// ir/features/custom_backward.step without its custom regions: the `custom(N)` marks and
/// the `custom_backward` blocks removed, so memplan differentiates the ops itself.
fn without_custom_regions(text: &str) -> String {
    let mut out = String::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("custom_backward(") {
            in_block = true;
        } else if in_block {
            in_block = line.trim() != "}";
        } else {
            let line = match line.find(" custom(") {
                Some(at) => format!("{}{}", &line[..at], &line[at + " custom(0)".len()..]),
                None => line.to_string(),
            };
            out += &line;
            out.push('\n');
        }
    }
    out
}

#[test]
fn a_custom_backward_is_the_users_not_a_derivative_of_its_forward() {
    let text = std::fs::read_to_string(root().join("ir/features/custom_backward.step")).unwrap();
    let plain_text = without_custom_regions(&text);
    let plain = parse(&plain_text).unwrap();
    assert!(plain.custom_backwards.is_empty() && plain.ops.iter().all(|op| op.region.is_none()), "{plain_text}");
    let (custom, plan_c) = expand_and_plan(&parse(&text).unwrap());
    let (plain, plan_p) = expand_and_plan(&plain);
    let printed = memplan::print(&custom);
    // Region 0: the user's ops, reading what the block binds (h and tanh(h)), not tanh's
    // and mul's gradient rules; region 1 (a straight-through estimator): the gradient of
    // the ReLU's input is its output's, unchanged, where ReLU's own rule would mask it.
    for line in [
        "%tt: f32[128,64] = mul(%t, %t) loc(\"model.py\":19)",
        "%h.grad: f32[128,64] = mul(%a.grad, %d) loc(\"model.py\":20)",
        "%a.grad: f32[128,64] = matmul(%r.grad, %w1)",
    ] {
        assert!(printed.contains(line), "{line} not in\n{printed}");
    }
    assert!(!printed.contains("relu_backward") && !printed.contains("tanh_backward"), "{printed}");
    assert!(memplan::print(&plain).contains("relu_backward"));
    assert!(custom.custom_backwards.is_empty() && verify(&custom).is_ok());
    let args = init_args(&plain, 7).unwrap();
    let c = run_step(&custom, Placement::Planned(&plan_c), &args).unwrap();
    let unplanned = run_step(&custom, Placement::Unplanned, &args).unwrap();
    assert_eq!(c.updated, unplanned.updated, "planned and unplanned differ");
    let p = run_step(&plain, Placement::Planned(&plan_p), &args).unwrap();
    assert_eq!(c.returns["loss"], p.returns["loss"], "the forward is the same");
    // w2's gradient is read before any custom backward: the same bits. w1 and w0 see the
    // straight-through gradient: they differ from ReLU's derivative.
    assert_eq!(c.updated["w2"], p.updated["w2"]);
    assert_ne!(c.updated["w1"], p.updated["w1"]);
}

/// Region 0's backward is the exact derivative of x * tanh(x): with region 1 a plain ReLU
/// (its block removed, its op differentiated by memplan), the user's backward and
/// memplan's own rules train w0 alike (to rounding: the formulas differ).
#[test]
fn a_custom_backward_that_is_the_derivative_trains_as_the_derivative_does() {
    let text = std::fs::read_to_string(root().join("ir/features/custom_backward.step")).unwrap();
    let one_region: String = {
        let cut = text.find("  custom_backward(1)").unwrap();
        let end = cut + text[cut..].find("  }\n").unwrap() + 4;
        format!("{}{}", &text[..cut], &text[end..]).replace(" custom(1)", "")
    };
    let (custom, plan_c) = expand_and_plan(&parse(&one_region).unwrap());
    let (plain, plan_p) = expand_and_plan(&parse(&without_custom_regions(&text)).unwrap());
    let args = init_args(&plain, 9).unwrap();
    let c = run_step(&custom, Placement::Planned(&plan_c), &args).unwrap();
    let p = run_step(&plain, Placement::Planned(&plan_p), &args).unwrap();
    let (cw, pw, w) = (&c.updated["w0"], &p.updated["w0"], &args["w0"]);
    let delta = |a: &memplan::exec::data::HostTensor| a.to_f64().iter().zip(w.to_f64()).map(|(x, y)| x - y).collect::<Vec<f64>>();
    let (dc, dp) = (delta(cw), delta(pw));
    let diff = norm(dc.iter().zip(&dp).map(|(a, b)| a - b));
    assert!(norm(dp.iter().copied()) > 0.0 && diff <= 1e-4 * norm(dp.iter().copied()), "{diff}");
}

#[test]
fn a_selective_checkpoint_recomputes_only_what_its_policy_does_not_save() {
    // ir/features/checkpoint_selective.step: checkpoint.step with its matmuls saved.
    let text = std::fs::read_to_string(root().join("ir/features/checkpoint_selective.step")).unwrap();
    let full_text = std::fs::read_to_string(root().join("ir/features/checkpoint.step")).unwrap();
    let (selective, plan_s) = expand_and_plan(&parse(&text).unwrap());
    let (full, plan_f) = expand_and_plan(&parse(&full_text).unwrap());
    let printed = memplan::print(&selective);
    // Only the GELUs run again, reading the kept matmul outputs.
    assert_eq!(printed.matches(" recompute(").count(), 2, "{printed}");
    for line in ["%g1.recompute: f32[512,256] = gelu(%a1) recompute(0)", "%g2.recompute: f32[512,256] = gelu(%a2) recompute(1)"] {
        assert!(printed.contains(line), "{line} not in\n{printed}");
    }
    let args = init_args(&full, 13).unwrap();
    let s = run_step(&selective, Placement::Planned(&plan_s), &args).unwrap();
    let f = run_step(&full, Placement::Planned(&plan_f), &args).unwrap();
    assert_eq!(s.returns["loss"], f.returns["loss"]);
    assert_eq!(s.updated, f.updated);
    // Keeping the matmul outputs costs memory in program order, less than keeping all.
    let program = PlanOptions { schedule: ScheduleKind::Program, ..PlanOptions::default() };
    let (s_prog, f_prog) = (plan(&selective, &program).unwrap(), plan(&full, &program).unwrap());
    check(&selective, &s_prog).unwrap_or_else(|v| panic!("{v}"));
    assert!(f_prog.arena_bytes < s_prog.arena_bytes, "{} vs {}", f_prog.arena_bytes, s_prog.arena_bytes);
}

/// The loss fused with its projection (`linear_cross_entropy`, a chunk of rows at a time)
/// trains as the ops it replaces: the same loss bit for bit (its terms are added in row
/// order either way) and the same updates up to the order dweight's sums are added in
/// (chunk by chunk), in f32 and in bf16 with an f32 loss (`f32_loss`, which the rewrite
/// also gives a cast of half logits to f32). `expand` fuses a step whose logits are most
/// of what it holds, where nothing else reads them; `ExpandOptions { fuse_loss: false }`
/// and a logits value read elsewhere keep the ops as written.
#[test]
fn a_fused_loss_trains_as_the_ops_it_replaces() {
    let step = |dtype: &str, loss: &str| {
        format!(
            "step @lm(%w_in: f32[8,8] param, %head: f32[12,8] param, %tokens: f32[2,7,8] input, %labels: i64[14] input) {{
               %h = matmul(%tokens, %w_in)
               %x32 = gelu(%h)
               %x = cast(%x32, to={dtype})
               %w = cast(%head, to={dtype})
               {loss}
               backward %loss with sgd(lr=0.5)
               return %loss
             }}"
        )
    };
    let cases = [
        ("f32", "%logits = matmul(%x, %w, transpose_b=true)\n %flat = reshape(%logits, shape=[14, 12])\n %loss = cross_entropy(%flat, %labels, ignore_index=3)",
         "%loss, %dx, %dw, %ws = linear_cross_entropy(%x, %w, %labels, ignore_index=3, rows=5)"),
        ("bf16", "%logits = matmul(%x, %w, transpose_b=true)\n %flat = reshape(%logits, shape=[14, 12])\n %up = cast(%flat, to=f32)\n %loss = cross_entropy(%up, %labels)",
         "%loss, %dx, %dw, %ws = linear_cross_entropy(%x, %w, %labels, f32_loss=true, rows=4)"),
    ];
    for (dtype, unfused, fused) in cases {
        let unfused = parse(&step(dtype, unfused)).unwrap();
        let fused = parse(&step(dtype, fused)).unwrap();
        // Small logits: `expand` leaves them as written.
        let written = expand(&unfused).unwrap();
        assert!(written.ops.iter().all(|op| op.kind != OpKind::LinearCrossEntropy), "{}", memplan::print(&written));
        let (e_fused, plan) = expand_and_plan(&fused);
        let args = init_args(&e_fused, 7).unwrap();
        let (mut a, mut b) = (args.clone(), args);
        // bf16: the unfused dlogits are rounded to f32, then to bf16 (the cast's gradient);
        // the fused ones once, to bf16: the updates may differ in a last bf16 bit.
        let tolerance = if dtype == "f32" { 1e-6 } else { 1e-2 };
        for step in 0..3 {
            let planned = run_step(&e_fused, Placement::Planned(&plan), &a).unwrap();
            let reference = run_step(&written, Placement::Unplanned, &b).unwrap();
            let (got, want) = (planned.loss().unwrap(), reference.loss().unwrap());
            if step == 0 {
                assert_eq!(got, want, "{dtype}: the first loss");
            }
            assert!((got - want).abs() <= tolerance * want.abs(), "{dtype} step {step}: loss {got} vs {want}");
            for p in ["w_in", "head"] {
                let (got, want) = (planned.updated[p].to_f64(), reference.updated[p].to_f64());
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= tolerance * w.abs().max(1.0), "{dtype} step {step} %{p}: {g} vs {w}");
                }
            }
            (a, b) = (advance(&a, &planned), advance(&b, &reference));
        }
    }
    // Logits of 4096 × 8192 f32 (128 MiB) against chunks of 1024 rows: fused by `expand`,
    // a smaller arena than the ops as written; not where the logits are also returned.
    let big = "step @lm(%head: f32[8192,8] param, %x: f32[4096,8] param, %labels: i64[4096] input) {
        %logits = matmul(%x, %head, transpose_b=true)
        %loss = cross_entropy(%logits, %labels)
        backward %loss with sgd(lr=0.1)
        return %loss
    }";
    let g = parse(big).unwrap();
    let (fused, plan) = expand_and_plan(&g);
    let op = fused.ops.iter().find(|op| op.kind == OpKind::LinearCrossEntropy).expect("the loss fused");
    assert_eq!(op.attrs.int("rows"), 1024);
    let written = memplan::expand_with(&g, memplan::ExpandOptions { fuse_loss: false }).unwrap();
    assert!(written.ops.iter().all(|op| op.kind != OpKind::LinearCrossEntropy));
    let unfused_plan = plan_of(&written);
    assert!(plan.arena_bytes * 2 < unfused_plan.arena_bytes, "{} vs {}", plan.arena_bytes, unfused_plan.arena_bytes);
    let returned = parse(&big.replace("return %loss", "return %loss, %logits")).unwrap();
    assert!(expand(&returned).unwrap().ops.iter().all(|op| op.kind != OpKind::LinearCrossEntropy));
}

fn plan_of(g: &Graph) -> memplan::Plan {
    let plan = plan(g, &PlanOptions::default()).unwrap_or_else(|err| panic!("{err:?}"));
    check(g, &plan).unwrap_or_else(|v| panic!("{v}"));
    plan
}
