//! Tests of the op table: row order, every type rule, FLOPs, signatures, docs.

use super::resample::bin_lengths;
use super::rules::*;
use super::*;
use crate::ir::types::{DType, Shape, TensorType};

/// `f32[2,3]` → a tensor type.
fn ty(s: &str) -> TensorType {
    let (dtype, rest) = s.split_once('[').expect("type");
    let dims = rest.trim_end_matches(']').split(',').filter(|d| !d.is_empty()).map(|d| d.parse().unwrap());
    TensorType::new(DType::from_name(dtype).expect("dtype"), dims.collect::<Vec<u64>>())
}

/// The row's attributes: `given` ones, defaults for the rest.
fn attrs_for(kind: OpKind, given: &[(&str, Attr)]) -> Attrs {
    Attrs::for_op(kind, given).unwrap_or_else(|e| panic!("test attributes: {e}"))
}

fn infer(kind: OpKind, inputs: &[&str], given: &[(&str, Attr)]) -> Result<Vec<String>, String> {
    let types: Vec<TensorType> = inputs.iter().map(|s| ty(s)).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    assert!(kind.def().takes_inputs(refs.len()), "{kind}: wrong number of inputs in the test");
    let outputs = (kind.def().infer)(&refs, &attrs_for(kind, given))?;
    assert_eq!(outputs.len(), kind.def().outputs.len(), "{kind}: rule gave the wrong number of outputs");
    Ok(outputs.iter().map(|t| t.to_string()).collect())
}

#[track_caller]
fn ok(kind: OpKind, inputs: &[&str], given: &[(&str, Attr)]) -> Vec<String> {
    infer(kind, inputs, given).unwrap_or_else(|e| panic!("{kind} rejected {inputs:?}: {e}"))
}

/// The rejection message, which must mention `needle`.
#[track_caller]
fn err(kind: OpKind, inputs: &[&str], given: &[(&str, Attr)], needle: &str) -> String {
    match infer(kind, inputs, given) {
        Err(e) => {
            assert!(e.contains(needle), "{kind}: message {e:?} does not mention {needle:?}");
            e
        }
        Ok(out) => panic!("{kind} accepted {inputs:?} giving {out:?}"),
    }
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

fn float(x: f64) -> Attr {
    Attr::Float(x)
}

const HUGE: &str = "f32[4294967296,4294967296]";

#[test]
fn rows_are_in_kind_order() {
    for (i, row) in OPS.iter().enumerate() {
        assert_eq!(row.kind as usize, i, "row {} ({}) is out of place", i, row.name);
    }
}

#[test]
fn every_kind_has_a_row_and_a_unique_name() {
    assert_eq!(OPS.len(), OpKind::FusedNorm as usize + 1);
    for row in OPS {
        assert_eq!(OpKind::from_name(row.name), Some(row.kind));
        assert!(row.view_of().is_none_or(|k| k < row.inputs.len()), "{}", row.name);
        for &(o, i) in row.inplace {
            assert!(o < row.outputs.len() && i < row.inputs.len(), "{}: bad inplace pair", row.name);
        }
        // Pointwise inputs: in range, ascending, never the input of a view (a view's output
        // is the input's bytes, not something computed element by element).
        assert!(row.pointwise.iter().all(|&k| k < row.inputs.len()) && row.pointwise.is_sorted(), "{}", row.name);
        assert!(row.pointwise.is_empty() || row.view_of().is_none(), "{}", row.name);
    }
    assert_eq!(OpKind::from_name("conv4d"), None);
}

#[test]
fn broadcasting() {
    let s = |d: &[u64]| Shape(d.to_vec());
    assert_eq!(broadcast(&s(&[64, 256]), &s(&[256])).unwrap(), s(&[64, 256]));
    assert_eq!(broadcast(&s(&[8, 1, 4]), &s(&[3, 1])).unwrap(), s(&[8, 3, 4]));
    assert_eq!(broadcast(&s(&[]), &s(&[3])).unwrap(), s(&[3]));
    assert_eq!(broadcast(&s(&[0, 3]), &s(&[1, 3])).unwrap(), s(&[0, 3]));
    assert!(broadcast(&s(&[64, 256]), &s(&[255])).is_err());
    assert!(broadcast(&s(&[0]), &s(&[2])).is_err());
}

#[test]
fn signatures() {
    assert_eq!(
        OpKind::Conv2dBackward.def().signature(),
        "conv2d_backward(dy, x, w, stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1) -> (dx, dw)"
    );
    assert_eq!(
        OpKind::ConvTranspose2d.def().signature(),
        "conv_transpose2d(x, w, stride=[1, 1], padding=[0, 0], output_padding=[0, 0], dilation=[1, 1], groups=1) -> y"
    );
    assert_eq!(OpKind::Sgd.def().signature(), "sgd(p, g, lr=<float>) -> p_new");
    assert_eq!(OpKind::Fill.def().signature(), "fill(shape=<ints>, dtype=<dtype>, value=0.0, step=0.0) -> out");
    assert_eq!(OpKind::LayerNorm.def().signature(), "layer_norm(x, gamma, beta, eps=1e-5) -> y");
    assert_eq!(OpKind::CausalMask.def().signature(), "causal_mask(x, value=-inf) -> out");
    assert_eq!(OpKind::Add.def().signature(), "add(a, b) -> out");
    assert_eq!(
        OpKind::Attention.def().signature(),
        "attention(q, k, v, causal=false, scale=<float>, transpose_out=false) -> (out, lse)"
    );
    assert_eq!(
        OpKind::AttentionBackward.def().signature(),
        "attention_backward(dout, q, k, v, out, lse, causal=false, scale=<float>, transpose_out=false) -> (dq, dk, dv)"
    );
    assert_eq!(OpKind::Dropout.def().signature(), "dropout(x, seed, p=<float>, stream=<int>) -> y");
    assert_eq!(OpKind::DropoutBackward.def().signature(), "dropout_backward(dy, seed, p=<float>, stream=<int>) -> dx");
    assert_eq!(
        OpKind::AdaptiveAvgPool2dBackward.def().signature(),
        "adaptive_avg_pool2d_backward(dy, shape=<ints>, output_size=<ints>) -> dx"
    );
    assert_eq!(OpKind::Where.def().signature(), "where(cond, a, b) -> out");
    assert_eq!(OpKind::MaskedFill.def().signature(), "masked_fill(x, mask, value=<float>) -> out");
    assert_eq!(OpKind::BceWithLogits.def().signature(), "bce_with_logits(logits, targets) -> loss");
}

/// docs/IR.md lists every op with the signature its row gives.
#[test]
fn manual_lists_every_signature() {
    let manual = include_str!("../../../docs/IR.md");
    for row in OPS {
        let signature = format!("`{}`", row.signature());
        assert!(manual.contains(&signature), "docs/IR.md lacks {signature}");
    }
}

#[test]
fn elementwise_binary() {
    for kind in [OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div] {
        assert_eq!(ok(kind, &["f32[64,256]", "f32[256]"], &[]), ["f32[64,256]"]);
        assert_eq!(ok(kind, &["i32[]", "i32[3]"], &[]), ["i32[3]"]);
        assert_eq!(ok(kind, &["bf16[0,3]", "bf16[1,3]"], &[]), ["bf16[0,3]"]);
        err(kind, &["f32[2]", "f16[2]"], &[], "f32[2] and f16[2]");
        err(kind, &["bool[2]", "bool[2]"], &[], "bool[2]");
        err(kind, &["f32[64,256]", "f32[255]"], &[], "[64,256] and [255]");
        err(kind, &["f32[4294967296,1]", "f32[1,4294967296]"], &[], "2^64 bytes");
    }
}

#[test]
fn scalar_ops() {
    for kind in [OpKind::AddScalar, OpKind::MulScalar] {
        assert_eq!(ok(kind, &["f16[2,3]"], &[("value", float(2.0))]), ["f16[2,3]"]);
        assert_eq!(ok(kind, &["f32[]"], &[("value", float(-1.5))]), ["f32[]"]);
        // Integers take integral values (positions, counters); bools no arithmetic.
        assert_eq!(ok(kind, &["i64[2]"], &[("value", float(3.0))]), ["i64[2]"]);
        err(kind, &["i32[2]"], &[("value", float(1.5))], "integral value");
        err(kind, &["bool[2]"], &[("value", float(1.0))], "bool[2]");
        err(kind, &["f32[2]"], &[("value", float(f64::NAN))], "NaN");
    }
}

#[test]
fn activations_and_their_gradients() {
    let forward = [OpKind::Relu, OpKind::Gelu, OpKind::Silu, OpKind::Sigmoid, OpKind::Tanh, OpKind::Hardswish, OpKind::Hardsigmoid];
    let math = [OpKind::Sin, OpKind::Cos, OpKind::Exp, OpKind::Log, OpKind::Sqrt, OpKind::Rsqrt];
    // neg takes integers too (negative offsets), not bools.
    assert_eq!(ok(OpKind::Neg, &["i64[4]"], &[]), ["i64[4]"]);
    err(OpKind::Neg, &["bool[4]"], &[], "bool[4]");
    for kind in forward.into_iter().chain(math) {
        assert_eq!(ok(kind, &["f32[4,5]"], &[]), ["f32[4,5]"]);
        assert_eq!(ok(kind, &["bf16[]"], &[]), ["bf16[]"]);
        err(kind, &["i64[4]"], &[], "i64[4]");
        err(kind, &[HUGE], &[], "2^64");
        assert_eq!(kind.def().inplace, [(0, 0)], "{kind}");
    }
    let backward = [
        (OpKind::ReluBackward, "y"),
        (OpKind::GeluBackward, "x"),
        (OpKind::SiluBackward, "x"),
        (OpKind::SigmoidBackward, "y"),
        (OpKind::TanhBackward, "y"),
        (OpKind::HardswishBackward, "x"),
        (OpKind::HardsigmoidBackward, "x"),
    ];
    for (kind, saved) in backward {
        assert_eq!(ok(kind, &["f32[4,5]", "f32[4,5]"], &[]), ["f32[4,5]"]);
        err(kind, &["f32[4,5]", "f32[4,6]"], &[], "f32[4,5] and f32[4,6]");
        err(kind, &["f32[4]", "f16[4]"], &[], &format!("dy and {saved} must have the same type"));
        err(kind, &["i32[4]", "i32[4]"], &[], "float");
        assert_eq!(kind.def().inputs, ["dy", saved], "{kind}");
        assert_eq!(kind.def().inplace, [(0, 0), (0, 1)], "{kind}");
    }
    // gelu's form is an attribute of both ops; the default is the tanh approximation.
    assert_eq!(OpKind::Gelu.def().signature(), "gelu(x, approximate=true) -> out");
    let exact = [("approximate", Attr::Bool(false))];
    assert_eq!(ok(OpKind::GeluBackward, &["f16[3]", "f16[3]"], &exact), ["f16[3]"]);
}

#[test]
fn pow_scalar_needs_a_finite_exponent() {
    let e = |x| [("exponent", float(x))];
    assert_eq!(ok(OpKind::PowScalar, &["f32[2,3]"], &e(-0.5)), ["f32[2,3]"]);
    assert_eq!(ok(OpKind::PowScalar, &["f16[]"], &e(0.0)), ["f16[]"]);
    err(OpKind::PowScalar, &["f32[2]"], &e(f64::INFINITY), "exponent=inf must be a finite number");
    err(OpKind::PowScalar, &["f32[2]"], &e(f64::NAN), "exponent=NaN");
    err(OpKind::PowScalar, &["i32[2]"], &e(2.0), "x must be a float tensor");
    assert!(Attrs::for_op(OpKind::PowScalar, &[]).is_err(), "the exponent must be written");
}

#[test]
fn softmax_axes() {
    assert_eq!(ok(OpKind::Softmax, &["f32[2,3]"], &[]), ["f32[2,3]"]);
    assert_eq!(ok(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(0))]), ["f32[2,3]"]);
    assert_eq!(ok(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(-2))]), ["f32[2,3]"]);
    err(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(2))], "use -2..=1");
    err(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(-3))], "out of range");
    err(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(i64::MIN))], "out of range");
    err(OpKind::Softmax, &["f32[]"], &[], "scalar");
    err(OpKind::Softmax, &["i32[3]"], &[], "float");
    assert_eq!(ok(OpKind::SoftmaxBackward, &["f32[2,3]", "f32[2,3]"], &[]), ["f32[2,3]"]);
    err(OpKind::SoftmaxBackward, &["f32[2,3]", "f32[3,2]"], &[], "dy and y");
    err(OpKind::SoftmaxBackward, &["f32[2,3]", "f32[2,3]"], &[("axis", Attr::Int(5))], "out of range");
}

