//! Lowering: each op of a planned step as kernel launches and cuBLAS calls over views.
//!
//! [`lower_op`] turns one op into [`Command`]s: which kernel, its grid and block, and its
//! arguments (views of the op's values at their planned offsets, sizes, attributes, and
//! scratch in the workspace). Every choice here is a pure function of shapes, so the launch
//! plan of a whole step can be built and checked without a GPU. The kernels themselves
//! are in `kernels/`; `source::kernels_for` lists which ones each op may use. A fused op's
//! kernel is generated for its body (`generate.rs`) as it is lowered, and an elementwise
//! op's for its one element function.
//!
//! Launch shapes: elementwise ops use grid-stride launches ([`grid_1d`]); line ops one block
//! per line ([`line_threads`] threads); attention one block per tile of query rows (the
//! forward, dq) or keys (dk, dv) and per 64 columns of its output; reductions blocks of
//! 32×8 threads; implicit GEMM 256 threads per 64×64 tile, once per group of a grouped
//! convolution. Multi-kernel ops (norm gradients, batch statistics, reductions and
//! convolutions split over many blocks) pass partial results through [`Scratch`] in the
//! workspace, always added in a fixed order.

use crate::exec::cuda::CudaError;
use crate::exec::cuda::gemm::{self, Igemm, SPLIT_BUDGET};
use crate::exec::cuda::generate::{self, ElementStep, Generated};
use crate::exec::cuda::source::*;
use crate::exec::cuda::view::{
    Addr, Arg, Command, Geom, Kernel, Launch, MAX_GRID_YZ, Scratch, View, grid_1d, line_blocks, line_threads,
};
use crate::index::{IndexVec, ValueId};
use crate::ir::graph::Op;
use crate::ir::ops::{
    AdamAttrs, AttentionAttrs, Attrs, Comparison, Conv3dAttrs, ConvAttrs, CrossEntropyAttrs, FusedBody, Norm, GridSampleAttrs, InnerOp,
    LinearCrossEntropyWorkspace, MatmulAttrs, OpKind, Operand, PoolAttrs,
};
use crate::ir::types::{DType, TensorType};

/// Choices the lowering leaves to its caller.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LowerOptions {
    /// Convolutions (and matmuls cuBLAS cannot take) accumulate in float (`igemm_f32`)
    /// rather than double (`igemm`): faster, further from the CPU reference (kernels/conv.cu).
    pub conv_f32: bool,
    /// f16/bf16 attention runs on the float kernels, not on tensor cores (`mma.sync` needs
    /// compute capability 8.0; run.rs sets this for older devices).
    pub float_attention: bool,
}

/// How to split `rows` (reduced) elements among groups of blocks, given `col_blocks`
/// blocks per group, at least `min_rows` rows per group and `bytes_per_group` of partial
/// results: `(groups, rows per group)`. Aims at about 1024 blocks in all.
pub fn row_groups(col_blocks: u64, rows: u64, min_rows: u64, bytes_per_group: u64) -> (u64, u64) {
    if rows == 0 {
        return (1, 1);
    }
    let want = 1024u64.div_ceil(col_blocks.max(1));
    let by_rows = rows.div_ceil(min_rows.max(1));
    let by_budget = (SPLIT_BUDGET / bytes_per_group.max(1)).max(1);
    let groups = want.min(by_rows).min(by_budget).clamp(1, MAX_GRID_YZ);
    let chunk = rows.div_ceil(groups);
    (rows.div_ceil(chunk), chunk)
}

fn launch(kernel: impl Into<Kernel>, grid: [u32; 3], block: [u32; 3], args: Vec<Arg>) -> Command {
    Command::Launch(Launch { kernel: kernel.into(), grid, block, args })
}

/// A grid-stride launch over `n` elements (none for `n = 0`).
fn elementwise(kernel: impl Into<Kernel>, n: u64, args: Vec<Arg>) -> Vec<Command> {
    if n == 0 {
        return Vec::new();
    }
    let (grid, block) = grid_1d(n);
    vec![launch(kernel, grid, block, args)]
}

fn t(view: &View) -> Arg {
    Arg::Tensor(view.clone())
}

fn int(x: u64) -> Arg {
    Arg::I64(x as i64)
}

/// A size as a kernel's `int` (conv and pooling geometry).
fn i32_of(x: u64, what: &str) -> Result<i32, CudaError> {
    i32::try_from(x).map_err(|_| CudaError::Unsupported(format!("{what} = {x} does not fit the kernels' 32-bit sizes")))
}

