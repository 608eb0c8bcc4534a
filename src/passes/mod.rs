//! The pipeline: runs the passes in order and verifies after each one.
//!
//! ```text
//! schedule ─▶ inplace ─▶ remat (with a budget) ─▶ buffers ─▶ offsets
//! ```
//! Each pass is a free function in its own file. After every pass the pipeline re-runs the
//! verifier on the graph and checks the schedule is a topological order of every op, and
//! labels a failure with the pass that caused it ("after pass schedule"): such a failure is
//! always a planner bug. `PlanOptions::stop_after` ends the pipeline early, for inspecting
//! what a pass produced.
//!
//! The passes take expanded steps: the full flow is parse → verify → `autodiff::expand` →
//! verify → passes, and `run`/`plan` refuse a graph whose `backward` is still present.
//!
//! Rematerialisation (`remat/`) runs only under a budget ([`PlanOptions::budget`]): it may
//! rewrite the step, adding *clones* of forward ops that recompute values instead of keeping
//! them, and then in-place reuse is redone on the rewritten step. The plan then refers to
//! the rewritten graph, so [`plan_step`] returns both; [`plan`] refuses to return a plan
//! without its graph. [`plan_with_solver`] and [`plan_sequence`] let a caller supply the
//! strategy or the sequence itself.
//!
//! The plan records what each pass saved ([`Savings`]): the lower bound (most bytes live at
//! once) with the ops in program order, after the schedule, after in-place reuse, and the
//! arena after offsets.

pub mod buffers;
pub mod dump;
pub mod inplace;
pub mod offsets;
pub mod remat;
pub mod schedule;

use std::fmt;
use std::time::Duration;

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::analysis::liveness::Live;
use crate::index::OpId;
use crate::ir::graph::Graph;
use crate::ir::verify::{VerifyErrors, verify, verify_schedule};
use crate::plan::{Buffer, DEFAULT_ALIGNMENT, Plan, SCHEMA_VERSION, Savings, align_up};
use crate::remat::{Node, Strategy};
use buffers::Buffers;
use inplace::Reuse;
use offsets::Solver;
use remat::Sequence;
pub use remat::{ApplyError, Budget, BudgetError};
pub use schedule::ScheduleKind;

/// The passes, in pipeline order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Pass {
    Schedule,
    Inplace,
    Remat,
    Buffers,
    Offsets,
}

impl Pass {
    pub const ALL: [Pass; 5] = [Pass::Schedule, Pass::Inplace, Pass::Remat, Pass::Buffers, Pass::Offsets];

    pub fn name(self) -> &'static str {
        match self {
            Pass::Schedule => "schedule",
            Pass::Inplace => "inplace",
            Pass::Remat => "remat",
            Pass::Buffers => "buffers",
            Pass::Offsets => "offsets",
        }
    }
}

impl fmt::Display for Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Pass {
    type Err = String;

    /// A pass by its name (`Pass::ALL`), e.g. for `--print-ir-after=inplace`.
    fn from_str(s: &str) -> Result<Pass, String> {
        Pass::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Pass::ALL.iter().map(|p| p.name()).collect();
            format!("unknown pass `{s}`; the passes are {}", names.join(", "))
        })
    }
}

/// The exact offset search's default node budget in `plan`: at most a few tenths of a second on
/// one core of a 2-core machine (release build), and the same plan on every machine.
pub const DEFAULT_SEARCH_NODES: u64 = 20_000;

#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// Offset alignment in bytes (a power of two).
    pub alignment: u64,
    /// Program order or a memory-aware order (the default).
    pub schedule: ScheduleKind,
    pub solver: Solver,
    /// Whether ops may write outputs over inputs that die there (the in-place pass).
    pub inplace: bool,
    /// How long the offset solver may search (`Solver::Auto` gives what the heuristics
    /// leave to the exact solver).
    pub time_limit: Duration,
    /// How many nodes the exact offset search may visit: within it the plan does not
    /// depend on the machine's speed (the time limit is a safety net for huge steps).
    pub search_nodes: u64,
    /// Stop after this pass (`run` only; `plan` always runs every pass).
    pub stop_after: Option<Pass>,
    /// The most bytes the arena may have; `None`: no recomputation.
    pub budget: Option<Budget>,
    /// How to choose what to recompute under a budget.
    pub checkpoint: Strategy,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            alignment: DEFAULT_ALIGNMENT,
            schedule: ScheduleKind::default(),
            inplace: true,
            solver: Solver::default(),
            time_limit: Duration::from_secs(2),
            search_nodes: DEFAULT_SEARCH_NODES,
            stop_after: None,
            budget: None,
            checkpoint: Strategy::Auto,
        }
    }
}