#[test]
fn causal_mask() {
    assert_eq!(ok(OpKind::CausalMask, &["f32[2,4,4]"], &[]), ["f32[2,4,4]"]);
    assert_eq!(ok(OpKind::CausalMask, &["f16[0,0]"], &[("value", float(-1e4))]), ["f16[0,0]"]);
    err(OpKind::CausalMask, &["f32[4,5]"], &[], "[..,T,T]");
    err(OpKind::CausalMask, &["f32[4]"], &[], "f32[4]");
    err(OpKind::CausalMask, &["f32[4,4]"], &[("value", float(f64::NAN))], "NaN");
    err(OpKind::CausalMask, &["i32[4,4]"], &[], "float");
}

#[test]
fn matmul_transposes_and_batches() {
    let m = OpKind::Matmul;
    let t = |a: bool, b: bool| [("transpose_a", Attr::Bool(a)), ("transpose_b", Attr::Bool(b))];
    assert_eq!(ok(m, &["f32[64,784]", "f32[784,256]"], &[]), ["f32[64,256]"]);
    assert_eq!(ok(m, &["f32[784,64]", "f32[784,256]"], &t(true, false)), ["f32[64,256]"]);
    assert_eq!(ok(m, &["f32[64,784]", "f32[256,784]"], &t(false, true)), ["f32[64,256]"]);
    assert_eq!(ok(m, &["f32[784,64]", "f32[256,784]"], &t(true, true)), ["f32[64,256]"]);
    assert_eq!(ok(m, &["f32[2,1,4,8]", "f32[3,8,5]"], &[]), ["f32[2,3,4,5]"]);
    assert_eq!(ok(m, &["f16[2,4,8]", "f16[8,5]"], &[]), ["f16[2,4,5]"]);
    assert_eq!(ok(m, &["f32[4,0]", "f32[0,5]"], &[]), ["f32[4,5]"]);
    err(m, &["f32[2,4,8]", "f32[3,8,5]"], &[], "batch dimensions");
    err(m, &["f32[4,8]", "f32[7,5]"], &[], "inner dimensions differ: f32[4,8] @ f32[7,5]");
    err(m, &["f32[4,8]", "f32[4,5]"], &t(false, true), "inner dimensions");
    err(m, &["f32[8]", "f32[8,5]"], &[], "rank >= 2");
    err(m, &["i32[2,2]", "i32[2,2]"], &[], "float");
    err(m, &["f32[2,2]", "f16[2,2]"], &[], "dtypes differ");
    err(m, &["f32[4294967296,1]", "f32[1,4294967296]"], &[], "2^64");
}

#[test]
fn attention_heads_and_lengths() {
    let a = OpKind::Attention;
    let scale = [("scale", float(0.125))];
    let causal = [("causal", Attr::Bool(true)), ("scale", float(0.125))];
    // Multi-head, then grouped-query heads (8 query heads over 2), T != S, E != Ev.
    assert_eq!(ok(a, &["f32[2,8,16,64]"; 3], &scale), ["f32[2,8,16,64]", "f32[2,8,16]"]);
    let gqa = ["bf16[2,8,5,16]", "bf16[2,2,7,16]", "bf16[2,2,7,32]"];
    assert_eq!(ok(a, &gqa, &causal), ["bf16[2,8,5,32]", "f32[2,8,5]"]);
    // Rank 3 (no batch), several batch dimensions, and empty lengths.
    assert_eq!(ok(a, &["f16[4,3,2]", "f16[1,6,2]", "f16[1,6,5]"], &scale), ["f16[4,3,5]", "f32[4,3]"]);
    assert_eq!(ok(a, &["f32[2,3,1,4,8]"; 3], &scale), ["f32[2,3,1,4,8]", "f32[2,3,1,4]"]);
    assert_eq!(ok(a, &["f32[1,2,0,4]", "f32[1,2,0,4]", "f32[1,2,0,3]"], &causal), ["f32[1,2,0,3]", "f32[1,2,0]"]);
    err(a, &["f32[8,16]"; 3], &scale, "rank >= 3");
    err(a, &["f32[2,4,8,16]", "f32[4,8,16]", "f32[4,8,16]"], &scale, "one rank");
    err(a, &["f32[2,4,8,16]", "f32[3,4,8,16]", "f32[3,4,8,16]"], &scale, "batch dimensions");
    err(a, &["f32[4,8,16]", "f32[4,8,8]", "f32[4,8,16]"], &scale, "last dimension E");
    err(a, &["f32[4,8,16]", "f32[4,8,16]", "f32[4,9,16]"], &scale, "heads and length");
    err(a, &["f32[4,8,16]", "f32[4,8,16]", "f32[2,8,16]"], &scale, "heads and length");
    let six_over_four = ["f32[6,8,16]", "f32[4,8,16]", "f32[4,8,16]"];
    err(a, &six_over_four, &scale, "H=6 must be a positive multiple of the key/value heads Hkv=4");
    err(a, &["f32[0,8,16]", "f32[0,8,16]", "f32[0,8,16]"], &scale, "positive multiple");
    err(a, &["f32[4,8,16]", "f16[4,8,16]", "f32[4,8,16]"], &scale, "dtypes differ");
    err(a, &["i32[4,8,16]"; 3], &scale, "float");
    for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
        err(a, &["f32[4,8,16]"; 3], &[("scale", float(bad))], "scale");
    }
    err(a, &["f32[4294967296,4294967296,1]", "f32[4294967296,1,1]", "f32[4294967296,1,1]"], &scale, "2^64");
    // transpose_out: out [..., T, H, Ev], rows before heads; lse as before.
    let rows_first = [("scale", float(0.125)), ("transpose_out", Attr::Bool(true))];
    assert_eq!(ok(a, &gqa, &rows_first), ["bf16[2,5,8,32]", "f32[2,8,5]"]);
    assert_eq!(ok(a, &["f16[4,3,2]", "f16[1,6,2]", "f16[1,6,5]"], &rows_first), ["f16[3,4,5]", "f32[4,3]"]);
}

#[test]
fn embedding_bag_takes_ids_and_offsets() {
    let e = OpKind::EmbeddingBag;
    assert_eq!(ok(e, &["f32[10,4]", "i64[7]", "i64[3]"], &[]), ["f32[3,4]"]);
    assert_eq!(ok(e, &["bf16[10,4]", "i32[0]", "i64[2]"], &[("mode", Attr::Str("mean".into()))]), ["bf16[2,4]"]);
    err(e, &["f32[10,4]", "i64[2,3]", "i64[2]"], &[], "ids must be [n]");
    err(e, &["f32[10,4]", "i64[7]", "f32[3]"], &[], "offsets");
    err(e, &["f32[10]", "i64[7]", "i64[3]"], &[], "[V,D]");
    err(e, &["f32[10,4]", "i64[7]", "i64[3]"], &[("mode", Attr::Str("max".into()))], "\"sum\" or \"mean\"");
    let b = OpKind::EmbeddingBagBackward;
    assert_eq!(ok(b, &["f32[3,4]", "i64[7]", "i64[3]"], &[("vocab", Attr::Int(10))]), ["f32[10,4]"]);
    err(b, &["f32[2,4]", "i64[7]", "i64[3]"], &[("vocab", Attr::Int(10))], "a row per bag");
    err(b, &["f32[3,4]", "i64[7]", "i64[3]"], &[("vocab", Attr::Int(0))], "vocab=0");
}

#[test]
fn grid_sample_samples_x_at_a_grid_of_positions() {
    let g = OpKind::GridSample;
    let nearest = [("mode", Attr::Str("nearest".into())), ("padding_mode", Attr::Str("border".into()))];
    assert_eq!(ok(g, &["f32[2,3,8,9]", "f32[2,5,7,2]"], &[]), ["f32[2,3,5,7]"]);
    assert_eq!(ok(g, &["bf16[1,4,2,2]", "bf16[1,1,1,2]"], &nearest), ["bf16[1,4,1,1]"]);
    err(g, &["f32[2,3,8,9]", "f32[3,5,7,2]"], &[], "the same N");
    err(g, &["f32[2,3,8,9]", "f32[2,5,7,3]"], &[], "grid [N,P,Q,2]");
    err(g, &["f32[2,3,8]", "f32[2,5,7,2]"], &[], "x must be [N,C,H,W]");
    err(g, &["f32[2,3,8,9]", "f16[2,5,7,2]"], &[], "dtypes differ");
    err(g, &["f32[2,3,8,9]", "f32[2,5,7,2]"], &[("mode", Attr::Str("bicubic".into()))], "expected \"bilinear\" or \"nearest\"");
    err(g, &["f32[2,3,8,9]", "f32[2,5,7,2]"], &[("padding_mode", Attr::Str("reflection".into()))], "\"zeros\" or \"border\"");
    let b = OpKind::GridSampleBackward;
    assert_eq!(ok(b, &["f32[2,3,5,7]", "f32[2,3,8,9]", "f32[2,5,7,2]"], &[]), ["f32[2,3,8,9]", "f32[2,5,7,2]"]);
    err(b, &["f32[2,3,5,6]", "f32[2,3,8,9]", "f32[2,5,7,2]"], &[], "dy must be");
}

#[test]
fn conv3d_output_sizes_and_errors() {
    let c = OpKind::Conv3d;
    let given = [("stride", Attr::Ints(vec![1, 2, 2])), ("padding", Attr::Ints(vec![0, 1, 1])), ("dilation", Attr::Ints(vec![1, 1, 2]))];
    // Depth (8 − 3)/1 + 1 = 6, height (9 + 2 − 3)/2 + 1 = 5, width (10 + 2 − 5)/2 + 1 = 4.
    assert_eq!(ok(c, &["f32[2,4,8,9,10]", "f32[6,4,3,3,3]"], &given), ["f32[2,6,6,5,4]"]);
    assert_eq!(ok(c, &["bf16[1,4,2,2,2]", "bf16[4,2,1,1,1]"], &[("groups", Attr::Int(2))]), ["bf16[1,4,2,2,2]"]);
    err(c, &["f32[2,4,8,9]", "f32[6,4,3,3]"], &[], "[N,C,D,H,W]");
    err(c, &["f32[2,4,8,9,10]", "f32[6,3,3,3,3]"], &[], "channels differ");
    err(c, &["f32[2,4,2,9,10]", "f32[6,4,3,3,3]"], &[], "depth 2 plus padding 2*0 is smaller than the window (3)");
    err(c, &["f32[2,4,8,9,10]", "f32[6,4,3,3,3]"], &[("stride", Attr::Ints(vec![1, 1]))], "3 entries");
    err(c, &["f32[2,4,8,9,10]", "f32[6,4,3,3,3]"], &[("dilation", Attr::Ints(vec![1, 0, 1]))], "at least 1");
    err(c, &["f32[2,4,8,9,10]", "f32[6,4,3,3,3]"], &[("groups", Attr::Int(3))], "groups=3 must divide");
    err(c, &["i32[2,4,8,9,10]", "i32[6,4,3,3,3]"], &[], "float");
    let b = OpKind::Conv3dBackward;
    assert_eq!(ok(b, &["f32[2,6,6,5,4]", "f32[2,4,8,9,10]", "f32[6,4,3,3,3]"], &given), ["f32[2,4,8,9,10]", "f32[6,4,3,3,3]"]);
    err(b, &["f32[2,6,6,5,5]", "f32[2,4,8,9,10]", "f32[6,4,3,3,3]"], &given, "dy must be");
    // 2·y·(C/groups·T·R·S) for the forward, twice that for the backward.
    let flops = |kind: OpKind, inputs: &[&str]| {
        let ins: Vec<TensorType> = inputs.iter().map(|s| ty(s)).collect();
        let ins: Vec<&TensorType> = ins.iter().collect();
        let attrs = attrs_for(kind, &given);
        let outs = (kind.def().infer)(&ins, &attrs).unwrap();
        (kind.def().flops)(&ins, &outs.iter().collect::<Vec<_>>(), &attrs)
    };
    assert_eq!(flops(c, &["f32[2,4,8,9,10]", "f32[6,4,3,3,3]"]), 2 * (2 * 6 * 6 * 5 * 4) * (4 * 27));
    assert_eq!(flops(b, &["f32[2,6,6,5,4]", "f32[2,4,8,9,10]", "f32[6,4,3,3,3]"]), 4 * (2 * 6 * 6 * 5 * 4) * (4 * 27));
}

