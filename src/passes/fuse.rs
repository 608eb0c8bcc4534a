//! The fusion pass: trees of elementwise ops become `fused` ops (`ir/ops/fused.rs`) whose
//! inner values are never buffers.
//!
//! A *region* grows from a root, an elementwise op (its row's `elementwise`), latest first:
//! the producer of one of the region's inputs joins it when that producer is elementwise,
//! in the same user region (checkpoint, recompute, custom) as the root, not yet in another
//! region, and every reader of the value it makes is in the region (the value is then an
//! inner value: no op outside reads it, and it is not returned or an update). A region has
//! one output (its root's) and at most `FUSED_MAX_OPS` ops and `FUSED_MAX_INPUTS` inputs.
//!
//! Joining moves the producer's work to the root's place in the step: its inputs must live
//! until then. A producer joins only when the bytes of its inputs that would otherwise die
//! before the root (in program order) are at most the bytes of the value it makes, so a
//! region never keeps more alive than it frees, and never when it reads a param (or a view
//! of one) whose update is written before the root: the update could no longer land in
//! place. Whether fusing lowers the arena is judged
//! by the driver, which keeps the unfused step when it does not (`Fusion::Lower`).
//!
//! The rewritten step keeps every other op and value as it was, in program order: each
//! region's fused op takes its root's place (and its output's name), the ops it absorbed
//! are gone. Regions of one op are left alone.

use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Op, Value, ValueDef};
use crate::ir::ops::{Attr, Attrs, FUSED_MAX_INPUTS, FUSED_MAX_OPS, FusedBody, InnerOp, OpKind, Operand};

/// A region: its ops in program order (the root last) and its inputs in first-read order.
#[derive(Clone, Debug)]
struct Region {
    ops: Vec<OpId>,
    inputs: Vec<ValueId>,
}

/// `graph` with its elementwise trees fused (see the module doc), or `None` when no region
/// has two ops or more.
pub fn fuse(graph: &Graph) -> Option<Graph> {
    if !graph.custom_backwards.is_empty() || graph.backward.is_some() {
        return None;
    }
    let users = graph.users();
    let mut kept = IndexVec::from_elem(false, graph.values.len());
    for r in &graph.returns {
        kept[r.value] = true;
    }
    for u in &graph.updates {
        kept[u.value] = true;
        kept[u.target] = true;
    }
    // The last position reading each value (program order), past the end if it must stay.
    let end = graph.ops.len();
    let mut last_read: IndexVec<ValueId, usize> = IndexVec::from_elem(0, graph.values.len());
    for (v, readers) in users.iter_enumerated() {
        last_read[v] = if kept[v] || graph.role(v).is_some_and(|role| role.persists()) {
            end
        } else {
            readers.last().map_or(0, |op| op.index())
        };
    }
    // Where each updated param's new value is made: its old value may not be read after.
    let mut overwritten_at: IndexVec<ValueId, usize> = IndexVec::from_elem(usize::MAX, graph.values.len());
    for u in &graph.updates {
        overwritten_at[u.target] = graph.def_op(u.value).map_or(0, |op| op.index());
    }
    let mut region_of: IndexVec<OpId, Option<usize>> = IndexVec::from_elem(None, graph.ops.len());
    let mut regions: Vec<Region> = Vec::new();
    for root in graph.ops.indices().rev() {
        if region_of[root].is_some() || !graph.ops[root].kind.def().elementwise {
            continue;
        }
        let region = grow(graph, root, &users, &kept, (&last_read, &overwritten_at), &region_of);
        if region.ops.len() < 2 {
            continue;
        }
        for &op in &region.ops {
            region_of[op] = Some(regions.len());
        }
        regions.push(region);
    }
    (!regions.is_empty()).then(|| rewrite(graph, &regions, &region_of))
}

