//! Tests of the busy index (`busy.rs`): unions, batches, and every query against brute
//! force over explicit placements.

use super::place::{gcd, place_pinned};
use super::sets::INSERT_ONE_BY_ONE;
use super::*;
use crate::solve::offsets::Live;

/// A seeded generator of numbers below `n` (an LCG: no dependency, the same every run).
fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    }
}

/// Gaps by brute force over explicit placements (first, last, start, end).
fn brute_gaps(placed: &[(usize, usize, u64, u64)], first: usize, last: usize) -> Vec<(u64, Option<u64>)> {
    let mut busy: Vec<(u64, u64)> =
        placed.iter().filter(|p| p.0 <= last && first <= p.1 && p.2 < p.3).map(|p| (p.2, p.3)).collect();
    busy.sort_unstable();
    let (mut gaps, mut cursor) = (Vec::new(), 0u64);
    for (s, e) in busy {
        if s > cursor {
            gaps.push((cursor, Some(s)));
        }
        cursor = cursor.max(e);
    }
    gaps.push((cursor, None));
    gaps
}

#[test]
fn segments_merge_on_insert() {
    let mut s = Segments::<u32>::default();
    s.insert(10, 20);
    s.insert(30, 40);
    s.insert(0, 5);
    assert_eq!(s.0, [(0, 5), (10, 20), (30, 40)]);
    s.insert(20, 30);
    assert_eq!(s.0, [(0, 5), (10, 40)]);
    s.insert(3, 12);
    assert_eq!(s.0, [(0, 40)]);
    s.insert(50, 60);
    s.insert(45, 70);
    assert_eq!(s.0, [(0, 40), (45, 70)]);
}

#[test]
fn a_batch_merges_as_inserting_one_by_one() {
    let mut next = below(0x2545_F491_4F6C_DD1D);
    let mut spare = Vec::new();
    for round in 0..300 {
        let (mut batched, mut one_by_one) = (Segments::default(), Segments::default());
        for _ in 0..1 + next(6) {
            // Batches of both kinds (one by one up to INSERT_ONE_BY_ONE, merged above),
            // ranges that nest, overlap, touch and stand apart.
            let mut batch: Vec<(u64, u64)> = (0..next(3 * INSERT_ONE_BY_ONE as u64))
                .map(|_| {
                    let start = next(400);
                    (start, start + 1 + next(if round % 2 == 0 { 8 } else { 60 }))
                })
                .collect();
            for &(s, e) in &batch {
                one_by_one.insert(s, e);
            }
            batched.insert_all(&mut batch, &mut spare);
            assert_eq!(batched.0, one_by_one.0, "round {round}");
        }
    }
}

#[test]
fn gaps_match_brute_force() {
    let mut next = below(0x9E37_79B9_7F4A_7C15);
    for round in 0..300 {
        // Small lists, and (every third) lists long enough for blocks whose unions
        // have many gaps, cut by the rectangles of short ranges.
        let (n, steps, span) = if round % 3 == 2 { (1 + next(160), 120, 90) } else { (1 + next(30), 25, 8) };
        let ranges: Vec<(usize, usize)> = (0..n)
            .map(|_| {
                let f = next(steps) as usize;
                let longest = if next(2) == 0 { 4 } else { span };
                (f, f + next(longest) as usize)
            })
            .collect();
        let n = n as usize;
        let (count, leaves) = leaves_of(ranges.iter().copied());
        let mut index = BusyIndex::new(count);
        let mut placed = Vec::new();
        for (&(f, l), &at) in ranges.iter().zip(&leaves) {
            // Somewhere free while it lives (as placements are): in a random gap that
            // holds it, else on top; some are empty (they take nothing). In every
            // other list all is a multiple of 8, so that many gaps have equal lengths.
            let unit = if round % 2 == 0 { 8 } else { 1 };
            let len = unit * next(40 / unit);
            let free: Vec<(u64, u64)> = brute_gaps(&placed, f, l)
                .into_iter()
                .map(|(s, e)| (s, e.unwrap_or(s + 304)))
                .filter(|&(s, e)| e - s >= len)
                .collect();
            let (s, e) = free[next(free.len() as u64) as usize];
            let start = s + unit * next((e - s - len) / unit + 1);
            let end = start + len;
            index.insert(at, start, end);
            placed.push((f, l, start, end));
            let q = next(n as u64) as usize;
            let ((qf, ql), query) = (ranges[q], leaves[q]);
            let mut got = Vec::new();
            index.gaps(query, 0, |s, e| {
                got.push((s, e));
                Walk::Continue
            });
            let brute = brute_gaps(&placed, qf, ql);
            assert_eq!(got, brute, "query [{qf}, {ql}] after {placed:?}");
            // Best fit: the smallest bounded gap that holds `size` (the lowest among
            // equals), and the top.
            let size = unit * (1 + next(30 / unit));
            let fits = brute.iter().filter_map(|&(s, e)| Some((e? - s, s))).filter(|&(len, _)| len >= size);
            let want = fits.min().map_or(brute.last().map_or(0, |g| g.0), |(_, s)| s);
            assert_eq!(index.best(query, size), want, "best fit for {size} in [{qf}, {ql}] after {placed:?}");
            // A size that some gap fits exactly (the scan stops at the first such gap):
            // the lowest gap of that length.
            let bounded: Vec<(u64, u64)> = brute.iter().filter_map(|&(s, e)| Some((s, e?))).collect();
            if !bounded.is_empty() {
                let (s, e) = bounded[next(bounded.len() as u64) as usize];
                let lowest = bounded.iter().find(|g| g.1 - g.0 == e - s).map(|g| g.0);
                assert_eq!(Some(index.best(query, e - s)), lowest, "exact fit for {} in [{qf}, {ql}] after {placed:?}", e - s);
            }
        }
    }
}

