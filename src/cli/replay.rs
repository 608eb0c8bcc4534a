//! `memplan replay TRACE`: replay an allocation trace (`formats::alloc_trace`, written by
//! `memplan_torch predict`) through the model of PyTorch's CUDA caching allocator
//! (`caching`) and say what `torch.cuda.max_memory_allocated()` and
//! `max_memory_reserved()` will be, what is live at the peak, how the reserved memory is cut
//! into segments, and the arena the same allocations need when memplan places them.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use memplan::bytes::format_bytes;
use memplan::caching::{self, Config, Event, Replay, round_size};
use memplan::formats::alloc_trace::{AllocTrace, parse_alloc_trace};
use memplan::solve::offsets::{self, Live, SolveOptions};

use super::step::Source;
use super::{Exit, Failure, out, outln};

#[derive(clap::Args)]
pub struct Args {
    /// The allocation trace (`alloc ID BYTES [LABEL]`, `free ID`, `reset` lines).
    file: PathBuf,
    /// Model `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    #[arg(long)]
    expandable_segments: bool,
    /// Model `max_split_size_mb` (in bytes here): blocks this large are never split.
    #[arg(long, value_name = "BYTES")]
    max_split_size: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// How many storages live at the peak to list (text format).
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// The arena memplan's offset solver gives the allocations live after the last reset
/// (each a block as PyTorch rounds it), and the lower bound no placement beats.
struct Ideal {
    arena: u64,
    lower_bound: u64,
}

pub fn run(Args { file, expandable_segments, max_split_size, format, top }: Args) -> Result<(), Failure> {
    let source = Source::read(&file)?;
    let trace = parse_alloc_trace(&source.text).map_err(|e| source.failure(&e, Exit::BadInput))?;
    let config = Config { expandable_segments, max_split_size };
    let replay = caching::replay(&trace.events, config).map_err(|e| {
        let line = match &e {
            caching::ReplayError::LiveTwice { event, .. } | caching::ReplayError::NotLive { event, .. } | caching::ReplayError::Overflow { event } => trace.lines[*event],
        };
        Failure::bad_input(format_args!("{}:{line}: {e}", source.file))
    })?;
    let ideal = ideal(&trace).ok_or_else(|| Failure::bad_input(format_args!("{}: the live storages add up to more than 2^64 - 1 bytes", source.file)))?;
    match format {
        Format::Text => text(&source.file, &trace, &replay, &ideal, config, top),
        Format::Json => out!("{}", json(&trace, &replay, &ideal, config)),
    }
    Ok(())
}

/// The label of the last allocation of storage `id` (ids are reused after a free).
fn label_of(trace: &AllocTrace, id: u32) -> &str {
    let at = trace.events.iter().rposition(|e| matches!(e, Event::Alloc { id: a, .. } if *a == id));
    at.map_or("", |i| trace.labels[i].as_str())
}

fn ideal(trace: &AllocTrace) -> Option<Ideal> {
    let window = trace.events.iter().rposition(|e| *e == Event::ResetPeaks).map_or(0, |i| i + 1);
    let mut open: std::collections::HashMap<u32, (usize, u64)> = std::collections::HashMap::new();
    let mut intervals = Vec::new();
    for (at, event) in trace.events.iter().enumerate() {
        match *event {
            Event::Alloc { id, size } => {
                open.insert(id, (at, round_size(size)?));
            }
            Event::Free { id } => {
                if let Some((from, size)) = open.remove(&id)
                    && at >= window
                {
                    intervals.push(Live { first: from.max(window), last: at, size });
                }
            }
            Event::ResetPeaks => {}
        }
    }
    let end = trace.events.len();
    intervals.extend(open.into_values().map(|(from, size)| Live { first: from.max(window), last: end, size }));
    intervals.sort_by_key(|l| (l.first, l.last, l.size));
    let lower_bound = offsets::lower_bound(&intervals)?;
    let options = SolveOptions { time_limit: Duration::from_secs(2), ..SolveOptions::default() };
    let arena = offsets::solve(&intervals, &options).ok()?.arena;
    Some(Ideal { arena, lower_bound })
}

fn text(file: &str, trace: &AllocTrace, r: &Replay, ideal: &Ideal, config: Config, top: usize) {
    let allocs = trace.events.iter().filter(|e| matches!(e, Event::Alloc { .. })).count();
    let frees = trace.events.iter().filter(|e| matches!(e, Event::Free { .. })).count();
    let resets = trace.events.iter().filter(|e| **e == Event::ResetPeaks).count();
    outln!("{file}: {allocs} allocations, {frees} frees{}", if resets > 0 { ", peaks counted after the last reset" } else { "" });
    outln!("PyTorch's CUDA caching allocator ({}):", settings(config));
    outln!("  max_memory_allocated  {}", format_bytes(r.max_allocated));
    outln!("  max_memory_reserved   {}", format_bytes(r.max_reserved));
    outln!("  requested at most     {}  (before rounding to 512-byte blocks)", format_bytes(r.max_requested));
    let reserved: u64 = r.segments_at_peak.iter().map(|s| s.size).sum();
    let split = r.segments_at_peak.iter().filter(|s| s.blocks > 1).count();
    outln!("  at the allocated peak {} reserved in {} segments ({split} split), {} of it cached but free", format_bytes(reserved), r.segments_at_peak.len(), format_bytes(reserved - r.max_allocated.min(reserved)));
    outln!("  cudaMalloc calls      {} over the trace", r.segment_allocs);
    outln!("memplan's placement of the same allocations:");
    outln!("  arena                 {}  (lower bound {})", format_bytes(ideal.arena), format_bytes(ideal.lower_bound));
    outln!("live at the allocated peak (largest {} of {}):", top.min(r.live_at_peak.len()), r.live_at_peak.len());
    for &(id, requested, block) in r.live_at_peak.iter().take(top) {
        outln!("  {:>24}  {:>10} requested  {}", format_bytes(block), requested, label_of(trace, id));
    }
}

fn settings(config: Config) -> String {
    let mut parts = vec![format!("expandable_segments {}", if config.expandable_segments { "on" } else { "off" })];
    if let Some(max) = config.max_split_size {
        parts.push(format!("max_split_size {}", format_bytes(max)));
    }
    parts.join(", ")
}

fn json(trace: &AllocTrace, r: &Replay, ideal: &Ideal, config: Config) -> String {
    use serde_json::json;
    let live: Vec<_> = r.live_at_peak.iter().map(|&(id, requested, block)| json!({"id": id, "requested": requested, "block": block, "label": label_of(trace, id)})).collect();
    let segments: Vec<_> = r
        .segments_at_peak
        .iter()
        .map(|s| json!({"pool": if s.small_pool { "small" } else { "large" }, "size": s.size, "allocated": s.allocated, "blocks": s.blocks, "largest_free": s.largest_free}))
        .collect();
    let document = json!({
        "allocator": {"expandable_segments": config.expandable_segments, "max_split_size": config.max_split_size},
        "max_memory_allocated": r.max_allocated,
        "max_memory_reserved": r.max_reserved,
        "max_requested": r.max_requested,
        "segment_allocs": r.segment_allocs,
        "ideal_arena": ideal.arena,
        "lower_bound": ideal.lower_bound,
        "live_at_peak": live,
        "segments_at_peak": segments,
    });
    let mut text = serde_json::to_string_pretty(&document).expect("a replay always serialises");
    text.push('\n');
    text
}
