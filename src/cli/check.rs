//! `memplan check FILE`: parse, verify (expanding a forward-only step), plan and run the
//! independent checker on the plan.

use std::path::PathBuf;

use memplan::bytes::format_bytes;
use memplan::plan::DEFAULT_ALIGNMENT;

use super::flags::PassFlags;
use super::step::Source;
use super::{Failure, outln};

#[derive(clap::Args)]
pub struct Args {
    /// The .step file.
    file: PathBuf,
    #[command(flatten)]
    passes: PassFlags,
}

pub fn run(Args { file, passes }: Args) -> Result<(), Failure> {
    let source = Source { expand: passes.expand_options(), ..Source::read(&file)? };
    let (graph, plan) = source.plan(source.graph()?, &passes.options(DEFAULT_ALIGNMENT)?)?;
    outln!(
        "ok: {}: step @{} ({} args, {} ops) is valid; its plan ({}) passes the checker",
        source.file,
        graph.name,
        graph.args.len(),
        graph.ops.len(),
        format_bytes(plan.arena_bytes)
    );
    Ok(())
}
