//! The files of `memplan snapshot --emit`: their fixed names and contents.
//!
//! | format | file            | what |
//! |--------|-----------------|------|
//! | text   | report.txt      | the text report (`render::text`) |
//! | json   | snapshot.json   | the JSON report (`render::json`) |
//! | svg    | memory.svg      | reserved and allocated bytes over the trace, the peaks, the ideal arena |
//! | trace  | trace.json      | Chrome trace events: the two counters, and one event per allocation |
//! | csv    | allocations.csv | the allocations as a buffer list with their ideal offsets (`memplan alloc` reads it) |
//!
//! As for `plan --emit`, each format has ONE name, so a directory holds one snapshot's
//! files and the CLI replaces only those names (src/cli/files.rs). The SVG is
//! self-contained SVG 1.1 on a fixed 1200 × 720 viewBox; with more events than pixel
//! columns, each column shows the most bytes of its events, so a peak is never lost. The
//! trace's time is the trace's event number (a viewer's microsecond is one event), as
//! `plan`'s trace uses schedule steps. Output is deterministic.

use std::fmt::Write;
use std::str::FromStr;

use serde_json::{Value, json};

use crate::bytes::{format_bytes, format_short};
use crate::formats::buffer_list::{ListedBuffer, write_buffer_list};
use crate::formats::torch_snapshot::render::{self, Subject, user_first};
use crate::formats::torch_snapshot::timeline::{Origin, Timeline};
use crate::report::svg::{byte_axis, escape, nice_step};
use crate::report::trace::pack_lanes;

/// A file `memplan snapshot --emit` writes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum SnapshotEmit {
    Text,
    Json,
    Svg,
    Trace,
    Csv,
}

impl SnapshotEmit {
    pub const ALL: [SnapshotEmit; 5] = [SnapshotEmit::Text, SnapshotEmit::Json, SnapshotEmit::Svg, SnapshotEmit::Trace, SnapshotEmit::Csv];

    /// The name `--emit` takes.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotEmit::Text => "text",
            SnapshotEmit::Json => "json",
            SnapshotEmit::Svg => "svg",
            SnapshotEmit::Trace => "trace",
            SnapshotEmit::Csv => "csv",
        }
    }

    /// The file it is written to, inside the output directory.
    pub fn file_name(self) -> &'static str {
        match self {
            SnapshotEmit::Text => "report.txt",
            SnapshotEmit::Json => "snapshot.json",
            SnapshotEmit::Svg => "memory.svg",
            SnapshotEmit::Trace => "trace.json",
            SnapshotEmit::Csv => "allocations.csv",
        }
    }

    /// The file's contents (`top`: the text report's allocations and segments listed).
    pub fn render(self, subject: &Subject<'_>, top: usize) -> String {
        match self {
            SnapshotEmit::Text => render::text(subject, top),
            SnapshotEmit::Json => render::json(subject),
            SnapshotEmit::Svg => svg(subject),
            SnapshotEmit::Trace => trace(subject),
            SnapshotEmit::Csv => csv(subject),
        }
    }
}

impl FromStr for SnapshotEmit {
    type Err = String;

    fn from_str(s: &str) -> Result<SnapshotEmit, String> {
        SnapshotEmit::ALL.into_iter().find(|e| e.name() == s).ok_or_else(|| {
            let names: Vec<&str> = SnapshotEmit::ALL.iter().map(|e| e.name()).collect();
            format!("unknown format `{s}`; the formats are {}", names.join(", "))
        })
    }
}

/// The allocations as minimalloc's buffer list: id `a{i}` (allocation order, as in the
/// JSON), live on `[first, last + 1)`, aligned size, ideal offset.
pub fn csv(s: &Subject<'_>) -> String {
    let (t, ideal) = (s.timeline, s.ideal);
    let list: Vec<ListedBuffer> = t
        .allocations
        .iter()
        .zip(&ideal.sizes)
        .enumerate()
        .map(|(i, (a, &size))| ListedBuffer { id: format!("a{i}"), lower: a.first as u64, upper: a.last as u64 + 1, size, offset: None, line: i + 2 })
        .collect();
    write_buffer_list(&list, &ideal.offsets)
}

