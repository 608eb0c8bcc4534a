//! Every emitted format for every `ir/models` step, read back by an independent reader:
//! the SVG as XML (one `<rect>` per buffer, inside the plot, each with hover text), the
//! trace as JSON with the documented fields (lanes never overlap, the counter peaks at the
//! lower bound), the CSV through `buffer_list`'s reader and a validator of its own (no two
//! buffers that overlap in time overlap in bytes), the JSON read back into the same graph
//! and plan (and checked), the text as the text report. Plus a step of 10000 buffers, for
//! the picture's readability at scale.

use std::collections::HashMap;
use std::path::Path;

use memplan::passes::{PlanOptions, ScheduleKind};
use memplan::formats::emit::Emit;
use memplan::report::locs::Locs;
use memplan::formats::plan_json as json;
use memplan::report::{Report, Subject, text};
use memplan::{check, diagnostics, expand, parse, plan, print, verify};

/// The planned step of `file` (relative to the crate), as the CLI makes it.
fn subject(file: &str, options: &PlanOptions) -> Subject {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let src = std::fs::read_to_string(&path).unwrap();
    subject_of(file, &src, options)
}

fn subject_of(file: &str, src: &str, options: &PlanOptions) -> Subject {
    let render = |e: &dyn miette::Diagnostic| diagnostics::render(e, file, src, false);
    let graph = parse(src).unwrap_or_else(|e| panic!("{}", render(&e)));
    verify(&graph).unwrap_or_else(|e| panic!("{}", render(&e)));
    let graph = expand(&graph).unwrap_or_else(|e| panic!("{}", render(&e)));
    verify(&graph).unwrap_or_else(|e| panic!("{}", render(&e)));
    let plan = plan(&graph, options).unwrap_or_else(|e| panic!("{}", render(&e)));
    check(&graph, &plan).unwrap_or_else(|v| panic!("{file}: the checker rejects the plan:\n{v}"));
    let locs = Locs::from_source(&graph, file, src);
    Subject { source: file.to_string(), graph, plan, locs }
}

fn models() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ir/models");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| format!("ir/models/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".step"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    files
}

/// A number attribute of an element.
fn number(node: roxmltree::Node, name: &str) -> f64 {
    node.attribute(name).unwrap_or_else(|| panic!("no {name} on {node:?}")).parse().unwrap()
}

/// The SVG is well-formed XML with one titled rect per buffer inside the viewBox.
fn check_svg(file: &str, s: &Subject, svg: &str) {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{file}: the SVG is not XML: {e}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(root.tag_name().namespace(), Some("http://www.w3.org/2000/svg"));
    let view: Vec<f64> = root.attribute("viewBox").unwrap().split(' ').map(|v| v.parse().unwrap()).collect();
    for node in doc.descendants() {
        let name = node.tag_name().name();
        assert!(!["script", "image", "foreignObject"].contains(&name), "{file}: <{name}> in a self-contained SVG");
        assert!(node.attribute(("http://www.w3.org/1999/xlink", "href")).is_none() && node.attribute("href").is_none());
    }
    let group = doc.descendants().find(|n| n.attribute("id") == Some("buffers")).expect("g#buffers");
    let rects: Vec<roxmltree::Node> = group.children().filter(|n| n.is_element()).collect();
    assert_eq!(rects.len(), s.plan.buffers.len(), "{file}: one rect per buffer");
    for (i, rect) in rects.iter().enumerate() {
        assert_eq!(rect.tag_name().name(), "rect");
        let (x, y, w, h) = (number(*rect, "x"), number(*rect, "y"), number(*rect, "width"), number(*rect, "height"));
        assert!(w >= 0.5 && h >= 0.5, "{file}: buffer {i} is drawn {w} x {h}: too thin to see");
        assert!(x >= 0.0 && y >= 0.0 && x + w <= view[2] + 0.01 && y + h <= view[3] + 0.01, "{file}: buffer {i} outside");
        let title = rect.children().find(|n| n.tag_name().name() == "title").expect("hover text");
        let text = title.text().unwrap();
        assert!(text.starts_with(&format!("buf{i} (")), "{file}: {text}");
        assert!(text.contains("live at steps"), "{file}: {text}");
        let class = rect.attribute("class").unwrap().split(' ').next().unwrap();
        assert!(["param", "input", "state", "grad", "activation", "temp"].contains(&class), "{class}");
    }
    let legend = doc.descendants().find(|n| n.attribute("id") == Some("legend")).expect("a legend");
    assert_eq!(legend.children().filter(|n| n.tag_name().name() == "rect").count(), 6, "one swatch per class");
    assert!(doc.descendants().any(|n| n.attribute("id") == Some("peak")), "{file}: the peak is marked");
    assert!(doc.descendants().any(|n| n.attribute("id") == Some("live")), "{file}: the live-bytes line");
}

