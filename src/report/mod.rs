//! Reports of a plan for people (text, SVG, `memplan report`, `memplan diff`) and tools
//! (Chrome trace). docs/REPORTS.md describes every form.
//!
//! [`Report::new`] computes the headline figures once from a graph and its plan; `text.rs`
//! renders them for people and the plan JSON (`formats/plan_json.rs`) serialises the same
//! struct, so the two forms never disagree. The other forms render a [`Subject`] (graph,
//! plan, source locations): `svg.rs` (a picture of the arena), `trace.rs` (Chrome trace
//! events), `live.rs` (the live set at one step, grouped), `diff.rs` (two plans side by
//! side). Everything here is deterministic: names and orders come from the graph and the
//! plan, never from hashing, timing or paths.

pub mod diff;
pub mod live;
pub mod locs;
pub mod svg;
pub mod text;
pub mod trace;

use serde::Serialize;

use crate::analysis::classes::{Class, classify, classify_recomputing};
use crate::analysis::liveness::{Lifetimes, lifetimes};
use indexmap::IndexMap;

use crate::index::{BufferId, IndexVec, OpId, ValueId};
use crate::ir::graph::{Region, Graph};
use crate::ir::ops::{Attr, FusedBody, OpClass, inner_flops, norm_params};
use crate::plan::{Plan, Savings, align_up};
use locs::Locs;

/// Version of the JSON report; bumped on incompatible changes. Schema 3 added `source`,
/// `value_locs` and `ir` (the step itself), so a report file can be read back
/// (`formats::plan_json::load`), and the plan's `remat` record (what a budget made memplan recompute).
pub const REPORT_SCHEMA_VERSION: u32 = 3;

/// A planned step and where it came from: what `memplan report`, `diff` and every emitted
/// file render. The plan is a plan of `graph` that passed the checker.
#[derive(Clone, Debug)]
pub struct Subject {
    /// The file as the user named it (a .step file or a plan JSON).
    pub source: String,
    /// The expanded step, value ids in canonical order (as `parse(print(graph))` numbers them).
    pub graph: Graph,
    pub plan: Plan,
    /// Where each value comes from in the user's source.
    pub locs: Locs,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub step: String,
    pub ops: usize,
    pub values: usize,
    pub alignment: u64,
    pub arena_bytes: u64,
    pub lower_bound: u64,
    /// arena / lower bound.
    pub ratio: f64,
    /// What each pass saved (schema 2): the lower bound in program order, after the schedule,
    /// after in-place reuse, and the arena after offsets.
    pub savings: Savings,
    /// Recomputation under a budget (schema 3); `None` without a budget.
    pub remat: Option<RematReport>,
    /// When the optimizer's updates run; `None` for a step without optimizer ops.
    pub updates: Option<UpdateTiming>,
    /// The user's checkpointed regions and what autodiff recomputes for them; `None` for a
    /// step without `checkpoint(N)` marks.
    pub user_checkpoints: Option<UserCheckpoints>,
    /// The fused ops of the step as planned (the fusion pass's); `None` without any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fusion: Option<Fusion>,
    /// Every op whose output size depends on the data, planned at its upper bound (an
    /// `extern` with a `bound`), in program order.
    pub bounded_sizes: Vec<BoundedSize>,
    pub peak: Peak,
    /// Bytes per class, in `Class::ALL` order.
    pub classes: Vec<ClassBytes>,
    pub buffers: Vec<BufferRow>,
    /// The plan itself (ids refer to `value_names` and the step's ops in program order).
    pub plan: Plan,
    /// The name of every value, by id.
    pub value_names: Vec<String>,
}