const WIDTH: f64 = 1200.0;
const HEIGHT: f64 = 720.0;
/// The plot area: left, top, width, height.
const PLOT: (f64, f64, f64, f64) = (96.0, 72.0, 850.0, 590.0);
const RESERVED: &str = "#D55E00";
const ALLOCATED: &str = "#0072B2";
const IDEAL: &str = "#009E73";

/// Points of a step line over `values` (one per position), `columns` pixel columns wide,
/// each column the most of its positions.
fn step_points(values: &[u64], columns: usize, x: &dyn Fn(usize) -> f64, y: &dyn Fn(u64) -> f64) -> String {
    let mut points = String::new();
    let mut last = None;
    for c in 0..columns {
        let (p0, p1) = (c * values.len() / columns, (c + 1) * values.len() / columns);
        let bytes = values[p0..p1].iter().copied().max().unwrap_or(0);
        if last != Some(bytes) {
            if let Some(previous) = last {
                let _ = write!(points, "{:.2},{:.2} ", x(p0), y(previous));
            }
            let _ = write!(points, "{:.2},{:.2} ", x(p0), y(bytes));
            last = Some(bytes);
        }
    }
    if let Some(bytes) = last {
        let _ = write!(points, "{:.2},{:.2}", x(values.len()), y(bytes));
    }
    points.trim_end().to_string()
}

