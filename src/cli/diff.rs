//! `memplan diff A B`: two plans (two .step files, two plan JSONs, or one of each) side by
//! side: figures, classes, the values that changed most.
//!
//! The pass flags plan both .step files alike; `--a-budget`, `--a-checkpoint` and
//! `--a-schedule` (and `--b-...`) replace the shared flag for one side, so one step can be
//! compared with itself under a budget, another strategy or program order. A plan JSON is
//! read as it was planned: a side's own flags on one are refused.

use std::path::{Path, PathBuf};

use memplan::plan::DEFAULT_ALIGNMENT;

use super::files::read_text;
use super::flags::{PassFlags, ScheduleArg, SideFlags};
use super::report::Format;
use super::step::{is_plan_json, load_subject};
use super::{Failure, out};

#[derive(clap::Args)]
pub struct Args {
    /// The first (A): a .step file or a plan JSON.
    a: PathBuf,
    /// The second (B).
    b: PathBuf,
    /// How many values to list per kind of change (text; the JSON lists all).
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
    /// Output format: text, or JSON (docs/REPORTS.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Offset alignment in bytes for .step files (a power of two).
    #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
    alignment: u64,
    /// A's budget, in place of --budget (a .step file only): a size or a fraction, as --budget takes.
    #[arg(long, value_name = "SIZE|FRACTION")]
    a_budget: Option<String>,
    /// B's budget, in place of --budget (a .step file only).
    #[arg(long, value_name = "SIZE|FRACTION")]
    b_budget: Option<String>,
    /// A's recomputation strategy, in place of --checkpoint.
    #[arg(long, value_name = "STRATEGY")]
    a_checkpoint: Option<String>,
    /// B's recomputation strategy, in place of --checkpoint.
    #[arg(long, value_name = "STRATEGY")]
    b_checkpoint: Option<String>,
    /// A's op order, in place of --schedule.
    #[arg(long, value_enum, value_name = "ORDER")]
    a_schedule: Option<ScheduleArg>,
    /// B's op order, in place of --schedule.
    #[arg(long, value_enum, value_name = "ORDER")]
    b_schedule: Option<ScheduleArg>,
    #[command(flatten)]
    passes: PassFlags,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let Args { a, b, top, format, alignment, a_budget, b_budget, a_checkpoint, b_checkpoint, a_schedule, b_schedule, passes } =
        args;
    let side_a = SideFlags { prefix: "--a-", budget: a_budget, checkpoint: a_checkpoint, schedule: a_schedule };
    let side_b = SideFlags { prefix: "--b-", budget: b_budget, checkpoint: b_checkpoint, schedule: b_schedule };
    let (name_a, a) = load_side(&a, "A", &passes, alignment, &side_a)?;
    let (name_b, b) = load_side(&b, "B", &passes, alignment, &side_b)?;
    match format {
        Format::Text => out!("{}", memplan::report::diff::render(&a, &b, (&name_a, &name_b), top)),
        Format::Json => out!("{}", memplan::report::diff::render_json(&a, &b, (&name_a, &name_b))),
    }
    Ok(())
}

/// One side, planned with the shared flags and its own; its name says which of its own
/// were given.
fn load_side(
    path: &Path,
    label: &str,
    passes: &PassFlags,
    alignment: u64,
    side: &SideFlags,
) -> Result<(String, memplan::report::Subject), Failure> {
    let given = side.given();
    if given.is_empty() {
        return load_subject(path, &passes.options(alignment)?, passes.expand_options());
    }
    if is_plan_json(path, &read_text(path)?) {
        return Err(Failure::bad_input(format_args!(
            "{label} ({}) is a plan JSON, read as it was planned: {} plans a .step file\n  hint: give the .step file it came \
             from, or plan it with those flags first (`memplan plan FILE --emit json`)",
            path.display(),
            given.join(" ")
        )));
    }
    let (name, subject) = load_subject(path, &passes.options_for(alignment, side)?, passes.expand_options())?;
    Ok((format!("{name} with {}", given.join(" ")), subject))
}