/// The commands of `op`; `views` holds every value's view; scratch comes from `scratch`; a
/// fused op's kernel is generated into (or found in) `generated`.
pub fn lower_op(
    op: &Op,
    views: &IndexVec<ValueId, View>,
    options: LowerOptions,
    scratch: &mut Scratch,
    generated: &mut Generated,
) -> Result<Vec<Command>, CudaError> {
    use OpKind::*;
    let x = |i: usize| &views[op.inputs[i]];
    let y = |i: usize| &views[op.outputs[i]];
    let attrs = &op.attrs;
    Ok(match op.kind {
        // The elementwise ops: a kernel generated for the one element function
        // (`element_code`) as for a fused body of one op, vectorized where the data allow.
        Add | Sub | Mul | Div | Compare | ReluBackward | GeluBackward | SiluBackward | SigmoidBackward | TanhBackward
        | HardswishBackward | HardsigmoidBackward | CompareScalar | AddScalar | MulScalar | PowScalar | Neg | Sin | Erf
        | Cos | Exp | Log | Sqrt | Rsqrt | Relu | Gelu | Silu | Sigmoid | Tanh | Hardswish | Hardsigmoid | Contiguous
        | Cast => {
            let (code, s) = element_code(op.kind, attrs).expect("an elementwise op");
            let inputs: Vec<&View> = (0..op.inputs.len()).map(x).collect();
            elementwise_op(op.kind.name(), code, s, y(0), &inputs, generated)
        }
        Sgd => elementwise_op(op.kind.name(), OP_SGD, attrs.float("lr"), y(0), &[x(0), x(1)], generated),
        Fill => elementwise(FILL, y(0).numel(), vec![t(y(0)), Arg::F64(attrs.float("value")), Arg::F64(attrs.float("step"))]),
        CausalMask => {
            let last = *y(0).shape.last().unwrap_or(&1);
            elementwise(CAUSAL_MASK, y(0).numel(), vec![t(y(0)), t(x(0)), int(last), Arg::F64(attrs.float("value"))])
        }
        Softmax => lines(SOFTMAX, y(0), &[x(0)], attrs.int("axis"), &[]),
        Cumsum => lines(CUMSUM, y(0), &[x(0)], attrs.int("axis"), &[Arg::I32(i32::from(attrs.bool("reverse")))]),
        SoftmaxBackward => lines(SOFTMAX_BACKWARD, y(0), &[x(0), x(1)], attrs.int("axis"), &[]),
        Matmul => {
            let MatmulAttrs { transpose_a: ta, transpose_b: tb } = MatmulAttrs::of(attrs);
            gemm::matmul(x(0), x(1), ta, tb, y(0), options.conv_f32, scratch)
        }
        Attention => {
            let attention_attrs = AttentionAttrs::of(attrs);
            let out = heads_first(y(0), &attention_attrs);
            attention([&out, y(1)], [x(0), x(1), x(2)], Extras::NONE, &attention_attrs, options)
        }
        MaskedAttention | DropoutAttention => {
            let attention_attrs = AttentionAttrs::of(attrs);
            let out = heads_first(y(0), &attention_attrs);
            let extras = Extras { bias: Some(x(3)), seed: (op.kind == DropoutAttention).then(|| x(4)) };
            attention([&out, y(1)], [x(0), x(1), x(2)], extras, &attention_attrs, options)
        }
        AttentionBackward => {
            let attention_attrs = AttentionAttrs::of(attrs);
            let (dout, out) = (heads_first(x(0), &attention_attrs), heads_first(x(4), &attention_attrs));
            let saved = [&dout, x(1), x(2), x(3), &out, x(5)];
            attention_backward([y(0), y(1), y(2)], saved, Extras::NONE, &attention_attrs, options, scratch)
        }
        MaskedAttentionBackward => {
            let attention_attrs = AttentionAttrs::of(attrs);
            let (dout, out) = (heads_first(x(0), &attention_attrs), heads_first(x(5), &attention_attrs));
            let saved = [&dout, x(1), x(2), x(3), &out, x(6)];
            let extras = Extras { bias: Some(x(4)), seed: None };
            attention_backward([y(0), y(1), y(2)], saved, extras, &attention_attrs, options, scratch)
        }
        DropoutAttentionBackward => {
            let attention_attrs = AttentionAttrs::of(attrs);
            let (dout, out) = (heads_first(x(0), &attention_attrs), heads_first(x(6), &attention_attrs));
            let saved = [&dout, x(1), x(2), x(3), &out, x(7)];
            let extras = Extras { bias: Some(x(4)), seed: Some(x(5)) };
            attention_backward([y(0), y(1), y(2)], saved, extras, &attention_attrs, options, scratch)
        }
        AttentionBiasBackward => {
            let attention_attrs = AttentionAttrs::of(attrs);
            let (dout, out) = (heads_first(x(0), &attention_attrs), heads_first(x(5), &attention_attrs));
            attention_bias_backward(y(0), [&dout, x(1), x(2), x(3), x(4), &out, x(6)], None, &attention_attrs)
        }
        DropoutAttentionBiasBackward => {
            let attention_attrs = AttentionAttrs::of(attrs);
            let (dout, out) = (heads_first(x(0), &attention_attrs), heads_first(x(6), &attention_attrs));
            attention_bias_backward(y(0), [&dout, x(1), x(2), x(3), x(4), &out, x(7)], Some(x(5)), &attention_attrs)
        }
        Sum => reduce(y(0), x(0), attrs.ints("axes"), false, scratch),
        Mean => reduce(y(0), x(0), attrs.ints("axes"), true, scratch),
        Reshape | Detach | Transpose | Expand | Slice | Select => Vec::new(),
        SliceBackward => {
            // One pass: dy inside the slice, zeros around it.
            let (out, axis) = (y(0), resolve_axis(attrs.int("axis"), y(0).rank()));
            let (_, n, inner) = split_shape(&out.shape, axis);
            let [start, step] = ["start", "step"].map(|name| int(attrs.int(name) as u64));
            elementwise(SLICE_BACKWARD, out.numel(), vec![t(out), t(x(0)), int(n), int(inner), start, step, int(x(0).shape[axis])])
        }
        SliceScatter => {
            // x copied (not when written in place over x: already there), then src copied
            // into the slice.
            let (out, axis) = (y(0), resolve_axis(attrs.int("axis"), y(0).rank()));
            let slice = strided_part(out, axis, attrs.int("start") as u64, x(1).shape[axis], attrs.int("step") as u64);
            let mut commands = if out == x(0) { Vec::new() } else { unary(OP_COPY, out, x(0), 0.0) };
            commands.extend(unary(OP_COPY, &slice, x(1), 0.0));
            commands
        }
        Extern | ExternView | ExternBackward => {
            return Err(CudaError::Unsupported(format!("`{}` is another framework's op ({})", op.kind, attrs.str("target"))));
        }
        Cat => {
            // Each input copied into its part of the output.
            let (out, axis) = (y(0), resolve_axis(attrs.int("axis"), y(0).rank()));
            let mut start = 0;
            let mut commands = Vec::new();
            for input in op.inputs.iter().map(|&v| &views[v]) {
                commands.extend(unary(OP_COPY, &strided_part(out, axis, start, input.shape[axis], 1), input, 0.0));
                start += input.shape[axis];
            }
            commands
        }
        Embedding => {
            let (v, d) = (x(0).shape[0], x(0).shape[1]);
            elementwise(EMBEDDING, y(0).numel(), vec![t(y(0)), t(x(0)), t(x(1)), int(d), int(v)])
        }
        EmbeddingBackward => embedding_backward(y(0), x(0), x(1), None),
        EmbeddingBag => {
            let (v, d) = (x(0).shape[0], x(0).shape[1]);
            let mean = Arg::I32(i32::from(attrs.str("mode") == "mean"));
            elementwise(EMBEDDING_BAG, y(0).numel(), vec![t(y(0)), t(x(0)), t(x(1)), t(x(2)), int(x(1).numel()), int(d), int(v), mean])
        }
        EmbeddingBagBackward => embedding_backward(y(0), x(0), x(1), Some((x(2), attrs.str("mode") == "mean"))),
        Argmax => {
            // One thread a line of x along the axis; y holds a line's answer at the line's
            // row-major position (keepdim or not, the same order).
            let (outer, n, inner) = split_shape(&x(0).shape, resolve_axis(attrs.int("axis"), x(0).rank()));
            elementwise(ARGMAX, outer * inner, vec![t(y(0)), t(x(0)), int(outer * inner), int(n), int(inner)])
        }
        Topk => {
            // One thread a line of x along the axis, writing its k values and positions.
            let (outer, n, inner) = split_shape(&x(0).shape, resolve_axis(attrs.int("axis"), x(0).rank()));
            let (k, largest) = (attrs.int("k"), Arg::I32(i32::from(attrs.bool("largest"))));
            elementwise(TOPK, outer * inner, vec![t(y(0)), t(y(1)), t(x(0)), int(outer * inner), int(n), int(inner), int(k as u64), largest])
        }
        Gather => {
            // x narrowed to index's shape but along the axis: out and it are then
            // [outer, n, inner] and [outer, m, inner].
            let a = resolve_axis(attrs.int("axis"), x(0).rank());
            let narrowed = narrowed_to(x(0), &x(1).shape, a);
            let (_, n, inner) = split_shape(&y(0).shape, a);
            let args = vec![t(y(0)), t(&narrowed), t(x(1)), int(n), int(inner), int(narrowed.shape[a])];
            elementwise(GATHER, y(0).numel(), args)
        }
        ScatterAdd => {
            // y = x (a copy, unless the plan put y in x's bytes), then each element of y
            // narrowed to index's shape adds the src its index picks along the axis.
            let (out, a) = (y(0), resolve_axis(attrs.int("axis"), y(0).rank()));
            let narrowed = narrowed_to(out, &x(1).shape, a);
            let (_, n, inner) = split_shape(&x(1).shape, a);
            let mut commands = unary(OP_COPY, out, x(0), 0.0);
            let args = vec![t(&narrowed), t(x(2)), t(x(1)), int(n), int(inner), int(narrowed.shape[a])];
            commands.extend(elementwise(SCATTER_ADD, narrowed.numel(), args));
            commands
        }
        GatherBackward => {
            // Zeros, then each element of dx narrowed to index's shape summing the dy its
            // index picks along the axis.
            let (dx, a) = (y(0), resolve_axis(attrs.int("axis"), y(0).rank()));
            let narrowed = narrowed_to(dx, &x(1).shape, a);
            let (_, n, inner) = split_shape(&x(1).shape, a);
            let mut commands = elementwise(FILL, dx.numel(), vec![t(dx), Arg::F64(0.0), Arg::F64(0.0)]);
            let args = vec![t(&narrowed), t(x(0)), t(x(1)), int(n), int(inner), int(narrowed.shape[a])];
            commands.extend(elementwise(GATHER_BACKWARD, narrowed.numel(), args));
            commands
        }
        LayerNorm => layer_norm(y(0), x(0), x(1), x(2), attrs.float("eps")),
        LayerNormBackward => {
            norm_backward(&LAYER_NORM_KERNELS, &[y(0), y(1), y(2)], x(0), x(1), x(2), attrs.float("eps"), scratch)
        }
        RmsNorm => rms_norm(y(0), x(0), x(1), attrs.float("eps")),
        RmsNormBackward => {
            norm_backward(&RMS_NORM_KERNELS, &[y(0), y(1)], x(0), x(1), x(2), attrs.float("eps"), scratch)
        }
        BatchNorm => batch_norm(y(0), x(0), x(1), x(2), attrs.float("eps"), scratch),
        BatchNormBackward => batch_norm_backward([y(0), y(1), y(2)], x(0), x(1), x(2), attrs.float("eps"), scratch),
        BatchNormStats => batch_norm_stats([y(0), y(1)], x(0), attrs.int("correction"), scratch),
        // conv2d: y from x and w; its backward: dx (backward data) and dw (backward weight).
        Conv2d => {
            let g = conv_geom(x(0), x(1), y(0), &ConvAttrs::of(attrs))?;
            gemm::igemm(conv_igemm(MODE_CONV_FWD, g, ConvAttrs::of(attrs).groups, options)?, y(0), x(1), x(0), scratch)
        }
        Conv2dBackward => {
            let (dy, xv, w) = (x(0), x(1), x(2));
            let g = conv_geom(xv, w, dy, &ConvAttrs::of(attrs))?;
            let mut commands = gemm::igemm(conv_igemm(MODE_CONV_BWD_DATA, g, ConvAttrs::of(attrs).groups, options)?, y(0), w, dy, scratch);
            commands.extend(gemm::igemm(conv_igemm(MODE_CONV_BWD_WEIGHT, g, ConvAttrs::of(attrs).groups, options)?, y(1), dy, xv, scratch));
            commands
        }
        // grid_sample: a thread per y element; its backward a thread per dx plane and one
        // per grid position (resample.cu).
        GridSample => {
            let modes = grid_modes(&GridSampleAttrs::of(attrs));
            elementwise(GRID_SAMPLE, y(0).numel(), [vec![t(y(0)), t(x(0)), t(x(1))], modes.to_vec()].concat())
        }
        GridSampleBackward => {
            let (dy, xv, grid) = (x(0), x(1), x(2));
            let modes = grid_modes(&GridSampleAttrs::of(attrs));
            let planes = xv.shape[0] * xv.shape[1];
            let positions = grid.numel() / 2;
            let mut commands = elementwise(GRID_SAMPLE_BACKWARD_DATA, planes, [vec![t(y(0)), t(dy), t(grid)], modes.to_vec()].concat());
            let args = [vec![t(y(1)), t(dy), t(xv), t(grid)], modes.to_vec()].concat();
            commands.extend(elementwise(GRID_SAMPLE_BACKWARD_GRID, positions, args));
            commands
        }
        // conv3d: direct kernels, one thread per element written (conv.cu).
        Conv3d => conv3d(CONV3D, y(0), x(0), x(1), &Conv3dAttrs::of(attrs)),
        Conv3dBackward => {
            let (dy, xv, w) = (x(0), x(1), x(2));
            let mut commands = conv3d(CONV3D_BACKWARD_DATA, y(0), dy, w, &Conv3dAttrs::of(attrs));
            commands.extend(conv3d(CONV3D_BACKWARD_WEIGHT, y(1), dy, xv, &Conv3dAttrs::of(attrs)));
            commands
        }
        // conv_transpose2d is conv2d's index space run the other way (kernels/nn.rs): its y
        // is conv2d's input side and its x conv2d's output side, with the same weight. So its
        // forward, y[b,k',h,w] = Σ x[b,k,p,q]·w[k,k'',r,s] over the (p, r) with
        // p·sh + r·dh − ph = h, is conv2d's backward data with dy := x; its backward data,
        // dx[b,k,p,q] = Σ dy[b,k',p·sh + r·dh − ph, ...]·w[k,k'',r,s], is conv2d's forward of dy
        // (on x's positions: P and Q come from x, which matters when output_padding ≥ stride);
        // and its weight gradient, dw[k,k'',r,s] = Σ_{b,p,q} x[b,k,p,q]·dy[b,k',p·sh + r·dh − ph,
        // ...], is conv2d's weight gradient with x in dy's role and dy in x's.
        ConvTranspose2d => {
            let g = conv_geom(y(0), x(1), x(0), &ConvAttrs::of(attrs))?;
            gemm::igemm(conv_igemm(MODE_CONV_BWD_DATA, g, ConvAttrs::of(attrs).groups, options)?, y(0), x(1), x(0), scratch)
        }
        ConvTranspose2dBackward => {
            let (dy, xv, w) = (x(0), x(1), x(2));
            let g = conv_geom(dy, w, xv, &ConvAttrs::of(attrs))?;
            let mut commands = gemm::igemm(conv_igemm(MODE_CONV_FWD, g, ConvAttrs::of(attrs).groups, options)?, y(0), w, dy, scratch);
            commands.extend(gemm::igemm(conv_igemm(MODE_CONV_BWD_WEIGHT, g, ConvAttrs::of(attrs).groups, options)?, y(1), xv, dy, scratch));
            commands
        }
        MaxPool2d => {
            let g = pool_geom(x(0), y(0), &PoolAttrs::of(attrs))?;
            elementwise(MAX_POOL2D, y(0).numel(), vec![t(y(0)), t(x(0)), Arg::Geom(g)])
        }
        MaxPool2dBackward => {
            let g = pool_geom(x(1), x(0), &PoolAttrs::of(attrs))?;
            elementwise(MAX_POOL2D_BACKWARD, y(0).numel(), vec![t(y(0)), t(x(0)), t(x(1)), Arg::Geom(g)])
        }
        CrossEntropy => cross_entropy(y(0), x(0), x(1), CeAttrs::read(attrs), scratch),
        CrossEntropyBackward => cross_entropy_backward(y(0), x(0), x(1), x(2), CeAttrs::read(attrs), scratch),
        LinearCrossEntropy => {
            let outputs = [y(0), y(1), y(2), y(3)];
            linear_cross_entropy(outputs, x(0), x(1), x(2), CeAttrs::read(attrs), attrs.int("rows") as u64, options, scratch)?
        }
        SgdMomentum => {
            let args = vec![
                t(y(0)),
                t(y(1)),
                t(x(0)),
                t(x(1)),
                t(x(2)),
                Arg::F64(attrs.float("lr")),
                Arg::F64(attrs.float("momentum")),
            ];
            elementwise(SGD_MOMENTUM, y(0).numel(), args)
        }
        Random => {
            let bits = y(0).dtype.significand_bits().expect("random's type rule takes float dtypes");
            let normal = Arg::I32(i32::from(attrs.bool("normal")));
            let args = vec![t(y(0)), t(x(0)), Arg::I64(attrs.int("stream")), normal, Arg::I32(bits as i32)];
            elementwise(RANDOM_FILL, y(0).numel(), args)
        }
        Dropout | DropoutBackward => {
            let args = vec![t(y(0)), t(x(0)), t(x(1)), Arg::I64(attrs.int("stream")), Arg::F64(attrs.float("p"))];
            elementwise(DROPOUT, y(0).numel(), args)
        }
        Adam | Adamw => {
            let adam = AdamAttrs::of(attrs);
            let mut args = vec![t(y(0)), t(y(1)), t(y(2)), t(x(0)), t(x(1)), t(x(2)), t(x(3)), t(x(4))];
            args.extend([adam.lr, adam.beta1, adam.beta2, adam.eps, adam.weight_decay].map(Arg::F64));
            elementwise(ADAM, y(0).numel(), args)
        }
        AdaptiveAvgPool2d => resample(ADAPTIVE_AVG_POOL2D, y(0), x(0), x(0), y(0), &[]),
        AdaptiveAvgPool2dBackward => resample(ADAPTIVE_AVG_POOL2D_BACKWARD, y(0), x(0), y(0), x(0), &[]),
        UpsampleNearest2d => resample(UPSAMPLE_NEAREST2D, y(0), x(0), x(0), y(0), &[]),
        UpsampleNearest2dBackward => resample(UPSAMPLE_NEAREST2D_BACKWARD, y(0), x(0), y(0), x(0), &[]),
        UpsampleBilinear2d => {
            resample(UPSAMPLE_BILINEAR2D, y(0), x(0), x(0), y(0), &[Arg::I32(i32::from(attrs.bool("align_corners")))])
        }
        UpsampleBilinear2dBackward => {
            let align = Arg::I32(i32::from(attrs.bool("align_corners")));
            resample(UPSAMPLE_BILINEAR2D_BACKWARD, y(0), x(0), y(0), x(0), &[align])
        }
        BceWithLogits => bce_with_logits(y(0), x(0), x(1), scratch),
        BceWithLogitsBackward => {
            elementwise(BCE_BACKWARD, y(0).numel(), vec![t(y(0)), t(x(0)), t(x(1)), t(x(2))])
        }
        Where => {
            let shape = &y(0).shape;
            let mut args = vec![t(y(0))];
            args.extend((0..3).map(|i| t(&x(i).broadcast_to(shape))));
            elementwise(WHERE_SELECT, y(0).numel(), args)
        }
        MaskedFill => {
            let args = vec![t(y(0)), t(x(0)), t(&x(1).broadcast_to(&y(0).shape)), Arg::F64(attrs.float("value"))];
            elementwise(MASKED_FILL, y(0).numel(), args)
        }
        Fused => {
            let inputs: Vec<&View> = (0..op.inputs.len()).map(x).collect();
            fused(&FusedBody::of(attrs), y(0), &inputs, generated, scratch)?
        }
        FusedNorm => {
            let inputs: Vec<&View> = (0..op.inputs.len()).map(x).collect();
            fused_norm(&FusedBody::of(attrs), Norm::of(attrs), attrs.float("eps"), [y(0), y(1)], &inputs, generated)?
        }
    })
}

