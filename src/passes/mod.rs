//! The pipeline: runs the passes in order on a [`Context`] and verifies after each one.
//!
//! ```text
//! fuse ─▶ schedule ─▶ inplace ─▶ remat (with a budget) ─▶ buffers ─▶ offsets
//! ```
//! Each pass is a free function over the graph in its own file; the driver ([`run`]) is
//! one loop: run a pass, store what it decided in the context, re-run the verifier on the
//! graph if the pass rewrote it (only the fusion and remat passes can: the others read it
//! by shared reference) and check the schedule is a topological order of every op (a failure is
//! labelled with the pass, "after pass schedule", and is always a planner bug), show the
//! context to an observer (`--print-ir-after`), and stop if [`PlanOptions::stop_after`]
//! says so.
//!
//! The context (Cranelift's `Context` shape) holds the step as given and what each pass
//! decided: the step the fusion pass made (when it fused), the schedule and in-place pairs
//! of the step, what the remat pass did, the buffers and the plan. Its accessors
//! ([`Context::graph`], [`Context::schedule`], [`Context::reuse`]) give the step as
//! planned: the step rewritten by the remat pass when it recomputes values, else the fused
//! step, else the input.
//!
//! Fusion (`fuse.rs`, [`PlanOptions::fuse`]) runs first and only where asked: with
//! [`Fusion::Lower`] the driver plans the step's arena (schedule, in-place reuse, buffers,
//! offsets; no recomputation) fused and unfused and keeps the fused step only when its
//! arena is lower. [`plan_step`] decides once, before the many plans cheap recomputation
//! makes: where the plan recomputes and fusing does not raise the plain arena, it plans
//! the step both ways and keeps the lower arena, so fusion never raises a plan's arena.
//!
//! The passes take expanded steps: the full flow is parse → verify → `autodiff::expand` →
//! verify → passes, and the entry points refuse a graph whose `backward` is still present.
//!
//! The schedule pass and the remat pass judge candidate orders by the tail of the pipeline
//! ([`measure`]: in-place reuse, buffers, and their lower bound or arena), handed to them
//! as a closure, so no pass calls another.
//!
//! Rematerialisation (`remat/`) runs only under a budget ([`PlanOptions::budget`]) or with a
//! caller's sequence ([`plan_sequence`]): it may rewrite the step, adding *clones* of
//! forward ops that recompute values instead of keeping them, and in-place reuse is then
//! redone on the rewritten step. The plan then refers to the rewritten graph, so
//! [`plan_step`] returns both; [`plan`] refuses to return a plan without its graph.
//! [`plan_with_strategy`] lets a caller supply the strategy.
//!
//! The plan records what each pass saved (`savings.rs`): the lower bound with the ops in
//! program order, after the schedule, after in-place reuse, and the arena after offsets.

pub mod buffers;
pub mod dump;
pub mod fuse;
pub mod inplace;
pub mod lower;
pub mod offsets;
pub mod remat;
pub mod savings;
pub mod schedule;

use std::fmt;
use std::time::{Duration, Instant};

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::index::OpId;
use crate::ir::graph::Graph;
use crate::ir::verify::{VerifyErrors, verify, verify_schedule};
use crate::plan::{DEFAULT_ALIGNMENT, Plan, RematRecord};
use crate::solve::Node;
use crate::solve::offsets::Solver;
use crate::solve::remat::Strategy;
use buffers::{Buffers, assign_buffers};
use inplace::{Reuse, inplace, no_reuse};
use remat::{Rewritten, Sequence, StrategyFn};
pub use remat::{ApplyError, Budget, BudgetError};
pub use schedule::ScheduleKind;

/// The passes, in pipeline order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Pass {
    Fuse,
    Schedule,
    Inplace,
    Remat,
    Buffers,
    Offsets,
}

impl Pass {
    pub const ALL: [Pass; 6] = [Pass::Fuse, Pass::Schedule, Pass::Inplace, Pass::Remat, Pass::Buffers, Pass::Offsets];

