//! A picture of the arena: x is the schedule step, y the offset (0 at the bottom), one
//! rectangle per buffer, coloured by class.
//!
//! The file is self-contained SVG 1.1 (no scripts, no external fonts or images; CSS in one
//! `<style>` element) drawn on a fixed 1200 × 720 viewBox, so it reads the same at 10 and
//! at 10000 buffers: every buffer keeps its own `<rect>` (in `<g id="buffers">`, in buffer
//! order) with its hover text in `<title>` (values, ops, bytes, offset, live range, source
//! line), and a rectangle thinner than the minimum drawn size gets that size so it stays
//! visible. The live bytes at each step (whose top is the lower bound) are drawn as a line
//! over the buffers (with more steps than pixel columns, the most in each column), the peak step as a dashed line with its label, and a legend names the
//! classes with their bytes. Output is deterministic: coordinates have two decimals and
//! everything is in buffer, class or step order.

use std::fmt::Write;

use crate::analysis::classes::Class;
use crate::bytes::format_bytes;
use crate::ir::graph::ValueDef;
use crate::plan::align_up;
use crate::report::{Report, Subject, live_bytes};

const WIDTH: f64 = 1200.0;
const HEIGHT: f64 = 720.0;
/// The plot area: left, top, width, height.
const PLOT: (f64, f64, f64, f64) = (96.0, 72.0, 850.0, 590.0);
/// The smallest width or height a buffer is drawn with.
const MIN_SIZE: f64 = 0.6;
/// Values named in one buffer's hover text before "and N more".
const HOVER_VALUES: usize = 4;

/// The colour of each class (Okabe–Ito, readable by colour-blind people), in `Class::ALL`
/// order.
pub const COLOURS: [(Class, &str); 6] = [
    (Class::Param, "#0072B2"),
    (Class::Input, "#E69F00"),
    (Class::State, "#CC79A7"),
    (Class::Grad, "#D55E00"),
    (Class::Activation, "#009E73"),
    (Class::Temp, "#8C8C8C"),
];