/// A fused op: one launch of the kernel generated for its body (`generate.rs`), its inputs
/// as views broadcast to the output's shape; a body that ends with a reduction runs as
/// `sum`/`mean` do ([`reduce`]), its generated kernel computing each element summed.
fn fused(
    body: &FusedBody,
    out: &View,
    inputs: &[&View],
    generated: &mut Generated,
    scratch: &mut Scratch,
) -> Result<Vec<Command>, CudaError> {
    let (elementwise_ops, reduction) = match body.ops.split_last() {
        Some((last, rest)) if body.reduces() => (rest, Some(last)),
        _ => (&body.ops[..], None),
    };
    let steps = element_steps(elementwise_ops)?;
    let text = body.to_string();
    let Some(reduction) = reduction else {
        return Ok(generated_elementwise(&text, &steps, out, inputs, generated));
    };
    // The value summed: its type from the body's rule over the inputs' views.
    let input_types: Vec<TensorType> = inputs.iter().map(|v| TensorType::new(v.dtype, v.shape.clone())).collect();
    let inner = body.types(&input_types.iter().collect::<Vec<_>>()).map_err(CudaError::Unsupported)?;
    let summed = reduction.operands[0];
    let summed_ty = match summed {
        Operand::Input(k) => &input_types[k],
        Operand::Inner(j) => &inner[j],
    };
    let shape = summed_ty.shape.dims().to_vec();
    let kernel = generated.fused_reduction(&text, &steps, summed, inputs.len(), summed_ty.dtype.is_float());
    let (perm, outs, count) = reduced_space(&shape, reduction.attrs.ints("axes"));
    let views: Vec<Arg> = inputs.iter().map(|v| t(&v.broadcast_to(&shape).permuted(&perm))).collect();
    Ok(reduce_launches(kernel, out, views, outs, count, reduction.def.kind == OpKind::Mean, scratch))
}

/// The element functions of a fused body's elementwise inner ops, as a generated kernel
/// computes them.
fn element_steps(inner_ops: &[InnerOp]) -> Result<Vec<ElementStep>, CudaError> {
    inner_ops
        .iter()
        .map(|inner| {
            let (op, scalar) = element_code(inner.def.kind, &inner.attrs)
                .ok_or_else(|| CudaError::Unsupported(format!("{} inside a fused op", inner.def.name)))?;
            Ok(ElementStep { op, scalar, dtype: inner.dtype, operands: inner.operands.clone() })
        })
        .collect()
}

/// A fused_norm: one launch of the kernel generated for its body and norm, a block per row
/// as the norms' own kernels; the body's inputs as views broadcast to its value's shape.
fn fused_norm(
    body: &FusedBody,
    norm: Norm,
    eps: f64,
    [out, y]: [&View; 2],
    inputs: &[&View],
    generated: &mut Generated,
) -> Result<Vec<Command>, CudaError> {
    let (rows, d) = rows_of(out);
    if rows * d == 0 {
        return Ok(Vec::new());
    }
    let (body_inputs, params) = inputs.split_at(inputs.len() - norm.params());
    let steps = element_steps(&body.ops)?;
    let kernel = generated.fused_norm(&body.to_string(), &steps, body_inputs.len(), norm);
    let mut args = vec![t(out), t(y)];
    args.extend(body_inputs.iter().map(|v| t(&v.broadcast_to(&out.shape))));
    args.extend(params.iter().map(|v| t(v)));
    args.extend([int(rows), int(d), Arg::F64(eps)]);
    Ok(vec![launch(kernel, [line_blocks(rows), 1, 1], [line_threads(d), 1, 1], args)])
}

/// An elementwise op alone: the kernel generated for the body of its one element function
/// `code` (scalar `s`) over `inputs`, launched as a fused op's.
fn elementwise_op(name: &str, code: i32, s: f64, out: &View, inputs: &[&View], generated: &mut Generated) -> Vec<Command> {
    let operands = (0..inputs.len()).map(Operand::Input).collect();
    let step = ElementStep { op: code, scalar: s, dtype: out.dtype, operands };
    let args: Vec<String> = (0..inputs.len()).map(|k| format!("x{k}")).collect();
    let text = format!("t0: {} = {name}({})", out.dtype, args.join(", "));
    generated_elementwise(&text, &[step], out, inputs, generated)
}

/// One launch of the kernel generated for `steps` (`text` the body's IR spelling) writing
/// `out` from `inputs` (broadcast to its shape), a thread per [`generate::lanes`] elements.
fn generated_elementwise(
    text: &str,
    steps: &[ElementStep],
    out: &View,
    inputs: &[&View],
    generated: &mut Generated,
) -> Vec<Command> {
    let dtypes: Vec<DType> = inputs.iter().map(|v| v.dtype).collect();
    let kernel = generated.fused(text, steps, &dtypes, out.dtype);
    let lanes = generate::lanes(&[dtypes, vec![out.dtype]].concat());
    let mut args = vec![t(out)];
    args.extend(inputs.iter().map(|v| t(&v.broadcast_to(&out.shape))));
    elementwise(kernel, out.numel().div_ceil(u64::from(lanes)), args)
}

