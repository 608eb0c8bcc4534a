//! Fusing a step's loss with its output projection before differentiating it: the loss
//! `cross_entropy(matmul(x, weight, transpose_b=true), labels)`, with reshapes (and one cast
//! of f16/bf16 logits to f32) between, becomes `linear_cross_entropy(x, weight, labels,
//! rows=…)`, which computes the loss and its gradients for x and weight a chunk of rows at
//! a time: neither the logits `[N, V]` nor their gradient is ever live whole. In a
//! language model those two are most of the peak (GPT-2 small at 8 × 1024 tokens: 786 MiB
//! each in bf16). The rows per chunk are memplan's choice
//! ([`linear_cross_entropy_rows`]: as many as 32 MiB of logits hold).
//!
//! The rewrite applies only where the fused op computes what the ops it replaces compute:
//! - the loss is the value `backward` differentiates (its gradient is the seed, 1, so the
//!   gradients computed with the loss need no scaling);
//! - every value between the matmul and the loss is read by the next op of the chain only
//!   (not returned, not read elsewhere, not bound by a custom backward), and no op of the
//!   chain is checkpointed or inside a custom region;
//! - the matmul is `x · weightᵀ` with a 2-D weight and an x that is no view (the CUDA
//!   kernels read x as dense rows);
//! - reshapes keep the classes as the last dimension (rows stay rows, in order), and a cast
//!   is one from f16/bf16 logits to f32 (the fused loss is then cross_entropy's
//!   `f32_loss`: the same f32 loss of the same half logits);
//! - the logits (with their f32 copy under a cast) are at least twice the bytes the fused
//!   op holds at once (its workspace, dx and dweight): in a small model they are not what
//!   the peak is made of.
//!
//! Anything else is left as written. The fused op's arithmetic is the unfused ops' (the
//! CPU reference: same logits, loss terms added in row order, dlogits rounded as stored);
//! dweight's sums over rows are added chunk by chunk, and under a cast dlogits are rounded
//! once to the logits' dtype instead of through f32 (`--no-fuse-loss` keeps the ops as
//! written).

use crate::hashing::FastSet;
use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::graph::{Bind, Graph, Value, ValueDef};
use crate::ir::ops::{Attr, Attrs, CrossEntropyAttrs, MatmulAttrs, OpKind, linear_cross_entropy_rows};
use crate::ir::types::DType;

