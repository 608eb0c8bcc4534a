//! What every op computes: one function per op, grouped by family, dispatched by [`eval`].
//!
//! Kernels work on [`Dense`] tensors: row-major `f64` data and a shape. Everything is
//! computed in `f64` with plain loops in a fixed order (no threads, no hashing), so the same
//! inputs always give bit-identical outputs; every reduction adds its terms in row-major
//! order of the reduced elements.
//!
//! - `elementwise.rs`: add/sub/mul/div (numpy broadcasting), add_scalar/mul_scalar,
//!   pow_scalar/neg/exp/log/sqrt/rsqrt, relu/gelu/silu/sigmoid/tanh/hardswish and their
//!   backward ops, causal_mask, where, masked_fill, cast, fill, contiguous;
//! - `shape.rs`: reshape, transpose, expand (as dense copies), sum, mean;
//! - `linalg.rs`: matmul with transposes and broadcast batch dimensions;
//! - `attention.rs`: fused attention and its backward, one query row at a time;
//! - `nn.rs`: softmax, layer_norm, rms_norm, batch_norm, max_pool2d, embedding,
//!   cross_entropy, bce_with_logits, and their backward ops;
//! - `conv.rs`: conv2d and conv_transpose2d and their backward ops;
//! - `resample.rs`: adaptive_avg_pool2d and upsample_nearest2d (NCHW, PyTorch's index
//!   rules) and their backward ops;
//! - `optim.rs`: sgd, sgd_momentum, adam, adamw;
//! - `dropout.rs`: dropout and its backward, with the mask's hash ([`dropout_uniform`]).
//!
//! [`eval`] first re-checks the call against the op's type rule (input shapes, attribute
//! values, the expected output shapes), so a kernel may rely on every shape the rule
//! guarantees; a call that does not fit is a [`ExecError::BadPlan`], never a panic.
//! Integer and bool outputs are finally converted like Rust's `as` from `f64` (truncation
//! toward zero, saturation at the type's bounds, NaN to 0) and bools to 0/1, so they always
//! hold exact values of their dtype.

mod attention;
mod conv;
mod dropout;
mod elementwise;
mod fused;
mod linalg;
mod nn;
mod optim;
mod resample;
mod shape;

pub use dropout::dropout_uniform;

use crate::exec::{Dense, ExecError};
use crate::ir::ops::{AdamAttrs, Attr, AttentionAttrs, Attrs, Comparison, Conv3dAttrs, ConvAttrs, FusedBody, GridSampleAttrs, CrossEntropyAttrs, MatmulAttrs, Norm, OpKind, PoolAttrs};
use crate::ir::types::{DType, TensorType};

/// Computes `kind` on dense inputs. `outputs` are the output types (shapes and dtypes) the
/// op's type rule gives; results must have exactly those shapes. Integer and bool outputs
/// must hold exact integers (0/1 for bool).
pub fn eval(kind: OpKind, attrs: &Attrs, inputs: &[Dense], outputs: &[TensorType]) -> Result<Vec<Dense>, ExecError> {
    check_call(kind, attrs, inputs, outputs)?;
    let shapes: Vec<Vec<usize>> = outputs.iter().map(|t| usize_dims(&t.shape.0)).collect();
    let x = inputs;
    let mut results = match kind {
        OpKind::Add => vec![elementwise::binary(&x[0], &x[1], &shapes[0], |a, b| a + b)],
        OpKind::Sub => vec![elementwise::binary(&x[0], &x[1], &shapes[0], |a, b| a - b)],
        OpKind::Mul => vec![elementwise::binary(&x[0], &x[1], &shapes[0], |a, b| a * b)],
        OpKind::Div => vec![elementwise::binary(&x[0], &x[1], &shapes[0], |a, b| a / b)],
        OpKind::AddScalar => {
            let value = attrs.float("value");
            vec![elementwise::unary(&x[0], |a| a + value)]
        }
        OpKind::MulScalar => {
            let value = attrs.float("value");
            vec![elementwise::unary(&x[0], |a| a * value)]
        }
        OpKind::PowScalar => {
            let exponent = attrs.float("exponent");
            vec![elementwise::unary(&x[0], |a| a.powf(exponent))]
        }
        OpKind::Neg => vec![elementwise::unary(&x[0], |a| -a)],
        OpKind::Sin => vec![elementwise::unary(&x[0], f64::sin)],
        OpKind::Cos => vec![elementwise::unary(&x[0], f64::cos)],
        OpKind::Erf => vec![elementwise::unary(&x[0], libm::erf)],
        OpKind::ScatterAdd => vec![nn::scatter_add(&x[0], &x[1], &x[2], attrs.int("axis"))?],
        OpKind::Exp => vec![elementwise::unary(&x[0], f64::exp)],
        OpKind::Log => vec![elementwise::unary(&x[0], f64::ln)],
        OpKind::Sqrt => vec![elementwise::unary(&x[0], f64::sqrt)],
        OpKind::Rsqrt => vec![elementwise::unary(&x[0], |a| 1.0 / a.sqrt())],
        OpKind::Relu => vec![elementwise::unary(&x[0], elementwise::relu)],
        OpKind::ReluBackward => vec![elementwise::relu_backward(&x[0], &x[1])],
        OpKind::Gelu if attrs.bool("approximate") => vec![elementwise::unary(&x[0], elementwise::gelu)],
        OpKind::Gelu => vec![elementwise::unary(&x[0], elementwise::gelu_exact)],
        OpKind::GeluBackward if attrs.bool("approximate") => vec![elementwise::gelu_backward(&x[0], &x[1])],
        OpKind::GeluBackward => vec![elementwise::gelu_exact_backward(&x[0], &x[1])],
        OpKind::Silu => vec![elementwise::unary(&x[0], elementwise::silu)],
        OpKind::SiluBackward => vec![elementwise::silu_backward(&x[0], &x[1])],
        OpKind::Sigmoid => vec![elementwise::unary(&x[0], elementwise::sigmoid)],
        OpKind::SigmoidBackward => vec![elementwise::sigmoid_backward(&x[0], &x[1])],
        OpKind::Tanh => vec![elementwise::unary(&x[0], f64::tanh)],
        OpKind::TanhBackward => vec![elementwise::tanh_backward(&x[0], &x[1])],
        OpKind::Hardswish => vec![elementwise::unary(&x[0], elementwise::hardswish)],
        OpKind::HardswishBackward => vec![elementwise::hardswish_backward(&x[0], &x[1])],
        OpKind::Hardsigmoid => vec![elementwise::unary(&x[0], elementwise::hardsigmoid)],
        OpKind::HardsigmoidBackward => vec![elementwise::hardsigmoid_backward(&x[0], &x[1])],
        OpKind::Softmax => vec![nn::softmax(&x[0], attrs.int("axis"))],
        OpKind::Cumsum => vec![nn::cumsum(&x[0], attrs.int("axis"), attrs.bool("reverse"))],
        OpKind::SoftmaxBackward => vec![nn::softmax_backward(&x[0], &x[1], attrs.int("axis"))],
        OpKind::CausalMask => vec![elementwise::causal_mask(&x[0], attrs.float("value"))],
        OpKind::Matmul => {
            vec![linalg::matmul(&x[0], &x[1], MatmulAttrs::of(attrs), &shapes[0])]
        }
        OpKind::Attention => attention::attention(&x[0], &x[1], &x[2], None, None, &AttentionAttrs::of(attrs)),
        OpKind::MaskedAttention => attention::attention(&x[0], &x[1], &x[2], Some(&x[3]), None, &AttentionAttrs::of(attrs)),
        OpKind::DropoutAttention => {
            attention::attention(&x[0], &x[1], &x[2], Some(&x[3]), Some(&x[4]), &AttentionAttrs::of(attrs))
        }
        OpKind::AttentionBackward => {
            let saved =
                attention::Saved { dout: &x[0], q: &x[1], k: &x[2], v: &x[3], mask: None, seed: None, out: &x[4], lse: &x[5] };
            attention::attention_backward(&saved, &AttentionAttrs::of(attrs))
        }
        OpKind::MaskedAttentionBackward => attention::attention_backward(&masked_saved(x, None), &AttentionAttrs::of(attrs)),
        OpKind::AttentionBiasBackward => {
            vec![attention::attention_bias_backward(&masked_saved(x, None), &AttentionAttrs::of(attrs))]
        }
        OpKind::DropoutAttentionBackward => {
            attention::attention_backward(&masked_saved(x, Some(&x[5])), &AttentionAttrs::of(attrs))
        }
        OpKind::DropoutAttentionBiasBackward => {
            vec![attention::attention_bias_backward(&masked_saved(x, Some(&x[5])), &AttentionAttrs::of(attrs))]
        }
        OpKind::Sum => vec![shape::sum(&x[0], attrs.ints("axes"), &shapes[0])],
        OpKind::Mean => vec![shape::mean(&x[0], attrs.ints("axes"), &shapes[0])],
        OpKind::Argmax => vec![shape::argmax(&x[0], attrs.int("axis"), &shapes[0])],
        OpKind::Reshape => vec![Dense::new(shapes[0].clone(), x[0].data.clone())],
        OpKind::Detach => vec![x[0].clone()],
        OpKind::Transpose => vec![shape::transpose(&x[0], attrs.ints("perm"))],
        OpKind::Expand => vec![shape::expand(&x[0], &shapes[0])],
        OpKind::Contiguous => vec![x[0].clone()],
        // The dtype conversion itself is `to_dtype` below, as for every output.
        OpKind::Cast => vec![x[0].clone()],
        OpKind::Fill => vec![elementwise::fill(&shapes[0], attrs.float("value"), attrs.float("step"))],
        OpKind::Embedding => vec![nn::embedding(&x[0], &x[1])?],
        OpKind::EmbeddingBackward => vec![nn::embedding_backward(&x[0], &x[1], &shapes[0])?],
        OpKind::EmbeddingBag => vec![nn::embedding_bag(&x[0], &x[1], &x[2], attrs.str("mode") == "mean")?],
        OpKind::EmbeddingBagBackward => {
            vec![nn::embedding_bag_backward(&x[0], &x[1], &x[2], &shapes[0], attrs.str("mode") == "mean")?]
        }
        OpKind::Gather => vec![nn::gather(&x[0], &x[1], attrs.int("axis"))?],
        OpKind::Topk => nn::topk(&x[0], attrs.int("k") as usize, attrs.int("axis"), attrs.bool("largest")).to_vec(),
        OpKind::GatherBackward => vec![nn::gather_backward(&x[0], &x[1], &shapes[0], attrs.int("axis"))?],
        OpKind::LayerNorm => vec![nn::layer_norm(&x[0], &x[1], &x[2], attrs.float("eps"))],
        OpKind::LayerNormBackward => nn::layer_norm_backward(&x[0], &x[1], &x[2], attrs.float("eps")),
        OpKind::RmsNorm => vec![nn::rms_norm(&x[0], &x[1], attrs.float("eps"))],
        OpKind::RmsNormBackward => nn::rms_norm_backward(&x[0], &x[1], &x[2], attrs.float("eps")),
        OpKind::BatchNorm => vec![nn::batch_norm(&x[0], &x[1], &x[2], attrs.float("eps"))],
        OpKind::BatchNormBackward => nn::batch_norm_backward(&x[0], &x[1], &x[2], attrs.float("eps")),
        OpKind::BatchNormStats => nn::batch_norm_stats(&x[0], attrs.int("correction") as usize),
        OpKind::Conv2d => vec![conv::conv2d(&x[0], &x[1], &ConvAttrs::of(attrs), &shapes[0])],
        OpKind::Conv2dBackward => conv::conv2d_backward(&x[0], &x[1], &x[2], &ConvAttrs::of(attrs)),
        OpKind::Conv3d => vec![conv::conv3d(&x[0], &x[1], &Conv3dAttrs::of(attrs), &shapes[0])],
        OpKind::Conv3dBackward => conv::conv3d_backward(&x[0], &x[1], &x[2], &Conv3dAttrs::of(attrs)),
        OpKind::MaxPool2d => vec![nn::max_pool2d(&x[0], &PoolAttrs::of(attrs), &shapes[0])],
        OpKind::MaxPool2dBackward => vec![nn::max_pool2d_backward(&x[0], &x[1], &PoolAttrs::of(attrs))],
        OpKind::CrossEntropy => vec![nn::cross_entropy(&x[0], &x[1], &CrossEntropyAttrs::of(attrs))?],
        OpKind::CrossEntropyBackward => {
            vec![nn::cross_entropy_backward(&x[0], &x[1], &x[2], &CrossEntropyAttrs::of(attrs))?]
        }
        OpKind::LinearCrossEntropy => {
            nn::linear_cross_entropy(&x[0], &x[1], &x[2], &CrossEntropyAttrs::of(attrs), outputs[1].dtype, &shapes[3])?
        }
        OpKind::Sgd => vec![optim::sgd(&x[0], &x[1], attrs.float("lr"))],
        OpKind::SgdMomentum => optim::sgd_momentum(&x[0], &x[1], &x[2], attrs.float("lr"), attrs.float("momentum")),
        OpKind::Adam => optim::adam(&x[0], &x[1], &x[2], &x[3], &x[4], &AdamAttrs::of(attrs)),
        OpKind::Adamw => optim::adam(&x[0], &x[1], &x[2], &x[3], &x[4], &AdamAttrs::of(attrs)),
        OpKind::Slice => {
            let axis = resolve_axis(attrs.int("axis"), x[0].shape.len());
            vec![shape::slice(&x[0], axis, attrs.int("start") as usize, attrs.int("step") as usize, &shapes[0])]
        }
        OpKind::Select => {
            let axis = resolve_axis(attrs.int("axis"), x[0].shape.len());
            vec![shape::select(&x[0], axis, attrs.int("index") as usize)]
        }
        OpKind::SliceBackward => {
            let axis = resolve_axis(attrs.int("axis"), shapes[0].len());
            vec![shape::slice_backward(&x[0], &shapes[0], axis, attrs.int("start") as usize, attrs.int("step") as usize)]
        }
        OpKind::SliceScatter => {
            let axis = resolve_axis(attrs.int("axis"), x[0].shape.len());
            vec![shape::slice_scatter(&x[0], &x[1], axis, attrs.int("start") as usize, attrs.int("step") as usize)]
        }
        OpKind::Cat => vec![shape::cat(x, resolve_axis(attrs.int("axis"), shapes[0].len()), &shapes[0])],
        OpKind::Extern | OpKind::ExternView | OpKind::ExternBackward => {
            return Err(ExecError::Extern { ops: attrs.str("target").to_string() });
        }
        OpKind::Random => {
            vec![dropout::random(&shapes[0], outputs[0].dtype, &x[0], attrs.int("stream"), attrs.bool("normal"))]
        }
        OpKind::Dropout | OpKind::DropoutBackward => {
            vec![dropout::dropout(&x[0], &x[1], attrs.float("p"), attrs.int("stream"))]
        }
        OpKind::ConvTranspose2d => vec![conv::conv_transpose2d(&x[0], &x[1], &ConvAttrs::of(attrs), &shapes[0])],
        OpKind::ConvTranspose2dBackward => conv::conv_transpose2d_backward(&x[0], &x[1], &x[2], &ConvAttrs::of(attrs)),
        OpKind::AdaptiveAvgPool2d => vec![resample::adaptive_avg_pool2d(&x[0], &shapes[0])],
        OpKind::AdaptiveAvgPool2dBackward => vec![resample::adaptive_avg_pool2d_backward(&x[0], &shapes[0])],
        OpKind::UpsampleNearest2d => vec![resample::upsample_nearest2d(&x[0], &shapes[0])],
        OpKind::UpsampleNearest2dBackward => vec![resample::upsample_nearest2d_backward(&x[0], &shapes[0])],
        OpKind::UpsampleBilinear2d => vec![resample::upsample_bilinear2d(&x[0], &shapes[0], attrs.bool("align_corners"))],
        OpKind::UpsampleBilinear2dBackward => {
            vec![resample::upsample_bilinear2d_backward(&x[0], &shapes[0], attrs.bool("align_corners"))]
        }
        OpKind::GridSample => vec![resample::grid_sample(&x[0], &x[1], &GridSampleAttrs::of(attrs))],
        OpKind::GridSampleBackward => resample::grid_sample_backward(&x[0], &x[1], &x[2], &GridSampleAttrs::of(attrs)),
        OpKind::BceWithLogits => vec![nn::bce_with_logits(&x[0], &x[1])],
        OpKind::BceWithLogitsBackward => vec![nn::bce_with_logits_backward(&x[0], &x[1], &x[2])],
        OpKind::Where => vec![elementwise::where_select(&x[0], &x[1], &x[2], &shapes[0])],
        OpKind::MaskedFill => vec![elementwise::masked_fill(&x[0], &x[1], attrs.float("value"))],
        OpKind::Compare => {
            let relation = Comparison::of(attrs);
            vec![elementwise::binary(&x[0], &x[1], &shapes[0], |a, b| f64::from(u8::from(relation.holds(a, b))))]
        }
        OpKind::CompareScalar => {
            let (relation, value) = (Comparison::of(attrs), attrs.float("value"));
            vec![elementwise::unary(&x[0], |a| f64::from(u8::from(relation.holds(a, value))))]
        }
        OpKind::Fused => vec![fused::fused(&FusedBody::of(attrs), x, &outputs[0])?],
        OpKind::FusedNorm => fused::fused_norm(&FusedBody::of(attrs), Norm::of(attrs), attrs.float("eps"), x, outputs)?,
    };
    if results.len() != outputs.len() || results.iter().zip(&shapes).any(|(r, s)| r.shape != *s) {
        // Unreachable when the kernels are right; a wrong shape must never reach an arena.
        return Err(ExecError::BadPlan(format!("{kind}: a kernel produced the wrong output shapes")));
    }
    for (result, ty) in results.iter_mut().zip(outputs) {
        to_dtype(result, ty.dtype);
    }
    Ok(results)
}

