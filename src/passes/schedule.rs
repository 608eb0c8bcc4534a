//! The schedule pass: the order ops run in.
//!
//! For now the schedule is program order, which a verified graph guarantees is
//! topological. A memory-aware order (issue 6) will live here and must never be worse.

use crate::index::OpId;
use crate::ir::graph::Graph;

/// Program order: every op once, in the order the step lists them.
pub fn program_order(graph: &Graph) -> Vec<OpId> {
    graph.ops.indices().collect()
}