    pub fn name(self) -> &'static str {
        match self {
            Pass::Fuse => "fuse",
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
    /// Without a budget: recompute nothing, or the cheap values ([`Recompute::Cheap`]).
    /// A budget is met by `checkpoint`'s choice among every forward value, unless this is
    /// [`Recompute::CheapOnly`].
    pub recompute: Recompute,
    /// Whether elementwise ops are fused (the fusion pass).
    pub fuse: Fusion,
}

/// Whether the fusion pass fuses elementwise ops.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Fusion {
    /// No fusion: the step's ops as they are.
    #[default]
    Off,
    /// Fuse wherever the pass can.
    On,
    /// Fuse where that lowers the arena (`memplan plan`'s default): the step planned fused
    /// and unfused without recomputation, the fused step kept only if its arena is lower;
    /// where the plan recomputes (cheap, or under a budget), [`plan_step`] plans both
    /// unless fusing raised the plain arena, and keeps the lower. Steps of more than
    /// [`FUSE_MAX_OPS`] ops are not fused.
    Lower,
}

/// What the plan recomputes when no budget is given.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Recompute {
    /// Nothing.
    #[default]
    None,
    /// Values that are cheap functions of others (`remat::cheap`: casts, activations,
    /// masks, elementwise ops), recomputed in the backward where that lowers the arena, at
    /// most [`CHEAP_MAX_OVERHEAD`] of the step's FLOPs and `max_traffic_percent` percent
    /// of its bytes moved more. With a budget, the budget decides (as with `None`).
    Cheap { max_traffic_percent: u32 },
    /// Only cheap values, to meet the budget (nothing without one): what
    /// [`Recompute::Cheap`] plans with once it has chosen its budget.
    CheapOnly,
}

/// The most extra compute cheap recomputation may add, as a fraction of one step's FLOPs.
pub const CHEAP_MAX_OVERHEAD: f64 = 0.01;

/// The most extra memory traffic cheap recomputation may add by default, in percent of the
/// bytes one step's ops read and write (a cast costs no FLOPs, but it reads and writes its
/// tensor again): `--recompute cheap` is `cheap:10%`.
pub const CHEAP_MAX_TRAFFIC_PERCENT: u32 = 10;

/// The bytes the ops of `graph` read and write, and the part of it that recomputation adds
/// (the clones `plan` lists).
pub fn traffic(graph: &Graph, plan: &Plan) -> (u64, u64) {
    let clones: std::collections::HashSet<OpId> = plan.remat.iter().flat_map(|r| r.recomputes.iter().map(|c| c.clone)).collect();
    let (mut base, mut extra) = (0u64, 0u64);
    for op in graph.ops.indices() {
        let moved = remat::bytes_moved(graph, op);
        if clones.contains(&op) {
            extra = extra.saturating_add(moved);
        } else {
            base = base.saturating_add(moved);
        }
    }
    (base, extra)
}

/// Steps with more ops than this are planned without cheap recomputation (each search
/// plans the step several times).
pub const CHEAP_MAX_OPS: usize = 200_000;

/// Steps with more ops than this are planned without fusion where it is to lower the arena
/// ([`Fusion::Lower`]: deciding plans the step two to four times).
pub const FUSE_MAX_OPS: usize = 200_000;

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
            recompute: Recompute::None,
            fuse: Fusion::Off,
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

    /// Under a budget: the step's buffers add up to more than 2^64 - 1 bytes, too large for
    /// the recomputation search (whose peaks are `u64`s).
    #[error("the step's buffers add up to more than 2^64 - 1 bytes: too large to choose recomputations for")]
    #[diagnostic(help("plan it without --budget, or check the tensor shapes"))]
    RematTooLarge,

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
    /// helped), so a budget of `smallest` bytes is known to work. `advice` says so, and
    /// either what the step's floor is made of (a budget below [`remat::Floor`]: no
    /// strategy can meet it) or that another strategy may go lower.
    #[error("the step does not fit in {budget} bytes: the smallest arena memplan reached is {smallest} bytes (strategy {strategy})")]
    BudgetUnmet {
        budget: u64,
        smallest: u64,
        strategy: String,
        #[help]
        advice: String,
    },

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

    /// [`plan`] was asked for a plan that recomputes or fuses ops: the plan refers to a
    /// rewritten graph that `plan` cannot return (a caller bug: use [`plan_step`]).
    #[error("the plan recomputes or fuses ops, so it refers to a rewritten step: use plan_step to get both")]
    Rewritten,

    /// A pass broke an invariant of the graph or the schedule: always a planner bug.
    #[error("after pass {pass}: the graph no longer verifies (a memplan bug)")]
    AfterPass {
        pass: Pass,
        #[related]
        errors: Vec<crate::ir::verify::VerifyError>,
    },
}

