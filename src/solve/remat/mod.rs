//! Rematerialisation (activation checkpointing) as a problem on a plain DAG.
//!
//! The solver knows nothing of the IR, like the order solver (`solve::order`).
//! A [`Problem`] has nodes `0..n` in a topological order (index order is a valid order; it
//! is the order the caller plans to run) and values. Each node has a compute cost and may
//! or may not be recomputed; each value has a size, the node that writes it (or none: it
//! exists before the first node), the nodes that read it, and whether it must survive to
//! the end.
//!
//! A **strategy** is an execution sequence of nodes in which a node may appear more than
//! once: every later appearance is a recompute, which writes the node's values again.
//!
//! **The evaluation rule** (Checkmate's and Moccasin's, extended to several values per node,
//! values that exist before the first node, and values that must survive): every read
//! binds to the latest earlier execution of the value's writer; an execution's values are
//! live from its own position to the last read bound to them, inclusive (only at its own
//! position if none is); a value with no writer is live from position 0 to its last read;
//! a value that must survive stays live to the last position from its last execution on.
//! The peak is the most bytes live at one position. The cost is the sum of the nodes' costs
//! over the sequence; the overhead is cost / (sum of every node's cost once) − 1.
//! [`evaluate`] applies the rule exactly; strategies are judged only by it.
//!
//! **In-place reuse** (an extension for training steps; Checkmate's graphs have no shares,
//! and for them the rule above is all): [`Problem::shares`] lists pairs (input, output)
//! where the output's writer may write the output over the input's bytes, in the order of
//! preference. At an execution of the writer, a pair is *taken* when the writer reads the
//! input, the input's execution it reads has no later read bound to it and need not
//! survive, and neither that input nor the output was taken by an earlier pair of the same
//! execution. A taken pair counts the two values' bytes once at that position: the larger
//! of the two sizes, not their sum (the in-place pass of `memplan plan` only pairs values
//! of equal size). This is the in-place pass's rule (`passes::inplace`) stated on the
//! problem, so a step's problem predicts the arena's lower bound after in-place reuse.
//!
//! A valid sequence runs every node at least once, recomputes only recomputable nodes, and
//! runs every reader after some execution of each value it reads.
//!
//! **Strategies** ([`Strategy`], [`solve`]) keep the problem's order for first executions
//! and choose recomputes by stage (`stages`): none; Chen et al.'s sqrt(n) and greedy
//! (`chen`); a near-optimal search (`search`; docs/PLANNING.md, "Rematerialisation");
//! `auto`, the cheapest of them that fits. Every result is re-checked with [`evaluate`]
//! before it is returned: a strategy never returns a sequence over budget.

pub mod bound;
pub mod chen;
pub mod search;
pub mod stages;
#[cfg(test)]
mod random_tests;
#[cfg(test)]
mod testing;

use std::time::{Duration, Instant};

use thiserror::Error;

use super::{DagValue, Node};
use stages::{Score, Sim, StagePlan};

/// One node of the problem.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NodeInfo {
    /// What running it once costs (the op table's cost model, or the file's `cost_cpu`).
    pub cost: u64,
    /// It may run more than once (a forward op without effects).
    pub recomputable: bool,
    /// It belongs to the forward pass: Chen's strategies checkpoint or recompute only
    /// these (the near-optimal search may recompute any recomputable node).
    pub forward: bool,
}

/// An output that its writer may write over the bytes of one of its inputs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Share {
    /// The value read (an index into [`Problem::values`]).
    pub input: u32,
    /// The value written over it (its writer is the node that may share).
    pub output: u32,
}

/// A rematerialisation problem: nodes in a topological order and the values between them.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Problem {
    pub nodes: Vec<NodeInfo>,
    pub values: Vec<DagValue>,
    /// In-place reuse the evaluation rule applies (see the module doc), in the order of
    /// preference; empty for graphs without it.
    pub shares: Vec<Share>,
}

