//! Best-fit, as XLA's heap simulator does it (`GlobalDecreasingSizeBestFitHeap` with
//! "choose best"): place the buffers in one order, each in the SMALLEST gap that holds it
//! among the already placed buffers it meets in time (the lowest among equal gaps), or on
//! top of them if none does; do it for both of XLA's orders and keep the smaller arena.
//!
//! - **spatial** (XLA's `kSpatial`): size descending, then live-range length descending,
//!   then input order. Big buffers first leave small ones to fill the holes.
//! - **temporal** (XLA's `kTemporal`): live-range length descending (`last - first`), then
//!   size descending, then input order. Long-lived buffers (params, optimizer state, early
//!   activations) settle at the bottom first and short-lived ones stack above them.
//!
//! Ties go to spatial, the order memplan used alone before. Each order costs one pass over
//! the index of busy bytes (`busy.rs`): O(n log n) union inserts plus one best-fit query
//! per buffer, which looks only at the gaps long enough for it, not a scan of every placed
//! buffer (benches/BENCHMARKS.md times 200000 buffers).

use std::cmp::Reverse;

use super::busy::{Fit, place, place_until};
use super::{Halt, Live};

/// XLA's two placement orders.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Order {
    /// Size descending, then length descending, then input order.
    Spatial,
    /// Length descending, then size descending, then input order.
    Temporal,
}

/// The buffer indices in `order`. The keys are laid out beside the indices before sorting
/// (a key that looked up its buffer missed the cache at every comparison on large lists);
/// the index is part of the key, so the unstable sort gives the one order.
pub fn sorted(intervals: &[Live], order: Order) -> Vec<usize> {
    let length = |l: &Live| l.last.saturating_sub(l.first) as u64;
    let mut keyed: Vec<(Reverse<u64>, Reverse<u64>, usize)> = intervals
        .iter()
        .enumerate()
        .map(|(i, l)| match order {
            Order::Spatial => (Reverse(l.size), Reverse(length(l)), i),
            Order::Temporal => (Reverse(length(l)), Reverse(l.size), i),
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, _, i)| i).collect()
}

/// Best-fit in one order: an offset per interval, in input order; `None` on overflow.
pub fn best_fit_in(intervals: &[Live], order: Order) -> Option<Vec<u64>> {
    place(intervals, &sorted(intervals, order), Fit::Best)
}

/// [`best_fit_in`], giving up (`None`) once `halt` says so.
pub(super) fn best_fit_until(intervals: &[Live], order: Order, halt: &Halt<'_>) -> Option<Vec<u64>> {
    place_until(intervals, &sorted(intervals, order), Fit::Best, halt)
}

/// Best-fit in both orders, keeping the smaller arena (spatial on ties): an offset per
/// interval, in input order; `None` on overflow.
pub fn best_fit(intervals: &[Live]) -> Option<Vec<u64>> {
    let spatial = best_fit_in(intervals, Order::Spatial)?;
    let temporal = best_fit_in(intervals, Order::Temporal)?;
    let (a, b) = (super::arena_of(intervals, &spatial)?, super::arena_of(intervals, &temporal)?);
    Some(if b < a { temporal } else { spatial })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(first: usize, last: usize, size: u64) -> Live {
        Live { first, last, size }
    }

    #[test]
    fn reuses_memory_of_dead_buffers_and_fills_gaps() {
        // a and b overlap; c starts after a dies and fits a's hole.
        let intervals = [l(0, 1, 100), l(0, 3, 50), l(2, 3, 100)];
        let offsets = best_fit(&intervals).unwrap();
        assert_eq!(offsets[0], offsets[2], "c reuses a's bytes");
        assert_ne!(offsets[0], offsets[1]);
        assert_eq!(super::super::arena_of(&intervals, &offsets), Some(150));
    }

    #[test]
    fn picks_the_smallest_gap_that_fits() {
        // Placed largest first: long-lived 100, 80, 60 with short-lived 90 and 70 between
        // them leave holes of 90 and 70 bytes once the short ones die; a later 60-byte
        // buffer takes the 70-byte hole (first-fit would take the 90-byte one).
        let intervals = [l(0, 9, 100), l(0, 1, 90), l(0, 9, 80), l(0, 1, 70), l(0, 9, 60), l(5, 5, 60)];
        let offsets = best_fit_in(&intervals, Order::Spatial).unwrap();
        assert_eq!(offsets, [0, 100, 190, 270, 340, 270]);
    }

    #[test]
    fn the_temporal_order_wins_where_it_packs_tighter() {
        // Spatial places the 50-byte buffer first, at 0, so the long-lived 40 goes above
        // it at 50; once the 50 is dead one 30 takes its place, leaving a 20-byte hole the
        // other 30 cannot use (arena 120). Temporal places the long-lived 40 at 0 first and
        // the rest fit above it (arena 100, the lower bound at step 4).
        let intervals = [l(4, 6, 30), l(4, 4, 30), l(2, 3, 50), l(2, 7, 40)];
        assert_eq!(sorted(&intervals, Order::Spatial), [2, 3, 0, 1]);
        assert_eq!(sorted(&intervals, Order::Temporal), [3, 0, 2, 1]);
        let arena = |o: &[u64]| super::super::arena_of(&intervals, o).unwrap();
        assert_eq!(arena(&best_fit_in(&intervals, Order::Spatial).unwrap()), 120);
        assert_eq!(arena(&best_fit_in(&intervals, Order::Temporal).unwrap()), 100);
        assert_eq!(arena(&best_fit(&intervals).unwrap()), 100);
    }
}
