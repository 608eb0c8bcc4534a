//! `memplan report FILE|PLAN.json`: what is live at one step (the peak by default),
//! grouped by class, op, source line or module, with cumulative bytes.

use std::path::PathBuf;

use clap::ValueEnum;
use memplan::plan::DEFAULT_ALIGNMENT;
use memplan::report::live::{self, At, GroupBy};

use super::flags::PassFlags;
use super::step::load_subject;
use super::{Failure, out};

#[derive(clap::Args)]
pub struct Args {
    /// A .step file, or a plan JSON written by `plan --emit json`.
    file: PathBuf,
    /// The step to look at: `peak` or a schedule position.
    #[arg(long, default_value = "peak", value_parser = parse_at, value_name = "peak|STEP")]
    at: At,
    /// How many groups and values to list (text; the JSON lists all).
    #[arg(long, default_value_t = 20, value_name = "N")]
    top: usize,
    /// How to group the live values.
    #[arg(long, value_enum, default_value_t = ByArg::Class)]
    by: ByArg,
    /// With --by module: cut module paths to N components (`blocks.3` for 2).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    depth: Option<u64>,
    /// Offset alignment in bytes for a .step file (a power of two).
    #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
    alignment: u64,
    /// Output format: text, or JSON with every group and value (docs/REPORTS.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    passes: PassFlags,
}

/// `memplan report --format` and `memplan diff --format`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// `memplan report --by`.
#[derive(Clone, Copy, ValueEnum)]
enum ByArg {
    /// param, input, state, grad, activation, temp.
    Class,
    /// The kind of op that writes each value.
    Op,
    /// The source line of each value: its op's loc(...), else its place in the .step file.
    Loc,
    /// The nn.Module computing each value (loc(..., "module.path")), with each module's bytes by class.
    Module,
    /// Each value's dtype (f32, bf16, ...), with each dtype's bytes by class: where mixed precision keeps what.
    Dtype,
}

fn parse_at(s: &str) -> Result<At, String> {
    match s {
        "peak" => Ok(At::Peak),
        _ => s.parse().map(At::Step).map_err(|_| format!("`{s}` is neither `peak` nor a schedule step (0, 1, ...)")),
    }
}

pub fn run(Args { file, at, top, by, depth, alignment, format, passes }: Args) -> Result<(), Failure> {
    if depth.is_some() && !matches!(by, ByArg::Module) {
        return Err(Failure::bad_input("--depth cuts module paths: use it with --by module"));
    }
    let (name, subject) = load_subject(&file, &passes.options(alignment)?, passes.expand_options())?;
    let set = live::live_set(&subject, at).map_err(|e| Failure::bad_input(format_args!("{name}: {e}")))?;
    let by = match by {
        ByArg::Class => GroupBy::Class,
        ByArg::Op => GroupBy::Op,
        ByArg::Loc => GroupBy::Loc,
        ByArg::Module => GroupBy::Module { depth: depth.map(|d| d as usize) },
        ByArg::Dtype => GroupBy::Dtype,
    };
    match format {
        Format::Text => out!("{}", live::render(&set, &name, by, top)),
        Format::Json => out!("{}", live::render_json(&set, &name, &subject.source, by)),
    }
    Ok(())
}
