//! The schedule pass: the order ops run in, chosen to lower the peak of live bytes.
//!
//! [`ScheduleKind::Program`] keeps program order (a verified graph guarantees it is
//! topological). [`ScheduleKind::Memory`] (the default) turns the step into the plain DAG
//! of [`dag`] and searches it (greedy list scheduling refined by a beam search; see
//! `dag.rs`), then keeps whichever of program order and the search's order has the lower
//! peak, so the result is never worse than program order (program order wins ties).
//!
//! How a step becomes a DAG ([`step_dag`]): nodes are ops; values are the *buffers* the
//! buffer pass will make, so the DAG's peak of an order is exactly the plan's lower bound
//! for it (before in-place reuse):
//! - a root value (not a view) is a value; a view owns no bytes, so reading a view reads
//!   its root, and the root lives until the view's last reader;
//! - arguments exist before the first op (no writer); params and state that are not
//!   updated, returned values (their roots) and new values of updates survive the step;
//! - an update's new value shares its target's buffer, which therefore lives the whole step:
//!   one value with no writer that survives;
//! - sizes are rounded up to the alignment, as the lower bound rounds them;
//! - edges: every input's writer runs before its reader, and (the buffer pass's in-place
//!   rule for updates) every op that reads an updated param or state (or a view of it)
//!   runs before the op writing its new value, so the new value can land in place.
//!
//! The optimizer ops write only new values of updates, so they allocate nothing and the
//! search runs each as soon as its gradient is final (see `dag.rs`).
//!
//! A step whose program order already breaks the update rule (an op reads a param after
//! its new value is written) keeps program order, so the buffer pass reports the read in
//! the way: memplan does not silently reorder a step its author got wrong. A step whose
//! constraints form a cycle (no order works) likewise keeps program order.

pub mod dag;

use crate::analysis::liveness::lifetimes;
use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, ValueDef};
use crate::plan::align_up;
use dag::{Dag, Effort, Node, Value};

/// Which order the schedule pass produces.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum ScheduleKind {
    /// The ops in the order the step lists them.
    Program,
    /// A memory-aware topological order, never worse than program order.
    #[default]
    Memory,
}

impl ScheduleKind {
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::Program => "program",
            ScheduleKind::Memory => "memory",
        }
    }
}

/// Program order: every op once, in the order the step lists them.
pub fn program_order(graph: &Graph) -> Vec<OpId> {
    graph.ops.indices().collect()
}

/// The schedule of a verified `graph` of the chosen kind; buffer sizes are rounded up to
/// `alignment` (a power of two) as the lower bound rounds them.
pub fn schedule(graph: &Graph, kind: ScheduleKind, alignment: u64) -> Vec<OpId> {
    let program = program_order(graph);
    if kind == ScheduleKind::Program {
        return program;
    }
    let Some(dag) = step_dag(graph, alignment) else {
        return program;
    };
    let baseline: Vec<Node> = program.iter().map(|op| op.0).collect();
    if dag.positions(&baseline).is_err() {
        // Program order breaks the update rule: leave it to the buffer pass to say where.
        return program;
    }
    let found = dag.best_order(&[&baseline], Effort::for_nodes(graph.ops.len()));
    found.order.into_iter().map(|n| OpId::new(n as usize)).collect()
}

/// Program order with every op that allocates nothing (optimizer updates, views) moved to
/// the moment its inputs are ready, so gradients die as soon as their update has run.
/// Program order itself if the step cannot be scheduled (see [`schedule`]).
pub fn program_order_hoisted(graph: &Graph, alignment: u64) -> Vec<OpId> {
    let program = program_order(graph);
    let Some(dag) = step_dag(graph, alignment) else { return program };
    let baseline: Vec<Node> = program.iter().map(|op| op.0).collect();
    if dag.positions(&baseline).is_err() {
        return program;
    }
    dag.hoist_free_nodes(&baseline).into_iter().map(|n| OpId::new(n as usize)).collect()
}