/// `graph` with its loss fused with the output projection, or `None` where the rewrite does
/// not apply (see the module docs).
pub fn fuse_loss(graph: &Graph) -> Option<Graph> {
    let loss = graph.backward.as_ref()?.loss;
    let ce_op = graph.def_op(loss)?;
    let ce = &graph.ops[ce_op];
    if ce.kind != OpKind::CrossEntropy || ce.region.is_some() {
        return None;
    }
    let users = graph.users();
    // Values read other than by ops: returned, updated, bound by a custom backward.
    let binds = graph.custom_backwards.iter().flat_map(|c| &c.binds).map(|bind| match bind {
        Bind::Value(v) | Bind::GradOf(v) => *v,
    });
    let kept: FastSet<ValueId> =
        graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().map(|u| u.value)).chain(binds).collect();
    let only_read_by = |v: ValueId, reader: OpId| users[v].len() == 1 && users[v][0] == reader && !kept.contains(&v);
    let ce_attrs = CrossEntropyAttrs::of(&ce.attrs);
    let mut f32_loss = ce_attrs.f32_loss;
    let (mut value, mut reader, mut chain) = (ce.inputs[0], ce_op, vec![]);
    let matmul = loop {
        if !only_read_by(value, reader) {
            return None;
        }
        let op_id = graph.def_op(value)?;
        let op = &graph.ops[op_id];
        if op.region.is_some() {
            return None;
        }
        let from = &graph.values[op.inputs.first().copied()?].ty;
        let to = &graph.values[value].ty;
        if op.kind == OpKind::Matmul {
            break op_id;
        }
        let rows_kept = op.kind == OpKind::Reshape && from.dims().last() == to.dims().last();
        let upcast = op.kind == OpKind::Cast && to.dtype == DType::F32 && matches!(from.dtype, DType::F16 | DType::Bf16);
        if upcast && !f32_loss {
            f32_loss = true;
        } else if !rows_kept {
            return None;
        }
        chain.push(op_id);
        reader = op_id;
        value = op.inputs[0];
    };
    let mm = &graph.ops[matmul];
    let MatmulAttrs { transpose_a, transpose_b } = MatmulAttrs::of(&mm.attrs);
    let (x, weight, labels) = (mm.inputs[0], mm.inputs[1], ce.inputs[1]);
    let is_view = |v: ValueId| graph.def_op(v).is_some_and(|op| graph.ops[op].kind.def().view.is_some());
    if transpose_a || !transpose_b || graph.values[weight].ty.rank() != 2 || is_view(x) {
        return None;
    }
    let (x_ty, weight_ty, labels_ty) = (&graph.values[x].ty, &graph.values[weight].ty, &graph.values[labels].ty);
    let rows = linear_cross_entropy_rows(labels_ty.dims().first().copied()?, weight_ty.dims()[0], x_ty.dtype);
    let attrs = Attrs::for_op(
        OpKind::LinearCrossEntropy,
        &[
            ("ignore_index", Attr::Int(ce_attrs.ignore_index)),
            ("label_smoothing", Attr::Float(ce_attrs.label_smoothing)),
            ("f32_loss", Attr::Bool(f32_loss)),
            ("rows", Attr::Int(i64::try_from(rows).ok()?)),
        ],
    )
    .ok()?;
    let types = (OpKind::LinearCrossEntropy.def().infer)(&[x_ty, weight_ty, labels_ty], &attrs).ok()?;
    if types[0] != graph.values[loss].ty {
        return None;
    }
    // Worth it only where the logits (and their f32 copy) are at least twice what the fused
    // op holds at once: its workspace, dx and dweight.
    let logits = labels_ty.dims()[0].checked_mul(weight_ty.dims()[0])?;
    let logits_bytes = logits.checked_mul(x_ty.dtype.size() + if f32_loss && !ce_attrs.f32_loss { 4 } else { 0 })?;
    let held = types[1..].iter().try_fold(0u64, |sum, t| sum.checked_add(t.bytes()?))?;
    if logits_bytes < held.checked_mul(2)? {
        return None;
    }

    let mut fused = graph.clone();
    let names: FastSet<&str> = graph.values.iter().map(|v| v.name.as_str()).collect();
    let base = &graph.values[loss].name;
    let fresh = |suffix: &str| {
        let mut name = format!("{base}.{suffix}");
        for k in 1.. {
            if !names.contains(name.as_str()) {
                break;
            }
            name = format!("{base}.{suffix}{k}");
        }
        name
    };
    let span = graph.values[loss].span;
    let extra: Vec<ValueId> = ["dx", "dweight", "workspace"]
        .iter()
        .zip(&types[1..])
        .enumerate()
        .map(|(k, (suffix, ty))| {
            let def = ValueDef::Op { op: ce_op, output: k + 1 };
            fused.values.push(Value { name: fresh(suffix), ty: ty.clone(), def, span })
        })
        .collect();
    let op = &mut fused.ops[ce_op];
    op.kind = OpKind::LinearCrossEntropy;
    op.inputs = vec![x, weight, labels];
    op.attrs = attrs;
    op.outputs.extend(extra);
    // Drop the chain: the ops after it move up, their outputs' definitions with them.
    let removed: FastSet<OpId> = chain.into_iter().chain([matmul]).collect();
    let mut ops = IndexVec::new();
    for (id, op) in std::mem::take(&mut fused.ops).into_raw().into_iter().enumerate() {
        if removed.contains(&OpId::new(id)) {
            continue;
        }
        let outputs = op.outputs.clone();
        let at = ops.push(op);
        for (output, v) in outputs.into_iter().enumerate() {
            fused.values[v].def = ValueDef::Op { op: at, output };
        }
    }
    fused.ops = ops;
    Some(fused.into_canonical_ids())
}