/// The element function (`element_op`'s op codes: `binary_op`'s and `unary_op`'s,
/// `OP_WHERE`, `OP_MASKED_FILL`) and scalar of an elementwise op, alone or inside a fused op
/// (either way in a generated kernel); `None` for the ops that are not elementwise (the op
/// table's `elementwise`).
fn element_code(kind: OpKind, attrs: &Attrs) -> Option<(i32, f64)> {
    use OpKind::*;
    Some(match kind {
        Add => (OP_ADD, 0.0),
        Sub => (OP_SUB, 0.0),
        Mul => (OP_MUL, 0.0),
        Div => (OP_DIV, 0.0),
        AddScalar => (OP_ADD_SCALAR, attrs.float("value")),
        MulScalar => (OP_MUL_SCALAR, attrs.float("value")),
        PowScalar => (OP_POW_SCALAR, attrs.float("exponent")),
        Neg => (OP_NEG, 0.0),
        Sin => (OP_SIN, 0.0),
        Cos => (OP_COS, 0.0),
        Exp => (OP_EXP, 0.0),
        Log => (OP_LOG, 0.0),
        Sqrt => (OP_SQRT, 0.0),
        Rsqrt => (OP_RSQRT, 0.0),
        Erf => (OP_ERF, 0.0),
        Relu => (OP_RELU, 0.0),
        ReluBackward => (OP_RELU_BACKWARD, 0.0),
        Gelu if attrs.bool("approximate") => (OP_GELU, 0.0),
        Gelu => (OP_GELU_EXACT, 0.0),
        GeluBackward if attrs.bool("approximate") => (OP_GELU_BACKWARD, 0.0),
        GeluBackward => (OP_GELU_EXACT_BACKWARD, 0.0),
        Silu => (OP_SILU, 0.0),
        SiluBackward => (OP_SILU_BACKWARD, 0.0),
        Sigmoid => (OP_SIGMOID, 0.0),
        SigmoidBackward => (OP_SIGMOID_BACKWARD, 0.0),
        Tanh => (OP_TANH, 0.0),
        TanhBackward => (OP_TANH_BACKWARD, 0.0),
        Hardswish => (OP_HARDSWISH, 0.0),
        HardswishBackward => (OP_HARDSWISH_BACKWARD, 0.0),
        Hardsigmoid => (OP_HARDSIGMOID, 0.0),
        HardsigmoidBackward => (OP_HARDSIGMOID_BACKWARD, 0.0),
        Contiguous | Cast => (OP_COPY, 0.0),
        Where => (OP_WHERE, 0.0),
        MaskedFill => (OP_MASKED_FILL, attrs.float("value")),
        Compare => (OP_COMPARE, f64::from(Comparison::of(attrs).code())),
        CompareScalar => (OP_COMPARE_SCALAR + Comparison::of(attrs).code(), attrs.float("value")),
        Softmax | Cumsum | SoftmaxBackward | CausalMask | Matmul | Attention | AttentionBackward | MaskedAttention
        | MaskedAttentionBackward | AttentionBiasBackward | DropoutAttention | DropoutAttentionBackward
        | DropoutAttentionBiasBackward | Sum | Mean | Reshape | Detach | Transpose | Expand | Fill | Embedding
        | EmbeddingBackward | EmbeddingBag | EmbeddingBagBackward | Gather | GatherBackward | LayerNorm
        | LayerNormBackward | RmsNorm | RmsNormBackward | BatchNorm | BatchNormBackward | BatchNormStats | Conv2d
        | Conv2dBackward | Conv3d | Conv3dBackward | MaxPool2d | MaxPool2dBackward | CrossEntropy
        | CrossEntropyBackward | LinearCrossEntropy | Sgd | SgdMomentum | Adam | Adamw | Slice | Select
        | SliceBackward | SliceScatter | Cat | Extern | ExternView | ExternBackward | Dropout | DropoutBackward
        | Random | ConvTranspose2d | ConvTranspose2dBackward | AdaptiveAvgPool2d | AdaptiveAvgPool2dBackward
        | UpsampleNearest2d | UpsampleNearest2dBackward | BceWithLogits | BceWithLogitsBackward | Argmax
        | UpsampleBilinear2d | UpsampleBilinear2dBackward | GridSample | GridSampleBackward | Topk | ScatterAdd
        | Fused | FusedNorm => return None,
    })
}

/// A resampling kernel writing `to` from `from` (one thread per element of `to`), given
/// the image `[N, C, H, W]` and its resized `[N, C, OH, OW]`: the forward's x and y, the
/// backward's dx and dy.
fn resample(kernel: &'static str, to: &View, from: &View, image: &View, resized: &View, extra: &[Arg]) -> Vec<Command> {
    let sizes = [image.shape[2], image.shape[3], resized.shape[2], resized.shape[3]].map(int);
    elementwise(kernel, to.numel(), [vec![t(to), t(from)], sizes.to_vec(), extra.to_vec()].concat())
}

/// Partial sums of the elementwise losses per block of 256 threads (at least 4096 elements
/// each, at most 1024 blocks), then one block adding the partials in order: the mean.
fn bce_with_logits(loss: &View, logits: &View, targets: &View, scratch: &mut Scratch) -> Vec<Command> {
    let n = logits.numel();
    let blocks = n.div_ceil(4096).clamp(1, 1024);
    let chunk = n.div_ceil(blocks).max(1);
    let partials = Arg::Ptr(scratch.alloc(blocks * 8));
    let args = vec![partials.clone(), t(logits), t(targets), int(n), int(chunk)];
    vec![
        launch(BCE_PARTIAL, [blocks as u32, 1, 1], [256, 1, 1], args),
        launch(BCE_MEAN, [1, 1, 1], [1024, 1, 1], vec![t(loss), partials, int(blocks), int(n)]),
    ]
}

fn resolve_axis(axis: i64, rank: usize) -> usize {
    if axis < 0 { (axis + rank as i64) as usize } else { axis as usize }
}

/// The `len` elements of `view` from `start` along `axis`, every `step`-th: a view of the
/// same bytes.
/// `view` cut to `shape` in every dimension but `axis` (gather's x and dx against its index).
fn narrowed_to(view: &View, shape: &[u64], axis: usize) -> View {
    let mut part = view.clone();
    for (d, &n) in shape.iter().enumerate() {
        if d != axis {
            part.shape[d] = n;
        }
    }
    part
}

/// `(outer, n, inner)`: the sizes before, at and after `axis`.
fn split_shape(shape: &[u64], axis: usize) -> (u64, u64, u64) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

fn strided_part(view: &View, axis: usize, start: u64, len: u64, step: u64) -> View {
    let mut part = view.clone();
    part.addr.offset += start * view.strides[axis] * view.dtype.size();
    part.shape[axis] = len;
    part.strides[axis] *= step;
    part
}

fn binary(code: i32, out: &View, a: &View, b: &View, s: f64) -> Vec<Command> {
    let args =
        vec![Arg::I32(code), t(out), t(&a.broadcast_to(&out.shape)), t(&b.broadcast_to(&out.shape)), Arg::F64(s)];
    elementwise(BINARY, out.numel(), args)
}

fn unary(code: i32, out: &View, x: &View, s: f64) -> Vec<Command> {
    elementwise(UNARY, out.numel(), vec![Arg::I32(code), t(out), t(x), Arg::F64(s)])
}

/// `out` and `inputs` seen as `[outer, n, inner]` around `axis`: one block per line.
fn lines(kernel: &'static str, out: &View, inputs: &[&View], axis: i64, extra: &[Arg]) -> Vec<Command> {
    let (outer, n, inner) = split_shape(&out.shape, resolve_axis(axis, out.rank()));
    let count = outer * inner;
    if count * n == 0 {
        return Vec::new();
    }
    let mut args = vec![t(out)];
    args.extend(inputs.iter().map(|v| t(v)));
    args.extend([int(count), int(n), int(inner)]);
    args.extend(extra.iter().cloned());
    vec![launch(kernel, [line_blocks(count), 1, 1], [line_threads(n), 1, 1], args)]
}

/// An attention op's `out` or `dout` as `[..., H, T, Ev]`, the layout its kernels index:
/// under `transpose_out` the value is `[..., T, H, Ev]`, and the view of it with those two
/// axes swapped reads and writes the same bytes (the kernels go through the strides).
fn heads_first(x: &View, attrs: &AttentionAttrs) -> View {
    let rank = x.rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    if attrs.transpose_out {
        perm.swap(rank - 3, rank - 2);
    }
    x.permuted(&perm)
}

/// The sizes of an attention op, from its q, k and v.
struct AttentionSizes {
    /// Query rows, B·H·T.
    rows: u64,
    /// Key rows, B·Hkv·S.
    keys: u64,
    /// Query heads per key/value head, H / Hkv.
    group: u64,
    t: u64,
    s: u64,
    e: u64,
    ev: u64,
}

impl AttentionSizes {
    fn of(q: &View, k: &View, v: &View) -> AttentionSizes {
        let r = q.rank();
        let (t, s) = (q.shape[r - 2], k.shape[r - 2]);
        let rows = q.shape[..r - 1].iter().product();
        let keys = k.shape[..r - 1].iter().product();
        let (group, e, ev) = (q.shape[r - 3] / k.shape[r - 3], q.shape[r - 1], v.shape[r - 1]);
        AttentionSizes { rows, keys, group, t, s, e, ev }
    }

    /// Tiles of `per_tile` query rows, ceil(T / per_tile) per query head (none when there
    /// are no rows).
    fn query_tiles(&self, per_tile: u64) -> u64 {
        self.rows.checked_div(self.t).unwrap_or(0) * self.t.div_ceil(per_tile)
    }

    /// Tiles of `per_tile` keys, ceil(S / per_tile) per key/value head.
    fn key_tiles(&self, per_tile: u64) -> u64 {
        self.keys.checked_div(self.s).unwrap_or(0) * self.s.div_ceil(per_tile)
    }

    /// The arguments every attention kernel ends with, after its row count: `group, t, s, e,
    /// ev, causal, scale`.
    fn args(&self, attrs: &AttentionAttrs) -> Vec<Arg> {
        vec![
            int(self.group),
            int(self.t),
            int(self.s),
            int(self.e),
            int(self.ev),
            Arg::I32(i32::from(attrs.causal)),
            Arg::F64(attrs.scale),
        ]
    }
}

/// gridDim.y of an attention kernel writing rows of `width` columns: one block per
/// [`ATTN_CHUNK`] columns, at least one (the forward's lse and dq's D are written by block
/// y = 0 even without columns). Past `u32` it saturates, and validation refuses the grid.
fn column_chunks(width: u64) -> u32 {
    u32::try_from(width.div_ceil(ATTN_CHUNK).max(1)).unwrap_or(u32::MAX)
}

/// Whether an attention op of `q`, `k`, `v` (and `dout`, for its backward) runs on the
/// tensor-core kernels: all f16 or all bf16, E = Ev a multiple of 16 up to [`TC_E`], and
/// not turned off. The rest runs on the float kernels.
fn on_tensor_cores(sizes: &AttentionSizes, operands: &[&View], options: LowerOptions) -> bool {
    let dtype = operands[0].dtype;
    !options.float_attention
        && matches!(dtype, DType::F16 | DType::Bf16)
        && operands.iter().all(|x| x.dtype == dtype)
        && sizes.e == sizes.ev
        && sizes.e.is_multiple_of(16)
        && (16..=TC_E).contains(&sizes.e)
}

