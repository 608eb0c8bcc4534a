//! `memplan diff A B`: two plans side by side, without a ruler on the desk.
//!
//! The headline figures (arena, lower bound, what each pass saved), bytes per class (of
//! buffers, and live at the peak), the peak itself, then the values whose size changed
//! most and those whose lifetime changed most. Values are matched by name: a step edited
//! between two runs keeps the names it did not touch. A value's lifetime is
//! `[def, last]` of the bytes it lives in (see `analysis::liveness`), in schedule steps;
//! "changed most" orders by the absolute change, then by bytes, then by name, so the text
//! is deterministic. [`render_json`] gives the same as JSON (docs/REPORTS.md has the
//! schema).

use std::fmt::Write;

use indexmap::IndexMap;
use serde::Serialize;

use crate::analysis::liveness::lifetimes;
use crate::bytes::format_bytes;
use crate::report::text::{change, total_bytes};
use crate::plan::Savings;
use crate::report::{ClassBytes, Report, Subject};

/// What a diff knows of one value of one side.
#[derive(Clone)]
struct ValueFacts {
    ty: String,
    bytes: u64,
    def: usize,
    last: usize,
}

impl ValueFacts {
    fn steps(&self) -> u64 {
        (self.last - self.def) as u64 + 1
    }
}

/// The values of `subject` by name.
fn facts(subject: &Subject) -> IndexMap<String, ValueFacts> {
    let graph = &subject.graph;
    let life = lifetimes(graph, &subject.plan.schedule);
    graph
        .values
        .iter_enumerated()
        .map(|(v, value)| {
            let facts = ValueFacts {
                ty: value.ty.to_string(),
                bytes: value.ty.bytes().unwrap_or(u64::MAX),
                def: life.def[v],
                last: life.last[life.root[v]].max(life.def[v]),
            };
            (graph.value_name(v), facts)
        })
        .collect()
}

/// What changed between two plans, values matched by name (see the module docs).
struct Comparison {
    a: Report,
    b: Report,
    /// Values in both whose size changed, by the absolute change, then name.
    resized: Vec<(String, ValueFacts, ValueFacts)>,
    /// Values in both whose lifetime changed, by the absolute change in steps live, then
    /// bytes, then name.
    moved: Vec<(String, ValueFacts, ValueFacts)>,
    /// Values only in A, then only in B, in value id order.
    only: [Vec<(String, ValueFacts)>; 2],
}

fn compare(a: &Subject, b: &Subject) -> Comparison {
    let (fa, fb) = (facts(a), facts(b));
    let common = || fa.iter().filter_map(|(name, x)| fb.get(name).map(|y| (name.clone(), x.clone(), y.clone())));
    let mut resized: Vec<_> = common().filter(|(_, x, y)| x.bytes != y.bytes).collect();
    resized.sort_by(|p, q| {
        let delta = |(_, x, y): &(String, ValueFacts, ValueFacts)| x.bytes.abs_diff(y.bytes);
        delta(q).cmp(&delta(p)).then_with(|| p.0.cmp(&q.0))
    });
    let mut moved: Vec<_> = common().filter(|(_, x, y)| (x.def, x.last) != (y.def, y.last)).collect();
    moved.sort_by(|p, q| {
        let delta = |(_, x, y): &(String, ValueFacts, ValueFacts)| x.steps().abs_diff(y.steps());
        let bytes = |(_, x, y): &(String, ValueFacts, ValueFacts)| x.bytes.max(y.bytes);
        delta(q).cmp(&delta(p)).then_with(|| bytes(q).cmp(&bytes(p))).then_with(|| p.0.cmp(&q.0))
    });
    let only = |this: &IndexMap<String, ValueFacts>, other: &IndexMap<String, ValueFacts>| {
        this.iter().filter(|(n, _)| !other.contains_key(*n)).map(|(n, f)| (n.clone(), f.clone())).collect()
    };
    Comparison {
        a: Report::new(&a.graph, &a.plan),
        b: Report::new(&b.graph, &b.plan),
        resized,
        moved,
        only: [only(&fa, &fb), only(&fb, &fa)],
    }
}

