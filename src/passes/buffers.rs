//! The buffer pass: which values share which bytes, and when.
//!
//! Input: a verified graph and a topological schedule. Output: buffers (size and live range)
//! and the buffer of every value.
//! - A view shares its root's buffer (see `analysis::liveness` for roots).
//! - An update's new value shares its target's buffer, so the new param ends in the
//!   param's own memory. This is sound when the old value is dead when the new one is
//!   written: every read of the target (or of a view of it) is at or before the position of
//!   the op writing the new value, and if that op itself reads the target, it reads it
//!   directly (not through a view) as an input its row lets it write that output over in
//!   place (an elementwise update reads each element before it writes it); and the old
//!   value (or a view of it) is not returned, since a returned value must survive the step.
//!   Otherwise the step cannot update in place in this order and the pass says what needs
//!   the old value.
//! - An output the in-place pass (`inplace.rs`) paired with an input that dies at its op
//!   shares that input's buffer; chains of such pairs share one buffer.
//! - Every other root value gets a buffer of its own: its live range is the value's
//!   `[def, last]`.
//!
//! Established: buffers' live ranges cover their values' lifetimes; values sharing a
//! buffer never need their bytes at the same time except in the sound in-place case above.

use crate::analysis::liveness::{Lifetimes, lifetimes};
use crate::index::{BufferId, IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Span};
use crate::passes::PlanError;
use crate::passes::inplace::Reuse;

/// A buffer before it has an offset.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BufferSpec {
    /// Bytes (the largest value it holds, not yet aligned).
    pub size: u64,
    pub first: usize,
    pub last: usize,
    /// Root values it holds, in the order they are written.
    pub values: Vec<ValueId>,
}

#[derive(Clone, Debug)]
pub struct Buffers {
    pub buffers: IndexVec<BufferId, BufferSpec>,
    pub value_buffer: IndexVec<ValueId, BufferId>,
    pub lifetimes: Lifetimes,
}

/// Groups the values of `graph` into buffers for `schedule`.
pub fn assign_buffers(graph: &Graph, schedule: &[OpId], reuse: &Reuse) -> Result<Buffers, PlanError> {
    let lifetimes = lifetimes(graph, schedule);
    let mut buffers: IndexVec<BufferId, BufferSpec> = IndexVec::new();
    let mut value_buffer: IndexVec<ValueId, Option<BufferId>> = IndexVec::from_elem(None, graph.values.len());
    // In-place pairs (see `inplace.rs`) and updates both put a value in another's buffer.
    let mut shares_with: Reuse = reuse.clone();
    let reads = Reads::new(graph, schedule, &lifetimes);
    for update in &graph.updates {
        check_update_in_place(graph, schedule, &lifetimes, &reads, update.target, update.value)?;
        shares_with[update.value] = Some(update.target);
    }
    // Values in order of definition (arguments before op outputs at position 0), so a
    // buffer lists values in the order they are written and a donor's buffer exists first.
    let mut roots: Vec<ValueId> = graph.values.indices().filter(|&v| lifetimes.is_root(v)).collect();
    roots.sort_by_key(|&v| (lifetimes.def[v], graph.def_op(v).is_some(), v));
    for v in roots {
        let bytes = graph.values[v].ty.bytes().expect("verified types have a byte size");
        let (def, last) = (lifetimes.def[v], lifetimes.last[v]);
        let id = match shares_with[v].and_then(|target| value_buffer[target]) {
            Some(id) => {
                let buffer = &mut buffers[id];
                buffer.size = buffer.size.max(bytes);
                buffer.first = buffer.first.min(def);
                buffer.last = buffer.last.max(last);
                buffer.values.push(v);
                id
            }
            None => buffers.push(BufferSpec { size: bytes, first: def, last, values: vec![v] }),
        };
        value_buffer[v] = Some(id);
    }
    let value_buffer = graph
        .values
        .indices()
        .map(|v| value_buffer[lifetimes.root[v]].expect("every root has a buffer"))
        .collect();
    Ok(Buffers { buffers, value_buffer, lifetimes })
}

/// For each root: the last position reading it (directly or through a view) and the
/// first return of it (or of a view of it), so that checking every update is linear.
struct Reads {
    last: IndexVec<ValueId, Option<usize>>,
    returned: IndexVec<ValueId, Option<usize>>,
}

impl Reads {
    fn new(graph: &Graph, schedule: &[OpId], lifetimes: &Lifetimes) -> Reads {
        let mut last = IndexVec::from_elem(None, graph.values.len());
        for (t, &op) in schedule.iter().enumerate() {
            for &input in &graph.ops[op].inputs {
                last[lifetimes.root[input]] = Some(t);
            }
        }
        let mut returned = IndexVec::from_elem(None, graph.values.len());
        for (k, ret) in graph.returns.iter().enumerate().rev() {
            returned[lifetimes.root[ret.value]] = Some(k);
        }
        Reads { last, returned }
    }
}

/// Whether `value` may be written into `target`'s bytes (see the module docs).
fn check_update_in_place(
    graph: &Graph,
    schedule: &[OpId],
    lifetimes: &Lifetimes,
    reads: &Reads,
    target: ValueId,
    value: ValueId,
) -> Result<(), PlanError> {
    let writer = graph.def_op(value).expect("verified update values are op outputs");
    let written_at = lifetimes.position[writer];
    let blocked = |reason: String, reason_span: Span| PlanError::UpdateNotInPlace {
        target_name: graph.value_name(target),
        value_name: graph.value_name(value),
        reason,
        span: graph.updates.iter().find(|u| u.target == target).and_then(|u| u.span.into()),
        reason_span: reason_span.into(),
    };
    let read_by = |reader: OpId| {
        let reason = format!(
            "`{}` still reads {} after {} is written",
            graph.describe_op(reader),
            graph.value_name(target),
            graph.value_name(value)
        );
        blocked(reason, graph.ops[reader].span)
    };
    // A returned old value (or a view of it) must survive the step.
    if let Some(ret) = reads.returned[target].map(|k| &graph.returns[k]) {
        let what = if ret.value == target { "is returned".to_string() } else { format!("is returned through the view {}", graph.value_name(ret.value)) };
        return Err(blocked(format!("the old value of {} {what}, so it must survive the step", graph.value_name(target)), ret.span));
    }
    // A later read of the old value (or of a view of it) is in the way: the first one.
    if reads.last[target].is_some_and(|last| last > written_at) {
        let later = schedule[written_at + 1..].iter().find(|&&op| graph.ops[op].inputs.iter().any(|&i| lifetimes.root[i] == target));
        return Err(read_by(*later.expect("a later read exists")));
    }
    // The writer itself may read the old value only as an in-place input.
    let op = &graph.ops[writer];
    let output = op.outputs.iter().position(|&o| o == value).expect("value is an output of its op");
    let reads: Vec<usize> = (0..op.inputs.len()).filter(|&k| lifetimes.root[op.inputs[k]] == target).collect();
    let direct = reads.iter().all(|&k| op.inputs[k] == target);
    let allowed = reads.iter().any(|&k| op.kind.def().inplace_pairs(op.inputs.len(), &op.attrs).contains(&(output, k)));
    if reads.is_empty() || (direct && allowed) { Ok(()) } else { Err(read_by(writer)) }
}