/// The DAG of a verified step (see the module docs); `None` if a size overflows or the
/// update rule's constraints form a cycle.
pub fn step_dag(graph: &Graph, alignment: u64) -> Option<Dag> {
    let life = lifetimes(graph, &program_order(graph));
    let root = &life.root;
    // The buffer each root value ends in: an update's new value (a root) joins its target.
    let mut home: IndexVec<ValueId, ValueId> = graph.values.indices().collect();
    for update in &graph.updates {
        if root[update.value] == update.value {
            home[update.value] = update.target;
        }
    }
    let mut index: IndexVec<ValueId, Option<u32>> = IndexVec::from_elem(None, graph.values.len());
    let mut values: Vec<Value> = Vec::new();
    for v in graph.values.indices().filter(|&v| root[v] == v && home[v] == v) {
        index[v] = Some(values.len() as u32);
        let to_end = matches!(graph.values[v].def, ValueDef::Arg(role) if role.persists());
        values.push(Value { size: 0, def: graph.def_op(v).map(|op| op.0), readers: Vec::new(), to_end });
    }
    let slot = |v: ValueId| index[home[root[v]]].map(|i| i as usize);
    for v in graph.values.indices().filter(|&v| root[v] == v) {
        let i = slot(v)?;
        let bytes = align_up(graph.values[v].ty.bytes()?, alignment)?;
        values[i].size = values[i].size.max(bytes);
    }
    // An updated target is needed only until its last read, but its buffer also holds the
    // new value, which survives: the buffer lives the whole step.
    for v in graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().flat_map(|u| [u.target, u.value])) {
        values[slot(v)?].to_end = true;
    }
    let mut edges: Vec<(Node, Node)> = Vec::new();
    // The ops reading each root value, directly or through a view.
    let mut root_readers: IndexVec<ValueId, Vec<OpId>> = IndexVec::from_elem(Vec::new(), graph.values.len());
    for (op, o) in graph.ops.iter_enumerated() {
        for &input in &o.inputs {
            values[slot(input)?].readers.push(op.0);
            root_readers[root[input]].push(op);
            if let Some(writer) = graph.def_op(input) {
                edges.push((writer.0, op.0));
            }
        }
    }
    for update in &graph.updates {
        let writer = graph.def_op(update.value)?;
        edges.extend(root_readers[update.target].iter().filter(|&&op| op != writer).map(|op| (op.0, writer.0)));
    }
    Dag::new(graph.ops.len(), edges, values).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::{PlanOptions, plan};

    fn step(src: &str) -> Graph {
        let g = crate::parse(src).unwrap();
        crate::verify(&g).unwrap();
        g
    }

    /// The DAG's peak of an order is the plan's lower bound for that order.
    fn assert_peak_is_the_lower_bound(graph: &Graph, kind: ScheduleKind) {
        let options = PlanOptions { schedule: kind, ..PlanOptions::default() };
        let plan = plan(graph, &options).unwrap();
        let dag = step_dag(graph, options.alignment).unwrap();
        let order: Vec<Node> = plan.schedule.iter().map(|o| o.0).collect();
        assert_eq!(dag.peak(&order), Ok(plan.lower_bound));
    }

    const SGD_LATE: &str = "step @s(%w: f32[64,64] param, %x: f32[8,64] input) {
        %h = matmul(%x, %w)
        %a = relu(%h)
        %loss = sum(%a, axes=[0, 1])
        %t = transpose(%w, perm=[1, 0])
        %y = matmul(%x, %t)
        %g = matmul(%x, %a, transpose_a=true)
        %w_new = sgd(%w, %g, lr=0.1)
        update %w <- %w_new
        return %loss, %y
    }";

    #[test]
    fn peaks_match_the_plan_lower_bound() {
        let g = step(SGD_LATE);
        assert_peak_is_the_lower_bound(&g, ScheduleKind::Program);
        assert_peak_is_the_lower_bound(&g, ScheduleKind::Memory);
    }

    #[test]
    fn reads_of_an_updated_param_come_before_its_new_value() {
        let g = step(SGD_LATE);
        let order = schedule(&g, ScheduleKind::Memory, 256);
        let at = |name: &str| order.iter().position(|&op| g.ops[op].outputs.iter().any(|&v| g.values[v].name == name)).unwrap();
        assert!(at("t") < at("w_new") && at("y") < at("w_new"), "{order:?}");
    }

    #[test]
    fn program_order_that_breaks_the_update_rule_is_kept() {
        let g = step(
            "step @late(%w: f32[4,4] param, %g: f32[4,4] input, %x: f32[2,4] input) {
                %w_new = sgd(%w, %g, lr=0.1)
                %h = matmul(%x, %w)
                update %w <- %w_new
                return %h
            }",
        );
        assert_eq!(schedule(&g, ScheduleKind::Memory, 256), program_order(&g));
    }
}
