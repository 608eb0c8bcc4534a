//! The report of `memplan snapshot`: text for people, JSON for scripts.
//!
//! Both say the same things, in PyTorch's terms: the reserved and allocated peaks, the arena
//! an ideal placement of the same allocations needs and its lower bound, what is live at the
//! allocated peak (largest first, with its frames: the user's own code first), the
//! fragmentation at the reserved peak, out-of-memory events, and notes on every assumption
//! the replay made (`timeline.rs`). The JSON's keys are stable (`schema_version` says when
//! they change) and bytes are integers; docs/CLI.md lists them. Output is deterministic:
//! everything is in trace, size or address order.

use std::fmt::Write;

use serde_json::{Value, json};

use crate::bytes::{format_bytes, format_short};
use crate::formats::torch_snapshot::timeline::{BLOCK_ROUNDING, Ideal, Origin, Timeline};
use crate::formats::torch_snapshot::{Frame, Snapshot, StackId};

/// The JSON's version: bumped when a key changes meaning or goes away.
pub const SCHEMA_VERSION: u64 = 1;

/// Frames shown under each live allocation in the text.
pub const FRAMES_SHOWN: usize = 3;

/// Everything a report says, borrowed.
pub struct Subject<'a> {
    /// The file as the user named it.
    pub source: &'a str,
    pub snapshot: &'a Snapshot,
    pub timeline: &'a Timeline,
    pub ideal: &'a Ideal,
}

