//! The plan as a buffer list in minimalloc's CSV format with an `offset` column
//! (`buffer_list.rs` writes and reads it), so any plan can be cross-checked with other
//! offset solvers, or its offsets validated by any tool that reads the format.
//!
//! One row per buffer, in buffer order: `id` is the buffer (`buf3`), `[lower, upper)` its
//! live range as half-open schedule steps (`first`, `last + 1`), `size` its bytes rounded
//! up to the plan's alignment (the sizes the offset solver placed), `offset` its offset.

use crate::buffer_list::{ListedBuffer, write_buffer_list};
use crate::plan::{Plan, align_up};

/// The buffer list of `plan` (see the module docs).
pub fn render(plan: &Plan) -> String {
    let buffers: Vec<ListedBuffer> = plan
        .buffers
        .iter_enumerated()
        .map(|(id, b)| ListedBuffer {
            id: id.to_string(),
            lower: b.first as u64,
            upper: b.last as u64 + 1,
            size: align_up(b.size, plan.alignment).unwrap_or(u64::MAX),
            offset: Some(b.offset),
        })
        .collect();
    let offsets: Vec<u64> = plan.buffers.iter().map(|b| b.offset).collect();
    write_buffer_list(&buffers, &offsets)
}
