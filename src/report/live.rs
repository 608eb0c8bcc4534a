//! `memplan report`: what is live at one schedule step (the peak by default), grouped by
//! class, by op, by source line or by module, with cumulative bytes: the answer to "why is
//! my peak this high?".
//!
//! A value's module is its op's (`loc("model.py":42, "blocks.3.attn")`; autodiff gives a
//! gradient's ops the location of the value it is the gradient of, so the logits' gradient
//! is the output head's); an argument, or an op without one (an optimizer update), belongs
//! to the longest module path that prefixes its name (`blocks.3.attn.c_attn.weight.m` to
//! `blocks.3.attn.c_attn`); values of a step without modules are `(unknown)`.
//!
//! The live set at step `t` is one value per buffer live there (the value written last
//! holds a buffer that an op handed over in place; see [`live_at`]), with the value's own
//! bytes. Groups and values are listed largest first, ties in name order, so the text is
//! deterministic. The headline also gives the aligned bytes of the live buffers, which at
//! the peak equal the lower bound. [`render_json`] gives the same as JSON (every group and
//! value; docs/REPORTS.md has the schema).

use std::fmt::Write;

use indexmap::{IndexMap, IndexSet};
use serde::Serialize;
use thiserror::Error;

use crate::analysis::classes::Class;
use crate::analysis::liveness::lifetimes;
use crate::bytes::{format_bytes, format_short};
use crate::index::{IndexVec, ValueId};
use crate::ir::graph::{Graph, ValueDef};
use crate::ir::types::DType;
use crate::report::{Subject, live_at, live_bytes, peak_position, value_classes};

/// Which step to look at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum At {
    /// The first step where the most bytes are live.
    Peak,
    /// A schedule position (0-based).
    Step(usize),
}

/// How to group the live values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GroupBy {
    /// param, input, state, grad, activation, temp.
    Class,
    /// The kind of the op that writes the value (`matmul`); arguments are `(argument)`.
    Op,
    /// The source line of the value (see `locs.rs`); `(unknown)` where there is none.
    Loc,
    /// The module computing the value (see the module docs), its path cut to `depth`
    /// components when given (`blocks.3` for depth 2); `(model)` for the root module.
    Module { depth: Option<usize> },
    /// The value's dtype (`f32`, `bf16`, ...): what mixed precision keeps in which precision.
    Dtype,
}

/// Why a live set cannot be shown.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum LiveError {
    /// The step asked for is past the end of the schedule.
    #[error("step {step} is not in the schedule: it has steps 0..={}", steps - 1)]
    StepOutOfRange { step: usize, steps: usize },
    /// The step has no ops, so no schedule steps.
    #[error("the step has no ops, so nothing is ever live")]
    NoOps,
}

/// One value live at the step.
#[derive(Clone, PartialEq, Debug)]
pub struct LiveEntry {
    /// `%name`.
    pub value: String,
    pub ty: String,
    pub dtype: DType,
    pub class: Class,
    pub bytes: u64,
    /// The op kind that writes it, or `(argument)`.
    pub op: String,
    pub loc: Option<String>,
    /// The module path (see the module docs); `None`: the step has no modules.
    pub module: Option<String>,
}

/// What is live at one step.
#[derive(Clone, PartialEq, Debug)]
pub struct LiveSet {
    pub step: usize,
    /// The number of schedule steps.
    pub steps: usize,
    pub is_peak: bool,
    /// The op running at the step, as IR text, and its source line.
    pub op: String,
    pub loc: Option<String>,
    /// Aligned bytes of the buffers live there, and how many.
    pub buffer_bytes: u64,
    pub buffers: usize,
    pub lower_bound: u64,
    pub arena_bytes: u64,
    /// Largest first.
    pub values: Vec<LiveEntry>,
}

/// The live set of `subject` at `at`.
pub fn live_set(subject: &Subject, at: At) -> Result<LiveSet, LiveError> {
    let (graph, plan) = (&subject.graph, &subject.plan);
    let steps = plan.schedule.len();
    let peak = peak_position(plan).ok_or(LiveError::NoOps)?;
    let step = match at {
        At::Peak => peak,
        At::Step(step) if step < steps => step,
        At::Step(step) => return Err(LiveError::StepOutOfRange { step, steps }),
    };
    let classes = value_classes(graph, plan);
    let life = lifetimes(graph, &plan.schedule);
    let modules = modules(graph);
    let values = live_at(graph, plan, &life, step)
        .into_iter()
        .map(|(v, bytes)| LiveEntry {
            value: graph.value_name(v),
            ty: graph.values[v].ty.to_string(),
            dtype: graph.values[v].ty.dtype,
            class: classes[v],
            bytes,
            op: match graph.values[v].def {
                ValueDef::Arg(_) => "(argument)".to_string(),
                ValueDef::Op { op, .. } => graph.ops[op].kind.name().to_string(),
            },
            loc: subject.locs.value(v).map(str::to_string),
            module: modules[v].clone(),
        })
        .collect();
    let op = plan.schedule[step];
    Ok(LiveSet {
        step,
        steps,
        is_peak: step == peak,
        op: graph.describe_op(op),
        loc: subject.locs.op(graph, op).map(str::to_string),
        buffer_bytes: live_bytes(plan)[step],
        buffers: plan.buffers.iter().filter(|b| b.first <= step && step <= b.last).count(),
        lower_bound: plan.lower_bound,
        arena_bytes: plan.arena_bytes,
        values,
    })
}

