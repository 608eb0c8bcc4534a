//! `memplan expand FILE`: expand a forward-only step (`backward %loss with ...`) and print
//! the full step in canonical form.

use std::path::PathBuf;

use super::step::Source;
use super::{Failure, out};

#[derive(clap::Args)]
pub struct Args {
    /// The .step file.
    file: PathBuf,
}

pub fn run(Args { file }: Args) -> Result<(), Failure> {
    let source = Source::read(&file)?;
    out!("{}", memplan::print(&source.verified(source.graph()?)?));
    Ok(())
}
