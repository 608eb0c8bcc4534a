//! The verifier. (Being written.)

use miette::Diagnostic;
use thiserror::Error;

use crate::ir::graph::Graph;

#[derive(Debug, Error, Diagnostic)]
pub enum VerifyError {}

#[derive(Debug, Error, Diagnostic)]
#[error("{} error(s) in step", errors.len())]
pub struct VerifyErrors {
    #[related]
    pub errors: Vec<VerifyError>,
}

pub fn verify(_graph: &Graph) -> Result<(), VerifyErrors> {
    Ok(())
}