/// What recomputation did: the budget and whether it is met, the ops recomputed, the cost.
#[derive(Clone, Debug, Serialize)]
pub struct RematReport {
    pub strategy: String,
    /// The budget in bytes; `None` when the caller gave the sequence.
    pub budget: Option<u64>,
    /// The arena without recomputation.
    pub arena_without: u64,
    /// The arena with it (= `arena_bytes`).
    pub arena: u64,
    /// How many ops are recomputations.
    pub count: usize,
    /// Each recomputing op as IR text, in schedule order, with the op it repeats:
    /// `{"op": "%h.remat1 = matmul(%x, %w1)", "of": "%h = matmul(%x, %w1)"}`.
    pub recomputed: Vec<RecomputedOp>,
    /// FLOPs of one step without recomputation, and the extra FLOPs recomputation adds;
    /// `None` (JSON `null`) when too large to count (2^64 - 1 or more).
    pub base_flops: Option<u64>,
    pub extra_flops: Option<u64>,
    /// The extra FLOPs in % of one step (`None` as above).
    pub overhead_percent: Option<f64>,
    /// Bytes one step's ops read and write without recomputation (every op that is not a
    /// clone: its inputs' and outputs' sizes), and the bytes the clones add: what
    /// recomputation costs in memory traffic (a cast costs no FLOPs). `None` when too large
    /// to count.
    pub base_bytes_moved: Option<u64>,
    pub extra_bytes_moved: Option<u64>,
}

/// When a step's optimizer updates run relative to its backward pass (the last op that
/// computes a gradient): a memory-aware schedule runs each update as soon as its gradient
/// is ready, inside backward, so gradients need not all be live at once; PyTorch's
/// `loss.backward(); opt.step()` runs every update after backward.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct UpdateTiming {
    /// Optimizer ops in the step.
    pub optimizer_ops: usize,
    /// How many of them the schedule runs before the last gradient is computed.
    pub inside_backward: usize,
    /// How many of them the step as written (program order) runs before it: when none,
    /// `--schedule program` plans `loss.backward(); opt.step()`.
    pub inside_backward_as_written: usize,
}

/// The user's activation checkpointing (`checkpoint(N)` / `recompute(N)` ops, from
/// PyTorch's `torch.utils.checkpoint`), kept as the user wrote it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct UserCheckpoints {
    /// Checkpointed regions in the forward.
    pub regions: usize,
    /// Ops autodiff runs again in the backward.
    pub recomputed_ops: usize,
    /// Their FLOPs, and the other ops' (both saturate at 2^64 - 1).
    pub extra_flops: u64,
    pub base_flops: u64,
}