#[derive(Debug, Error, Diagnostic)]
pub enum PlanError {
    /// The old value of an updated param or state is still needed after its new value is
    /// written (a later op reads it, or it is returned), so the new value cannot be written
    /// into the param's memory in this order.
    #[error("update {target_name} <- {value_name} cannot land in place: {reason}")]
    #[diagnostic(help(
        "the old value of {target_name} must be dead once {value_name} is written: read it earlier, or return a copy (`contiguous({target_name})`)"
    ))]
    UpdateNotInPlace {
        target_name: String,
        value_name: String,
        /// What still needs the old value.
        reason: String,
        #[label("the update")]
        span: Option<SourceSpan>,
        #[label("needs the old value")]
        reason_span: Option<SourceSpan>,
    },

    /// The arena would need more than 2^64 - 1 bytes.
    #[error("the step needs more than 2^64 - 1 bytes of memory")]
    #[diagnostic(help("check the tensor shapes"))]
    ArenaOverflow,

    /// The alignment is not a power of two.
    #[error("alignment {0} is not a power of two")]
    #[diagnostic(help("use 1, 2, 4, ... 256 (the default, cudaMalloc's alignment), 512, ..."))]
    BadAlignment(u64),

    /// The step still has its `backward` statement: the caller must run
    /// [`autodiff::expand`](crate::autodiff::expand) before planning (always a caller bug).
    #[error("the step @{step} is forward-only (it has a `backward` statement): expand the step first")]
    #[diagnostic(help("call memplan::expand on the graph (and verify the result) before planning it"))]
    NotExpanded {
        step: String,
        #[label("not expanded")]
        span: Option<SourceSpan>,
    },

    /// The input graph does not verify.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Invalid(VerifyErrors),

    /// No plan memplan found fits the budget, even recomputing what the strategy would:
    /// `smallest` is the smallest arena it reached (without recomputation, if nothing
    /// helped), so a budget of `smallest` bytes is known to work.
    #[error("the step does not fit in {budget} bytes: the smallest arena memplan reached is {smallest} bytes (strategy {strategy})")]
    #[diagnostic(help("a budget of at least {smallest} bytes works (`--budget {smallest}`); another --checkpoint strategy may go lower"))]
    BudgetUnmet { budget: u64, smallest: u64, strategy: String },

    /// A budget given as a fraction of the arena is not a positive finite number.
    #[error("bad budget: {0}")]
    #[diagnostic(help("a fraction of the arena without recomputation, like 0.8x"))]
    BadBudget(BudgetError),

    /// A recomputation sequence given by the caller ([`plan_sequence`]) is not valid for
    /// the step's problem.
    #[error("the recomputation sequence cannot be applied: {0}")]
    BadSequence(ApplyError),

    /// The remat pass got a result it cannot use from the core (an invalid sequence from a
    /// strategy, a malformed problem): always a planner bug.
    #[error("rematerialisation failed (a memplan bug): {0}")]
    RematBug(String),

    /// [`plan`] was asked for a plan that recomputes ops: the plan refers to a rewritten
    /// graph that `plan` cannot return (a caller bug: use [`plan_step`]).
    #[error("the plan recomputes ops, so it refers to a rewritten step: use plan_step to get both")]
    Rewritten,

    /// A pass broke an invariant of the graph or the schedule: always a planner bug.
    #[error("after pass {pass}: the graph no longer verifies (a memplan bug)")]
    AfterPass {
        pass: Pass,
        #[related]
        errors: Vec<crate::ir::verify::VerifyError>,
    },
}

/// What the pipeline produced, up to the pass it stopped after.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// The step rewritten by the remat pass, when it recomputes ops (or reorders them);
    /// `None`: everything refers to the input graph.
    pub graph: Option<Graph>,
    pub schedule: Vec<OpId>,
    /// The in-place pairs chosen (all `None` when the pass is off).
    pub reuse: Option<Reuse>,
    pub buffers: Option<Buffers>,
    pub plan: Option<Plan>,
}

impl Pipeline {
    /// The graph the schedule and the plan refer to: the rewritten one, or `input`.
    pub fn graph<'a>(&'a self, input: &'a Graph) -> &'a Graph {
        self.graph.as_ref().unwrap_or(input)
    }
}

