//! Greedy by size, as TVM and TFLite ship it: buffers largest first (ties: input order),
//! each at the LOWEST offset where it fits among the already placed buffers it meets in
//! time (first fit), or on top of them if no gap holds it.
//!
//! The shipped variants differ in the gap they pick: TFLite's `GreedyBySize` takes the
//! smallest gap that fits, TVM's USMP `greedy_by_size` goes above every conflicting buffer
//! (no gap filling at all, hence its 1.6-2.5x on the minimalloc suite). memplan's greedy is
//! the first-fit member of the family, the cheapest one that fills holes; best-fit
//! (`bestfit.rs`) is the smallest-gap member. Both use the same index of busy bytes
//! (`busy.rs`), so neither scans all pairs of buffers.

use super::busy::{Fit, place, place_until};
use super::{Halt, Live};

/// An offset per interval, in input order; `None` if an offset would overflow `u64`.
pub fn greedy_by_size(intervals: &[Live]) -> Option<Vec<u64>> {
    place(intervals, &greedy_order(intervals), Fit::First)
}

/// [`greedy_by_size`], giving up (`None`) once `halt` says so.
pub(super) fn greedy_until(intervals: &[Live], halt: &Halt<'_>) -> Option<Vec<u64>> {
    place_until(intervals, &greedy_order(intervals), Fit::First, halt)
}

fn greedy_order(intervals: &[Live]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(intervals[i].size), i));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_lowest_gap_that_fits() {
        let l = |first, last, size| Live { first, last, size };
        // The same instance as best-fit's smallest-gap test: first fit takes the 90-byte
        // hole for the last 60-byte buffer, best-fit the 70-byte one.
        let intervals = [l(0, 9, 100), l(0, 1, 90), l(0, 9, 80), l(0, 1, 70), l(0, 9, 60), l(5, 5, 60)];
        let offsets = greedy_by_size(&intervals).unwrap();
        assert_eq!(offsets, [0, 100, 190, 270, 340, 100]);
    }
}
