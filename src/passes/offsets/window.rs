//! Peak window: the exact search on the steps around the peak, the rest placed around it.
//!
//! On long training steps the lower bound is often reached at one sharp peak (idealloc's
//! pangu_2.6B: one step, with every other step at least 40 MiB below it). Greedy and
//! best-fit fill that column of buffers with a hole, because what they put at the peak
//! was chosen for other steps; the exact search (`exact.rs`) cannot finish the whole list.
//! But the column is what decides the arena, and the steps near it are few.
//!
//! [`peak_window`] cuts the list to a window of steps around the peak (every buffer that
//! meets the window, its live range clipped to it), asks the exact search for a placement
//! of that small list within the target, pins those buffers at the offsets found (for
//! their whole live range, not only inside the window), and places every other buffer
//! around them by greedy's order and first fit (`busy.rs`). Away from the peak memory has
//! room, so the pinned buffers rarely push the others above the target; when they do, a
//! window four times as wide is tried (more steps of the pinned buffers' lives are then
//! packed together). The smallest arena found is returned.
//!
//! Invariants: the result is a valid placement of `intervals` (the window's placement
//! holds inside the window, where all pinned buffers that meet each other meet; outside
//! the window only pinned buffers that met inside it can meet, and those already do not
//! share a byte); clipping only removes overlaps, so a window that the search proves
//! infeasible shows that no placement of the whole list fits the target either. Every
//! decision counts search nodes, never time (the deadline is a safety net), so the same
//! budget gives the same placement on every machine.

use std::cmp::Reverse;

use super::busy::{Fit, place_pinned};
use super::exact::{ExactResult, Limits, Prepared, Restart};
use crate::analysis::liveness::{Live, max_live};

/// Lists with fewer buffers skip the windows: the exact search on the whole list is cheap
/// there, and a window would hold most of the list anyway.
pub(super) const WINDOW_FROM: usize = 1000;

/// The first window: this many allocation times either side of the peak.
const FIRST_HALF: usize = 8;

/// Each next window is this many times as wide.
const GROWTH: usize = 4;

/// The most search nodes one window's search may take.
const WINDOW_NODES: u64 = 50_000;

/// What [`peak_window`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Windowed {
    /// The best placement found (`None`: no window's search found one within the target).
    pub offsets: Option<Vec<u64>>,
    /// Whether a window's search proved that nothing fits the target.
    pub proved_infeasible: bool,
    /// Search nodes used in all.
    pub nodes: u64,
}

/// Places `intervals` by exact search on widening windows around the peak (module docs),
/// the window's buffers within `target` bytes, until the arena is `target` or the limits
/// are spent. `target` should be at least the lower bound; `None` on overflow.
pub fn peak_window(intervals: &[Live], target: u64, limits: Limits) -> Option<Windowed> {
    let mut out = Windowed { offsets: None, proved_infeasible: false, nodes: 0 };
    let (_, peak) = max_live(intervals)?;
    // Windows are counted in allocation times, so sparse step numbers do not matter.
    let mut times: Vec<usize> = intervals.iter().map(|l| l.first).collect();
    times.sort_unstable();
    times.dedup();
    let at = times.partition_point(|&t| t < peak);
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| (Reverse(intervals[i].size), i));
    let mut best_arena = u64::MAX;
    let mut half = FIRST_HALF;
    loop {
        let from = times[at.saturating_sub(half)];
        let to = times[at.saturating_add(half).min(times.len() - 1)];
        let inside: Vec<usize> = (0..intervals.len()).filter(|&i| intervals[i].first <= to && intervals[i].last >= from).collect();
        if inside.len() == intervals.len() {
            return Some(out); // the whole list: the exact search's own job
        }
        let clipped: Vec<Live> =
            inside.iter().map(|&i| Live { first: intervals[i].first.max(from), last: intervals[i].last.min(to), size: intervals[i].size }).collect();
        let nodes = limits.nodes.saturating_sub(out.nodes).min(WINDOW_NODES);
        if nodes == 0 || std::time::Instant::now() >= limits.deadline {
            return Some(out);
        }
        let (result, used) = Prepared::new(&clipped).solve_from(target, Limits { deadline: limits.deadline, nodes }, &mut Restart::default());
        out.nodes = out.nodes.saturating_add(used);
        let window_offsets = match result {
            ExactResult::Found(offsets) => offsets,
            ExactResult::Infeasible => {
                out.proved_infeasible = true;
                return Some(out);
            }
            ExactResult::TimedOut => return Some(out),
        };
        let pinned: Vec<(usize, u64)> = inside.iter().copied().zip(window_offsets).collect();
        let mut pinned_first: Vec<usize> = inside.clone();
        let mut is_pinned = vec![false; intervals.len()];
        for &i in &inside {
            is_pinned[i] = true;
        }
        pinned_first.extend(order.iter().copied().filter(|&i| !is_pinned[i]));
        let offsets = place_pinned(intervals, &pinned_first, Fit::First, &pinned)?;
        let arena = super::arena_of(intervals, &offsets)?;
        if arena < best_arena {
            best_arena = arena;
            out.offsets = Some(offsets);
        }
        if best_arena <= target {
            return Some(out);
        }
        half = half.saturating_mul(GROWTH);
    }
}
