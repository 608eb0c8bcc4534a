//! Offset assignment: place buffers with known sizes and live ranges in one arena.
//!
//! Solvers see only intervals (`first..=last`, `size`), never the graph, so the same code
//! serves plans (`memplan plan`) and bare buffer lists (`memplan alloc`). In plans, sizes
//! arrive already rounded up to the alignment; every solver places buffers at 0 or at the
//! end of another buffer, so offsets stay aligned. The quality figure is arena /
//! [`lower_bound`] (the most bytes live at once): no solver can beat it.
//!
//! Every solver returns a [`Solution`]; `proved_optimal` is set when the arena equals the
//! lower bound or an exact search finished without finding a smaller arena.

pub mod bestfit;
pub mod exact;

use std::time::{Duration, Instant};

use crate::analysis::liveness::{Live, max_live};

/// The offset solvers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Solver {
    /// Best-fit by decreasing size (XLA's heap simulator idea).
    #[default]
    BestFit,
    /// Branch and bound (`exact.rs`): within `capacity` if given, else the smallest arena
    /// it can find from best-fit's, both within `time_limit`.
    Exact,
}

/// What a solver is asked.
#[derive(Clone, Copy, Debug)]
pub struct SolveOptions {
    pub solver: Solver,
    /// The arena must not exceed this many bytes (`None`: minimise the arena).
    pub capacity: Option<u64>,
    /// How long a search may run (heuristics ignore it).
    pub time_limit: Duration,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions { solver: Solver::default(), capacity: None, time_limit: Duration::from_millis(200) }
    }
}

/// Offsets for every interval, in input order.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Solution {
    pub offsets: Vec<u64>,
    /// max(offset + size): the arena these offsets need.
    pub arena: u64,
    /// Whether no smaller arena exists for these intervals.
    pub proved_optimal: bool,
}

/// Why no solution was returned.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SolveError {
    /// A sum of sizes or offsets overflows `u64`.
    Overflow,
    /// No placement within the capacity was found in the time limit. `best` is the smallest
    /// arena found (over capacity); `proved_infeasible` says that none within it exists.
    OverCapacity { capacity: u64, best: Option<Solution>, proved_infeasible: bool },
}

/// Places `intervals` with the chosen solver.
pub fn solve(intervals: &[Live], options: &SolveOptions) -> Result<Solution, SolveError> {
    solve_reporting(intervals, options, &crate::progress::Silent)
}

/// [`solve`], reporting the exact search's progress to `progress`.
pub fn solve_reporting(
    intervals: &[Live],
    options: &SolveOptions,
    progress: &dyn crate::progress::Progress,
) -> Result<Solution, SolveError> {
    let lower = lower_bound(intervals).ok_or(SolveError::Overflow)?;
    let offsets = bestfit::best_fit(intervals).ok_or(SolveError::Overflow)?;
    let arena = arena_of(intervals, &offsets).ok_or(SolveError::Overflow)?;
    let solution = Solution { offsets, arena, proved_optimal: arena == lower };
    if options.solver == Solver::Exact && !solution.proved_optimal {
        let now = Instant::now();
        let deadline = now.checked_add(options.time_limit).unwrap_or(now);
        match options.capacity {
            None => return Ok(exact::minimize_reporting(intervals, lower, solution, deadline, progress)),
            Some(capacity) if arena > capacity => {
                let proved_infeasible = match exact::exact(intervals, capacity, deadline) {
                    exact::ExactResult::Found(offsets) => {
                        let arena = arena_of(intervals, &offsets).ok_or(SolveError::Overflow)?;
                        return Ok(Solution { offsets, arena, proved_optimal: arena == lower });
                    }
                    exact::ExactResult::Infeasible => true,
                    exact::ExactResult::TimedOut => false,
                };
                return Err(SolveError::OverCapacity { capacity, best: Some(solution), proved_infeasible });
            }
            Some(_) => {}
        }
    }
    match options.capacity {
        Some(capacity) if arena > capacity => Err(SolveError::OverCapacity {
            capacity,
            proved_infeasible: lower > capacity,
            best: Some(solution),
        }),
        _ => Ok(solution),
    }
}

/// max(offset + size) over the intervals, `None` on overflow.
pub fn arena_of(intervals: &[Live], offsets: &[u64]) -> Option<u64> {
    intervals.iter().zip(offsets).map(|(l, &o)| o.checked_add(l.size)).try_fold(0u64, |a, e| Some(a.max(e?)))
}

/// The most bytes live at once: no assignment's arena is smaller.
pub fn lower_bound(intervals: &[Live]) -> Option<u64> {
    max_live(intervals).map(|(bytes, _)| bytes)
}