impl Problem {
    /// The shares of each node (by their output's writer), in order; shares whose output
    /// has no writer are ignored.
    pub fn shares_by_node(&self) -> Vec<Vec<Share>> {
        let mut by_node = vec![Vec::new(); self.nodes.len()];
        for &share in &self.shares {
            let writer = self.values.get(share.output as usize).and_then(|v| v.def);
            if let Some(k) = writer.filter(|&k| (k as usize) < self.nodes.len()) {
                by_node[k as usize].push(share);
            }
        }
        by_node
    }
}

/// The bytes the taken shares of one execution save: `shares` are the node's shares,
/// `dies_here(input)` whether the execution was bound a read of `input` that dies there
/// (no later read is bound to it and it need not survive).
pub(crate) fn shared_bytes(problem: &Problem, shares: &[Share], mut dies_here: impl FnMut(u32) -> bool) -> u64 {
    let mut taken: Vec<u32> = Vec::new();
    let mut saved = 0u64;
    for share in shares {
        if taken.contains(&share.input) || taken.contains(&share.output) || !dies_here(share.input) {
            continue;
        }
        taken.extend([share.input, share.output]);
        let (input, output) = (&problem.values[share.input as usize], &problem.values[share.output as usize]);
        saved = saved.saturating_add(input.size.min(output.size));
    }
    saved
}

/// What a sequence costs under the evaluation rule. Costs are summed in 128 bits: a
/// sequence may run every node many times, and each cost may be up to 2^64 - 1.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Eval {
    /// The most bytes live at one position.
    pub peak: u64,
    /// The sum of the costs of the nodes in the sequence.
    pub cost: u128,
    /// The sum of every node's cost, once each.
    pub base_cost: u128,
}

impl Eval {
    /// Extra compute as a fraction of one plain step (0.05 = 5%).
    pub fn overhead(&self) -> f64 {
        if self.base_cost == 0 { 0.0 } else { self.cost as f64 / self.base_cost as f64 - 1.0 }
    }
}

/// Why a sequence is not a valid strategy for a problem.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum SequenceError {
    /// The sequence names a node the problem does not have.
    #[error("position {position}: node {node} does not exist (the problem has {nodes} nodes)")]
    NodeOutOfRange { position: usize, node: Node, nodes: usize },
    /// A node never runs.
    #[error("node {0} never runs")]
    NeverRuns(Node),
    /// A node that may not run twice runs twice.
    #[error("position {position}: node {node} runs again but cannot be recomputed")]
    NotRecomputable { position: usize, node: Node },
    /// A node runs before some value it reads was ever written.
    #[error("position {position}: node {node} reads a value of node {writer}, which has not run yet")]
    ReadBeforeWrite { position: usize, node: Node, writer: Node },
    /// More than 2^64 - 1 bytes are live at once (only where the sizes add up to more).
    #[error("its peak, {peak} bytes, is above 2^64 - 1")]
    TooLarge { peak: u128 },
}

