//! The remat pass: recompute forward values so that a step fits a memory budget.
//!
//! Runs after the schedule and in-place passes, on the scheduled step:
//! 1. [`problem::step_problem`] turns the step and its schedule into a [`Problem`] of the
//!    IR-free solver (`crate::solve::remat`): node `i` is the op at schedule position `i`,
//!    values are the buffers the buffer pass would make (views share their root's bytes,
//!    an update's new value its target's), params, inputs and state exist before the first
//!    node, updated params and returned values survive;
//! 2. a strategy (`crate::solve::remat::solve`) picks a sequence of nodes, repeats being
//!    recomputes, whose peak under the core's evaluation rule fits a problem budget;
//! 3. [`apply::apply`] rewrites the step to run that sequence: each repeat becomes a
//!    *clone* (a new op, same kind and attributes, fresh values `%h.remat1`), every later
//!    reader reads the latest run, and the new program order is the sequence;
//! 4. in-place reuse, buffers and offsets are redone on the rewritten step by the caller's
//!    `measure` (the pipeline's, see `passes/mod.rs`), which gives the ARENA the step would
//!    get.
//!
//! **The budget is for the arena**, which can differ from the problem's peak: the problem
//! models in-place reuse (its shares, when the plan uses the in-place pass), so its peak
//! predicts the rewritten step's lower bound, but offsets may leave gaps above it. So the pass
//! iterates. The first problem budget is the byte budget plus the gap between the
//! problem's peak and the arena of the step without recomputation (the gap the same step
//! has when nothing is recomputed); after each round whose arena exceeds the budget, the
//! problem budget is lowered by the excess. A strategy that finds nothing under the problem
//! budget reports the smallest peak it can reach; that sequence is applied and measured too
//! (its arena may still fit), and the search ends there. After [`ROUNDS`] rounds, or then,
//! the pass fails with [`PlanError::BudgetUnmet`] naming the smallest arena reached, a
//! budget that is known to work, and, for a budget below the step's [`Floor`] (params,
//! optimizer state and the largest gradient an update reads), what that floor is made of. A budget at or above the arena without recomputation
//! changes nothing.
//!
//! A clone of an op that reads an updated param can land after the update wrote the new
//! value in the param's bytes ([`apply::ApplyError::ReadsUpdated`]): such nodes are marked
//! not recomputable and the strategy is asked again.
//!
//! # Why a recompute is sound
//!
//! A clone computes the same bits as its original:
//! - it is the same op (the same kind, hence the same kernel) with the same attributes,
//!   and every kernel is a deterministic function of its inputs' bits and its attributes
//!   (no op has effects besides writing its outputs; optimizer updates and backward ops are
//!   never recomputed);
//! - each input is bound to a value holding the same bits as the original's input: the
//!   same value, or a clone's output, which by induction over the schedule holds the same
//!   bits as its own original's; views are re-created on the same base (views are layouts,
//!   not copies);
//! - those inputs are intact when the clone runs: the rewritten step is planned from
//!   scratch (lifetimes, in-place pairs, buffers, offsets), so every value read by a clone
//!   is live until that read like any other, and the update rule (no read of a param after
//!   its new value is written) is enforced as for any op.
//!
//! The checker verifies it without trusting the planner: the plan lists each clone with
//! its original; the checker compares kinds and attributes, and maps every value to its
//! *origin* (a clone's output `j` to its original's output `j`) and requires each input of
//! a clone to have the same origin as the original's input; its generic checks then prove
//! every input intact when read. The CPU executor's planned run of the rewritten step is
//! bit-identical to the unplanned run of the original (tests/remat.rs).

pub mod apply;
pub mod budget;
pub mod problem;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::index::OpId;
use crate::ir::graph::Graph;
use crate::passes::PlanError;
use crate::plan::RematRecord;
use crate::solve::Node;
use crate::solve::remat::{Problem, Recomputation, RematError, SequenceError, Strategy, evaluate};
pub use apply::{ApplyError, Rewritten};
pub use budget::{Budget, BudgetError, Floor};
pub use problem::{StepProblem, step_problem};

