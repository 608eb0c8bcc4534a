//! Chen et al.'s checkpointing ("Training deep nets with sublinear memory cost", 2016): the
//! baselines the near-optimal search is measured against, and seeds for it.
//!
//! Both keep a set of *checkpoints* among the forward nodes and drop every other forward
//! value after its forward readers; the backward part recomputes a dropped value when it
//! first needs it (together with the dropped values it is computed from, down to
//! checkpoints) and keeps the recomputed values to their last use — Chen's "recompute the
//! segment, then run its backward". A dropped value still needed at the very next stage
//! is kept instead (recomputing it there would save nothing: e.g. the forward output read
//! by the loss).
//!
//! Checkpoints are chosen among the forward graph's *articulation points* in its order:
//! forward nodes that no forward edge jumps over, so each segment between two of them
//! depends on the rest only through its ends (every node of a chain; the block outputs of
//! a ResNet). Values of nodes that cannot be recomputed are kept whatever the plan, so
//! their edges do not count: in a training step the labels (a view of an input, read by
//! the loss at the end of the forward pass) would otherwise jump over every node.
//! - **sqrt(n)** ([`sqrt_plan`]): every k-th articulation point, k = ⌊√(count)⌋.
//! - **greedy** ([`greedy_plans`]): walk the forward nodes in order summing the bytes they
//!   write; at an articulation point where the sum exceeds a segment budget `B`, make it a
//!   checkpoint and restart the sum. Sweeping `B` gives a family of plans: the caller keeps
//!   the cheapest that fits (Checkmate's "best point of the greedy sweep").

use std::collections::HashSet;
use std::time::Instant;

use super::stages::{Sim, StagePlan};
use super::{Node, Problem};

/// Forward nodes, other than the first and the last, that no edge between forward nodes
/// jumps over (edges from nodes that cannot be recomputed aside), ascending.
pub fn articulation_points(problem: &Problem) -> Vec<Node> {
    let n = problem.nodes.len();
    // The furthest forward reader of each recomputable forward node's values.
    let mut jump_to = vec![0usize; n];
    for value in &problem.values {
        if let Some(d) = value.def
            && problem.nodes[d as usize].forward
            && problem.nodes[d as usize].recomputable
        {
            for &r in &value.readers {
                if problem.nodes[r as usize].forward {
                    jump_to[d as usize] = jump_to[d as usize].max(r as usize);
                }
            }
        }
    }
    let forward: Vec<usize> = (0..n).filter(|&k| problem.nodes[k].forward).collect();
    let mut points = Vec::new();
    // The furthest forward reader of a value written before the current node.
    let mut reach = 0usize;
    for (i, &k) in forward.iter().enumerate() {
        if i > 0 && i + 1 < forward.len() && reach <= k {
            points.push(k as Node);
        }
        reach = reach.max(jump_to[k]);
    }
    points
}

/// The plan that keeps `checkpoint` forward values (and every value that is not a
/// recomputable forward one) and recomputes the others when the backward part needs them.
pub fn plan_for(sim: &Sim, checkpoint: &[bool]) -> StagePlan {
    let problem = sim.problem();
    let n = problem.nodes.len();
    let dropped: Vec<bool> = (0..n).map(|k| problem.nodes[k].forward && problem.nodes[k].recomputable && !checkpoint[k]).collect();
    let mut plan = StagePlan::empty(n);
    // The last stage at which each node's latest execution was written or read, and
    // whether that execution is a recompute (kept to its last use).
    let mut last_stage: Vec<usize> = (0..n).collect();
    let mut fresh = vec![false; n];
    let mut stack: Vec<Node> = Vec::new();
    for t in 0..n {
        if problem.nodes[t].forward {
            for &u in sim.reads(t as Node) {
                if let Some(d) = problem.values[u as usize].def {
                    last_stage[d as usize] = t;
                }
            }
            continue;
        }
        stack.push(t as Node);
        while let Some(x) = stack.pop() {
            for &u in sim.reads(x) {
                let Some(d) = problem.values[u as usize].def else { continue };
                let d = d as usize;
                let stale = dropped[d] && !fresh[d] && last_stage[d] + 1 < t;
                if stale && plan.insert(t as Node, d as Node) {
                    fresh[d] = true;
                    stack.push(d as Node);
                }
                last_stage[d] = t;
            }
        }
    }
    plan
}

/// Chen's sqrt(n): every ⌊√count⌋-th articulation point is a checkpoint.
pub fn sqrt_plan(sim: &Sim) -> StagePlan {
    let problem = sim.problem();
    let points = articulation_points(problem);
    let k = ((points.len() as f64).sqrt().floor() as usize).max(1);
    let mut checkpoint = vec![false; problem.nodes.len()];
    for (i, &p) in points.iter().enumerate() {
        if (i + 1) % k == 0 {
            checkpoint[p as usize] = true;
        }
    }
    plan_for(sim, &checkpoint)
}

/// The checkpoints of Chen's greedy with segment budget `segment`.
fn greedy_checkpoints(problem: &Problem, points: &[bool], bytes: &[u64], segment: u64) -> Vec<bool> {
    let mut checkpoint = vec![false; problem.nodes.len()];
    let mut temp: u64 = 0;
    for k in 0..problem.nodes.len() {
        if !problem.nodes[k].forward {
            continue;
        }
        temp = temp.saturating_add(bytes[k]);
        if points[k] && temp > segment {
            checkpoint[k] = true;
            temp = 0;
        }
    }
    checkpoint
}

