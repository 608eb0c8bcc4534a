//! The independent check of a bare buffer list's offsets (`memplan alloc`, benchmarks,
//! solver tests): shares no code with the offset solvers.
//!
//! Given `(first, last, size)` per buffer (live on the inclusive positions `first..=last`)
//! and an offset per buffer, [`check_offsets`] reports every buffer whose end overflows
//! `u64` or passes the capacity, and every pair of buffers that are live at a common
//! position and share a byte. Pairs come from the checker's own sweep over time
//! (`overlapping_pairs`, a segment tree over byte coordinates plus an ordered set of
//! starts, run only once a quicker sweep, `any_overlap`, found that some pair overlaps),
//! so the cost is O(n log n + K) for K reported pairs, at most
//! [`MAX_PAIRS`](super::MAX_PAIRS) of which are listed. Byte ends are computed in `u128`.
//! Zero-size buffers hold no bytes and never overlap.

use super::sweep::{Rect, any_overlap, by_start, overlapping_pairs};
use super::{MAX_PAIRS, Violation, Violations};

/// Checks `offsets` for `buffers` (`(first, last inclusive, size)`, in list order):
/// `Err` lists every violation, naming buffers by their index in the list.
pub fn check_offsets(buffers: &[(usize, usize, u64)], offsets: &[u64], capacity: Option<u64>) -> Result<(), Violations> {
    if buffers.len() != offsets.len() {
        return Err(Violations(vec![Violation::ListLength { buffers: buffers.len(), offsets: offsets.len() }]));
    }
    let mut out = Vec::new();
    let mut rects = Vec::new();
    let mut ids = Vec::new();
    for (i, (&(first, last, size), &offset)) in buffers.iter().zip(offsets).enumerate() {
        let end = u128::from(offset) + u128::from(size);
        if offset.checked_add(size).is_none() {
            out.push(Violation::ListOverflow { buffer: i, offset, size });
        }
        if let Some(capacity) = capacity
            && end > u128::from(capacity)
        {
            out.push(Violation::ListPastCapacity { buffer: i, offset, end, capacity });
        }
        if first > last {
            out.push(Violation::ListRangeInverted { buffer: i, first, last });
            continue;
        }
        if size > 0 {
            rects.push(Rect { t0: first, t1: last, lo: u128::from(offset), hi: end });
            ids.push(i);
        }
    }
    let order = by_start(&rects);
    let mut pairs = Vec::new();
    let truncated = any_overlap(&rects, &order)
        && overlapping_pairs(&rects, &order, |x, y| {
            pairs.push((x, y));
            true
        });
    for (x, y) in pairs {
        let (x, y) = if ids[x] < ids[y] { (x, y) } else { (y, x) };
        let (a, b) = (rects[x], rects[y]);
        out.push(Violation::ListOverlap {
            a: ids[x],
            a_first: a.t0,
            a_last: a.t1,
            b: ids[y],
            b_first: b.t0,
            b_last: b.t1,
            start: a.lo.max(b.lo),
            end: a.hi.min(b.hi),
        });
    }
    if truncated {
        out.push(Violation::TooManyPairs { what: "overlapping buffers", shown: MAX_PAIRS });
    }
    if out.is_empty() { Ok(()) } else { Err(Violations(out)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_valid_placement() {
        // Touching in time is not overlapping: [0,1] and [2,3] may share bytes.
        let buffers = [(0, 1, 10), (2, 3, 10), (1, 2, 5), (0, 3, 0)];
        assert_eq!(check_offsets(&buffers, &[0, 0, 10, 0], Some(15)), Ok(()));
        assert_eq!(check_offsets(&[], &[], Some(0)), Ok(()));
    }

    #[test]
    fn reports_overlaps_capacity_overflow_and_lengths() {
        let buffers = [(0, 4, 10), (3, 5, 10), (6, 6, 8), (7, 7, 2), (9, 8, 1)];
        let offsets = [0, 5, u64::MAX - 4, 100, 0];
        let err = check_offsets(&buffers, &offsets, Some(20)).unwrap_err();
        let v = &err.0;
        assert!(v.contains(&Violation::ListOverlap { a: 0, a_first: 0, a_last: 4, b: 1, b_first: 3, b_last: 5, start: 5, end: 10 }), "{err}");
        assert!(v.contains(&Violation::ListOverflow { buffer: 2, offset: u64::MAX - 4, size: 8 }));
        assert!(v.iter().any(|x| matches!(x, Violation::ListPastCapacity { buffer: 2, .. })));
        assert!(v.contains(&Violation::ListPastCapacity { buffer: 3, offset: 100, end: 102, capacity: 20 }));
        assert!(v.contains(&Violation::ListRangeInverted { buffer: 4, first: 9, last: 8 }));
        assert_eq!(v.len(), 5, "{err}");
        assert!(err.to_string().contains("buffers #0 (live [0, 4]) and #1 (live [3, 5]) share bytes [5, 10)"));
        let err = check_offsets(&buffers, &[0], None).unwrap_err();
        assert_eq!(err.0, [Violation::ListLength { buffers: 5, offsets: 1 }]);
    }

    #[test]
    fn reports_many_identical_buffers_without_quadratic_output() {
        let buffers = vec![(0, 0, 1); 100];
        let err = check_offsets(&buffers, &[0; 100], None).unwrap_err();
        assert_eq!(err.0.len(), MAX_PAIRS + 1);
        assert_eq!(err.0.last(), Some(&Violation::TooManyPairs { what: "overlapping buffers", shown: MAX_PAIRS }));
    }
}