/// The step, and what the passes have decided so far.
#[derive(Clone, Debug)]
pub struct Context<'g> {
    /// The step as given (expanded and verified).
    pub input: &'g Graph,
    /// The step with its elementwise ops fused, when the fusion pass fused some.
    pub fused: Option<Graph>,
    /// The order of [`Context::step`]'s ops (the schedule pass).
    pub input_schedule: Vec<OpId>,
    /// [`Context::step`]'s in-place pairs for that order (the in-place pass; all `None`
    /// when off).
    pub input_reuse: Option<Reuse>,
    /// What the remat pass recorded, when it ran.
    pub remat: Option<RematRecord>,
    /// The step rewritten by the remat pass, when it recomputes values.
    pub recomputed: Option<Recomputed>,
    /// The buffers of the step as planned (the buffers pass).
    pub buffers: Option<Buffers>,
    /// The plan (the offsets pass).
    pub plan: Option<Plan>,
}

/// A step rewritten by the remat pass, and its in-place pairs.
#[derive(Clone, Debug)]
pub struct Recomputed {
    pub step: Rewritten,
    pub reuse: Reuse,
}

impl<'g> Context<'g> {
    fn new(input: &'g Graph) -> Context<'g> {
        Context {
            input,
            fused: None,
            input_schedule: Vec::new(),
            input_reuse: None,
            remat: None,
            recomputed: None,
            buffers: None,
            plan: None,
        }
    }

    /// The step the passes after fusion start from: the fused step, or the input.
    pub fn step(&self) -> &Graph {
        self.fused.as_ref().unwrap_or(self.input)
    }

    /// The step the plan is for: the one the remat pass rewrote, else [`Context::step`].
    pub fn graph(&self) -> &Graph {
        self.recomputed.as_ref().map_or(self.step(), |r| &r.step.graph)
    }

    /// The order of [`Context::graph`]'s ops.
    pub fn schedule(&self) -> &[OpId] {
        self.recomputed.as_ref().map_or(&self.input_schedule, |r| &r.step.schedule)
    }

    /// The in-place pairs of [`Context::graph`], once the in-place pass ran.
    pub fn reuse(&self) -> Option<&Reuse> {
        self.recomputed.as_ref().map(|r| &r.reuse).or(self.input_reuse.as_ref())
    }

    /// The plan and the step the fusion or remat pass rewrote (`None`: the plan is for the
    /// input), once the offsets pass ran.
    fn into_planned(self) -> (Plan, Option<Graph>) {
        (self.plan.expect("the full pipeline makes a plan"), self.recomputed.map(|r| r.step.graph).or(self.fused))
    }
}

/// Sees the context after each pass (for `--print-ir-after`).
pub type Observer<'a> = dyn FnMut(Pass, &Context<'_>) + 'a;

/// Plans `graph` with every pass; `Err(PlanError::Rewritten)` if the plan recomputes ops
/// (use [`plan_step`], which returns the graph too).
pub fn plan(graph: &Graph, options: &PlanOptions) -> Result<Plan, PlanError> {
    let strategy = remat::strategy_fn(options.checkpoint);
    let cx = drive(graph, &PlanOptions { stop_after: None, ..options.clone() }, budgeted(options, &strategy), &mut |_, _| {})?;
    if cx.recomputed.is_some() || cx.fused.is_some() {
        return Err(PlanError::Rewritten);
    }
    Ok(cx.plan.expect("the full pipeline makes a plan"))
}

/// Plans `graph` with every pass; returns the graph the plan refers to (`graph` itself
/// unless the remat pass rewrote it) and the plan.
pub fn plan_step(graph: &Graph, options: &PlanOptions) -> Result<(Graph, Plan), PlanError> {
    match decide_fusion(graph, options)? {
        FusionChoice::Decided(options) => plan_step_decided(graph, &options),
        FusionChoice::Compare { fused, unfused } => Ok(plan_lower(graph, &fused, &unfused)?.0),
    }
}