/// Chen's greedy over a sweep of segment budgets: one plan per distinct checkpoint set
/// (from every articulation point a checkpoint to none), each handed to `each` as it is
/// made (hundreds of plans, each a list per node: the caller keeps only those it may
/// use). The sweep stops at `deadline` (after its first plan).
pub fn greedy_plans(sim: &Sim, deadline: Instant, mut each: impl FnMut(StagePlan)) {
    let problem = sim.problem();
    let n = problem.nodes.len();
    let mut bytes = vec![0u64; n];
    for value in &problem.values {
        if let Some(d) = value.def {
            bytes[d as usize] = bytes[d as usize].saturating_add(value.size);
        }
    }
    let mut points = vec![false; n];
    for p in articulation_points(problem) {
        points[p as usize] = true;
    }
    let total: u64 = (0..n).filter(|&k| problem.nodes[k].forward).fold(0u64, |a, k| a.saturating_add(bytes[k]));
    // Segment budgets: 0, then geometric steps from the smallest size to the total.
    let smallest = bytes.iter().copied().filter(|&b| b > 0).min().unwrap_or(1);
    let mut budgets = vec![0u64];
    let steps = 400;
    let ratio = (total.max(smallest) as f64 / smallest as f64).powf(1.0 / steps as f64);
    for i in 0..=steps {
        budgets.push((smallest as f64 * ratio.powi(i)) as u64);
    }
    budgets.push(total);
    // A set, not a list searched for each budget: 400 budgets, each a list of n flags,
    // made 20,000-node graphs quadratic.
    let mut seen: HashSet<Vec<bool>> = HashSet::new();
    for b in budgets {
        if !seen.is_empty() && Instant::now() >= deadline {
            break;
        }
        let checkpoint = greedy_checkpoints(problem, &points, &bytes, b);
        if !seen.contains(&checkpoint) {
            each(plan_for(sim, &checkpoint));
            seen.insert(checkpoint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::evaluate;
    use super::super::testing::{random_problem, training_chain};
    use super::*;
    use crate::rng::Rng;

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(3600)
    }

    #[test]
    fn every_node_inside_a_chain_is_an_articulation_point() {
        // Forward nodes 0..9: all but the first and the last.
        let p = training_chain(9, 10, 1);
        assert_eq!(articulation_points(&p), (1..8).collect::<Vec<Node>>());
        // A skip edge 2 → 5 hides 3 and 4.
        let mut p = training_chain(9, 10, 1);
        p.values[2].readers.push(5);
        assert_eq!(articulation_points(&p), vec![1, 2, 5, 6, 7]);
        // Unless node 2 cannot be recomputed: its value is kept by every plan anyway.
        p.nodes[2].recomputable = false;
        assert_eq!(articulation_points(&p), (1..8).collect::<Vec<Node>>());
    }

    #[test]
    fn sqrt_n_on_a_chain_keeps_every_kth_node_and_recomputes_the_rest_once() {
        // 16 forward nodes: 14 articulation points (1..=14), k = 3: checkpoints 3, 6, 9, 12.
        let f = 16;
        let p = training_chain(f, 100, 1);
        let sim = Sim::new(&p);
        let plan = sqrt_plan(&sim);
        let mut recomputed: Vec<Node> = plan.stages.iter().flatten().copied().collect();
        recomputed.sort_unstable();
        // Every other forward node is recomputed exactly once, except the last two: node
        // 15 is read by the next stage (16, its own backward) and node 14 by stages 15, 16
        // and 17, with no stage in between where dropping it would save anything.
        let checkpoints = [3, 6, 9, 12];
        let expected: Vec<Node> = (0..14).filter(|k| !checkpoints.contains(k)).collect();
        assert_eq!(recomputed, expected);
        let eval = evaluate(&p, &plan.sequence()).unwrap();
        assert_eq!(eval.cost - eval.base_cost, expected.len() as u128);
        // At the loss: the 4 checkpoints and nodes 14 and 15 (600 bytes, and 1 byte of
        // gradient). In the backward pass: the checkpoints still needed, one recomputed
        // segment (at most 2 values), the values a backward node reads, its gradient.
        let plain = evaluate(&p, &StagePlan::empty(2 * f).sequence()).unwrap();
        assert_eq!(plain.peak, 1600 + 1);
        assert!(eval.peak <= 700, "{}", eval.peak);
    }

    #[test]
    fn the_greedy_sweep_ranges_from_all_to_no_checkpoints() {
        let p = training_chain(12, 100, 1);
        let sim = Sim::new(&p);
        let mut plans = Vec::new();
        greedy_plans(&sim, far(), |plan| plans.push(plan));
        let costs: Vec<u64> = plans.iter().map(|plan| plan.extra_cost(&p)).collect();
        // Every articulation point (1..=10) a checkpoint: only node 0 is dropped and
        // recomputed (node 11 is read by the next stage).
        assert_eq!(costs.iter().min(), Some(&1));
        // With the segment budget above all bytes nothing is a checkpoint: nodes 0..=9 are
        // recomputed (10 and 11 are still needed by the first backward stages).
        assert_eq!(costs.iter().max(), Some(&10));
        for plan in &plans {
            evaluate(&p, &plan.sequence()).unwrap();
        }
    }

    #[test]
    fn chen_plans_are_valid_sequences_on_random_problems() {
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let n = 2 + rng.below(20) as usize;
            let p = random_problem(&mut rng, n);
            let sim = Sim::new(&p);
            let mut plans = vec![sqrt_plan(&sim)];
            greedy_plans(&sim, far(), |plan| plans.push(plan));
            for plan in plans {
                evaluate(&p, &plan.sequence()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                assert!(plan.stages.iter().flatten().all(|&v| p.nodes[v as usize].recomputable && p.nodes[v as usize].forward));
            }
        }
    }
}
