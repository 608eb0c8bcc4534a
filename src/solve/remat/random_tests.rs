//! The strategies on seeded random problems: every result is a valid sequence that fits
//! its budget by [`evaluate`]; on tiny problems the near-optimal search is compared with an
//! exhaustive search over every stage-form plan, and the lower bounds are checked against
//! the true optimum.

use std::time::Duration;

use super::bound::lower_bound;
use super::search::smallest_peak;
use super::stages::{Sim, StagePlan};
use super::testing::random_problem;
use super::*;
use crate::rng::Rng;

const LIMIT: Duration = Duration::from_secs(60);

/// The cheapest extra cost of a plan fitting `budget` (None if none does) and the smallest
/// peak of any plan, over every set of recompute pairs.
fn exhaustive(problem: &Problem, budget: u64) -> (Option<u64>, u64) {
    let n = problem.nodes.len();
    let pairs: Vec<(Node, Node)> =
        (1..n).flat_map(|t| (0..t).map(move |v| (t as Node, v as Node))).filter(|&(_, v)| problem.nodes[v as usize].recomputable).collect();
    assert!(pairs.len() <= 16, "too many pairs for an exhaustive search");
    let mut sim = Sim::new(problem);
    let mut best: Option<u64> = None;
    let mut smallest = u64::MAX;
    for mask in 0u32..(1 << pairs.len()) {
        let mut plan = StagePlan::empty(n);
        for (i, &(t, v)) in pairs.iter().enumerate() {
            if mask & (1 << i) != 0 {
                plan.insert(t, v);
            }
        }
        let score = sim.score(&plan, budget);
        smallest = smallest.min(score.peak);
        if score.peak <= budget && best.is_none_or(|b| score.extra < b) {
            best = Some(score.extra);
        }
    }
    (best, smallest)
}

/// A tiny problem (at most 16 recomputable pairs) and a budget between its smallest and
/// plain peaks.
fn tiny(seed: u64) -> (Problem, u64, u64) {
    let mut rng = Rng::new(seed);
    loop {
        let n = 3 + rng.below(4) as usize;
        let problem = random_problem(&mut rng, n);
        let pairs: usize = (1..n).map(|t| (0..t).filter(|&v| problem.nodes[v].recomputable).count()).sum();
        if pairs > 16 {
            continue;
        }
        let plain = evaluate(&problem, &StagePlan::empty(n).sequence()).unwrap().peak;
        let (_, smallest) = exhaustive(&problem, u64::MAX);
        let budget = smallest + rng.below(plain - smallest + 1);
        return (problem, budget, smallest);
    }
}

#[test]
fn every_strategy_returns_a_valid_sequence_within_budget() {
    for seed in 0..80 {
        let mut rng = Rng::new(seed);
        let n = 2 + rng.below(24) as usize;
        let problem = random_problem(&mut rng, n);
        let plain = evaluate(&problem, &StagePlan::empty(n).sequence()).unwrap().peak;
        let budget = plain - rng.below(plain / 2 + 1);
        for strategy in Strategy::ALL {
            match solve_with(&problem, budget, strategy, LIMIT) {
                Ok(solution) => {
                    let eval = evaluate(&problem, &solution.sequence).unwrap_or_else(|e| panic!("seed {seed} {strategy:?}: {e}"));
                    assert_eq!(eval, solution.eval);
                    assert!(eval.peak <= budget, "seed {seed} {strategy:?}: {} > {budget}", eval.peak);
                    assert!(strategy == Strategy::Auto || solution.strategy == strategy);
                }
                Err(RematError::Infeasible { smallest, .. }) => {
                    assert!(smallest > budget, "seed {seed} {strategy:?}");
                    // The smallest peak reported is one the search reaches.
                    let solution = solve_with(&problem, smallest, Strategy::NearOptimal, LIMIT).unwrap();
                    assert!(solution.eval.peak <= smallest, "seed {seed}");
                }
                Err(RematError::StrategyCannot { reached, smallest, .. }) => {
                    assert!(reached > budget && smallest <= budget, "seed {seed} {strategy:?}");
                    assert!(solve_with(&problem, budget, Strategy::NearOptimal, LIMIT).is_ok(), "seed {seed}");
                }
                Err(e) => panic!("seed {seed} {strategy:?}: {e}"),
            }
        }
    }
}

#[test]
fn auto_is_never_worse_than_the_other_strategies() {
    for seed in 0..40 {
        let mut rng = Rng::new(1000 + seed);
        let n = 4 + rng.below(24) as usize;
        let problem = random_problem(&mut rng, n);
        let plain = evaluate(&problem, &StagePlan::empty(n).sequence()).unwrap().peak;
        let budget = plain - rng.below(plain / 3 + 1);
        let Ok(auto) = solve_with(&problem, budget, Strategy::Auto, LIMIT) else { continue };
        for strategy in [Strategy::None, Strategy::ChenSqrt, Strategy::ChenGreedy, Strategy::NearOptimal] {
            if let Ok(other) = solve_with(&problem, budget, strategy, LIMIT) {
                assert!(auto.eval.cost <= other.eval.cost, "seed {seed}: auto {} > {strategy:?} {}", auto.eval.cost, other.eval.cost);
            }
        }
    }
}