/// The lower of the fused and the unfused plan (a tie keeps the step as written), with
/// whether it is the fused one: the step as written is planned first, and the fused step
/// only where one plan under a budget just below that arena says fusing may beat it.
fn plan_lower(graph: &Graph, fused: &PlanOptions, unfused: &PlanOptions) -> Result<((Graph, Plan), bool), PlanError> {
    let without = plan_step_decided(graph, unfused);
    if let Ok((_, plan)) = &without
        && !fused_may_beat(graph, fused, plan.arena_bytes)
    {
        return Ok((without?, false));
    }
    lower(plan_step_decided(graph, fused), without)
}

/// Whether the fused step (`fused`: its options) may plan below `arena`. With cheap
/// recomputation and no budget, its plan is the smallest affordable arena cheap
/// recomputation reaches ([`cheap_budget`]'s search over budgets): below `arena` only if
/// the budget `arena - 1` is met affordably, which one plan tells, where the search takes
/// ten. Otherwise (a budget, another mode) only planning it tells. A probe that fails
/// says no, as the fused plan failing would (the step as written is kept).
fn fused_may_beat(graph: &Graph, fused: &PlanOptions, arena: u64) -> bool {
    let Recompute::Cheap { max_traffic_percent } = fused.recompute else { return true };
    if fused.budget.is_some() || graph.ops.len() > CHEAP_MAX_OPS {
        return true;
    }
    let Some(below) = arena.checked_sub(1) else { return false };
    let probe = PlanOptions { recompute: Recompute::CheapOnly, budget: Some(Budget::Bytes(below)), ..fused.clone() };
    let strategy = remat::strategy_fn(probe.checkpoint);
    full(graph, &probe, budgeted(&probe, &strategy)).is_ok_and(|planned| affordable(&planned, max_traffic_percent))
}

/// Whether a plan of cheap recomputation stays within both caps: at most
/// [`CHEAP_MAX_OVERHEAD`] of the step's FLOPs and `max_traffic_percent` of its bytes moved
/// more.
fn affordable((graph, plan): &(Graph, Plan), max_traffic_percent: u32) -> bool {
    let flops = plan.remat.as_ref().is_none_or(|r| r.overhead_percent().is_some_and(|p| p <= CHEAP_MAX_OVERHEAD * 100.0));
    let (base, extra) = traffic(graph, plan);
    flops && u128::from(extra) * 100 <= u128::from(max_traffic_percent) * u128::from(base)
}

/// [`plan_step`] once fusion is decided ([`Fusion::On`] or [`Fusion::Off`]).
fn plan_step_decided(graph: &Graph, options: &PlanOptions) -> Result<(Graph, Plan), PlanError> {
    let chosen = cheap_budget(graph, options)?;
    let strategy = remat::strategy_fn(chosen.checkpoint);
    match full(graph, &chosen, budgeted(&chosen, &strategy)) {
        // The budget cheap recomputation chose was met when it was chosen; should the
        // search not meet it again (its time limit), the plan is the one without it.
        Err(PlanError::BudgetUnmet { .. }) if options.budget.is_none() => full(graph, options, None),
        planned => planned,
    }
}