/// An op whose output size depends on the data (`nonzero`, `x[mask]`), planned with the
/// upper bound its `bound` attribute states.
#[derive(Clone, Debug, Serialize)]
pub struct BoundedSize {
    /// The op as IR text.
    pub op: String,
    /// `u0 <= 64`: the symbols of its shape and their bounds.
    pub bound: String,
    /// The op's `loc`, as `model.py:25`.
    pub loc: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RecomputedOp {
    pub op: String,
    pub of: String,
}

/// The schedule position where the most bytes are live.
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// Schedule position (0-based); `None` for a step without ops.
    pub position: Option<usize>,
    /// The op running there, as IR text.
    pub op: Option<String>,
    /// Its source location, when the IR has one.
    pub loc: Option<String>,
    /// Live bytes there, buffers rounded up to the alignment (= the lower bound).
    pub bytes: u64,
    /// Values whose bytes are held there, largest first.
    pub live: Vec<LiveValue>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LiveValue {
    pub value: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub class: Class,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassBytes {
    pub class: Class,
    /// Bytes of values of this class live at the peak.
    pub at_peak: u64,
    /// Bytes of buffers of this class (see `BufferRow::class`), rounded up to the alignment,
    /// added up over the whole step; `None` (JSON `null`) past 2^64 - 1: too large.
    pub buffers: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BufferRow {
    pub buffer: String,
    pub offset: u64,
    pub bytes: u64,
    pub first: usize,
    pub last: usize,
    /// The class the buffer was allocated for ([`buffer_class`]).
    pub class: Class,
    /// The values it holds, in write order, each `%name: type`.
    pub values: Vec<String>,
}

impl Report {
    /// Computes the report of `plan`, a plan of the verified `graph`.
    pub fn new(graph: &Graph, plan: &Plan) -> Report {
        let classes = value_classes(graph, plan);
        let life = lifetimes(graph, &plan.schedule);
        let peak_position = peak_position(plan);
        let live = peak_position.map(|t| live_at(graph, plan, &life, t)).unwrap_or_default();
        let peak_op = peak_position.map(|t| plan.schedule[t]);
        let peak = Peak {
            position: peak_position,
            op: peak_op.map(|op| graph.describe_op(op)),
            loc: peak_op.and_then(|op| graph.ops[op].loc.as_ref().map(ToString::to_string)),
            bytes: plan.lower_bound,
            live: live
                .iter()
                .map(|&(v, bytes)| LiveValue {
                    value: graph.value_name(v),
                    ty: graph.values[v].ty.to_string(),
                    class: classes[v],
                    bytes,
                })
                .collect(),
        };
        let buffer_class = |b: &crate::plan::Buffer| buffer_class(b, &classes);
        let class_bytes = Class::ALL
            .iter()
            .map(|&class| ClassBytes {
                class,
                at_peak: live.iter().filter(|&&(v, _)| classes[v] == class).map(|&(_, b)| b).sum(),
                buffers: plan
                    .buffers
                    .iter()
                    .filter(|b| buffer_class(b) == class)
                    .try_fold(0u64, |sum, b| sum.checked_add(align_up(b.size, plan.alignment)?)),
            })
            .collect();
        let buffers = plan
            .buffers
            .iter_enumerated()
            .map(|(id, b)| BufferRow {
                buffer: id.to_string(),
                offset: b.offset,
                bytes: b.size,
                first: b.first,
                last: b.last,
                class: buffer_class(b),
                values: b.values.iter().map(|&v| format!("{}: {}", graph.value_name(v), graph.values[v].ty)).collect(),
            })
            .collect();
        Report {
            schema_version: REPORT_SCHEMA_VERSION,
            step: graph.name.clone(),
            ops: graph.ops.len(),
            values: graph.values.len(),
            alignment: plan.alignment,
            arena_bytes: plan.arena_bytes,
            lower_bound: plan.lower_bound,
            ratio: plan.ratio(),
            savings: plan.savings,
            remat: plan.remat.as_ref().map(|r| RematReport {
                strategy: r.strategy.clone(),
                budget: r.budget,
                arena_without: r.arena_without,
                arena: plan.arena_bytes,
                count: r.recomputes.len(),
                recomputed: r
                    .recomputes
                    .iter()
                    .filter(|x| x.clone.0 < graph.ops.len() as u32 && x.of.0 < graph.ops.len() as u32)
                    .map(|x| RecomputedOp { op: graph.describe_op(x.clone), of: graph.describe_op(x.of) })
                    .collect(),
                base_flops: (r.base_flops < u64::MAX).then_some(r.base_flops),
                extra_flops: r.extra_flops(),
                overhead_percent: r.overhead_percent(),
                base_bytes_moved: bytes_moved(graph, r, false),
                extra_bytes_moved: bytes_moved(graph, r, true),
            }),
            updates: update_timing(graph, &classes, &life),
            user_checkpoints: user_checkpoints(graph),
            fusion: fusion(graph),
            bounded_sizes: graph
                .ops
                .iter_enumerated()
                .filter_map(|(id, op)| match op.attrs.get("bound") {
                    Some(Attr::Str(bound)) if !bound.is_empty() => Some((id, op, bound)),
                    _ => None,
                })
                .map(|(id, op, bound)| BoundedSize {
                    op: graph.describe_op(id),
                    bound: bound.clone(),
                    loc: op.loc.as_ref().map(ToString::to_string),
                })
                .collect(),
            peak,
            classes: class_bytes,
            buffers,
            plan: plan.clone(),
            value_names: graph.values.iter().map(|v| v.name.clone()).collect(),
        }
    }

    /// The report of a plan that rewrote the step to recompute values: the rewritten step's
    /// program order is the plan's schedule, so how many updates run inside backward as
    /// the user wrote the step is `as_written` ([`updates_as_written`] of the step as read).
    pub fn with_updates_as_written(mut self, as_written: usize) -> Report {
        if let Some(updates) = &mut self.updates {
            updates.inside_backward_as_written = as_written;
        }
        self
    }
}

/// How many fused ops `graph` runs, how many elementwise ops they hold, and how many of
/// those recompute a value the step also stores (and their FLOPs, against the step's).
#[derive(Clone, Debug, Serialize)]
pub struct Fusion {
    pub fused_ops: usize,
    pub inner_ops: usize,
    pub recomputed_ops: usize,
    pub recomputed_flops: u64,
    /// The step's FLOPs as planned (saturating).
    pub step_flops: u64,
}

/// The fused ops of `graph` (the ops with a fused `body`: `fused`, `fused_norm`), `None`
/// without any.
fn fusion(graph: &Graph) -> Option<Fusion> {
    let mut fusion = Fusion { fused_ops: 0, inner_ops: 0, recomputed_ops: 0, recomputed_flops: 0, step_flops: 0 };
    for (id, op) in graph.ops.iter_enumerated() {
        fusion.step_flops = fusion.step_flops.saturating_add(graph.op_flops(id));
        let Some(Attr::Str(text)) = op.attrs.get("body") else { continue };
        let Ok(body) = FusedBody::parse(text) else { continue };
        let recomputed: &[i64] = match op.attrs.get("recomputed") {
            Some(Attr::Ints(list)) => list,
            _ => &[],
        };
        // A fused_norm's body reads the inputs before the norm's parameters.
        let body_inputs = op.inputs.len().saturating_sub(norm_params(&op.attrs));
        let inputs: Vec<&crate::ir::types::TensorType> = op.inputs[..body_inputs].iter().map(|&v| &graph.values[v].ty).collect();
        let flops = inner_flops(&body, &inputs);
        fusion.fused_ops += 1;
        fusion.inner_ops += body.ops.len();
        fusion.recomputed_ops += recomputed.len();
        for &j in recomputed {
            fusion.recomputed_flops = fusion.recomputed_flops.saturating_add(flops.get(j as usize).copied().unwrap_or(0));
        }
    }
    (fusion.fused_ops > 0).then_some(fusion)
}

/// The user's checkpointed regions of `graph` and what their recomputes cost (`None` without any).
fn user_checkpoints(graph: &Graph) -> Option<UserCheckpoints> {
    let mut regions = indexmap::IndexSet::new();
    let (mut recomputed_ops, mut extra_flops, mut base_flops) = (0, 0u64, 0u64);
    for (id, op) in graph.ops.iter_enumerated() {
        let flops = graph.op_flops(id);
        match op.region {
            Some(Region::Recompute(region)) => {
                regions.insert(region);
                recomputed_ops += 1;
                extra_flops = extra_flops.saturating_add(flops);
            }
            Some(Region::Checkpoint(region) | Region::CheckpointSaved(region)) => {
                regions.insert(region);
                base_flops = base_flops.saturating_add(flops);
            }
            Some(Region::Custom(_)) | None => base_flops = base_flops.saturating_add(flops),
        }
    }
    (!regions.is_empty()).then_some(UserCheckpoints { regions: regions.len(), recomputed_ops, extra_flops, base_flops })
}

/// When the optimizer ops of `graph` run, in its schedule (`life.position`) and as written.
fn update_timing(graph: &Graph, classes: &IndexVec<ValueId, Class>, life: &Lifetimes) -> Option<UpdateTiming> {
    let optimizer: Vec<OpId> = graph.ops.indices().filter(|&op| graph.ops[op].kind.def().class == OpClass::Optimizer).collect();
    if optimizer.is_empty() {
        return None;
    }
    let computes_grad = |op: &OpId| graph.ops[*op].outputs.iter().any(|&v| classes[v] == Class::Grad);
    let grad_ops: Vec<OpId> = graph.ops.indices().filter(computes_grad).collect();
    let last_scheduled = grad_ops.iter().map(|&op| life.position[op]).max();
    Some(UpdateTiming {
        optimizer_ops: optimizer.len(),
        inside_backward: optimizer.iter().filter(|&&op| last_scheduled.is_some_and(|t| life.position[op] < t)).count(),
        inside_backward_as_written: updates_inside_backward_as_written(graph, classes),
    })
}

/// How many of `graph`'s optimizer ops its program order runs before the last op that
/// computes a gradient (for [`Report::with_updates_as_written`]).
pub fn updates_as_written(graph: &Graph) -> usize {
    updates_inside_backward_as_written(graph, &classify(graph))
}

fn updates_inside_backward_as_written(graph: &Graph, classes: &IndexVec<ValueId, Class>) -> usize {
    let computes_grad = |op: &OpId| graph.ops[*op].outputs.iter().any(|&v| classes[v] == Class::Grad);
    let last_written = graph.ops.indices().filter(computes_grad).max();
    let optimizer = graph.ops.indices().filter(|&op| graph.ops[op].kind.def().class == OpClass::Optimizer);
    optimizer.filter(|&op| last_written.is_some_and(|last| op < last)).count()
}

/// The class of every value of `graph` as `plan` plans it: [`classify_recomputing`] with
/// the plan's recomputations (what they write, and the temps they read, are activations).
pub fn value_classes(graph: &Graph, plan: &Plan) -> IndexVec<ValueId, Class> {
    let ops = graph.ops.len();
    let clones: Vec<OpId> =
        plan.remat.iter().flat_map(|r| &r.recomputes).map(|x| x.clone).filter(|op| (op.0 as usize) < ops).collect();
    classify_recomputing(graph, &clones)
}

/// The class a buffer was allocated for: that of the first value it holds that is not a
/// temp (temp when all are). A param's or state's buffer is theirs (their memory across
/// steps, whatever computes the update); a buffer a matmul writes and a bias-add then
/// overwrites in place with an activation is an activation's; and one holding forward
/// values whose gradient a backward op then writes over them in place (mlp's
/// `%o`/`%logits`/`%dlogits`) is an activation's: the forward pass allocated it, and the
/// gradient takes no bytes of its own.
pub fn buffer_class(buffer: &crate::plan::Buffer, classes: &IndexVec<ValueId, Class>) -> Class {
    buffer.values.iter().map(|&v| classes[v]).find(|&c| c != Class::Temp).unwrap_or(Class::Temp)
}

/// The values holding bytes at schedule position `t`, one per live buffer, with their
/// bytes, largest first (ties in value id order). When an op hands a buffer over in place
/// (or an update lands in its param's buffer), the value written there holds it.
pub fn live_at(graph: &Graph, plan: &Plan, life: &Lifetimes, t: usize) -> Vec<(ValueId, u64)> {
    let mut holder: IndexMap<BufferId, ValueId> = IndexMap::new();
    for v in graph.values.indices().filter(|&v| life.is_root(v) && life.def[v] <= t && t <= life.last[v]) {
        // Written later wins; at position 0 an op's output is written after the arguments.
        let written = |v: ValueId| (life.def[v], graph.def_op(v).is_some());
        let slot = holder.entry(plan.value_buffer[v]).or_insert(v);
        if written(v) > written(*slot) {
            *slot = v;
        }
    }
    let mut live: Vec<(ValueId, u64)> =
        holder.values().map(|&v| (v, graph.values[v].ty.bytes().unwrap_or(u64::MAX))).collect();
    live.sort_by_key(|&(v, bytes)| (std::cmp::Reverse(bytes), v));
    live
}

/// The aligned bytes of the buffers live at each schedule position (saturating at
/// `u64::MAX`); its maximum is the plan's lower bound.
pub fn live_bytes(plan: &Plan) -> Vec<u64> {
    let n = plan.schedule.len();
    let mut delta = vec![0i128; n + 1];
    for b in &plan.buffers {
        let size = i128::from(align_up(b.size, plan.alignment).unwrap_or(u64::MAX));
        delta[b.first.min(n)] += size;
        delta[b.last.saturating_add(1).min(n)] -= size;
    }
    let mut live = 0i128;
    delta[..n]
        .iter()
        .map(|d| {
            live += d;
            u64::try_from(live).unwrap_or(u64::MAX)
        })
        .collect()
}

/// The first schedule position where the aligned bytes of live buffers are the most.
pub fn peak_position(plan: &Plan) -> Option<usize> {
    let live = live_bytes(plan);
    let best = *live.iter().max()?;
    live.iter().position(|&bytes| bytes == best)
}

/// The bytes the clones of `remat` read and write (`clones`), or every other op of
/// `graph`; `None` when a size or the sum passes 2^64 - 1.
fn bytes_moved(graph: &Graph, remat: &crate::plan::RematRecord, clones: bool) -> Option<u64> {
    let cloned: std::collections::HashSet<OpId> = remat.recomputes.iter().map(|r| r.clone).collect();
    let mut total = 0u64;
    for (_, op) in graph.ops.iter_enumerated().filter(|(id, _)| cloned.contains(id) == clones) {
        for &v in op.inputs.iter().chain(&op.outputs) {
            total = total.checked_add(graph.values[v].ty.bytes()?)?;
        }
    }
    Some(total)
}