/// The module of every value of `graph` (see the module docs).
fn modules(graph: &Graph) -> IndexVec<ValueId, Option<String>> {
    let op_module = |v: ValueId| match graph.values[v].def {
        ValueDef::Op { op, .. } => graph.ops[op].loc.as_ref().and_then(|l| l.module.clone()),
        ValueDef::Arg(_) => None,
    };
    let known: IndexSet<String> = graph.ops.iter().filter_map(|op| op.loc.as_ref()?.module.clone()).collect();
    if known.is_empty() {
        return IndexVec::from_elem(None, graph.values.len());
    }
    let by_name = |name: &str| {
        let prefixed = known.iter().filter(|m| !m.is_empty() && name.starts_with(m.as_str()) && name[m.len()..].starts_with('.'));
        prefixed.max_by_key(|m| m.len()).cloned().unwrap_or_default()
    };
    graph.values.iter_enumerated().map(|(v, value)| Some(op_module(v).unwrap_or_else(|| by_name(&value.name)))).collect()
}

/// `module` cut to `depth` components; `(model)` for the root module.
fn module_key(module: &str, depth: Option<usize>) -> String {
    if module.is_empty() {
        return "(model)".to_string();
    }
    let key = match depth {
        Some(depth) => module.split('.').take(depth.max(1)).collect::<Vec<_>>().join("."),
        None => module.to_string(),
    };
    // A module path from a file: its control characters never reach a terminal raw.
    crate::ir::ops::escape_controls(&key).into_owned()
}

/// A group of live values: its key, how many values, their bytes (in all, and by class).
#[derive(Clone, PartialEq, Debug)]
pub struct Group {
    pub key: String,
    pub values: usize,
    pub bytes: u64,
    /// The bytes of each class, in `Class::ALL` order.
    pub by_class: [u64; 6],
}

/// The live values grouped by `by`, largest first (ties by key).
pub fn groups(set: &LiveSet, by: GroupBy) -> Vec<Group> {
    let mut groups: IndexMap<String, Group> = IndexMap::new();
    for entry in &set.values {
        let key = match by {
            GroupBy::Class => entry.class.name().to_string(),
            GroupBy::Op => entry.op.clone(),
            GroupBy::Loc => entry.loc.clone().unwrap_or_else(|| "(unknown)".to_string()),
            GroupBy::Module { depth } => {
                entry.module.as_deref().map_or_else(|| "(unknown)".to_string(), |m| module_key(m, depth))
            }
            GroupBy::Dtype => entry.dtype.to_string(),
        };
        let group = groups.entry(key.clone()).or_insert(Group { key, values: 0, bytes: 0, by_class: [0; 6] });
        group.values += 1;
        group.bytes = group.bytes.saturating_add(entry.bytes);
        let class = Class::ALL.iter().position(|&c| c == entry.class).expect("every class is in ALL");
        group.by_class[class] = group.by_class[class].saturating_add(entry.bytes);
    }
    let mut groups: Vec<Group> = groups.into_values().collect();
    groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| natural_order(&a.key, &b.key)));
    groups
}

/// Keys in the order people number things: runs of digits compared as numbers (`h.2`
/// before `h.10`, as PyTorch lists a `ModuleList`), the rest as text; ties of that (`h.02`,
/// `h.2`) by the text itself, so the order is total.
fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn pieces(s: &str) -> impl Iterator<Item = (bool, &str)> {
        let mut rest = s;
        std::iter::from_fn(move || {
            let first = rest.chars().next()?;
            let digits = first.is_ascii_digit();
            let end = rest.find(|c: char| c.is_ascii_digit() != digits).unwrap_or(rest.len());
            let (piece, tail) = rest.split_at(end);
            rest = tail;
            Some((digits, piece))
        })
    }
    let numeric = |digits: &str| {
        let trimmed = digits.trim_start_matches('0');
        (trimmed.len(), trimmed.to_string())
    };
    let mut left = pieces(a);
    let mut right = pieces(b);
    loop {
        match (left.next(), right.next()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some((true, x)), Some((true, y))) => match numeric(x).cmp(&numeric(y)) {
                std::cmp::Ordering::Equal => {}
                order => return order,
            },
            (Some((_, x)), Some((_, y))) => match x.cmp(y) {
                std::cmp::Ordering::Equal => {}
                order => return order,
            },
        }
    }
}