/// The SVG of `subject`'s arena (`report` is `Report::new` of it).
pub fn render(subject: &Subject, report: &Report) -> String {
    let plan = &subject.plan;
    let steps = plan.schedule.len().max(1) as f64;
    let arena = plan.arena_bytes.max(1) as f64;
    let (left, top, width, height) = PLOT;
    let x = |t: usize| left + t as f64 * width / steps;
    let y = |bytes: u64| top + height - (bytes as f64 / arena).min(1.0) * height;

    let mut out = String::with_capacity(400 + plan.buffers.len() * 320);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        "<desc>memplan arena of @{}: x = schedule step, y = offset; one rect per buffer in g#buffers</desc>",
        escape(&report.step)
    );
    out.push_str("<style>");
    for (class, colour) in COLOURS {
        let _ = write!(out, ".{}{{fill:{colour}}}", class.name());
    }
    out.push_str("#buffers rect.e{stroke:#fff;stroke-width:.5}#buffers rect:hover{stroke:#000;stroke-width:1.5}</style>\n");
    let _ = writeln!(out, r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>"##);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="24" font-size="15" font-weight="bold">@{}: arena {}, lower bound {} (ratio {:.4})</text>"#,
        escape(&report.step),
        format_bytes(report.arena_bytes),
        format_bytes(report.lower_bound),
        report.ratio
    );
    let _ = writeln!(
        out,
        r##"<text x="{left}" y="42" fill="#444">{} buffers over {} schedule steps, alignment {} B; hover a buffer for its values</text>"##,
        report.buffers.len(),
        plan.schedule.len(),
        report.alignment
    );
    let _ = writeln!(out, r##"<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="#f4f4f4"/>"##);
    axes(&mut out, plan.schedule.len(), plan.arena_bytes, &x, &y);

    out.push_str("<g id=\"buffers\">\n");
    for (row, buffer) in report.buffers.iter().zip(&plan.buffers) {
        let size = align_up(buffer.size, plan.alignment).unwrap_or(u64::MAX);
        let (x0, x1) = (x(buffer.first), x(buffer.last.saturating_add(1)));
        let (y_low, y_high) = (y(buffer.offset), y(buffer.offset.saturating_add(size)));
        let w = (x1 - x0).max(MIN_SIZE);
        let h = (y_low - y_high).max(MIN_SIZE);
        let edge = if w >= 4.0 && h >= 4.0 { " e" } else { "" };
        let _ = writeln!(
            out,
            r#"<rect class="{}{edge}" x="{x0:.2}" y="{:.2}" width="{w:.2}" height="{h:.2}"><title>{}</title></rect>"#,
            row.class.name(),
            (y_low - h).max(top - MIN_SIZE),
            escape(&hover(subject, row, buffer))
        );
    }
    out.push_str("</g>\n");

    // Live bytes per step: a step line whose top is the lower bound. With more steps than
    // pixels, each pixel column shows the most bytes live in its steps.
    let live = live_bytes(plan);
    let columns = (width as usize).min(live.len());
    let mut points = String::new();
    let mut last = None;
    for c in 0..columns {
        let (t0, t1) = (c * live.len() / columns, (c + 1) * live.len() / columns);
        let bytes = live[t0..t1].iter().copied().max().unwrap_or(0);
        if last != Some(bytes) {
            if let Some(previous) = last {
                let _ = write!(points, "{:.2},{:.2} ", x(t0), y(previous));
            }
            let _ = write!(points, "{:.2},{:.2} ", x(t0), y(bytes));
            last = Some(bytes);
        }
    }
    if let Some(bytes) = last {
        let _ = write!(points, "{:.2},{:.2}", x(live.len()), y(bytes));
    }
    let _ = writeln!(
        out,
        r##"<polyline id="live" points="{}" fill="none" stroke="#000" stroke-width="{}"><title>bytes live at each step (aligned); the highest is the lower bound</title></polyline>"##,
        points.trim_end(),
        // Thinner where steps are packed tighter than 2 px, so a busy line stays a line.
        if live.len() as f64 > width / 2.0 { "0.6" } else { "1.2" }
    );

    if let Some(t) = report.peak.position {
        let px = (x(t) + x(t + 1)) / 2.0;
        let _ = writeln!(
            out,
            r##"<line id="peak" x1="{px:.2}" y1="{top}" x2="{px:.2}" y2="{:.2}" stroke="#000" stroke-width="1.5" stroke-dasharray="5,3"/>"##,
            top + height
        );
        let anchor = if px > left + width / 2.0 { ("end", px - 4.0) } else { ("start", px + 4.0) };
        let op = report.peak.op.as_deref().unwrap_or("");
        let _ = writeln!(
            out,
            r##"<text x="{:.2}" y="{}" text-anchor="{}" font-weight="bold" stroke="#fff" stroke-width="3" paint-order="stroke">peak {} at step {t}<title>{}</title></text>"##,
            anchor.1,
            top - 5.0,
            anchor.0,
            format_bytes(report.peak.bytes),
            escape(op)
        );
    }
    legend(&mut out, report);
    out.push_str("</svg>\n");
    out
}

