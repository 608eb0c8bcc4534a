//! The exact offset solver against brute force on small random instances.
//!
//! Two independent brute forces: every order of the buffers, each dropped onto the ones
//! before it (the optimum is among these), and, for the smallest instances, every offset
//! of every buffer within a capacity. Every placement the solver returns is checked for
//! overlaps by a plain O(n²) loop.

use std::time::{Duration, Instant};

use memplan::rng::Rng;
use memplan::solve::offsets::Live;
use memplan::solve::offsets::exact::{ExactResult, Limits, exact, searchable};
use memplan::solve::offsets::minimize::minimize;
use memplan::solve::offsets::{SolveError, SolveOptions, Solution, Solver, lower_bound, solve};

fn l(first: usize, last: usize, size: u64) -> Live {
    Live { first, last, size }
}

fn far() -> Limits {
    Limits::until(Instant::now() + Duration::from_secs(60))
}

fn overlaps_in_time(a: &Live, b: &Live) -> bool {
    a.first <= b.last && b.first <= a.last
}

/// No two buffers live at the same time share a byte, and all fit in `capacity`.
fn valid(intervals: &[Live], offsets: &[u64], capacity: u64) -> bool {
    if offsets.len() != intervals.len() {
        return false;
    }
    for (i, a) in intervals.iter().enumerate() {
        if offsets[i] + a.size > capacity {
            return false;
        }
        for (j, b) in intervals.iter().enumerate().skip(i + 1) {
            let apart = offsets[i] + a.size <= offsets[j] || offsets[j] + b.size <= offsets[i];
            if a.size > 0 && b.size > 0 && overlaps_in_time(a, b) && !apart {
                return false;
            }
        }
    }
    true
}

/// The smallest arena over all orders, each buffer dropped onto the earlier ones.
fn brute_optimum(intervals: &[Live]) -> u64 {
    fn go(intervals: &[Live], used: &mut Vec<bool>, offsets: &mut Vec<u64>, arena: u64, best: &mut u64) {
        if arena >= *best {
            return;
        }
        if used.iter().all(|&u| u) {
            *best = arena;
            return;
        }
        for i in 0..intervals.len() {
            if used[i] {
                continue;
            }
            let floor = (0..intervals.len())
                .filter(|&j| used[j] && overlaps_in_time(&intervals[i], &intervals[j]))
                .map(|j| offsets[j] + intervals[j].size)
                .max()
                .unwrap_or(0);
            used[i] = true;
            offsets[i] = floor;
            go(intervals, used, offsets, arena.max(floor + intervals[i].size), best);
            used[i] = false;
        }
    }
    let mut best = u64::MAX;
    go(intervals, &mut vec![false; intervals.len()], &mut vec![0; intervals.len()], 0, &mut best);
    best
}

/// Whether some assignment of offsets in 0..=capacity-size fits (every offset tried).
fn brute_feasible(intervals: &[Live], capacity: u64) -> bool {
    fn go(intervals: &[Live], capacity: u64, offsets: &mut Vec<u64>) -> bool {
        let i = offsets.len();
        if i == intervals.len() {
            return true;
        }
        let a = &intervals[i];
        if a.size > capacity {
            return false;
        }
        for o in 0..=capacity - a.size {
            let clash = (0..i).any(|j| {
                let b = &intervals[j];
                overlaps_in_time(a, b) && a.size > 0 && b.size > 0 && o < offsets[j] + b.size && offsets[j] < o + a.size
            });
            if !clash {
                offsets.push(o);
                if go(intervals, capacity, offsets) {
                    return true;
                }
                offsets.pop();
            }
        }
        false
    }
    go(intervals, capacity, &mut Vec::new())
}

fn random_instance(rng: &mut Rng, n: usize, times: u64, sizes: u64, zero: bool) -> Vec<Live> {
    (0..n)
        .map(|_| {
            let a = rng.below(times) as usize;
            let b = rng.below(times) as usize;
            let size = if zero && rng.below(6) == 0 { 0 } else { 1 + rng.below(sizes) };
            l(a.min(b), a.max(b), size)
        })
        .collect()
}

/// The smallest capacity at which trying every offset succeeds.
fn brute_optimum_by_offsets(intervals: &[Live]) -> u64 {
    let mut sorted = intervals.to_vec();
    sorted.sort_by_key(|b| (b.first, std::cmp::Reverse(b.size)));
    let mut capacity = lower_bound(intervals).unwrap();
    while !brute_feasible(&sorted, capacity) {
        capacity += 1;
    }
    capacity
}

