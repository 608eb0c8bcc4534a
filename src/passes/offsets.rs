//! The offsets pass: lowers the buffers to the offsets solver's problem (live ranges with
//! aligned sizes, `solve::offsets`), solves it and assembles the [`Plan`].
//!
//! Sizes are rounded up to the alignment before solving: every solver places a buffer at 0
//! or at the end of another, so offsets stay aligned. The plan's `lower_bound` is the most
//! aligned bytes live at one position, which no offsets can beat.

use std::time::Duration;

use crate::index::OpId;
use crate::ir::graph::Graph;
use crate::passes::buffers::Buffers;
use crate::passes::{PlanError, PlanOptions};
use crate::plan::{Buffer, Plan, RematRecord, SCHEMA_VERSION, Savings, align_up};
use crate::solve::offsets::{self, Live, SolveOptions};

/// The buffers' live ranges, sizes rounded up to `alignment`.
pub fn intervals(buffers: &Buffers, alignment: u64) -> Result<Vec<Live>, PlanError> {
    buffers
        .buffers
        .iter()
        .map(|b| Some(Live { first: b.first, last: b.last, size: align_up(b.size, alignment)? }))
        .collect::<Option<Vec<_>>>()
        .ok_or(PlanError::ArenaOverflow)
}

/// The lower bound of `buffers`: the most aligned bytes live at one schedule position.
pub fn lower_bound(buffers: &Buffers, alignment: u64) -> Result<u64, PlanError> {
    offsets::lower_bound(&intervals(buffers, alignment)?).ok_or(PlanError::ArenaOverflow)
}

/// The arena the offsets solver chosen in `options` finds for `buffers` with its search
/// stopped after `time_limit`: how the remat pass measures a candidate step.
pub fn arena(buffers: &Buffers, options: &PlanOptions, time_limit: Duration) -> Result<u64, PlanError> {
    let solve_options = SolveOptions { solver: options.solver, time_limit, ..SolveOptions::default() };
    let intervals = intervals(buffers, options.alignment)?;
    offsets::solve(&intervals, &solve_options).map(|s| s.arena).map_err(|_| PlanError::ArenaOverflow)
}

/// The pass: solves `buffers` of `graph` run in `schedule` within `options`' limits and
/// assembles the plan (`savings` gains the arena; `remat` is the remat pass's record).
pub fn assign_offsets(
    graph: &Graph,
    schedule: &[OpId],
    buffers: &Buffers,
    options: &PlanOptions,
    savings: Savings,
    remat: Option<RematRecord>,
) -> Result<Plan, PlanError> {
    let intervals = intervals(buffers, options.alignment)?;
    let solve_options =
        SolveOptions { solver: options.solver, capacity: None, time_limit: options.time_limit, search_nodes: options.search_nodes, halt_heuristics: false };
    let solution = offsets::solve(&intervals, &solve_options).map_err(|_| PlanError::ArenaOverflow)?;
    let (offsets, arena_bytes) = (solution.offsets, solution.arena);
    let lower_bound = offsets::lower_bound(&intervals).ok_or(PlanError::ArenaOverflow)?;
    let buffers_out = buffers
        .buffers
        .iter()
        .zip(offsets)
        .map(|(b, offset)| Buffer { offset, size: b.size, first: b.first, last: b.last, values: b.values.clone() })
        .collect();
    Ok(Plan {
        schema_version: SCHEMA_VERSION,
        step: graph.name.clone(),
        alignment: options.alignment,
        schedule: schedule.to_vec(),
        buffers: buffers_out,
        value_buffer: buffers.value_buffer.clone(),
        arena_bytes,
        lower_bound,
        savings: Savings { arena: arena_bytes, ..savings },
        remat,
    })
}