/// The region grown from `root` (see the module doc).
fn grow(
    graph: &Graph,
    root: OpId,
    users: &IndexVec<ValueId, Vec<OpId>>,
    kept: &IndexVec<ValueId, bool>,
    (last_read, overwritten_at): (&IndexVec<ValueId, usize>, &IndexVec<ValueId, usize>),
    region_of: &IndexVec<OpId, Option<usize>>,
) -> Region {
    let mut ops = vec![root];
    let mut inputs = distinct(&graph.ops[root].inputs);
    let user_region = graph.ops[root].region;
    let mut k = 0;
    while k < inputs.len() {
        let v = inputs[k];
        let joins = graph.def_op(v).filter(|&p| {
            let producer = &graph.ops[p];
            let bytes = |v: ValueId| graph.values[v].ty.bytes().unwrap_or(u64::MAX);
            let new_inputs: Vec<ValueId> = distinct(&producer.inputs).into_iter().filter(|u| !inputs.contains(u)).collect();
            let extended = new_inputs.iter().filter(|&&u| last_read[u] < root.index()).map(|&u| bytes(u)).fold(0u64, u64::saturating_add);
            // A param's old value (or a view of it) read after its update is written.
            let stale = producer.inputs.iter().any(|&u| overwritten_at[viewed(graph, u)] < root.index());
            producer.kind.def().elementwise
                && region_of[p].is_none()
                && producer.region == user_region
                && producer.outputs.len() == 1
                && !kept[v]
                && users[v].iter().all(|u| ops.contains(u))
                && ops.len() < FUSED_MAX_OPS
                && inputs.len() - 1 + new_inputs.len() <= FUSED_MAX_INPUTS
                && extended <= bytes(v)
                && !stale
        });
        match joins {
            Some(p) => {
                ops.push(p);
                inputs.remove(k);
                for u in distinct(&graph.ops[p].inputs) {
                    if !inputs.contains(&u) {
                        inputs.push(u);
                    }
                }
                // Look again from the start: the new inputs may be produced by ops that
                // only the region reads now.
                k = 0;
            }
            None => k += 1,
        }
    }
    ops.sort();
    // Inputs in the order the region's ops first read them.
    let inner: Vec<ValueId> = ops.iter().map(|&op| graph.ops[op].outputs[0]).collect();
    let inputs = distinct(&ops.iter().flat_map(|&op| graph.ops[op].inputs.iter().copied()).filter(|v| !inner.contains(v)).collect::<Vec<_>>());
    Region { ops, inputs }
}

/// The value whose bytes `v` is: `v`, or what the views it is made by view.
fn viewed(graph: &Graph, mut v: ValueId) -> ValueId {
    while let Some(op) = graph.def_op(v) {
        match graph.ops[op].kind.def().view {
            Some(view) => v = graph.ops[op].inputs[view.input],
            None => break,
        }
    }
    v
}

/// `values` without repeats, in first-seen order.
fn distinct(values: &[ValueId]) -> Vec<ValueId> {
    let mut out: Vec<ValueId> = Vec::with_capacity(values.len());
    for &v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// The fused op's body for `region`.
fn body(graph: &Graph, region: &Region) -> FusedBody {
    let inner: Vec<ValueId> = region.ops.iter().map(|&op| graph.ops[op].outputs[0]).collect();
    let operand = |v: ValueId| match inner.iter().position(|&i| i == v) {
        Some(j) => Operand::Inner(j),
        None => Operand::Input(region.inputs.iter().position(|&i| i == v).expect("an input of the region")),
    };
    let ops = region
        .ops
        .iter()
        .map(|&op_id| {
            let op = &graph.ops[op_id];
            let dtype = graph.values[op.outputs[0]].ty.dtype;
            InnerOp { def: op.kind.def(), operands: op.inputs.iter().map(|&v| operand(v)).collect(), attrs: op.attrs.clone(), dtype }
        })
        .collect();
    FusedBody { ops }
}

/// The step with each region's ops replaced by one fused op at its root's place.
fn rewrite(graph: &Graph, regions: &[Region], region_of: &IndexVec<OpId, Option<usize>>) -> Graph {
    let mut out = Graph::new(graph.name.clone());
    let mut new_id: IndexVec<ValueId, Option<ValueId>> = IndexVec::from_elem(None, graph.values.len());
    for &arg in &graph.args {
        let id = out.values.push(graph.values[arg].clone());
        out.args.push(id);
        new_id[arg] = Some(id);
    }
    let map = |new_id: &IndexVec<ValueId, Option<ValueId>>, v: ValueId| new_id[v].expect("defined before it is read");
    for (op_id, op) in graph.ops.iter_enumerated() {
        let (kind, inputs, attrs) = match region_of[op_id].map(|r| &regions[r]) {
            Some(region) if region.ops.last() != Some(&op_id) => continue,
            Some(region) => {
                let body = body(graph, region).to_string();
                let attrs = Attrs::for_op(OpKind::Fused, &[("body", Attr::Str(body))]).expect("fused has one attribute");
                (OpKind::Fused, region.inputs.clone(), attrs)
            }
            None => (op.kind, op.inputs.clone(), op.attrs.clone()),
        };
        let id = out.ops.next_id();
        let outputs = op
            .outputs
            .iter()
            .enumerate()
            .map(|(output, &v)| {
                let value = Value { def: ValueDef::Op { op: id, output }, ..graph.values[v].clone() };
                let new = out.values.push(value);
                new_id[v] = Some(new);
                new
            })
            .collect();
        let inputs = inputs.iter().map(|&v| map(&new_id, v)).collect();
        out.ops.push(Op { kind, inputs, outputs, attrs, loc: op.loc.clone(), region: op.region, span: op.span });
    }
    out.updates = graph.updates.iter().map(|u| crate::ir::graph::Update { target: map(&new_id, u.target), value: map(&new_id, u.value), span: u.span }).collect();
    out.returns = graph.returns.iter().map(|r| crate::ir::graph::Return { value: map(&new_id, r.value), span: r.span }).collect();
    out
}