/// The diff of `a` and `b` as text; `names` label the two sides; `top` bounds each list of
/// values.
pub fn render(a: &Subject, b: &Subject, names: (&str, &str), top: usize) -> String {
    let Comparison { a: ra, b: rb, resized, moved, only } = compare(a, b);
    let mut out = String::new();
    let w = &mut out;
    for (label, name, r) in [("A", names.0, &ra), ("B", names.1, &rb)] {
        let _ = writeln!(w, "{label}  {name}: {} ops, {} values, {} buffers", r.ops, r.values, r.buffers.len());
    }
    let _ = writeln!(w);
    let row = |w: &mut String, label: &str, x: u64, y: u64| {
        let _ = writeln!(w, "  {label:24}  {:>32}  {:>32}  {}", format_bytes(x), format_bytes(y), change(x, y));
    };
    let _ = writeln!(w, "  {:24}  {:>32}  {:>32}  B - A", "", "A", "B");
    row(w, "arena", ra.arena_bytes, rb.arena_bytes);
    row(w, "lower bound", ra.lower_bound, rb.lower_bound);
    row(w, "program order", ra.savings.program_order, rb.savings.program_order);
    row(w, "after schedule", ra.savings.after_schedule, rb.savings.after_schedule);
    row(w, "after in-place", ra.savings.after_inplace, rb.savings.after_inplace);
    let peak = |r: &Report| match (r.peak.position, &r.peak.op) {
        (Some(t), Some(op)) => format!("step {t}: `{op}`"),
        _ => "(no ops)".to_string(),
    };
    let _ = writeln!(w, "  {:24}  A {}", "peak", peak(&ra));
    let _ = writeln!(w, "  {:24}  B {}", "", peak(&rb));

    let _ = writeln!(w);
    let _ = writeln!(w, "bytes by class: all buffers of the step (aligned, added up over the whole step, not live at");
    let _ = writeln!(w, "once: their sum can exceed the arena), then the values live at the peak");
    for (x, y) in ra.classes.iter().zip(&rb.classes) {
        let label = format!("{}, whole step", x.class);
        match (x.buffers, y.buffers) {
            (Some(x), Some(y)) => row(w, &label, x, y),
            (x, y) => {
                let _ = writeln!(w, "  {label:24}  {:>32}  {:>32}", total_bytes(x), total_bytes(y));
            }
        }
    }
    for (x, y) in ra.classes.iter().zip(&rb.classes) {
        row(w, &format!("{} at peak", x.class), x.at_peak, y.at_peak);
    }

    let _ = writeln!(w);
    let _ = writeln!(w, "values whose size changed most ({} changed)", resized.len());
    for (name, x, y) in resized.iter().take(top) {
        let _ = writeln!(
            w,
            "  {name:24}  {:>20} {:>14}  {:>20} {:>14}  {}",
            x.ty,
            x.bytes,
            y.ty,
            y.bytes,
            change(x.bytes, y.bytes)
        );
    }

    let _ = writeln!(w);
    let _ = writeln!(w, "values whose lifetime changed most ({} changed; steps live, A -> B)", moved.len());
    for (name, x, y) in moved.iter().take(top) {
        let steps = i128::from(y.steps()) - i128::from(x.steps());
        let _ = writeln!(
            w,
            "  {name:24}  {:>14}  {:>14}  {steps:+} steps  {}",
            format!("{}..={}", x.def, x.last),
            format!("{}..={}", y.def, y.last),
            format_bytes(y.bytes)
        );
    }

    let _ = writeln!(w);
    for (label, only) in [("A", &only[0]), ("B", &only[1])] {
        let bytes = only.iter().try_fold(0u64, |sum, (_, f)| sum.checked_add(f.bytes));
        let listed: Vec<&str> = only.iter().take(top).map(|(n, _)| n.as_str()).collect();
        let more = if only.len() > top { format!(" and {} more", only.len() - top) } else { String::new() };
        let _ = writeln!(w, "only in {label}: {} values, {}{}", only.len(), total_bytes(bytes), if only.is_empty() { String::new() } else { format!(": {}{more}", listed.join(", ")) });
    }
    out
}

