//! Offset assignment: place buffers with known sizes and live ranges in one arena.
//!
//! Solvers see only intervals (`first..=last`, `size`), never the graph, so the same code
//! serves plans and bare buffer lists. Sizes arrive already rounded up to the alignment;
//! every solver places buffers at 0 or at the end of another buffer, so offsets stay
//! aligned. The quality figure is arena / `lower_bound` (the most bytes live at once):
//! no solver can beat it.

pub mod bestfit;

use crate::analysis::liveness::{Live, max_live};

/// The offset solvers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Solver {
    /// Best-fit by decreasing size (XLA's heap simulator idea).
    #[default]
    BestFit,
}

/// Offsets for `intervals` and the arena size they need (`None` if a sum overflows `u64`).
pub fn solve(intervals: &[Live], solver: Solver) -> Option<(Vec<u64>, u64)> {
    let offsets = match solver {
        Solver::BestFit => bestfit::best_fit(intervals)?,
    };
    let arena = intervals.iter().zip(&offsets).map(|(l, &o)| o.checked_add(l.size)).try_fold(0u64, |a, e| Some(a.max(e?)))?;
    Some((offsets, arena))
}

/// The most bytes live at once: no assignment's arena is smaller.
pub fn lower_bound(intervals: &[Live]) -> Option<u64> {
    max_live(intervals).map(|(bytes, _)| bytes)
}