/// Axis lines, ticks, grid and labels.
fn axes(out: &mut String, steps: usize, arena: u64, x: &dyn Fn(usize) -> f64, y: &dyn Fn(u64) -> f64) {
    let (left, top, width, height) = PLOT;
    let bottom = top + height;
    let step = usize::try_from(nice_step(steps as u64, 10)).unwrap_or(usize::MAX);
    let mut t = 0;
    while t <= steps {
        let tx = x(t);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.2}" y1="{bottom}" x2="{tx:.2}" y2="{:.2}" stroke="#000"/><text x="{tx:.2}" y="{:.2}" text-anchor="middle">{t}</text>"##,
            bottom + 5.0,
            bottom + 19.0
        );
        t = match t.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.2}" y="{:.2}" text-anchor="middle">schedule step</text>"#,
        left + width / 2.0,
        bottom + 38.0
    );
    byte_axis(out, arena, y, left, width);
    let _ = writeln!(out, r##"<line x1="{left}" y1="{top}" x2="{:.2}" y2="{top}" stroke="#000"/>"##, left + width);
    let _ = writeln!(
        out,
        r##"<text transform="translate(18 {:.2}) rotate(-90)" text-anchor="middle">offset in the arena</text>"##,
        top + height / 2.0
    );
    let _ = writeln!(
        out,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#000"/><line x1="{left}" y1="{bottom}" x2="{:.2}" y2="{bottom}" stroke="#000"/>"##,
        left + width
    );
}

/// The byte axis of a picture: gridlines and labels from 0 to `top` bytes in the largest
/// binary unit at most `top`, about 8 steps; `y` maps bytes to the vertical coordinate, the
/// plot spans `left..left + width`. Plans' and snapshots' pictures share it.
pub fn byte_axis(out: &mut String, top: u64, y: &dyn Fn(u64) -> f64, left: f64, width: f64) {
    const UNITS: [(u64, &str); 5] = [(1, "B"), (1 << 10, "KiB"), (1 << 20, "MiB"), (1 << 30, "GiB"), (1 << 40, "TiB")];
    let (unit, unit_name) = UNITS.iter().rev().find(|(u, _)| *u <= top.max(1)).copied().unwrap_or(UNITS[0]);
    let step = byte_step(top, unit, 8);
    let mut bytes = 0u64;
    while bytes <= top {
        let ty = y(bytes);
        let label = format!("{:.2}", bytes as f64 / unit as f64);
        let label = label.trim_end_matches('0').trim_end_matches('.');
        let _ = writeln!(
            out,
            r##"<line x1="{:.2}" y1="{ty:.2}" x2="{:.2}" y2="{ty:.2}" stroke="#ddd"/><text x="{:.2}" y="{:.2}" text-anchor="end">{label} {unit_name}</text>"##,
            left - 5.0,
            left + width,
            left - 8.0,
            ty + 4.0
        );
        bytes = match bytes.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
}


/// A tick step in bytes for `0..=arena` with fewer than `ticks` ticks: a round number of
/// `unit`s (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, ... of them; at least one byte).
pub fn byte_step(arena: u64, unit: u64, ticks: u64) -> u64 {
    const FRACTIONS: [(u64, u64); 4] = [(1, 10), (1, 5), (1, 4), (1, 2)];
    for (num, den) in FRACTIONS {
        let step = (unit / den).saturating_mul(num);
        if step > 0 && arena / step < ticks {
            return step;
        }
    }
    nice_step(arena / unit.max(1), ticks).saturating_mul(unit)
}

/// A tick step for `range` with fewer than `ticks` ticks: 1, 2 or 5 times a power of ten.
pub fn nice_step(range: u64, ticks: u64) -> u64 {
    let mut base = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            let step = base.saturating_mul(m);
            if range / step < ticks {
                return step;
            }
        }
        base = base.saturating_mul(10);
    }
}