/// "after event 7 (+0.001200 s)", or "at the trace's start".
fn when(t: &Timeline, position: usize) -> String {
    if position == 0 {
        return "at the trace's start".to_string();
    }
    match t.elapsed_us(position) {
        Some(us) => format!("after event {position}, +{}.{:06} s", us.div_euclid(1_000_000), us.rem_euclid(1_000_000)),
        None => format!("after event {position}"),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `frames` with the user's own frames first (each group innermost first).
pub fn user_first(frames: &[Frame]) -> Vec<&Frame> {
    frames.iter().filter(|f| f.is_user()).chain(frames.iter().filter(|f| !f.is_user())).collect()
}

fn frame_text(f: &Frame) -> String {
    format!("{}:{} in {}", f.filename, f.line, f.name)
}

/// The text report; `top` limits the allocations and segments listed.
pub fn text(s: &Subject<'_>, top: usize) -> String {
    let (t, ideal) = (s.timeline, s.ideal);
    let mut out = String::new();
    let w = &mut out;
    let protocol = s.snapshot.protocol.map(|p| format!(" (pickle protocol {p})")).unwrap_or_default();
    let _ = writeln!(w, "{}: PyTorch memory snapshot{protocol}, device {}, {}", s.source, t.device, plural(t.events, "trace event", "trace events"));
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "your step peaked at {} reserved ({}) and {} allocated ({})",
        format_bytes(t.max_reserved.bytes),
        when(t, t.max_reserved.at),
        format_bytes(t.max_allocated.bytes),
        when(t, t.max_allocated.at)
    );
    let ratio = if t.max_reserved.bytes == 0 { String::new() } else { format!(": {:.2}x the reserved peak", ideal.arena as f64 / t.max_reserved.bytes as f64) };
    let _ = writeln!(w, "its allocations fit in {} (lower bound {}){ratio}", format_bytes(ideal.arena), format_bytes(ideal.lower_bound));
    let _ = writeln!(
        w,
        "  (memplan's offset solver, each allocation live from its alloc to its free, sizes rounded up to {} B; optimal: {})",
        ideal.alignment,
        if ideal.proved_optimal { "proved" } else { "not proved" }
    );
    let last = t.events;
    let _ = writeln!(w, "at the end: {} reserved, {} allocated", format_bytes(t.reserved[last]), format_bytes(t.allocated[last]));
    let c = &t.counts;
    let mut kinds = vec![format!("{} traced", c.traced)];
    if c.before_trace > 0 {
        kinds.push(format!("{} allocated before the trace began (freed in it)", c.before_trace));
    }
    if c.standing > 0 {
        kinds.push(format!("{} live throughout (in the snapshot, no alloc in the trace)", c.standing));
    }
    let _ = writeln!(w, "allocations: {}", kinds.join(", "));

    // What is live at the allocated peak.
    let _ = writeln!(w);
    let live = t.live_at(t.max_allocated.at);
    let _ = writeln!(
        w,
        "live at the allocated peak ({}): {}, {}, largest first",
        when(t, t.max_allocated.at),
        plural(live.len(), "allocation", "allocations"),
        format_bytes(t.max_allocated.bytes)
    );
    if !live.is_empty() {
        let rows: Vec<[String; 3]> = live
            .iter()
            .take(top)
            .map(|&i| {
                let a = &t.allocations[i];
                [format_short(a.size), format!("{:#x}", a.address), format!("{}..={}", a.first, a.last)]
            })
            .collect();
        let header = ["bytes".to_string(), "address".to_string(), "live".to_string()];
        let widths: Vec<usize> = (0..3).map(|k| rows.iter().chain([&header]).map(|r| r[k].len()).max().unwrap_or(0)).collect();
        let indent = 2 + widths.iter().map(|w| w + 2).sum::<usize>();
        let _ = writeln!(w, "  {:>w0$}  {:<w1$}  {:<w2$}  frames (your code first)", header[0], header[1], header[2], w0 = widths[0], w1 = widths[1], w2 = widths[2]);
        for (row, &i) in rows.iter().zip(&live) {
            let a = &t.allocations[i];
            let frames = user_first(s.snapshot.stack(a.frames));
            let mut lines: Vec<String> = frames.iter().take(FRAMES_SHOWN).map(|f| frame_text(f)).collect();
            if lines.is_empty() {
                lines.push("(no frames)".to_string());
            }
            if frames.len() > FRAMES_SHOWN {
                lines.push(format!("... {} more frames", frames.len() - FRAMES_SHOWN));
            }
            match a.origin {
                Origin::Traced => {}
                Origin::BeforeTrace => lines[0].push_str("  [allocated before the trace; frames of its free]"),
                Origin::Standing => lines[0].push_str("  [allocated before the trace]"),
            }
            let _ = writeln!(w, "  {:>w0$}  {:<w1$}  {:<w2$}  {}", row[0], row[1], row[2], lines[0], w0 = widths[0], w1 = widths[1], w2 = widths[2]);
            for line in &lines[1..] {
                let _ = writeln!(w, "{:indent$}{line}", "");
            }
        }
        if live.len() > top {
            let rest: u64 = live[top..].iter().map(|&i| t.allocations[i].size).sum();
            let _ = writeln!(w, "  ... and {} more, {}", live.len() - top, format_bytes(rest));
        }
    }

    // Fragmentation at the reserved peak.
    let f = &t.fragmentation;
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "fragmentation at the reserved peak ({}): reserved {} - allocated {} = {} not allocated",
        when(t, f.at),
        format_short(f.reserved),
        format_short(f.allocated),
        format_short(f.reserved.saturating_sub(f.allocated))
    );
    let split: Vec<_> = f.segments.iter().filter(|s| s.split()).collect();
    let unused: Vec<_> = f.segments.iter().filter(|s| s.blocks == 0).collect();
    let largest = split.iter().map(|s| s.largest_free).max().unwrap_or(0);
    let _ = writeln!(w, "  {:<40} {}", format!("rounding requests up to {BLOCK_ROUNDING} B blocks"), format_short(f.rounding));
    let _ = writeln!(
        w,
        "  {:<40} {}{}",
        format!("free in {}", plural(split.len(), "split segment", "split segments")),
        format_short(f.free_split),
        if split.is_empty() { String::new() } else { format!(" (the largest free piece is {}: a larger request needs a new segment)", format_short(largest)) }
    );
    let _ = writeln!(
        w,
        "  {:<40} {}{}",
        format!("free in {}", plural(unused.len(), "unused segment", "unused segments")),
        format_short(f.free_unused),
        match unused.len() {
            0 => "",
            1 => " (torch.cuda.empty_cache() would release it)",
            _ => " (torch.cuda.empty_cache() would release them)",
        }
    );
    if !f.segments.is_empty() {
        let header = ["segment", "bytes", "pool", "blocks", "allocated", "free", "largest free", ""].map(String::from);
        let mut rows = vec![header];
        for seg in f.segments.iter().take(top) {
            let state = if seg.blocks == 0 {
                "unused"
            } else if seg.free > 0 {
                "split"
            } else {
                "full"
            };
            rows.push([
                format!("{:#x}", seg.address),
                format_short(seg.size),
                format!("{}{}", seg.pool.name(), if seg.expandable { " (expandable)" } else { "" }),
                seg.blocks.to_string(),
                format_short(seg.allocated),
                format_short(seg.free),
                format_short(seg.largest_free),
                state.to_string(),
            ]);
        }
        let widths: Vec<usize> = (0..8).map(|k| rows.iter().map(|r| r[k].len()).max().unwrap_or(0)).collect();
        for row in &rows {
            let mut line = String::new();
            for (k, cell) in row.iter().enumerate() {
                if k == 0 || k == 2 || k == 7 {
                    let _ = write!(line, "  {cell:<width$}", width = widths[k]);
                } else {
                    let _ = write!(line, "  {cell:>width$}", width = widths[k]);
                }
            }
            let _ = writeln!(w, "{}", line.trim_end());
        }
        if f.segments.len() > top {
            let more = f.segments.len() - top;
            let _ = writeln!(w, "  ... and {more} more {}", if more == 1 { "segment" } else { "segments" });
        }
    }

    if let Some(first) = t.ooms.first() {
        let _ = writeln!(w);
        let free = first.device_free.map(|b| format!(" with {} free on the device", format_short(b))).unwrap_or_default();
        let _ = writeln!(
            w,
            "out of memory: {}; the first {}: asked for {}{free} (reserved {}, allocated {} there)",
            plural(t.ooms.len(), "event", "events"),
            when(t, first.at),
            format_short(first.size),
            format_short(t.reserved[first.at]),
            format_short(t.allocated[first.at])
        );
        if let Some(frame) = user_first(s.snapshot.stack(first.frames)).first() {
            let _ = writeln!(w, "  at {}", frame_text(frame));
        }
    }

    let notes = notes(s);
    if !notes.is_empty() {
        let _ = writeln!(w);
        let _ = writeln!(w, "notes:");
        for note in notes {
            let _ = writeln!(w, "  - {note}");
        }
    }
    out
}

