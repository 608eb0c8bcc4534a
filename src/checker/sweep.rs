//! The checker's geometry: rectangles of time by bytes, and the sweeps over time that find
//! those that overlap without looking at all pairs. A quick sweep ([`any_overlap`]) answers
//! whether any pair overlaps; the full one ([`overlapping_pairs`]) lists them, keeping the
//! active rectangles both as a segment tree over byte coordinates (stabbing queries) and
//! as an ordered set of start offsets (range queries): O(n log n + K) for K pairs. Shares
//! no code with the planner's offset solvers, whose placements it judges.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use super::MAX_PAIRS;

/// Inclusive positions `[t0, t1]` (`t0 <= t1`) by bytes `[lo, hi)` (`lo < hi`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Rect {
    pub t0: usize,
    pub t1: usize,
    pub lo: u128,
    pub hi: u128,
}

/// The indices of `rects` by start, then index: the order the sweeps below take.
pub(super) fn by_start(rects: &[Rect]) -> Vec<usize> {
    sorted_by(rects.len(), |k| rects[k].t0)
}

/// The indices `0..n` by `key`, then index. Sorted as `(key, index)` pairs, not indices
/// looked up at every comparison (on two million rects each lookup missed the cache).
pub(super) fn sorted_by<K: Ord>(n: usize, key: impl Fn(usize) -> K) -> Vec<usize> {
    let mut keyed: Vec<(K, usize)> = (0..n).map(|k| (key(k), k)).collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, k)| k).collect()
}

/// Whether any two of `rects` (none empty) intersect in time and in bytes (`order` sorted by `t0`), in
/// O(n log n) with a small constant: the common case of a valid placement, where
/// [`overlapping_pairs`] (which must find every pair) was most of checking two million
/// buffers. Sweep over time: the active rects never overlap while none is found, so they
/// sit in an ordered map by start, where their ends increase with their starts; a new one
/// `[lo, hi)` meets an active one iff the active one starting last below `hi` ends after
/// `lo`. Rects leave in order of their last step (sorted once: each has started by then,
/// as it starts no later than it ends).
pub(super) fn any_overlap(rects: &[Rect], order: &[usize]) -> bool {
    let mut by_end: Vec<(usize, u128)> = rects.iter().map(|r| (r.t1, r.lo)).collect();
    by_end.sort_unstable();
    let mut ended = by_end.into_iter().peekable();
    let mut active: BTreeMap<u128, u128> = BTreeMap::new();
    for &i in order {
        let r = rects[i];
        while let Some((_, lo)) = ended.next_if(|&(t1, _)| t1 < r.t0) {
            active.remove(&lo);
        }
        if active.range(..r.hi).next_back().is_some_and(|(_, &hi)| hi > r.lo) {
            return true;
        }
        active.insert(r.lo, r.hi);
    }
    false
}

/// Calls `on_pair(older, newer)` once for every pair of rects that intersect in time and
/// in bytes, `older` coming first in `order` (which must be sorted by `t0`). `on_pair`
/// returns whether the pair counts; after [`MAX_PAIRS`] counted pairs the sweep stops and
/// returns `true`.
///
/// Sweep over time: before a rect is inserted, rects ending earlier leave the active set.
/// Active rects meeting `[lo, hi)` either contain `lo` (a stabbing query on a segment tree
/// over byte coordinates; expired entries are dropped from nodes as they are met, so each
/// is dropped once) or start inside `[lo, hi)` (a range query on an ordered set of starts).
pub(super) fn overlapping_pairs(rects: &[Rect], order: &[usize], mut on_pair: impl FnMut(usize, usize) -> bool) -> bool {
    let mut xs: Vec<u128> = rects.iter().flat_map(|r| [r.lo, r.hi]).collect();
    xs.sort_unstable();
    xs.dedup();
    let slots = xs.len().saturating_sub(1);
    if slots == 0 {
        return false;
    }
    let slot = |x: u128| xs.partition_point(|&c| c < x);
    let mut tree: Vec<Vec<usize>> = vec![Vec::new(); 4 * slots];
    let mut starts: BTreeSet<(u128, usize)> = BTreeSet::new();
    let mut active = vec![false; rects.len()];
    let mut expiry: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
    let mut counted = 0usize;
    let mut hits = Vec::new();
    for &i in order {
        let r = rects[i];
        while let Some(&Reverse((t1, j))) = expiry.peek() {
            if t1 >= r.t0 {
                break;
            }
            expiry.pop();
            active[j] = false;
            starts.remove(&(rects[j].lo, j));
        }
        hits.clear();
        // Stabbing query at r.lo: active rects with lo < r.lo < hi.
        let p = slot(r.lo);
        let (mut node, mut l, mut h) = (1usize, 0usize, slots);
        loop {
            let entries = &mut tree[node];
            let mut k = 0;
            while k < entries.len() {
                let j = entries[k];
                if !active[j] {
                    entries.swap_remove(k);
                    continue;
                }
                if rects[j].lo < r.lo {
                    hits.push(j);
                }
                k += 1;
            }
            if h - l == 1 {
                break;
            }
            let mid = l + (h - l) / 2;
            if p < mid {
                (node, h) = (2 * node, mid);
            } else {
                (node, l) = (2 * node + 1, mid);
            }
        }
        // Range query: active rects starting in [r.lo, r.hi).
        hits.extend(starts.range((r.lo, 0)..(r.hi, 0)).map(|&(_, j)| j));
        for &j in &hits {
            if on_pair(j, i) {
                counted += 1;
                if counted >= MAX_PAIRS {
                    return true;
                }
            }
        }
        active[i] = true;
        starts.insert((r.lo, i));
        expiry.push(Reverse((r.t1, i)));
        insert(&mut tree, 1, 0, slots, slot(r.lo), slot(r.hi), i);
    }
    false
}