/// The legend: one swatch per class with its buffers' bytes (over the whole step, as a
/// note under it says), the live line and the peak.
fn legend(out: &mut String, report: &Report) {
    let (left, top, width, _) = PLOT;
    let lx = left + width + 20.0;
    let _ = writeln!(out, r#"<g id="legend"><text x="{lx}" y="{top}" font-weight="bold">buffers by class, whole step</text>"#);
    for (i, (class, _)) in COLOURS.iter().enumerate() {
        let bytes = report.classes.iter().find(|c| c.class == *class).map_or(Some(0), |c| c.buffers);
        let count = report.buffers.iter().filter(|b| b.class == *class).count();
        let ly = top + 14.0 + i as f64 * 34.0;
        let _ = writeln!(
            out,
            r##"<rect class="{}" x="{lx}" y="{ly}" width="16" height="16"/><text x="{:.2}" y="{:.2}">{} ({count})</text><text x="{:.2}" y="{:.2}" fill="#444" font-size="11">{}</text>"##,
            class.name(),
            lx + 22.0,
            ly + 8.0,
            class.name(),
            lx + 22.0,
            ly + 22.0,
            crate::report::text::total_bytes(bytes)
        );
    }
    let ly = top + 14.0 + COLOURS.len() as f64 * 34.0 + 6.0;
    let _ = writeln!(
        out,
        r##"<line x1="{lx}" y1="{ly}" x2="{:.2}" y2="{ly}" stroke="#000" stroke-width="1.2"/><text x="{:.2}" y="{:.2}">bytes live</text>"##,
        lx + 16.0,
        lx + 22.0,
        ly + 4.0
    );
    let _ = writeln!(
        out,
        r##"<line x1="{lx}" y1="{:.2}" x2="{:.2}" y2="{:.2}" stroke="#000" stroke-width="1.5" stroke-dasharray="5,3"/><text x="{:.2}" y="{:.2}">peak step</text>"##,
        ly + 20.0,
        lx + 16.0,
        ly + 20.0,
        lx + 22.0,
        ly + 24.0
    );
    // The bytes above add up every buffer of a class over the step: say so, so nobody
    // reads them as bytes live at once.
    let _ = writeln!(
        out,
        r##"<text x="{lx}" y="{:.2}" fill="#444" font-size="10">bytes: all of a class's buffers over</text><text x="{lx}" y="{:.2}" fill="#444" font-size="10">the step, not live at once (buffers</text><text x="{lx}" y="{:.2}" fill="#444" font-size="10">share offsets; the sum can exceed</text><text x="{lx}" y="{:.2}" fill="#444" font-size="10">the arena)</text></g>"##,
        ly + 50.0,
        ly + 63.0,
        ly + 76.0,
        ly + 89.0
    );
}

/// The hover text of one buffer: what, where, when, and each value with its op and line.
fn hover(subject: &Subject, row: &crate::report::BufferRow, buffer: &crate::plan::Buffer) -> String {
    let graph = &subject.graph;
    let mut text = format!(
        "{} ({}): {} at offset {}\nlive at steps {}..={}",
        row.buffer,
        row.class,
        format_bytes(row.bytes),
        row.offset,
        row.first,
        row.last
    );
    for &v in buffer.values.iter().take(HOVER_VALUES) {
        let value = &graph.values[v];
        let made_by = match value.def {
            ValueDef::Arg(role) => format!("a {} argument", role.name()),
            ValueDef::Op { op, .. } => format!("written by {}", graph.describe_op(op)),
        };
        let _ = write!(text, "\n{}: {}, {made_by}", graph.value_name(v), value.ty);
        if let Some(loc) = subject.locs.value(v) {
            let _ = write!(text, " at {loc}");
        }
    }
    if buffer.values.len() > HOVER_VALUES {
        let _ = write!(text, "\n... and {} more values", buffer.values.len() - HOVER_VALUES);
    }
    text
}

/// `s` with XML's special characters escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(nice_step(17, 10), 2);
        assert_eq!(nice_step(1102, 10), 200);
        assert_eq!(nice_step(0, 10), 1);
        assert_eq!(nice_step(12, 8), 2);
        assert_eq!(nice_step(u64::MAX, 8), 5_000_000_000_000_000_000);
        assert_eq!(byte_step(1883648, 1 << 20, 8), 1 << 18);
        assert_eq!(byte_step(13033699840, 1 << 30, 8), 2 << 30);
        assert_eq!(byte_step(700, 1, 8), 100);
    }

    #[test]
    fn xml_is_escaped() {
        assert_eq!(escape(r#"a<b & "c">'"#), "a&lt;b &amp; &quot;c&quot;&gt;&apos;");
    }
}