#[test]
fn pinned_buffers_stay_put_and_the_others_go_around_them() {
    let l = |first, last, size| Live { first, last, size };
    // Pinned: a at 10..20 over steps 0..4, b at 0..5 over step 2. Then c (steps 1..3,
    // 5 bytes) fits 5..10, d (6 bytes, step 4) fits 0..6 (b is dead), e (12 bytes,
    // step 2) only above a.
    let intervals = [l(0, 4, 10), l(2, 2, 5), l(1, 3, 5), l(4, 4, 6), l(2, 2, 12)];
    let offsets = place_pinned(&intervals, &[0, 1, 2, 3, 4], Fit::First, &[(0, 10), (1, 0)]).unwrap();
    assert_eq!(offsets, [10, 0, 5, 0, 20]);
    // Without pins, the same order packs from 0.
    assert_eq!(place(&intervals, &[0, 1, 2, 3, 4], Fit::First).unwrap(), [0, 10, 15, 10, 20]);
    // A pinned offset that is no multiple of the sizes sets the index's unit (here 4
    // bytes, not 8): the 4 bytes below the pinned buffer hold nothing of 8.
    let intervals = [l(0, 4, 8), l(1, 2, 8), l(2, 3, 16)];
    for fit in [Fit::First, Fit::Best] {
        assert_eq!(place_pinned(&intervals, &[0, 1, 2], fit, &[(0, 4)]).unwrap(), [4, 12, 20]);
    }
}

#[test]
fn units_are_the_common_divisor_and_u32_only_where_every_end_fits() {
    assert_eq!((gcd(0, 0), gcd(0, 12), gcd(12, 18), gcd(7, 5)), (0, 12, 6, 1));
    let l = |first, last, size| Live { first, last, size };
    // Ends up to 2^32 units: u32 would wrap the third buffer's end (2^32 + 2^31 units).
    let big = [l(0, 2, 1 << 31), l(0, 2, 1 << 31), l(0, 2, 1 << 31), l(1, 1, 1)];
    assert_eq!(place(&big, &[0, 1, 2, 3], Fit::Best).unwrap(), [0, 1 << 31, 1 << 32, 3 << 31]);
    // The same in units of 2^20 bytes: u32 holds it, and the offsets come back in bytes.
    let scaled: Vec<Live> = big.iter().map(|b| Live { size: b.size << 20, ..*b }).collect();
    assert_eq!(place(&scaled, &[0, 1, 2, 3], Fit::Best).unwrap(), [0, 1 << 51, 1 << 52, 3 << 51]);
    // An end past u64 bytes (though not past u64 units of 2^20 bytes) is an overflow.
    let over: Vec<Live> = [1u64 << 63, 1 << 63].iter().map(|&size| l(0, 0, size)).collect();
    assert_eq!(place(&over, &[0, 1], Fit::Best), None);
    // So is one on a buffer that ends at the very top of u64, found by a range longer than
    // a half block (eight leaves from the empty buffers: blocks of eight, halves of four).
    let mut top = vec![l(1, 1, u64::MAX), l(1, 6, 1)];
    top.extend((0..8).map(|step| l(step, step, 0)));
    let order: Vec<usize> = (0..top.len()).collect();
    for fit in [Fit::First, Fit::Best] {
        assert_eq!(place(&top, &order, fit), None, "{fit:?}");
    }
}