/// The options with the budget cheap recomputation reaches ([`Recompute::Cheap`] without a
/// budget): the smallest arena recomputing only cheap ops gets, at most
/// [`CHEAP_MAX_OVERHEAD`] of the step's FLOPs and the mode's share of its bytes moved
/// more (bisected between that arena and the arena without recomputation when the
/// smallest costs more). Unchanged options when no
/// budget is needed: cheap recomputation does not lower the arena, the step has more than
/// [`CHEAP_MAX_OPS`] ops, or another mode is asked for.
fn cheap_budget(graph: &Graph, options: &PlanOptions) -> Result<PlanOptions, PlanError> {
    let Recompute::Cheap { max_traffic_percent } = options.recompute else { return Ok(options.clone()) };
    if options.budget.is_some() || graph.ops.len() > CHEAP_MAX_OPS || graph.backward.is_some() {
        return Ok(options.clone());
    }
    let cheap = PlanOptions { recompute: Recompute::CheapOnly, ..options.clone() };
    let options = &cheap;
    let strategy = remat::strategy_fn(options.checkpoint);
    let with = |budget: u64| -> Result<Option<(Graph, Plan)>, PlanError> {
        let options = PlanOptions { budget: Some(Budget::Bytes(budget)), ..options.clone() };
        match full(graph, &options, budgeted(&options, &strategy)) {
            Ok(planned) => Ok(Some(planned)),
            Err(PlanError::BudgetUnmet { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let affordable = |planned: &(Graph, Plan)| affordable(planned, max_traffic_percent);
    let without = full(graph, &PlanOptions { recompute: Recompute::None, ..options.clone() }, None)?.1.arena_bytes;
    // The search plans the step under budgets; where the remat pass cannot (a step too large
    // to choose recomputations for), the plan is the one without recomputation.
    let search = || -> Result<Option<u64>, PlanError> {
        // The smallest arena within reach: ask for 1 byte, the pass says what it reached.
        let probe = PlanOptions { budget: Some(Budget::Bytes(1)), ..options.clone() };
        let smallest = match full(graph, &probe, budgeted(&probe, &strategy)) {
            Err(PlanError::BudgetUnmet { smallest, .. }) => smallest,
            Ok(_) => 1,
            Err(e) => return Err(e),
        };
        if smallest >= without {
            return Ok(None);
        }
        Ok(match with(smallest)? {
            Some(plan) if affordable(&plan) => Some(smallest),
            _ => {
                // Bisect on bytes for the smallest affordable arena.
                let (mut low, mut high, mut best) = (smallest, without, None);
                for _ in 0..6 {
                    let mid = low + (high - low) / 2;
                    match with(mid)? {
                        Some(plan) if affordable(&plan) => {
                            best = Some(mid);
                            high = mid;
                        }
                        _ => low = mid,
                    }
                    if high - low <= options.alignment {
                        break;
                    }
                }
                best
            }
        })
    };
    Ok(match search().ok().flatten() {
        Some(bytes) => PlanOptions { budget: Some(Budget::Bytes(bytes)), ..options.clone() },
        None => PlanOptions { recompute: Recompute::Cheap { max_traffic_percent }, ..options.clone() },
    })
}

/// The options with [`Fusion::Lower`] decided for `graph`: [`Fusion::On`] when fusing does
/// not raise its arena (planned without recomputation), else [`Fusion::Off`].
fn decide_fusion(graph: &Graph, options: &PlanOptions) -> Result<FusionChoice, PlanError> {
    if options.fuse != Fusion::Lower || graph.backward.is_some() || !options.alignment.is_power_of_two() {
        return Ok(FusionChoice::Decided(options.clone()));
    }
    let unfused = PlanOptions { fuse: Fusion::Off, ..options.clone() };
    if graph.ops.len() > FUSE_MAX_OPS {
        return Ok(FusionChoice::Decided(unfused));
    }
    let Some(fused_step) = fuse::fuse(graph) else { return Ok(FusionChoice::Decided(unfused)) };
    let (with, without) = (plain_arena(&fused_step, options)?, plain_arena(graph, options)?);
    let fused = PlanOptions { fuse: Fusion::On, ..options.clone() };
    if options.budget.is_none() && options.recompute == Recompute::None {
        return Ok(FusionChoice::Decided(if with < without { fused } else { unfused }));
    }
    // Recomputation may lower the fused step further than the step as written (a value
    // fused ops recompute is one it need not keep), or not: where fusing does not raise
    // the plain arena, plan both.
    if with > without {
        return Ok(FusionChoice::Decided(unfused));
    }
    Ok(FusionChoice::Compare { fused, unfused })
}

/// How [`Fusion::Lower`] is decided for a step.
enum FusionChoice {
    /// Planning with these options.
    Decided(PlanOptions),
    /// Fusing does not raise the arena without recomputation; with it (cheap
    /// recomputation, a budget), plan both and keep the lower.
    Compare { fused: PlanOptions, unfused: PlanOptions },
}

/// The plan of the two with the smaller arena (`unfused` on a tie: fusion is kept only
/// where it lowers the arena), with whether it is `fused`; a plan beside an error (a
/// budget only one meets).
fn lower(
    fused: Result<(Graph, Plan), PlanError>,
    unfused: Result<(Graph, Plan), PlanError>,
) -> Result<((Graph, Plan), bool), PlanError> {
    match (fused, unfused) {
        (Ok(f), Ok(u)) if f.1.arena_bytes < u.1.arena_bytes => Ok((f, true)),
        (Ok(_), Ok(u)) => Ok((u, false)),
        (Ok(f), Err(_)) => Ok((f, true)),
        (Err(_), u) => Ok((u?, false)),
    }
}

/// The arena of `graph` with the schedule, in-place reuse, buffers and offsets of
/// `options`, nothing fused or recomputed.
fn plain_arena(graph: &Graph, options: &PlanOptions) -> Result<u64, PlanError> {
    let plain = PlanOptions { fuse: Fusion::Off, budget: None, recompute: Recompute::None, stop_after: None, ..options.clone() };
    Ok(drive(graph, &plain, None, &mut |_, _| {})?.plan.expect("the full pipeline makes a plan").arena_bytes)
}

/// [`plan_step`] for a graph the caller gives away (returned as it is when the plan does
/// not rewrite it: a 1,000,000-op step is not copied), showing the context to `observe`
/// after each pass (where fusion is decided by planning both ways, the kept plan is made
/// again for the observer to see).
pub fn plan_step_observed(graph: Graph, options: &PlanOptions, observe: &mut Observer<'_>) -> Result<(Graph, Plan), PlanError> {
    match decide_fusion(&graph, options)? {
        FusionChoice::Decided(options) => plan_step_observed_decided(graph, &options, observe),
        FusionChoice::Compare { fused, unfused } => {
            // The observer sees the passes of the plan kept, once: both are planned
            // unobserved, the lower again observed (the unfused one when neither plans:
            // its error again, its passes seen).
            let keep_fused = plan_lower(&graph, &fused, &unfused).is_ok_and(|(_, fused)| fused);
            plan_step_observed_decided(graph, if keep_fused { &fused } else { &unfused }, observe)
        }
    }
}

/// [`plan_step`] for a graph the caller gives away (returned as it is when the plan does
/// not rewrite it).
pub fn plan_step_owned(graph: Graph, options: &PlanOptions) -> Result<(Graph, Plan), PlanError> {
    match decide_fusion(&graph, options)? {
        FusionChoice::Decided(options) => plan_step_observed_decided(graph, &options, &mut |_, _| {}),
        FusionChoice::Compare { fused, unfused } => Ok(plan_lower(&graph, &fused, &unfused)?.0),
    }
}

/// [`plan_step_observed`] once fusion is decided.
fn plan_step_observed_decided(graph: Graph, options: &PlanOptions, observe: &mut Observer<'_>) -> Result<(Graph, Plan), PlanError> {
    let chosen = PlanOptions { stop_after: None, ..cheap_budget(&graph, options)? };
    let strategy = remat::strategy_fn(chosen.checkpoint);
    let (plan, rewritten) = match drive(&graph, &chosen, budgeted(&chosen, &strategy), observe) {
        // As in `plan_step`: a chosen budget not met again plans without it.
        Err(PlanError::BudgetUnmet { .. }) if options.budget.is_none() => {
            drive(&graph, &PlanOptions { stop_after: None, ..options.clone() }, None, observe)?.into_planned()
        }
        driven => driven?.into_planned(),
    };
    Ok((rewritten.unwrap_or(graph), plan))
}

/// [`plan_step`] with the caller's strategy (named `name` in the plan and errors).
pub fn plan_with_strategy(
    graph: &Graph,
    options: &PlanOptions,
    name: &str,
    strategy: &StrategyFn<'_>,
) -> Result<(Graph, Plan), PlanError> {
    let cheap_only = options.recompute == Recompute::CheapOnly;
    let sequence = options.budget.map(|budget| Sequence::Solve { name, strategy, budget, cheap_only });
    full(graph, options, sequence)
}

/// Plans `graph` running `sequence`, a valid sequence of the step's rematerialisation
/// problem ([`remat::step_problem`] of the schedule that [`run`] with `stop_after:
/// Some(Pass::Inplace)` gives); `options.budget` is ignored (the plan records none), and so
/// is `options.fuse`: the sequence names the step's own ops, so nothing is fused.
pub fn plan_sequence(graph: &Graph, options: &PlanOptions, sequence: &[Node]) -> Result<(Graph, Plan), PlanError> {
    full(graph, &PlanOptions { fuse: Fusion::Off, ..options.clone() }, Some(Sequence::Given(sequence)))
}

/// Runs the passes up to `options.stop_after`.
pub fn run<'g>(graph: &'g Graph, options: &PlanOptions) -> Result<Context<'g>, PlanError> {
    let strategy = remat::strategy_fn(options.checkpoint);
    drive(graph, options, budgeted(options, &strategy), &mut |_, _| {})
}

/// The remat pass's sequence under `options.budget`, chosen by `strategy` (`None` without
/// a budget: the pass then does nothing).
fn budgeted<'a>(options: &PlanOptions, strategy: &'a StrategyFn<'a>) -> Option<Sequence<'a>> {
    let cheap_only = options.recompute == Recompute::CheapOnly;
    let name = if cheap_only { "cheap" } else { options.checkpoint.name() };
    options.budget.map(|budget| Sequence::Solve { name, strategy, budget, cheap_only })
}

/// Every pass on `graph` (borrowed: copied into the result unless the remat pass rewrote it).
fn full(graph: &Graph, options: &PlanOptions, sequence: Option<Sequence<'_>>) -> Result<(Graph, Plan), PlanError> {
    let options = PlanOptions { stop_after: None, ..options.clone() };
    let (plan, rewritten) = drive(graph, &options, sequence, &mut |_, _| {})?.into_planned();
    Ok((rewritten.unwrap_or_else(|| graph.clone()), plan))
}

/// The driver loop (see the module docs); `sequence`: where the remat pass gets its
/// sequence (`None`: the pass does nothing).
fn drive<'g>(
    graph: &'g Graph,
    options: &PlanOptions,
    sequence: Option<Sequence<'_>>,
    observe: &mut Observer<'_>,
) -> Result<Context<'g>, PlanError> {
    if !options.alignment.is_power_of_two() {
        return Err(PlanError::BadAlignment(options.alignment));
    }
    if let Some(backward) = &graph.backward {
        return Err(PlanError::NotExpanded { step: graph.name.clone(), span: backward.span.into() });
    }
    verify(graph).map_err(PlanError::Invalid)?;
    let mut cx = Context::new(graph);
    for pass in Pass::ALL {
        let ran = match pass {
            Pass::Fuse => {
                cx.fused = match options.fuse {
                    Fusion::Off => None,
                    Fusion::On => fuse::fuse(graph),
                    Fusion::Lower if graph.ops.len() > FUSE_MAX_OPS => None,
                    Fusion::Lower => fuse::fuse(graph).map(|fused| -> Result<_, PlanError> {
                        Ok((plain_arena(&fused, options)? < plain_arena(graph, options)?).then_some(fused))
                    }).transpose()?.flatten(),
                };
                true
            }
            Pass::Schedule => {
                let step = cx.step();
                let lower_bound = |order: &[OpId]| Ok(measure(step, order, options)?.lower_bound);
                let judge: Option<&schedule::Bound<'_>> = options.inplace.then_some(&lower_bound);
                let order = schedule::choose(step, options.schedule, options.alignment, judge)?;
                cx.input_schedule = order;
                true
            }
            Pass::Inplace => {
                let reuse = reuse_for(cx.step(), &cx.input_schedule, options);
                cx.input_reuse = Some(reuse);
                true
            }
            Pass::Remat => match sequence {
                None => false,
                Some(sequence) => {
                    // The pass's searches and its measures share the time limit.
                    let deadline = Instant::now().checked_add(options.time_limit).unwrap_or_else(far_future);
                    let arena = |g: &Graph, order: &[OpId]| {
                        let left = deadline.saturating_duration_since(Instant::now());
                        measure(g, order, options)?.arena_within(options, left.min(MEASURE_LIMIT))
                    };
                    let done = remat::pass(cx.step(), &cx.input_schedule, (options.alignment, options.inplace), sequence, &arena, deadline)?;
                    cx.remat = Some(done.record);
                    cx.recomputed = done.rewritten.map(|step| {
                        let reuse = reuse_for(&step.graph, &step.schedule, options);
                        Recomputed { step, reuse }
                    });
                    true
                }
            },
            Pass::Buffers => {
                let reuse = cx.reuse().expect("the in-place pass ran");
                cx.buffers = Some(assign_buffers(cx.graph(), cx.schedule(), reuse)?);
                true
            }
            Pass::Offsets => {
                let buffers = cx.buffers.as_ref().expect("the buffers pass ran");
                let same_buffers = cx.recomputed.is_none().then_some(buffers);
                let reuse = cx.input_reuse.as_ref().expect("the in-place pass ran");
                let savings = savings::savings(cx.step(), &cx.input_schedule, reuse, same_buffers, options.alignment)?;
                cx.plan = Some(offsets::assign_offsets(cx.graph(), cx.schedule(), buffers, options, savings, cx.remat.clone())?);
                true
            }
        };
        if ran {
            // Only the remat pass makes a new graph (the others read it by shared
            // reference): the input was verified above, so only a rewritten step is
            // verified again (the whole graph 6 times was a fifth of planning a
            // 1,000,000-op step). The schedule is checked after every pass.
            let rewritten = (pass == Pass::Remat && cx.recomputed.is_some()) || (pass == Pass::Fuse && cx.fused.is_some());
            // (The fusion pass runs before there is a schedule.)
            (if rewritten { verify(cx.graph()) } else { Ok(()) })
                .and_then(|()| if pass == Pass::Fuse { Ok(()) } else { verify_schedule(cx.graph(), cx.schedule()) })
                .map_err(|e| PlanError::AfterPass { pass, errors: e.errors })?;
        }
        observe(pass, &cx);
        if options.stop_after == Some(pass) {
            break;
        }
    }
    Ok(cx)
}