/// Applies the evaluation rule (see the module doc) to `sequence`.
pub fn evaluate(problem: &Problem, sequence: &[Node]) -> Result<Eval, SequenceError> {
    let n = problem.nodes.len();
    let mut runs = vec![0u32; n];
    // Every execution's interval: (value, start, last read); values without a writer first.
    let mut intervals: Vec<(usize, usize, usize)> = Vec::new();
    // Each value's current execution (an index into `intervals`).
    let mut open: Vec<Option<usize>> = vec![None; problem.values.len()];
    for (v, value) in problem.values.iter().enumerate() {
        if value.def.is_none() {
            open[v] = Some(intervals.len());
            intervals.push((v, 0, 0));
        }
    }
    let mut written_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut read_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, value) in problem.values.iter().enumerate() {
        if let Some(d) = value.def {
            written_by[d as usize].push(v);
        }
        let mut readers = value.readers.clone();
        readers.sort_unstable();
        readers.dedup();
        for r in readers {
            read_by[r as usize].push(v);
        }
    }
    let shares = problem.shares_by_node();
    // For each position with shares: the execution each value read there binds to.
    let mut bound_reads: Vec<(usize, Vec<(u32, usize)>)> = Vec::new();
    let mut cost: u128 = 0;
    for (position, &node) in sequence.iter().enumerate() {
        let k = node as usize;
        if k >= n {
            return Err(SequenceError::NodeOutOfRange { position, node, nodes: n });
        }
        if runs[k] > 0 && !problem.nodes[k].recomputable {
            return Err(SequenceError::NotRecomputable { position, node });
        }
        let mut bound = Vec::new();
        for &v in &read_by[k] {
            match (problem.values[v].def, open[v]) {
                (_, Some(i)) => {
                    intervals[i].2 = position;
                    bound.push((v as u32, i));
                }
                (Some(writer), None) => return Err(SequenceError::ReadBeforeWrite { position, node, writer }),
                (None, None) => unreachable!("values without a writer are open from the start"),
            }
        }
        if !shares[k].is_empty() {
            bound_reads.push((position, bound));
        }
        for &v in &written_by[k] {
            open[v] = Some(intervals.len());
            intervals.push((v, position, position));
        }
        runs[k] += 1;
        cost += u128::from(problem.nodes[k].cost);
    }
    if let Some(k) = runs.iter().position(|&r| r == 0) {
        return Err(SequenceError::NeverRuns(k as Node));
    }
    let last = sequence.len().saturating_sub(1);
    let mut survives = vec![false; intervals.len()];
    for (v, i) in open.iter().enumerate() {
        if let (Some(i), true) = (*i, problem.values[v].to_end) {
            intervals[i].2 = last;
            survives[i] = true;
        }
    }
    // Bytes live per position: add at the start, remove after the end.
    let mut delta = vec![0i128; sequence.len() + 1];
    if !sequence.is_empty() {
        for &(v, start, end) in &intervals {
            delta[start] += problem.values[v].size as i128;
            delta[end + 1] -= problem.values[v].size as i128;
        }
    }
    for (position, bound) in &bound_reads {
        let dies_here = |input: u32| {
            bound.iter().any(|&(v, i)| v == input && intervals[i].2 == *position && !survives[i])
        };
        let saved = shared_bytes(problem, &shares[sequence[*position] as usize], dies_here);
        delta[*position] -= saved as i128;
        delta[*position + 1] += saved as i128;
    }
    let mut live: i128 = 0;
    let mut peak: i128 = 0;
    for d in &delta[..sequence.len()] {
        live += d;
        peak = peak.max(live);
    }
    let peak = u64::try_from(peak).map_err(|_| SequenceError::TooLarge { peak: peak as u128 })?;
    let base_cost = problem.nodes.iter().map(|node| u128::from(node.cost)).sum();
    Ok(Eval { peak, cost, base_cost })
}

/// How to choose what to recompute.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Strategy {
    /// Recompute nothing: the problem's own order.
    None,
    /// Chen et al.'s sqrt(n): every ⌊√k⌋-th of the k articulation points is a checkpoint.
    ChenSqrt,
    /// Chen et al.'s greedy segment-budget sweep: its cheapest point that fits.
    ChenGreedy,
    /// The greedy on bytes over budget per unit of compute, then a ruin-and-recreate search.
    NearOptimal,
    /// The cheapest of the strategies above that fits.
    Auto,
}

impl Strategy {
    pub const ALL: [Strategy; 5] = [Strategy::None, Strategy::ChenSqrt, Strategy::ChenGreedy, Strategy::NearOptimal, Strategy::Auto];

    /// The command line's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::ChenSqrt => "chen-sqrt",
            Strategy::ChenGreedy => "chen-greedy",
            Strategy::NearOptimal => "near-optimal",
            Strategy::Auto => "auto",
        }
    }

    /// The strategy spelled `name` on the command line.
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// A strategy's sequence and what it costs.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Recomputation {
    pub sequence: Vec<Node>,
    pub eval: Eval,
    /// The strategy that found it (for `auto`, the one that won).
    pub strategy: Strategy,
    /// What no plan can beat at this budget ([`bound::bound_until`]; `cut` if its share of
    /// the time limit ran out first).
    pub bound: bound::Bound,
}