#[test]
fn near_optimal_matches_an_exhaustive_search_on_tiny_problems() {
    let (mut total, mut equal, mut found) = (0, 0, 0);
    for seed in 0..300 {
        let (problem, budget, smallest) = tiny(seed);
        let (optimum, _) = exhaustive(&problem, budget);
        let optimum = optimum.expect("the budget is at least the smallest peak");
        let bound = lower_bound(&problem, budget);
        // The bounds hold.
        assert!(bound.peak <= smallest, "seed {seed}: peak bound {} > {smallest}", bound.peak);
        assert!(bound.extra.is_some_and(|b| b <= optimum), "seed {seed}: cost bound {:?} > {optimum}", bound.extra);
        // The smallest peak the search reports is reachable, so never below the optimum.
        assert!(smallest_peak(&problem, Instant::now() + LIMIT) >= smallest, "seed {seed}");
        total += 1;
        if let Ok(solution) = solve_with(&problem, budget, Strategy::NearOptimal, LIMIT) {
            found += 1;
            let extra = u64::try_from(solution.eval.cost - solution.eval.base_cost).unwrap();
            assert!(extra >= optimum, "seed {seed}: below the exhaustive optimum");
            equal += (extra == optimum) as usize;
        }
    }
    // Measured: a plan on every instance, the optimum on 300 of 300.
    assert_eq!(found, total, "the search failed to fit a feasible budget");
    assert!(equal * 100 >= total * 98, "optimal on only {equal} of {total}");
}

#[test]
fn the_smallest_peak_is_found_on_tiny_problems() {
    let (mut total, mut equal) = (0, 0);
    for seed in 0..300 {
        let (problem, _, smallest) = tiny(seed);
        let found = smallest_peak(&problem, Instant::now() + LIMIT);
        total += 1;
        equal += (found == smallest) as usize;
    }
    // Measured: 300 of 300.
    assert!(equal * 100 >= total * 95, "smallest peak found on only {equal} of {total}");
}

#[test]
fn the_search_is_deterministic() {
    for seed in 0..20 {
        let mut rng = Rng::new(5000 + seed);
        let n = 10 + rng.below(30) as usize;
        let problem = random_problem(&mut rng, n);
        let plain = evaluate(&problem, &StagePlan::empty(n).sequence()).unwrap().peak;
        let budget = plain - plain / 4;
        let first = solve_with(&problem, budget, Strategy::Auto, LIMIT);
        assert_eq!(first, solve_with(&problem, budget, Strategy::Auto, LIMIT), "seed {seed}");
    }
}

#[test]
fn degenerate_problems() {
    let empty = Problem { nodes: Vec::new(), values: Vec::new(), shares: Vec::new() };
    for strategy in Strategy::ALL {
        let solution = solve(&empty, 0, strategy).unwrap();
        assert_eq!((solution.sequence.len(), solution.eval.peak), (0, 0));
    }
    // One node writing 10 bytes: nothing to recompute; 9 bytes cannot fit.
    let one = Problem {
        nodes: vec![NodeInfo { cost: 1, recomputable: true, forward: true }],
        values: vec![DagValue { size: 10, def: Some(0), readers: Vec::new(), to_end: false }],
        shares: Vec::new(),
    };
    assert_eq!(solve(&one, 10, Strategy::Auto).unwrap().sequence, vec![0]);
    assert_eq!(solve(&one, 9, Strategy::Auto), Err(RematError::Infeasible { budget: 9, smallest: 10, timed_out: false }));
    assert_eq!(
        solve(&one, 9, Strategy::ChenSqrt),
        Err(RematError::Infeasible { budget: 9, smallest: 10, timed_out: false }),
        "no strategy fits, so the error is Infeasible whichever was asked"
    );
}

/// With no time at all, every strategy still answers: a valid sequence within budget, or
/// an error saying the search stopped at the time limit.
#[test]
fn a_time_limit_of_zero_gives_a_valid_answer_or_says_it_stopped() {
    for seed in 0..60 {
        let mut rng = Rng::new(2000 + seed);
        let n = 2 + rng.below(40) as usize;
        let problem = random_problem(&mut rng, n);
        let plain = evaluate(&problem, &StagePlan::empty(n).sequence()).unwrap().peak;
        for budget in [plain, plain - rng.below(plain / 2 + 1)] {
            for strategy in Strategy::ALL {
                match solve_with(&problem, budget, strategy, Duration::ZERO) {
                    Ok(solution) => {
                        let eval = evaluate(&problem, &solution.sequence).unwrap();
                        assert!(eval.peak <= budget, "seed {seed} {strategy:?}: {} > {budget}", eval.peak);
                    }
                    Err(RematError::Infeasible { smallest, timed_out, .. }) => {
                        assert!(smallest > budget && timed_out, "seed {seed} {strategy:?}");
                        assert!(budget < plain, "seed {seed} {strategy:?}: the plain order fits {budget}");
                    }
                    Err(RematError::StrategyCannot { reached, .. }) => assert!(reached > budget, "seed {seed} {strategy:?}"),
                    Err(e) => panic!("seed {seed} {strategy:?}: {e}"),
                }
            }
        }
    }
}

/// A peak above 2^64 - 1 is an error naming it, never a wrapped number (or a search for
/// a budget that the wrapped number made impossible).
#[test]
fn a_peak_above_64_bits_is_too_large() {
    let half = 1u64 << 63;
    let node = |forward| NodeInfo { cost: 1, recomputable: true, forward };
    let problem = Problem {
        nodes: vec![node(true), node(true), node(false)],
        values: vec![
            DagValue { size: half, def: Some(0), readers: vec![1, 2], to_end: false },
            DagValue { size: half, def: Some(1), readers: vec![2], to_end: false },
            DagValue { size: 1, def: Some(2), readers: Vec::new(), to_end: false },
        ],
        shares: Vec::new(),
    };
    let too_large = u128::from(u64::MAX) + 2;
    assert_eq!(evaluate(&problem, &[0, 1, 2]), Err(SequenceError::TooLarge { peak: too_large }));
    for strategy in Strategy::ALL {
        assert_eq!(solve_with(&problem, u64::MAX, strategy, LIMIT), Err(RematError::TooLarge { peak: too_large }), "{strategy:?}");
    }
}