#[test]
fn random_makes_a_float_tensor_from_a_seed() {
    let r = OpKind::Random;
    let given = |dtype: DType, stream: i64| {
        [("shape", Attr::Ints(vec![2, 3])), ("dtype", Attr::DType(dtype)), ("stream", Attr::Int(stream))]
    };
    assert_eq!(ok(r, &["i64[]"], &given(DType::Bf16, 0)), ["bf16[2,3]"]);
    err(r, &["i64[]"], &given(DType::I64, 0), "f32, f16 or bf16");
    err(r, &["i64[]"], &given(DType::F32, -2), "stream=-2");
    err(r, &["i32[]"], &given(DType::F32, 0), "seed must be an i64[] scalar");
    err(r, &["i64[2]"], &given(DType::F32, 0), "seed must be an i64[] scalar");
    assert_eq!(r.def().draws, Some("stream"));
}

#[test]
fn dropout_attention_takes_a_bias_a_seed_a_probability_and_a_stream() {
    let a = OpKind::DropoutAttention;
    let given = [("scale", float(0.5)), ("p", float(0.1)), ("stream", Attr::Int(2))];
    let q_k_v = ["bf16[2,4,5,8]", "bf16[2,2,7,8]", "bf16[2,2,7,3]"];
    let ins = [q_k_v[0], q_k_v[1], q_k_v[2], "bf16[]", "i64[]"];
    assert_eq!(ok(a, &ins, &given), ["bf16[2,4,5,3]", "f32[2,4,5]"]);
    let with = |i: usize, t: &'static str| {
        let mut changed = ins;
        changed[i] = t;
        changed
    };
    assert_eq!(ok(a, &with(3, "bf16[2,1,1,7]"), &given), ["bf16[2,4,5,3]", "f32[2,4,5]"]);
    err(a, &with(3, "bf16[2,1,2,7]"), &given, "does not broadcast");
    err(a, &with(3, "f32[]"), &given, "q's dtype");
    err(a, &with(4, "i32[]"), &given, "seed must be an i64[] scalar");
    err(a, &with(4, "i64[1]"), &given, "seed must be an i64[] scalar");
    for bad in [1.0, -0.1, f64::NAN] {
        err(a, &ins, &[("scale", float(0.5)), ("p", float(bad)), ("stream", Attr::Int(0))], "probability");
    }
    err(a, &ins, &[("scale", float(0.5)), ("p", float(0.1)), ("stream", Attr::Int(-1))], "stream=-1");
    // The backward ops: the forward's inputs between dout and its outputs.
    let saved = ["bf16[2,4,5,3]", q_k_v[0], q_k_v[1], q_k_v[2], "bf16[]", "i64[]", "bf16[2,4,5,3]", "f32[2,4,5]"];
    assert_eq!(ok(OpKind::DropoutAttentionBackward, &saved, &given), q_k_v);
    assert_eq!(ok(OpKind::DropoutAttentionBiasBackward, &saved, &given), ["bf16[]"]);
    let mut bad_lse = saved;
    bad_lse[7] = "f32[2,4]";
    err(OpKind::DropoutAttentionBackward, &bad_lse, &given, "lse must be f32[2,4,5]");
    let mut bad_seed = saved;
    bad_seed[5] = "f32[]";
    err(OpKind::DropoutAttentionBiasBackward, &bad_seed, &given, "seed must be an i64[] scalar");
}

#[test]
fn attention_backward_takes_the_forward_types() {
    let b = OpKind::AttentionBackward;
    let scale = [("scale", float(0.5))];
    let q_k_v = ["f16[2,4,5,8]", "f16[2,2,7,8]", "f16[2,2,7,3]"];
    let ins = ["f16[2,4,5,3]", q_k_v[0], q_k_v[1], q_k_v[2], "f16[2,4,5,3]", "f32[2,4,5]"];
    assert_eq!(ok(b, &ins, &scale), q_k_v);
    let with = |i: usize, t: &'static str| {
        let mut changed = ins;
        changed[i] = t;
        changed
    };
    err(b, &with(0, "f16[2,4,5,8]"), &scale, "dout must be f16[2,4,5,3]");
    err(b, &with(4, "f32[2,4,5,3]"), &scale, "out must be f16[2,4,5,3]");
    err(b, &with(5, "f16[2,4,5]"), &scale, "lse must be f32[2,4,5]");
    err(b, &with(2, "f16[2,3,7,8]"), &scale, "heads and length");
    err(b, &ins, &[("scale", float(0.0))], "scale");
    // transpose_out: dout and out rows before heads.
    let rows_first = [("scale", float(0.5)), ("transpose_out", Attr::Bool(true))];
    let swapped = ["f16[2,5,4,3]", q_k_v[0], q_k_v[1], q_k_v[2], "f16[2,5,4,3]", "f32[2,4,5]"];
    assert_eq!(ok(b, &swapped, &rows_first), q_k_v);
    err(b, &ins, &rows_first, "dout must be f16[2,5,4,3]");
}

#[test]
fn reductions() {
    for kind in [OpKind::Sum, OpKind::Mean] {
        let axes = |v: &[i64]| ("axes", ints(v));
        let keep = ("keepdim", Attr::Bool(true));
        assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[0])]), ["f32[5]"]);
        assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[0]), keep.clone()]), ["f32[1,5]"]);
        assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[-1])]), ["f32[4]"]);
        assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[1, 0])]), ["f32[]"]);
        assert_eq!(ok(kind, &["f32[2,3,4]"], &[axes(&[0, 2]), keep]), ["f32[1,3,1]"]);
        err(kind, &["f32[4,5]"], &[axes(&[1, -1])], "twice");
        err(kind, &["f32[4,5]"], &[axes(&[2])], "out of range for f32[4,5]");
        err(kind, &["f32[4,5]"], &[axes(&[])], "empty");
        err(kind, &["f32[]"], &[axes(&[0])], "scalar");
        err(kind, &["bool[4]"], &[axes(&[0])], "bool[4]");
    }
    assert_eq!(ok(OpKind::Sum, &["i64[4,5]"], &[("axes", ints(&[1]))]), ["i64[4]"]);
    err(OpKind::Mean, &["i32[4,5]"], &[("axes", ints(&[1]))], "float");
}

#[test]
fn reshape_keeps_numel() {
    let r = |s: &[i64]| [("shape", ints(s))];
    assert_eq!(ok(OpKind::Reshape, &["f32[2,3]"], &r(&[3, 2])), ["f32[3,2]"]);
    assert_eq!(ok(OpKind::Reshape, &["i64[2,3]"], &r(&[6])), ["i64[6]"]);
    assert_eq!(ok(OpKind::Reshape, &["f32[]"], &r(&[1, 1])), ["f32[1,1]"]);
    assert_eq!(ok(OpKind::Reshape, &["f32[1]"], &r(&[])), ["f32[]"]);
    assert_eq!(ok(OpKind::Reshape, &["f32[0,5]"], &r(&[5, 0])), ["f32[5,0]"]);
    err(OpKind::Reshape, &["f32[2,3]"], &r(&[4, 2]), "f32[2,3] (6 elements) to [4,2] (8 elements)");
    err(OpKind::Reshape, &["f32[2,3]"], &r(&[-1, 6]), "negative");
    err(OpKind::Reshape, &["f32[2]"], &r(&[i64::MAX, i64::MAX]), "2^64 elements");
    assert_eq!(OpKind::Reshape.def().view_of(), Some(0));
}

#[test]
fn transpose_needs_a_permutation() {
    let p = |s: &[i64]| [("perm", ints(s))];
    assert_eq!(ok(OpKind::Transpose, &["f32[2,3]"], &p(&[1, 0])), ["f32[3,2]"]);
    assert_eq!(ok(OpKind::Transpose, &["f32[2,3,4]"], &p(&[0, 2, 1])), ["f32[2,4,3]"]);
    assert_eq!(ok(OpKind::Transpose, &["f32[]"], &p(&[])), ["f32[]"]);
    err(OpKind::Transpose, &["f32[2,3]"], &p(&[]), "has 0 entries but f32[2,3] has rank 2");
    err(OpKind::Transpose, &["f32[2,3]"], &p(&[0, 0]), "not a permutation");
    err(OpKind::Transpose, &["f32[2,3]"], &p(&[0, 2]), "not a permutation");
    err(OpKind::Transpose, &["f32[2,3]"], &p(&[-1, 0]), "not a permutation");
    assert_eq!(OpKind::Transpose.def().view_of(), Some(0));
}

#[test]
fn expand_broadcasts_to_exactly_shape() {
    let e = |s: &[i64]| [("shape", ints(s))];
    assert_eq!(ok(OpKind::Expand, &["f32[3,1]"], &e(&[2, 3, 4])), ["f32[2,3,4]"]);
    assert_eq!(ok(OpKind::Expand, &["f32[3]"], &e(&[3])), ["f32[3]"]);
    assert_eq!(ok(OpKind::Expand, &["f32[]"], &e(&[2, 2])), ["f32[2,2]"]);
    assert_eq!(ok(OpKind::Expand, &["f32[1]"], &e(&[0])), ["f32[0]"]);
    err(OpKind::Expand, &["f32[3]"], &e(&[2, 4]), "dimension 0 is 3, not 1 or 4");
    err(OpKind::Expand, &["f32[2,3]"], &e(&[3]), "fewer dimensions");
    err(OpKind::Expand, &["f32[1]"], &e(&[-2]), "negative");
    err(OpKind::Expand, &["f32[1]"], &e(&[4294967296, 4294967296]), "2^64");
    assert_eq!(OpKind::Expand.def().view_of(), Some(0));
}

#[test]
fn contiguous_and_cast() {
    assert_eq!(ok(OpKind::Contiguous, &["bool[2,3]"], &[]), ["bool[2,3]"]);
    err(OpKind::Contiguous, &[HUGE], &[], "2^64");
    let to = |d| [("to", Attr::DType(d))];
    assert_eq!(ok(OpKind::Cast, &["f32[2]"], &to(DType::Bf16)), ["bf16[2]"]);
    assert_eq!(ok(OpKind::Cast, &["bool[]"], &to(DType::I64)), ["i64[]"]);
    err(OpKind::Cast, &[HUGE], &to(DType::F16), "2^64");
}

#[test]
fn fill_checks_value_against_dtype() {
    let f = |shape: &[i64], d, v| [("shape", ints(shape)), ("dtype", Attr::DType(d)), ("value", float(v))];
    assert_eq!(ok(OpKind::Fill, &[], &f(&[], DType::F32, 1.0)), ["f32[]"]);
    assert_eq!(ok(OpKind::Fill, &[], &f(&[2, 3], DType::I64, -7.0)), ["i64[2,3]"]);
    assert_eq!(ok(OpKind::Fill, &[], &f(&[4], DType::Bool, 1.0)), ["bool[4]"]);
    assert_eq!(ok(OpKind::Fill, &[], &f(&[0], DType::F16, f64::NEG_INFINITY)), ["f16[0]"]);
    err(OpKind::Fill, &[], &f(&[2], DType::I32, 1.5), "not representable as i32");
    err(OpKind::Fill, &[], &f(&[2], DType::I32, 3e9), "i32");
    err(OpKind::Fill, &[], &f(&[2], DType::I64, f64::INFINITY), "i64");
    err(OpKind::Fill, &[], &f(&[2], DType::Bool, 2.0), "bool");
    err(OpKind::Fill, &[], &f(&[2, -3], DType::F32, 0.0), "negative");
    err(OpKind::Fill, &[], &f(&[2], DType::F32, f64::NAN), "NaN");
    // With a step (arange): the last element must fit, integer dtypes take integer steps.
    let step = |shape: &[i64], dtype, value, step: f64| {
        let mut attrs = f(shape, dtype, value).to_vec();
        attrs.push(("step", float(step)));
        attrs
    };
    assert_eq!(ok(OpKind::Fill, &[], &step(&[1024], DType::I64, 0.0, 1.0)), ["i64[1024]"]);
    assert_eq!(ok(OpKind::Fill, &[], &step(&[2, 3], DType::F16, 1.0, -0.5)), ["f16[2,3]"]);
    err(OpKind::Fill, &[], &step(&[4], DType::I32, 0.0, 0.5), "does not keep the elements i32");
    err(OpKind::Fill, &[], &step(&[4], DType::Bool, 0.0, 1.0), "bool");
    err(OpKind::Fill, &[], &step(&[4], DType::I32, 2147483646.0, 1.0), "last element, 2147483649.0");
    err(OpKind::Fill, &[], &step(&[4], DType::F32, 0.0, f64::INFINITY), "finite");
}