/// The tail of the pipeline for `graph` run in `order`: in-place reuse (if on), buffers,
/// and their lower bound ([`Measured::arena`] adds offsets). How the schedule pass and the
/// remat pass judge a candidate order.
pub fn measure(graph: &Graph, order: &[OpId], options: &PlanOptions) -> Result<Measured, PlanError> {
    let buffers = assign_buffers(graph, order, &reuse_for(graph, order, options))?;
    let lower_bound = offsets::lower_bound(&buffers, options.alignment)?;
    Ok(Measured { buffers, lower_bound })
}

/// The in-place pass's pairs for `graph` run in `order`, or none when `options` turn it off.
fn reuse_for(graph: &Graph, order: &[OpId], options: &PlanOptions) -> Reuse {
    if options.inplace { inplace(graph, order) } else { no_reuse(graph) }
}

/// What [`measure`] found.
#[derive(Clone, Debug)]
pub struct Measured {
    pub buffers: Buffers,
    /// The most aligned bytes live at one position.
    pub lower_bound: u64,
}

impl Measured {
    /// The arena offsets give these buffers (the offsets solver of `options`, its default
    /// limits).
    pub fn arena(&self, options: &PlanOptions) -> Result<u64, PlanError> {
        self.arena_within(options, MEASURE_LIMIT)
    }

    /// [`Measured::arena`] with the offsets search stopped after `time_limit`.
    pub fn arena_within(&self, options: &PlanOptions, time_limit: Duration) -> Result<u64, PlanError> {
        offsets::arena(&self.buffers, options, time_limit)
    }
}

/// How long the exact offset search may take when the remat pass measures a candidate.
pub const MEASURE_LIMIT: Duration = Duration::from_millis(200);

/// An instant no time limit reaches (a limit too long to add to the clock).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(365 * 24 * 3600)
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
        let cx = run(&g, &options).unwrap();
        assert_eq!(cx.schedule().len(), 3);
        assert!(cx.buffers.is_none() && cx.plan.is_none());
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