/// Why no sequence fits a budget.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum RematError {
    /// No strategy found a sequence that fits the budget; `smallest` is the smallest peak
    /// found (the smallest budget that works); `timed_out`: the search stopped at its time
    /// limit (a longer one may find more).
    #[error("no schedule fits {budget} bytes; the smallest peak found is {smallest} bytes")]
    Infeasible { budget: u64, smallest: u64, timed_out: bool },
    /// The problem's own order peaks above 2^64 - 1 bytes: no peak memplan could report
    /// fits in 64 bits.
    #[error("too large: the peak of its own order is {peak} bytes, above 2^64 - 1")]
    TooLarge { peak: u128 },
    /// The chosen strategy does not fit the budget, though another does: `reached` is the
    /// strategy's lowest peak, `smallest` the smallest peak found by any.
    #[error("{} reaches at best {reached} bytes, over the budget of {budget}; near-optimal fits it (its smallest peak is {smallest} bytes)", strategy.name())]
    StrategyCannot { strategy: Strategy, budget: u64, reached: u64, smallest: u64 },
    /// A strategy's sequence is over budget by the evaluation rule although the simulator
    /// said it fits: always a memplan bug.
    #[error("internal error: {}'s sequence peaks at {peak} bytes, over the budget of {budget} (a memplan bug)", strategy.name())]
    OverBudget { strategy: Strategy, peak: u64, budget: u64 },
    /// The problem itself is malformed (its own order is not a valid sequence): always a
    /// bug in whoever built it.
    #[error("the problem's own order is invalid: {0}")]
    BadProblem(SequenceError),
    /// The values' sizes add up to more than 2^64 - 1 bytes (though the own order's peak
    /// fits): peaks of other orders would not fit the `u64`s the strategies compare, so
    /// none is tried.
    #[error("the values' sizes add up to more than 2^64 - 1 bytes: too large")]
    SizesTooLarge,
}

/// The time limit of [`solve`].
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(1);

/// Finds a sequence whose peak is at most `budget`, at the least cost the strategy can,
/// within [`DEFAULT_TIME_LIMIT`].
pub fn solve(problem: &Problem, budget: u64, strategy: Strategy) -> Result<Recomputation, RematError> {
    solve_with(problem, budget, strategy, DEFAULT_TIME_LIMIT)
}

