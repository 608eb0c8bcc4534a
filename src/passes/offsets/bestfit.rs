//! Best-fit by decreasing size, as XLA's heap simulator does it.
//!
//! Buffers are placed largest first (ties: longer-lived first, then input order). Each one
//! goes into the smallest gap, among the buffers already placed that are live at the same
//! time, that is large enough (lowest offset among equals); if no gap fits, on top of them.
//! Placing big buffers first leaves small ones to fill the holes. Cost: O(n²) in the worst
//! case (every placed buffer overlapping in time), fine at thousands of buffers.

use crate::analysis::liveness::Live;

/// An offset per interval, in input order; `None` if an offset would overflow `u64`.
pub fn best_fit(intervals: &[Live]) -> Option<Vec<u64>> {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| {
        let l = intervals[i];
        (std::cmp::Reverse(l.size), std::cmp::Reverse(l.last - l.first), i)
    });
    let mut offsets = vec![0u64; intervals.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(intervals.len());
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for i in order {
        let live = intervals[i];
        if live.size == 0 {
            continue;
        }
        busy.clear();
        for &j in &placed {
            let other = intervals[j];
            if other.first <= live.last && live.first <= other.last {
                busy.push((offsets[j], offsets[j] + other.size));
            }
        }
        busy.sort_unstable();
        let (mut best, mut cursor) = (None::<(u64, u64)>, 0u64); // (gap size, offset)
        for &(start, end) in &busy {
            if start > cursor {
                let gap = start - cursor;
                if gap >= live.size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        offsets[i] = match best {
            Some((_, offset)) => offset,
            None => {
                cursor.checked_add(live.size)?;
                cursor
            }
        };
        placed.push(i);
    }
    Some(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_memory_of_dead_buffers_and_fills_gaps() {
        let l = |first, last, size| Live { first, last, size };
        // a and b overlap; c starts after a dies and fits a's hole.
        let intervals = [l(0, 1, 100), l(0, 3, 50), l(2, 3, 100)];
        let offsets = best_fit(&intervals).unwrap();
        assert_eq!(offsets[0], offsets[2], "c reuses a's bytes");
        assert_ne!(offsets[0], offsets[1]);
        let arena = intervals.iter().zip(&offsets).map(|(l, o)| o + l.size).max().unwrap();
        assert_eq!(arena, 150);
    }

    #[test]
    fn picks_the_smallest_gap_that_fits() {
        let l = |first, last, size| Live { first, last, size };
        // Placed largest first: long-lived 100, 80, 60 with short-lived 90 and 70 between
        // them leave holes of 90 and 70 bytes once the short ones die; a later 60-byte
        // buffer takes the 70-byte hole (first-fit would take the 90-byte one).
        let intervals = [l(0, 9, 100), l(0, 1, 90), l(0, 9, 80), l(0, 1, 70), l(0, 9, 60), l(5, 5, 60)];
        let offsets = best_fit(&intervals).unwrap();
        assert_eq!(offsets, [0, 100, 190, 270, 340, 270]);
    }
}
