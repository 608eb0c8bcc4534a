//! A scheduled step as a rematerialisation [`Problem`] (the IR-free core of `crate::remat`).
//!
//! Node `i` is the op at schedule position `i`, so the identity sequence is the schedule.
//! Values are the bytes the buffer pass will hold (as in the schedule pass's DAG, whose
//! peak is the lower bound): without shares the identity sequence's peak is exactly the
//! plan's lower bound without in-place reuse.
//! - a root value (not a view) is a value; its size is its bytes rounded up to the
//!   alignment; a view owns no bytes, so reading a view reads its root;
//! - arguments exist before the first node; params and state that are not updated survive
//!   (`to_end`); an update's new value shares its target's buffer, so target and new value
//!   are one value that exists before the first node and survives; returned values (their
//!   roots) survive;
//! - each view op writes a *token*: a value of 0 bytes that the view's readers read, so
//!   every valid sequence runs a view before its readers (the view's bytes are its root's);
//! - for each update, every op that reads the target (directly or through a view) writes a
//!   token the update's writer reads: a valid sequence runs those ops (once at least)
//!   before the new value lands in the target's bytes.
//!
//! Recomputable: forward-class ops (the op table's `class`) that compute no gradient (no
//! output is a `grad` in `analysis::classes`), are not views (a view costs nothing and is
//! re-created on demand when a sequence is applied: see `apply.rs`), and write no value
//! that survives the step (returned values, update values). No op has side effects besides
//! writing its outputs, so running such an op again only writes fresh copies.
//!
//! Cost: the op table's FLOPs, at least 1 (so no recomputation looks free to a strategy).
//!
//! Shares (in-place reuse, `crate::remat::Share`): every `(output, input)` pair of an op
//! that the in-place pass (`passes::inplace`) could take in some order: all of its rule but
//! "the input dies at this op", which the evaluation rule decides per execution; in the
//! op table's order, as the pass tries them. So the identity sequence's peak is the plan's
//! lower bound after in-place reuse (a test asserts it on the corpus), and a strategy sees
//! that recomputing an elementwise op's input can let the op run in place.

use crate::analysis::classes::{Class, classify};
use crate::analysis::liveness::lifetimes;
use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, ValueDef};
use crate::ir::ops::OpClass;
use crate::ir::types::TensorType;
use crate::plan::align_up;
use crate::remat::{Node, NodeInfo, Problem, Share, Value};

/// A step's rematerialisation problem and which op each node is.
#[derive(Clone, Debug)]
pub struct StepProblem {
    pub problem: Problem,
    /// `ops[node]`: the op of each node (the schedule).
    pub ops: Vec<OpId>,
}

/// The op table's FLOPs of one run of `op`.
pub fn op_flops(graph: &Graph, op: OpId) -> u64 {
    let op = &graph.ops[op];
    let types = |values: &[ValueId]| -> Vec<&TensorType> { values.iter().map(|&v| &graph.values[v].ty).collect() };
    (op.kind.def().flops)(&types(&op.inputs), &types(&op.outputs), &op.attrs)
}

/// The problem of a verified `graph` run in `schedule` (a topological order of every op);
/// sizes rounded up to `alignment`; with the shares of in-place reuse if `inplace` (the
/// plan uses the in-place pass). `None` if a size overflows.
pub fn step_problem(graph: &Graph, schedule: &[OpId], alignment: u64, inplace: bool) -> Option<StepProblem> {
    let life = lifetimes(graph, schedule);
    let (root, position) = (&life.root, &life.position);
    let node = |op: OpId| position[op] as Node;
    // The value each root's bytes are counted in: an update's new value joins its target.
    let mut home: IndexVec<ValueId, ValueId> = graph.values.indices().collect();
    for update in &graph.updates {
        if root[update.value] == update.value {
            home[update.value] = update.target;
        }
    }
    let mut index: IndexVec<ValueId, Option<usize>> = IndexVec::from_elem(None, graph.values.len());
    let mut values: Vec<Value> = Vec::new();
    for v in graph.values.indices().filter(|&v| root[v] == v && home[v] == v) {
        index[v] = Some(values.len());
        let to_end = matches!(graph.values[v].def, ValueDef::Arg(role) if role.persists());
        values.push(Value { size: 0, def: graph.def_op(v).map(node), readers: Vec::new(), to_end });
    }
    let slot = |v: ValueId| index[home[root[v]]].expect("every root's home is a value");
    for v in graph.values.indices().filter(|&v| root[v] == v) {
        let bytes = align_up(graph.values[v].ty.bytes()?, alignment)?;
        let value = &mut values[slot(v)];
        value.size = value.size.max(bytes);
    }
    for v in graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().flat_map(|u| [u.target, u.value])) {
        values[slot(v)].to_end = true;
    }
    for (op_id, op) in graph.ops.iter_enumerated() {
        for &input in &op.inputs {
            values[slot(input)].readers.push(node(op_id));
        }
    }
    // Tokens: views before their readers.
    let users = graph.users();
    for (op_id, op) in graph.ops.iter_enumerated() {
        if op.kind.def().view_of.is_some() {
            let readers = users[op.outputs[0]].iter().map(|&r| node(r)).collect();
            values.push(Value { size: 0, def: Some(node(op_id)), readers, to_end: false });
        }
    }
    // Tokens: reads of an updated target before its new value is written.
    for update in &graph.updates {
        let writer = graph.def_op(update.value)?;
        for (op_id, op) in graph.ops.iter_enumerated() {
            if op_id != writer && op.inputs.iter().any(|&i| root[i] == update.target) {
                values.push(Value { size: 0, def: Some(node(op_id)), readers: vec![node(writer)], to_end: false });
            }
        }
    }
    let classes = classify(graph);
    let survives: IndexVec<ValueId, bool> = graph.values.indices().map(|v| values[slot(v)].to_end).collect();
    let nodes = schedule
        .iter()
        .map(|&op_id| {
            let op = &graph.ops[op_id];
            let row = op.kind.def();
            // The forward pass: forward-class ops whose outputs are not gradients (the
            // backward pass reuses forward ops such as matmul to compute gradients).
            let forward = row.class == OpClass::Forward && op.outputs.iter().all(|&o| classes[o] != Class::Grad);
            let recomputable = forward && row.view_of.is_none() && op.outputs.iter().all(|&o| !survives[o]);
            NodeInfo { cost: op_flops(graph, op_id).max(1), recomputable, forward }
        })
        .collect();
    // In-place reuse: the pairs the in-place pass could take, whatever the sequence (its
    // rule but for "the input dies at this op", which the evaluation rule decides).
    let mut shares = Vec::new();
    for &op_id in schedule.iter().filter(|_| inplace) {
        let op = &graph.ops[op_id];
        for &(j, k) in op.kind.def().inplace {
            let (Some(&out), Some(&x)) = (op.outputs.get(j), op.inputs.get(k)) else { continue };
            let (x_ty, out_ty) = (&graph.values[x].ty, &graph.values[out].ty);
            let possible = root[x] == x
                && root[out] == out
                && op.inputs.iter().all(|&i| root[i] != x || i == x)
                && !survives[x]
                && !graph.updates.iter().any(|u| u.value == out)
                && x_ty.dtype == out_ty.dtype
                && x_ty.bytes() == out_ty.bytes();
            if possible {
                shares.push(Share { input: slot(x) as u32, output: slot(out) as u32 });
            }
        }
    }
    Some(StepProblem { problem: Problem { nodes, values, shares }, ops: schedule.to_vec() })
}
