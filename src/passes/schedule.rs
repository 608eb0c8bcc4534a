//! The schedule pass: the order ops run in, chosen to lower the peak of live bytes.
//!
//! [`ScheduleKind::Program`] keeps program order (a verified graph guarantees it is
//! topological). [`ScheduleKind::Memory`] (the default) turns the step into a plain DAG
//! ([`step_dag`]) and searches it with the order solver (`crate::solve::order`: greedy list
//! scheduling refined by a beam search), then keeps whichever of program order and the
//! search's order has the lower peak, so the result is never worse than program order
//! (program order wins ties). In the pipeline ([`choose`]) the order is then judged once
//! more with in-place reuse counted.
//!
//! How a step becomes a DAG ([`step_dag`]): the step's lowering (`lower.rs`), whose values
//! are the buffers the buffer pass will make (so the DAG's peak of an order is exactly the
//! plan's lower bound for it, before in-place reuse), with an edge from the writer of every
//! input to its reader (a view's writer included) and from every reader of an updated param
//! or state to the op writing its new value.
//!
//! The optimizer ops write only new values of updates, so they allocate nothing and the
//! search runs each as soon as its gradient is final (see `solve/order/`).
//!
//! A step whose program order already breaks the update rule (an op reads a param after
//! its new value is written) keeps program order, so the buffer pass reports the read in
//! the way: memplan does not silently reorder a step its author got wrong. A step whose
//! constraints form a cycle (no order works) likewise keeps program order.

use crate::index::{Idx, OpId};
use crate::ir::graph::Graph;
use crate::passes::PlanError;
use crate::passes::lower::lower;
use crate::solve::Node;
use crate::solve::order::{Dag, Effort};

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

/// The lower bound of the step in an order, in-place reuse included (the pipeline's
/// `measure`).
pub type Bound<'a> = dyn Fn(&[OpId]) -> Result<u64, PlanError> + 'a;

/// The pass: [`schedule`], then, when the plan reuses bytes in place (`with_reuse`, the
/// lower bound in an order with in-place reuse), the order judged on what will be planned:
/// the schedule search counts no in-place reuse, and a reordering can stop a big input
/// from dying at the op that could overwrite it, so program order with the optimizer
/// updates hoisted (or plain program order) is kept when it ends lower. Ties keep the
/// search's order.
pub fn choose(graph: &Graph, kind: ScheduleKind, alignment: u64, with_reuse: Option<&Bound<'_>>) -> Result<Vec<OpId>, PlanError> {
    if kind == ScheduleKind::Program {
        return Ok(program_order(graph));
    }
    // One DAG for the search and for hoisting (each is linear in the step, a DAG of a
    // million ops a third of a second to build).
    let dag = schedulable(graph, alignment);
    let mut schedule = search(graph, dag.as_ref());
    if let Some(bound) = with_reuse {
        let mut best = bound(&schedule)?;
        for candidate in [hoisted(graph, dag.as_ref()), program_order(graph)] {
            if candidate == schedule {
                continue; // the same order has the same bound
            }
            let candidate_bound = bound(&candidate)?;
            if candidate_bound < best {
                (schedule, best) = (candidate, candidate_bound);
            }
        }
    }
    Ok(schedule)
}

/// Program order: every op once, in the order the step lists them.
pub fn program_order(graph: &Graph) -> Vec<OpId> {
    graph.ops.indices().collect()
}

/// The schedule of a verified `graph` of the chosen kind; buffer sizes are rounded up to
/// `alignment` (a power of two) as the lower bound rounds them.
pub fn schedule(graph: &Graph, kind: ScheduleKind, alignment: u64) -> Vec<OpId> {
    match kind {
        ScheduleKind::Program => program_order(graph),
        ScheduleKind::Memory => search(graph, schedulable(graph, alignment).as_ref()),
    }
}

/// Program order with every op that allocates nothing (optimizer updates, views) moved to
/// the moment its inputs are ready, so gradients die as soon as their update has run.
/// Program order itself if the step cannot be scheduled (see [`schedule`]).
pub fn program_order_hoisted(graph: &Graph, alignment: u64) -> Vec<OpId> {
    hoisted(graph, schedulable(graph, alignment).as_ref())
}

/// The step's DAG, if the step can be reordered: `None` if [`step_dag`] has none or
/// program order breaks the update rule (left to the buffer pass to say where).
fn schedulable(graph: &Graph, alignment: u64) -> Option<Dag> {
    let dag = step_dag(graph, alignment)?;
    dag.positions(&program_nodes(graph)).is_ok().then_some(dag)
}

/// The search's order on `dag` (program order without one).
fn search(graph: &Graph, dag: Option<&Dag>) -> Vec<OpId> {
    let Some(dag) = dag else { return program_order(graph) };
    let found = dag.best_order(&[&program_nodes(graph)], Effort::for_nodes(graph.ops.len()));
    found.order.into_iter().map(|n| OpId::new(n as usize)).collect()
}

/// Program order with the free ops hoisted on `dag` (program order without one).
fn hoisted(graph: &Graph, dag: Option<&Dag>) -> Vec<OpId> {
    let Some(dag) = dag else { return program_order(graph) };
    dag.hoist_free_nodes(&program_nodes(graph)).into_iter().map(|n| OpId::new(n as usize)).collect()
}

fn program_nodes(graph: &Graph) -> Vec<Node> {
    (0..graph.ops.len() as Node).collect()
}

/// The DAG of a verified step (see the module docs); `None` if a size overflows or the
/// update rule's constraints form a cycle.
pub fn step_dag(graph: &Graph, alignment: u64) -> Option<Dag> {
    let program = program_order(graph);
    let step = lower(graph, &program, alignment)?;
    let mut edges: Vec<(Node, Node)> = Vec::new();
    for (op, o) in graph.ops.iter_enumerated() {
        edges.extend(o.inputs.iter().filter_map(|&input| graph.def_op(input)).map(|writer| (writer.0, op.0)));
    }
    edges.extend(step.update_reads);
    Dag::new(graph.ops.len(), edges, step.values).ok()
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