/// [`solve`] with a time limit: the whole call returns within it (give or take one step
/// of the search: a simulation of one plan), with the best plan found so far. Without a
/// cut by the clock the result does not depend on the limit (the searches stop after a
/// fixed amount of work).
///
/// The time goes to, in order: checking the problem (one evaluation of its own order,
/// which also measures what an evaluation costs); the lower bound (at most a tenth of the
/// limit; the search stops early on a plan that meets it); the strategy, until the limit
/// less twice that evaluation's time, kept for evaluating the plan chosen.
pub fn solve_with(problem: &Problem, budget: u64, strategy: Strategy, time_limit: Duration) -> Result<Recomputation, RematError> {
    let started = Instant::now();
    let far = |from: Instant, after: Duration| from.checked_add(after).unwrap_or(from + Duration::from_secs(365 * 24 * 3600));
    let plain: Vec<Node> = (0..problem.nodes.len() as Node).collect();
    evaluate(problem, &plain).map_err(|e| match e {
        SequenceError::TooLarge { peak } => RematError::TooLarge { peak },
        e => RematError::BadProblem(e),
    })?;
    if problem.values.iter().try_fold(0u64, |sum, v| sum.checked_add(v.size)).is_none() {
        return Err(RematError::SizesTooLarge);
    }
    let deadline = far(started, time_limit.saturating_sub(started.elapsed() * 2));
    let bound = bound::bound_until(problem, budget, Some(far(Instant::now(), time_limit / 10).min(deadline)));
    let mut sim = Sim::new(problem);
    // Chen's plans: the strategies of their own, and the search's seeds.
    let chen_plans = |sim: &Sim, sqrt: bool| {
        let mut kept = Candidates::new(problem, budget);
        if sqrt {
            kept.offer(chen::sqrt_plan(sim), Strategy::ChenSqrt);
        }
        chen::greedy_plans(sim, deadline, |plan| kept.offer(plan, Strategy::ChenGreedy));
        kept
    };
    let timed_out = || Instant::now() >= deadline;
    let scored = |sim: &mut Sim, plan: StagePlan, strategy| {
        let score = sim.score(&plan, budget);
        (plan, strategy, score)
    };
    // The strategy's plans, and the lowest peak of any it made (those that do not fit are
    // dropped as they are made).
    let (own, lowest): (Vec<Candidate>, u64) = match strategy {
        Strategy::None => (vec![scored(&mut sim, StagePlan::empty(problem.nodes.len()), strategy)], u64::MAX),
        Strategy::ChenSqrt => {
            let plan = chen::sqrt_plan(&sim);
            (vec![scored(&mut sim, plan, strategy)], u64::MAX)
        }
        Strategy::ChenGreedy => chen_plans(&sim, false).into_plans(),
        Strategy::NearOptimal | Strategy::Auto => {
            let (chen, lowest) = chen_plans(&sim, true).into_plans();
            let seeds: Vec<(&StagePlan, Score)> = chen.iter().map(|(plan, _, score)| (plan, *score)).collect();
            match search::near_optimal(problem, budget, &seeds, bound.extra.unwrap_or(0), deadline) {
                Ok(plan) => {
                    let found = scored(&mut sim, plan, Strategy::NearOptimal);
                    let mut all = vec![found];
                    if strategy == Strategy::Auto {
                        all.extend(chen);
                    }
                    (all, lowest)
                }
                Err(smallest) => {
                    return Err(RematError::Infeasible { budget, smallest: smallest.min(lowest), timed_out: timed_out() });
                }
            }
        }
    };
    // The cheapest that fits (then the lowest peak; earlier plans win ties).
    let mut best: Option<((u64, u64), usize)> = None;
    let mut reached = lowest;
    for (i, (_, _, score)) in own.iter().enumerate() {
        reached = reached.min(score.peak);
        let key = (score.extra, score.peak);
        if score.peak <= budget && best.is_none_or(|(k, _)| key < k) {
            best = Some((key, i));
        }
    }
    let Some((_, i)) = best else {
        let (chen, lowest) = chen_plans(&sim, true).into_plans();
        let seeds: Vec<(&StagePlan, Score)> = chen.iter().map(|(plan, _, score)| (plan, *score)).collect();
        return Err(match search::near_optimal(problem, budget, &seeds, bound.extra.unwrap_or(0), deadline) {
            Ok(plan) => {
                let fits = sim.score(&plan, budget).peak;
                let smallest = search::smallest_peak(problem, deadline).min(lowest).min(fits);
                RematError::StrategyCannot { strategy, budget, reached, smallest }
            }
            Err(smallest) => RematError::Infeasible { budget, smallest: smallest.min(lowest), timed_out: timed_out() },
        });
    };
    let (plan, found_by, _) = &own[i];
    let sequence = plan.sequence();
    let eval = evaluate(problem, &sequence).map_err(RematError::BadProblem)?;
    if eval.peak > budget {
        return Err(RematError::OverBudget { strategy: *found_by, peak: eval.peak, budget });
    }
    Ok(Recomputation { sequence, eval, strategy: *found_by, bound })
}

/// A plan, the strategy that made it and its score at the budget.
type Candidate = (StagePlan, Strategy, Score);

