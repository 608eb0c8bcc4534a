//! A scheduled step as a rematerialisation [`Problem`] (the IR-free solver,
//! `crate::solve::remat`).
//!
//! Node `i` is the op at schedule position `i`, so the identity sequence is the schedule.
//! Values are the step's lowering (`passes/lower.rs`): the bytes the buffer pass will hold,
//! so without shares the identity sequence's peak is exactly the plan's lower bound
//! without in-place reuse. The lowering's two orderings become *tokens*, values of 0 bytes:
//! - each view op writes a token that the view's readers read, so every valid sequence
//!   runs a view before its readers (the view's bytes are its root's);
//! - for each update, every op that reads the target (directly or through a view) writes a
//!   token the update's writer reads: a valid sequence runs those ops (once at least)
//!   before the new value lands in the target's bytes.
//!
//! Recomputable: forward-class ops (the op table's `class`) that compute no gradient (no
//! output is a `grad` in `analysis::classes`), are not `extern` (another framework's op
//! may not be pure), are not views (a view costs nothing and is re-created on demand when
//! a sequence is applied: see `apply.rs`), and write no value
//! that survives the step (returned values, update values). No op has side effects besides
//! writing its outputs, so running such an op again only writes fresh copies.
//!
//! Cost: the op table's FLOPs, at least 1 (so no recomputation looks free to a strategy).
//!
//! Shares (in-place reuse, `crate::solve::remat::Share`): every `(output, input)` pair of an op
//! that the in-place pass (`passes::inplace`) could take in some order: all of its rule but
//! "the input dies at this op", which the evaluation rule decides per execution; in the
//! op table's order, as the pass tries them. So the identity sequence's peak is the plan's
//! lower bound after in-place reuse (a test asserts it on the corpus), and a strategy sees
//! that recomputing an elementwise op's input can let the op run in place.

use crate::analysis::classes::gradients;
use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::Graph;
use crate::ir::ops::OpClass;
use crate::passes::inplace::dense_root;
use crate::passes::lower::lower;
use crate::solve::remat::{NodeInfo, Problem, Share};
use crate::solve::{DagValue, Node};

/// A step's rematerialisation problem and which op each node is.
#[derive(Clone, Debug)]
pub struct StepProblem {
    pub problem: Problem,
    /// `ops[node]`: the op of each node (the schedule).
    pub ops: Vec<OpId>,
}

/// The problem of a verified `graph` run in `schedule` (a topological order of every op);
/// sizes rounded up to `alignment`; with the shares of in-place reuse if `inplace` (the
/// plan uses the in-place pass). `None` if a size overflows.
pub fn step_problem(graph: &Graph, schedule: &[OpId], alignment: u64, inplace: bool) -> Option<StepProblem> {
    let step = lower(graph, schedule, alignment)?;
    let (slot, root, mut values) = (step.slot, step.root, step.values);
    let token = |def: Node, readers: Vec<Node>| DagValue { size: 0, def: Some(def), readers, to_end: false };
    values.extend(step.views.into_iter().map(|(view, readers)| token(view, readers)));
    values.extend(step.update_reads.into_iter().map(|(reader, writer)| token(reader, vec![writer])));
    let gradient = gradients(graph);
    let survives: IndexVec<ValueId, bool> = graph.values.indices().map(|v| values[slot[v]].to_end).collect();
    let nodes = schedule
        .iter()
        .map(|&op_id| {
            let op = &graph.ops[op_id];
            let row = op.kind.def();
            // The forward pass: forward-class ops whose outputs are not gradients (the
            // backward pass reuses forward ops such as matmul to compute gradients).
            let forward = row.class == OpClass::Forward && op.outputs.iter().all(|&o| !gradient[o]);
            // Another framework's op may not be a pure function of its inputs (a random
            // op): it is never run twice. `dropout` is pure: its mask is a hash of the seed
            // value and its attributes, which a recompute reads again.
            let recomputable =
                forward && row.view_of().is_none() && !op.kind.is_extern() && op.outputs.iter().all(|&o| !survives[o]);
            NodeInfo { cost: graph.op_flops(op_id).max(1), recomputable, forward }
        })
        .collect();
    // In-place reuse: the pairs the in-place pass could take, whatever the sequence (its
    // rule but for "the input dies at this op", which the evaluation rule decides).
    let mut shares = Vec::new();
    for &op_id in schedule.iter().filter(|_| inplace) {
        let op = &graph.ops[op_id];
        for &(j, k) in op.kind.def().inplace_pairs(op.inputs.len(), &op.attrs).iter() {
            let (Some(&out), Some(&x)) = (op.outputs.get(j), op.inputs.get(k)) else { continue };
            let Some(r) = dense_root(graph, x) else { continue };
            let (x_ty, out_ty) = (&graph.values[x].ty, &graph.values[out].ty);
            let possible = root[out] == out
                && op.inputs.iter().all(|&i| root[i] != r || i == x)
                && !survives[r]
                && !graph.updates.iter().any(|u| u.value == out)
                && x_ty.dtype == out_ty.dtype
                && x_ty.bytes() == out_ty.bytes();
            if possible {
                shares.push(Share { input: slot[r] as u32, output: slot[out] as u32 });
            }
        }
    }
    Some(StepProblem { problem: Problem { nodes, values, shares }, ops: schedule.to_vec() })
}
