//! Offset solvers on random and edge-case instances: every placement passes the
//! independent `check_offsets`; the fast greedy and best-fit place exactly as the plain
//! O(n²) scans they replace (the old best-fit, and its first-fit twin) in the same order;
//! arenas are never above the sum of sizes nor below the lower bound; auto's peak windows
//! never make a large list's arena worse and reach idealloc's pangu bound; heuristics run
//! side by side on large lists choose as if run one after the other.

use memplan::checker::check_offsets;
use memplan::solve::offsets::bestfit::{self, Order};
use memplan::solve::offsets::{self, Live, Method, SolveError, SolveOptions, Solver, greedy};
use memplan::testing::synthetic;

/// Deterministic pseudo-random numbers (no dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

/// A random list: mixed short and long lifetimes, sizes with ties and zeros.
fn random_list(rng: &mut Lcg, n: usize) -> Vec<Live> {
    let horizon = 1 + rng.next(3 * n as u64 + 1) as usize;
    (0..n)
        .map(|_| {
            let first = rng.next(horizon as u64) as usize;
            let len = match rng.next(4) {
                0 => rng.next(horizon as u64 + 1) as usize,
                _ => rng.next(4) as usize,
            };
            let size = match rng.next(8) {
                0 => 0,
                1 => 256,
                _ => 1 + rng.next(4096),
            };
            Live { first, last: first + len, size }
        })
        .collect()
}