/// Chen's plans as the later steps use them, each scored once as it is made and kept only
/// if it may be chosen: the [`search::SEEDS`] cheapest that fit (by extra cost, then peak,
/// then the order made, which holds the cheapest of all and every seed the search would
/// start from), and the lowest peak of all (what error messages report when nothing fits).
/// Keeping every plan of the sweep (hundreds, each a list per node) and scoring each twice
/// took a tenth of a second past the time limit on 10,000-node graphs.
struct Candidates<'p> {
    sim: Sim<'p>,
    budget: u64,
    made: usize,
    /// By (extra, peak, order made).
    fitting: Vec<((u64, u64, usize), Candidate)>,
    lowest: u64,
}

impl<'p> Candidates<'p> {
    fn new(problem: &'p Problem, budget: u64) -> Candidates<'p> {
        Candidates { sim: Sim::new(problem), budget, made: 0, fitting: Vec::new(), lowest: u64::MAX }
    }

    fn offer(&mut self, plan: StagePlan, strategy: Strategy) {
        let score = self.sim.score(&plan, self.budget);
        let key = (score.extra, score.peak, self.made);
        self.made += 1;
        self.lowest = self.lowest.min(score.peak);
        if score.peak > self.budget {
            return;
        }
        self.fitting.push((key, (plan, strategy, score)));
        if self.fitting.len() > search::SEEDS {
            let worst = (0..self.fitting.len()).max_by_key(|&i| self.fitting[i].0).expect("not empty");
            self.fitting.swap_remove(worst);
        }
    }

    /// The plans kept, in the order made, and the lowest peak of all.
    fn into_plans(mut self) -> (Vec<Candidate>, u64) {
        self.fitting.sort_by_key(|(key, _)| key.2);
        (self.fitting.into_iter().map(|(_, candidate)| candidate).collect(), self.lowest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// a → b → c, and a → c: a chain with a skip.
    fn chain() -> Problem {
        let node = |cost| NodeInfo { cost, recomputable: true, forward: true };
        let value = |size, def, readers: &[Node]| DagValue { size, def: Some(def), readers: readers.to_vec(), to_end: false };
        Problem { nodes: vec![node(1), node(2), node(3)], values: vec![value(10, 0, &[1, 2]), value(5, 1, &[2]), value(1, 2, &[])], shares: Vec::new() }
    }

    #[test]
    fn the_rule_on_a_small_chain() {
        let p = chain();
        // 0: a=10; 1: a+b=15; 2: a+b+c=16.
        assert_eq!(evaluate(&p, &[0, 1, 2]), Ok(Eval { peak: 16, cost: 6, base_cost: 6 }));
    }

    #[test]
    fn a_recompute_splits_a_lifetime() {
        let mut p = chain();
        p.values[0].size = 100;
        p.values[1].readers.push(2);
        // Without recomputing, a lives 0..=2: 100+5+1 at position 2.
        assert_eq!(evaluate(&p, &[0, 1, 2]).unwrap().peak, 106);
        // a, b, a again, c: the first a dies at b (position 1), the second lives 2..=3.
        let e = evaluate(&p, &[0, 1, 0, 2]).unwrap();
        assert_eq!((e.peak, e.cost), (106, 7));
        assert!((e.overhead() - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn a_share_counts_its_two_values_once_where_the_input_dies() {
        // a (10 B) is read by b and c; b (10 B, read by nobody) may be written over a.
        let mut p = chain();
        p.values[0].size = 10;
        p.values[1] = DagValue { size: 10, def: Some(1), readers: Vec::new(), to_end: false };
        p.shares = vec![Share { input: 0, output: 1 }];
        // a is still read by c: no sharing at b, a + b = 20 there.
        assert_eq!(evaluate(&p, &[0, 1, 2]).unwrap().peak, 20);
        // Recomputing a for c lets the first a die at b, which takes its bytes: 10 at b,
        // then the new a and c: 11.
        assert_eq!(evaluate(&p, &[0, 1, 0, 2]).unwrap().peak, 11);
        // A value that must survive never dies, so it is never shared.
        p.values[0].readers = vec![1];
        assert_eq!(evaluate(&p, &[0, 1, 2]).unwrap().peak, 10);
        p.values[0].to_end = true;
        assert_eq!(evaluate(&p, &[0, 1, 2]).unwrap().peak, 20);
        // Only the first of two shares of the same input is taken.
        p.values[0].to_end = false;
        p.values.push(DagValue { size: 7, def: Some(1), readers: Vec::new(), to_end: false });
        p.shares.push(Share { input: 0, output: 3 });
        assert_eq!(evaluate(&p, &[0, 1, 2]).unwrap().peak, 17);
        p.shares.reverse();
        assert_eq!(evaluate(&p, &[0, 1, 2]).unwrap().peak, 20);
    }

    /// Sizes adding up past 2^64 - 1 are refused, not saturated (the strategies compared
    /// saturated peaks); costs add up in 128 bits, so a sequence's cost is exact.
    #[test]
    fn totals_past_64_bits() {
        let mut p = chain();
        p.nodes[1].cost = u64::MAX;
        let e = evaluate(&p, &[0, 1, 0, 1, 2]).unwrap();
        assert_eq!((e.cost, e.base_cost), (2 * u128::from(u64::MAX) + 5, u128::from(u64::MAX) + 4));
        p.values[0].size = 1 << 63;
        p.values[1].size = 1 << 63;
        // All three live at position 2: 2^63 + 2^63 + 1.
        assert_eq!(solve(&p, 100, Strategy::Auto), Err(RematError::TooLarge { peak: (1 << 64) + 1 }));
        assert_eq!(evaluate(&p, &[0, 1, 2]), Err(SequenceError::TooLarge { peak: (1 << 64) + 1 }));
        // Two values never live together: the own order peaks at 2^63, but the sizes add up
        // past 2^64 - 1, so no strategy is tried.
        let node = NodeInfo { cost: 1, recomputable: true, forward: true };
        let value = |def| DagValue { size: 1 << 63, def: Some(def), readers: Vec::new(), to_end: false };
        let apart = Problem { nodes: vec![node.clone(), node], values: vec![value(0), value(1)], shares: Vec::new() };
        assert_eq!(evaluate(&apart, &[0, 1]).unwrap().peak, 1 << 63);
        assert_eq!(solve(&apart, 100, Strategy::Auto), Err(RematError::SizesTooLarge));
    }

    #[test]
    fn invalid_sequences_are_named() {
        let mut p = chain();
        assert_eq!(evaluate(&p, &[0, 2, 1]), Err(SequenceError::ReadBeforeWrite { position: 1, node: 2, writer: 1 }));
        assert_eq!(evaluate(&p, &[0, 1]), Err(SequenceError::NeverRuns(2)));
        assert_eq!(evaluate(&p, &[0, 3]), Err(SequenceError::NodeOutOfRange { position: 1, node: 3, nodes: 3 }));
        p.nodes[0].recomputable = false;
        assert_eq!(evaluate(&p, &[0, 1, 0, 2]), Err(SequenceError::NotRecomputable { position: 2, node: 0 }));
    }

    #[test]
    fn strategies_have_their_command_line_names() {
        let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["none", "chen-sqrt", "chen-greedy", "near-optimal", "auto"]);
        for s in Strategy::ALL {
            assert_eq!(Strategy::from_name(s.name()), Some(s));
        }
        assert_eq!(Strategy::from_name("chen"), None);
    }

    #[test]
    fn survivors_and_values_from_before() {
        let mut p = chain();
        p.values.push(DagValue { size: 7, def: None, readers: vec![1], to_end: false });
        p.values[2].to_end = true;
        // 0: 10+7; 1: 10+5+7; 2: 10+5+1.
        assert_eq!(evaluate(&p, &[0, 1, 2]).unwrap().peak, 22);
    }
}