/// Reserved and allocated bytes over the trace (see the module docs).
pub fn svg(s: &Subject<'_>) -> String {
    let (t, ideal) = (s.timeline, s.ideal);
    let positions = t.allocated.len();
    let top_bytes = t.max_reserved.bytes.max(t.max_allocated.bytes).max(ideal.arena).max(1);
    let (left, top, width, height) = PLOT;
    let x = |p: usize| left + p as f64 * width / positions.max(1) as f64;
    let y = |bytes: u64| top + height - (bytes as f64 / top_bytes as f64).min(1.0) * height;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, "<desc>memplan: a PyTorch memory snapshot's reserved and allocated bytes over its trace; x = trace event, y = bytes</desc>");
    let _ = writeln!(out, r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>"##);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="24" font-size="15" font-weight="bold">{}: reserved peak {}, allocated peak {}</text>"#,
        escape(s.source),
        format_short(t.max_reserved.bytes),
        format_short(t.max_allocated.bytes)
    );
    let _ = writeln!(
        out,
        r##"<text x="{left}" y="42" fill="#444">device {}, {} trace events; an ideal placement of the same allocations fits in {} (lower bound {})</text>"##,
        t.device,
        t.events,
        format_short(ideal.arena),
        format_short(ideal.lower_bound)
    );
    let _ = writeln!(out, r##"<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="#f4f4f4"/>"##);
    axes(&mut out, positions, top_bytes, &x, &y);
    let columns = (width as usize).min(positions).max(1);
    let bottom = top + height;
    for (id, values, colour, label) in [("reserved", &t.reserved, RESERVED, "reserved: bytes of the segments held"), ("allocated", &t.allocated, ALLOCATED, "allocated: bytes of live allocations (requested)")] {
        let points = step_points(values, columns, &x, &y);
        let _ = writeln!(
            out,
            r#"<polygon id="{id}-area" points="{left:.2},{bottom:.2} {points} {:.2},{bottom:.2}" fill="{colour}" fill-opacity="0.18"/>"#,
            x(positions)
        );
        let _ = writeln!(out, r#"<polyline id="{id}" points="{points}" fill="none" stroke="{colour}" stroke-width="1.4"><title>{label}</title></polyline>"#);
    }
    for (id, bytes, dash, title) in [
        ("ideal", ideal.arena, "8,4", format!("ideal arena: {} (memplan's placement of the same allocations)", format_bytes(ideal.arena))),
        ("lower-bound", ideal.lower_bound, "2,3", format!("lower bound: {} (the most bytes live at once)", format_bytes(ideal.lower_bound))),
    ] {
        let _ = writeln!(
            out,
            r#"<line id="{id}" x1="{left}" y1="{:.2}" x2="{:.2}" y2="{:.2}" stroke="{IDEAL}" stroke-width="1.5" stroke-dasharray="{dash}"><title>{}</title></line>"#,
            y(bytes),
            left + width,
            y(bytes),
            escape(&title)
        );
    }
    for (id, peak, colour, name) in [("reserved-peak", t.max_reserved, RESERVED, "reserved peak"), ("allocated-peak", t.max_allocated, ALLOCATED, "allocated peak")] {
        let px = (x(peak.at) + x(peak.at + 1)) / 2.0;
        let _ = writeln!(
            out,
            r#"<line id="{id}" x1="{px:.2}" y1="{top}" x2="{px:.2}" y2="{bottom}" stroke="{colour}" stroke-width="1" stroke-dasharray="5,3"><title>{name}: {} at event {}</title></line>"#,
            format_bytes(peak.bytes),
            peak.at
        );
    }
    if !t.ooms.is_empty() {
        out.push_str("<g id=\"ooms\">");
        for oom in &t.ooms {
            let px = (x(oom.at) + x(oom.at + 1)) / 2.0;
            let _ = write!(
                out,
                r#"<path d="M{:.2},{:.2} l5,-9 l-10,0 z" fill="{RESERVED}"><title>out of memory at event {}: asked for {}</title></path>"#,
                px,
                top - 1.0,
                oom.at,
                format_bytes(oom.size)
            );
        }
        out.push_str("</g>\n");
    }
    legend(&mut out, t, ideal.arena, ideal.lower_bound);
    out.push_str("</svg>\n");
    out
}

/// Axis lines, ticks, grid and labels.
fn axes(out: &mut String, positions: usize, top_bytes: u64, x: &dyn Fn(usize) -> f64, y: &dyn Fn(u64) -> f64) {
    let (left, top, width, height) = PLOT;
    let bottom = top + height;
    let step = usize::try_from(nice_step(positions as u64, 10)).unwrap_or(usize::MAX);
    let mut p = 0usize;
    while p <= positions {
        let px = x(p);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.2}" y1="{bottom}" x2="{px:.2}" y2="{:.2}" stroke="#000"/><text x="{px:.2}" y="{:.2}" text-anchor="middle">{p}</text>"##,
            bottom + 5.0,
            bottom + 19.0
        );
        p = match p.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
    let _ = writeln!(out, r#"<text x="{:.2}" y="{:.2}" text-anchor="middle">trace event</text>"#, left + width / 2.0, bottom + 38.0);
    byte_axis(out, top_bytes, y, left, width);
    let _ = writeln!(out, r##"<text transform="translate(18 {:.2}) rotate(-90)" text-anchor="middle">bytes</text>"##, top + height / 2.0);
    let _ = writeln!(
        out,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#000"/><line x1="{left}" y1="{bottom}" x2="{:.2}" y2="{bottom}" stroke="#000"/>"##,
        left + width
    );
}

fn legend(out: &mut String, t: &Timeline, arena: u64, lower: u64) {
    let (left, top, width, _) = PLOT;
    let lx = left + width + 20.0;
    let rows = [
        (RESERVED, "", "reserved", format_short(t.max_reserved.bytes), "peak; segments held"),
        (ALLOCATED, "", "allocated", format_short(t.max_allocated.bytes), "peak; live allocations"),
        (IDEAL, "8,4", "ideal arena", format_short(arena), "memplan's placement"),
        (IDEAL, "2,3", "lower bound", format_short(lower), "most bytes live at once"),
    ];
    out.push_str("<g id=\"legend\">");
    for (i, (colour, dash, name, bytes, what)) in rows.iter().enumerate() {
        let ly = top + 8.0 + i as f64 * 40.0;
        let _ = write!(
            out,
            r##"<line x1="{lx}" y1="{ly}" x2="{:.2}" y2="{ly}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{:.2}" y="{:.2}">{name} {bytes}</text><text x="{:.2}" y="{:.2}" fill="#444" font-size="11">{what}</text>"##,
            lx + 18.0,
            lx + 24.0,
            ly + 4.0,
            lx + 24.0,
            ly + 18.0
        );
    }
    out.push_str("</g>\n");
}

/// The allocations and the two counters as Chrome trace events (see the module docs).
pub fn trace(s: &Subject<'_>) -> String {
    let (t, ideal, snapshot) = (s.timeline, s.ideal, s.snapshot);
    let mut events: Vec<Value> = vec![
        json!({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": format!("memory of device {}", t.device)}}),
        json!({"ph": "M", "pid": 1, "name": "process_sort_index", "args": {"sort_index": 0}}),
        json!({"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "events"}}),
    ];
    let mut last = None;
    for (p, (&allocated, &reserved)) in t.allocated.iter().zip(&t.reserved).enumerate() {
        if last != Some((allocated, reserved)) {
            events.push(json!({"ph": "C", "pid": 1, "ts": p, "name": "bytes", "args": {"reserved": reserved, "allocated": allocated}}));
            last = Some((allocated, reserved));
        }
    }
    events.push(json!({"ph": "C", "pid": 1, "ts": t.allocated.len(), "name": "bytes", "args": {"reserved": 0, "allocated": 0}}));
    for (name, peak) in [("reserved peak", t.max_reserved), ("allocated peak", t.max_allocated)] {
        events.push(json!({"ph": "i", "s": "g", "pid": 1, "tid": 1, "ts": peak.at, "name": name, "args": {"bytes": peak.bytes}}));
    }
    for oom in &t.ooms {
        events.push(json!({"ph": "i", "s": "g", "pid": 1, "tid": 1, "ts": oom.at, "name": "out of memory", "args": {"bytes": oom.size, "device_free": oom.device_free}}));
    }
    events.push(json!({"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "allocations"}}));
    events.push(json!({"ph": "M", "pid": 2, "name": "process_sort_index", "args": {"sort_index": 2}}));
    let lanes = pack_lanes(t.allocations.iter().map(|a| (a.first, a.last)));
    for lane in 0..lanes.iter().max().map_or(0, |&l| l + 1) {
        events.push(json!({"ph": "M", "pid": 2, "tid": lane + 1, "name": "thread_name", "args": {"name": format!("lane {}", lane + 1)}}));
    }
    for (i, (a, &lane)) in t.allocations.iter().zip(&lanes).enumerate() {
        let frames = user_first(snapshot.stack(a.frames));
        let at = frames.first().map(|f| format!(" {}:{}", f.filename, f.line)).unwrap_or_default();
        let shown: Vec<String> = frames.iter().take(FRAMES_IN_TRACE).map(|f| format!("{}:{} in {}", f.filename, f.line, f.name)).collect();
        events.push(json!({
            "ph": "X", "pid": 2, "tid": lane + 1, "ts": a.first, "dur": a.last - a.first + 1, "cat": "allocation",
            "name": format!("{}{at}", format_short(a.size)),
            "args": {
                "allocation": i, "address": format!("{:#x}", a.address), "bytes": a.size, "block": a.block,
                "ideal_offset": ideal.offsets[i], "first": a.first, "last": a.last,
                "origin": match a.origin { Origin::Traced => "traced", Origin::BeforeTrace => "before_trace", Origin::Standing => "standing" },
                "frames": shown,
            },
        }));
    }
    let other = json!({
        "generator": "memplan snapshot", "source": s.source, "device": t.device,
        "max_reserved": t.max_reserved.bytes, "max_allocated": t.max_allocated.bytes,
        "ideal_arena": ideal.arena, "lower_bound": ideal.lower_bound, "alignment": ideal.alignment,
        "time_unit": "1 us on the viewer's axis = 1 trace event",
    });
    let mut out = String::from("{\"traceEvents\": [\n");
    for (i, event) in events.iter().enumerate() {
        out.push_str(&event.to_string());
        out.push_str(if i + 1 < events.len() { ",\n" } else { "\n" });
    }
    out.push_str("],\n\"otherData\": ");
    out.push_str(&other.to_string());
    out.push_str("\n}\n");
    out
}

/// Frames named in each allocation's trace event (the user's first).
const FRAMES_IN_TRACE: usize = 12;
