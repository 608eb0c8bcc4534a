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

use crate::analysis::classes::{Class, classify};
use crate::analysis::liveness::{Lifetimes, lifetimes};
use indexmap::IndexMap;

use crate::index::{BufferId, ValueId};
use crate::ir::graph::Graph;
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
    /// FLOPs of one step without recomputation, and the extra FLOPs recomputation adds.
    pub base_flops: u64,
    pub extra_flops: u64,
    /// The extra FLOPs in % of one step.
    pub overhead_percent: f64,
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
    /// Bytes of buffers of this class (see `BufferRow::class`), rounded up to the alignment.
    pub buffers: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BufferRow {
    pub buffer: String,
    pub offset: u64,
    pub bytes: u64,
    pub first: usize,
    pub last: usize,
    /// The class of the value that holds the buffer for the most steps; a param's or
    /// state's buffer is theirs.
    pub class: Class,
    /// The values it holds, in write order, each `%name: type`.
    pub values: Vec<String>,
}

impl Report {
    /// Computes the report of `plan`, a plan of the verified `graph`.
    pub fn new(graph: &Graph, plan: &Plan) -> Report {
        let classes = classify(graph);
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
        // A buffer's class is that of the value holding it for the most steps (the first
        // such), so a buffer an activation is written into in place is an activation's;
        // but a param's or state's buffer stays theirs (their memory across steps, whatever
        // computes the update).
        let buffer_class = |b: &crate::plan::Buffer| {
            if let Some(&first) = b.values.first()
                && matches!(classes[first], Class::Param | Class::State)
            {
                return classes[first];
            }
            let held = |i: usize| {
                let until = b.values.get(i + 1).map_or(b.last.saturating_add(1), |&next| life.def[next]);
                until.saturating_sub(life.def[b.values[i]])
            };
            let longest = (0..b.values.len()).rev().max_by_key(|&i| held(i));
            longest.map_or(Class::Temp, |i| classes[b.values[i]])
        };
        let class_bytes = Class::ALL
            .iter()
            .map(|&class| ClassBytes {
                class,
                at_peak: live.iter().filter(|&&(v, _)| classes[v] == class).map(|&(_, b)| b).sum(),
                buffers: plan
                    .buffers
                    .iter()
                    .filter(|b| buffer_class(b) == class)
                    .map(|b| align_up(b.size, plan.alignment).unwrap_or(u64::MAX))
                    .fold(0u64, u64::saturating_add),
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
                base_flops: r.base_flops,
                extra_flops: r.flops.saturating_sub(r.base_flops),
                overhead_percent: r.overhead_percent(),
            }),
            peak,
            classes: class_bytes,
            buffers,
            plan: plan.clone(),
            value_names: graph.values.iter().map(|v| v.name.clone()).collect(),
        }
    }
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