/// Random buffers, then one filler per time step bringing it up to the peak: every time
/// step is full, which makes the lower bound often unreachable.
fn filled_instance(rng: &mut Rng, n: usize, times: u64, sizes: u64, maxlen: u64) -> Vec<Live> {
    let mut intervals: Vec<Live> = (0..n)
        .map(|_| {
            let a = rng.below(times) as usize;
            l(a, a + rng.below(maxlen + 1) as usize, 1 + rng.below(sizes))
        })
        .collect();
    if n.is_multiple_of(2) {
        intervals.push(intervals[0]); // identical buffers
    }
    let lower = lower_bound(&intervals).unwrap();
    let end = intervals.iter().map(|b| b.last).max().unwrap_or(0);
    for t in 0..=end {
        let total: u64 = intervals.iter().filter(|b| b.first <= t && t <= b.last).map(|b| b.size).sum();
        if total < lower {
            intervals.push(l(t, t, lower - total));
        }
    }
    intervals
}

/// Checks exact's verdict at every capacity around the optimum, and minimize from a stack.
fn check_instance(intervals: &[Live]) -> u64 {
    let optimum = if intervals.iter().all(|b| b.size == 0) { 0 } else { brute_optimum(intervals) };
    check_against(intervals, optimum)
}

fn check_against(intervals: &[Live], optimum: u64) -> u64 {
    let lower = lower_bound(intervals).unwrap();
    assert!(optimum >= lower);
    for capacity in lower.saturating_sub(2)..=optimum + 2 {
        match exact(intervals, capacity, far()) {
            ExactResult::Found(offsets) => {
                assert!(capacity >= optimum, "found below the optimum {optimum} at {capacity}: {intervals:?}");
                assert!(valid(intervals, &offsets, capacity), "invalid placement at {capacity}: {intervals:?} {offsets:?}");
            }
            ExactResult::Infeasible => {
                assert!(capacity < optimum, "infeasible at {capacity} >= optimum {optimum}: {intervals:?}")
            }
            ExactResult::TimedOut => panic!("timed out on {intervals:?}"),
        }
    }
    // Start from everything stacked.
    let mut offsets = Vec::new();
    let mut top = 0;
    for b in intervals {
        offsets.push(top);
        top += b.size;
    }
    let best = minimize(intervals, lower, Solution { offsets, arena: top, proved_optimal: false }, far());
    assert!(best.proved_optimal, "{intervals:?}");
    assert_eq!(best.arena, optimum, "{intervals:?}");
    assert!(valid(intervals, &best.offsets, best.arena));
    optimum
}

#[test]
fn agrees_with_brute_force_on_random_small_instances() {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    // Random instances this small almost always reach the lower bound; the filled ones
    // below cover the rest.
    for k in 0..600 {
        check_instance(&random_instance(&mut rng, 1 + k % 7, 6, 5, true));
    }
}

#[test]
fn agrees_with_brute_force_on_eight_buffers() {
    let mut rng = Rng::new(0x0123_4567_89AB_CDEF);
    for _ in 0..40 {
        let intervals = random_instance(&mut rng, 8, 8, 7, false);
        check_instance(&intervals);
    }
}

#[test]
fn identical_buffers_and_large_sizes() {
    let mut rng = Rng::new(42);
    for k in 0..150 {
        // Few shapes, so many twins; sizes multiples of 1024 exercise the gcd rounding.
        let shapes = random_instance(&mut rng, 3, 5, 3, false);
        let intervals: Vec<Live> = (0..6).map(|i| shapes[(i * 7 + k) % 3]).map(|b| l(b.first, b.last, b.size * 1024)).collect();
        check_instance(&intervals);
    }
}

#[test]
fn the_permutation_brute_force_agrees_with_trying_every_offset() {
    let mut rng = Rng::new(7);
    for k in 0..200 {
        let intervals = random_instance(&mut rng, 1 + k % 5, 5, 4, true);
        let optimum = brute_optimum(&intervals);
        assert!(brute_feasible(&intervals, optimum), "{intervals:?}");
        assert!(optimum == 0 || !brute_feasible(&intervals, optimum - 1), "{intervals:?}");
    }
}

