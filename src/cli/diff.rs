//! `memplan diff A B`: two plans (two .step files, two plan JSONs, or one of each) side by
//! side: figures, classes, the values that changed most.

use std::path::PathBuf;

use memplan::plan::DEFAULT_ALIGNMENT;

use super::flags::PassFlags;
use super::step::load_subject;
use super::{Failure, out};

#[derive(clap::Args)]
pub struct Args {
    /// The first (A): a .step file or a plan JSON.
    a: PathBuf,
    /// The second (B).
    b: PathBuf,
    /// How many values to list per kind of change.
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
    /// Offset alignment in bytes for .step files (a power of two).
    #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
    alignment: u64,
    #[command(flatten)]
    passes: PassFlags,
}

pub fn run(Args { a, b, top, alignment, passes }: Args) -> Result<(), Failure> {
    let options = passes.options(alignment)?;
    let (name_a, a) = load_subject(&a, &options)?;
    let (name_b, b) = load_subject(&b, &options)?;
    out!("{}", memplan::report::diff::render(&a, &b, (&name_a, &name_b), top));
    Ok(())
}