/// The text of `memplan report`: the step, then the groups and the `top` largest values,
/// each with cumulative bytes and shares of the live bytes. `name` says where the plan
/// came from.
pub fn render(set: &LiveSet, name: &str, by: GroupBy, top: usize) -> String {
    let mut out = String::new();
    let w = &mut out;
    let which = if set.is_peak { ", the peak" } else { "" };
    let _ = writeln!(w, "{name}: step {} of 0..={}{which}", set.step, set.steps.saturating_sub(1));
    let _ = writeln!(w, "  op   {}", set.op);
    if let Some(loc) = &set.loc {
        let _ = writeln!(w, "  loc  {loc}");
    }
    let _ = writeln!(
        w,
        "live: {} in {} buffers (aligned); lower bound {}, arena {}",
        format_bytes(set.buffer_bytes),
        set.buffers,
        format_bytes(set.lower_bound),
        format_bytes(set.arena_bytes)
    );
    let total: u64 = set.values.iter().map(|v| v.bytes).fold(0, u64::saturating_add);
    let share = |bytes: u64| if total == 0 { 0.0 } else { bytes as f64 * 100.0 / total as f64 };
    let _ = writeln!(w, "values live: {} holding {}", set.values.len(), format_bytes(total));

    let groups = groups(set, by);
    let title = match by {
        GroupBy::Class => "by class",
        GroupBy::Op => "by op",
        GroupBy::Loc => "by source line",
        GroupBy::Module { .. } => "by module",
        GroupBy::Dtype => "by dtype",
    };
    let mut cumulative = 0u64;
    let rows: Vec<[String; 6]> = groups
        .iter()
        .take(top)
        .map(|g| {
            cumulative = cumulative.saturating_add(g.bytes);
            [
                g.key.clone(),
                g.values.to_string(),
                format_bytes(g.bytes),
                format!("{:.2}%", share(g.bytes)),
                format_bytes(cumulative),
                format!("{:.2}%", share(cumulative)),
            ]
        })
        .collect();
    let _ = writeln!(w);
    table(w, [title, "values", "bytes", "share", "cumulative", "cum."], &[false, true, true, true, true, true], &rows);
    if matches!(by, GroupBy::Module { .. } | GroupBy::Dtype) {
        let key = if by == GroupBy::Dtype { "dtype" } else { "module" };
        class_breakdown(w, key, &groups[..top.min(groups.len())]);
    }
    if groups.len() > top {
        let rest: u64 = groups[top..].iter().map(|g| g.bytes).fold(0, u64::saturating_add);
        let more = groups.len() - top;
        let _ = writeln!(w, "... and {more} more {}, {}", if more == 1 { "group" } else { "groups" }, format_bytes(rest));
    }

    let mut cumulative = 0u64;
    let rows: Vec<[String; 8]> = set.values[..top.min(set.values.len())]
        .iter()
        .map(|v| {
            cumulative = cumulative.saturating_add(v.bytes);
            [
                v.value.clone(),
                v.ty.clone(),
                v.class.name().to_string(),
                format_bytes(v.bytes),
                format_bytes(cumulative),
                format!("{:.2}%", share(cumulative)),
                v.op.clone(),
                v.loc.clone().unwrap_or_else(|| "-".to_string()),
            ]
        })
        .collect();
    let _ = writeln!(w);
    let _ = writeln!(w, "largest live values");
    table(
        w,
        ["value", "type", "class", "bytes", "cumulative", "cum.", "op", "loc"],
        &[false, false, false, true, true, true, false, false],
        &rows,
    );
    if set.values.len() > top {
        let rest: u64 = set.values[top..].iter().map(|v| v.bytes).fold(0, u64::saturating_add);
        let more = set.values.len() - top;
        let _ = writeln!(w, "... and {more} more {}, {}", if more == 1 { "value" } else { "values" }, format_bytes(rest));
    }
    out
}

/// Version of `memplan report --format json` (docs/REPORTS.md); bumped on incompatible
/// changes.
pub const LIVE_JSON_VERSION: u32 = 1;