/// out and lse: on tensor cores one block per tile of [`TC_ROWS`] query rows; else one block
/// per tile of [`ATTN_FWD_ROWS`] query rows and per [`ATTN_CHUNK`] columns of out
/// (gridDim.y).
fn attention(
    [out, lse]: [&View; 2],
    [q, k, v]: [&View; 3],
    extras: Extras,
    attrs: &AttentionAttrs,
    options: LowerOptions,
) -> Vec<Command> {
    let sizes = AttentionSizes::of(q, k, v);
    if sizes.rows == 0 {
        return Vec::new();
    }
    let mut args = vec![t(out), t(lse), t(q), t(k), t(v), int(sizes.rows)];
    args.extend(sizes.args(attrs));
    if extras.is_none() && on_tensor_cores(&sizes, &[q, k, v], options) {
        let grid = [line_blocks(sizes.query_tiles(TC_ROWS)), 1, 1];
        return vec![launch(ATTENTION_TC, grid, [TC_THREADS, 1, 1], args)];
    }
    args.extend(extras.args(q, &sizes, attrs));
    let grid = [line_blocks(sizes.query_tiles(ATTN_FWD_ROWS)), column_chunks(sizes.ev), 1];
    vec![launch(ATTENTION, grid, [ATTN_FWD_THREADS, 1, 1], args)]
}

/// The scores' shape `[..., H, T, S]`.
fn scores_shape(q: &View, sizes: &AttentionSizes) -> Vec<u64> {
    let mut shape = q.shape[..q.rank() - 1].to_vec();
    shape.push(sizes.s);
    shape
}

/// What an attention op reads beyond q, k and v (and its saved values): masked_attention's
/// bias, dropout_attention's bias and seed. Only the scalar kernels read them.
#[derive(Clone, Copy)]
struct Extras<'a> {
    bias: Option<&'a View>,
    seed: Option<&'a View>,
}

impl Extras<'_> {
    const NONE: Extras<'static> = Extras { bias: None, seed: None };

    fn is_none(&self) -> bool {
        self.bias.is_none() && self.seed.is_none()
    }

    /// The scalar attention kernels' last five arguments: the bias viewed broadcast to the
    /// scores and 1 (any tensor, q, and 0 without one); the seed (q without one), the
    /// dropout's stream and p (0: no dropout).
    fn args(&self, q: &View, sizes: &AttentionSizes, attrs: &AttentionAttrs) -> [Arg; 5] {
        let (bias, has_bias) = match self.bias {
            Some(b) => (t(&b.broadcast_to(&scores_shape(q, sizes))), Arg::I32(1)),
            None => (t(q), Arg::I32(0)),
        };
        let (seed, (p, stream)) = match (self.seed, attrs.dropout) {
            (Some(seed), Some(dropout)) => (t(seed), dropout),
            _ => (t(q), (0.0, 0)),
        };
        [bias, has_bias, seed, Arg::I64(stream), Arg::F64(p)]
    }
}

/// dbias of masked_attention: one thread per bias element, summing the scores' gradient
/// over the dimensions the bias broadcasts (attention.cu's `attention_bias_backward`).
fn attention_bias_backward(
    dbias: &View,
    [dout, q, k, v, bias, out, lse]: [&View; 7],
    seed: Option<&View>,
    attrs: &AttentionAttrs,
) -> Vec<Command> {
    let sizes = AttentionSizes::of(q, k, v);
    let scores = scores_shape(q, &sizes);
    let mut args = vec![
        t(&dbias.broadcast_to(&scores)),
        t(&bias.broadcast_to(&scores)),
        t(dout),
        t(q),
        t(k),
        t(v),
        t(out),
        t(lse),
        int(dbias.numel()),
    ];
    args.extend(sizes.args(attrs));
    // The seed, stream and p of Extras::args (the bias is already in).
    args.extend(Extras { bias: Some(bias), seed }.args(q, &sizes, attrs).into_iter().skip(2));
    elementwise(ATTENTION_BIAS_BACKWARD, dbias.numel(), args)
}

/// dq (and each query row's D = dout·out, a float into scratch) one block per tile of
/// query rows, then dk and dv one block per tile of as many keys, reading D: on tensor cores
/// tiles of [`TC_ROWS`]; else of [`ATTN_BWD_ROWS`], with E (and Ev) split into chunks over
/// gridDim.y.
fn attention_backward(
    [dq, dk, dv]: [&View; 3],
    [dout, q, k, v, out, lse]: [&View; 6],
    extras: Extras,
    attrs: &AttentionAttrs,
    options: LowerOptions,
    scratch: &mut Scratch,
) -> Vec<Command> {
    let sizes = AttentionSizes::of(q, k, v);
    let deltas = if sizes.rows > 0 { Arg::Ptr(scratch.alloc(sizes.rows * 4)) } else { Arg::Null };
    let tensor_cores = extras.is_none() && on_tensor_cores(&sizes, &[q, k, v, dout], options);
    let (rows_per_block, threads) =
        if tensor_cores { (TC_ROWS, [TC_THREADS, 1, 1]) } else { (ATTN_BWD_ROWS, [ATTN_BWD_THREADS, 1, 1]) };
    let (dq_kernel, dkv_kernel, dq_chunks, dkv_chunks) = if tensor_cores {
        (ATTENTION_BACKWARD_DQ_TC, ATTENTION_BACKWARD_DKV_TC, 1, 1)
    } else {
        (ATTENTION_BACKWARD_DQ, ATTENTION_BACKWARD_DKV, column_chunks(sizes.e), column_chunks(sizes.e.max(sizes.ev)))
    };
    let mut commands = Vec::new();
    if sizes.rows > 0 {
        let mut args = vec![t(dq), deltas.clone(), t(dout), t(q), t(k), t(v), t(out), t(lse), int(sizes.rows)];
        args.extend(sizes.args(attrs));
        if !tensor_cores {
            args.extend(extras.args(q, &sizes, attrs));
        }
        let grid = [line_blocks(sizes.query_tiles(rows_per_block)), dq_chunks, 1];
        commands.push(launch(dq_kernel, grid, threads, args));
    }
    if sizes.keys > 0 {
        let mut args = vec![t(dk), t(dv), deltas, t(dout), t(q), t(k), t(v), t(lse), int(sizes.keys)];
        args.extend(sizes.args(attrs));
        if !tensor_cores {
            args.extend(extras.args(q, &sizes, attrs));
        }
        let grid = [line_blocks(sizes.key_tiles(rows_per_block)), dkv_chunks, 1];
        commands.push(launch(dkv_kernel, grid, threads, args));
    }
    commands
}

/// `(rows, D)` of a tensor normalised over its last dimension.
fn rows_of(x: &View) -> (u64, u64) {
    let d = *x.shape.last().unwrap_or(&1);
    (x.numel().checked_div(d).unwrap_or(0), d)
}

fn layer_norm(y: &View, x: &View, gamma: &View, beta: &View, eps: f64) -> Vec<Command> {
    let (rows, d) = rows_of(x);
    if rows * d == 0 {
        return Vec::new();
    }
    let args = vec![t(y), t(x), t(gamma), t(beta), int(rows), int(d), Arg::F64(eps)];
    vec![launch(LAYER_NORM, [line_blocks(rows), 1, 1], [line_threads(d), 1, 1], args)]
}

/// The kernels of a row-normalisation backward: its statistics, the sums that finish its
/// parameter gradients, and dx. layer_norm and rms_norm share the rest (rms_norm's
/// statistics have a zero mean, so `ln_grad_params` serves both; it has no dbeta).
struct NormBackward {
    stats: &'static str,
    finish: &'static str,
    dx: &'static str,
}

const LAYER_NORM_KERNELS: NormBackward =
    NormBackward { stats: LN_STATS, finish: LN_GRAD_PARAMS_FINISH, dx: LAYER_NORM_BACKWARD_DX };
const RMS_NORM_KERNELS: NormBackward =
    NormBackward { stats: RMS_STATS, finish: RMS_GRAD_GAMMA_FINISH, dx: RMS_NORM_BACKWARD_DX };

/// The gradients `outputs` (dx, dgamma, and dbeta for layer_norm) of a row normalisation
/// of `x` by `gamma`.
fn norm_backward(
    kernels: &NormBackward,
    outputs: &[&View],
    dy: &View,
    x: &View,
    gamma: &View,
    eps: f64,
    scratch: &mut Scratch,
) -> Vec<Command> {
    let [dx, dparams @ ..] = outputs else { unreachable!("a norm backward writes dx first") };
    let (rows, d) = rows_of(x);
    if d == 0 {
        return Vec::new();
    }
    let (groups, chunk) = row_groups(d.div_ceil(32), rows, 64, d * 16);
    // Two doubles per row (mean or 0, rstd) and per (group, column) (Σ dy·x̂, Σ dy).
    let stats = if rows > 0 { Arg::Ptr(scratch.alloc(rows * 16)) } else { Arg::Null };
    let partials = Arg::Ptr(scratch.alloc(groups * d * 16));
    let (blocks, threads) = ([line_blocks(rows), 1, 1], [line_threads(d), 1, 1]);
    let mut commands = Vec::new();
    if rows > 0 {
        commands.push(launch(kernels.stats, blocks, threads, vec![stats.clone(), t(x), int(rows), int(d), Arg::F64(eps)]));
    }
    let args = vec![partials.clone(), t(dy), t(x), stats.clone(), int(rows), int(d), int(chunk)];
    commands.push(launch(LN_GRAD_PARAMS, [d.div_ceil(32) as u32, groups as u32, 1], [32, 8, 1], args));
    let mut finish: Vec<Arg> = dparams.iter().map(|&v| t(v)).collect();
    finish.extend([partials, int(d), int(groups)]);
    commands.extend(elementwise(kernels.finish, d, finish));
    if rows > 0 {
        let args = vec![t(dx), t(dy), t(x), t(gamma), stats, int(rows), int(d)];
        commands.push(launch(kernels.dx, blocks, threads, args));
    }
    commands
}

