//! The fusion pass: trees of elementwise ops, and such trees summed by a reduction, become
//! `fused` ops (`ir/ops/fused.rs`) whose inner values are never buffers.
//!
//! A *region* grows from a root, an elementwise op (its row's `elementwise`) or a reduction
//! that reduces something (its row's `reduction`: `sum`, `mean`; its input then is an inner
//! value, made an element at a time where it is summed), latest first:
//! the producer of one of the region's inputs joins it when that producer is elementwise,
//! in the same user region (checkpoint, recompute, custom) as the root, not yet in another
//! region, and every reader of the value it makes is in the region (the value is then an
//! inner value: no op outside reads it, and it is not returned or an update). A region has
//! one output (its root's) and at most `FUSED_MAX_OPS` ops and `FUSED_MAX_INPUTS` inputs.
//!
//! A producer whose value is also read outside the region is *recomputed* inside it (its
//! op stays in the step for its other readers; the fused op's `recomputed` lists the copy)
//! when the region is the value's last reader and every input of the producer is alive at
//! the root anyway: the value then dies at its reader before, at the cost of the producer's
//! FLOPs once more (an elementwise op: a few per element). A producer left with no reader is
//! removed. Regions are grown latest root first, so a value read last in the backward and
//! before that in the forward (SwiGLU's `silu(gate)`, read by the forward's product and by
//! the backward's) is recomputed in the backward's fused op and then absorbed whole into
//! the forward's: it never exists.
//!
//! Joining moves the producer's work to the root's place in the step: its inputs must live
//! until then. A producer joins only when the bytes of its inputs that would otherwise die
//! before the root (in program order) are at most the bytes of the value it makes, so a
//! region never keeps more alive than it frees, and never when it reads a param (or a view
//! of one) whose update is written before the root: the update could no longer land in
//! place. Whether fusing lowers the arena is judged
//! by the driver, which keeps the unfused step when it does not (`Fusion::Lower`).
//!
//! A norm (`layer_norm`, `rms_norm`) then joins the op making its input when that op is a
//! region's root (not a reduction) or an elementwise op alone, of the same user region, and
//! the norm's parameters are made before it: the two become one `fused_norm`
//! (`ir/ops/fused.rs`) at the producer's place, writing the producer's value and the norm of
//! it in one pass (the residual stream of a pre-norm transformer and its next norm: the
//! value is read again by the next residual and by the norm's backward, so it stays a
//! tensor either way). It moves no input's last read later than the norm's, and the norm's
//! output is made where the value is: nothing lives longer than between the two ops.
//!
//! The rewritten step keeps every other op and value as it was, in program order: each
//! region's fused op takes its root's place (and its output's name), the ops it absorbed
//! are gone. Regions of one op are left alone unless a norm joins them.

use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Op, Value, ValueDef};
use crate::ir::ops::{Attr, Attrs, FUSED_MAX_INPUTS, FUSED_MAX_OPS, FusedBody, InnerOp, Norm, OpKind, Operand};

/// A region: its ops in program order (the root last; `ops` holds every op the fused op
/// computes, `recomputed` those of them that stay in the step for other readers) and its
/// inputs in first-read order.
#[derive(Clone, Debug)]
struct Region {
    ops: Vec<OpId>,
    recomputed: Vec<OpId>,
    inputs: Vec<ValueId>,
}

/// What the pass knows while it grows regions, latest root first.
struct State<'g> {
    graph: &'g Graph,
    /// The ops that still read each value, in program order: a region's fused op (at its
    /// root's place) replaces its members, and a region that recomputes a value reads its
    /// inputs instead.
    readers: IndexVec<ValueId, Vec<OpId>>,
    /// Returned or an update (value or target): never an inner value.
    kept: IndexVec<ValueId, bool>,
    /// Read after the step (kept, or a param or state that persists).
    survives: IndexVec<ValueId, bool>,
    /// Where each updated param's new value is made: its old value may not be read after.
    overwritten_at: IndexVec<ValueId, usize>,
    /// The region each op was absorbed into (its root's included).
    region_of: IndexVec<OpId, Option<usize>>,
}