#[test]
fn embedding() {
    let e = OpKind::Embedding;
    assert_eq!(ok(e, &["f32[100,16]", "i64[4,8]"], &[]), ["f32[4,8,16]"]);
    assert_eq!(ok(e, &["bf16[100,16]", "i32[]"], &[]), ["bf16[16]"]);
    err(e, &["f32[100,16]", "f32[4]"], &[], "ids must be an i32 or i64 tensor, found f32[4]");
    err(e, &["f32[100,16,2]", "i32[4]"], &[], "[V,D]");
    err(e, &["i32[100,16]", "i32[4]"], &[], "float");
    let b = OpKind::EmbeddingBackward;
    let vocab = |v| [("vocab", Attr::Int(v))];
    assert_eq!(ok(b, &["f32[4,8,16]", "i64[4,8]"], &vocab(100)), ["f32[100,16]"]);
    err(b, &["f32[4,8,16]", "i64[4,8]"], &vocab(0), "vocab=0");
    err(b, &["f32[4,7,16]", "i64[4,8]"], &vocab(10), "dy f32[4,7,16] and ids i64[4,8]");
    err(b, &["f32[]", "i64[]"], &vocab(10), "last dimension");
}

#[test]
fn norms() {
    assert_eq!(ok(OpKind::LayerNorm, &["f32[2,3,8]", "f32[8]", "f32[8]"], &[]), ["f32[2,3,8]"]);
    err(OpKind::LayerNorm, &["f32[2,3,8]", "f32[3]", "f32[8]"], &[], "gamma must be f32[8] for x f32[2,3,8]");
    err(OpKind::LayerNorm, &["f32[2,8]", "f32[8]", "f16[8]"], &[], "beta");
    err(OpKind::LayerNorm, &["f32[]", "f32[1]", "f32[1]"], &[], "[...,D]");
    err(OpKind::LayerNorm, &["f32[2,8]", "f32[8]", "f32[8]"], &[("eps", float(0.0))], "eps=0.0");
    assert_eq!(
        ok(OpKind::LayerNormBackward, &["f32[2,8]", "f32[2,8]", "f32[8]"], &[]),
        ["f32[2,8]", "f32[8]", "f32[8]"]
    );
    err(OpKind::LayerNormBackward, &["f32[2,7]", "f32[2,8]", "f32[8]"], &[], "dy and x");
    assert_eq!(ok(OpKind::RmsNorm, &["bf16[2,3,8]", "bf16[8]"], &[]), ["bf16[2,3,8]"]);
    err(OpKind::RmsNorm, &["f32[2,8]", "f32[2]"], &[], "gamma must be f32[8] for x f32[2,8]");
    err(OpKind::RmsNorm, &["f32[]", "f32[1]"], &[], "[...,D]");
    err(OpKind::RmsNorm, &["i32[2,8]", "i32[8]"], &[], "float");
    err(OpKind::RmsNorm, &["f32[2,8]", "f32[8]"], &[("eps", float(-1e-6))], "eps=-1e-6");
    assert_eq!(OpKind::RmsNorm.def().signature(), "rms_norm(x, gamma, eps=1e-6) -> y");
    assert_eq!(ok(OpKind::RmsNormBackward, &["f32[2,8]", "f32[2,8]", "f32[8]"], &[]), ["f32[2,8]", "f32[8]"]);
    err(OpKind::RmsNormBackward, &["f32[2,7]", "f32[2,8]", "f32[8]"], &[], "dy and x");
    err(OpKind::RmsNormBackward, &["f32[2,8]", "f32[2,8]", "f32[7]"], &[], "gamma");
    assert_eq!(OpKind::RmsNormBackward.def().inplace, [(0, 0)]);

    assert_eq!(ok(OpKind::BatchNorm, &["f32[4,3,5,5]", "f32[3]", "f32[3]"], &[]), ["f32[4,3,5,5]"]);
    assert_eq!(ok(OpKind::BatchNorm, &["f32[4,3]", "f32[3]", "f32[3]"], &[]), ["f32[4,3]"]);
    err(OpKind::BatchNorm, &["f32[4]", "f32[4]", "f32[4]"], &[], "[N,C,...]");
    err(OpKind::BatchNorm, &["f32[4,3,5,5]", "f32[5]", "f32[3]"], &[], "gamma must be f32[3]");
    err(OpKind::BatchNorm, &["f32[4,3]", "f32[3]", "f32[3]"], &[("eps", float(f64::INFINITY))], "eps");
    assert_eq!(
        ok(OpKind::BatchNormBackward, &["f32[4,3,5,5]", "f32[4,3,5,5]", "f32[3]"], &[]),
        ["f32[4,3,5,5]", "f32[3]", "f32[3]"]
    );
    err(OpKind::BatchNormBackward, &["f32[4,3,5,5]", "f32[4,3,5,5]", "f32[4]"], &[], "gamma");
    // A half x with f32 params (a BatchNorm under autocast): dgamma and dbeta are f32.
    assert_eq!(ok(OpKind::BatchNorm, &["bf16[4,3,5,5]", "f32[3]", "f32[3]"], &[]), ["bf16[4,3,5,5]"]);
    assert_eq!(ok(OpKind::BatchNorm, &["f16[4,3]", "f16[3]", "f16[3]"], &[]), ["f16[4,3]"]);
    err(OpKind::BatchNorm, &["bf16[4,3]", "f32[3]", "bf16[3]"], &[], "one dtype");
    err(OpKind::BatchNorm, &["f32[4,3]", "bf16[3]", "bf16[3]"], &[], "gamma must be f32[3]");
    assert_eq!(
        ok(OpKind::BatchNormBackward, &["bf16[4,3,5,5]", "bf16[4,3,5,5]", "f32[3]"], &[]),
        ["bf16[4,3,5,5]", "f32[3]", "f32[3]"]
    );
    assert_eq!(
        ok(OpKind::BatchNormStats, &["bf16[4,3,5,5]"], &[("correction", Attr::Int(1))]),
        ["f32[3]", "f32[3]"]
    );
    err(OpKind::BatchNormStats, &["f32[1,3]"], &[("correction", Attr::Int(1))], "too few elements per channel");
    err(OpKind::BatchNormStats, &["f32[4,3]"], &[("correction", Attr::Int(-1))], "correction=-1");
    err(OpKind::BatchNormStats, &["i64[4,3]"], &[], "float");
}

#[test]
fn conv2d_output_sizes() {
    let c = OpKind::Conv2d;
    let sp = |s: &[i64], p: &[i64]| [("stride", ints(s)), ("padding", ints(p))];
    assert_eq!(ok(c, &["f32[8,3,32,32]", "f32[16,3,3,3]"], &sp(&[2, 2], &[1, 1])), ["f32[8,16,16,16]"]);
    assert_eq!(ok(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &[]), ["f32[1,2,3,3]"]);
    assert_eq!(ok(c, &["f32[1,3,5,7]", "f32[2,3,1,3]"], &sp(&[1, 2], &[0, 1])), ["f32[1,2,5,4]"]);
    assert_eq!(ok(c, &["f32[1,3,3,3]", "f32[2,3,3,3]"], &[]), ["f32[1,2,1,1]"]);
    err(c, &["f32[1,3,5,5]", "f32[2,4,3,3]"], &[], "C=3 but w f32[2,4,3,3] has C=4");
    err(c, &["f32[1,3,2,2]", "f32[2,3,3,3]"], &[], "smaller than the window (3)");
    err(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &sp(&[0, 1], &[0, 0]), "stride=[0, 1]");
    err(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &sp(&[1, 1], &[-1, 0]), "padding=[-1, 0]");
    err(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &sp(&[1], &[0, 0]), "2 entries");
    err(c, &["f32[3,5,5]", "f32[2,3,3,3]"], &[], "[N,C,H,W]");
    err(c, &["f32[1,3,5,5]", "f16[2,3,3,3]"], &[], "dtypes differ");
    err(c, &["f32[1,1,1,1]", "f32[1,1,1,1]"], &sp(&[1, 1], &[i64::MAX, i64::MAX]), "2^64");

    let b = OpKind::Conv2dBackward;
    let attrs = sp(&[2, 2], &[1, 1]);
    assert_eq!(
        ok(b, &["f32[8,16,16,16]", "f32[8,3,32,32]", "f32[16,3,3,3]"], &attrs),
        ["f32[8,3,32,32]", "f32[16,3,3,3]"]
    );
    err(b, &["f32[8,16,32,32]", "f32[8,3,32,32]", "f32[16,3,3,3]"], &attrs, "type f32[8,16,16,16]");
    err(b, &["f32[8,16,16,16]", "f32[8,3,32,32]", "f32[16,4,3,3]"], &attrs, "channels differ");
}