/// A strategy with the time limit bound: the pass's own calls.
type Solver<'a> = dyn Fn(&Problem, u64) -> Result<Recomputation, RematError> + 'a;

/// How many times the pass lowers the problem budget before it gives up.
pub const ROUNDS: usize = 8;

/// A strategy: a sequence whose peak fits the budget, or the smallest peak it can reach,
/// within the time limit given (what is left of the pass's).
pub type StrategyFn<'a> = dyn Fn(&Problem, u64, Duration) -> Result<Recomputation, RematError> + 'a;

/// The arena a step gets in an order (in-place reuse, buffers, offsets).
pub type Measure<'a> = dyn Fn(&Graph, &[OpId]) -> Result<u64, PlanError> + 'a;

/// A `--checkpoint` strategy as a [`StrategyFn`].
pub fn strategy_fn(strategy: Strategy) -> impl Fn(&Problem, u64, Duration) -> Result<Recomputation, RematError> {
    move |problem, budget, time_limit| crate::solve::remat::solve_with(problem, budget, strategy, time_limit)
}

/// Where the pass gets its sequence.
#[derive(Clone, Copy)]
pub enum Sequence<'a> {
    /// From a strategy (named `name` in the plan and errors), under a budget; with
    /// `cheap_only`, only [`cheap`] ops may be recomputed.
    Solve { name: &'a str, strategy: &'a StrategyFn<'a>, budget: Budget, cheap_only: bool },
    /// Given by the caller.
    Given(&'a [Node]),
}

/// What the pass did: the plan's record, and the rewritten step when it recomputes.
pub struct Done {
    pub record: RematRecord,
    pub rewritten: Option<Rewritten>,
}

/// The pass: fits `graph`, run in `schedule`, into the budget by recomputing (or runs the
/// given sequence); `measure` gives the arena of a step in an order. `inplace`: whether the
/// plan reuses bytes in place (the problem then models it). The strategy's searches stop
/// at `deadline` (all rounds together; see [`fit_budget`]).
pub fn pass(
    graph: &Graph,
    schedule: &[OpId],
    (alignment, inplace): (u64, bool),
    sequence: Sequence<'_>,
    measure: &Measure<'_>,
    deadline: Instant,
) -> Result<Done, PlanError> {
    let (rewritten, budget, arena_without, name) = match sequence {
        Sequence::Given(seq) => {
            let rewritten = apply_sequence(graph, schedule, alignment, seq)?;
            (Some(rewritten), None, measure(graph, schedule)?, "given")
        }
        Sequence::Solve { name, strategy, budget, cheap_only } => {
            let outcome = fit_budget(graph, schedule, budget, (alignment, inplace, cheap_only), name, strategy, measure, deadline)?;
            (outcome.rewritten, Some(outcome.budget), outcome.arena_without, name)
        }
    };
    let g = rewritten.as_ref().map_or(graph, |r| &r.graph);
    let recomputes = rewritten.as_ref().map_or(Vec::new(), |r| r.recomputes.clone());
    let clones: HashSet<OpId> = recomputes.iter().map(|r| r.clone).collect();
    let flops = |op: OpId| g.op_flops(op);
    // Saturating: u64::MAX stands for "2^64 - 1 or more", too large to count (as the op
    // table's own counts saturate; `RematRecord::extra_flops` says so, never a number).
    let record = RematRecord {
        budget,
        strategy: name.to_string(),
        arena_without,
        base_flops: g.ops.indices().filter(|op| !clones.contains(op)).map(flops).fold(0, u64::saturating_add),
        flops: g.ops.indices().map(flops).fold(0, u64::saturating_add),
        recomputes,
    };
    Ok(Done { record, rewritten })
}

/// What the pass decided.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The rewritten step; `None` when the step meets the budget as it is.
    pub rewritten: Option<Rewritten>,
    /// The budget in bytes.
    pub budget: u64,
    /// The arena without recomputation.
    pub arena_without: u64,
}

