//! Lifetimes of values under a schedule.
//!
//! Time is the position in the schedule: the op at position `t` reads its inputs and
//! writes its outputs at `t`. For every value this computes
//! - `root`: the value that owns its bytes (a view's root is its base's root; others are
//!   their own root);
//! - `def`: the position it is written (0 for arguments, which exist before the step);
//! - `last`: the last position its bytes are needed, for roots only: the last read of the
//!   value or of any view of it; the end of the step (`n - 1`) for values that must survive
//!   it (params and state that are not updated, returned values and their roots, new values
//!   of updates); `def` if nothing reads it. An updated param or state is needed only up
//!   to its last read: after that its new value takes its place.
//!
//! Assumes a verified graph and a schedule that is a topological order of all its ops.
//! The buffer pass turns these lifetimes into the live ranges offsets are assigned for.

use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, ValueDef};

#[derive(Clone, Debug)]
pub struct Lifetimes {
    pub root: IndexVec<ValueId, ValueId>,
    pub def: IndexVec<ValueId, usize>,
    /// Meaningful for roots only.
    pub last: IndexVec<ValueId, usize>,
    /// Where each op sits in the schedule.
    pub position: IndexVec<OpId, usize>,
}

impl Lifetimes {
    pub fn is_root(&self, value: ValueId) -> bool {
        self.root[value] == value
    }
}

/// The lifetimes of every value of `graph` when its ops run in `schedule` order.
pub fn lifetimes(graph: &Graph, schedule: &[OpId]) -> Lifetimes {
    let end = schedule.len().saturating_sub(1);
    let mut position = IndexVec::from_elem(usize::MAX, graph.ops.len());
    for (t, &op) in schedule.iter().enumerate() {
        position[op] = t;
    }
    // Roots in program order: a view's input is defined before the view.
    let mut root: IndexVec<ValueId, ValueId> = graph.values.indices().collect();
    for op in &graph.ops {
        if let Some(k) = op.kind.def().view_of() {
            root[op.outputs[0]] = root[op.inputs[k]];
        }
    }
    let def: IndexVec<ValueId, usize> = graph
        .values
        .iter()
        .map(|v| match v.def {
            ValueDef::Arg(_) => 0,
            ValueDef::Op { op, .. } => position[op],
        })
        .collect();
    let mut last = def.clone();
    for (t, &op) in schedule.iter().enumerate() {
        for &input in &graph.ops[op].inputs {
            let r = root[input];
            last[r] = last[r].max(t);
        }
    }
    let mut updated: IndexVec<ValueId, bool> = IndexVec::from_elem(false, graph.values.len());
    for update in &graph.updates {
        updated[update.target] = true;
    }
    for (id, value) in graph.values.iter_enumerated() {
        if let ValueDef::Arg(role) = value.def
            && role.persists()
            && !updated[id]
        {
            last[id] = end;
        }
    }
    for v in graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().map(|u| u.value)) {
        last[root[v]] = end;
    }
    Lifetimes { root, def, last, position }
}