/// conv2d's attributes: stride, padding, dilation, groups.
fn conv(stride: [i64; 2], padding: [i64; 2], dilation: [i64; 2], groups: i64) -> [(&'static str, Attr); 4] {
    [("stride", ints(&stride)), ("padding", ints(&padding)), ("dilation", ints(&dilation)), ("groups", Attr::Int(groups))]
}

/// Shapes by PyTorch's formula, worked by hand: P = ⌊(H + 2·padding − dilation·(R − 1) − 1)
/// / stride⌋ + 1, w is [K, C/groups, R, S].
#[test]
fn grouped_and_dilated_conv2d_output_sizes() {
    let c = OpKind::Conv2d;
    // MobileNet's depthwise conv: groups = C = K = 32, w [32,1,3,3], stride 2, padding 1:
    // ⌊(112 + 2 − 2 − 1) / 2⌋ + 1 = 55 + 1 = 56.
    let depthwise = conv([2, 2], [1, 1], [1, 1], 32);
    assert_eq!(ok(c, &["f32[8,32,112,112]", "f32[32,1,3,3]"], &depthwise), ["f32[8,32,56,56]"]);
    // ResNeXt's grouped 3×3: 32 groups of 4 channels: (56 + 2 − 2 − 1) + 1 = 56.
    let resnext = conv([1, 1], [1, 1], [1, 1], 32);
    assert_eq!(ok(c, &["f32[2,128,56,56]", "f32[256,4,3,3]"], &resnext), ["f32[2,256,56,56]"]);
    // Dilation 2 (a 3×3 kernel spanning 5): height (10 + 0 − 4 − 1) + 1 = 6, width
    // (9 + 4 − 4 − 1) + 1 = 9.
    assert_eq!(ok(c, &["f32[1,3,10,9]", "f32[4,3,3,3]"], &conv([1, 1], [0, 2], [2, 2], 1)), ["f32[1,4,6,9]"]);
    // Dilation (3, 1), stride 2, 2 groups: height ⌊(11 − 6 − 1) / 2⌋ + 1 = 3, width
    // ⌊(11 − 2 − 1) / 2⌋ + 1 = 5.
    assert_eq!(ok(c, &["f32[1,2,11,11]", "f32[4,1,3,3]"], &conv([2, 2], [0, 0], [3, 1], 2)), ["f32[1,4,3,5]"]);
    // 2 groups of 2 input and 3 output channels.
    assert_eq!(ok(c, &["f16[1,4,3,3]", "f16[6,2,1,1]"], &conv([1, 1], [0, 0], [1, 1], 2)), ["f16[1,6,3,3]"]);
    // The defaults are today's conv2d.
    assert_eq!(ok(c, &["f32[8,3,32,32]", "f32[16,3,3,3]"], &conv([2, 2], [1, 1], [1, 1], 1)), ["f32[8,16,16,16]"]);

    let x = "f32[1,4,5,5]";
    err(c, &[x, "f32[2,4,3,3]"], &conv([1, 1], [0, 0], [1, 1], 0), "groups=0 must be at least 1");
    err(c, &[x, "f32[2,4,3,3]"], &conv([1, 1], [0, 0], [1, 1], -2), "groups=-2 must be at least 1");
    err(c, &[x, "f32[3,1,3,3]"], &conv([1, 1], [0, 0], [1, 1], 3), "groups=3 must divide the input channels: x f32[1,4,5,5] has C=4");
    err(c, &[x, "f32[3,2,3,3]"], &conv([1, 1], [0, 0], [1, 1], 2), "groups=2 must divide the output channels: w f32[3,2,3,3] has K=3");
    err(c, &[x, "f32[4,4,3,3]"], &conv([1, 1], [0, 0], [1, 1], 2), "with groups=2 w needs C/groups=2, but w f32[4,4,3,3] has 4");
    err(c, &[x, "f32[4,4,3,3]"], &conv([1, 1], [0, 0], [0, 1], 1), "dilation=[0, 1]: each entry must be at least 1");
    err(c, &[x, "f32[4,4,3,3]"], &conv([1, 1], [0, 0], [-1, 1], 1), "dilation=[-1, 1]");
    err(c, &[x, "f32[4,4,3,3]"], &[("dilation", ints(&[1, 1, 1]))], "dilation=[1, 1, 1] must have 2 entries");
    // A dilated window larger than the padded input: 3 taps 3 apart span 7 > 5.
    let e = err(c, &[x, "f32[4,4,3,3]"], &conv([1, 1], [0, 0], [3, 3], 1), "smaller than the window (7)");
    assert!(e.contains("dilation=[3, 3]"), "{e}");
    err(c, &[x, "f32[4,4,4,4]"], &conv([1, 1], [0, 0], [i64::MAX, 1], 1), "span more than 2^64");

    let b = OpKind::Conv2dBackward;
    let attrs = conv([2, 2], [1, 1], [2, 2], 2);
    assert_eq!(ok(b, &["f32[1,6,3,3]", "f32[1,4,7,7]", "f32[6,2,3,3]"], &attrs), ["f32[1,4,7,7]", "f32[6,2,3,3]"]);
    err(b, &["f32[1,6,4,4]", "f32[1,4,7,7]", "f32[6,2,3,3]"], &attrs, "type f32[1,6,3,3]");
    err(b, &["f32[1,6,3,3]", "f32[1,4,7,7]", "f32[6,4,3,3]"], &attrs, "C/groups=2");
}

/// conv_transpose2d by PyTorch's formula, worked by hand: P = (H − 1)·stride − 2·padding +
/// dilation·(R − 1) + output_padding + 1, w is [C, K/groups, R, S].
#[test]
fn conv_transpose2d_output_sizes() {
    let t = OpKind::ConvTranspose2d;
    let attrs = |stride: [i64; 2], padding: [i64; 2], output_padding: [i64; 2], dilation: [i64; 2], groups: i64| {
        let mut given = conv(stride, padding, dilation, groups).to_vec();
        given.push(("output_padding", ints(&output_padding)));
        given
    };
    // U-Net's 2×2 up-convolution, stride 2: (16 − 1)·2 − 0 + 1 + 0 + 1 = 32.
    let up = attrs([2, 2], [0, 0], [0, 0], [1, 1], 1);
    assert_eq!(ok(t, &["f32[4,64,16,16]", "f32[64,32,2,2]"], &up), ["f32[4,32,32,32]"]);
    // 3×3, stride 2, padding 1: (8 − 1)·2 − 2 + 2 + 1 = 15, and 16 with output_padding 1
    // (the inverse of a stride-2 'same' conv2d, which maps both 15 and 16 to 8).
    let x = "f32[1,8,8,8]";
    assert_eq!(ok(t, &[x, "f32[8,4,3,3]"], &attrs([2, 2], [1, 1], [0, 0], [1, 1], 1)), ["f32[1,4,15,15]"]);
    assert_eq!(ok(t, &[x, "f32[8,4,3,3]"], &attrs([2, 2], [1, 1], [1, 1], [1, 1], 1)), ["f32[1,4,16,16]"]);
    assert_eq!(ok(OpKind::Conv2d, &["f32[1,4,16,16]", "f32[8,4,3,3]"], &conv([2, 2], [1, 1], [1, 1], 1)), ["f32[1,8,8,8]"]);
    // Dilation 2: height (5 − 1) + 2·2 + 1 = 9, width (6 − 1) + 4 + 1 = 10.
    assert_eq!(ok(t, &["f32[1,2,5,6]", "f32[2,3,3,3]"], &attrs([1, 1], [0, 0], [0, 0], [2, 2], 1)), ["f32[1,3,9,10]"]);
    // 2 groups of 2 input channels, 3 output channels each: K = 6; (3 − 1) + 1 + 1 = 4.
    assert_eq!(ok(t, &["bf16[1,4,3,3]", "bf16[4,3,2,2]"], &attrs([1, 1], [0, 0], [0, 0], [1, 1], 2)), ["bf16[1,6,4,4]"]);
    // Depthwise (groups = C = K = 6), stride 2, padding 1, output_padding 1: 3·2 − 2 + 2 + 1 + 1 = 8.
    assert_eq!(ok(t, &["f32[2,6,4,4]", "f32[6,1,3,3]"], &attrs([2, 2], [1, 1], [1, 1], [1, 1], 6)), ["f32[2,6,8,8]"]);
    // output_padding below the dilation (not the stride) is allowed: (3 − 1) + 4 + 1 + 1 = 8.
    assert_eq!(ok(t, &["f32[1,1,3,3]", "f32[1,1,3,3]"], &attrs([1, 1], [0, 0], [1, 1], [2, 2], 1)), ["f32[1,1,8,8]"]);
    // ... and below the stride in one dimension, the dilation in the other: height
    // 2·2 + 2 + 1 + 1 = 8, width 2 + 4 + 1 + 1 = 8.
    assert_eq!(ok(t, &["f32[1,1,3,3]", "f32[1,1,3,3]"], &attrs([2, 1], [0, 0], [1, 1], [1, 2], 1)), ["f32[1,1,8,8]"]);
    // Padding may cut the output to nothing, not below: 0 − 2 + 2 = 0, then 0 − 2 + 1 = −1.
    let pad = attrs([1, 1], [1, 1], [0, 0], [1, 1], 1);
    assert_eq!(ok(t, &["f32[1,1,1,1]", "f32[1,1,2,2]"], &pad), ["f32[1,1,0,0]"]);
    err(t, &["f32[1,1,1,1]", "f32[1,1,1,1]"], &pad, "the output height (1-1)*1 - 2*1 + 1 + 0 = -1 is negative");

    let ins = ["f32[1,4,5,5]", "f32[4,2,3,3]"];
    let too_much = "output_padding=[2, 0] must be smaller than the stride ([2, 2]) or the dilation ([1, 1])";
    err(t, &ins, &attrs([2, 2], [0, 0], [2, 0], [1, 1], 1), too_much);
    err(t, &ins, &attrs([1, 1], [0, 0], [0, 1], [1, 1], 1), "output_padding=[0, 1]");
    err(t, &ins, &attrs([1, 1], [0, 0], [0, -1], [1, 1], 1), "output_padding=[0, -1]: each entry must be at least 0");
    err(t, &["f32[1,4,5,5]", "f32[3,2,3,3]"], &[], "channels differ: x f32[1,4,5,5] has C=4 but w f32[3,2,3,3] has C=3");
    err(t, &ins, &attrs([1, 1], [0, 0], [0, 0], [1, 1], 3), "groups=3 must divide the input channels");
    err(t, &ins, &attrs([1, 1], [0, 0], [0, 0], [1, 1], 0), "groups=0 must be at least 1");
    err(t, &ins, &attrs([1, 1], [0, 0], [0, 0], [0, 1], 1), "dilation=[0, 1]");
    err(t, &["f32[4,5,5]", "f32[4,2,3,3]"], &[], "[C,K/groups,R,S]");
    err(t, &["f32[1,4,5,5]", "f16[4,2,3,3]"], &[], "dtypes differ");
    err(t, &["i32[1,4,5,5]", "i32[4,2,3,3]"], &[], "float");
    err(t, &["f32[1,1,4294967296,1]", "f32[1,1,1,1]"], &attrs([i64::MAX, 1], [0, 0], [0, 0], [1, 1], 1), "too large");
    err(t, &["f32[4294967296,4294967296,1,1]", "f32[4294967296,4294967296,1,1]"], &[], "2^64");

    let b = OpKind::ConvTranspose2dBackward;
    let given = attrs([2, 2], [1, 1], [1, 1], [1, 1], 2);
    assert_eq!(ok(b, &["f32[1,6,8,8]", "f32[1,4,4,4]", "f32[4,3,3,3]"], &given), ["f32[1,4,4,4]", "f32[4,3,3,3]"]);
    let wrong_dy = "dy must be conv_transpose2d(x f32[1,4,4,4], w f32[4,3,3,3])'s type f32[1,6,8,8]";
    err(b, &["f32[1,6,7,7]", "f32[1,4,4,4]", "f32[4,3,3,3]"], &given, wrong_dy);
    err(b, &["f32[1,6,8,8]", "f32[1,4,4,4]", "f32[2,3,3,3]"], &given, "channels differ");
}

#[test]
fn max_pool2d_output_sizes() {
    let m = OpKind::MaxPool2d;
    let kw = |k: &[i64], s: &[i64], p: &[i64]| [("kernel", ints(k)), ("stride", ints(s)), ("padding", ints(p))];
    assert_eq!(ok(m, &["f32[1,2,8,8]"], &kw(&[2, 2], &[2, 2], &[0, 0])), ["f32[1,2,4,4]"]);
    assert_eq!(ok(m, &["f32[1,2,7,7]"], &kw(&[3, 3], &[2, 2], &[1, 1])), ["f32[1,2,4,4]"]);
    assert_eq!(ok(m, &["f16[2,3,5,4]"], &kw(&[1, 2], &[1, 1], &[0, 1])), ["f16[2,3,5,5]"]);
    err(m, &["f32[1,2,8,8]"], &kw(&[3, 3], &[1, 1], &[2, 2]), "at most half");
    err(m, &["f32[1,2,8,8]"], &kw(&[0, 2], &[1, 1], &[0, 0]), "kernel=[0, 2]");
    err(m, &["f32[1,2,8,8]"], &kw(&[2, 2], &[0, 0], &[0, 0]), "stride");
    err(m, &["f32[1,2,1,8]"], &kw(&[2, 2], &[1, 1], &[0, 0]), "height 1");
    err(m, &["f32[2,8,8]"], &kw(&[2, 2], &[2, 2], &[0, 0]), "[N,C,H,W]");
    err(m, &["i32[1,2,8,8]"], &kw(&[2, 2], &[2, 2], &[0, 0]), "float");
    let b = OpKind::MaxPool2dBackward;
    let attrs = kw(&[2, 2], &[2, 2], &[0, 0]);
    assert_eq!(ok(b, &["f32[1,2,4,4]", "f32[1,2,8,8]"], &attrs), ["f32[1,2,8,8]"]);
    err(b, &["f32[1,2,8,8]", "f32[1,2,8,8]"], &attrs, "type f32[1,2,4,4]");
}

#[test]
fn cross_entropy() {
    let c = OpKind::CrossEntropy;
    assert_eq!(ok(c, &["f32[64,10]", "i32[64]"], &[]), ["f32[]"]);
    assert_eq!(ok(c, &["bf16[4,3]", "i64[4]"], &[]), ["bf16[]"]);
    err(c, &["f32[64,10]", "i32[63]"], &[], "labels must be [64] for logits f32[64,10], found i32[63]");
    err(c, &["f32[64,10]", "f32[64]"], &[], "i32 or i64");
    err(c, &["f32[2,64,10]", "i32[64]"], &[], "[N,C]");
    err(c, &["i32[64,10]", "i32[64]"], &[], "float");
    let b = OpKind::CrossEntropyBackward;
    assert_eq!(ok(b, &["f32[]", "f32[64,10]", "i32[64]"], &[]), ["f32[64,10]"]);
    err(b, &["f16[]", "f32[64,10]", "i32[64]"], &[], "dloss must be f32[]");
    err(b, &["f32[1]", "f32[64,10]", "i32[64]"], &[], "found f32[1]");
    err(b, &["f32[]", "f32[64,10]", "i32[64,1]"], &[], "labels");
    // PyTorch's options: any ignore_index, label_smoothing in [0, 1].
    let options = |i, e| [("ignore_index", Attr::Int(i)), ("label_smoothing", float(e))];
    for (kind, inputs) in [(c, &["f32[4,3]", "i64[4]"][..]), (b, &["f32[]", "f32[4,3]", "i64[4]"])] {
        assert_eq!(ok(kind, inputs, &options(-100, 0.0)).len(), 1);
        assert_eq!(ok(kind, inputs, &options(1, 1.0)).len(), 1);
        assert_eq!(ok(kind, inputs, &options(i64::MIN, 0.25)).len(), 1);
        err(kind, inputs, &options(-100, 1.5), "label_smoothing=1.5 must be in [0, 1]");
        err(kind, inputs, &options(-100, -0.1), "label_smoothing=-0.1");
        err(kind, inputs, &options(-100, f64::NAN), "label_smoothing=NaN");
    }
    // f32_loss: half logits, an f32 loss and dloss, a gradient of the logits' type.
    let f32_loss = [("f32_loss", Attr::Bool(true))];
    assert_eq!(ok(c, &["bf16[4,3]", "i64[4]"], &f32_loss), ["f32[]"]);
    assert_eq!(ok(c, &["f16[4,3]", "i32[4]"], &f32_loss), ["f32[]"]);
    assert_eq!(ok(b, &["f32[]", "bf16[4,3]", "i64[4]"], &f32_loss), ["bf16[4,3]"]);
    err(b, &["bf16[]", "bf16[4,3]", "i64[4]"], &f32_loss, "dloss must be f32[] for logits bf16[4,3], found bf16[]");
    err(b, &["f32[]", "bf16[4,3]", "i64[4]"], &[], "dloss must be bf16[]");
    for kind in [c, b] {
        let inputs: &[&str] = if kind == c { &["f32[4,3]", "i64[4]"] } else { &["f32[]", "f32[4,3]", "i64[4]"] };
        err(kind, inputs, &f32_loss, "f32_loss=true takes f16 or bf16 logits, found f32[4,3]");
    }
    assert_eq!(
        c.def().signature(),
        "cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, f32_loss=false) -> loss"
    );
}

#[test]
fn optimizers() {
    let lr = |x| ("lr", float(x));
    assert_eq!(ok(OpKind::Sgd, &["f32[3]", "f32[3]"], &[lr(0.1)]), ["f32[3]"]);
    assert_eq!(ok(OpKind::Sgd, &["bf16[]", "bf16[]"], &[lr(0.0)]), ["bf16[]"]);
    err(OpKind::Sgd, &["f32[3]", "f16[3]"], &[lr(0.1)], "p and g must have the same type");
    err(OpKind::Sgd, &["f32[3]", "f32[4]"], &[lr(0.1)], "f32[3] and f32[4]");
    err(OpKind::Sgd, &["i32[3]", "i32[3]"], &[lr(0.1)], "p must be a float tensor");
    err(OpKind::Sgd, &["f32[3]", "f32[3]"], &[lr(f64::NAN)], "lr=NaN");
    err(OpKind::Sgd, &["f32[3]", "f32[3]"], &[lr(-1.0)], "lr=-1.0");

    let s = OpKind::SgdMomentum;
    assert_eq!(ok(s, &["f32[3]", "f32[3]", "f32[3]"], &[lr(0.1)]), ["f32[3]", "f32[3]"]);
    err(s, &["f32[3]", "f32[3]", "f32[2]"], &[lr(0.1)], "p and buf");
    err(s, &["f32[3]", "f32[3]", "f32[3]"], &[lr(0.1), ("momentum", float(-0.5))], "momentum");

    for a in [OpKind::Adam, OpKind::Adamw] {
        let ins = ["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[]"];
        assert_eq!(ok(a, &ins, &[]), ["f32[4,4]", "f32[4,4]", "f32[4,4]"]);
        assert_eq!(ok(a, &["f16[2]", "f16[2]", "f16[2]", "f16[2]", "f32[]"], &[]).len(), 3);
        err(a, &["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[1]"], &[], "t (the step count)");
        err(a, &["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,4]", "i64[]"], &[], "i64[]");
        err(a, &["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,3]", "f32[]"], &[], "p and v");
        err(a, &["f32[4,4]", "f32[4,4]", "bf16[4,4]", "f32[4,4]", "f32[]"], &[], "p and m");
        err(a, &ins, &[("beta1", float(1.0))], "beta1=1.0 must be in [0, 1)");
        err(a, &ins, &[("eps", float(0.0))], "eps");
    }
    let ins = ["f32[4]", "f32[4]", "f32[4]", "f32[4]", "f32[]"];
    err(OpKind::Adamw, &ins, &[("weight_decay", float(-0.1))], "weight_decay");
}

#[test]
fn flops() {
    let count = |kind: OpKind, inputs: &[&str], given: &[(&str, Attr)]| {
        let ins: Vec<TensorType> = inputs.iter().map(|s| ty(s)).collect();
        let ins: Vec<&TensorType> = ins.iter().collect();
        let attrs = attrs_for(kind, given);
        let outs = (kind.def().infer)(&ins, &attrs).unwrap();
        (kind.def().flops)(&ins, &outs.iter().collect::<Vec<_>>(), &attrs)
    };
    assert_eq!(count(OpKind::Add, &["f32[4,5]", "f32[5]"], &[]), 20);
    assert_eq!(count(OpKind::Matmul, &["f32[4,8]", "f32[8,5]"], &[]), 2 * 4 * 5 * 8);
    let ta = [("transpose_a", Attr::Bool(true))];
    assert_eq!(count(OpKind::Matmul, &["f32[8,4]", "f32[8,5]"], &ta), 2 * 4 * 5 * 8);
    // 2·N·K·P·Q·C·R·S with P = Q = 16.
    let sp = [("stride", ints(&[2, 2])), ("padding", ints(&[1, 1]))];
    let conv = 2 * 8 * 16 * 16 * 16 * 3 * 3 * 3;
    assert_eq!(count(OpKind::Conv2d, &["f32[8,3,32,32]", "f32[16,3,3,3]"], &sp), conv);
    let dy_x_w = ["f32[8,16,16,16]", "f32[8,3,32,32]", "f32[16,3,3,3]"];
    assert_eq!(count(OpKind::Conv2dBackward, &dy_x_w, &sp), 2 * conv);
    // Groups: 2·N·K·P·Q·(C/groups)·R·S; 4 groups, y [2,8,4,4]. Dilation changes only P, Q.
    let grouped = [("groups", Attr::Int(4))];
    assert_eq!(count(OpKind::Conv2d, &["f32[2,8,6,6]", "f32[8,2,3,3]"], &grouped), 2 * 2 * 8 * 4 * 4 * 2 * 3 * 3);
    let dilated = [("dilation", ints(&[2, 2]))];
    assert_eq!(count(OpKind::Conv2d, &["f32[2,8,6,6]", "f32[8,8,3,3]"], &dilated), 2 * 2 * 8 * 2 * 2 * 8 * 3 * 3);
    // The transpose: 2·N·C·H·W·(K/groups)·R·S, the FLOPs of the conv2d it transposes; the
    // backward twice that.
    let up = [("stride", ints(&[2, 2])), ("groups", Attr::Int(2))];
    let transposed = 2 * 4 * 3 * 3 * 2 * 2 * 2;
    assert_eq!(count(OpKind::ConvTranspose2d, &["f32[1,4,3,3]", "f32[4,2,2,2]"], &up), transposed);
    let down = [("stride", ints(&[2, 2])), ("groups", Attr::Int(2))];
    assert_eq!(count(OpKind::Conv2d, &["f32[1,4,6,6]", "f32[4,2,2,2]"], &down), transposed);
    let dy_x_w = ["f32[1,4,6,6]", "f32[1,4,3,3]", "f32[4,2,2,2]"];
    assert_eq!(count(OpKind::ConvTranspose2dBackward, &dy_x_w, &up), 2 * transposed);
    assert_eq!(count(OpKind::Transpose, &["f32[4,5]"], &[("perm", ints(&[1, 0]))]), 0);
    let pool = [("kernel", ints(&[2, 2])), ("stride", ints(&[2, 2]))];
    assert_eq!(count(OpKind::MaxPool2d, &["f32[1,2,8,8]"], &pool), 32 * 4);
    assert_eq!(count(OpKind::Sgd, &["f32[10]", "f32[10]"], &[("lr", float(0.1))]), 20);
    assert_eq!(count(OpKind::Silu, &["f32[10]"], &[]), 50);
    assert_eq!(count(OpKind::Rsqrt, &["f32[10]"], &[]), 20);
    assert_eq!(count(OpKind::PowScalar, &["f32[10]"], &[("exponent", float(3.0))]), 10);
    assert_eq!(count(OpKind::RmsNorm, &["f32[4,5]", "f32[5]"], &[]), 80);
    assert_eq!(count(OpKind::RmsNormBackward, &["f32[4,5]", "f32[4,5]", "f32[5]"], &[]), 200);
    // Dropout: one multiply per element (the mask's hash is integer work).
    let dropout = [("p", float(0.1)), ("stream", Attr::Int(0))];
    assert_eq!(count(OpKind::Dropout, &["f32[4,5]", "i64[]"], &dropout), 20);
    assert_eq!(count(OpKind::DropoutBackward, &["f16[4,5]", "i64[]"], &dropout), 20);
    // Attention: 2·(E + Ev) per scored pair; causal scores the pairs j <= i only.
    let scale = [("scale", float(0.25))];
    let causal = [("causal", Attr::Bool(true)), ("scale", float(0.25))];
    let q_k_v = ["f32[2,4,6,16]", "f32[2,2,6,16]", "f32[2,2,6,8]"];
    assert_eq!(count(OpKind::Attention, &q_k_v, &scale), 2 * 4 * 6 * 6 * 2 * (16 + 8));
    assert_eq!(count(OpKind::Attention, &q_k_v, &causal), 2 * 4 * 21 * 2 * (16 + 8));
    // T = 5 queries over S = 3 keys: rows 0, 1, 2 see 1, 2, 3 keys, rows 3 and 4 all 3.
    let long_q = ["f32[1,5,4]", "f32[1,3,4]", "f32[1,3,4]"];
    assert_eq!(count(OpKind::Attention, &long_q, &causal), 12 * 2 * 8);
    let short_q = ["f32[1,2,4]", "f32[1,7,4]", "f32[1,7,4]"];
    assert_eq!(count(OpKind::Attention, &short_q, &causal), 3 * 2 * 8);
    // The backward: 2·(3E + 2Ev) per pair, 2.5 times the forward when E = Ev.
    let ins = ["f32[2,4,6,8]", q_k_v[0], q_k_v[1], q_k_v[2], "f32[2,4,6,8]", "f32[2,4,6]"];
    assert_eq!(count(OpKind::AttentionBackward, &ins, &scale), 2 * 4 * 6 * 6 * 2 * (3 * 16 + 2 * 8));
    let square = ["f32[1,2,4,8]"; 3];
    let ins = ["f32[1,2,4,8]", square[0], square[1], square[2], "f32[1,2,4,8]", "f32[1,2,4]"];
    assert_eq!(2 * count(OpKind::AttentionBackward, &ins, &causal), 5 * count(OpKind::Attention, &square, &causal));
    // Adaptive pooling: N·C·(bin lengths along H)·(along W); 5 -> 3 is 7, 6 -> 2 is 6.
    let size = |oh, ow| [("output_size", ints(&[oh, ow]))];
    assert_eq!(count(OpKind::AdaptiveAvgPool2d, &["f32[2,3,5,6]"], &size(3, 2)), 2 * 3 * 7 * 6);
    let back = [("shape", ints(&[2, 3, 5, 6])), ("output_size", ints(&[3, 2]))];
    assert_eq!(count(OpKind::AdaptiveAvgPool2dBackward, &["f32[2,3,3,2]"], &back), 2 * 3 * 7 * 6);
    assert_eq!(count(OpKind::UpsampleNearest2d, &["f32[2,3,5,6]"], &size(10, 12)), 0);
    let back = [("shape", ints(&[2, 3, 5, 6])), ("output_size", ints(&[10, 12]))];
    assert_eq!(count(OpKind::UpsampleNearest2dBackward, &["f32[2,3,10,12]"], &back), 2 * 3 * 10 * 12);
    assert_eq!(count(OpKind::BceWithLogits, &["f32[4,5]", "f32[4,5]"], &[]), 160);
    assert_eq!(count(OpKind::Where, &["bool[4,1]", "f32[5]", "f32[]"], &[]), 20);
    // Saturates instead of overflowing.
    let big = ["f16[1048576,1073741824]", "f16[1073741824,1048576]"];
    assert_eq!(count(OpKind::Matmul, &big, &[]), u64::MAX);
}

#[test]
fn dropout_and_its_backward() {
    let given = |p: f64, stream: i64| [("p", float(p)), ("stream", Attr::Int(stream))];
    for kind in [OpKind::Dropout, OpKind::DropoutBackward] {
        let input = if kind == OpKind::Dropout { "x" } else { "dy" };
        assert_eq!(ok(kind, &["f32[4,5]", "i64[]"], &given(0.1, 0)), ["f32[4,5]"]);
        assert_eq!(ok(kind, &["bf16[]", "i64[]"], &given(0.0, 7)), ["bf16[]"]);
        assert_eq!(ok(kind, &["f16[0,3]", "i64[]"], &given(0.999, i64::MAX)), ["f16[0,3]"]);
        err(kind, &["i32[4]", "i64[]"], &given(0.1, 0), &format!("{input} must be a float tensor, found i32[4]"));
        err(kind, &["f32[4]", "i64[1]"], &given(0.1, 0), "seed must be an i64[] scalar, found i64[1]");
        err(kind, &["f32[4]", "i32[]"], &given(0.1, 0), "seed must be an i64[] scalar, found i32[]");
        err(kind, &["f32[4]", "f32[]"], &given(0.1, 0), "found f32[]");
        for (p, shown) in [(1.0, "1.0"), (1.5, "1.5"), (-0.1, "-0.1"), (f64::NAN, "NaN"), (f64::INFINITY, "inf")] {
            err(kind, &["f32[4]", "i64[]"], &given(p, 0), &format!("p={shown} must be a probability in [0, 1)"));
        }
        err(kind, &["f32[4]", "i64[]"], &given(0.5, -1), "stream=-1 must be at least 0");
        assert_eq!(kind.def().inplace, [(0, 0)], "{kind}: the output over input 0 only, never over the seed");
    }
    assert_eq!(OpKind::Dropout.def().class, OpClass::Forward);
    assert_eq!(OpKind::DropoutBackward.def().class, OpClass::Backward);
}

#[test]
fn resampling_output_sizes() {
    let size = |oh, ow| [("output_size", ints(&[oh, ow]))];
    for kind in [OpKind::AdaptiveAvgPool2d, OpKind::UpsampleNearest2d] {
        assert_eq!(ok(kind, &["f32[2,3,5,7]"], &size(3, 1)), ["f32[2,3,3,1]"]);
        assert_eq!(ok(kind, &["bf16[1,2,2,2]"], &size(8, 6)), ["bf16[1,2,8,6]"]);
        assert_eq!(ok(kind, &["f16[0,2,4,4]"], &size(2, 2)), ["f16[0,2,2,2]"]);
        err(kind, &["f32[2,3,5,7]"], &size(0, 2), "output_size=[0, 2]: each entry must be at least 1");
        err(kind, &["f32[2,3,5,7]"], &[("output_size", ints(&[3]))], "must have 2 entries");
        err(kind, &["f32[2,0,5,7]"], &size(1, 1), "C, H and W of at least 1");
        err(kind, &["f32[2,3,0,7]"], &size(1, 1), "C, H and W of at least 1");
        err(kind, &["f32[3,5,7]"], &size(1, 1), "[N,C,H,W]");
        err(kind, &["i32[2,3,5,7]"], &size(1, 1), "float");
        err(kind, &["f32[1,1,1,1]"], &size(i64::MAX, i64::MAX), "2^64");
    }
    let shape = |s: &[i64], oh, ow| [("shape", ints(s)), ("output_size", ints(&[oh, ow]))];
    for kind in [OpKind::AdaptiveAvgPool2dBackward, OpKind::UpsampleNearest2dBackward] {
        assert_eq!(ok(kind, &["f32[2,3,3,1]"], &shape(&[2, 3, 5, 7], 3, 1)), ["f32[2,3,5,7]"]);
        assert_eq!(ok(kind, &["f16[1,1,4,4]"], &shape(&[1, 1, 2, 2], 4, 4)), ["f16[1,1,2,2]"]);
        err(kind, &["f32[2,3,3,2]"], &shape(&[2, 3, 5, 7], 3, 1), "dy must be the forward's output f32[2,3,3,1]");
        err(kind, &["f32[2,3,3,1]"], &shape(&[2, 3, 5], 3, 1), "shape=[2, 3, 5]: x must be [N,C,H,W]");
        err(kind, &["f32[2,3,3,1]"], &shape(&[2, 3, -5, 7], 3, 1), "negative dimension");
        err(kind, &["i64[2,3,3,1]"], &shape(&[2, 3, 5, 7], 3, 1), "float");
    }
}

#[test]
fn bce_with_logits() {
    let l = OpKind::BceWithLogits;
    assert_eq!(ok(l, &["f32[4,1,8,8]", "f32[4,1,8,8]"], &[]), ["f32[]"]);
    assert_eq!(ok(l, &["bf16[]", "bf16[]"], &[]), ["bf16[]"]);
    assert_eq!(ok(l, &["f16[0,3]", "f16[0,3]"], &[]), ["f16[]"]);
    err(l, &["f32[4,3]", "f32[3]"], &[], "logits and targets must have the same type, found f32[4,3] and f32[3]");
    err(l, &["f32[4,3]", "f16[4,3]"], &[], "same type");
    err(l, &["i32[4]", "i32[4]"], &[], "logits must be a float tensor");
    let b = OpKind::BceWithLogitsBackward;
    assert_eq!(ok(b, &["f32[]", "f32[4,3]", "f32[4,3]"], &[]), ["f32[4,3]"]);
    err(b, &["f32[1]", "f32[4,3]", "f32[4,3]"], &[], "dloss must be f32[] for logits f32[4,3], found f32[1]");
    err(b, &["f16[]", "f32[4,3]", "f32[4,3]"], &[], "dloss must be f32[]");
    err(b, &["f32[]", "f32[4,3]", "f32[4,1]"], &[], "same type");
    assert_eq!(b.def().inplace, [(0, 1), (0, 2)]);
}

#[test]
fn where_and_masked_fill_broadcast() {
    let w = OpKind::Where;
    assert_eq!(ok(w, &["bool[4,1]", "f32[4,5]", "f32[]"], &[]), ["f32[4,5]"]);
    assert_eq!(ok(w, &["bool[2,1,3]", "f16[4,1]", "f16[3]"], &[]), ["f16[2,4,3]"]);
    assert_eq!(ok(w, &["bool[]", "bf16[]", "bf16[]"], &[]), ["bf16[]"]);
    err(w, &["f32[4]", "f32[4]", "f32[4]"], &[], "cond must be a bool tensor, found f32[4]");
    err(w, &["bool[4]", "f32[4]", "f16[4]"], &[], "dtypes differ");
    // Any dtype is selected: integer labels and positions, bool masks.
    assert_eq!(ok(w, &["bool[4]", "i64[4]", "i64[]"], &[]), ["i64[4]"]);
    assert_eq!(ok(w, &["bool[4]", "bool[4]", "bool[4]"], &[]), ["bool[4]"]);
    err(w, &["bool[3]", "f32[4]", "f32[4]"], &[], "do not broadcast");
    err(w, &["bool[4]", "f32[4]", "f32[2,3]"], &[], "do not broadcast");
    let m = OpKind::MaskedFill;
    let value = |x| [("value", float(x))];
    assert_eq!(ok(m, &["f32[2,4,4]", "bool[4,4]"], &value(f64::NEG_INFINITY)), ["f32[2,4,4]"]);
    assert_eq!(ok(m, &["f16[2,3]", "bool[2,1]"], &value(0.0)), ["f16[2,3]"]);
    assert_eq!(ok(m, &["f32[2,3]", "bool[]"], &value(1.5)), ["f32[2,3]"]);
    err(m, &["f32[3]", "bool[2,3]"], &value(0.0), "mask bool[2,3] must broadcast to x's shape [3]");
    err(m, &["f32[3]", "bool[2]"], &value(0.0), "must broadcast");
    err(m, &["f32[3]", "i32[3]"], &value(0.0), "mask must be a bool tensor");
    assert_eq!(ok(m, &["i64[3]", "bool[3]"], &value(-100.0)), ["i64[3]"]);
    err(m, &["i32[3]", "bool[3]"], &value(0.5), "not a value of x's dtype");
    err(m, &["bool[3]", "bool[3]"], &value(2.0), "not a value of x's dtype");
    err(m, &["f32[3]", "bool[3]"], &value(f64::NAN), "NaN");
    assert_eq!(w.def().inplace, [(0, 1), (0, 2)]);
    assert_eq!(m.def().inplace, [(0, 0)]);
}

/// PyTorch's bins for 5 → 3: [0, 2), [1, 4), [3, 5), 7 elements in all; the closed form
/// against the bins counted one by one.
#[test]
fn adaptive_bins_add_up() {
    assert_eq!(bin_lengths(5, 3), 7);
    assert_eq!(bin_lengths(3, 5), 7);
    assert_eq!(bin_lengths(8, 4), 8);
    assert_eq!(bin_lengths(7, 1), 7);
    for size in 1..40u64 {
        for out in 1..40u64 {
            let counted: u64 = (0..out).map(|i| ((i + 1) * size).div_ceil(out) - i * size / out).sum();
            assert_eq!(bin_lengths(size, out), counted, "{size} -> {out}");
        }
    }
    assert_eq!(bin_lengths(u64::MAX, u64::MAX), u64::MAX);
    assert_eq!(bin_lengths(u64::MAX, 2), u64::MAX);
    assert_eq!(bin_lengths(0, 3), 0);
    assert_eq!(bin_lengths(3, 0), 0);
}

/// Attribute values for the no-panic sweep, sensible and nonsense alike.
fn sweep_values(kind: AttrKind) -> Vec<Attr> {
    match kind {
        AttrKind::Int => [-5, -1, 0, 1, 3, i64::MAX, i64::MIN].map(Attr::Int).to_vec(),
        AttrKind::Float => {
            [0.0, -1.0, 1e-5, 0.5, 1.0, 2.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN].map(Attr::Float).to_vec()
        }
        AttrKind::Bool => vec![Attr::Bool(false), Attr::Bool(true)],
        AttrKind::Ints => [
            &[][..],
            &[0],
            &[-1],
            &[1, 1],
            &[2, 2],
            &[0, 1],
            &[1, 0],
            &[-1, 0],
            &[3, 3],
            &[0, 1, 2, 3],
            &[i64::MAX, i64::MAX],
            &[i64::MIN, 1],
            &[4294967296, 4294967296, 4294967296],
        ]
        .map(ints)
        .to_vec(),
        AttrKind::DType => DType::ALL.map(Attr::DType).to_vec(),
        AttrKind::Str => ["", "\"\\\n", "x", "aten::cumsum"].map(|s| Attr::Str(s.to_string())).to_vec(),
    }
}

/// Every rule, on odd inputs and odd attribute values: never a panic, and accepted
/// outputs always have a byte size (so FLOPs and sizes downstream are safe).
#[test]
fn no_rule_panics() {
    let types: Vec<TensorType> = [
        "f32[]", "f32[0]", "f32[2,3]", "i32[2]", "bool[2,3]", "f32[1,3,4,4]", "f16[3,3]", "i64[0,5]", HUGE,
        "f32[18446744073709551615]", "f32[1,1,0,0]",
    ]
    .iter()
    .map(|s| ty(s))
    .collect();
    let mut accepted = 0;
    let mut rejected = 0;
    for row in OPS {
        let base = Attrs(
            row.attrs
                .iter()
                .map(|s| {
                    let required = || sweep_values(s.kind).swap_remove(3);
                    (s.name, s.default.map_or_else(required, AttrDefault::to_attr))
                })
                .collect(),
        );
        let mut variants = vec![base.clone()];
        for spec in row.attrs {
            for value in sweep_values(spec.kind) {
                variants.push(base.clone().with(spec.name, value));
            }
        }
        // Inputs: all pairs for small arities, else all-equal with one position changed.
        let n = row.inputs.len();
        let mut combos: Vec<Vec<&TensorType>> = Vec::new();
        if n <= 2 {
            combos.push(vec![]);
            for _ in 0..n {
                let mut longer = Vec::new();
                for c in &combos {
                    for t in &types {
                        longer.push([c.clone(), vec![t]].concat());
                    }
                }
                combos = longer;
            }
        } else {
            for a in &types {
                for b in &types {
                    for pos in 0..n {
                        let mut c = vec![a; n];
                        c[pos] = b;
                        combos.push(c);
                    }
                }
            }
        }
        for inputs in &combos {
            for attrs in &variants {
                match (row.infer)(inputs, attrs) {
                    Ok(outs) => {
                        accepted += 1;
                        assert_eq!(outs.len(), row.outputs.len(), "{}", row.name);
                        assert!(outs.iter().all(|t| t.bytes().is_some()), "{}: {outs:?}", row.name);
                        (row.flops)(inputs, &outs.iter().collect::<Vec<_>>(), attrs);
                    }
                    Err(e) => {
                        rejected += 1;
                        assert!(!e.is_empty() && !e.contains('\n'), "{}: {e:?}", row.name);
                    }
                }
            }
        }
    }
    assert!(accepted > 1000 && rejected > 1000, "{accepted} accepted, {rejected} rejected");
}

/// `fused_norm`: the body over the inputs before the norm's parameters, the norm's own rule
/// over its value; FLOPs of both; in place over a body input only; what is wrong is said.
#[test]
fn fused_norm_types_its_value_and_its_norm() {
    let given = |body: &str, norm: &str, eps: f64| {
        vec![("body", Attr::Str(body.to_string())), ("norm", Attr::Str(norm.to_string())), ("eps", float(eps))]
    };
    let residual = "t0: f32 = add(x0, x1); t1: f32 = add(x2, t0)";
    let layer = given(residual, "layer", 1e-5);
    assert_eq!(ok(OpKind::FusedNorm, &["f32[4,8]", "f32[8]", "f32[4,8]", "f32[8]", "f32[8]"], &layer), ["f32[4,8]", "f32[4,8]"]);
    let cast = given("t0: bf16 = cast(x0, to=bf16)", "rms", 1e-6);
    assert_eq!(ok(OpKind::FusedNorm, &["f32[2,3,8]", "bf16[8]"], &cast), ["bf16[2,3,8]", "bf16[2,3,8]"]);
    // FLOPs: the body's (2 adds of 32 elements) and layer_norm's (8 per element).
    let ins = ["f32[4,8]", "f32[8]", "f32[4,8]", "f32[8]", "f32[8]"].map(ty);
    let ins: Vec<&TensorType> = ins.iter().collect();
    let attrs = attrs_for(OpKind::FusedNorm, &layer);
    let outs = (OpKind::FusedNorm.def().infer)(&ins, &attrs).unwrap();
    assert_eq!((OpKind::FusedNorm.def().flops)(&ins, &outs.iter().collect::<Vec<_>>(), &attrs), 2 * 32 + 8 * 32);
    // The value may be written over the body's inputs, never over gamma or beta.
    assert_eq!(OpKind::FusedNorm.def().inplace_pairs(5, &attrs).as_ref(), [(0, 0), (0, 1), (0, 2)]);
    // `memplan run` seeds gamma and beta as the norms do (ones, zeros), the body's inputs not.
    let seeds: Vec<Option<Init>> = (0..5).map(|k| OpKind::FusedNorm.def().init_of(k, 5, &attrs)).collect();
    assert_eq!(seeds, [None, None, None, Some(Init::Ones), Some(Init::Zeros)]);
    let rms = attrs_for(OpKind::FusedNorm, &cast);
    assert_eq!(OpKind::FusedNorm.def().init_of(1, 2, &rms), Some(Init::Ones));
    assert_eq!(OpKind::FusedNorm.def().init_of(0, 2, &rms), None);
    assert_eq!(OpKind::LayerNorm.def().init_of(2, 3, &Attrs::default()), Some(Init::Zeros));
    // Wrong parameters, norms, counts and bodies are refused.
    err(OpKind::FusedNorm, &["f32[4,8]", "f32[8]", "f32[4,8]", "f32[4]", "f32[8]"], &layer, "gamma must be f32[8]");
    err(OpKind::FusedNorm, &["f32[4,8]", "f32[8]"], &given("t0: f32 = relu(x0)", "batch", 1e-5), "is not a norm (layer or rms)");
    err(OpKind::FusedNorm, &["f32[8]", "f32[8]"], &given("t0: f32 = relu(x0)", "layer", 1e-5), "takes the body's inputs, then 2");
    err(OpKind::FusedNorm, &["f32[4,8]", "f32[8]"], &given("t0: f32 = relu(x0)", "rms", 0.0), "eps");
    err(OpKind::FusedNorm, &["f32[4,8]", "f32[1]"], &given("t0: f32 = sum(x0, axes=[1], keepdim=true)", "rms", 1e-6), "may not end with a reduction");
    err(OpKind::FusedNorm, &["f32[4,8]", "f32[8]"], &given("t0: f32 = add(x0, x1)", "rms", 1e-6), "reads x1, but the op has 1 inputs");
}

/// `fused`: bodies decode, print back to the same text, type each inner op by its own row,
/// and every malformed body is refused with a message saying what is wrong.
#[test]
fn fused_bodies_type_check_and_round_trip() {
    use crate::ir::ops::FusedBody;
    let body = |text: &str| vec![("body", Attr::Str(text.to_string()))];
    let text = "t0: f32 = add(x0, x1); t1: bf16 = cast(t0, to=bf16); t2: bool = compare_scalar(t1, value=0.5, op=gt); t3: bf16 = masked_fill(t1, t2, value=-inf)";
    assert_eq!(ok(OpKind::Fused, &["f32[4,8]", "f32[8]"], &body(text)), ["bf16[4,8]"]);
    assert_eq!(FusedBody::parse(text).unwrap().to_string(), text);
    // Defaults are left out of the canonical text; extra spaces and a last `;` are fine.
    let loose = FusedBody::parse(" t0 :f32= gelu( x0 , approximate=true ) ; ").unwrap();
    assert_eq!(loose.to_string(), "t0: f32 = gelu(x0)");
    // Inner shapes broadcast as the inner ops' rules say; the output is the last value.
    assert_eq!(ok(OpKind::Fused, &["f32[3,1]", "f32[1,5]"], &body("t0: f32 = mul(x0, x1); t1: f32 = relu(t0)")), ["f32[3,5]"]);
    // FLOPs: the inner ops'.
    let ins = [ty("f32[4,8]"), ty("f32[8]")];
    let ins: Vec<&TensorType> = ins.iter().collect();
    let attrs = attrs_for(OpKind::Fused, &body("t0: f32 = add(x0, x1); t1: f32 = gelu(t0)"));
    let outs = (OpKind::Fused.def().infer)(&ins, &attrs).unwrap();
    assert_eq!((OpKind::Fused.def().flops)(&ins, &outs.iter().collect::<Vec<_>>(), &attrs), 32 + 8 * 32);
    // In place over any input (the passes check dtype and size).
    assert_eq!(OpKind::Fused.def().inplace_pairs(3, &attrs).as_ref(), [(0, 0), (0, 1), (0, 2)]);
    assert!(OpKind::Fused.def().inplace_pairs(0, &attrs).is_empty());

    // A body may end with a reduction that reduces: its inner values are its input, an
    // element at a time. Then the op writes over no input (each is read at many outputs).
    let reduced = "t0: f32 = mul(x0, x1); t1: f32 = sum(t0, axes=[0])";
    assert_eq!(ok(OpKind::Fused, &["f32[6,4]", "f32[4]"], &body(reduced)), ["f32[4]"]);
    assert!(FusedBody::parse(reduced).unwrap().reduces());
    assert!(!FusedBody::parse(text).unwrap().reduces());
    let norm = "t0: f32 = pow_scalar(x0, exponent=2.0); t1: f32 = mean(t0, axes=[-1], keepdim=true);";
    assert_eq!(ok(OpKind::Fused, &["f32[2,3,8]"], &body(norm)), ["f32[2,3,1]"]);
    for reducing in [reduced, norm] {
        let attrs = attrs_for(OpKind::Fused, &body(reducing));
        assert!(OpKind::Fused.def().inplace_pairs(2, &attrs).is_empty(), "{reducing}");
    }
    let r = ["f32[6,4]", "f32[4]"];
    err(OpKind::Fused, &r, &body("t0: f32 = sum(x0, axes=[0]); t1: f32 = add(t0, x1)"), "a reduction can only be the last op");
    err(OpKind::Fused, &["f32[1,4]", "f32[4]"], &body("t0: f32 = mul(x0, x1); t1: f32 = sum(t0, axes=[0], keepdim=true)"), "reduces nothing");
    err(OpKind::Fused, &r, &body("t0: f32 = mul(x0, x1); t1: f32 = sum(t0, axes=[2])"), "t1 = sum:");

    let f = ["f32[4]", "f32[4]"];
    err(OpKind::Fused, &f, &body("t0: f32 = matmul(x0, x1)"), "neither an elementwise op nor a reduction");
    err(OpKind::Fused, &f, &body("t0: f32 = frob(x0, x1)"), "`frob` is not an op");
    err(OpKind::Fused, &f, &body("t0: f32 = add(x0, x2)"), "reads x2, but the op has 2 inputs");
    err(OpKind::Fused, &f, &body("t0: f32 = relu(x0)"), "input x1 is never read");
    err(OpKind::Fused, &f, &body("t0: f32 = relu(x0); t1: f32 = add(x0, x1)"), "t0 is never read");
    err(OpKind::Fused, &f, &body("t0: bf16 = add(x0, x1)"), "t0 is written bf16, but add gives f32");
    err(OpKind::Fused, &f, &body("t0: f32 = add(x0, t0)"), "t0 is read before it is defined");
    err(OpKind::Fused, &f, &body("t1: f32 = add(x0, x1)"), "expected the value t0 here");
    err(OpKind::Fused, &f, &body("t0: f64 = add(x0, x1)"), "`f64` is not a dtype");
    err(OpKind::Fused, &f, &body("t0: f32 = add(x0)"), "add takes 2 operands, found 1");
    err(OpKind::Fused, &f, &body("t0: f32 = add(x0, x1, value=1.0)"), "add has no attribute value");
    err(OpKind::Fused, &f, &body("t0: f32 = add_scalar(x0, value=one); t1: f32 = add(t0, x1)"), "value: `one` is not a number");
    err(OpKind::Fused, &f, &body("t0: f32 = add(x0, x1"), "expected `)` at the end");
    err(OpKind::Fused, &f, &body(""), "expected `tN: dtype = op(...)`");
    err(OpKind::Fused, &f, &body("t0: f32 = add(x0, x1);; t1: f32 = relu(t0)"), "body item 1 (``): expected `tN: dtype = op(...)`");
    err(OpKind::Fused, &["f32[4]", "f32[5]"], &body("t0: f32 = add(x0, x1)"), "do not broadcast");
    let long: Vec<String> = (0..17).map(|j| if j == 0 { "t0: f32 = add(x0, x1)".to_string() } else { format!("t{j}: f32 = relu(t{})", j - 1) }).collect();
    err(OpKind::Fused, &f, &body(&long.join("; ")), "1 to 16 ops, found 17");
    let nine = ["f32[4]"; 9];
    err(OpKind::Fused, &nine, &body("t0: f32 = relu(x0)"), "at most 8 inputs, found 9");
}
