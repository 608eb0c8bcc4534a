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
//! The lower bound of offset assignment follows from these lifetimes (`max_live`).

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
        if let Some(k) = op.kind.def().view_of {
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
    let updated: Vec<ValueId> = graph.updates.iter().map(|u| u.target).collect();
    for (id, value) in graph.values.iter_enumerated() {
        if let ValueDef::Arg(role) = value.def
            && role.persists()
            && !updated.contains(&id)
        {
            last[id] = end;
        }
    }
    for v in graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().map(|u| u.value)) {
        last[root[v]] = end;
    }
    Lifetimes { root, def, last, position }
}

/// An interval `[first, last]` of schedule positions during which `size` bytes are held.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Live {
    pub first: usize,
    pub last: usize,
    pub size: u64,
}

/// The most bytes live at once, and the first position where that happens.
/// `None` if the sum overflows `u64`.
pub fn max_live(intervals: &[Live]) -> Option<(u64, usize)> {
    // +size at `first`, -size after `last`; at equal times frees come after allocations of
    // the same position only when they belong to a later one, which `last + 1` ensures.
    let mut events: Vec<(usize, bool, u64)> = Vec::with_capacity(intervals.len() * 2);
    for live in intervals {
        events.push((live.first, true, live.size));
        events.push((live.last + 1, false, live.size));
    }
    // Frees (false) sort before allocations (true) at the same position.
    events.sort_unstable();
    let (mut current, mut best, mut at) = (0u64, 0u64, 0usize);
    for (t, alloc, size) in events {
        if alloc {
            current = current.checked_add(size)?;
            if current > best {
                best = current;
                at = t;
            }
        } else {
            current -= size;
        }
    }
    Some((best, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_live_counts_touching_intervals_apart() {
        let l = |first, last, size| Live { first, last, size };
        // [0,1] and [2,3] never overlap; [1,2] overlaps both.
        assert_eq!(max_live(&[l(0, 1, 10), l(2, 3, 10)]), Some((10, 0)));
        assert_eq!(max_live(&[l(0, 1, 10), l(2, 3, 10), l(1, 2, 5)]), Some((15, 1)));
        assert_eq!(max_live(&[]), Some((0, 0)));
        assert_eq!(max_live(&[l(0, 0, u64::MAX), l(0, 0, 1)]), None);
    }
}