/// `memplan report --format json`: the live set, every group and every value (no `--top`),
/// in the text's orders; pretty-printed, ending in a newline. `name` says where the plan
/// came from, `source` is the file the step was read from.
pub fn render_json(set: &LiveSet, name: &str, source: &str, by: GroupBy) -> String {
    let (by_name, depth) = match by {
        GroupBy::Class => ("class", None),
        GroupBy::Op => ("op", None),
        GroupBy::Loc => ("loc", None),
        GroupBy::Module { depth } => ("module", depth),
        GroupBy::Dtype => ("dtype", None),
    };
    let document = LiveJson {
        kind: "live set",
        schema_version: LIVE_JSON_VERSION,
        name,
        source,
        step: set.step,
        steps: set.steps,
        is_peak: set.is_peak,
        op: &set.op,
        loc: set.loc.as_deref(),
        live_bytes: set.buffer_bytes,
        live_buffers: set.buffers,
        lower_bound: set.lower_bound,
        arena_bytes: set.arena_bytes,
        values_bytes: set.values.iter().map(|v| v.bytes).fold(0, u64::saturating_add),
        by: by_name,
        depth,
        groups: groups(set, by)
            .into_iter()
            .map(|g| GroupJson { key: g.key, values: g.values, bytes: g.bytes, by_class: ClassesJson::from(g.by_class) })
            .collect(),
        values: set
            .values
            .iter()
            .map(|v| ValueJson {
                value: &v.value,
                ty: &v.ty,
                dtype: v.dtype.to_string(),
                class: v.class,
                bytes: v.bytes,
                op: &v.op,
                loc: v.loc.as_deref(),
                module: v.module.as_deref(),
            })
            .collect(),
    };
    let mut out = serde_json::to_string_pretty(&document).expect("a live set always serialises");
    out.push('\n');
    out
}

/// The document [`render_json`] writes (docs/REPORTS.md lists the fields).
#[derive(Serialize)]
struct LiveJson<'a> {
    kind: &'static str,
    schema_version: u32,
    name: &'a str,
    source: &'a str,
    step: usize,
    steps: usize,
    is_peak: bool,
    op: &'a str,
    loc: Option<&'a str>,
    live_bytes: u64,
    live_buffers: usize,
    lower_bound: u64,
    arena_bytes: u64,
    values_bytes: u64,
    by: &'static str,
    depth: Option<usize>,
    groups: Vec<GroupJson>,
    values: Vec<ValueJson<'a>>,
}

#[derive(Serialize)]
struct GroupJson {
    key: String,
    values: usize,
    bytes: u64,
    by_class: ClassesJson,
}

/// Bytes of each class, as an object with the classes in `Class::ALL` order.
#[derive(Serialize)]
pub(crate) struct ClassesJson {
    param: u64,
    input: u64,
    state: u64,
    grad: u64,
    activation: u64,
    temp: u64,
}

impl From<[u64; 6]> for ClassesJson {
    fn from([param, input, state, grad, activation, temp]: [u64; 6]) -> ClassesJson {
        ClassesJson { param, input, state, grad, activation, temp }
    }
}

#[derive(Serialize)]
struct ValueJson<'a> {
    value: &'a str,
    #[serde(rename = "type")]
    ty: &'a str,
    dtype: String,
    class: Class,
    bytes: u64,
    op: &'a str,
    loc: Option<&'a str>,
    module: Option<&'a str>,
}

/// Each group's (module's or dtype's) bytes by class (params, grads, activations,
/// optimizer state, inputs, temps), in the groups' order.
fn class_breakdown(w: &mut String, key: &str, groups: &[Group]) {
    let rows: Vec<[String; 7]> = groups
        .iter()
        .map(|g| {
            let cell = |c: Class| {
                let bytes = g.by_class[Class::ALL.iter().position(|&x| x == c).expect("in ALL")];
                if bytes == 0 { "-".to_string() } else { format_short(bytes) }
            };
            [g.key.clone(), cell(Class::Param), cell(Class::Grad), cell(Class::Activation), cell(Class::State), cell(Class::Input), cell(Class::Temp)]
        })
        .collect();
    let _ = writeln!(w);
    table(
        w,
        [key, "param", "grad", "activation", "state", "input", "temp"],
        &[false, true, true, true, true, true, true],
        &rows,
    );
}

/// Writes a table: each column as wide as its widest cell, right-aligned where `right`
/// says, two spaces apart, no trailing spaces.
fn table<const N: usize>(w: &mut String, header: [&str; N], right: &[bool; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let header = header.map(str::to_string);
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .zip(right)
            .map(|((cell, width), &right)| if right { format!("{cell:>width$}") } else { format!("{cell:width$}") })
            .collect();
        let _ = writeln!(w, "{}", cells.join("  ").trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::natural_order;

    #[test]
    fn module_keys_sort_as_they_are_numbered() {
        let mut keys = vec!["h.10", "h.2", "h.1.mlp", "h.1", "h.0", "wte", "h.11", "h.02", "(model)"];
        keys.sort_by(|a, b| natural_order(a, b));
        assert_eq!(keys, ["(model)", "h.0", "h.1", "h.1.mlp", "h.02", "h.2", "h.10", "h.11", "wte"]);
    }
}