impl State<'_> {
    /// The last position reading `v` (past the end if it survives the step; 0 if unread).
    fn last_read(&self, v: ValueId) -> usize {
        if self.survives[v] { self.graph.ops.len() } else { self.readers[v].last().map_or(0, |op| op.index()) }
    }
}

/// `graph` with its elementwise trees fused (see the module doc), or `None` when no region
/// has two ops or more.
pub fn fuse(graph: &Graph) -> Option<Graph> {
    if !graph.custom_backwards.is_empty() || graph.backward.is_some() {
        return None;
    }
    let mut kept = IndexVec::from_elem(false, graph.values.len());
    for r in &graph.returns {
        kept[r.value] = true;
    }
    for u in &graph.updates {
        kept[u.value] = true;
        kept[u.target] = true;
    }
    let survives = graph.values.indices().map(|v| kept[v] || graph.role(v).is_some_and(|role| role.persists())).collect();
    let mut overwritten_at: IndexVec<ValueId, usize> = IndexVec::from_elem(usize::MAX, graph.values.len());
    for u in &graph.updates {
        overwritten_at[u.target] = graph.def_op(u.value).map_or(0, |op| op.index());
    }
    let region_of = IndexVec::from_elem(None, graph.ops.len());
    let mut state = State { graph, readers: graph.users(), kept, survives, overwritten_at, region_of };
    let mut regions: Vec<Region> = Vec::new();
    for root in graph.ops.indices().rev() {
        if state.region_of[root].is_some() || !may_root(graph, &graph.ops[root]) {
            continue;
        }
        let region = grow(&state, root);
        if region.ops.len() < 2 {
            continue;
        }
        for &op in region.ops.iter().filter(|op| !region.recomputed.contains(op)) {
            state.region_of[op] = Some(regions.len());
        }
        // The fused op reads the region's inputs at the root's place; the ops it absorbed
        // read nothing any more (a recomputed op stays, reading what it read).
        let absorbed = |r: &OpId| region.ops.contains(r) && !region.recomputed.contains(r);
        for &op in &region.ops {
            for &v in &graph.ops[op].inputs {
                state.readers[v].retain(|r| !absorbed(r));
            }
        }
        for &v in &region.inputs {
            let at = state.readers[v].partition_point(|&r| r < root);
            state.readers[v].insert(at, root);
        }
        regions.push(region);
    }
    // An op every reader of which now recomputes it is gone; the earliest of its copies
    // (the last region grown) is then its computation, not a recomputation.
    let mut dead: IndexVec<OpId, bool> = IndexVec::from_elem(false, graph.ops.len());
    let recomputed: Vec<OpId> = regions.iter().flat_map(|r| r.recomputed.iter().copied()).collect();
    for p in recomputed {
        let outputs = &graph.ops[p].outputs;
        if !dead[p] && state.region_of[p].is_none() && outputs.iter().all(|&v| state.readers[v].is_empty() && !state.kept[v]) {
            dead[p] = true;
            let first = regions.iter_mut().rev().find(|r| r.recomputed.contains(&p)).expect("p is recomputed");
            first.recomputed.retain(|&q| q != p);
        }
    }
    let norms = norm_epilogues(graph, &regions, &state.region_of, &dead);
    if regions.is_empty() && norms.iter().all(Option::is_none) {
        return None;
    }
    Some(rewrite(graph, &regions, &state.region_of, &dead, &norms))
}