/// Every assumption the replay made and every disagreement it met, as sentences.
pub fn notes(s: &Subject<'_>) -> Vec<String> {
    let (t, c) = (s.timeline, &s.timeline.counts);
    let mut notes = Vec::new();
    if t.devices.len() > 1 {
        let list: Vec<String> = t.devices.iter().map(ToString::to_string).collect();
        notes.push(format!("devices with data: {}; this is device {} (--device N for another)", list.join(", "), t.device));
    }
    if t.events == 0 {
        notes.push("the trace has no events for this device (was _record_memory_history() on?): the figures are the snapshot's state alone".into());
    }
    if c.before_trace > 0 {
        notes.push(format!(
            "{} in the trace with no alloc event before (the ring buffer dropped it): allocated before the trace began, counted live from its start, with the frames of the free",
            plural(c.before_trace, "allocation is freed", "allocations are freed")
        ));
    }
    if c.standing > 0 {
        notes.push(format!(
            "{} in the snapshot without an alloc event in the trace: allocated before the trace began, counted live over all of it",
            plural(c.standing, "block is live", "blocks are live")
        ));
    }
    if c.open_unmatched > 0 && s.snapshot.has_segments {
        notes.push(format!(
            "{} no free in the trace and are not among the snapshot's live blocks: counted live to the end",
            plural(c.open_unmatched, "allocation has", "allocations have")
        ));
    }
    if c.frees_requested {
        notes.push("the trace has no free_completed events: allocations end at free_requested".into());
    }
    if c.realloc > 0 {
        notes.push(format!("{} an address still allocated: the earlier allocation counts as freed there", plural(c.realloc, "alloc event reuses", "alloc events reuse")));
    }
    if !s.snapshot.has_segments {
        notes.push("the file has no `segments` list: reserved counts only the segments the trace shows".into());
    }
    if c.segment_mismatches > 0 {
        notes.push(format!("{} with the snapshot's segments: reserved follows the trace", plural(c.segment_mismatches, "segment event disagrees", "segment events disagree")));
    }
    if c.over_reserved > 0 {
        notes.push(format!("allocated exceeds reserved at {}: the trace and the segments disagree", plural(c.over_reserved, "position", "positions")));
    }
    let f = &t.fragmentation;
    if f.outside > 0 {
        notes.push(format!("{} ({}) live at the reserved peak lie in no known segment", plural(f.outside, "allocation", "allocations"), format_short(f.outside_bytes)));
    }
    if c.other_actions > 0 {
        notes.push(format!("{} of actions memplan does not use (annotate, ...) skipped", plural(c.other_actions, "event", "events")));
    }
    notes
}