fn rms_norm(y: &View, x: &View, gamma: &View, eps: f64) -> Vec<Command> {
    let (rows, d) = rows_of(x);
    if rows * d == 0 {
        return Vec::new();
    }
    let args = vec![t(y), t(x), t(gamma), int(rows), int(d), Arg::F64(eps)];
    vec![launch(RMS_NORM, [line_blocks(rows), 1, 1], [line_threads(d), 1, 1], args)]
}


/// `(C, inner, M)` of a batch-normalised `x [N, C, ...]`: channels, elements per (sample,
/// channel), elements per channel.
fn channels_of(x: &View) -> (u64, u64, u64) {
    let c = x.shape[1];
    let inner: u64 = x.shape[2..].iter().product();
    (c, inner, x.shape[0] * inner)
}

/// Per-channel mean and rstd of `x` into a fresh stats region (2 doubles per channel):
/// partial sums and a finish pass for the mean, then again for the variance.
fn channel_stats(x: &View, eps: f64, scratch: &mut Scratch) -> (Arg, Vec<Command>) {
    let (c, _, m) = channels_of(x);
    let (groups, chunk) = row_groups(c, m, 1024, c * 16);
    let stats = Arg::Ptr(scratch.alloc(c * 16));
    let partials = Arg::Ptr(scratch.alloc(c * groups * 16));
    let mut commands = Vec::new();
    for mode in [BN_MEAN, BN_VAR] {
        commands.push(channel_partials(mode, &partials, x, &stats, groups, chunk));
        let args = vec![
            Arg::I32(mode),
            stats.clone(),
            partials.clone(),
            t(x),
            t(x),
            int(c),
            int(groups),
            int(m),
            Arg::F64(eps),
        ];
        commands.extend(elementwise(BN_FINISH, c, args));
    }
    (stats, commands)
}

/// The partial sums of `mode` (BN_MEAN, BN_VAR: see `bn_partial`) per (channel, chunk of
/// `chunk` elements) of `x`.
fn channel_partials(mode: i32, partials: &Arg, x: &View, stats: &Arg, groups: u64, chunk: u64) -> Command {
    let (c, inner, m) = channels_of(x);
    let args = vec![Arg::I32(mode), partials.clone(), t(x), t(x), stats.clone(), int(c), int(inner), int(m), int(chunk)];
    launch(BN_PARTIAL, [c as u32, groups as u32, 1], [256, 1, 1], args)
}

/// batch_norm_stats: the mean's partials and finish pass (as `channel_stats`), the
/// variance's partials, then `bn_stats` adds them and writes both, in f32.
fn batch_norm_stats([mean, var]: [&View; 2], x: &View, correction: i64, scratch: &mut Scratch) -> Vec<Command> {
    let (c, _, m) = channels_of(x);
    if c == 0 {
        return Vec::new();
    }
    let (groups, chunk) = row_groups(c, m, 1024, c * 16);
    let stats = Arg::Ptr(scratch.alloc(c * 16));
    let partials = Arg::Ptr(scratch.alloc(c * groups * 16));
    let mut commands = vec![channel_partials(BN_MEAN, &partials, x, &stats, groups, chunk)];
    let args = vec![Arg::I32(BN_MEAN), stats.clone(), partials.clone(), t(x), t(x), int(c), int(groups), int(m), Arg::F64(0.0)];
    commands.extend(elementwise(BN_FINISH, c, args));
    commands.push(channel_partials(BN_VAR, &partials, x, &stats, groups, chunk));
    let args = vec![t(mean), t(var), stats, partials, int(c), int(groups), int(m), int(correction as u64)];
    commands.extend(elementwise(BN_STATS, c, args));
    commands
}

fn batch_norm(y: &View, x: &View, gamma: &View, beta: &View, eps: f64, scratch: &mut Scratch) -> Vec<Command> {
    if y.numel() == 0 {
        return Vec::new();
    }
    let (c, inner, _) = channels_of(x);
    let (stats, mut commands) = channel_stats(x, eps, scratch);
    commands.extend(elementwise(BN_APPLY, y.numel(), vec![t(y), t(x), t(gamma), t(beta), stats, int(c), int(inner)]));
    commands
}

fn batch_norm_backward(
    [dx, dgamma, dbeta]: [&View; 3],
    dy: &View,
    x: &View,
    gamma: &View,
    eps: f64,
    scratch: &mut Scratch,
) -> Vec<Command> {
    let (c, inner, m) = channels_of(x);
    if c == 0 {
        return Vec::new();
    }
    let (stats, mut commands) = channel_stats(x, eps, scratch);
    let (groups, chunk) = row_groups(c, m, 1024, c * 16);
    let partials = Arg::Ptr(scratch.alloc(c * groups * 16));
    let sums = Arg::Ptr(scratch.alloc(c * 16));
    let args =
        vec![Arg::I32(BN_GRADS), partials.clone(), t(dy), t(x), stats.clone(), int(c), int(inner), int(m), int(chunk)];
    commands.push(launch(BN_PARTIAL, [c as u32, groups as u32, 1], [256, 1, 1], args));
    let args = vec![
        Arg::I32(BN_GRADS),
        sums.clone(),
        partials,
        t(dbeta),
        t(dgamma),
        int(c),
        int(groups),
        int(m),
        Arg::F64(eps),
    ];
    commands.extend(elementwise(BN_FINISH, c, args));
    let args = vec![t(dx), t(dy), t(x), t(gamma), stats, sums, int(c), int(inner), int(m)];
    commands.extend(elementwise(BN_BACKWARD_DX, dx.numel(), args));
    commands
}

/// A geometry from its sizes (named for the message when one does not fit an `int`):
/// `n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw`.
fn geom(sizes: [(u64, &str); 15]) -> Result<Geom, CudaError> {
    let mut v = [0i32; 15];
    for (slot, (x, what)) in v.iter_mut().zip(sizes) {
        *slot = i32_of(x, what)?;
    }
    let [n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw] = v;
    Ok(Geom { n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw, pad: 0 })
}

/// The geometry of a convolution's index space in conv2d's terms (kernels/conv.cu): the
/// input side `big [N,C,H,W]`, the weight `w [K,C/groups,R,S]`, the output side
/// `small [N,K,P,Q]`, and the op's stride, padding and dilation; `c` and `k` count the
/// channels of one group.
fn conv_geom(big: &View, w: &View, small: &View, conv: &ConvAttrs) -> Result<Geom, CudaError> {
    let ConvAttrs { groups, stride, padding, dilation, .. } = *conv;
    geom([
        (big.shape[0], "N"),
        (big.shape[1] / groups, "C/groups"),
        (big.shape[2], "H"),
        (big.shape[3], "W"),
        (w.shape[0] / groups, "K/groups"),
        (w.shape[2], "R"),
        (w.shape[3], "S"),
        (small.shape[2], "P"),
        (small.shape[3], "Q"),
        (stride[0], "stride"),
        (stride[1], "stride"),
        (padding[0], "padding"),
        (padding[1], "padding"),
        (dilation[0], "dilation"),
        (dilation[1], "dilation"),
    ])
}

/// grid_sample's modes as its kernels' last three arguments: nearest, border, align_corners.
fn grid_modes(attrs: &GridSampleAttrs) -> [Arg; 3] {
    [attrs.nearest, attrs.border, attrs.align_corners].map(|b| Arg::I32(i32::from(b)))
}

/// A conv3d kernel writing `out` from `a` and `b` (its sizes from their shapes), one thread
/// per element of `out`; nothing for an empty `out`.
fn conv3d(kernel: &'static str, out: &View, a: &View, b: &View, conv: &Conv3dAttrs) -> Vec<Command> {
    let mut args = vec![t(out), t(a), t(b), int(conv.groups)];
    args.extend(conv.stride.into_iter().chain(conv.padding).chain(conv.dilation).map(int));
    elementwise(kernel, out.numel(), args)
}

/// One implicit GEMM of a conv's index space `g` in `mode`, once per group (the groups are
/// `igemm`'s batches): out(m, n) over depth
/// - forward: the output side, m = k (of a group), n = (b, p, q), depth (c, r, s);
/// - backward data: the input side, m = c, n = (b, h, w), depth (k, r, s);
/// - backward weight: the weight, m = k, n = (c, r, s), depth (b, p, q).
///
/// The kernel decodes its indices in 32 bits, so every product of sizes it forms, and every
/// position it computes (p·sh + r·dh, h + ph, ...), must fit an `int`.
fn conv_igemm(mode: i32, g: Geom, groups: u64, options: LowerOptions) -> Result<Igemm, CudaError> {
    let u = |x: i32| x as u64;
    let (k, crs, npq) = (u(g.k), u(g.c) * u(g.r) * u(g.s), u(g.n) * u(g.p) * u(g.q));
    let (krs, nhw) = (u(g.k) * u(g.r) * u(g.s), u(g.n) * u(g.h) * u(g.w));
    let positions = [
        u(g.p) * u(g.sh) + u(g.r) * u(g.dh) + u(g.ph),
        u(g.q) * u(g.sw) + u(g.s) * u(g.dw) + u(g.pw),
        u(g.h) + u(g.r) * u(g.dh) + u(g.ph),
        u(g.w) + u(g.s) * u(g.dw) + u(g.pw),
    ];
    for x in [crs, npq, krs, nhw, u(g.p) * u(g.q), u(g.h) * u(g.w)].into_iter().chain(positions) {
        i32_of(x, "a product of conv sizes")?;
    }
    let size = match mode {
        MODE_CONV_FWD => [k, npq, crs],
        MODE_CONV_BWD_DATA => [u(g.c), nhw, krs],
        _ => [k, crs, npq],
    };
    Ok(Igemm { mode, geom: g, size, batches: groups, f32: options.conv_f32 })
}

/// A pooling window's geometry: x [N,C,H,W], y [N,C,P,Q] (one group of C channels).
fn pool_geom(x: &View, y: &View, pool: &PoolAttrs) -> Result<Geom, CudaError> {
    let PoolAttrs { kernel, stride, padding } = *pool;
    geom([
        (x.shape[0], "N"),
        (x.shape[1], "C"),
        (x.shape[2], "H"),
        (x.shape[3], "W"),
        (x.shape[1], "C"),
        (kernel[0], "kernel"),
        (kernel[1], "kernel"),
        (y.shape[2], "P"),
        (y.shape[3], "Q"),
        (stride[0], "stride"),
        (stride[1], "stride"),
        (padding[0], "padding"),
        (padding[1], "padding"),
        (1, "dilation"),
        (1, "dilation"),
    ])
}

/// cross_entropy's attributes as its kernels take them.
struct CeAttrs {
    ignore_index: Arg,
    smoothing: Arg,
}

