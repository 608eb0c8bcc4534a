//! `memplan plan FILE`: plan a step and print the report (text or JSON), or write the
//! report files (`--emit`); `--print-ir-after` shows the step after passes on stderr. The
//! text on stdout lists the largest `--top` buffers unless `--buffers` says otherwise
//! (`all`: every buffer, as `report.txt` has them).

use std::path::PathBuf;

use clap::ValueEnum;
use memplan::formats::emit::Emit;
use memplan::formats::plan_json;
use memplan::passes::{Context, Pass};
use memplan::plan::DEFAULT_ALIGNMENT;
use memplan::report::text::{self, BufferRows};
use memplan::report::Report;

use super::files::write_report_files;
use super::flags::PassFlags;
use super::step::Source;
use super::{Failure, out, outln};

#[derive(clap::Args)]
pub struct Args {
    /// The .step file.
    file: PathBuf,
    /// Output format (of stdout; see --emit for files).
    #[arg(long, value_enum, default_value_t = Format::Text, conflicts_with = "emit")]
    format: Format,
    /// Offset alignment in bytes (a power of two).
    #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
    alignment: u64,
    /// How many live values to list at the peak, and buffers unless --buffers says (text format).
    #[arg(long, default_value_t = 20, value_name = "N")]
    top: usize,
    /// The buffer table: `all` (every buffer, in buffer order, as --emit's report.txt has it) or N (the N largest; default: --top's N).
    #[arg(long, value_name = "N|all", conflicts_with = "emit")]
    buffers: Option<BufferRows>,
    /// Write these report files into DIR (comma-separated: text, json, svg, trace, csv); see docs/REPORTS.md.
    #[arg(long, value_delimiter = ',', value_name = "FORMATS")]
    emit: Vec<Emit>,
    /// The directory --emit writes to (created if missing; only memplan's own file names are written).
    #[arg(short = 'o', long = "output", default_value = "memplan-out", value_name = "DIR", requires = "emit")]
    output: PathBuf,
    /// Print the step as IR after this pass to stderr, annotated (fuse, schedule, inplace, remat, buffers, offsets; repeatable).
    #[arg(long, value_name = "PASS")]
    print_ir_after: Vec<Pass>,
    /// Print the step as IR after every pass to stderr.
    #[arg(long)]
    print_ir_after_all: bool,
    #[command(flatten)]
    passes: PassFlags,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let Args { file, format, alignment, top, buffers, mut emit, output, mut print_ir_after, print_ir_after_all, passes } = args;
    if buffers.is_some() && matches!(format, Format::Json) {
        return Err(Failure::bad_input("--buffers chooses the text report's buffer table: --format json lists every buffer"));
    }
    let source = Source { expand: passes.expand_options(), ..Source::read(&file)? };
    let graph = source.graph()?;
    let options = passes.options(alignment)?;
    if print_ir_after_all {
        print_ir_after = Pass::ALL.to_vec();
    }
    // `--print-ir-after`: the step after each pass asked for, annotated, on stderr, as the
    // pipeline runs.
    let mut dump = |pass: Pass, cx: &Context<'_>| {
        if print_ir_after.contains(&pass) {
            use std::io::Write;
            let _ = std::io::stderr().write_all(memplan::passes::dump::dump(pass, cx).as_bytes());
        }
    };
    // The plan's step is rewritten in schedule order when it recomputes values: where the
    // updates run as written is read before.
    let updates_as_written = memplan::report::updates_as_written(&graph);
    let (graph, plan) =
        if print_ir_after.is_empty() { source.plan(graph, &options)? } else { source.plan_observed(graph, &options, &mut dump)? };
    let subject = source.subject(graph, plan);
    let report = Report::new(&subject.graph, &subject.plan).with_updates_as_written(updates_as_written);
    emit.sort();
    emit.dedup();
    if emit.is_empty() {
        match format {
            Format::Text => out!("{}", text::render(&report, top, buffers.unwrap_or(BufferRows::Largest(top)))),
            Format::Json => out!("{}", plan_json::render(&subject, &report)),
        }
    } else {
        let outputs: Vec<(Emit, String)> = emit.iter().map(|&e| (e, e.render(&subject, &report, top))).collect();
        for path in write_report_files(&output, &outputs)? {
            outln!("wrote {}", path.display());
        }
    }
    Ok(())
}
