//! `memplan diff A B`: two plans side by side, without a ruler on the desk.
//!
//! The headline figures (arena, lower bound, what each pass saved), bytes per class (of
//! buffers, and live at the peak), the peak itself, then the values whose size changed
//! most and those whose lifetime changed most. Values are matched by name: a step edited
//! between two runs keeps the names it did not touch. A value's lifetime is
//! `[def, last]` of the bytes it lives in (see `analysis::liveness`), in schedule steps;
//! "changed most" orders by the absolute change, then by bytes, then by name, so the text
//! is deterministic.

use std::fmt::Write;

use indexmap::IndexMap;

use crate::analysis::liveness::lifetimes;
use crate::bytes::format_bytes;
use crate::report::text::change;
use crate::report::{Report, Subject};

/// What a diff knows of one value of one side.
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

/// The diff of `a` and `b` as text; `names` label the two sides; `top` bounds each list of
/// values.
pub fn render(a: &Subject, b: &Subject, names: (&str, &str), top: usize) -> String {
    let (ra, rb) = (Report::new(&a.graph, &a.plan), Report::new(&b.graph, &b.plan));
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
    let _ = writeln!(w, "bytes by class (buffers, aligned; then live at the peak)");
    for (x, y) in ra.classes.iter().zip(&rb.classes) {
        row(w, &format!("{} buffers", x.class), x.buffers, y.buffers);
    }
    for (x, y) in ra.classes.iter().zip(&rb.classes) {
        row(w, &format!("{} at peak", x.class), x.at_peak, y.at_peak);
    }

    let (fa, fb) = (facts(a), facts(b));
    let common: Vec<(&String, &ValueFacts, &ValueFacts)> =
        fa.iter().filter_map(|(name, x)| fb.get(name).map(|y| (name, x, y))).collect();

    let mut resized: Vec<_> = common.iter().filter(|(_, x, y)| x.bytes != y.bytes).collect();
    resized.sort_by(|p, q| {
        let delta = |(_, x, y): &&(&String, &ValueFacts, &ValueFacts)| x.bytes.abs_diff(y.bytes);
        delta(q).cmp(&delta(p)).then_with(|| p.0.cmp(q.0))
    });
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

    let mut moved: Vec<_> = common.iter().filter(|(_, x, y)| (x.def, x.last) != (y.def, y.last)).collect();
    moved.sort_by(|p, q| {
        let delta = |(_, x, y): &&(&String, &ValueFacts, &ValueFacts)| x.steps().abs_diff(y.steps());
        let bytes = |(_, x, y): &&(&String, &ValueFacts, &ValueFacts)| x.bytes.max(y.bytes);
        delta(q).cmp(&delta(p)).then_with(|| bytes(q).cmp(&bytes(p))).then_with(|| p.0.cmp(q.0))
    });
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
    for (label, only, other) in [("A", &fa, &fb), ("B", &fb, &fa)] {
        let names: Vec<&String> = only.keys().filter(|n| !other.contains_key(*n)).collect();
        let bytes: u64 = names.iter().map(|n| only[*n].bytes).fold(0, u64::saturating_add);
        let listed: Vec<&str> = names.iter().take(top).map(|n| n.as_str()).collect();
        let more = if names.len() > top { format!(" and {} more", names.len() - top) } else { String::new() };
        let _ = writeln!(w, "only in {label}: {} values, {}{}", names.len(), format_bytes(bytes), if names.is_empty() { String::new() } else { format!(": {}{more}", listed.join(", ")) });
    }
    out
}