/// Checks that a call fits `kind`'s type rule: the input count, every input's data length
/// against its shape, the rule's verdict on the input shapes and attributes, and the
/// outputs it gives against `outputs`. Dense tensors carry no dtype, so the rule sees index
/// inputs (`ids`, `labels`) and dropout's `seed` as `i64`, attention's `lse` as `f32` (its
/// only dtype), the masks of `where` and `masked_fill` (`cond`, `mask`) as `bool`, and
/// every other input with the dtype of output 0.
fn check_call(kind: OpKind, attrs: &Attrs, inputs: &[Dense], outputs: &[TensorType]) -> Result<(), ExecError> {
    let def = kind.def();
    let bad = |message: String| Err(ExecError::BadPlan(format!("{kind}: {message}")));
    if !def.takes_inputs(inputs.len()) || outputs.len() != def.outputs.len() {
        return bad(format!(
            "given {} inputs and {} outputs, the op has {} and {}",
            inputs.len(),
            outputs.len(),
            def.inputs.len(),
            def.outputs.len()
        ));
    }
    for (k, input) in inputs.iter().enumerate() {
        let name = def.input_name(k);
        if input.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(input.data.len()) {
            return bad(format!("input {name} has {} numbers for shape {:?}", input.data.len(), input.shape));
        }
    }
    if kind == OpKind::Fused || kind == OpKind::FusedNorm {
        // Its inputs' dtypes are its own (a cast's input is any): each inner op is checked
        // when it runs, and the body's shape against the output's.
        return Ok(());
    }
    let dtype = outputs[0].dtype;
    let types: Vec<TensorType> = inputs
        .iter()
        .enumerate()
        .map(|(k, input)| {
            let dims = input.shape.iter().map(|&d| d as u64).collect::<Vec<_>>();
            TensorType::new(input_dtype(def.input_name(k), dtype, attrs), dims)
        })
        .collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let inferred = match (def.infer)(&refs, attrs) {
        Ok(inferred) => inferred,
        Err(message) => return bad(message),
    };
    if inferred.iter().zip(outputs).any(|(a, b)| a.shape != b.shape) {
        let shown = |ts: &[TensorType]| ts.iter().map(|t| t.shape.to_string()).collect::<Vec<_>>().join(", ");
        return bad(format!(
            "the inputs give output shapes {} but {} were asked for",
            shown(&inferred),
            shown(outputs)
        ));
    }
    Ok(())
}

/// The dtype a dense input named `name` stands for, in a call whose output 0 is `dtype`
/// (for the shape check: under cross_entropy's `f32_loss` the logits stand for bf16, either
/// half type giving the same shapes, and the f32 loss's gradient `dloss` for f32).
fn input_dtype(name: &str, dtype: DType, attrs: &Attrs) -> DType {
    let f32_loss = matches!(attrs.get("f32_loss"), Some(Attr::Bool(true)));
    match name {
        "ids" | "labels" | "seed" | "index" | "offsets" => DType::I64,
        "lse" => DType::F32,
        "cond" | "mask" => DType::Bool,
        "logits" | "x" | "weight" if f32_loss => DType::Bf16,
        "dloss" if f32_loss => DType::F32,
        _ => dtype,
    }
}

/// Stores `f64` results as values of `dtype`: floats stay (executors round them when
/// storing), integers convert like Rust's `as` (truncate toward zero, saturate, NaN to 0),
/// bools become `(x != 0)` as 0 or 1.
fn to_dtype(t: &mut Dense, dtype: DType) {
    let convert: fn(f64) -> f64 = match dtype {
        DType::F32 | DType::F16 | DType::Bf16 => return,
        DType::I32 => |x| x as i32 as f64,
        DType::I64 => |x| x as i64 as f64,
        DType::Bool => |x| if x != 0.0 { 1.0 } else { 0.0 },
    };
    for x in &mut t.data {
        *x = convert(*x);
    }
}

