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
//! Invariants:
//! - the result is a valid placement of `intervals`: two pinned buffers that meet in time
//!   also meet inside the window (three pairwise intersecting intervals, theirs and the
//!   window's, share a point), where the search kept them apart, and the others are
//!   placed around everything placed before them;
//! - clipping only removes overlaps, so any placement of the whole list is one of the
//!   window's list: a window the search proves infeasible shows that no placement of the
//!   whole list fits the target either;
//! - every decision counts search nodes, never time (the deadline is a safety net), so the
//!   same budget gives the same placement on every machine.

use std::cmp::Reverse;

use super::busy::{Fit, place_pinned_reusing};
use super::exact::{ExactResult, Limits, Prepared, Restart};
use super::{Halt, Live, max_live};

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
/// are spent. `target` should be at least the lower bound; `None` on overflow. `greedy`:
/// greedy's placement (`greedy.rs`), if the caller has it: parts of the schedule no window
/// reaches keep it, as placing them again would.
pub fn peak_window(intervals: &[Live], target: u64, limits: Limits, greedy: Option<&[u64]>) -> Option<Windowed> {
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
        let offsets = place_pinned_reusing(intervals, &pinned_first, Fit::First, &pinned, greedy, &Halt::NEVER)?;
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::checker::check_offsets;
    use crate::solve::offsets::{arena_of, exact, greedy, lower_bound};

    fn l(first: usize, last: usize, size: u64) -> Live {
        Live { first, last, size }
    }

    fn limits(nodes: u64) -> Limits {
        Limits { deadline: Instant::now() + Duration::from_secs(600), nodes }
    }

    fn valid(intervals: &[Live], offsets: &[u64]) -> bool {
        let triples: Vec<_> = intervals.iter().map(|l| (l.first, l.last, l.size)).collect();
        check_offsets(&triples, offsets, None).is_ok()
    }

    /// A peak that greedy fills with a hole, then single buffers far from it (so the first
    /// window is not the whole list).
    fn staircase() -> Vec<Live> {
        // Greedy puts X and Y at 0, P1 and P2 on top of them (they meet at step 2) and the
        // long buffer L above all: arena 8. At the lower bound (6): L 0, X 1, P2 1, P1 4, Y 3.
        let mut list = vec![l(0, 1, 3), l(3, 4, 3), l(1, 2, 2), l(2, 3, 2), l(0, 4, 1)];
        list.extend((0..20).map(|k| l(10 + k, 10 + k, 1 + k as u64 % 3)));
        list
    }

    #[test]
    fn closes_the_hole_greedy_leaves_at_the_peak() {
        let list = staircase();
        let lower = lower_bound(&list).unwrap();
        assert_eq!(lower, 6);
        let greedy = greedy::greedy_by_size(&list).unwrap();
        assert_eq!(arena_of(&list, &greedy), Some(8));
        let found = peak_window(&list, lower, limits(10_000), None).unwrap();
        let offsets = found.offsets.expect("the window fits the bound");
        assert!(valid(&list, &offsets));
        assert_eq!(arena_of(&list, &offsets), Some(lower));
        assert!(!found.proved_infeasible);
        // Only the steps around the peak were searched: the far buffers went by first fit.
        assert!(offsets[list.len() - 1] == 0);
    }

    #[test]
    fn a_list_the_first_window_covers_is_left_to_the_whole_search() {
        let list = &staircase()[..5];
        assert_eq!(peak_window(list, 6, limits(10_000), None), Some(Windowed { offsets: None, proved_infeasible: false, nodes: 0 }));
    }

    #[test]
    fn below_the_lower_bound_it_proves_that_nothing_fits() {
        let list = staircase();
        let found = peak_window(&list, 5, limits(10_000), None).unwrap();
        assert!(found.proved_infeasible);
        assert_eq!(found.offsets, None);
    }

    /// Random lists with a sharp peak in the middle of a long schedule.
    fn peaked(seed: &mut u64, n: usize) -> Vec<Live> {
        let mut below = |m: u64| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (*seed >> 33) % m.max(1)
        };
        let horizon = 4 * n as u64;
        (0..n)
            .map(|_| {
                let near = below(2) == 0;
                let first = if near { horizon / 2 - below(12) } else { below(horizon) } as usize;
                let len = match below(5) {
                    0 => below(horizon / 2),
                    _ => below(if near { 16 } else { 6 }),
                } as usize;
                let size = if below(9) == 0 { 0 } else { 1 + below(if near { 512 } else { 16 }) * 8 };
                l(first, first + len, size)
            })
            .collect()
    }

    #[test]
    fn greedys_placement_stands_for_the_parts_no_window_reaches() {
        // Rounds of 1500 buffers, each a part of the schedule of its own.
        for seed in 1..4 {
            let list = crate::testing::synthetic::rounds(6000, 1500, seed);
            let greedy = greedy::greedy_by_size(&list).unwrap();
            let lower = lower_bound(&list).unwrap();
            for target in [lower, lower + lower / 100] {
                let reusing = peak_window(&list, target, limits(20_000), Some(&greedy)).unwrap();
                assert_eq!(reusing, peak_window(&list, target, limits(20_000), None).unwrap(), "seed {seed}");
                assert!(reusing.offsets.as_ref().is_none_or(|o| valid(&list, o)));
            }
        }
    }

    #[test]
    fn random_lists_get_valid_placements_and_proofs_agree_with_the_whole_search() {
        let (mut seed, mut found) = (3u64, 0);
        for round in 0..300 {
            let n = 20 + (round % 7) * 30;
            let list = peaked(&mut seed, n);
            let lower = lower_bound(&list).unwrap();
            // The bound, and a little above it (a capacity).
            for target in [lower, lower + lower / 50] {
                let out = peak_window(&list, target, limits(20_000), None).unwrap();
                if let Some(offsets) = &out.offsets {
                    assert!(valid(&list, offsets), "round {round}: invalid placement");
                    found += usize::from(arena_of(&list, offsets) == Some(lower));
                }
                if out.proved_infeasible {
                    let whole = exact::exact(&list, target, limits(200_000));
                    assert!(!matches!(whole, exact::ExactResult::Found(_)), "round {round}: a window's proof is wrong");
                }
            }
        }
        assert!(found >= 300, "too few lists reached the bound ({found} of 600 runs)");
    }
}