/// The O(n²) placement the fast index replaces: for each buffer in `order`, scan every
/// placed buffer that meets it in time; take the lowest (`best == false`) or smallest
/// (`best == true`, lowest among equals) gap that holds it, else the top.
fn reference(intervals: &[Live], order: &[usize], best: bool) -> Vec<u64> {
    let mut offsets = vec![0u64; intervals.len()];
    let mut placed: Vec<usize> = Vec::new();
    for &i in order {
        let live = intervals[i];
        if live.size == 0 {
            continue;
        }
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| intervals[j].first <= live.last && live.first <= intervals[j].last)
            .map(|&j| (offsets[j], offsets[j] + intervals[j].size))
            .collect();
        busy.sort_unstable();
        let (mut chosen, mut cursor) = (None::<(u64, u64)>, 0u64);
        for (start, end) in busy {
            if start > cursor {
                let gap = start - cursor;
                if gap >= live.size && chosen.is_none_or(|(g, _)| best && gap < g) {
                    chosen = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        offsets[i] = chosen.map_or(cursor, |(_, offset)| offset);
        placed.push(i);
    }
    offsets
}

fn triples(intervals: &[Live]) -> Vec<(usize, usize, u64)> {
    intervals.iter().map(|l| (l.first, l.last, l.size)).collect()
}

fn assert_valid(intervals: &[Live], offsets: &[u64], what: &str) -> u64 {
    if let Err(v) = check_offsets(&triples(intervals), offsets, None) {
        panic!("{what}: invalid placement of {intervals:?} at {offsets:?}:\n{v}");
    }
    let arena = offsets::arena_of(intervals, offsets).unwrap();
    let sum: u64 = intervals.iter().map(|l| l.size).sum();
    let lower = offsets::lower_bound(intervals).unwrap();
    assert!(lower <= arena && arena <= sum, "{what}: arena {arena} outside [{lower}, {sum}]");
    arena
}

#[test]
fn fast_solvers_place_exactly_as_the_quadratic_scans() {
    let mut rng = Lcg(11);
    for round in 0..400 {
        let n = 1 + rng.next(if round % 10 == 0 { 400 } else { 40 }) as usize;
        let intervals = random_list(&mut rng, n);
        for order in [Order::Spatial, Order::Temporal] {
            let fast = bestfit::best_fit_in(&intervals, order).unwrap();
            assert_eq!(fast, reference(&intervals, &bestfit::sorted(&intervals, order), true), "best-fit {order:?}, round {round}");
            assert_valid(&intervals, &fast, "best-fit");
        }
        let mut by_size: Vec<usize> = (0..n).collect();
        by_size.sort_by_key(|&i| (std::cmp::Reverse(intervals[i].size), i));
        let fast = greedy::greedy_by_size(&intervals).unwrap();
        assert_eq!(fast, reference(&intervals, &by_size, false), "greedy, round {round}");
        assert_valid(&intervals, &fast, "greedy");
    }
}

#[test]
fn every_solver_passes_the_checker_and_auto_is_the_best_heuristic_or_better() {
    let mut rng = Lcg(5);
    for _ in 0..150 {
        let n = rng.next(120) as usize;
        let intervals = random_list(&mut rng, n);
        let mut arenas = Vec::new();
        let mut auto_log = Vec::new();
        for solver in [Solver::Greedy, Solver::BestFit, Solver::Auto] {
            let options = SolveOptions { solver, ..SolveOptions::default() };
            let mut log = Vec::new();
            let solution = offsets::solve_logged(&intervals, &options, &mut log).unwrap();
            let arena = assert_valid(&intervals, &solution.offsets, &format!("{solver:?}"));
            assert_eq!(arena, solution.arena);
            if arena == offsets::lower_bound(&intervals).unwrap() {
                assert!(solution.proved_optimal);
            }
            arenas.push(arena);
            auto_log = log;
        }
        // Auto keeps the best heuristic unless its exact step found a smaller arena.
        let heuristics = arenas[0].min(arenas[1]);
        let chosen: Vec<Method> = auto_log.iter().filter(|a| a.chosen).map(|a| a.method).collect();
        if arenas[2] < heuristics {
            assert_eq!(chosen, [Method::Exact], "only the exact step beats the heuristics");
        } else {
            assert_eq!(arenas[2], heuristics, "auto keeps the best heuristic");
            assert!(!chosen.contains(&Method::Exact));
        }
    }
}

#[test]
fn synthetic_training_lists_place_validly_and_exactly_as_the_scan() {
    // Deep enough trees that every kind of union in the index is used.
    // rounds(6000, 300): twenty steps one after the other, placed in parts of several.
    for intervals in [synthetic::training_like(3000, 7), synthetic::rounds(3000, 1000, 7), synthetic::rounds(6000, 300, 3)] {
        let solution = offsets::solve(&intervals, &SolveOptions::default()).unwrap();
        assert_valid(&intervals, &solution.offsets, "auto on a synthetic list");
        for order in [Order::Spatial, Order::Temporal] {
            let fast = bestfit::best_fit_in(&intervals, order).unwrap();
            assert_eq!(fast, reference(&intervals, &bestfit::sorted(&intervals, order), true), "best-fit {order:?}");
        }
        let mut by_size: Vec<usize> = (0..intervals.len()).collect();
        by_size.sort_by_key(|&i| (std::cmp::Reverse(intervals[i].size), i));
        assert_eq!(greedy::greedy_by_size(&intervals).unwrap(), reference(&intervals, &by_size, false), "greedy");
    }
}

#[test]
fn edge_cases() {
    let l = |first, last, size| Live { first, last, size };
    let solvers = [Solver::Greedy, Solver::BestFit, Solver::Auto];
    let solve = |intervals: &[Live], solver| offsets::solve(intervals, &SolveOptions { solver, ..SolveOptions::default() }).unwrap();
    for solver in solvers {
        // Empty list: nothing to place, arena 0, optimal.
        let s = solve(&[], solver);
        assert_eq!((s.offsets.len(), s.arena, s.proved_optimal), (0, 0, true));
        // One buffer at 0.
        let s = solve(&[l(3, 9, 100)], solver);
        assert_eq!((s.offsets, s.arena, s.proved_optimal), (vec![0], 100, true));
        // Zero-size buffers take no bytes (offset 0) and never collide.
        let s = solve(&[l(0, 5, 0), l(0, 5, 64), l(2, 2, 0)], solver);
        assert_eq!((s.offsets, s.arena), (vec![0, 0, 0], 64));
        // Identical buffers stack in input order.
        let s = solve(&[l(1, 4, 32); 4], solver);
        assert_eq!((s.offsets, s.arena, s.proved_optimal), (vec![0, 32, 64, 96], 128, true));
        // Ties in size: disjoint lifetimes share bytes.
        let s = solve(&[l(0, 1, 50), l(2, 3, 50), l(4, 5, 50)], solver);
        assert_eq!((s.offsets, s.arena), (vec![0, 0, 0], 50));
        // Touching (last == next first) is overlapping: inclusive ranges.
        let s = solve(&[l(0, 2, 10), l(2, 4, 10)], solver);
        assert_eq!(s.arena, 20);
    }
    // Overflow is an error, not a panic.
    let big = [l(0, 0, u64::MAX), l(0, 0, 1)];
    for solver in solvers {
        let result = offsets::solve(&big, &SolveOptions { solver, ..SolveOptions::default() });
        assert_eq!(result, Err(SolveError::Overflow));
    }
    // A capacity below the arena is an error carrying the best placement found.
    let tight = SolveOptions { capacity: Some(15), ..SolveOptions::default() };
    match offsets::solve(&[l(0, 1, 10), l(1, 2, 10)], &tight) {
        Err(SolveError::OverCapacity { capacity: 15, best: Some(best), proved_infeasible: true }) => assert_eq!(best.arena, 20),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn auto_on_large_lists_is_no_worse_than_any_heuristic() {
    // From 1000 buffers on, auto tries the peak windows (window.rs) before the exact step.
    let mut rng = Lcg(23);
    let mut windows = 0;
    for round in 0..6 {
        let n = 1000 + rng.next(600) as usize;
        let intervals = random_list(&mut rng, n);
        let heuristics = [Solver::Greedy, Solver::BestFit]
            .map(|solver| offsets::solve(&intervals, &SolveOptions { solver, ..SolveOptions::default() }).unwrap().arena);
        let options = SolveOptions { search_nodes: 20_000, time_limit: std::time::Duration::from_secs(600), ..SolveOptions::default() };
        let mut log = Vec::new();
        let solution = offsets::solve_logged(&intervals, &options, &mut log).unwrap();
        let arena = assert_valid(&intervals, &solution.offsets, &format!("auto, round {round}"));
        assert!(arena <= heuristics[0].min(heuristics[1]), "round {round}: auto {arena} above a heuristic {heuristics:?}");
        let window = log.iter().find(|a| a.method == Method::PeakWindow);
        windows += usize::from(window.is_some());
        let chosen: Vec<&offsets::Attempt> = log.iter().filter(|a| a.chosen).collect();
        assert_eq!(chosen.len(), 1, "round {round}: one method's offsets are returned");
        assert_eq!(chosen[0].arena, arena, "round {round}");
    }
    assert!(windows >= 3, "the peak windows ran on too few lists ({windows})");
}

#[test]
fn heuristics_side_by_side_choose_as_one_after_the_other() {
    // From 20000 buffers on, on a machine with a second hardware thread (CI's two cores),
    // `solve` runs the heuristics on threads of their own: the offsets and the log must be
    // those of running them one after the other.
    let intervals = synthetic::rounds(24_000, 3_000, 5);
    let spatial = bestfit::best_fit_in(&intervals, Order::Spatial).unwrap();
    let temporal = bestfit::best_fit_in(&intervals, Order::Temporal).unwrap();
    let greedy = greedy::greedy_by_size(&intervals).unwrap();
    let arenas = [&spatial, &temporal, &greedy].map(|o| assert_valid(&intervals, o, "a heuristic on 24000 buffers"));
    let mut log = Vec::new();
    let options = SolveOptions { solver: Solver::BestFit, ..SolveOptions::default() };
    let solution = offsets::solve_logged(&intervals, &options, &mut log).unwrap();
    assert_eq!(solution.offsets, bestfit::best_fit(&intervals).unwrap());
    assert_eq!(log.iter().map(|a| a.arena).collect::<Vec<_>>(), arenas[..2]);
    // Auto logs the three in its order (spatial, temporal, greedy) and keeps the first of
    // the smallest.
    let mut log = Vec::new();
    let options = SolveOptions { search_nodes: 0, ..SolveOptions::default() };
    offsets::solve_logged(&intervals, &options, &mut log).unwrap();
    assert_eq!(log.iter().take(3).map(|a| a.arena).collect::<Vec<_>>(), arenas);
    let smallest = arenas.iter().position(|a| a == arenas.iter().min().unwrap()).unwrap();
    let heuristic_chosen = log.iter().take(3).position(|a| a.chosen);
    let later_chosen = log.iter().skip(3).any(|a| a.chosen);
    assert!(later_chosen || heuristic_chosen == Some(smallest), "{log:?}");
}

#[test]
fn auto_reaches_pangus_lower_bound_with_the_plan_node_budget() {
    // idealloc's pangu_2.6B: greedy leaves a 40 MiB hole at the one peak step
    // (benches/BENCHMARKS.md); the peak window closes it.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/data/idealloc/pangu_2.6B.csv");
    let list = memplan::formats::buffer_list::parse_buffer_list(&std::fs::read_to_string(path).unwrap()).unwrap();
    let intervals: Vec<Live> = list.iter().map(|b| Live { first: b.lower as usize, last: (b.upper - 1) as usize, size: b.size }).collect();
    let options = SolveOptions {
        search_nodes: memplan::passes::DEFAULT_SEARCH_NODES,
        time_limit: std::time::Duration::from_secs(600),
        ..SolveOptions::default()
    };
    let mut log = Vec::new();
    let solution = offsets::solve_logged(&intervals, &options, &mut log).unwrap();
    let arena = assert_valid(&intervals, &solution.offsets, "auto on pangu");
    assert_eq!(arena, 5_530_099_775, "{log:?}");
    assert!(solution.proved_optimal);
    let chosen: Vec<Method> = log.iter().filter(|a| a.chosen).map(|a| a.method).collect();
    assert_eq!(chosen, [Method::PeakWindow]);
}
