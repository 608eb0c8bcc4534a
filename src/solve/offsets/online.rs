//! A placement in O(n log n) whatever the list: the buffers placed in time order, as an
//! allocator would place them, each in the smallest free hole it fits (best fit by size),
//! or at the top of the arena.
//!
//! What it is for: a time limit that holds. The heuristics' index (`busy.rs`) makes them
//! fast on lists shaped like a training step, but on some lists of millions of buffers
//! (long and short lifetimes mixed over millions of steps) each takes longer than any limit
//! a user would set; on lists of `ONLINE_FROM` buffers or more the solver runs this first,
//! so `memplan alloc` always has a placement to return when its limit passes, and a plan
//! whose placement here is at the lower bound (a long training step's nested activations)
//! runs no heuristic at all. Its arenas are otherwise worse (it cannot see the future, so
//! it fragments): the heuristics' placement is kept whenever one finishes.
//!
//! Why it is valid: at every step the held ranges are disjoint. A buffer takes bytes free
//! at its first step (a hole, or above every held range), and bytes become free only after
//! the last step of the buffer holding them; so two buffers live at the same step never
//! share a byte. The checker checks it anyway (`checker::check_offsets`).

use std::collections::{BTreeMap, BTreeSet};

use super::Live;

/// Offsets for `intervals` (in input order); `None` if an offset would pass `u64::MAX`.
pub fn online_best_fit(intervals: &[Live]) -> Option<Vec<u64>> {
    // Sorted as (key, index) pairs, not indices looking their keys up at every comparison
    // (a cache miss each on millions of buffers).
    let sorted = |key: fn(&Live) -> usize| {
        let mut keyed: Vec<(usize, usize)> = intervals.iter().enumerate().map(|(i, l)| (key(l), i)).collect();
        keyed.sort_unstable();
        keyed
    };
    let mut offsets = vec![0u64; intervals.len()];
    let mut free = Free::default();
    // Buffers by last step: each is freed before the first buffer starting after it is
    // placed (it was placed already, as it starts no later than it ends).
    let mut ending = sorted(|l| l.last).into_iter().peekable();
    for (first, i) in sorted(|l| l.first) {
        while let Some((_, j)) = ending.next_if(|&(last, _)| last < first) {
            free.release(offsets[j], intervals[j].size);
        }
        offsets[i] = free.take(intervals[i].size)?;
    }
    Some(offsets)
}

#[derive(Default)]
struct Free {
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    top: u64,
}

impl Free {
    /// The offset of `size` bytes: the smallest hole that holds them (the lowest of equal
    /// ones), or `top`.
    fn take(&mut self, size: u64) -> Option<u64> {
        if size == 0 {
            return Some(0); // holds no byte, so meets no buffer
        }
        if let Some(&(hole, at)) = self.by_size.range((size, 0)..).next() {
            self.remove(at, hole);
            if hole > size {
                self.insert(at + size, hole - size);
            }
            return Some(at);
        }
        // No hole ends at `top` (`release` lowers it instead), so the bytes go on top.
        let at = self.top;
        self.top = at.checked_add(size)?;
        Some(at)
    }

    /// Frees `[at, at + size)`, merging it with the holes it touches (or lowering `top`).
    fn release(&mut self, at: u64, size: u64) {
        if size == 0 {
            return;
        }
        let (mut start, mut end) = (at, at + size);
        if let Some((&below, &hole)) = self.by_offset.range(..start).next_back()
            && below + hole == start
        {
            self.remove(below, hole);
            start = below;
        }
        if let Some(&hole) = self.by_offset.get(&end) {
            self.remove(end, hole);
            end += hole;
        }
        if end == self.top {
            self.top = start;
        } else {
            self.insert(start, end - start);
        }
    }

    fn insert(&mut self, at: u64, size: u64) {
        self.by_offset.insert(at, size);
        self.by_size.insert((size, at));
    }

    fn remove(&mut self, at: u64, size: u64) {
        self.by_offset.remove(&at);
        self.by_size.remove(&(size, at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::offsets::arena_of;

    fn check(intervals: &[Live]) -> u64 {
        let offsets = online_best_fit(intervals).unwrap();
        let triples: Vec<(usize, usize, u64)> = intervals.iter().map(|l| (l.first, l.last, l.size)).collect();
        crate::checker::check_offsets(&triples, &offsets, None).unwrap();
        arena_of(intervals, &offsets).unwrap()
    }

    #[test]
    fn reuses_freed_bytes_and_merges_holes() {
        let live = |first, last, size| Live { first, last, size };
        // a and b die at 1; c (their two sizes together) fits the merged hole.
        assert_eq!(check(&[live(0, 1, 100), live(0, 1, 50), live(2, 3, 150), live(2, 3, 10)]), 160);
        // The smallest hole that fits: b's 50, not a's 100.
        assert_eq!(check(&[live(0, 1, 100), live(0, 3, 7), live(0, 1, 50), live(0, 3, 7), live(2, 3, 40)]), 164);
        // Touching lifetimes do not share bytes: b starts where a ends.
        assert_eq!(check(&[live(0, 2, 8), live(2, 3, 8)]), 16);
        // Zero sizes hold nothing.
        assert_eq!(check(&[live(0, 5, 0), live(0, 5, 4)]), 4);
    }

    #[test]
    fn random_lists_are_valid() {
        for seed in 0..30 {
            let list = crate::testing::synthetic::training_like(2000, seed);
            let arena = check(&list);
            assert!(arena >= super::super::lower_bound(&list).unwrap());
        }
    }

    #[test]
    fn an_offset_past_u64_is_none() {
        let live = |first, last, size| Live { first, last, size };
        assert_eq!(online_best_fit(&[live(0, 1, u64::MAX), live(0, 1, 1)]), None);
    }
}
