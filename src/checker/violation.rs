//! The report of the checker: [`Violation`], one way a plan is wrong, with [`Need`], why
//! an overwritten value was still needed, and [`Violations`], every violation of a plan.
//!
//! Plain data with messages: each variant carries the names it mentions (`%x`, op
//! descriptions, buffer holders) so its message stands on its own, without the graph or
//! the plan. Establishes nothing about plans; the checks that produce these values are in
//! the parent module.

use std::fmt;

use thiserror::Error;

use crate::index::{BufferId, OpId, ValueId};

/// Why an overwritten value was still needed when another value was written over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// `op`, at `position`, reads the value (or a view of it) at or after the write.
    Read { op: OpId, op_desc: String, position: usize },
    /// The value must survive the step; the reason (param/state not updated, returned,
    /// an update's new value).
    Survives(&'static str),
    /// Both values are written at the same position.
    SameWrite,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Read { op, op_desc, position } => write!(f, "{op} `{op_desc}` still reads at position {position}"),
            Need::Survives(why) => write!(f, "must survive the step ({why})"),
            Need::SameWrite => f.write_str("is written at the same position"),
        }
    }
}

/// One way a plan is wrong. Names (`%x`, op descriptions, buffer holders) are carried so the
/// message stands on its own.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Violation {
    /// The plan's JSON schema is not the one this memplan reads (an old or newer file; not a
    /// planner bug). Later checks still run, on the fields as they were read.
    #[error("plan has schema version {found}, this memplan reads version {expected}")]
    SchemaVersion { found: u32, expected: u32 },

    /// The plan names another step than the graph: probably a plan for another graph.
    #[error("plan is for step @{plan_step}, but the graph is @{graph_step}")]
    StepMismatch { plan_step: String, graph_step: String },

    /// `value_buffer` does not have one entry per graph value (a plan for another graph, or
    /// a planner bug). Every per-value check is skipped.
    #[error("value_buffer maps {found} values, but the graph has {expected}; per-value checks skipped")]
    ValueBufferLength { found: usize, expected: usize },

    /// A value maps to a buffer id the plan does not have. Always a planner bug.
    #[error("{value_name} maps to {buffer}, but the plan has only {buffers} buffers")]
    BufferIdOutOfRange { value: ValueId, value_name: String, buffer: BufferId, buffers: usize },

    /// A buffer's `values` lists a value id the graph does not have. Always a planner bug.
    #[error("{buffer} lists value {value}, but the graph has only {values} values")]
    ListedValueOutOfRange { buffer: BufferId, value: ValueId, values: usize },

    /// The schedule names an op id the graph does not have. Always a planner bug.
    #[error("schedule position {position} names {op}, but the graph has only {ops} ops")]
    OpIdOutOfRange { position: usize, op: OpId, ops: usize },

    /// An op of the graph is not in the schedule. Always a planner bug.
    #[error("{op} `{op_desc}` is not in the schedule")]
    OpNotScheduled { op: OpId, op_desc: String },

    /// An op appears more than once in the schedule. Always a planner bug.
    #[error("{op} `{op_desc}` is scheduled twice, at positions {first} and {second}")]
    OpScheduledTwice { op: OpId, op_desc: String, first: usize, second: usize },

    /// An op is scheduled at or before the op that defines one of its inputs: the schedule
    /// is not topological. Always a planner bug.
    #[error(
        "{op} `{op_desc}` at position {position} reads {input_name} before {def_op} `{def_desc}` defines it at position {def_position}"
    )]
    NotTopological {
        op: OpId,
        op_desc: String,
        position: usize,
        input: ValueId,
        input_name: String,
        def_op: OpId,
        def_desc: String,
        def_position: usize,
    },

    /// The alignment is not a power of two (or is zero). Alignment and lower-bound checks
    /// are skipped. Always a planner bug (or a bad option that should have been refused).
    #[error("alignment {alignment} is not a power of two; alignment and lower-bound checks skipped")]
    AlignmentNotPowerOfTwo { alignment: u64 },

    /// A buffer's offset is not a multiple of the alignment. Always a planner bug.
    #[error("{buffer} (holding {holds}) is at offset {offset}, not a multiple of the alignment {alignment}")]
    Misaligned { buffer: BufferId, holds: String, offset: u64, alignment: u64 },

    /// A buffer reaches past the end of the arena (`end` = offset + size, computed without
    /// overflow). Always a planner bug.
    #[error("{buffer} (holding {holds}) spans [{offset}, {end}), past the end of the {arena_bytes}-byte arena")]
    PastArenaEnd { buffer: BufferId, holds: String, offset: u64, end: u128, arena_bytes: u64 },

    /// A buffer's claimed live range is empty (`first > last`); it is left out of the
    /// overlap sweep. Always a planner bug.
    #[error("{buffer} (holding {holds}) claims live range [{first}, {last}], which is empty")]
    BufferRangeInverted { buffer: BufferId, holds: String, first: usize, last: usize },

    /// A root value has more bytes than its buffer. Always a planner bug.
    #[error("{value_name} needs {bytes} bytes, but its buffer {buffer} has only {size}")]
    ValueLargerThanBuffer { value: ValueId, value_name: String, bytes: u64, buffer: BufferId, size: u64 },

    /// A view does not map to its root's buffer (views own no storage). Always a planner bug.
    #[error("view {view_name} is in {view_buffer}, but its root {root_name} is in {root_buffer}")]
    ViewNotInRootBuffer {
        view: ValueId,
        view_name: String,
        view_buffer: BufferId,
        root: ValueId,
        root_name: String,
        root_buffer: BufferId,
    },

    /// An update's new value is not in its target's buffer, so it does not land in place.
    /// Always a planner bug.
    #[error(
        "update {target_name} <- {value_name} does not land in place: {value_name} is in {value_buffer}, {target_name} in {target_buffer}"
    )]
    UpdateNotInPlace {
        target: ValueId,
        target_name: String,
        target_buffer: BufferId,
        value: ValueId,
        value_name: String,
        value_buffer: BufferId,
    },

    /// Two root values share bytes while both are live (and it is not the allowed in-place
    /// case): `written` is written over bytes of `overwritten`, which is still needed.
    /// `writer` is the op writing it (`None` for an argument). Always a planner bug.
    #[error(
        "{written_name}, written by {writer_desc} at position {position}, clobbers bytes [{start}, {end}) of {overwritten_name}, which {need}"
    )]
    ClobberedRead {
        writer: Option<OpId>,
        writer_desc: String,
        position: usize,
        written: ValueId,
        written_name: String,
        overwritten: ValueId,
        overwritten_name: String,
        start: u128,
        end: u128,
        need: Need,
    },

    /// Two buffers whose claimed live ranges and byte ranges both overlap. Always a planner
    /// bug.
    #[error(
        "{a} (holding {a_holds}, live [{a_first}, {a_last}]) and {b} (holding {b_holds}, live [{b_first}, {b_last}]) share bytes [{start}, {end}) while both live"
    )]
    OverlappingBuffers {
        a: BufferId,
        a_holds: String,
        a_first: usize,
        a_last: usize,
        b: BufferId,
        b_holds: String,
        b_first: usize,
        b_last: usize,
        start: u128,
        end: u128,
    },

    /// A buffer's claimed live range does not cover the derived lifetime of a root value it
    /// holds. Always a planner bug.
    #[error("{buffer} claims live range [{first}, {last}], but holds {value_name}, live [{def}, {value_last}]")]
    BufferRangeMissesValue {
        buffer: BufferId,
        first: usize,
        last: usize,
        value: ValueId,
        value_name: String,
        def: usize,
        value_last: usize,
    },

    /// A buffer lists a value that `value_buffer` maps to another buffer. Always a planner
    /// bug.
    #[error("{buffer} lists {value_name}, which value_buffer maps to {mapped_to}")]
    BufferListsUnmapped { buffer: BufferId, value: ValueId, value_name: String, mapped_to: BufferId },

    /// A buffer lists a view (views are not listed: they share their root's entry). Always a
    /// planner bug.
    #[error("{buffer} lists view {value_name}; views share their root {root_name}'s entry")]
    BufferListsView { buffer: BufferId, value: ValueId, value_name: String, root_name: String },

    /// A buffer lists the same value twice. Always a planner bug.
    #[error("{buffer} lists {value_name} twice")]
    BufferListsValueTwice { buffer: BufferId, value: ValueId, value_name: String },

    /// A root value maps to a buffer whose `values` does not list it. Always a planner bug.
    #[error("{buffer} holds {value_name} (per value_buffer) but does not list it")]
    BufferOmitsValue { buffer: BufferId, value: ValueId, value_name: String },

    /// The plan's `lower_bound` differs from the one recomputed from the schedule and the
    /// buffers. Always a planner bug.
    #[error("plan claims a lower bound of {claimed} bytes, but it is {recomputed}")]
    LowerBound { claimed: u64, recomputed: u128 },

    /// [`check_offsets`](super::check_offsets): the list has `buffers` buffers but
    /// `offsets` offsets. Nothing else is checked.
    #[error("{buffers} buffers but {offsets} offsets")]
    ListLength { buffers: usize, offsets: usize },

    /// [`check_offsets`](super::check_offsets): buffer `buffer` (its index in the list) has
    /// `first > last`; it is left out of the overlap sweep.
    #[error("buffer #{buffer} has an empty live range [{first}, {last}]")]
    ListRangeInverted { buffer: usize, first: usize, last: usize },

    /// [`check_offsets`](super::check_offsets): `offset + size` does not fit in 64 bits.
    #[error("buffer #{buffer} at offset {offset} with {size} bytes ends past 2^64 - 1")]
    ListOverflow { buffer: usize, offset: u64, size: u64 },

    /// [`check_offsets`](super::check_offsets): a buffer ends past the capacity.
    #[error("buffer #{buffer} spans [{offset}, {end}), past the capacity of {capacity} bytes")]
    ListPastCapacity { buffer: usize, offset: u64, end: u128, capacity: u64 },

    /// [`check_offsets`](super::check_offsets): two buffers live at the same time share
    /// bytes (`a < b`, indices in the list).
    #[error("buffers #{a} (live [{a_first}, {a_last}]) and #{b} (live [{b_first}, {b_last}]) share bytes [{start}, {end}) while both live")]
    ListOverlap { a: usize, a_first: usize, a_last: usize, b: usize, b_first: usize, b_last: usize, start: u128, end: u128 },

    /// A recompute names an op id the graph does not have. Always a planner bug.
    #[error("recompute {index} names {op}, but the graph has only {ops} ops")]
    RecomputeIdOutOfRange { index: usize, op: OpId, ops: usize },

    /// A recompute's original is itself a clone (or the clone itself): originals must be
    /// ops of the step. Always a planner bug.
    #[error("{clone} `{clone_desc}` is listed as recomputing {of} `{of_desc}`, which is not an original op (it is a clone itself)")]
    RecomputeOfClone { clone: OpId, clone_desc: String, of: OpId, of_desc: String },

    /// An op is listed as a clone more than once. Always a planner bug.
    #[error("{clone} `{clone_desc}` is listed as a recompute twice")]
    RecomputeListedTwice { clone: OpId, clone_desc: String },

    /// A clone is not the same op as its original: another kind, other attributes, or
    /// another number of inputs or outputs, so it need not compute the same bits. Always
    /// a planner bug.
    #[error("{clone} `{clone_desc}` recomputes {of} `{of_desc}` but differs from it: {what}")]
    RecomputeDiffers { clone: OpId, clone_desc: String, of: OpId, of_desc: String, what: String },

    /// A clone's input does not hold the same bits as its original's input: it is neither
    /// the same value nor a recompute of it. Always a planner bug.
    #[error(
        "{clone} `{clone_desc}` recomputes {of} `{of_desc}`, but its input {input} is {clone_input_name}, which does not hold the bits of {original_input_name}"
    )]
    RecomputeInputDiffers {
        clone: OpId,
        clone_desc: String,
        of: OpId,
        of_desc: String,
        input: usize,
        clone_input_name: String,
        original_input_name: String,
    },

    /// The FLOPs the plan claims (without and with recomputation) are not those of the
    /// graph's ops (the op table's cost model). Always a planner bug.
    #[error("plan claims {claimed_base} FLOPs without recomputation and {claimed} with, but they are {base} and {total}")]
    RematFlops { claimed_base: u64, claimed: u64, base: u128, total: u128 },

    /// The arena is larger than the budget the plan was made for. Always a planner bug.
    #[error("the arena has {arena_bytes} bytes, more than the budget of {budget}")]
    OverBudget { arena_bytes: u64, budget: u64 },

    /// A sweep found more than [`MAX_PAIRS`](super::MAX_PAIRS) overlapping pairs and
    /// stopped listing them (a planner bug, or a hostile plan).
    #[error("more than {shown} {what}; the rest are not listed")]
    TooManyPairs { what: &'static str, shown: usize },
}

/// Every violation of a plan; displays one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_display_one_per_line() {
        let v = Violations(vec![
            Violation::AlignmentNotPowerOfTwo { alignment: 3 },
            Violation::LowerBound { claimed: 1, recomputed: 2 },
        ]);
        let text = v.to_string();
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with("alignment 3 is not a power of two"));
        assert!(text.ends_with("plan claims a lower bound of 1 bytes, but it is 2"));
    }
}
