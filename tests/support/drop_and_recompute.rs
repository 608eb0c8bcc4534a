//! A crude rematerialisation strategy for tests and as a baseline in
//! `examples/remat_pareto.rs`: not a `--checkpoint` strategy (those live in
//! `memplan::solve::remat`).
//! It ignores cost and often recomputes far more than needed, but it does recompute, so it
//! exercises the remat pass (applying sequences, the arena loop, the checker, executors) on
//! real steps. Included with `#[path]` by tests/remat.rs and the example.

use std::time::Duration;

use memplan::solve::Node;
use memplan::solve::remat::{Problem, RematError, Recomputation, Strategy, evaluate};

/// The strategy (not a good one: it ignores cost): choose forward nodes to *drop*,
/// greedily, largest values first, keeping a choice when it does not raise the peak (so
/// chains of drops can form); a dropped node's values are recomputed as
/// [`recompute_before_readers`] does. Stops as soon as the peak fits the budget.
/// It takes no time worth limiting: the time limit of [`StrategyFn`](memplan::passes::remat::StrategyFn)
/// is not used.
pub fn drop_and_recompute(problem: &Problem, budget: u64, _time_limit: Duration) -> Result<Recomputation, RematError> {
    let n = problem.nodes.len();
    let mut size_written = vec![0u64; n];
    for value in &problem.values {
        if let Some(d) = value.def {
            size_written[d as usize] += value.size;
        }
    }
    let sequence_for = |dropped: &[bool]| recompute_before_readers(problem, dropped);
    let mut dropped = vec![false; n];
    let mut best = evaluate(problem, &sequence_for(&dropped)).map_err(RematError::BadProblem)?;
    let mut best_sequence = sequence_for(&dropped);
    let mut candidates: Vec<usize> = (0..n).filter(|&d| problem.nodes[d].recomputable && size_written[d] > 0).collect();
    candidates.sort_by_key(|&d| (std::cmp::Reverse(size_written[d]), d));
    for d in candidates {
        if best.peak <= budget {
            break;
        }
        dropped[d] = true;
        let sequence = sequence_for(&dropped);
        let eval = evaluate(problem, &sequence).map_err(RematError::BadProblem)?;
        if eval.peak <= best.peak {
            (best, best_sequence) = (eval, sequence);
        } else {
            dropped[d] = false;
        }
    }
    if best.peak <= budget {
        let bound = memplan::solve::remat::bound::lower_bound(problem, budget);
        Ok(Recomputation { sequence: best_sequence, eval: best, strategy: Strategy::None, bound }) // a test strategy: not one of the enum's
    } else {
        Err(RematError::Infeasible { budget, smallest: best.peak, timed_out: false })
    }
}

/// Emits `d` (if dropped and not yet emitted for this reader) after the dropped nodes it reads.
fn chain(problem: &Problem, reads: &[Vec<usize>], dropped: &[bool], d: usize, done: &mut [bool], out: &mut Vec<Node>) {
    if !dropped[d] || done[d] {
        return;
    }
    done[d] = true;
    for &v in &reads[d] {
        if let Some(e) = problem.values[v].def {
            chain(problem, reads, dropped, e as usize, done, out);
        }
    }
    out.push(d as Node);
}

/// The identity sequence with the values of every `dropped` node recomputed right before
/// each node that cannot be recomputed and reads them, after the dropped nodes they need
/// (a fresh chain per reader). `dropped` nodes must be recomputable.
pub fn recompute_before_readers(problem: &Problem, dropped: &[bool]) -> Vec<Node> {
    let n = problem.nodes.len();
    let mut reads: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, value) in problem.values.iter().enumerate() {
        for &r in &value.readers {
            if !reads[r as usize].contains(&v) {
                reads[r as usize].push(v);
            }
        }
    }
    let mut sequence = Vec::new();
    for r in 0..n {
        if !problem.nodes[r].recomputable {
            let mut done = vec![false; n];
            for &v in &reads[r] {
                if let Some(d) = problem.values[v].def {
                    chain(problem, &reads, dropped, d as usize, &mut done, &mut sequence);
                }
            }
        }
        sequence.push(r as Node);
    }
    sequence
}
