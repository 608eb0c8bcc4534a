//! `memplan print FILE`: print a step in canonical form (as written: not expanded, not
//! verified beyond parsing).

use std::path::PathBuf;

use super::step::Source;
use super::{Exit, Failure, out};

#[derive(clap::Args)]
pub struct Args {
    /// The .step file.
    file: PathBuf,
}

pub fn run(Args { file }: Args) -> Result<(), Failure> {
    let source = Source::read(&file)?;
    let graph = memplan::parse(&source.text).map_err(|e| source.failure(&e, Exit::BadInput))?;
    out!("{}", memplan::print(&graph));
    Ok(())
}