impl CeAttrs {
    fn read(attrs: &Attrs) -> CeAttrs {
        let ce = CrossEntropyAttrs::of(attrs);
        CeAttrs { ignore_index: Arg::I64(ce.ignore_index), smoothing: Arg::F64(ce.label_smoothing) }
    }
}

/// The count of rows not ignored, as a double in a fresh scratch region.
fn ce_count(labels: &View, n: u64, ce: &CeAttrs, scratch: &mut Scratch) -> (Arg, Command) {
    let count = Arg::Ptr(scratch.alloc(8));
    let args = vec![count.clone(), t(labels), int(n), ce.ignore_index.clone()];
    (count, launch(CE_COUNT, [1, 1, 1], [1024, 1, 1], args))
}

fn cross_entropy(loss: &View, logits: &View, labels: &View, ce: CeAttrs, scratch: &mut Scratch) -> Vec<Command> {
    let (n, c) = (logits.shape[0], logits.shape[1]);
    let losses = scratch.alloc(n * 4);
    let mut commands = Vec::new();
    if n > 0 {
        let args =
            vec![Arg::Ptr(losses), t(logits), t(labels), int(n), int(c), ce.ignore_index.clone(), ce.smoothing.clone()];
        commands.push(launch(CE_ROWS, [line_blocks(n), 1, 1], [line_threads(c), 1, 1], args));
    }
    let (count, counting) = ce_count(labels, n, &ce, scratch);
    commands.push(counting);
    commands.push(launch(CE_MEAN, [1, 1, 1], [1024, 1, 1], vec![t(loss), Arg::Ptr(losses), count, int(n)]));
    commands
}

fn cross_entropy_backward(
    dlogits: &View,
    dloss: &View,
    logits: &View,
    labels: &View,
    ce: CeAttrs,
    scratch: &mut Scratch,
) -> Vec<Command> {
    let (n, c) = (logits.shape[0], logits.shape[1]);
    if n * c == 0 {
        return Vec::new();
    }
    let (count, counting) = ce_count(labels, n, &ce, scratch);
    let args =
        vec![t(dlogits), t(dloss), t(logits), t(labels), count, int(n), int(c), ce.ignore_index, ce.smoothing];
    vec![counting, launch(CE_BACKWARD, [line_blocks(n), 1, 1], [line_threads(c), 1, 1], args)]
}

/// Rows `start..start + count` of `v` along its first dimension.
fn leading_rows(v: &View, start: u64, count: u64) -> View {
    let mut rows = v.clone();
    rows.addr.offset += start * v.strides[0] * v.dtype.size();
    rows.shape[0] = count;
    rows
}

/// `linear_cross_entropy`, a chunk of `rows` rows at a time in its workspace output (see
/// `LinearCrossEntropyWorkspace`): per chunk, the logits (a matmul), each row's loss term
/// (`ce_rows`, into scratch), the logits' gradient in place (`ce_backward` with dloss = 1),
/// the chunk's rows of dx and its share of dweight (matmuls), added to dweight's sums;
/// then the mean loss (`ce_mean`) and dweight from the sums; the workspace is zeroed last.
#[allow(clippy::too_many_arguments)]
fn linear_cross_entropy(
    [loss, dx, dweight, workspace]: [&View; 4],
    x: &View,
    weight: &View,
    labels: &View,
    ce: CeAttrs,
    rows: u64,
    options: LowerOptions,
    scratch: &mut Scratch,
) -> Result<Vec<Command>, CudaError> {
    let (classes, hidden, n) = (weight.shape[0], weight.shape[1], labels.shape[0]);
    let dtype = x.dtype;
    if !x.is_dense() {
        return Err(CudaError::Unsupported("linear_cross_entropy reads x as dense rows".into()));
    }
    let layout = LinearCrossEntropyWorkspace::new(rows, n, classes, hidden, dtype).expect("the type rule's layout");
    let at = |offset: u64| Addr { space: workspace.addr.space, offset: workspace.addr.offset + offset };
    let (x, dx) = (View::dense(x.addr, dtype, &[n, hidden]), View::dense(dx.addr, dtype, &[n, hidden]));
    let partial = layout.partial.map(|o| View::dense(at(o), dtype, &[classes, hidden]));
    let sums = layout.sums.map_or_else(|| dweight.clone(), |o| View::dense(at(o), DType::F32, &[classes, hidden]));
    let losses = scratch.alloc(n * 4);
    let one = View::dense(scratch.alloc(4), DType::F32, &[]);
    let mut commands = elementwise(FILL, 1, vec![t(&one), Arg::F64(1.0), Arg::F64(0.0)]);
    let (count, counting) = ce_count(labels, n, &ce, scratch);
    commands.push(counting);
    if n == 0 {
        commands.extend(elementwise(FILL, sums.numel(), vec![t(&sums), Arg::F64(0.0), Arg::F64(0.0)]));
    }
    for start in (0..n).step_by(rows.max(1) as usize) {
        let r = rows.min(n - start);
        let (xk, dxk, labels_k) = (leading_rows(&x, start, r), leading_rows(&dx, start, r), leading_rows(labels, start, r));
        let logits = View::dense(at(layout.logits), dtype, &[r, classes]);
        commands.extend(gemm::matmul(&xk, weight, false, true, &logits, options.conv_f32, scratch));
        let chunk_losses = Addr { space: losses.space, offset: losses.offset + start * 4 };
        let args = vec![Arg::Ptr(chunk_losses), t(&logits), t(&labels_k), int(r), int(classes), ce.ignore_index.clone(), ce.smoothing.clone()];
        commands.push(launch(CE_ROWS, [line_blocks(r), 1, 1], [line_threads(classes), 1, 1], args));
        let args = vec![
            t(&logits),
            t(&one),
            t(&logits),
            t(&labels_k),
            count.clone(),
            int(r),
            int(classes),
            ce.ignore_index.clone(),
            ce.smoothing.clone(),
        ];
        commands.push(launch(CE_BACKWARD, [line_blocks(r), 1, 1], [line_threads(classes), 1, 1], args));
        commands.extend(gemm::matmul(&logits, weight, false, false, &dxk, options.conv_f32, scratch));
        // dweight's share: into dweight itself for the first chunk of f32 x (or the only
        // chunk), else into `partial`, added to the sums.
        match &partial {
            Some(partial) if start > 0 || layout.sums.is_some() => {
                commands.extend(gemm::matmul(&logits, &xk, true, false, partial, options.conv_f32, scratch));
                let add = if start == 0 { unary(OP_COPY, &sums, partial, 0.0) } else { binary(OP_ADD, &sums, &sums, partial, 0.0) };
                commands.extend(add);
            }
            _ => commands.extend(gemm::matmul(&logits, &xk, true, false, dweight, options.conv_f32, scratch)),
        }
    }
    if layout.sums.is_some() {
        commands.extend(unary(OP_COPY, dweight, &sums, 0.0));
    }
    commands.push(launch(CE_MEAN, [1, 1, 1], [1024, 1, 1], vec![t(loss), Arg::Ptr(losses), count, int(n)]));
    // The workspace output is zeros afterwards, as the CPU reference leaves it.
    commands.extend(elementwise(FILL, workspace.numel(), vec![t(workspace), Arg::F64(0.0), Arg::F64(0.0)]));
    Ok(commands)
}

/// Rows of `dtable` each embedding_backward thread owns (grid.y stays within its limit).
pub fn embedding_rows_per_block(vocab: u64) -> u64 {
    vocab.div_ceil(MAX_GRID_YZ).max(256)
}

/// dtable of embedding, or with `bags` (offsets, mean) of embedding_bag (the bags followed
/// along the offsets): a thread per column and block of rows.
fn embedding_backward(dtable: &View, dy: &View, ids: &View, bags: Option<(&View, bool)>) -> Vec<Command> {
    let (v, d) = (dtable.shape[0], dtable.shape[1]);
    if v * d == 0 {
        return Vec::new();
    }
    let rows = embedding_rows_per_block(v);
    let threads = (d.div_ceil(32) * 32).min(256);
    let grid = [d.div_ceil(threads) as u32, v.div_ceil(rows) as u32, 1];
    let sizes = [int(ids.numel()), int(d), int(v), int(rows)];
    let (kernel, args) = match bags {
        None => (EMBEDDING_BACKWARD, [vec![t(dtable), t(dy), t(ids)], sizes.to_vec()].concat()),
        Some((offsets, mean)) => {
            let args = [vec![t(dtable), t(dy), t(ids), t(offsets)], sizes.to_vec(), vec![Arg::I32(i32::from(mean))]];
            (EMBEDDING_BAG_BACKWARD, args.concat())
        }
    };
    vec![launch(kernel, grid, [threads as u32, 1, 1], args)]
}

/// sum or mean of `x` over `axes` into `out`: x viewed with kept dimensions first.
fn reduce(out: &View, x: &View, axes: &[i64], mean: bool, scratch: &mut Scratch) -> Vec<Command> {
    let (perm, outs, count) = reduced_space(&x.shape, axes);
    reduce_launches(REDUCE_PARTIAL.into(), out, vec![t(&x.permuted(&perm))], outs, count, mean, scratch)
}

/// A reduction over `axes` of a value of `shape`: the permutation putting the kept
/// dimensions first and the reduced ones last, the outputs, and the elements each sums.
fn reduced_space(shape: &[u64], axes: &[i64]) -> (Vec<usize>, u64, u64) {
    let rank = shape.len();
    let reduced: Vec<bool> =
        (0..rank).map(|d| axes.iter().any(|&a| (if a < 0 { a + rank as i64 } else { a }) as usize == d)).collect();
    let perm: Vec<usize> = (0..rank).filter(|&d| !reduced[d]).chain((0..rank).filter(|&d| reduced[d])).collect();
    let outs: u64 = (0..rank).filter(|&d| !reduced[d]).map(|d| shape[d]).product();
    let count: u64 = (0..rank).filter(|&d| reduced[d]).map(|d| shape[d]).product();
    (perm, outs, count)
}

