//! How a step becomes the plain DAG the order and remat solvers see: ONE lowering, used
//! by the schedule pass (`schedule.rs`, an [`order::Dag`](crate::solve::order::Dag)) and the
//! remat pass (`remat/problem.rs`, a [`remat::Problem`](crate::solve::remat::Problem)).
//!
//! Nodes are ops: node `i` is the op at position `i` of the order the caller gives. Values
//! ([`DagValue`]) are the *buffers* the buffer pass will make, so a DAG's peak of an order
//! is exactly the plan's lower bound for it (before in-place reuse):
//! - a root value (not a view) is a value; a view owns no bytes, so reading a view reads
//!   its root, and the root lives until the view's last reader;
//! - arguments exist before the first op (no writer); params and state that are not
//!   updated, returned values (their roots) and new values of updates survive the step;
//! - an update's new value shares its target's buffer, which therefore lives the whole
//!   step: one value with no writer that survives;
//! - sizes are rounded up to the alignment, as the lower bound rounds them.
//!
//! Two orderings are not carried by the values, and are listed for each solver to express
//! in its own terms (the DAG as edges, the remat problem as 0-byte token values):
//! - [`StepDag::views`]: a view op runs before the ops reading its output (the view's
//!   bytes are its root's, whose writer is another op);
//! - [`StepDag::update_reads`]: every op that reads an updated param or state (or a view
//!   of it) runs before the op writing its new value, so the new value can land in place
//!   (the buffer pass's rule for updates).
//!
//! Assumes a verified graph and an order that is a topological order of all its ops.

use crate::analysis::liveness::lifetimes;
use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, ValueDef};
use crate::plan::align_up;
use crate::solve::{DagValue, Node};

/// A step as nodes and values (see the module docs).
#[derive(Clone, Debug)]
pub struct StepDag {
    /// `ops[node]`: the op each node runs (the order lowered).
    pub ops: Vec<OpId>,
    pub values: Vec<DagValue>,
    /// `slot[v]`: the index in `values` of the value holding `v`'s bytes (its root's, or
    /// for an update's new value its target's).
    pub slot: IndexVec<ValueId, usize>,
    /// `root[v]`: the value owning `v`'s bytes (`v` itself unless it is a view).
    pub root: IndexVec<ValueId, ValueId>,
    /// Each view op's node and the nodes reading its output, in op order.
    pub views: Vec<(Node, Vec<Node>)>,
    /// `(reader, writer)`: `reader` reads an updated target (directly or through a view)
    /// and must run before `writer`, which writes the target's new value; by update, then
    /// by op.
    pub update_reads: Vec<(Node, Node)>,
}

/// Lowers a verified `graph` run in `order` (a topological order of every op); sizes are
/// rounded up to `alignment`. `None` if a size overflows.
pub fn lower(graph: &Graph, order: &[OpId], alignment: u64) -> Option<StepDag> {
    let life = lifetimes(graph, order);
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
    let mut values: Vec<DagValue> = Vec::new();
    for v in graph.values.indices().filter(|&v| root[v] == v && home[v] == v) {
        index[v] = Some(values.len());
        let to_end = matches!(graph.values[v].def, ValueDef::Arg(role) if role.persists());
        values.push(DagValue { size: 0, def: graph.def_op(v).map(node), readers: Vec::new(), to_end });
    }
    let slot: IndexVec<ValueId, usize> =
        graph.values.indices().map(|v| index[home[root[v]]].expect("every root's home is a value")).collect();
    for v in graph.values.indices().filter(|&v| root[v] == v) {
        let bytes = align_up(graph.values[v].ty.bytes()?, alignment)?;
        let value = &mut values[slot[v]];
        value.size = value.size.max(bytes);
    }
    // An updated target is needed only until its last read, but its buffer also holds the
    // new value, which survives: the buffer lives the whole step.
    for v in graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().flat_map(|u| [u.target, u.value])) {
        values[slot[v]].to_end = true;
    }
    for (op_id, op) in graph.ops.iter_enumerated() {
        for &input in &op.inputs {
            values[slot[input]].readers.push(node(op_id));
        }
    }
    let users = graph.users();
    let views = graph
        .ops
        .iter_enumerated()
        .filter(|(_, op)| op.kind.def().view_of().is_some())
        .map(|(op_id, op)| (node(op_id), users[op.outputs[0]].iter().map(|&r| node(r)).collect()))
        .collect();
    // By update, then by op: each op's inputs are looked up in the updates of their root
    // (one pass over the ops, not one per update).
    let mut updates_of: IndexVec<ValueId, Vec<usize>> = IndexVec::from_elem(Vec::new(), graph.values.len());
    let mut writers = Vec::with_capacity(graph.updates.len());
    for (u, update) in graph.updates.iter().enumerate() {
        updates_of[update.target].push(u);
        writers.push(graph.def_op(update.value)?);
    }
    let mut readers_of: Vec<Vec<Node>> = vec![Vec::new(); graph.updates.len()];
    let mut read: Vec<usize> = Vec::new();
    for (op_id, op) in graph.ops.iter_enumerated() {
        read.clear();
        read.extend(op.inputs.iter().flat_map(|&input| updates_of[root[input]].iter().copied()));
        read.sort_unstable();
        read.dedup();
        for &u in read.iter().filter(|&&u| op_id != writers[u]) {
            readers_of[u].push(node(op_id));
        }
    }
    let update_reads =
        readers_of.into_iter().zip(writers).flat_map(|(readers, writer)| readers.into_iter().map(move |r| (r, node(writer)))).collect();
    Some(StepDag { ops: order.to_vec(), values, slot, root: life.root, views, update_reads })
}