/// Dimensions as `usize`. Callers hold shapes that passed the type rule and describe data in
/// memory, so every dimension fits.
fn usize_dims(dims: &[u64]) -> Vec<usize> {
    dims.iter().map(|&d| d as usize).collect()
}

/// Row-major strides of `shape` (in elements).
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Strides that read a tensor of shape `shape` as if broadcast to `target` (numpy rules,
/// aligned at the right): one stride per dimension of `target`, 0 where `shape` has no such
/// dimension or has size 1 there.
fn broadcast_strides(shape: &[usize], target: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let offset = target.len() - shape.len();
    (0..target.len()).map(|i| if i < offset || shape[i - offset] == 1 { 0 } else { own[i - offset] }).collect()
}

/// Visits every index of `shape` in row-major order and calls `f` with that index's offset
/// under each of the `N` stride lists (each as long as `shape`). A scalar shape is visited
/// once (all offsets 0); a shape with a zero dimension is not visited.
fn walk<const N: usize>(shape: &[usize], strides: [&[usize]; N], mut f: impl FnMut([usize; N])) {
    if shape.contains(&0) {
        return;
    }
    let mut index = vec![0usize; shape.len()];
    let mut offsets = [0usize; N];
    loop {
        f(offsets);
        // Odometer step: bump the last dimension, carrying into earlier ones.
        let mut dim = shape.len();
        loop {
            if dim == 0 {
                return;
            }
            dim -= 1;
            index[dim] += 1;
            for (offset, s) in offsets.iter_mut().zip(&strides) {
                *offset += s[dim];
            }
            if index[dim] < shape[dim] {
                break;
            }
            for (offset, s) in offsets.iter_mut().zip(&strides) {
                *offset -= s[dim] * shape[dim];
            }
            index[dim] = 0;
        }
    }
}

/// An axis attribute resolved against a rank (the type rule has checked its range).
/// The saved values of a masked or dropout attention backward op, from its inputs
/// `(dout, q, k, v, bias, [seed,] out, lse)`.
fn masked_saved<'a>(x: &'a [Dense], seed: Option<&'a Dense>) -> attention::Saved<'a> {
    let at = if seed.is_some() { 6 } else { 5 };
    attention::Saved { dout: &x[0], q: &x[1], k: &x[2], v: &x[3], mask: Some(&x[4]), seed, out: &x[at], lse: &x[at + 1] }
}

fn resolve_axis(axis: i64, rank: usize) -> usize {
    if axis < 0 { (axis + rank as i64) as usize } else { axis as usize }
}

/// Helpers shared by the kernel tests.
#[cfg(test)]
mod test_util {
    use super::*;
    use crate::ir::ops::Attr;

    /// `kind`'s attributes: the `given` ones, defaults for the rest.
    pub fn attrs(kind: OpKind, given: &[(&str, Attr)]) -> Attrs {
        Attrs::for_op(kind, given).unwrap_or_else(|e| panic!("test attributes: {e}"))
    }

    /// Runs `kind` on f32-typed inputs (i64 for ids, labels and seeds; bf16 logits under
    /// cross_entropy's `f32_loss`); output types come from the op's type rule.
    pub fn try_run(kind: OpKind, given: &[(&str, Attr)], inputs: &[Dense]) -> Result<Vec<Dense>, ExecError> {
        let attrs = attrs(kind, given);
        let types: Vec<TensorType> = inputs
            .iter()
            .enumerate()
            .map(|(k, x)| {
                let dtype = input_dtype(kind.def().input_name(k), DType::F32, &attrs);
                TensorType::new(dtype, x.shape.iter().map(|&d| d as u64).collect::<Vec<_>>())
            })
            .collect();
        let outputs = (kind.def().infer)(&types.iter().collect::<Vec<_>>(), &attrs)
            .unwrap_or_else(|e| panic!("{kind}: the test's inputs do not type-check: {e}"));
        eval(kind, &attrs, inputs, &outputs)
    }

    #[track_caller]
    pub fn run(kind: OpKind, given: &[(&str, Attr)], inputs: &[Dense]) -> Vec<Dense> {
        try_run(kind, given, inputs).unwrap_or_else(|e| panic!("{kind} failed: {e}"))
    }

    /// A tensor from a shape and numbers.
    pub fn t(shape: &[usize], data: &[f64]) -> Dense {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "test tensor {shape:?}");
        Dense::new(shape.to_vec(), data.to_vec())
    }

    /// Numbers in [-1, 1), different per seed.
    pub fn rand(shape: &[usize], seed: u64) -> Dense {
        crate::testing::rand_dense(shape, seed)
    }

    pub fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    #[track_caller]
    pub fn assert_close(got: &Dense, want: &[f64], tol: f64) {
        assert_eq!(got.data.len(), want.len(), "length of {:?}", got.data);
        for (i, (a, b)) in got.data.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= tol, "element {i}: got {a}, want {b} (all: {:?})", got.data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::*;
    use super::*;
    use crate::ir::ops::Attr;

    // ----------------------------------------------------------------------------------
    // The helpers.

    #[test]
    fn strides_and_walk() {
        assert_eq!(strides(&[2, 3, 4]), [12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), [0, 1, 0]);
        let mut seen = Vec::new();
        walk(&[2, 3], [&[3, 1], &[1, 2]], |[a, b]| seen.push((a, b)));
        assert_eq!(seen, [(0, 0), (1, 2), (2, 4), (3, 1), (4, 3), (5, 5)]);
        let mut count = 0;
        walk(&[], [], |[]| count += 1);
        assert_eq!(count, 1);
        walk(&[2, 0, 3], [], |[]| count += 1);
        assert_eq!(count, 1);
    }

    #[test]
    fn integer_and_bool_outputs_are_exact() {
        let cast = |x: &[f64], to: DType| {
            let attrs = attrs(OpKind::Cast, &[("to", Attr::DType(to))]);
            let out = TensorType::new(to, vec![x.len() as u64]);
            eval(OpKind::Cast, &attrs, &[t(&[x.len()], x)], &[out]).unwrap().remove(0).data
        };
        let x = [2.7, -2.7, 0.0, -0.5, 3e9, -3e9, f64::NAN, f64::INFINITY];
        assert_eq!(cast(&x, DType::I32), [2.0, -2.0, 0.0, 0.0, 2147483647.0, -2147483648.0, 0.0, 2147483647.0]);
        assert_eq!(cast(&x, DType::I64)[..6], [2.0, -2.0, 0.0, 0.0, 3e9, -3e9]);
        assert_eq!(cast(&x, DType::Bool), [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(cast(&[1.5, -7.0], DType::F16), [1.5, -7.0]);
        // Integer division truncates toward zero; division by zero saturates (0/0 is 0).
        let i32s = TensorType::new(DType::I32, vec![4]);
        let out = eval(
            OpKind::Div,
            &Attrs::default(),
            &[t(&[4], &[7.0, -7.0, 5.0, 0.0]), t(&[4], &[2.0, 2.0, 0.0, 0.0])],
            &[i32s],
        );
        assert_eq!(out.unwrap()[0].data, [3.0, -3.0, 2147483647.0, 0.0]);
    }

    #[test]
    fn calls_that_do_not_fit_the_rule_are_errors() {
        let f32s = |dims: &[u64]| TensorType::new(DType::F32, dims.to_vec());
        let add = |a: Dense, b: Dense, out: TensorType| eval(OpKind::Add, &Attrs::default(), &[a, b], &[out]);
        let err = add(t(&[2], &[1.0, 2.0]), t(&[3], &[1.0, 2.0, 3.0]), f32s(&[3])).unwrap_err();
        assert!(matches!(&err, ExecError::BadPlan(m) if m.starts_with("add: ") && m.contains("broadcast")), "{err}");
        let err = add(t(&[2], &[1.0, 2.0]), t(&[2], &[1.0, 2.0]), f32s(&[3])).unwrap_err();
        assert!(matches!(&err, ExecError::BadPlan(m) if m.contains("[3] were asked for")), "{err}");
        let short = Dense { shape: vec![3], data: vec![1.0] };
        assert!(add(short, t(&[3], &[1.0, 2.0, 3.0]), f32s(&[3])).is_err());
        let one = eval(OpKind::Add, &Attrs::default(), &[t(&[1], &[1.0])], &[f32s(&[1])]);
        assert!(matches!(one, Err(ExecError::BadPlan(_))));
    }

    /// Every op on inputs with a zero-size dimension (and scalars where the rule allows):
    /// no panic, right shapes.
    #[test]
    fn zero_size_inputs() {
        let z = |shape: &[usize]| Dense::zeros(shape.to_vec());
        let w2 = [("kernel", ints(&[2, 2])), ("stride", ints(&[1, 1])), ("padding", ints(&[1, 1]))];
        type Case<'a> = (OpKind, Vec<(&'a str, Attr)>, Vec<Dense>);
        let cases: Vec<Case> = vec![
            (OpKind::Add, vec![], vec![z(&[0, 3]), z(&[3])]),
            (OpKind::Mul, vec![], vec![z(&[]), z(&[])]),
            (OpKind::Relu, vec![], vec![z(&[0])]),
            (OpKind::Rsqrt, vec![], vec![z(&[0, 2])]),
            (OpKind::HardswishBackward, vec![], vec![z(&[0]), z(&[0])]),
            (OpKind::HardsigmoidBackward, vec![], vec![z(&[0]), z(&[0])]),
            (OpKind::Softmax, vec![("axis", Attr::Int(0))], vec![z(&[0, 4])]),
            (OpKind::Softmax, vec![], vec![z(&[4, 0])]),
            (OpKind::CausalMask, vec![], vec![z(&[0, 0])]),
            (OpKind::Matmul, vec![], vec![z(&[2, 0]), z(&[0, 3])]),
            (OpKind::Attention, vec![("scale", Attr::Float(1.0))], vec![z(&[2, 0, 4]), z(&[1, 3, 4]), z(&[1, 3, 2])]),
            (
                OpKind::Attention,
                vec![("scale", Attr::Float(1.0))],
                vec![z(&[0, 2, 3, 4]), z(&[0, 1, 3, 4]), z(&[0, 1, 3, 0])],
            ),
            (
                OpKind::AttentionBackward,
                vec![("scale", Attr::Float(1.0))],
                vec![z(&[2, 0, 2]), z(&[2, 0, 4]), z(&[1, 3, 4]), z(&[1, 3, 2]), z(&[2, 0, 2]), z(&[2, 0])],
            ),
            (OpKind::Matmul, vec![], vec![z(&[0, 2, 4]), z(&[4, 3])]),
            (OpKind::Sum, vec![("axes", ints(&[1]))], vec![z(&[2, 0])]),
            (OpKind::Mean, vec![("axes", ints(&[0]))], vec![z(&[0, 2])]),
            (OpKind::Transpose, vec![("perm", ints(&[]))], vec![z(&[])]),
            (OpKind::Expand, vec![("shape", ints(&[0, 3]))], vec![z(&[1, 3])]),
            (OpKind::Embedding, vec![], vec![z(&[5, 2]), z(&[0])]),
            (OpKind::Embedding, vec![], vec![z(&[0, 2]), z(&[0, 4])]),
            (OpKind::EmbeddingBackward, vec![("vocab", Attr::Int(3))], vec![z(&[0, 2]), z(&[0])]),
            (OpKind::LayerNorm, vec![], vec![z(&[3, 0]), z(&[0]), z(&[0])]),
            (OpKind::LayerNormBackward, vec![], vec![z(&[0, 2]), z(&[0, 2]), z(&[2])]),
            (OpKind::RmsNorm, vec![], vec![z(&[3, 0]), z(&[0])]),
            (OpKind::RmsNormBackward, vec![], vec![z(&[0, 2]), z(&[0, 2]), z(&[2])]),
            (OpKind::BatchNorm, vec![], vec![z(&[0, 2]), z(&[2]), z(&[2])]),
            (OpKind::BatchNormBackward, vec![], vec![z(&[0, 2, 3]), z(&[0, 2, 3]), z(&[2])]),
            (OpKind::BatchNormStats, vec![], vec![z(&[2, 0, 3])]),
            (OpKind::Conv2d, vec![], vec![z(&[0, 1, 3, 3]), z(&[2, 1, 2, 2])]),
            (OpKind::Conv2d, vec![], vec![z(&[1, 0, 3, 3]), z(&[2, 0, 2, 2])]),
            (OpKind::Conv2dBackward, vec![], vec![z(&[1, 0, 2, 2]), z(&[1, 1, 3, 3]), z(&[0, 1, 2, 2])]),
            (OpKind::Conv2d, vec![("groups", Attr::Int(2))], vec![z(&[0, 2, 3, 3]), z(&[4, 1, 2, 2])]),
            (OpKind::ConvTranspose2d, vec![("groups", Attr::Int(2))], vec![z(&[0, 2, 3, 3]), z(&[2, 2, 2, 2])]),
            (OpKind::ConvTranspose2d, vec![], vec![z(&[1, 0, 3, 3]), z(&[0, 2, 2, 2])]),
            (OpKind::ConvTranspose2d, vec![("padding", ints(&[1, 1]))], vec![z(&[1, 1, 1, 1]), z(&[1, 1, 2, 2])]),
            (
                OpKind::ConvTranspose2dBackward,
                vec![("groups", Attr::Int(2))],
                vec![z(&[0, 4, 4, 4]), z(&[0, 2, 3, 3]), z(&[2, 2, 2, 2])],
            ),
            (OpKind::MaxPool2d, w2.to_vec(), vec![z(&[1, 1, 0, 0])]),
            (OpKind::MaxPool2dBackward, w2.to_vec(), vec![z(&[1, 1, 1, 1]), z(&[1, 1, 0, 0])]),
            (OpKind::CrossEntropy, vec![], vec![z(&[0, 3]), z(&[0])]),
            (OpKind::CrossEntropyBackward, vec![], vec![z(&[]), z(&[0, 3]), z(&[0])]),
            (OpKind::Sgd, vec![("lr", Attr::Float(0.1))], vec![z(&[0]), z(&[0])]),
            (OpKind::Adam, vec![], vec![z(&[0]), z(&[0]), z(&[0]), z(&[0]), t(&[], &[1.0])]),
            (OpKind::AdaptiveAvgPool2d, vec![("output_size", ints(&[2, 2]))], vec![z(&[0, 2, 3, 3])]),
            (
                OpKind::AdaptiveAvgPool2dBackward,
                vec![("shape", ints(&[0, 2, 3, 3])), ("output_size", ints(&[2, 2]))],
                vec![z(&[0, 2, 2, 2])],
            ),
            (OpKind::UpsampleNearest2d, vec![("output_size", ints(&[4, 4]))], vec![z(&[0, 1, 2, 2])]),
            (
                OpKind::UpsampleNearest2dBackward,
                vec![("shape", ints(&[0, 1, 2, 2])), ("output_size", ints(&[4, 4]))],
                vec![z(&[0, 1, 4, 4])],
            ),
            (OpKind::BceWithLogitsBackward, vec![], vec![z(&[]), z(&[2, 0]), z(&[2, 0])]),
            (OpKind::Where, vec![], vec![z(&[0, 1]), z(&[3]), z(&[])]),
            (OpKind::MaskedFill, vec![("value", Attr::Float(1.0))], vec![z(&[0, 3]), z(&[3])]),
        ];
        for (kind, given, inputs) in cases {
            let out = run(kind, &given, &inputs);
            assert_eq!(out.len(), kind.def().outputs.len(), "{kind}");
        }
        // A pooling window made only of padding gives -inf and routes no gradient.
        let y = run(OpKind::MaxPool2d, &w2, &[z(&[1, 1, 0, 0])]);
        assert_eq!(y[0].data, [f64::NEG_INFINITY]);
    }

    #[test]
    fn same_inputs_same_bits() {
        let x = rand(&[2, 3, 5, 5], 7);
        let w = rand(&[4, 3, 3, 3], 8);
        let sp = [("stride", ints(&[2, 2])), ("padding", ints(&[1, 1]))];
        let first = run(OpKind::Conv2d, &sp, &[x.clone(), w.clone()]);
        for _ in 0..3 {
            let again = run(OpKind::Conv2d, &sp, &[x.clone(), w.clone()]);
            let bits = |d: &[Dense]| d[0].data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&again), bits(&first));
        }
    }

    // ----------------------------------------------------------------------------------
    // Finite-difference gradient checks of every backward kernel, in f64.
    //
    // For a forward op f and a fixed upstream gradient dy, the scalar L(x) = Σ f(x) · dy has
    // gradient backward(dy, ...) with respect to each input; central differences with
    // h = 1e-6 estimate it. The norm-based relative error must stay below 1e-6.

    const H: f64 = 1e-6;
    const TOL: f64 = 1e-6;

    /// Σ a · b over all elements.
    fn dot(a: &Dense, b: &Dense) -> f64 {
        assert_eq!(a.shape, b.shape);
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
    }

    /// The central-difference gradient of `loss` with respect to input `which` of `inputs`.
    fn numeric_grad(inputs: &[Dense], which: usize, loss: &dyn Fn(&[Dense]) -> f64) -> Dense {
        let mut grad = Dense::zeros(inputs[which].shape.clone());
        let mut probe = inputs.to_vec();
        for i in 0..grad.data.len() {
            let x0 = inputs[which].data[i];
            probe[which].data[i] = x0 + H;
            let up = loss(&probe);
            probe[which].data[i] = x0 - H;
            let down = loss(&probe);
            probe[which].data[i] = x0;
            grad.data[i] = (up - down) / (2.0 * H);
        }
        grad
    }

    /// Compares an analytic gradient with central differences; a failure names the op and
    /// the input.
    #[track_caller]
    fn check_grad(
        op: &str,
        input: &str,
        inputs: &[Dense],
        which: usize,
        loss: &dyn Fn(&[Dense]) -> f64,
        analytic: &Dense,
    ) {
        let numeric = numeric_grad(inputs, which, loss);
        assert_eq!(analytic.shape, numeric.shape, "{op}: d{input} has the wrong shape");
        let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
        let diff = norm(&mut analytic.data.iter().zip(&numeric.data).map(|(a, b)| a - b));
        let scale = norm(&mut analytic.data.iter().copied()).max(norm(&mut numeric.data.iter().copied())).max(1e-8);
        assert!(
            diff / scale < TOL,
            "gradient check failed for {op}, d{input}: relative error {:e}\n analytic {:?}\n numeric  {:?}",
            diff / scale,
            analytic.data,
            numeric.data
        );
    }

    /// Checks a forward op's gradients with respect to the inputs at positions `wrt` (named
    /// `names`): `backward(inputs, dy)` gives the analytic gradients in that order.
    #[track_caller]
    fn grad_check(
        kind: OpKind,
        given: &[(&str, Attr)],
        inputs: &[Dense],
        wrt: &[(usize, &str)],
        backward: &dyn Fn(&[Dense], &Dense) -> Vec<Dense>,
    ) {
        let y = run(kind, given, inputs).remove(0);
        // A fixed upstream gradient; `+ 0.5` keeps it away from zero-mean special cases.
        let dy = Dense::new(y.shape.clone(), rand(&y.shape, 99).data.iter().map(|v| v + 0.5).collect());
        let loss = |xs: &[Dense]| dot(&run(kind, given, xs)[0], &dy);
        let analytic = backward(inputs, &dy);
        assert_eq!(analytic.len(), wrt.len(), "{kind}: one analytic gradient per checked input");
        for (&(which, name), grad) in wrt.iter().zip(&analytic) {
            check_grad(kind.name(), name, inputs, which, &loss, grad);
        }
    }

    /// `x` pushed at least `gap` away from 0 (for ops with a kink there).
    fn away_from_zero(x: Dense, gap: f64) -> Dense {
        let data = x.data.iter().map(|&v| if v < 0.0 { v - gap } else { v + gap }).collect();
        Dense::new(x.shape, data)
    }

    #[test]
    fn grad_relu() {
        let x = away_from_zero(rand(&[3, 4], 1), 0.05);
        grad_check(OpKind::Relu, &[], &[x], &[(0, "x")], &|xs, dy| {
            let y = run(OpKind::Relu, &[], xs).remove(0);
            run(OpKind::ReluBackward, &[], &[dy.clone(), y])
        });
    }

    #[test]
    fn grad_gelu() {
        let x = Dense::new(vec![2, 5], rand(&[2, 5], 2).data.iter().map(|v| v * 4.0).collect());
        grad_check(OpKind::Gelu, &[], &[x], &[(0, "x")], &|xs, dy| {
            run(OpKind::GeluBackward, &[], &[dy.clone(), xs[0].clone()])
        });
    }

    #[test]
    fn grad_gelu_exact() {
        let exact = [("approximate", Attr::Bool(false))];
        let x = Dense::new(vec![2, 5], rand(&[2, 5], 3).data.iter().map(|v| v * 4.0).collect());
        grad_check(OpKind::Gelu, &exact, &[x], &[(0, "x")], &|xs, dy| {
            run(OpKind::GeluBackward, &exact, &[dy.clone(), xs[0].clone()])
        });
    }

    /// silu, sigmoid, tanh (their backward ops reading x or the output y), hardswish and
    /// hardsigmoid (away from their kinks at ±3), on x in [−5, 5).
    #[test]
    fn grad_silu_sigmoid_tanh_hardswish_hardsigmoid() {
        let x = Dense::new(vec![3, 6], rand(&[3, 6], 5).data.iter().map(|v| v * 5.0).collect());
        for (kind, backward, reads_output) in [
            (OpKind::Silu, OpKind::SiluBackward, false),
            (OpKind::Sigmoid, OpKind::SigmoidBackward, true),
            (OpKind::Tanh, OpKind::TanhBackward, true),
            (OpKind::Hardswish, OpKind::HardswishBackward, false),
            (OpKind::Hardsigmoid, OpKind::HardsigmoidBackward, false),
        ] {
            let x = if matches!(kind, OpKind::Hardswish | OpKind::Hardsigmoid) {
                let data = x.data.iter().map(|&v| if (v.abs() - 3.0).abs() < 0.05 { v * 0.9 } else { v }).collect();
                Dense::new(x.shape.clone(), data)
            } else {
                x.clone()
            };
            grad_check(kind, &[], &[x], &[(0, "x")], &|xs, dy| {
                let saved = if reads_output { run(kind, &[], xs).remove(0) } else { xs[0].clone() };
                run(backward, &[], &[dy.clone(), saved])
            });
        }
    }

    #[test]
    fn grad_softmax() {
        for axis in [-1, 0, 1] {
            let given = [("axis", Attr::Int(axis))];
            let x = rand(&[2, 3, 4], (3 + axis) as u64);
            grad_check(OpKind::Softmax, &given, &[x], &[(0, "x")], &|xs, dy| {
                let y = run(OpKind::Softmax, &given, xs).remove(0);
                run(OpKind::SoftmaxBackward, &given, &[dy.clone(), y])
            });
        }
    }

    #[test]
    fn grad_causal_mask() {
        // A finite fill value keeps the loss finite; the gradient does not depend on it.
        let given = [("value", Attr::Float(-3.0))];
        grad_check(OpKind::CausalMask, &given, &[rand(&[2, 3, 3], 4)], &[(0, "x")], &|_, dy| {
            run(OpKind::CausalMask, &[("value", Attr::Float(0.0))], std::slice::from_ref(dy))
        });
    }

    #[test]
    fn grad_attention() {
        // (q, k, v shapes, causal): multi-head, T != S both ways, grouped-query heads.
        type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], bool);
        let cases: [Case; 4] = [
            (&[2, 2, 3, 4], &[2, 2, 3, 4], &[2, 2, 3, 4], false),
            (&[1, 2, 4, 3], &[1, 2, 3, 3], &[1, 2, 3, 2], true),
            (&[4, 2, 3], &[2, 5, 3], &[2, 5, 4], true),
            (&[1, 4, 3, 2], &[1, 1, 3, 2], &[1, 1, 3, 3], false),
        ];
        for (i, (q, k, v, causal)) in cases.into_iter().enumerate() {
            let given = [("causal", Attr::Bool(causal)), ("scale", Attr::Float(0.7))];
            let seed = 30 + 3 * i as u64;
            let inputs = [rand(q, seed), rand(k, seed + 1), rand(v, seed + 2)];
            grad_check(OpKind::Attention, &given, &inputs, &[(0, "q"), (1, "k"), (2, "v")], &|xs, dy| {
                let forward = run(OpKind::Attention, &given, xs);
                let (out, lse) = (forward[0].clone(), forward[1].clone());
                let saved = [dy.clone(), xs[0].clone(), xs[1].clone(), xs[2].clone(), out, lse];
                run(OpKind::AttentionBackward, &given, &saved)
            });
        }
    }

    #[test]
    fn grad_masked_attention() {
        // (q, k, v, mask shapes, causal): a full mask, one broadcast over batch and heads
        // (a learned position bias), one over heads and rows (a padding mask), with GQA and
        // causal; every mask's gradient summed over its broadcast dimensions. One key of the
        // padding mask is −inf (not attended): no gradient reaches it or passes through.
        type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize], bool);
        let cases: [Case; 3] = [
            (&[2, 2, 3, 4], &[2, 2, 3, 4], &[2, 2, 3, 4], &[2, 2, 3, 3], false),
            (&[2, 4, 3, 2], &[2, 2, 5, 2], &[2, 2, 5, 3], &[3, 5], true),
            (&[2, 2, 3, 4], &[2, 2, 4, 4], &[2, 2, 4, 2], &[2, 1, 1, 4], false),
        ];
        for (i, (q, k, v, m, causal)) in cases.into_iter().enumerate() {
            let given = [("causal", Attr::Bool(causal)), ("scale", Attr::Float(0.7))];
            let seed = 60 + 4 * i as u64;
            let mut mask = rand(m, seed + 3);
            if i == 2 {
                mask.data[3] = f64::NEG_INFINITY;
            }
            let inputs = [rand(q, seed), rand(k, seed + 1), rand(v, seed + 2), mask];
            let wrt: &[(usize, &str)] = if i == 2 { &[(0, "q"), (1, "k"), (2, "v")] } else { &[(0, "q"), (1, "k"), (2, "v"), (3, "mask")] };
            grad_check(OpKind::MaskedAttention, &given, &inputs, wrt, &|xs, dy| {
                let forward = run(OpKind::MaskedAttention, &given, xs);
                let (out, lse) = (forward[0].clone(), forward[1].clone());
                let saved = [dy.clone(), xs[0].clone(), xs[1].clone(), xs[2].clone(), xs[3].clone(), out, lse];
                let mut grads = run(OpKind::MaskedAttentionBackward, &given, &saved);
                if wrt.len() == 4 {
                    grads.extend(run(OpKind::AttentionBiasBackward, &given, &saved));
                }
                grads
            });
        }
    }

    #[test]
    fn masked_attention_with_a_zero_mask_is_attention_and_a_masked_key_is_never_read() {
        let given = [("causal", Attr::Bool(false)), ("scale", Attr::Float(0.5))];
        let (q, k, v) = (rand(&[1, 2, 3, 4], 1), rand(&[1, 2, 5, 4], 2), rand(&[1, 2, 5, 2], 3));
        let zeros = Dense::zeros(vec![5]);
        let plain = run(OpKind::Attention, &given, &[q.clone(), k.clone(), v.clone()]);
        let masked = run(OpKind::MaskedAttention, &given, &[q.clone(), k.clone(), v.clone(), zeros]);
        assert_eq!(plain, masked);
        // Key 4 masked out: the same as attention over keys 0..4.
        let mut mask = Dense::zeros(vec![5]);
        mask.data[4] = f64::NEG_INFINITY;
        let cut = |x: &Dense| Dense::new(vec![1, 2, 4, x.shape[3]], (0..2).flat_map(|h| x.data[h * 5 * x.shape[3]..(h * 5 + 4) * x.shape[3]].to_vec()).collect());
        let masked = run(OpKind::MaskedAttention, &given, &[q.clone(), k.clone(), v.clone(), mask]);
        let shorter = run(OpKind::Attention, &given, &[q, cut(&k), cut(&v)]);
        for (a, b) in masked.iter().zip(&shorter) {
            assert!(a.data.iter().zip(&b.data).all(|(x, y)| (x - y).abs() < 1e-12), "{a:?} vs {b:?}");
        }
        // Every key masked: out 0, lse −inf, as a row without keys.
        let all = Dense::new(vec![5], vec![f64::NEG_INFINITY; 5]);
        let (q, k, v) = (rand(&[1, 1, 2, 4], 4), rand(&[1, 1, 5, 4], 5), rand(&[1, 1, 5, 2], 6));
        let none = run(OpKind::MaskedAttention, &given, &[q, k, v, all]);
        assert!(none[0].data.iter().all(|&x| x == 0.0) && none[1].data.iter().all(|&x| x == f64::NEG_INFINITY));
    }

    #[test]
    fn grad_dropout_attention() {
        // A fixed seed fixes the mask, so the op is a smooth function of q, k, v and the
        // bias, and its backward ops (which draw the mask again) are its exact gradients.
        // (q, k, v, bias shapes, causal): a [] bias (no mask) with GQA, a broadcast bias.
        type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize], bool);
        let cases: [Case; 2] = [
            (&[1, 4, 3, 2], &[1, 2, 5, 2], &[1, 2, 5, 3], &[], true),
            (&[2, 2, 3, 4], &[2, 2, 4, 4], &[2, 2, 4, 2], &[2, 1, 3, 4], false),
        ];
        for (i, (q, k, v, b, causal)) in cases.into_iter().enumerate() {
            let given = [
                ("causal", Attr::Bool(causal)),
                ("scale", Attr::Float(0.7)),
                ("p", Attr::Float(0.4)),
                ("stream", Attr::Int(3)),
            ];
            let seed = 90 + 4 * i as u64;
            let inputs = [rand(q, seed), rand(k, seed + 1), rand(v, seed + 2), rand(b, seed + 3), t(&[], &[17.0])];
            let wrt: &[(usize, &str)] = &[(0, "q"), (1, "k"), (2, "v"), (3, "bias")];
            grad_check(OpKind::DropoutAttention, &given, &inputs, wrt, &|xs, dy| {
                let forward = run(OpKind::DropoutAttention, &given, xs);
                let (out, lse) = (forward[0].clone(), forward[1].clone());
                let saved = [std::slice::from_ref(dy), xs, &[out, lse]].concat();
                let mut grads = run(OpKind::DropoutAttentionBackward, &given, &saved);
                grads.extend(run(OpKind::DropoutAttentionBiasBackward, &given, &saved));
                grads
            });
        }
    }

    #[test]
    fn dropout_attention_drops_probabilities_by_the_dropout_hash() {
        let attrs = |p: f64, stream: i64| {
            [("causal", Attr::Bool(false)), ("scale", Attr::Float(0.5)), ("p", Attr::Float(p)), ("stream", Attr::Int(stream))]
        };
        let (q, k, v) = (rand(&[2, 3, 4], 1), rand(&[2, 5, 4], 2), rand(&[2, 5, 3], 3));
        let (bias, seed) = (rand(&[5], 4), t(&[], &[-7.0]));
        let plain = run(OpKind::MaskedAttention, &attrs(0.0, 0)[..2], &[q.clone(), k.clone(), v.clone(), bias.clone()]);
        // p = 0 keeps every probability: masked_attention.
        let kept = run(OpKind::DropoutAttention, &attrs(0.0, 0), &[q.clone(), k.clone(), v.clone(), bias.clone(), seed.clone()]);
        assert_eq!(plain, kept);
        // p = 0.5: row r weighs key j by softmax · z, z = 2 where the hash of (−7, 1, r·5 + j)
        // is >= 0.5, else 0; lse is the softmax's, before dropout.
        let given = attrs(0.5, 1);
        let dropped = run(OpKind::DropoutAttention, &given, &[q.clone(), k.clone(), v.clone(), bias.clone(), seed]);
        assert_eq!(dropped[1], plain[1]);
        let mut zeroed = 0;
        for r in 0..6 {
            let (head, i) = (r / 3, r % 3);
            let scores: Vec<f64> = (0..5)
                .map(|j| {
                    let qk: f64 = (0..4).map(|x| q.data[r * 4 + x] * k.data[(head * 5 + j) * 4 + x]).sum();
                    0.5 * qk + bias.data[j]
                })
                .collect();
            let lse = plain[1].data[head * 3 + i];
            for c in 0..3 {
                let want: f64 = (0..5)
                    .map(|j| {
                        let keep = dropout_uniform(-7, 1, (r * 5 + j) as u64) >= 0.5;
                        let z = if keep { 2.0 } else { 0.0 };
                        (scores[j] - lse).exp() * z * v.data[(head * 5 + j) * 3 + c]
                    })
                    .sum();
                assert!((dropped[0].data[r * 3 + c] - want).abs() < 1e-12, "row {r} column {c}");
            }
            zeroed += (0..5).filter(|&j| dropout_uniform(-7, 1, (r * 5 + j) as u64) < 0.5).count();
        }
        assert!(zeroed > 0 && zeroed < 30, "the mask drops some of the 30 probabilities, not all: {zeroed}");
    }

    #[test]
    fn embedding_bag_sums_or_averages_each_bags_rows() {
        // table rows r = [r, 10r]; ids [2, 0, 2, 3, 1] in bags [0..2), [2..2) (empty), [2..5).
        let table = Dense::new(vec![4, 2], (0..4).flat_map(|r| [r as f64, 10.0 * r as f64]).collect());
        let ids = t(&[5], &[2.0, 0.0, 2.0, 3.0, 1.0]);
        let offsets = t(&[3], &[0.0, 2.0, 2.0]);
        let sum = [("mode", Attr::Str("sum".into()))];
        let mean = [("mode", Attr::Str("mean".into()))];
        let out = run(OpKind::EmbeddingBag, &sum, &[table.clone(), ids.clone(), offsets.clone()]).remove(0);
        assert_eq!(out.data, [2.0, 20.0, 0.0, 0.0, 6.0, 60.0]);
        let out = run(OpKind::EmbeddingBag, &mean, &[table.clone(), ids.clone(), offsets.clone()]).remove(0);
        assert_eq!(out.data, [1.0, 10.0, 0.0, 0.0, 2.0, 20.0]);
        // The backward: each bag's dy row (a third of it for the 3-id bag's mean) into the
        // rows its ids name; the gradient of the sum and of the mean, by finite differences.
        let dy = t(&[3, 2], &[1.0, 2.0, 5.0, 5.0, 3.0, 6.0]);
        let given = [("vocab", Attr::Int(4)), ("mode", Attr::Str("mean".into()))];
        let dtable = run(OpKind::EmbeddingBagBackward, &given, &[dy, ids.clone(), offsets.clone()]).remove(0);
        assert_eq!(dtable.data, [0.5, 1.0, 1.0, 2.0, 1.5, 3.0, 1.0, 2.0]);
        for mode in [sum.clone(), mean] {
            let backward_attrs = [("vocab", Attr::Int(4)), mode[0].clone()];
            grad_check(OpKind::EmbeddingBag, &mode, &[rand(&[4, 2], 80), ids.clone(), offsets.clone()], &[(0, "table")], &|xs, dy| {
                run(OpKind::EmbeddingBagBackward, &backward_attrs, &[dy.clone(), xs[1].clone(), xs[2].clone()])
            });
        }
        // Offsets that do not start at 0, or decrease, or pass the ids: errors.
        for bad in [[1.0, 2.0, 2.0], [0.0, 3.0, 2.0], [0.0, 2.0, 6.0]] {
            assert!(try_run(OpKind::EmbeddingBag, &sum, &[table.clone(), ids.clone(), t(&[3], &bad)]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn gather_picks_and_its_backward_sums_repeats() {
        // x [2, 3]; index [2, 2] along axis 1 (rows of index may repeat a column).
        let x = Dense::new(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let index = Dense::new(vec![2, 2], vec![2.0, 0.0, 1.0, 1.0]);
        let out = run(OpKind::Gather, &[("axis", Attr::Int(1))], &[x, index.clone()]);
        assert_eq!(out[0].data, [3.0, 1.0, 5.0, 5.0]);
        let dy = Dense::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let given = [("shape", Attr::Ints(vec![2, 3])), ("axis", Attr::Int(-1))];
        let dx = run(OpKind::GatherBackward, &given, &[dy, index.clone()]);
        assert_eq!(dx[0].data, [2.0, 0.0, 1.0, 0.0, 7.0, 0.0]);
        // Along axis 0, index smaller than x in the other dimension.
        let x = Dense::new(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let index = Dense::new(vec![2, 1], vec![2.0, 0.0]);
        assert_eq!(run(OpKind::Gather, &[("axis", Attr::Int(0))], &[x.clone(), index])[0].data, [5.0, 1.0]);
        let out_of_range = Dense::new(vec![1, 1], vec![3.0]);
        assert!(try_run(OpKind::Gather, &[("axis", Attr::Int(0))], &[x, out_of_range]).is_err());
    }

    #[test]
    fn grad_cumsum() {
        for (axis, reverse) in [(1, false), (-3, true), (2, false)] {
            let given = [("axis", Attr::Int(axis)), ("reverse", Attr::Bool(reverse))];
            grad_check(OpKind::Cumsum, &given, &[rand(&[2, 3, 4], 7)], &[(0, "x")], &|_, dy| {
                run(OpKind::Cumsum, &[("axis", Attr::Int(axis)), ("reverse", Attr::Bool(!reverse))], std::slice::from_ref(dy))
            });
        }
        let y = run(OpKind::Cumsum, &[("axis", Attr::Int(0))], &[Dense::new(vec![4], vec![1.0, 2.0, 3.0, 4.0])]);
        assert_eq!(y[0].data, [1.0, 3.0, 6.0, 10.0]);
        let y = run(OpKind::Cumsum, &[("axis", Attr::Int(0)), ("reverse", Attr::Bool(true))], &[Dense::new(vec![4], vec![1.0, 2.0, 3.0, 4.0])]);
        assert_eq!(y[0].data, [10.0, 9.0, 7.0, 4.0]);
    }

    #[test]
    fn argmax_takes_the_first_maximum_and_nan_as_largest() {
        let x = Dense::new(vec![2, 3], vec![1.0, 5.0, 5.0, 2.0, f64::NAN, 9.0]);
        let along = |axis: i64, keepdim: bool| {
            run(OpKind::Argmax, &[("axis", Attr::Int(axis)), ("keepdim", Attr::Bool(keepdim))], std::slice::from_ref(&x))
                .remove(0)
        };
        let rows = along(-1, false);
        assert_eq!((rows.shape.clone(), rows.data), (vec![2], vec![1.0, 1.0]));
        let columns = along(0, true);
        assert_eq!((columns.shape.clone(), columns.data), (vec![1, 3], vec![1.0, 1.0, 1.0]));
    }

    #[test]
    fn scatter_add_sums_repeated_indices_and_its_gradient_is_a_gather() {
        let x = Dense::new(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let index = Dense::new(vec![2, 2], vec![2.0, 0.0, 2.0, 2.0]);
        let src = Dense::new(vec![2, 2], vec![10.0, 20.0, 30.0, 40.0]);
        let axis = [("axis", Attr::Int(0))];
        let y = run(OpKind::ScatterAdd, &axis, &[x.clone(), index.clone(), src.clone()]).remove(0);
        assert_eq!(y.data, [1.0, 22.0, 3.0, 4.0, 45.0, 46.0]);
        let out_of_range = Dense::new(vec![2, 2], vec![3.0, 0.0, 0.0, 0.0]);
        assert!(try_run(OpKind::ScatterAdd, &axis, &[x.clone(), out_of_range, src.clone()]).is_err());
        grad_check(OpKind::ScatterAdd, &axis, &[x, index.clone(), src], &[(0, "x"), (2, "src")], &|_, dy| {
            vec![dy.clone(), run(OpKind::Gather, &axis, &[dy.clone(), index.clone()]).remove(0)]
        });
    }

    #[test]
    fn topk_orders_nan_first_and_ties_by_position() {
        let x = Dense::new(vec![2, 4], vec![1.0, 3.0, 3.0, 2.0, 0.5, f64::NAN, -1.0, 0.5]);
        let pick = |k: i64, largest: bool| {
            let given = [("k", Attr::Int(k)), ("axis", Attr::Int(-1)), ("largest", Attr::Bool(largest))];
            let [values, indices] = <[Dense; 2]>::try_from(run(OpKind::Topk, &given, std::slice::from_ref(&x))).unwrap();
            (values.data, indices.data)
        };
        let (values, indices) = pick(2, true);
        assert_eq!(indices, [1.0, 2.0, 1.0, 0.0]);
        assert!(values[0] == 3.0 && values[1] == 3.0 && values[2].is_nan() && values[3] == 0.5);
        assert_eq!(pick(3, false), (vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.5], vec![0.0, 3.0, 1.0, 2.0, 0.0, 3.0]));
        let given = [("k", Attr::Int(2)), ("axis", Attr::Int(1)), ("largest", Attr::Bool(true))];
        grad_check(OpKind::Topk, &given, &[rand(&[2, 4, 3], 5)], &[(0, "x")], &|xs, dy| {
            let indices = run(OpKind::Topk, &given, xs).remove(1);
            run(OpKind::GatherBackward, &[("shape", ints(&[2, 4, 3])), ("axis", Attr::Int(1))], &[dy.clone(), indices])
        });
    }

    #[test]
    fn grad_matmul() {
        let tr = |ta: bool, tb: bool| [("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))];
        // a @ b: da = dy @ bᵀ, db = aᵀ @ dy.
        grad_check(OpKind::Matmul, &[], &[rand(&[3, 4], 5), rand(&[4, 2], 6)], &[(0, "a"), (1, "b")], &|xs, dy| {
            vec![
                run(OpKind::Matmul, &tr(false, true), &[dy.clone(), xs[1].clone()]).remove(0),
                run(OpKind::Matmul, &tr(true, false), &[xs[0].clone(), dy.clone()]).remove(0),
            ]
        });
        // a @ bᵀ (b is [n,k]): da = dy @ b, db = dyᵀ @ a.
        let given = tr(false, true);
        grad_check(OpKind::Matmul, &given, &[rand(&[3, 4], 7), rand(&[2, 4], 8)], &[(0, "a"), (1, "b")], &|xs, dy| {
            vec![
                run(OpKind::Matmul, &[], &[dy.clone(), xs[1].clone()]).remove(0),
                run(OpKind::Matmul, &tr(true, false), &[dy.clone(), xs[0].clone()]).remove(0),
            ]
        });
        // aᵀ @ b (a is [k,m]): da = b @ dyᵀ, db = a @ dy.
        let given = tr(true, false);
        grad_check(OpKind::Matmul, &given, &[rand(&[4, 3], 9), rand(&[4, 2], 10)], &[(0, "a"), (1, "b")], &|xs, dy| {
            vec![
                run(OpKind::Matmul, &tr(false, true), &[xs[1].clone(), dy.clone()]).remove(0),
                run(OpKind::Matmul, &[], &[xs[0].clone(), dy.clone()]).remove(0),
            ]
        });
        // Batched a[2,3,4] @ b[4,5] (b broadcast over the batch): db sums over the batch.
        let inputs = [rand(&[2, 3, 4], 11), rand(&[4, 5], 12)];
        grad_check(OpKind::Matmul, &[], &inputs, &[(0, "a"), (1, "b")], &|xs, dy| {
            let per_batch = run(OpKind::Matmul, &tr(true, false), &[xs[0].clone(), dy.clone()]).remove(0);
            vec![
                run(OpKind::Matmul, &tr(false, true), &[dy.clone(), xs[1].clone()]).remove(0),
                run(OpKind::Sum, &[("axes", ints(&[0]))], &[per_batch]).remove(0),
            ]
        });
    }

    /// sum and mean: the gradient is dy expanded back over the reduced axes (÷ count for mean).
    #[test]
    fn grad_sum_mean() {
        for (axes, keepdim) in [(&[0i64, 2][..], false), (&[0, 2], true), (&[-1], false), (&[0, 1, 2], false)] {
            for kind in [OpKind::Sum, OpKind::Mean] {
                let given = [("axes", ints(axes)), ("keepdim", Attr::Bool(keepdim))];
                let x = rand(&[2, 3, 4], 13);
                grad_check(kind, &given, &[x], &[(0, "x")], &|xs, dy| {
                    let dims = &xs[0].shape;
                    let kept: Vec<i64> = (0..dims.len())
                        .map(
                            |i| if axes.iter().any(|&a| resolve_axis(a, dims.len()) == i) { 1 } else { dims[i] as i64 },
                        )
                        .collect();
                    let dy = run(OpKind::Reshape, &[("shape", ints(&kept))], std::slice::from_ref(dy)).remove(0);
                    let full: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
                    let g = run(OpKind::Expand, &[("shape", ints(&full))], &[dy]).remove(0);
                    if kind == OpKind::Sum {
                        vec![g]
                    } else {
                        let count = dims.iter().product::<usize>() / kept.iter().product::<i64>() as usize;
                        run(OpKind::MulScalar, &[("value", Attr::Float(1.0 / count as f64))], &[g])
                    }
                });
            }
        }
    }

    #[test]
    fn grad_embedding() {
        let ids = t(&[2, 3], &[1.0, 4.0, 1.0, 0.0, 4.0, 4.0]);
        grad_check(OpKind::Embedding, &[], &[rand(&[5, 3], 14), ids], &[(0, "table")], &|xs, dy| {
            run(OpKind::EmbeddingBackward, &[("vocab", Attr::Int(5))], &[dy.clone(), xs[1].clone()])
        });
    }

    #[test]
    fn grad_layer_norm() {
        let inputs = [rand(&[3, 5], 15), rand(&[5], 16), rand(&[5], 17)];
        grad_check(OpKind::LayerNorm, &[], &inputs, &[(0, "x"), (1, "gamma"), (2, "beta")], &|xs, dy| {
            run(OpKind::LayerNormBackward, &[], &[dy.clone(), xs[0].clone(), xs[1].clone()])
        });
        // A large eps and a rank-3 x.
        let given = [("eps", Attr::Float(0.1))];
        let inputs = [rand(&[2, 2, 4], 18), rand(&[4], 19), rand(&[4], 20)];
        grad_check(OpKind::LayerNorm, &given, &inputs, &[(0, "x"), (1, "gamma"), (2, "beta")], &|xs, dy| {
            run(OpKind::LayerNormBackward, &given, &[dy.clone(), xs[0].clone(), xs[1].clone()])
        });
    }

    #[test]
    fn grad_rms_norm() {
        for (given, x_shape) in [(vec![], &[3, 5][..]), (vec![("eps", Attr::Float(0.1))], &[2, 2, 4])] {
            let d = x_shape[x_shape.len() - 1];
            let inputs = [rand(x_shape, 27), rand(&[d], 28)];
            grad_check(OpKind::RmsNorm, &given, &inputs, &[(0, "x"), (1, "gamma")], &|xs, dy| {
                run(OpKind::RmsNormBackward, &given, &[dy.clone(), xs[0].clone(), xs[1].clone()])
            });
        }
    }

    #[test]
    fn grad_batch_norm() {
        for x_shape in [&[2, 3, 2, 2][..], &[5, 3], &[2, 3, 4]] {
            let inputs = [rand(x_shape, 21), rand(&[3], 22), rand(&[3], 23)];
            grad_check(OpKind::BatchNorm, &[], &inputs, &[(0, "x"), (1, "gamma"), (2, "beta")], &|xs, dy| {
                run(OpKind::BatchNormBackward, &[], &[dy.clone(), xs[0].clone(), xs[1].clone()])
            });
        }
    }

    /// A conv's attributes: stride, padding, dilation, groups.
    fn conv_attrs(stride: [i64; 2], padding: [i64; 2], dilation: [i64; 2], groups: i64) -> Vec<(&'static str, Attr)> {
        vec![("stride", ints(&stride)), ("padding", ints(&padding)), ("dilation", ints(&dilation)), ("groups", Attr::Int(groups))]
    }

    #[test]
    fn grad_conv2d() {
        // (x shape, w shape, stride, padding, dilation, groups): plain, dilated, grouped,
        // depthwise.
        type Case<'a> = (&'a [usize], &'a [usize], [i64; 2], [i64; 2], [i64; 2], i64);
        let cases: [Case; 6] = [
            (&[2, 2, 5, 5], &[3, 2, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            (&[1, 2, 4, 6], &[2, 2, 2, 3], [1, 2], [0, 1], [1, 1], 1),
            (&[1, 1, 3, 3], &[1, 1, 3, 3], [1, 1], [2, 2], [1, 1], 1),
            (&[1, 2, 7, 6], &[2, 2, 3, 2], [1, 2], [1, 0], [2, 3], 1),
            (&[2, 4, 5, 5], &[6, 2, 3, 3], [2, 1], [1, 1], [1, 2], 2),
            (&[1, 3, 6, 6], &[3, 1, 3, 3], [2, 2], [1, 1], [2, 2], 3),
        ];
        for (x_shape, w_shape, stride, padding, dilation, groups) in cases {
            let given = conv_attrs(stride, padding, dilation, groups);
            let inputs = [rand(x_shape, 24), rand(w_shape, 25)];
            grad_check(OpKind::Conv2d, &given, &inputs, &[(0, "x"), (1, "w")], &|xs, dy| {
                run(OpKind::Conv2dBackward, &given, &[dy.clone(), xs[0].clone(), xs[1].clone()])
            });
        }
    }

    #[test]
    fn grad_conv3d() {
        // (x shape, w shape, stride, padding, dilation, groups): plain, strided and padded
        // per dimension, dilated, grouped.
        type Case<'a> = (&'a [usize], &'a [usize], [i64; 3], [i64; 3], [i64; 3], i64);
        let cases: [Case; 3] = [
            (&[2, 2, 3, 4, 4], &[3, 2, 2, 3, 3], [1, 2, 1], [0, 1, 1], [1, 1, 1], 1),
            (&[1, 2, 5, 3, 4], &[2, 2, 2, 2, 2], [2, 1, 1], [1, 0, 1], [2, 1, 2], 1),
            (&[1, 4, 3, 3, 3], &[2, 2, 3, 1, 2], [1, 1, 2], [1, 1, 0], [1, 2, 1], 2),
        ];
        for (x_shape, w_shape, stride, padding, dilation, groups) in cases {
            let given = [
                ("stride", ints(&stride)),
                ("padding", ints(&padding)),
                ("dilation", ints(&dilation)),
                ("groups", Attr::Int(groups)),
            ];
            let inputs = [rand(x_shape, 44), rand(w_shape, 45)];
            grad_check(OpKind::Conv3d, &given, &inputs, &[(0, "x"), (1, "w")], &|xs, dy| {
                run(OpKind::Conv3dBackward, &given, &[dy.clone(), xs[0].clone(), xs[1].clone()])
            });
        }
    }

    #[test]
    fn conv3d_of_depth_one_is_conv2d_and_each_depth_tap_a_conv2d() {
        // Depth 1 (D = T = 1): conv2d bit for bit.
        let (x, w) = (rand(&[2, 4, 5, 6], 50), rand(&[6, 2, 3, 2], 51));
        let flat = conv_attrs([2, 1], [1, 1], [1, 2], 2);
        let deep = [("stride", ints(&[1, 2, 1])), ("padding", ints(&[0, 1, 1])), ("dilation", ints(&[1, 1, 2])), ("groups", Attr::Int(2))];
        let depth = |t: &Dense| Dense::new([&t.shape[..2], &[1], &t.shape[2..]].concat(), t.data.clone());
        let y2 = run(OpKind::Conv2d, &flat, &[x.clone(), w.clone()]).remove(0);
        let y3 = run(OpKind::Conv3d, &deep, &[depth(&x), depth(&w)]).remove(0);
        assert_eq!(y3.data, y2.data);
        assert_eq!(y3.shape, [&y2.shape[..2], &[1], &y2.shape[2..]].concat());
        // Depth 3, kernel depth 2, stride 1, no padding: output depth o is the sum over taps t
        // of conv2d(x at depth o + t, w at tap t).
        let (x, w) = (rand(&[1, 2, 3, 4, 4], 52), rand(&[3, 2, 2, 3, 3], 53));
        let given = [("padding", ints(&[0, 1, 1]))];
        let y = run(OpKind::Conv3d, &given, &[x.clone(), w.clone()]).remove(0);
        assert_eq!(y.shape, [1, 3, 2, 4, 4]);
        let plane = |t: &Dense, d: usize| {
            let (c, size) = (t.shape[1], t.shape[3] * t.shape[4]);
            let data = (0..t.shape[0] * c).flat_map(|bc| t.data[(bc * t.shape[2] + d) * size..][..size].to_vec()).collect();
            Dense::new(vec![t.shape[0], c, t.shape[3], t.shape[4]], data)
        };
        for o in 0..2 {
            let sum: Vec<f64> = (0..2)
                .map(|t| run(OpKind::Conv2d, &conv_attrs([1, 1], [1, 1], [1, 1], 1), &[plane(&x, o + t), plane(&w, t)]).remove(0))
                .fold(vec![0.0; 48], |acc, y| acc.iter().zip(&y.data).map(|(a, b)| a + b).collect());
            assert_close(&plane(&y, o), &sum, 1e-12);
        }
    }

    fn grid_attrs(mode: &str, padding: &str, align_corners: bool) -> Vec<(&'static str, Attr)> {
        vec![
            ("mode", Attr::Str(mode.into())),
            ("padding_mode", Attr::Str(padding.into())),
            ("align_corners", Attr::Bool(align_corners)),
        ]
    }

    /// Grid coordinates on a coarse binary lattice (multiples of 2^-6), so that the sample
    /// positions, their neighbours a finite-difference step 2^-8 away and the float32
    /// bilinear weights are all exact; drawn again where a position lies near a pixel
    /// boundary, where the sampling is not smooth.
    fn lattice_grid(shape: &[usize], seed: u64, size: [usize; 2], align_corners: bool) -> Dense {
        let mut grid = rand(shape, seed);
        for (i, g) in grid.data.iter_mut().enumerate() {
            let size = size[1 - i % 2] as f64;
            let position = |g: f64| if align_corners { (g + 1.0) / 2.0 * (size - 1.0) } else { ((g + 1.0) * size - 1.0) / 2.0 };
            let mut k = (*g * 1.3 * 64.0).round();
            while [0.5, 0.0].iter().any(|&half| ((position(k / 64.0) - half).fract().abs() - 0.5).abs() > 0.48) {
                k += 1.0;
            }
            *g = k / 64.0;
        }
        grid
    }

    #[test]
    fn grad_grid_sample() {
        // The gradient of x by finite differences (y is linear in x); the grid's by exact
        // central differences on lattice coordinates (bilinear sampling is linear in each
        // coordinate inside a pixel cell): bilinear and nearest, zeros and border, both
        // align_corners, positions outside the image among them (|g| up to 1.3).
        for (i, (mode, padding, align)) in
            [("bilinear", "zeros", false), ("bilinear", "border", true), ("bilinear", "zeros", true), ("nearest", "border", false)]
                .into_iter()
                .enumerate()
        {
            let given = grid_attrs(mode, padding, align);
            let x = rand(&[2, 3, 4, 5], 60 + i as u64);
            let grid = lattice_grid(&[2, 3, 2, 2], 70 + i as u64, [4, 5], align);
            grad_check(OpKind::GridSample, &given, &[x.clone(), grid.clone()], &[(0, "x")], &|xs, dy| {
                vec![run(OpKind::GridSampleBackward, &given, &[dy.clone(), xs[0].clone(), xs[1].clone()]).remove(0)]
            });
            let y = run(OpKind::GridSample, &given, &[x.clone(), grid.clone()]).remove(0);
            let dy = rand(&y.shape, 71);
            let dgrid = run(OpKind::GridSampleBackward, &given, &[dy.clone(), x.clone(), grid.clone()]).remove(1);
            let h = 1.0 / 256.0;
            for k in 0..grid.data.len() {
                let loss = |offset: f64| {
                    let mut moved = grid.clone();
                    moved.data[k] += offset;
                    dot(&run(OpKind::GridSample, &given, &[x.clone(), moved]).remove(0), &dy)
                };
                let numeric = (loss(h) - loss(-h)) / (2.0 * h);
                assert!((dgrid.data[k] - numeric).abs() < 1e-9, "{mode} {padding} {align}: dgrid[{k}] {} vs {numeric}", dgrid.data[k]);
            }
            if mode == "nearest" {
                assert!(dgrid.data.iter().all(|&g| g == 0.0));
            } else {
                assert!(dgrid.data.iter().filter(|&&g| g != 0.0).count() > dgrid.data.len() / 2, "{:?}", dgrid.data);
            }
        }
    }

    #[test]
    fn grid_sample_reads_pixels_at_the_grid_positions() {
        // x [1, 1, 2, 3] = 0..6; with align_corners the grid's -1 and 1 are the corner
        // pixels' centres: (-1, -1) reads x[0, 0], (1, 1) x[1, 2], (0, 0) the mean of x[.., 0..2,
        // 1] (rows 0 and 1 at column 1); (1.5, 0) lies half a pixel past the last column: with
        // zeros its outside neighbours read 0 (half of column 2's mean), with border it is
        // column 2.
        let x = t(&[1, 1, 2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let grid = t(&[1, 1, 4, 2], &[-1.0, -1.0, 1.0, 1.0, 0.0, 0.0, 1.5, 0.0]);
        let zeros = run(OpKind::GridSample, &grid_attrs("bilinear", "zeros", true), &[x.clone(), grid.clone()]).remove(0);
        assert_eq!(zeros.data, [0.0, 5.0, 2.5, 1.75]);
        let border = run(OpKind::GridSample, &grid_attrs("bilinear", "border", true), &[x.clone(), grid.clone()]).remove(0);
        assert_eq!(border.data, [0.0, 5.0, 2.5, 3.5]);
        // Without align_corners -1 and 1 are the image's edges: (-1, -1) is a corner pixel's
        // corner, a quarter of it inside.
        let edges = run(OpKind::GridSample, &grid_attrs("bilinear", "zeros", false), &[x.clone(), grid.clone()]).remove(0);
        assert_eq!(edges.data[1], 5.0 * 0.25);
        // Nearest rounds half to even: (0, 0) with align_corners is column 1, row 0.5 → 0;
        // (1.5, 0) is column 2.5 → 2.
        let nearest = run(OpKind::GridSample, &grid_attrs("nearest", "zeros", true), &[x, grid]).remove(0);
        assert_eq!(nearest.data, [0.0, 5.0, 1.0, 2.0]);
    }

    #[test]
    fn grad_conv_transpose2d() {
        // (x shape, w shape, stride, padding, output_padding, dilation, groups)
        type Case<'a> = (&'a [usize], &'a [usize], [i64; 2], [i64; 2], [i64; 2], [i64; 2], i64);
        let cases: [Case; 4] = [
            (&[2, 2, 3, 3], &[2, 3, 3, 3], [2, 2], [1, 1], [1, 1], [1, 1], 1),
            (&[1, 4, 3, 2], &[4, 1, 2, 3], [1, 2], [0, 1], [0, 1], [2, 1], 2),
            (&[1, 3, 3, 3], &[3, 1, 3, 3], [2, 2], [1, 1], [1, 0], [2, 2], 3),
            (&[1, 2, 2, 2], &[2, 2, 2, 2], [3, 1], [0, 0], [2, 0], [1, 1], 1),
        ];
        for (x_shape, w_shape, stride, padding, output_padding, dilation, groups) in cases {
            let mut given = conv_attrs(stride, padding, dilation, groups);
            given.push(("output_padding", ints(&output_padding)));
            let inputs = [rand(x_shape, 31), rand(w_shape, 32)];
            grad_check(OpKind::ConvTranspose2d, &given, &inputs, &[(0, "x"), (1, "w")], &|xs, dy| {
                run(OpKind::ConvTranspose2dBackward, &given, &[dy.clone(), xs[0].clone(), xs[1].clone()])
            });
        }
    }

    #[test]
    fn grad_max_pool2d() {
        // Distinct values, at least 0.01 apart, so no window has a tie within ±h.
        let distinct = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            let data = (0..n).map(|i| ((i * 37 + 11) % n) as f64 * 0.01 - 0.2).collect();
            Dense::new(shape.to_vec(), data)
        };
        let cases: [([i64; 2], [i64; 2], [i64; 2]); 3] =
            [([3, 3], [2, 2], [1, 1]), ([2, 2], [2, 2], [0, 0]), ([2, 3], [1, 2], [1, 1])];
        for (kernel, stride, padding) in cases {
            let given = [("kernel", ints(&kernel)), ("stride", ints(&stride)), ("padding", ints(&padding))];
            grad_check(OpKind::MaxPool2d, &given, &[distinct(&[2, 2, 5, 5])], &[(0, "x")], &|xs, dy| {
                run(OpKind::MaxPool2dBackward, &given, &[dy.clone(), xs[0].clone()])
            });
        }
    }

    #[test]
    fn grad_cross_entropy() {
        let logits = Dense::new(vec![4, 5], rand(&[4, 5], 26).data.iter().map(|v| v * 3.0).collect());
        let labels = t(&[4], &[0.0, 4.0, 2.0, 2.0]);
        grad_check(OpKind::CrossEntropy, &[], &[logits.clone(), labels], &[(0, "logits")], &|xs, dy| {
            run(OpKind::CrossEntropyBackward, &[], &[dy.clone(), xs[0].clone(), xs[1].clone()])
        });
        // Ignored rows (the default -100, and a class as ignore_index) with label smoothing.
        for (ignore_index, labels) in [(-100, [0.0, -100.0, 2.0, -100.0]), (2, [0.0, 4.0, 2.0, 2.0])] {
            for smoothing in [0.1, 1.0] {
                let given = [("ignore_index", Attr::Int(ignore_index)), ("label_smoothing", Attr::Float(smoothing))];
                let inputs = [logits.clone(), t(&[4], &labels)];
                grad_check(OpKind::CrossEntropy, &given, &inputs, &[(0, "logits")], &|xs, dy| {
                    run(OpKind::CrossEntropyBackward, &given, &[dy.clone(), xs[0].clone(), xs[1].clone()])
                });
            }
        }
    }

    /// Adaptive pooling with overlapping bins (5 → 3, 4 → 3) and with bins larger than one
    /// pixel in both directions; nearest resizing up by a non-integer factor and down.
    #[test]
    fn grad_resampling() {
        for (x_shape, out) in [([2, 2, 5, 4], [3, 3]), ([1, 3, 4, 6], [2, 3]), ([1, 1, 3, 2], [5, 7])] {
            let given = [("output_size", ints(&out))];
            let shape: Vec<i64> = x_shape.iter().map(|&d| d as i64).collect();
            let back = [("shape", ints(&shape)), ("output_size", ints(&out))];
            for (forward, backward) in [
                (OpKind::AdaptiveAvgPool2d, OpKind::AdaptiveAvgPool2dBackward),
                (OpKind::UpsampleNearest2d, OpKind::UpsampleNearest2dBackward),
            ] {
                grad_check(forward, &given, &[rand(&x_shape, 40)], &[(0, "x")], &|_, dy| {
                    run(backward, &back, std::slice::from_ref(dy))
                });
            }
        }
    }

    #[test]
    fn grad_bce_with_logits() {
        let logits = Dense::new(vec![3, 4], rand(&[3, 4], 41).data.iter().map(|v| v * 4.0).collect());
        let targets = Dense::new(vec![3, 4], rand(&[3, 4], 42).data.iter().map(|v| v.abs()).collect());
        grad_check(OpKind::BceWithLogits, &[], &[logits, targets], &[(0, "logits")], &|xs, dy| {
            run(OpKind::BceWithLogitsBackward, &[], &[dy.clone(), xs[0].clone(), xs[1].clone()])
        });
    }

    /// where's da and db, and masked_fill's dx, as autodiff writes them: masked_fill(dy,
    /// mask, 0) (and where(cond, dy, 0)), summed over broadcast dimensions.
    #[test]
    fn grad_where_and_masked_fill() {
        let cond = t(&[2, 1], &[1.0, 0.0]);
        let inputs = [cond.clone(), rand(&[2, 3], 43), rand(&[3], 44)];
        grad_check(OpKind::Where, &[], &inputs, &[(1, "a"), (2, "b")], &|xs, dy| {
            let zero = t(&[], &[0.0]);
            let da = run(OpKind::Where, &[], &[xs[0].clone(), dy.clone(), zero]).remove(0);
            let db = run(OpKind::MaskedFill, &[("value", Attr::Float(0.0))], &[dy.clone(), xs[0].clone()]).remove(0);
            vec![da, run(OpKind::Sum, &[("axes", ints(&[0]))], &[db]).remove(0)]
        });
        let given = [("value", Attr::Float(-5.0))];
        let inputs = [rand(&[2, 3], 45), t(&[3], &[0.0, 1.0, 0.0])];
        grad_check(OpKind::MaskedFill, &given, &inputs, &[(0, "x")], &|xs, dy| {
            run(OpKind::MaskedFill, &[("value", Attr::Float(0.0))], &[dy.clone(), xs[1].clone()])
        });
    }
}