#[test]
fn edge_cases() {
    // Empty, a single buffer, zero sizes.
    assert_eq!(exact(&[], 0, far()), ExactResult::Found(vec![]));
    assert_eq!(exact(&[l(0, 3, 5)], 5, far()), ExactResult::Found(vec![0]));
    assert_eq!(exact(&[l(0, 3, 5)], 4, far()), ExactResult::Infeasible);
    assert_eq!(exact(&[l(0, 3, 0), l(1, 2, 0)], 0, far()), ExactResult::Found(vec![0, 0]));
    // Capacity exactly the lower bound, and one below it.
    let intervals = [l(0, 1, 4), l(1, 2, 4), l(2, 3, 4), l(0, 3, 2)];
    assert!(matches!(exact(&intervals, 10, far()), ExactResult::Found(_)));
    assert_eq!(exact(&intervals, 9, far()), ExactResult::Infeasible);
    // The classic gap: three buffers pairwise overlapping in a chain need more than max-live.
    let chain = [l(0, 1, 2), l(1, 2, 1), l(2, 3, 2), l(0, 0, 1), l(3, 3, 1)];
    check_instance(&chain);
    // Overflowing sums are infeasible at any capacity.
    assert_eq!(exact(&[l(0, 1, u64::MAX), l(1, 2, 1)], u64::MAX, far()), ExactResult::Infeasible);
    assert_eq!(exact(&[l(0, 1, u64::MAX), l(2, 3, u64::MAX)], u64::MAX, far()), ExactResult::Found(vec![0, 0]));
    // Reversed bounds are read as the same interval.
    assert!(matches!(exact(&[l(3, 0, 2), l(1, 1, 2)], 4, far()), ExactResult::Found(_)));
    // An expired deadline times out on anything that needs a search, but never panics.
    let mut rng = Rng::new(3);
    let big = random_instance(&mut rng, 60, 20, 50, false);
    let lower = lower_bound(&big).unwrap();
    let r = exact(&big, lower, Limits::until(Instant::now()));
    assert!(r == ExactResult::TimedOut || matches!(r, ExactResult::Found(_)) || r == ExactResult::Infeasible);
}

#[test]
fn solve_with_the_exact_solver() {
    let intervals = [l(0, 1, 2), l(1, 2, 1), l(2, 3, 2), l(0, 0, 1), l(3, 3, 1), l(0, 3, 3)];
    let optimum = brute_optimum(&intervals);
    let options = SolveOptions { solver: Solver::Exact, capacity: None, time_limit: Duration::from_secs(10), search_nodes: u64::MAX, halt_heuristics: false };
    let solution = solve(&intervals, &options).unwrap();
    assert_eq!(solution.arena, optimum);
    assert!(solution.proved_optimal);
    assert!(valid(&intervals, &solution.offsets, solution.arena));
    let within = SolveOptions { capacity: Some(optimum), ..options };
    assert!(valid(&intervals, &solve(&intervals, &within).unwrap().offsets, optimum));
    let below = SolveOptions { capacity: Some(optimum - 1), ..options };
    match solve(&intervals, &below) {
        Err(SolveError::OverCapacity { proved_infeasible, best, .. }) => {
            assert!(proved_infeasible);
            assert!(best.is_some());
        }
        other => panic!("expected OverCapacity, got {other:?}"),
    }
}

#[test]
fn agrees_with_brute_force_where_the_lower_bound_is_unreachable() {
    let mut rng = Rng::new(0xDEAD_BEEF);
    let (mut gaps, mut count) = (0, 0);
    while gaps < 200 {
        let mut intervals = filled_instance(&mut rng, 3 + count % 4, 5, 3, 3);
        count += 1;
        // Some with a zero-size buffer.
        if count % 3 == 0 {
            intervals.insert(count % intervals.len(), l(1, 3, 0));
        }

        let optimum = brute_optimum_by_offsets(&intervals);
        check_against(&intervals, optimum);
        if optimum > lower_bound(&intervals).unwrap() {
            gaps += 1;
        }
    }
    println!("{count} instances, {gaps} above the lower bound");
}