/// The trace parses, has the documented fields, and agrees with the plan.
fn check_trace(file: &str, s: &Subject, trace: &str) {
    let json: serde_json::Value = serde_json::from_str(trace).unwrap_or_else(|e| panic!("{file}: the trace is not JSON: {e}"));
    let events = json["traceEvents"].as_array().expect("traceEvents");
    for e in events {
        assert!(e["ph"].is_string() && e["pid"].is_u64() && e["name"].is_string(), "{file}: {e}");
    }
    fn phase<'a>(events: &'a [serde_json::Value], ph: &'a str) -> impl Iterator<Item = &'a serde_json::Value> {
        events.iter().filter(move |e| e["ph"] == ph)
    }
    let ops = phase(events, "X").filter(|e| e["pid"] == 1).count();
    assert_eq!(ops, s.plan.schedule.len(), "{file}: one X event per op");
    let buffers: Vec<&serde_json::Value> = phase(events, "X").filter(|e| e["pid"] != 1).collect();
    assert_eq!(buffers.len(), s.plan.buffers.len(), "{file}: one X event per buffer");
    let mut lanes: HashMap<(u64, u64), Vec<(u64, u64)>> = HashMap::new();
    for e in &buffers {
        let args = &e["args"];
        let id: usize = args["buffer"].as_str().unwrap().trim_start_matches("buf").parse().unwrap();
        let b = &s.plan.buffers.as_slice()[id];
        assert_eq!(args["offset"], b.offset);
        assert_eq!(args["bytes"], b.size);
        assert_eq!((args["first"].as_u64(), args["last"].as_u64()), (Some(b.first as u64), Some(b.last as u64)));
        assert_eq!(args["values"].as_array().unwrap().len(), b.values.len());
        let (ts, dur) = (e["ts"].as_u64().unwrap(), e["dur"].as_u64().unwrap());
        assert_eq!((ts, dur), (b.first as u64, (b.last - b.first + 1) as u64));
        lanes.entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())).or_default().push((ts, ts + dur));
    }
    for ((pid, tid), mut spans) in lanes {
        spans.sort();
        for pair in spans.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{file}: events overlap on pid {pid} tid {tid}: {pair:?}");
        }
    }
    let counters: Vec<u64> =
        phase(events, "C").filter(|e| e["name"] == "live bytes").map(|e| e["args"]["bytes"].as_u64().unwrap()).collect();
    assert_eq!(counters.len(), s.plan.schedule.len() + 1, "{file}: a counter per step and one at the end");
    assert_eq!(counters.iter().max().copied(), Some(s.plan.lower_bound), "{file}: the counter peaks at the lower bound");
    // The stacked counter by class: every class at every step, adding up to the total.
    let by_class: Vec<&serde_json::Value> = phase(events, "C").filter(|e| e["name"] == "live bytes by class").collect();
    assert_eq!(by_class.len(), counters.len(), "{file}: a counter by class per step and one at the end");
    for (t, (e, &total)) in by_class.iter().zip(&counters).enumerate() {
        assert_eq!(e["ts"], t);
        let args = e["args"].as_object().unwrap();
        let names: Vec<&str> = args.keys().map(String::as_str).collect();
        assert_eq!(names, ["activation", "grad", "input", "param", "state", "temp"], "{file}");
        assert_eq!(args.values().map(|b| b.as_u64().unwrap()).sum::<u64>(), total, "{file}: step {t}");
    }
    assert_eq!(phase(events, "i").filter(|e| e["name"] == "peak").count(), 1);
    let names: Vec<&str> = phase(events, "M").map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"process_name") && names.contains(&"thread_name"));
    let other = &json["otherData"];
    assert_eq!(other["arena_bytes"], s.plan.arena_bytes);
    assert_eq!(other["lower_bound"], s.plan.lower_bound);
    assert_eq!(other["step"], s.graph.name.as_str());
}

/// The CSV reads back as a buffer list, and its own validator finds no overlap.
fn check_csv(file: &str, s: &Subject, csv: &str) {
    let list = memplan::formats::buffer_list::parse_buffer_list(csv).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(list.len(), s.plan.buffers.len());
    // Independent of the planner and the checker: every pair that shares a time step
    // must not share a byte; the arena covers every buffer.
    let mut arena = 0u64;
    for (i, a) in list.iter().enumerate() {
        let offset = a.offset.expect("an offset column");
        assert_eq!(offset % s.plan.alignment, 0, "{file}: {} misaligned", a.id);
        assert_eq!(a.size % s.plan.alignment, 0, "{file}: sizes are aligned");
        arena = arena.max(offset + a.size);
        for b in &list[..i] {
            let (ao, bo) = (offset, b.offset.unwrap());
            let in_time = a.lower < b.upper && b.lower < a.upper;
            let in_bytes = ao < bo + b.size && bo < ao + a.size;
            assert!(!(in_time && in_bytes), "{file}: {} and {} overlap", a.id, b.id);
        }
    }
    assert!(arena <= s.plan.arena_bytes, "{file}: the list needs {arena} B, the plan says {}", s.plan.arena_bytes);
    let steps = list.iter().map(|b| b.upper).max().unwrap_or(0);
    let most = (0..steps).map(|t| list.iter().filter(|b| b.lower <= t && t < b.upper).map(|b| b.size).sum::<u64>()).max();
    assert_eq!(most.unwrap_or(0), s.plan.lower_bound, "{file}: the list's lower bound");
}