/// Stores `id` in the canonical nodes of slots `[ql, qr)` (node covers `[l, h)`).
fn insert(tree: &mut [Vec<usize>], node: usize, l: usize, h: usize, ql: usize, qr: usize, id: usize) {
    if qr <= l || h <= ql {
        return;
    }
    if ql <= l && h <= qr {
        tree[node].push(id);
        return;
    }
    let mid = l + (h - l) / 2;
    insert(tree, 2 * node, l, mid, ql, qr, id);
    insert(tree, 2 * node + 1, mid, h, ql, qr, id);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random numbers (no dependency).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// 1 to `most` rects starting at steps 0..20, each living up to `longest` more steps and
    /// holding 1 to `largest` bytes from an offset in 0..1000.
    fn random_rects(rng: &mut Lcg, most: u64, longest: u64, largest: u64) -> Vec<Rect> {
        let n = 1 + rng.next(most) as usize;
        (0..n)
            .map(|_| {
                let t0 = rng.next(20) as usize;
                let lo = u128::from(rng.next(1000));
                Rect { t0, t1: t0 + rng.next(longest) as usize, lo, hi: lo + 1 + u128::from(rng.next(largest)) }
            })
            .collect()
    }

    fn brute(rects: &[Rect]) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        for i in 0..rects.len() {
            for j in i + 1..rects.len() {
                let (a, b) = (rects[i], rects[j]);
                if a.t0 <= b.t1 && b.t0 <= a.t1 && a.lo < b.hi && b.lo < a.hi {
                    pairs.push((i, j));
                }
            }
        }
        pairs
    }

    #[test]
    fn sweep_finds_exactly_the_brute_force_pairs() {
        let mut rng = Lcg(7);
        for round in 0..50 {
            let rects = random_rects(&mut rng, 40, 6, 300);
            let order = by_start(&rects);
            let mut got = Vec::new();
            let truncated = overlapping_pairs(&rects, &order, |a, b| {
                got.push((a.min(b), a.max(b)));
                true
            });
            assert!(!truncated);
            got.sort();
            assert_eq!(got, brute(&rects), "round {round}: {rects:?}");
        }
    }

    #[test]
    fn the_quick_sweep_finds_an_overlap_exactly_when_there_is_one() {
        let mut rng = Lcg(11);
        let (mut with, mut without) = (0, 0);
        for round in 0..2000 {
            let rects = random_rects(&mut rng, 12, 8, 60);
            let order = by_start(&rects);
            let overlap = !brute(&rects).is_empty();
            assert_eq!(any_overlap(&rects, &order), overlap, "round {round}: {rects:?}");
            (with, without) = if overlap { (with + 1, without) } else { (with, without + 1) };
        }
        assert!(with > 200 && without > 200, "{with} with an overlap, {without} without");
    }

    #[test]
    fn sweep_stops_after_max_pairs() {
        let rects = vec![Rect { t0: 0, t1: 0, lo: 0, hi: 8 }; 100];
        let order: Vec<usize> = (0..100).collect();
        let mut n = 0;
        assert!(overlapping_pairs(&rects, &order, |_, _| {
            n += 1;
            true
        }));
        assert_eq!(n, MAX_PAIRS);
    }
}