/// Cuts the rectangle time `t0..t1` × bytes `m0..m1` in two, again and again (bytes in
/// units of 64): the pieces are buffers that fit exactly in the rectangle's height, with
/// every time step full.
fn tile(rng: &mut Rng, (t0, t1): (usize, usize), (m0, m1): (u64, u64), depth: u32, out: &mut Vec<Live>) {
    let units = (m1 - m0) / 64;
    if depth == 0 || (t1 - t0 < 2 && units < 2) || rng.below(8) == 0 {
        out.push(l(t0, t1 - 1, m1 - m0));
    } else if (rng.below(2) == 0 && t1 - t0 >= 2) || units < 2 {
        let t = t0 + 1 + rng.below((t1 - t0 - 1) as u64) as usize;
        tile(rng, (t0, t), (m0, m1), depth - 1, out);
        tile(rng, (t, t1), (m0, m1), depth - 1, out);
    } else {
        let m = m0 + 64 * (1 + rng.below(units - 1));
        tile(rng, (t0, t1), (m0, m), depth - 1, out);
        tile(rng, (t0, t1), (m, m1), depth - 1, out);
    }
}

#[test]
fn finds_perfect_packings_of_tiled_rectangles() {
    // Dozens of buffers, every time step exactly full: only a perfect packing fits, and
    // the search must split into parts, re-rank them and backtrack across them.
    let mut rng = Rng::new(2024);
    let mut sizes = 0;
    for k in 0..100 {
        let mut intervals = Vec::new();
        tile(&mut rng, (0, 32), (0, 64 * 40), 5 + k % 4, &mut intervals);
        let lower = lower_bound(&intervals).unwrap();
        assert_eq!(lower, 64 * 40);
        match exact(&intervals, lower, far()) {
            ExactResult::Found(offsets) => assert!(valid(&intervals, &offsets, lower), "{intervals:?}"),
            other => panic!("{other:?} on {intervals:?}"),
        }
        sizes += intervals.len();
    }
    assert!(sizes > 100 * 20, "instances too small: {sizes} buffers in all");
}

#[test]
fn a_node_budget_gives_the_same_answer_whatever_the_clock() {
    // Tiled instances need search; with a node budget and a far deadline the answer
    // depends only on the budget: repeated runs agree, and a zero budget searches nothing.
    let mut rng = Rng::new(77);
    for k in 0..20 {
        let mut intervals = Vec::new();
        tile(&mut rng, (0, 32), (0, 64 * 40), 6 + k % 3, &mut intervals);
        let lower = lower_bound(&intervals).unwrap();
        let budget = Limits { deadline: Instant::now() + Duration::from_secs(60), nodes: 50 };
        let first = exact(&intervals, lower, budget);
        assert_eq!(first, exact(&intervals, lower, budget), "{intervals:?}");
        if let ExactResult::Found(offsets) = &first {
            assert!(valid(&intervals, offsets, lower));
        }
        let none = Limits { nodes: 0, ..budget };
        assert_eq!(exact(&intervals, lower, none), ExactResult::TimedOut);
        // minimize from everything stacked, twice, with the same small budget.
        let mut offsets = Vec::new();
        let mut top = 0;
        for b in &intervals {
            offsets.push(top);
            top += b.size;
        }
        let start = Solution { offsets, arena: top, proved_optimal: false };
        let a = minimize(&intervals, lower, start.clone(), Limits { nodes: 3000, ..budget });
        let b = minimize(&intervals, lower, start, Limits { nodes: 3000, ..budget });
        assert_eq!(a, b);
        assert!(valid(&intervals, &a.offsets, a.arena) && a.arena <= top);
    }
}

#[test]
fn lists_too_large_to_search_are_left_as_they_are() {
    // 200000 buffers with thousands live at once: the search's tables would need billions
    // of entries, so the search is not tried (counted, not timed: no node is spent).
    let intervals = memplan::testing::synthetic::training_like(200_000, 1);
    let lower = lower_bound(&intervals).unwrap();
    let stacked: Vec<u64> = intervals.iter().scan(0u64, |top, l| Some(std::mem::replace(top, *top + l.size))).collect();
    let arena = stacked.last().unwrap() + intervals.last().unwrap().size;
    let start = Solution { offsets: stacked.clone(), arena, proved_optimal: false };
    assert!(!searchable(&intervals));
    let limits = Limits { deadline: Instant::now() + Duration::from_secs(600), nodes: u64::MAX };
    assert_eq!(minimize(&intervals, lower, start, limits).offsets, stacked);
    assert_eq!(exact(&intervals, arena, limits), ExactResult::TimedOut);
    // Small lists are searched.
    assert!(searchable(&memplan::testing::synthetic::training_like(2_000, 1)));
}