/// Version of `memplan diff --format json` (docs/REPORTS.md); bumped on incompatible
/// changes.
pub const DIFF_JSON_VERSION: u32 = 1;

/// `memplan diff --format json`: the same as the text, every changed value listed (no
/// `--top`), in the text's orders; pretty-printed, ending in a newline.
pub fn render_json(a: &Subject, b: &Subject, names: (&str, &str)) -> String {
    let Comparison { a: ra, b: rb, resized, moved, only } = compare(a, b);
    let size = |f: &ValueFacts| SizeJson { ty: f.ty.clone(), bytes: f.bytes };
    let life = |f: &ValueFacts| LifeJson { first: f.def, last: f.last, bytes: f.bytes };
    let listed = |values: &[(String, ValueFacts)]| {
        values.iter().map(|(n, f)| OnlyJson { value: n.clone(), ty: f.ty.clone(), bytes: f.bytes }).collect()
    };
    let document = DiffJson {
        kind: "diff",
        schema_version: DIFF_JSON_VERSION,
        a: side(names.0, a, &ra),
        b: side(names.1, b, &rb),
        resized: resized.iter().map(|(n, x, y)| Changed { value: n.clone(), a: size(x), b: size(y) }).collect(),
        moved: moved.iter().map(|(n, x, y)| Changed { value: n.clone(), a: life(x), b: life(y) }).collect(),
        only_a: listed(&only[0]),
        only_b: listed(&only[1]),
    };
    let mut out = serde_json::to_string_pretty(&document).expect("a diff always serialises");
    out.push('\n');
    out
}

/// One side of the JSON diff.
fn side<'a>(name: &'a str, subject: &'a Subject, r: &'a Report) -> SideJson<'a> {
    SideJson {
        name,
        source: &subject.source,
        step: &r.step,
        ops: r.ops,
        values: r.values,
        buffers: r.buffers.len(),
        arena_bytes: r.arena_bytes,
        lower_bound: r.lower_bound,
        savings: r.savings,
        peak: PeakJson { position: r.peak.position, op: r.peak.op.as_deref(), loc: r.peak.loc.as_deref() },
        classes: &r.classes,
    }
}

/// The document [`render_json`] writes (docs/REPORTS.md lists the fields).
#[derive(Serialize)]
struct DiffJson<'a> {
    kind: &'static str,
    schema_version: u32,
    a: SideJson<'a>,
    b: SideJson<'a>,
    resized: Vec<Changed<SizeJson>>,
    moved: Vec<Changed<LifeJson>>,
    only_a: Vec<OnlyJson>,
    only_b: Vec<OnlyJson>,
}

#[derive(Serialize)]
struct SideJson<'a> {
    name: &'a str,
    source: &'a str,
    step: &'a str,
    ops: usize,
    values: usize,
    buffers: usize,
    arena_bytes: u64,
    lower_bound: u64,
    savings: Savings,
    peak: PeakJson<'a>,
    classes: &'a [ClassBytes],
}

#[derive(Serialize)]
struct PeakJson<'a> {
    position: Option<usize>,
    op: Option<&'a str>,
    loc: Option<&'a str>,
}

#[derive(Serialize)]
struct Changed<T> {
    value: String,
    a: T,
    b: T,
}

#[derive(Serialize)]
struct SizeJson {
    #[serde(rename = "type")]
    ty: String,
    bytes: u64,
}

#[derive(Serialize)]
struct LifeJson {
    first: usize,
    last: usize,
    bytes: u64,
}

#[derive(Serialize)]
struct OnlyJson {
    value: String,
    #[serde(rename = "type")]
    ty: String,
    bytes: u64,
}