/// Plans `graph` with every pass; `Err(PlanError::Rewritten)` if the plan recomputes ops
/// (use [`plan_step`], which returns the graph too).
pub fn plan(graph: &Graph, options: &PlanOptions) -> Result<Plan, PlanError> {
    let options = PlanOptions { stop_after: None, ..options.clone() };
    let pipeline = run(graph, &options)?;
    if pipeline.graph.is_some() {
        return Err(PlanError::Rewritten);
    }
    Ok(pipeline.plan.expect("the full pipeline makes a plan"))
}

/// Plans `graph` with every pass; returns the graph the plan refers to (`graph` itself
/// unless the remat pass rewrote it) and the plan.
pub fn plan_step(graph: &Graph, options: &PlanOptions) -> Result<(Graph, Plan), PlanError> {
    let solver = remat::solver(options.checkpoint);
    full(graph, options, Sequence::Solve { strategy: options.checkpoint.name(), solver: &solver })
}

/// [`plan_step`] with the caller's strategy (named `strategy` in the plan and errors).
pub fn plan_with_solver(
    graph: &Graph,
    options: &PlanOptions,
    strategy: &str,
    solver: &remat::Solver<'_>,
) -> Result<(Graph, Plan), PlanError> {
    full(graph, options, Sequence::Solve { strategy, solver })
}

/// Plans `graph` running `sequence`, a valid sequence of the step's rematerialisation
/// problem ([`remat::step_problem`] of the schedule that `run` with `stop_after:
/// Some(Pass::Inplace)` gives); `options.budget` is ignored (the plan records none).
pub fn plan_sequence(graph: &Graph, options: &PlanOptions, sequence: &[Node]) -> Result<(Graph, Plan), PlanError> {
    full(graph, options, Sequence::Given(sequence))
}

fn full(graph: &Graph, options: &PlanOptions, sequence: Sequence<'_>) -> Result<(Graph, Plan), PlanError> {
    let options = PlanOptions { stop_after: None, ..options.clone() };
    let pipeline = run_with(graph, &options, sequence)?;
    let plan = pipeline.plan.expect("the full pipeline makes a plan");
    Ok((pipeline.graph.unwrap_or_else(|| graph.clone()), plan))
}

/// Runs the passes up to `options.stop_after`.
pub fn run(graph: &Graph, options: &PlanOptions) -> Result<Pipeline, PlanError> {
    let solver = remat::solver(options.checkpoint);
    run_with(graph, options, Sequence::Solve { strategy: options.checkpoint.name(), solver: &solver })
}