/// The norms that join the op making their input (see the module doc): for each producer
/// (a region's root or an elementwise op alone), the norm joining it, at most one.
fn norm_epilogues(
    graph: &Graph,
    regions: &[Region],
    region_of: &IndexVec<OpId, Option<usize>>,
    dead: &IndexVec<OpId, bool>,
) -> IndexVec<OpId, Option<OpId>> {
    let mut joined: IndexVec<OpId, Option<OpId>> = IndexVec::from_elem(None, graph.ops.len());
    for (n, op) in graph.ops.iter_enumerated() {
        if norm_of(op.kind).is_none() {
            continue;
        }
        let Some(p) = graph.def_op(op.inputs[0]) else { continue };
        let producer = &graph.ops[p];
        let fusable = match region_of[p].map(|r| &regions[r]) {
            // A region's root that is not a reduction (its other ops are inner).
            Some(region) => region.ops.last() == Some(&p) && !producer.kind.def().reduction,
            None => producer.kind.def().elementwise && !dead[p],
        };
        // The norm moves up to the producer's place: its parameters must be made before.
        let params_ready = op.inputs[1..].iter().all(|&v| graph.def_op(v).is_none_or(|d| d < p));
        if fusable && params_ready && producer.region == op.region && producer.outputs.len() == 1 && joined[p].is_none() {
            joined[p] = Some(n);
        }
    }
    joined
}

/// The norm an op of `kind` computes (`layer_norm`, `rms_norm`) and its spelling in a
/// fused_norm's `norm` attribute; `None` for any other op.
fn norm_of(kind: OpKind) -> Option<(Norm, &'static str)> {
    Norm::ALL.iter().copied().find(|(norm, _)| norm.def().kind == kind)
}

/// Whether a region may grow from `op`: an elementwise op, or a reduction that reduces
/// something (one of nothing is no fused body).
fn may_root(graph: &Graph, op: &Op) -> bool {
    let def = op.kind.def();
    let numel = |v: ValueId| graph.values[v].ty.shape.numel();
    def.elementwise || (def.reduction && matches!((numel(op.outputs[0]), numel(op.inputs[0])), (Some(out), Some(x)) if out < x))
}