/// The JSON reads back into the same graph, plan and locations, and renders identically.
fn check_json(file: &str, s: &Subject, report: &Report, text_json: &str) {
    let back = json::load(text_json).unwrap_or_else(|e| panic!("{file}: the plan JSON does not load: {e}"));
    check(&back.graph, &back.plan).unwrap();
    assert_eq!(print(&back.graph), print(&s.graph), "{file}: the step");
    assert_eq!(back.graph, s.graph, "{file}: the same graph (ids and all)");
    assert_eq!(back.plan, s.plan, "{file}: the same plan");
    assert_eq!(back.locs, s.locs, "{file}: the same locations");
    assert_eq!(back.source, file);
    let again = Report::new(&back.graph, &back.plan);
    assert_eq!(json::render(&back, &again), text_json, "{file}: the JSON round-trips byte for byte");
    let value: serde_json::Value = serde_json::from_str(text_json).unwrap();
    assert_eq!(value["schema_version"], 3);
    assert_eq!(value["arena_bytes"], report.arena_bytes);
    assert!(value["ir"].as_str().unwrap().starts_with(&format!("step @{}(", s.graph.name)));
}

#[test]
fn every_format_of_every_model() {
    for file in models() {
        let s = subject(&file, &PlanOptions::default());
        let report = Report::new(&s.graph, &s.plan);
        for emit in Emit::ALL {
            let out = emit.render(&s, &report, 20);
            match emit {
                Emit::Text => assert_eq!(out, text::render(&report, 20, text::BufferRows::All), "{file}: every buffer"),
                Emit::Json => check_json(&file, &s, &report, &out),
                Emit::Svg => check_svg(&file, &s, &out),
                Emit::Trace => check_trace(&file, &s, &out),
                Emit::Csv => check_csv(&file, &s, &out),
            }
            assert_eq!(out, emit.render(&s, &report, 20), "{file}: {} is deterministic", emit.name());
        }
    }
}

#[test]
fn a_tampered_plan_file_is_refused_with_the_reason() {
    let s = subject("ir/models/mlp.step", &PlanOptions::default());
    let good = json::render(&s, &Report::new(&s.graph, &s.plan));
    let mut value: serde_json::Value = serde_json::from_str(&good).unwrap();
    // Two buffers at one offset: the checker must say so.
    value["plan"]["buffers"][1]["offset"] = value["plan"]["buffers"][0]["offset"].clone();
    let err = json::load(&value.to_string()).expect_err("an overlap is refused");
    assert!(matches!(err, json::LoadError::Check { .. }), "the CLI exits 3 on it: {err}");
    assert!(err.to_string().contains("does not pass the checker"), "{err}");

    type Tamper<'a> = &'a dyn Fn(&mut serde_json::Value);
    let cases: [(Tamper, &str); 5] = [
        (&|v| v["schema_version"] = 2.into(), "schema_version 2"),
        (&|v| v["ir"] = "step @s( {".into(), "is not a valid step"),
        (&|v| v["value_locs"] = serde_json::json!([]), "`value_locs` has 0 entries"),
        (&|v| v["plan"]["schedule"] = serde_json::json!([0, 0]), "does not pass the checker"),
        (&|v| drop(v.as_object_mut().unwrap().remove("plan")), "missing field `plan`"),
    ];
    for (tamper, needle) in cases {
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        tamper(&mut v);
        let err = json::load(&v.to_string()).expect_err("refused");
        assert!(err.to_string().contains(needle), "expected {needle:?} in: {err}");
    }
    assert!(json::load("not json").expect_err("not JSON").to_string().contains("line 1"));
}

/// A chain of 10000 adds, each reading a value from up to 60 steps back: 10000 buffers
/// with varied lifetimes (in-place reuse off, program order).
fn long_step(n: usize) -> String {
    let mut src = String::from("step @long(\n  %x: f32[64] input,\n) {\n  %v0 = relu(%x)\n");
    for i in 1..n {
        let back = 1 + (i * 7919) % 60;
        src.push_str(&format!("  %v{i} = add(%v{}, %v{})\n", i - 1, i.saturating_sub(back)));
    }
    src.push_str(&format!("  return %v{}\n}}\n", n - 1));
    src
}

#[test]
fn the_picture_of_10000_buffers_keeps_one_visible_rect_each() {
    let options = PlanOptions { schedule: ScheduleKind::Program, inplace: false, ..PlanOptions::default() };
    let s = subject_of("long.step", &long_step(10_000), &options);
    assert!(s.plan.buffers.len() > 10_000, "{} buffers", s.plan.buffers.len());
    let report = Report::new(&s.graph, &s.plan);
    let svg = Emit::Svg.render(&s, &report, 20);
    check_svg("long.step", &s, &svg);
    assert!(svg.len() < 8 << 20, "{} bytes of SVG", svg.len());
}