fn run_with(graph: &Graph, options: &PlanOptions, sequence: Sequence<'_>) -> Result<Pipeline, PlanError> {
    if !options.alignment.is_power_of_two() {
        return Err(PlanError::BadAlignment(options.alignment));
    }
    if let Some(backward) = &graph.backward {
        return Err(PlanError::NotExpanded { step: graph.name.clone(), span: backward.span.into() });
    }
    verify(graph).map_err(PlanError::Invalid)?;
    let stop = |pass: Pass| options.stop_after == Some(pass);

    let mut schedule = schedule::schedule(graph, options.schedule, options.alignment);
    // The schedule search counts no in-place reuse. Judge its order on what will be planned:
    // with reuse on, program order with the optimizer updates hoisted (or plain program
    // order) is kept when it ends lower, since a reordering can stop a big input from dying
    // at the op that could overwrite it. Ties keep the search's order.
    if options.inplace && options.schedule == ScheduleKind::Memory {
        let bound = |order: &[OpId]| -> Result<u64, PlanError> {
            lower_bound(&buffers::assign_buffers(graph, order, &inplace::inplace(graph, order))?, options.alignment)
        };
        let mut best = bound(&schedule)?;
        for candidate in [schedule::program_order_hoisted(graph, options.alignment), schedule::program_order(graph)] {
            let candidate_bound = bound(&candidate)?;
            if candidate_bound < best {
                (schedule, best) = (candidate, candidate_bound);
            }
        }
    }
    after_pass(Pass::Schedule, graph, &schedule)?;
    let mut pipeline = Pipeline { graph: None, schedule, reuse: None, buffers: None, plan: None };
    if stop(Pass::Schedule) {
        return Ok(pipeline);
    }

    let reuse = if options.inplace { inplace::inplace(graph, &pipeline.schedule) } else { inplace::no_reuse(graph) };
    after_pass(Pass::Inplace, graph, &pipeline.schedule)?;
    let reuse = pipeline.reuse.insert(reuse);
    if stop(Pass::Inplace) {
        return Ok(pipeline);
    }

    let mut buffers = buffers::assign_buffers(graph, &pipeline.schedule, reuse)?;
    // What each pass saved: the same buffers without in-place pairs, in this schedule and
    // in program order (all of the step before recomputation).
    let after_inplace = lower_bound(&buffers, options.alignment)?;

    let remat = match sequence {
        Sequence::Solve { .. } if options.budget.is_none() => None,
        _ => Some(remat::pass(graph, &mut pipeline, options, sequence)?),
    };
    if remat.is_some() {
        after_pass(Pass::Remat, pipeline.graph(graph), &pipeline.schedule)?;
    }
    if stop(Pass::Remat) {
        return Ok(pipeline);
    }
    let g = pipeline.graph(graph);
    if pipeline.graph.is_some() {
        buffers = buffers::assign_buffers(g, &pipeline.schedule, pipeline.reuse.as_ref().expect("set by remat"))?;
    }
    after_pass(Pass::Buffers, g, &pipeline.schedule)?;
    if stop(Pass::Buffers) {
        pipeline.buffers = Some(buffers);
        return Ok(pipeline);
    }

    let no_reuse = inplace::no_reuse(graph);
    let scheduled = remat.as_ref().map_or(&pipeline.schedule, |r| &r.schedule);
    let after_schedule = lower_bound(&buffers::assign_buffers(graph, scheduled, &no_reuse)?, options.alignment)?;
    let program = schedule::program_order(graph);
    let program_order = if *scheduled == program {
        after_schedule
    } else {
        lower_bound(&buffers::assign_buffers(graph, &program, &no_reuse)?, options.alignment)?
    };
    let savings = Savings { program_order, after_schedule, after_inplace, arena: 0 };
    let mut plan = assign_offsets(g, &pipeline.schedule, &buffers, options, savings)?;
    after_pass(Pass::Offsets, g, &pipeline.schedule)?;
    plan.remat = remat.map(|r| r.record);
    pipeline.buffers = Some(buffers);
    pipeline.plan = Some(plan);
    Ok(pipeline)
}

/// The buffers' live ranges, sizes rounded up to `alignment`.
fn intervals(buffers: &Buffers, alignment: u64) -> Result<Vec<Live>, PlanError> {
    buffers
        .buffers
        .iter()
        .map(|b| Some(Live { first: b.first, last: b.last, size: align_up(b.size, alignment)? }))
        .collect::<Option<Vec<_>>>()
        .ok_or(PlanError::ArenaOverflow)
}

/// The lower bound of `buffers`: the most aligned bytes live at one schedule position.
fn lower_bound(buffers: &Buffers, alignment: u64) -> Result<u64, PlanError> {
    offsets::lower_bound(&intervals(buffers, alignment)?).ok_or(PlanError::ArenaOverflow)
}

/// The offsets pass: solve, then assemble the plan (`savings` gains the arena).
fn assign_offsets(
    graph: &Graph,
    schedule: &[OpId],
    buffers: &Buffers,
    options: &PlanOptions,
    savings: Savings,
) -> Result<Plan, PlanError> {
    let intervals = intervals(buffers, options.alignment)?;
    let solve_options = offsets::SolveOptions {
        solver: options.solver,
        capacity: None,
        time_limit: options.time_limit,
        search_nodes: options.search_nodes,
    };
    let solution = offsets::solve(&intervals, &solve_options).map_err(|_| PlanError::ArenaOverflow)?;
    let (offsets, arena_bytes) = (solution.offsets, solution.arena);
    let lower_bound = offsets::lower_bound(&intervals).ok_or(PlanError::ArenaOverflow)?;
    let buffers_out = buffers
        .buffers
        .iter()
        .zip(offsets)
        .map(|(b, offset)| Buffer { offset, size: b.size, first: b.first, last: b.last, values: b.values.clone() })
        .collect();
    Ok(Plan {
        schema_version: SCHEMA_VERSION,
        step: graph.name.clone(),
        alignment: options.alignment,
        schedule: schedule.to_vec(),
        buffers: buffers_out,
        value_buffer: buffers.value_buffer.clone(),
        arena_bytes,
        lower_bound,
        savings: Savings { arena: arena_bytes, ..savings },
        remat: None,
    })
}

