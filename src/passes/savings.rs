//! What each pass saved: the lower bound (the most aligned bytes live at once) of the step
//! before recomputation, with its ops in program order, after the schedule pass and after
//! the in-place pass (`Savings`; the offsets pass adds the arena).
//!
//! Figures of the step as given: a budget's recomputation changes the step itself, so its
//! effect is reported apart (the plan's `remat` record), not as a pass's saving.

use crate::index::OpId;
use crate::ir::graph::Graph;
use crate::passes::buffers::{Buffers, assign_buffers};
use crate::passes::inplace::{Reuse, no_reuse};
use crate::passes::offsets::lower_bound;
use crate::passes::schedule::program_order;
use crate::passes::PlanError;
use crate::plan::Savings;

/// The savings of `graph` run in `schedule` with the in-place pairs `reuse` (`arena` left
/// 0). `buffers`: those of exactly that schedule and reuse, when the caller has them.
pub fn savings(
    graph: &Graph,
    schedule: &[OpId],
    reuse: &Reuse,
    buffers: Option<&Buffers>,
    alignment: u64,
) -> Result<Savings, PlanError> {
    let after_inplace = match buffers {
        Some(buffers) => lower_bound(buffers, alignment)?,
        None => lower_bound(&assign_buffers(graph, schedule, reuse)?, alignment)?,
    };
    let no_reuse = no_reuse(graph);
    let after_schedule = lower_bound(&assign_buffers(graph, schedule, &no_reuse)?, alignment)?;
    let program = program_order(graph);
    let program_order = if schedule == program {
        after_schedule
    } else {
        lower_bound(&assign_buffers(graph, &program, &no_reuse)?, alignment)?
    };
    Ok(Savings { program_order, after_schedule, after_inplace, arena: 0 })
}