/// Fits `graph`, run in `schedule`, into `budget` (see the module docs), for a plan with
/// `alignment` that reuses bytes in place if `inplace`, recomputing only [`cheap`] ops if
/// `cheap_only`. `name` names the strategy in errors. Each call of the strategy gets what is left until `deadline`, and no round
/// starts after it: the pass ends with the best arena reached by then.
#[allow(clippy::too_many_arguments)]
pub fn fit_budget(
    graph: &Graph,
    schedule: &[OpId],
    budget: Budget,
    (alignment, inplace, cheap_only): (u64, bool, bool),
    name: &str,
    strategy: &StrategyFn<'_>,
    measure: &Measure<'_>,
    deadline: Instant,
) -> Result<Outcome, PlanError> {
    let arena_without = measure(graph, schedule)?;
    let budget = budget.bytes(arena_without).map_err(PlanError::BadBudget)?;
    if arena_without <= budget {
        return Ok(Outcome { rewritten: None, budget, arena_without });
    }
    let mut step = step_problem(graph, schedule, alignment, inplace).ok_or(PlanError::ArenaOverflow)?;
    if cheap_only {
        for (node, &op) in step.problem.nodes.iter_mut().zip(&step.ops) {
            node.recomputable &= cheap(graph, op);
        }
    }
    let identity: Vec<Node> = (0..step.ops.len() as Node).collect();
    let peak = match evaluate(&step.problem, &identity) {
        Ok(eval) => eval.peak,
        Err(SequenceError::TooLarge { .. }) => return Err(PlanError::ArenaOverflow),
        Err(e) => return Err(bug(format!("the step's own order: {e}"))),
    };
    let strategy = |problem: &Problem, target: u64| strategy(problem, target, deadline.saturating_duration_since(Instant::now()));
    let gap = i128::from(peak) - i128::from(arena_without);
    let clamp = |x: i128| x.clamp(0, i128::from(u64::MAX)) as u64;
    let mut target = clamp(i128::from(budget) + gap);
    let mut smallest = arena_without;
    for round in 0..ROUNDS {
        if round > 0 && Instant::now() >= deadline {
            break;
        }
        let (rewritten, last) = match solve(graph, &mut step, target, &strategy)? {
            Ok(rewritten) => (rewritten, false),
            Err(least) => match least_sequence(graph, &mut step, least, &strategy)? {
                Some(rewritten) => (rewritten, true),
                None => break,
            },
        };
        let arena = measure(&rewritten.graph, &rewritten.schedule)?;
        if arena <= budget {
            return Ok(Outcome { rewritten: Some(rewritten), budget, arena_without });
        }
        smallest = smallest.min(arena);
        if last || target == 0 {
            break;
        }
        target = target.saturating_sub(arena - budget);
    }
    Err(unmet(graph, alignment, budget, smallest, name, Instant::now() >= deadline))
}

/// How many FLOPs per byte moved an op may do and still count as cheap to recompute: the
/// ops bound by memory bandwidth (casts, activations, masks, elementwise arithmetic,
/// normalisations: well under one FLOP per byte), not matrix products, convolutions or
/// attention (hundreds per byte at training sizes).
pub const CHEAP_FLOPS_PER_BYTE: u64 = 4;

/// Whether recomputing `op` is cheap: its FLOPs at most [`CHEAP_FLOPS_PER_BYTE`] times the
/// bytes it reads and writes. Its cost is then the bytes it moves.
pub fn cheap(graph: &Graph, op: OpId) -> bool {
    let moved = bytes_moved(graph, op);
    graph.op_flops(op) <= moved.saturating_mul(CHEAP_FLOPS_PER_BYTE)
}