fn frames_json(snapshot: &Snapshot, id: StackId) -> Value {
    Value::Array(
        snapshot.stack(id).iter().map(|f| json!({"filename": &*f.filename, "line": f.line, "name": &*f.name, "user": f.is_user()})).collect(),
    )
}

/// The JSON report (every live allocation and segment, not only `--top`).
pub fn json(s: &Subject<'_>) -> String {
    let (t, ideal, snapshot) = (s.timeline, s.ideal, s.snapshot);
    let live: Vec<Value> = t
        .live_at(t.max_allocated.at)
        .into_iter()
        .map(|i| {
            let a = &t.allocations[i];
            json!({
                "address": a.address, "bytes": a.size, "block": a.block, "first": a.first, "last": a.last,
                "origin": match a.origin { Origin::Traced => "traced", Origin::BeforeTrace => "before_trace", Origin::Standing => "standing" },
                "ideal_offset": ideal.offsets[i], "frames": frames_json(snapshot, a.frames),
            })
        })
        .collect();
    let f = &t.fragmentation;
    let segments: Vec<Value> = f
        .segments
        .iter()
        .map(|seg| {
            json!({
                "address": seg.address, "bytes": seg.size, "pool": match seg.pool.name() { "?" => Value::Null, name => json!(name) },
                "expandable": seg.expandable, "blocks": seg.blocks, "allocated": seg.allocated, "free": seg.free,
                "largest_free": seg.largest_free, "split": seg.split(),
            })
        })
        .collect();
    let ooms: Vec<Value> = t
        .ooms
        .iter()
        .map(|o| json!({"at": o.at, "bytes": o.size, "device_free": o.device_free, "frames": frames_json(snapshot, o.frames)}))
        .collect();
    let c = &t.counts;
    let last = t.events;
    let report = json!({
        "schema_version": SCHEMA_VERSION,
        "source": s.source,
        "pickle_protocol": snapshot.protocol,
        "device": t.device,
        "devices": t.devices,
        "events": t.events,
        "max_reserved": t.max_reserved.bytes,
        "max_reserved_at": t.max_reserved.at,
        "max_allocated": t.max_allocated.bytes,
        "max_allocated_at": t.max_allocated.at,
        "reserved_at_end": t.reserved[last],
        "allocated_at_end": t.allocated[last],
        "alignment": ideal.alignment,
        "ideal_arena": ideal.arena,
        "lower_bound": ideal.lower_bound,
        "ideal_proved_optimal": ideal.proved_optimal,
        "allocations": {
            "traced": c.traced, "before_trace": c.before_trace, "standing": c.standing,
            "open_unmatched": c.open_unmatched,
        },
        "live_at_peak": live,
        "fragmentation": {
            "at": f.at, "reserved": f.reserved, "allocated": f.allocated,
            "not_allocated": f.reserved.saturating_sub(f.allocated), "rounding": f.rounding,
            "free_in_split_segments": f.free_split, "free_in_unused_segments": f.free_unused,
            "outside_segments": f.outside, "outside_segments_bytes": f.outside_bytes, "segments": segments,
        },
        "ooms": ooms,
        "notes": notes(s),
    });
    let mut text = serde_json::to_string_pretty(&report).expect("a JSON value serialises");
    text.push('\n');
    text
}
