//! `memplan snapshot FILE.pickle`: read a PyTorch CUDA memory snapshot
//! (`torch.cuda.memory._dump_snapshot`) and say, in PyTorch's terms, where the memory went:
//! the reserved and allocated peaks, what is live at the allocated peak and from which
//! lines, the fragmentation at the reserved peak, and the arena an ideal placement of the
//! same allocations needs (memplan's offset solver, checked independently as `alloc`
//! checks its placements). The pickle is read by memplan's own reader: plain data only,
//! never code (src/formats/pickle.rs).

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use memplan::formats::torch_snapshot::picture::SnapshotEmit;
use memplan::formats::torch_snapshot::render::{self, Subject};
use memplan::formats::torch_snapshot::{self, timeline};
use memplan::solve::offsets::SolveOptions;

use super::files::{read_bytes, write_named_files};
use super::flags::{SolverArg, parse_seconds};
use super::{Failure, out, outln};

#[derive(clap::Args)]
pub struct Args {
    /// The snapshot (`torch.cuda.memory._dump_snapshot("x.pickle")`).
    file: PathBuf,
    /// The device whose trace to read (default: the first with events or segments).
    #[arg(long, value_name = "N")]
    device: Option<usize>,
    /// How many live allocations and segments to list (text format).
    #[arg(long, default_value_t = 20, value_name = "N")]
    top: usize,
    /// Round each allocation up to N bytes (a power of two) for the ideal placement (PyTorch's blocks are multiples of 512 B).
    #[arg(long = "align", default_value_t = timeline::BLOCK_ROUNDING, value_name = "N")]
    alignment: u64,
    /// Output format (of stdout; see --emit for files).
    #[arg(long, value_enum, default_value_t = Format::Text, conflicts_with = "emit")]
    format: Format,
    /// Write these files into DIR (comma-separated: text, json, svg, trace, csv).
    #[arg(long, value_delimiter = ',', value_name = "FORMATS")]
    emit: Vec<SnapshotEmit>,
    /// The directory --emit writes to (created if missing; only memplan's own file names are written).
    #[arg(short = 'o', long = "output", default_value = "memplan-out", value_name = "DIR", requires = "emit")]
    output: PathBuf,
    /// Offset solver for the ideal placement (see `memplan alloc --help`).
    #[arg(long, value_enum, default_value_t = SolverArg::Auto)]
    solver: SolverArg,
    /// Seconds the exact offset search may take (auto, exact): a safety net; --search-nodes decides.
    #[arg(long = "time-limit", value_name = "SECS", default_value = "2", value_parser = parse_seconds)]
    time_limit: Duration,
    /// Nodes the exact offset search may visit (auto, exact); within it the answer is the same on every machine.
    #[arg(long = "search-nodes", value_name = "N", default_value_t = memplan::passes::DEFAULT_SEARCH_NODES)]
    search_nodes: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let Args { file, device, top, alignment, format, mut emit, output, solver, time_limit, search_nodes } = args;
    if !alignment.is_power_of_two() {
        return Err(Failure::bad_input(format_args!("--align {alignment} is not a power of two")));
    }
    let bytes = read_bytes(&file)?;
    let source = file.display().to_string();
    let bad = |e: torch_snapshot::SnapshotError| Failure::bad_input(format_args!("{source}: {e}"));
    let snapshot = torch_snapshot::parse(&bytes).map_err(bad)?;
    drop(bytes);
    let timeline = timeline::replay(&snapshot, device).map_err(bad)?;
    let options = SolveOptions { solver: solver.solver(), capacity: None, time_limit, search_nodes, halt_heuristics: false };
    let ideal = timeline::ideal(&timeline, alignment, &options).map_err(bad)?;
    // The placement is checked by the independent checker before anyone reads it.
    if let Err(violations) = memplan::checker::check_offsets(&ideal.intervals(&timeline), &ideal.offsets, None) {
        return Err(Failure::bug(format_args!("the checker rejected the ideal placement of {source}'s allocations"), format_args!("{violations}\n")));
    }
    let subject = Subject { source: &source, snapshot: &snapshot, timeline: &timeline, ideal: &ideal };
    emit.sort();
    emit.dedup();
    if emit.is_empty() {
        match format {
            Format::Text => out!("{}", render::text(&subject, top)),
            Format::Json => out!("{}", render::json(&subject)),
        }
    } else {
        let outputs: Vec<(&str, String)> = emit.iter().map(|&e| (e.file_name(), e.render(&subject, top))).collect();
        let named: Vec<(&str, &str)> = outputs.iter().map(|(name, contents)| (*name, contents.as_str())).collect();
        for path in write_named_files(&output, &named)? {
            outln!("wrote {}", path.display());
        }
    }
    Ok(())
}