/// The bytes `op` reads and writes: its inputs' and outputs' sizes (saturating).
pub fn bytes_moved(graph: &Graph, op: OpId) -> u64 {
    let op = &graph.ops[op];
    op.inputs.iter().chain(&op.outputs).map(|&v| graph.values[v].ty.bytes().unwrap_or(u64::MAX)).fold(0, u64::saturating_add)
}

/// The error of a budget no plan met: the smallest arena reached works; below the step's
/// [`Floor`], say what the floor is made of (no strategy can go lower), else that another
/// strategy may.
fn unmet(graph: &Graph, alignment: u64, budget: u64, smallest: u64, strategy: &str, timed_out: bool) -> PlanError {
    let works = format!("a budget of at least {smallest} bytes works (`--budget {smallest}`)");
    let advice = match Floor::of(graph, alignment).filter(|floor| budget < floor.bytes()) {
        Some(floor) => format!("{works}; no plan fits in less than {} bytes: {}", floor.bytes(), floor.describe()),
        None if graph.ops.is_empty() => format!("{works}; the step has no ops, so there is nothing to recompute"),
        None if timed_out => format!("{works}; the search stopped at the time limit: a longer --time-limit may go lower"),
        None => format!("{works}; another --checkpoint strategy may go lower"),
    };
    PlanError::BudgetUnmet { budget, smallest, strategy: strategy.to_string(), advice }
}

/// Rewrites `graph` to run a sequence the caller chose (no budget; sequences do not depend
/// on shares).
pub fn apply_sequence(graph: &Graph, schedule: &[OpId], alignment: u64, sequence: &[Node]) -> Result<Rewritten, PlanError> {
    let step = step_problem(graph, schedule, alignment, false).ok_or(PlanError::ArenaOverflow)?;
    apply::apply(graph, &step, sequence).map_err(PlanError::BadSequence)
}

/// The sequence at the smallest peak the strategy reaches, `least` or above (forbidding a
/// recompute can raise it); `None` if the strategy cannot even meet its own smallest.
fn least_sequence(graph: &Graph, step: &mut StepProblem, mut least: u64, strategy: &Solver<'_>) -> Result<Option<Rewritten>, PlanError> {
    loop {
        match solve(graph, step, least, strategy)? {
            Ok(rewritten) => return Ok(Some(rewritten)),
            Err(higher) if higher > least => least = higher,
            Err(_) => return Ok(None),
        }
    }
}

/// Solves and applies; `Ok(Err(smallest))` when no sequence fits `target`. Nodes whose
/// clones would read an updated param after its update are made not recomputable and the
/// solver is asked again.
fn solve(graph: &Graph, step: &mut StepProblem, target: u64, strategy: &Solver<'_>) -> Result<Result<Rewritten, u64>, PlanError> {
    loop {
        let solution = match strategy(&step.problem, target) {
            Ok(solution) => solution,
            Err(RematError::Infeasible { smallest, .. }) => return Ok(Err(smallest)),
            // The strategy asked for cannot go lower than `reached` (another might): the
            // smallest budget that works with it.
            Err(RematError::StrategyCannot { reached, .. }) => return Ok(Err(reached)),
            Err(RematError::TooLarge { .. }) => return Err(PlanError::ArenaOverflow),
            Err(RematError::SizesTooLarge) => return Err(PlanError::RematTooLarge),
            Err(e @ (RematError::BadProblem(_) | RematError::OverBudget { .. })) => return Err(bug(e.to_string())),
        };
        match apply::apply(graph, step, &solution.sequence) {
            Ok(rewritten) => return Ok(Ok(rewritten)),
            Err(ApplyError::ReadsUpdated(nodes)) => {
                let mut changed = false;
                for node in nodes {
                    let info = &mut step.problem.nodes[node as usize];
                    changed |= info.recomputable;
                    info.recomputable = false;
                }
                if !changed {
                    return Err(bug("a strategy recomputed an op marked not recomputable".into()));
                }
            }
            Err(e) => return Err(bug(e.to_string())),
        }
    }
}

fn bug(reason: String) -> PlanError {
    PlanError::RematBug(reason)
}