fn after_pass(pass: Pass, graph: &Graph, schedule: &[OpId]) -> Result<(), PlanError> {
    verify(graph)
        .and_then(|()| verify_schedule(graph, schedule))
        .map_err(|e| PlanError::AfterPass { pass, errors: e.errors })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::ValueId;
    use crate::ir::graph::{Role, Update};
    use crate::ir::ops::{Attrs, OpKind};
    use crate::ir::types::{DType, TensorType};

    fn f32s(dims: &[u64]) -> TensorType {
        TensorType::new(DType::F32, dims.to_vec())
    }

    fn op(graph: &mut Graph, kind: OpKind, inputs: Vec<ValueId>, name: &str, ty: TensorType) -> ValueId {
        let id = graph.add_op(kind, inputs, Attrs::defaults(kind).unwrap(), vec![(name.to_string(), ty)]);
        graph.ops[id].outputs[0]
    }

    /// `h = x @ w; a = relu(h); w_new = w + w` (after or before the matmul), `update w <- w_new`.
    fn step(update_first: bool) -> Graph {
        let mut g = Graph::new("t");
        let w = g.add_arg("w", f32s(&[4, 4]), Role::Param);
        let x = g.add_arg("x", f32s(&[2, 4]), Role::Input);
        let w_new = if update_first { Some(op(&mut g, OpKind::Add, vec![w, w], "w_new", f32s(&[4, 4]))) } else { None };
        let h = op(&mut g, OpKind::Matmul, vec![x, w], "h", f32s(&[2, 4]));
        let a = op(&mut g, OpKind::Relu, vec![h], "a", f32s(&[2, 4]));
        let w_new = w_new.unwrap_or_else(|| op(&mut g, OpKind::Add, vec![w, w], "w_new", f32s(&[4, 4])));
        g.updates.push(Update { target: w, value: w_new, span: Default::default() });
        g.returns.push(crate::ir::graph::Return { value: a, span: Default::default() });
        g
    }

    #[test]
    fn an_update_lands_in_its_param_and_the_plan_checks() {
        let g = step(false);
        let plan = plan(&g, &PlanOptions::default()).unwrap();
        crate::checker::check(&g, &plan).unwrap();
        let (w, w_new) = (g.updates[0].target, g.updates[0].value);
        assert_eq!(plan.value_buffer[w], plan.value_buffer[w_new]);
        let buffer = &plan.buffers[plan.value_buffer[w]];
        assert_eq!((buffer.first, buffer.last), (0, 2), "a param's buffer lives the whole step");
        assert_eq!(buffer.values, vec![w, w_new]);
        // x dies at the matmul, h at the relu: h can reuse x's bytes? No: both are read or
        // written at position 0, so they overlap; a lives to the end (returned).
        assert!(plan.arena_bytes >= plan.lower_bound);
        assert_eq!(plan.lower_bound, 3 * 256, "w, h and a live at step 1 (x died at step 0)");
    }

    #[test]
    fn an_update_computed_before_the_last_read_is_refused() {
        let g = step(true);
        let err = plan(&g, &PlanOptions::default()).unwrap_err();
        match &err {
            PlanError::UpdateNotInPlace { reason, .. } => {
                assert_eq!(reason, "`%h = matmul(%x, %w)` still reads %w after %w_new is written")
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn stop_after_ends_the_pipeline_early() {
        let g = step(false);
        let options = PlanOptions { stop_after: Some(Pass::Schedule), ..PlanOptions::default() };
        let pipeline = run(&g, &options).unwrap();
        assert_eq!(pipeline.schedule.len(), 3);
        assert!(pipeline.buffers.is_none() && pipeline.plan.is_none());
    }

    #[test]
    fn a_forward_only_step_is_refused() {
        let mut g = step(false);
        g.updates.clear();
        let loss = g.returns[0].value;
        let attrs = Attrs::defaults(OpKind::Adam).unwrap();
        g.backward = Some(crate::ir::graph::Backward { loss, optimizer: OpKind::Adam, attrs, span: Default::default() });
        let err = plan(&g, &PlanOptions::default()).unwrap_err();
        assert!(matches!(&err, PlanError::NotExpanded { step, .. } if step == "t"), "{err:?}");
        assert!(err.to_string().contains("expand the step first"));
    }

    #[test]
    fn a_bad_alignment_is_refused() {
        let options = PlanOptions { alignment: 100, ..PlanOptions::default() };
        assert!(matches!(plan(&step(false), &options), Err(PlanError::BadAlignment(100))));
    }
}