/// The launches of a reduction's partial sums (`partial`: `reduce_partial`, or a fused
/// reduction's generated kernel, given `sources`, its arguments before `outs`), then,
/// with several groups, `reduce_finish`.
fn reduce_launches(
    partial: Kernel,
    out: &View,
    sources: Vec<Arg>,
    outs: u64,
    count: u64,
    mean: bool,
    scratch: &mut Scratch,
) -> Vec<Command> {
    if outs == 0 {
        return Vec::new();
    }
    let divisor = if mean { count as f64 } else { 1.0 };
    let col_blocks = outs.div_ceil(32);
    let (groups, chunk) = row_groups(col_blocks, count, 64, outs * 8);
    let grid = [col_blocks as u32, groups as u32, 1];
    let sizes = [int(outs), int(count), int(chunk), Arg::F64(divisor)];
    let args = |partials: Arg| [vec![t(out)], sources.clone(), sizes.to_vec(), vec![partials]].concat();
    if groups == 1 {
        return vec![launch(partial, grid, [32, 8, 1], args(Arg::Null))];
    }
    let partials = Arg::Ptr(scratch.alloc(groups * outs * 8));
    let mut commands = vec![launch(partial, grid, [32, 8, 1], args(partials.clone()))];
    commands.extend(elementwise(REDUCE_FINISH, outs, vec![t(out), partials, int(outs), int(groups), Arg::F64(divisor)]));
    commands
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cuda::view::Addr;
    use crate::ir::types::DType;

    #[test]
    fn row_groups_split_long_reductions() {
        // GPT-2 bias gradients: 768 columns (24 blocks) over 8192 rows.
        let (groups, chunk) = row_groups(24, 8192, 64, 768 * 8);
        assert_eq!(groups, 43);
        assert!(groups * chunk >= 8192 && (groups - 1) * chunk < 8192);
        // Few rows: one group.
        assert_eq!(row_groups(24, 50, 64, 768 * 8), (1, 50));
        // No rows at all still launches one (empty) group.
        assert_eq!(row_groups(24, 0, 64, 8), (1, 1));
        // Many columns already fill the GPU.
        assert_eq!(row_groups(2048, 1 << 20, 64, 8).0, 1);
        // The budget caps partials.
        let (groups, _) = row_groups(1, 1 << 30, 64, SPLIT_BUDGET / 4);
        assert_eq!(groups, 4);
    }

    #[test]
    fn reductions_put_kept_dimensions_first() {
        let x = View::dense(Addr::arena(0), DType::F32, &[2, 3, 4]);
        let out = View::dense(Addr::arena(1024), DType::F32, &[3]);
        let commands = reduce(&out, &x, &[0, -1], true, &mut Scratch::default());
        let [Command::Launch(l)] = &commands[..] else { panic!("{commands:?}") };
        assert_eq!(l.kernel.family(), REDUCE_PARTIAL);
        let Arg::Tensor(xp) = &l.args[1] else { panic!() };
        assert_eq!((xp.shape.clone(), xp.strides.clone()), (vec![3, 2, 4], vec![4, 12, 1]));
        assert_eq!(l.args[2..6], [Arg::I64(3), Arg::I64(8), Arg::I64(8), Arg::F64(8.0)]);
        // A long reduction goes through partials and a finish pass.
        let x = View::dense(Addr::arena(0), DType::F32, &[8192, 768]);
        let out = View::dense(Addr::arena(0), DType::F32, &[768]);
        let mut scratch = Scratch::default();
        let commands = reduce(&out, &x, &[0], false, &mut scratch);
        assert_eq!(commands.len(), 2);
        assert_eq!(scratch.used(), 43 * 768 * 8);
    }

    #[test]
    fn attention_tiles_rows_keys_and_columns() {
        let attrs = AttentionAttrs { causal: true, scale: 0.125, transpose_out: false, dropout: None };
        let dense = |at: u64, shape: &[u64]| View::dense(Addr::arena(at << 20), DType::F32, shape);
        // 2 batches × 4 query heads of T = 100 rows over 2 key/value heads of S = 37 keys;
        // E = 80 (two chunks of columns), Ev = 24 (one).
        let (q, k, v) = (dense(0, &[2, 4, 100, 80]), dense(1, &[2, 2, 37, 80]), dense(2, &[2, 2, 37, 24]));
        let (out, lse) = (dense(3, &[2, 4, 100, 24]), dense(4, &[2, 4, 100]));
        let options = LowerOptions::default();
        let [Command::Launch(forward)] = &attention([&out, &lse], [&q, &k, &v], Extras::NONE, &attrs, options)[..] else { panic!() };
        // 8 query heads × ceil(100 / 64) tiles, one chunk of out's 24 columns.
        assert_eq!((forward.kernel.family(), forward.grid, forward.block), (ATTENTION, [16, 1, 1], [256, 1, 1]));
        assert_eq!(forward.args[5..8], [Arg::I64(800), Arg::I64(2), Arg::I64(100)]);
        let (dq, dk, dv) = (dense(5, &[2, 4, 100, 80]), dense(6, &[2, 2, 37, 80]), dense(7, &[2, 2, 37, 24]));
        let mut scratch = Scratch::default();
        let commands = attention_backward([&dq, &dk, &dv], [&out, &q, &k, &v, &out, &lse], Extras::NONE, &attrs, options, &mut scratch);
        let [Command::Launch(rows), Command::Launch(keys)] = &commands[..] else { panic!("{commands:?}") };
        // dq: 8 heads × ceil(100 / 32) tiles, dq's 80 columns in 2 chunks; D: a float per row.
        assert_eq!((rows.kernel.family(), rows.grid, rows.block), (ATTENTION_BACKWARD_DQ, [32, 2, 1], [128, 1, 1]));
        assert_eq!(scratch.used(), 800 * 4);
        // dk and dv: 4 key/value heads × ceil(37 / 32) tiles, max(E, Ev) = 80 in 2 chunks.
        assert_eq!((keys.kernel.family(), keys.grid, keys.block), (ATTENTION_BACKWARD_DKV, [8, 2, 1], [128, 1, 1]));
        assert_eq!(keys.args[8], Arg::I64(2 * 2 * 37));
        // A head dim of 0 still launches one chunk (lse; D for dk and dv); no query rows, none.
        assert_eq!((column_chunks(0), column_chunks(64), column_chunks(65)), (1, 1, 2));
        let none = dense(8, &[2, 4, 0, 80]);
        assert!(attention([&out, &lse], [&none, &k, &v], Extras::NONE, &attrs, options).is_empty());
        // Widths past what gridDim.y can split saturate (and validation refuses the grid).
        assert_eq!(column_chunks(u64::MAX), u32::MAX);
    }

    #[test]
    fn half_attention_with_small_equal_head_dims_runs_on_tensor_cores() {
        let attrs = AttentionAttrs { causal: true, scale: 0.125, transpose_out: false, dropout: None };
        let view = |at: u64, dtype: DType, shape: &[u64]| View::dense(Addr::arena(at << 20), dtype, shape);
        let options = LowerOptions::default();
        let kernel = |dtype: DType, e: u64, ev: u64, options: LowerOptions| {
            let (q, k, v) = (view(0, dtype, &[2, 4, 100, e]), view(1, dtype, &[2, 2, 37, e]), view(2, dtype, &[2, 2, 37, ev]));
            let (out, lse) = (view(3, dtype, &[2, 4, 100, ev]), view(4, DType::F32, &[2, 4, 100]));
            let commands = attention([&out, &lse], [&q, &k, &v], Extras::NONE, &attrs, options);
            let [Command::Launch(launch)] = &commands[..] else { panic!("{commands:?}") };
            (launch.kernel.family(), launch.grid, launch.block)
        };
        // 8 query heads × ceil(100 / 64) tiles of 64 rows, 4 warps, no column chunks.
        assert_eq!(kernel(DType::Bf16, 64, 64, options), (ATTENTION_TC, [16, 1, 1], [128, 1, 1]));
        assert_eq!(kernel(DType::F16, 16, 16, options).0, ATTENTION_TC);
        // f32, E ≠ Ev, E not a multiple of 16, E over 64, or turned off: the float kernels.
        assert_eq!(kernel(DType::F32, 64, 64, options).0, ATTENTION);
        assert_eq!(kernel(DType::Bf16, 64, 32, options).0, ATTENTION);
        assert_eq!(kernel(DType::Bf16, 24, 24, options).0, ATTENTION);
        assert_eq!(kernel(DType::Bf16, 128, 128, options).0, ATTENTION);
        let float = LowerOptions { float_attention: true, ..options };
        assert_eq!(kernel(DType::Bf16, 64, 64, float).0, ATTENTION);
        // The backward: dq by 64 query rows, dk and dv by 64 keys; dout of another dtype
        // than q (staged as raw 16-bit values) keeps it on the float kernels.
        let (q, k, v) = (view(0, DType::Bf16, &[2, 4, 100, 64]), view(1, DType::Bf16, &[2, 2, 37, 64]), view(2, DType::Bf16, &[2, 2, 37, 64]));
        let (out, lse) = (view(3, DType::Bf16, &[2, 4, 100, 64]), view(4, DType::F32, &[2, 4, 100]));
        let (dq, dk, dv) = (view(5, DType::Bf16, &[2, 4, 100, 64]), view(6, DType::Bf16, &[2, 2, 37, 64]), view(7, DType::Bf16, &[2, 2, 37, 64]));
        let mut scratch = Scratch::default();
        let commands = attention_backward([&dq, &dk, &dv], [&out, &q, &k, &v, &out, &lse], Extras::NONE, &attrs, options, &mut scratch);
        let [Command::Launch(rows), Command::Launch(keys)] = &commands[..] else { panic!("{commands:?}") };
        assert_eq!((rows.kernel.family(), rows.grid, rows.block), (ATTENTION_BACKWARD_DQ_TC, [16, 1, 1], [128, 1, 1]));
        assert_eq!((keys.kernel.family(), keys.grid, keys.block), (ATTENTION_BACKWARD_DKV_TC, [4, 1, 1], [128, 1, 1]));
        assert_eq!(scratch.used(), 800 * 4);
        let dout = view(8, DType::F32, &[2, 4, 100, 64]);
        let commands = attention_backward([&dq, &dk, &dv], [&dout, &q, &k, &v, &out, &lse], Extras::NONE, &attrs, options, &mut scratch);
        let [Command::Launch(rows), _] = &commands[..] else { panic!("{commands:?}") };
        assert_eq!(rows.kernel.family(), ATTENTION_BACKWARD_DQ);
    }

    #[test]
    fn embedding_rows_keep_the_grid_in_bounds() {
        assert_eq!(embedding_rows_per_block(50257), 256);
        assert!(1u64 << 30 <= embedding_rows_per_block(1 << 30) * MAX_GRID_YZ);
    }
}