/// The region grown from `root` (see the module doc).
fn grow(state: &State<'_>, root: OpId) -> Region {
    let graph = state.graph;
    let mut ops = vec![root];
    let mut recomputed: Vec<OpId> = Vec::new();
    let mut inputs = distinct(&graph.ops[root].inputs);
    let user_region = graph.ops[root].region;
    let bytes = |v: ValueId| graph.values[v].ty.bytes().unwrap_or(u64::MAX);
    let mut k = 0;
    while k < inputs.len() {
        let v = inputs[k];
        let joins = graph.def_op(v).and_then(|p| {
            let producer = &graph.ops[p];
            let new_inputs: Vec<ValueId> = distinct(&producer.inputs).into_iter().filter(|u| !inputs.contains(u)).collect();
            let extended =
                new_inputs.iter().filter(|&&u| state.last_read(u) < root.index()).map(|&u| bytes(u)).fold(0u64, u64::saturating_add);
            // A param's old value (or a view of it) read after its update is written.
            let stale = producer.inputs.iter().any(|&u| state.overwritten_at[viewed(graph, u)] < root.index());
            let may = producer.kind.def().elementwise
                && state.region_of[p].is_none()
                && !ops.contains(&p)
                && producer.region == user_region
                && producer.outputs.len() == 1
                && !state.kept[v]
                && ops.len() < FUSED_MAX_OPS
                && inputs.len() - 1 + new_inputs.len() <= FUSED_MAX_INPUTS
                && !stale;
            // Readers the region takes over (a recomputed op stays in the step, reading).
            let absorbed = |r: &OpId| ops.contains(r) && !recomputed.contains(r);
            let readers = &state.readers[v];
            if !may {
                None
            } else if readers.iter().all(absorbed) && extended <= bytes(v) {
                Some((p, false))
            } else if readers.last().is_some_and(absorbed) && extended == 0 {
                // The region is the value's last reader: computing it again inside the
                // fused op, from inputs alive there anyway, ends the value's life at its
                // reader before.
                Some((p, true))
            } else {
                None
            }
        });
        match joins {
            Some((p, again)) => {
                ops.push(p);
                if again {
                    recomputed.push(p);
                }
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
    Region { ops, recomputed, inputs }
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

/// The step with each region's ops replaced by one fused op at its root's place, and each
/// norm of `norms` (by producer) joined to its producer as a fused_norm there.
fn rewrite(
    graph: &Graph,
    regions: &[Region],
    region_of: &IndexVec<OpId, Option<usize>>,
    dead: &IndexVec<OpId, bool>,
    norms: &IndexVec<OpId, Option<OpId>>,
) -> Graph {
    let mut joined: IndexVec<OpId, bool> = IndexVec::from_elem(false, graph.ops.len());
    for &n in norms.iter().flatten() {
        joined[n] = true;
    }
    let mut out = Graph::new(graph.name.clone());
    let mut new_id: IndexVec<ValueId, Option<ValueId>> = IndexVec::from_elem(None, graph.values.len());
    for &arg in &graph.args {
        let id = out.values.push(graph.values[arg].clone());
        out.args.push(id);
        new_id[arg] = Some(id);
    }
    let map = |new_id: &IndexVec<ValueId, Option<ValueId>>, v: ValueId| new_id[v].unwrap_or_else(|| panic!("{} read before defined", graph.value_name(v)));
    for (op_id, op) in graph.ops.iter_enumerated() {
        if dead[op_id] || joined[op_id] {
            continue;
        }
        let norm = norms[op_id].map(|n| &graph.ops[n]);
        let alone;
        let (kind, inputs, attrs, made) = match (region_of[op_id].map(|r| &regions[r]), norm) {
            (Some(region), _) if region.ops.last() != Some(&op_id) => continue,
            (None, None) => (op.kind, op.inputs.clone(), op.attrs.clone(), op.outputs.clone()),
            (region, norm) => {
                // An elementwise op whose value a norm reads is a body of one op.
                let region = match region {
                    Some(region) => region,
                    None => {
                        alone = Region { ops: vec![op_id], recomputed: Vec::new(), inputs: distinct(&op.inputs) };
                        &alone
                    }
                };
                let body = body(graph, region).to_string();
                let recomputed = region.ops.iter().enumerate().filter(|(_, op)| region.recomputed.contains(op)).map(|(j, _)| j as i64).collect();
                let mut given = vec![("body", Attr::Str(body)), ("recomputed", Attr::Ints(recomputed))];
                let (mut inputs, mut made) = (region.inputs.clone(), op.outputs.clone());
                let kind = match norm {
                    None => OpKind::Fused,
                    Some(norm_op) => {
                        let (_, spelling) = norm_of(norm_op.kind).expect("a joined norm is a norm");
                        given.extend([("norm", Attr::Str(spelling.to_string())), ("eps", Attr::Float(norm_op.attrs.float("eps")))]);
                        inputs.extend_from_slice(&norm_op.inputs[1..]);
                        made.extend_from_slice(&norm_op.outputs);
                        OpKind::FusedNorm
                    }
                };
                (kind, inputs, Attrs::for_op(kind, &given).expect("the fused rows have these attributes"), made)
            }
        };
        let id = out.ops.next_id();
        let outputs = made
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ops::FusedBody;

    fn fused_ops(graph: &Graph) -> Vec<(String, String, Vec<i64>)> {
        graph
            .ops
            .iter()
            .filter(|op| op.kind == OpKind::Fused)
            .map(|op| (graph.values[op.outputs[0]].name.clone(), op.attrs.str("body").to_string(), op.attrs.ints("recomputed").to_vec()))
            .collect()
    }

    /// SwiGLU's `silu(gate)`, read by the forward's product and the backward's: recomputed in
    /// the backward's fused op (listed as such), then absorbed whole into the forward's, so
    /// it is never a value of the step. `%ds` stays: joining it to `%dg` would keep `%dm`
    /// and `%u` (which die at it) alive one op longer, twice its bytes.
    #[test]
    fn a_value_read_last_in_the_backward_is_recomputed_there_and_never_stored() {
        let graph = crate::parse(
            "step @swiglu(\n  %g: f32[4,8] input,\n  %u: f32[4,8] input,\n  %dm: f32[4,8] input,\n) {\n  %s = silu(%g)\n  %m = mul(%s, %u)\n  %du = mul(%dm, %s)\n  %ds = mul(%dm, %u)\n  %dg = silu_backward(%ds, %g)\n  return %m, %du, %dg\n}\n",
        )
        .unwrap();
        let fused = fuse(&graph).unwrap();
        crate::verify(&fused).unwrap();
        assert!(fused.values.iter().all(|v| v.name != "s"), "{}", crate::print(&fused));
        assert_eq!(
            fused_ops(&fused),
            [
                ("m".to_string(), "t0: f32 = silu(x0); t1: f32 = mul(t0, x1)".to_string(), vec![]),
                ("du".to_string(), "t0: f32 = silu(x0); t1: f32 = mul(x1, t0)".to_string(), vec![0]),
            ]
        );
        assert!(fused.values.iter().any(|v| v.name == "ds"));
        for (_, body, _) in fused_ops(&fused) {
            assert_eq!(FusedBody::parse(&body).unwrap().to_string(), body);
        }
    }

    /// A reduction ends a region: RMSNorm written out (`x.pow(2).mean(-1)`) sums the
    /// squares an element at a time, never stored; what follows the reduction is a region
    /// of its own. A reduction of nothing (over a size-1 axis) is left alone.
    #[test]
    fn a_reduction_sums_its_elementwise_input_without_storing_it() {
        let graph = crate::parse(
            "step @norm(\n  %x: f32[4,8] input,\n) {\n  %sq = pow_scalar(%x, exponent=2.0)\n  %ms = mean(%sq, axes=[-1], keepdim=true)\n  %e = add_scalar(%ms, value=1e-6)\n  %r = rsqrt(%e)\n  %y = mul(%x, %r)\n  return %y\n}\n",
        )
        .unwrap();
        let fused = fuse(&graph).unwrap();
        crate::verify(&fused).unwrap();
        assert_eq!(
            fused_ops(&fused),
            [
                ("ms".to_string(), "t0: f32 = pow_scalar(x0, exponent=2.0); t1: f32 = mean(t0, axes=[-1], keepdim=true)".to_string(), vec![]),
                ("y".to_string(), "t0: f32 = add_scalar(x0, value=1e-6); t1: f32 = rsqrt(t0); t2: f32 = mul(x1, t1)".to_string(), vec![]),
            ]
        );
        assert!(fused.values.iter().all(|v| v.name != "sq"));
        let nothing = crate::parse(
            "step @s(\n  %x: f32[4,1] input,\n) {\n  %sq = neg(%x)\n  %s = sum(%sq, axes=[1])\n  return %s\n}\n",
        )
        .unwrap();
        assert!(fuse(&nothing).is_none());
    }

    /// A producer that reads a param is not moved past the op writing the param's update.
    #[test]
    fn a_param_is_never_read_after_its_update_is_written() {
        let graph = crate::parse(
            "step @s(\n  %p: f32[4] param,\n  %x: f32[4] input,\n) {\n  %a = mul(%p, %x)\n  %p_new = add(%p, %x)\n  %b = relu(%a)\n  update %p <- %p_new\n  return %b\n}\n",
        )
        .unwrap();
        assert!(fuse(&graph).is_none());
        // Written before the update, the same chain fuses.
        let graph = crate::parse(
            "step @s(\n  %p: f32[4] param,\n  %x: f32[4] input,\n) {\n  %a = mul(%p, %x)\n  %b = relu(%a)\n  %p_new = add(%p, %x)\n  update %p <- %p_new\n  return %b\n}\n",
        )
        .unwrap();
        assert_eq!(fused_ops(&fuse(&graph).unwrap()).len(), 1);
    }

    fn norm_ops(graph: &Graph) -> Vec<(Vec<String>, String, String)> {
        graph
            .ops
            .iter()
            .filter(|op| op.kind == OpKind::FusedNorm)
            .map(|op| {
                let names = op.outputs.iter().chain(&op.inputs).map(|&v| graph.values[v].name.clone()).collect();
                (names, op.attrs.str("body").to_string(), op.attrs.str("norm").to_string())
            })
            .collect()
    }

    /// A pre-norm block's residual stream: the fused bias-and-residual add and the norm
    /// reading it become one fused_norm writing both; an elementwise op alone (Llama's
    /// residual add) is a body of one op. A norm whose producer is a reduction, or whose
    /// gamma is made after the producer, stays as it is.
    #[test]
    fn a_norm_joins_the_fused_op_making_its_input() {
        let graph = crate::parse(
            "step @s(\n  %x: f32[4,8] input,\n  %mm: f32[4,8] input,\n  %bias: f32[8] param,\n  %g: f32[8] param,\n  %b: f32[8] param,\n  %o: f32[4,8] input,\n) {\n  %proj = add(%mm, %bias)\n  %h = add(%x, %proj)\n  %y = layer_norm(%h, %g, %b, eps=1e-6)\n  %h2 = add(%h, %o)\n  %y2 = rms_norm(%h2, %g)\n  %z = mul(%y, %y2)\n  return %z, %h2\n}\n",
        )
        .unwrap();
        let fused = fuse(&graph).unwrap();
        crate::verify(&fused).unwrap();
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            norm_ops(&fused),
            [
                (names(&["h", "y", "mm", "bias", "x", "g", "b"]), "t0: f32 = add(x0, x1); t1: f32 = add(x2, t0)".to_string(), "layer".to_string()),
                (names(&["h2", "y2", "h", "o", "g"]), "t0: f32 = add(x0, x1)".to_string(), "rms".to_string()),
            ]
        );
        assert!(fused.ops.iter().all(|op| op.kind != OpKind::LayerNorm && op.kind != OpKind::RmsNorm));
        let eps = fused.ops.iter().find(|op| op.kind == OpKind::FusedNorm).unwrap().attrs.float("eps");
        assert_eq!(eps, 1e-6);
        let reparsed = crate::parse(&crate::print(&fused)).unwrap();
        assert_eq!(reparsed, fused);

        let reduced = crate::parse(
            "step @s(\n  %x: f32[4,8] input,\n  %g: f32[1] param,\n) {\n  %sq = mul(%x, %x)\n  %s = sum(%sq, axes=[1], keepdim=true)\n  %y = rms_norm(%s, %g)\n  return %y\n}\n",
        )
        .unwrap();
        assert!(norm_ops(&fuse(&reduced).unwrap()).is_empty());
        let late_gamma = crate::parse(
            "step @s(\n  %x: f32[4,8] input,\n  %o: f32[4,8] input,\n  %w: f32[8] input,\n) {\n  %h = add(%x, %o)\n  %g = exp(%w)\n  %y = rms_norm(%h, %g)\n  return %y, %h\n}\n",
        )
        .unwrap();
        assert!(fuse(&late_gamma).is_none_or(|f| norm_ops(&f).is_empty()));
    }

    /// A value the step returns is never an inner value; a value read by a non-elementwise
    /// op stays a tensor (and is recomputed by the fused op of its last reader, from an
    /// input alive there anyway).
    #[test]
    fn returned_values_and_values_read_outside_stay_tensors() {
        let graph = crate::parse(
            "step @s(\n  %x: f32[4,4] input,\n) {\n  %a = relu(%x)\n  %b = neg(%a)\n  %d = matmul(%b, %b)\n  %c = exp(%b)\n  return %a, %c, %d\n}\n",
        )
        .unwrap();
        let fused = fuse(&graph).unwrap();
        assert!(["a", "b", "c", "d"].iter().all(|n| fused.values.iter().any(|v| v.name == *n)));
        assert_eq!(fused_ops(&fused), [("c".to_string(), "t0: f32 = neg(x0); t1: f32 = exp(t0)".to_string(), vec![0])]);
    }
}
