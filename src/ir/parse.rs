//! The parser: `.step` text → [`Graph`], with spans on every entity.
//! (Being written: lexer, recursive descent, name resolution, type inference.)

use miette::Diagnostic;
use thiserror::Error;

use crate::ir::graph::Graph;

/// One error in the text of a step.
#[derive(Debug, Error, Diagnostic)]
pub enum ParseError {
    /// Placeholder while the parser is written.
    #[error("the parser is not written yet")]
    NotYet,
}

/// Every error found in one file; render with the file's source attached.
#[derive(Debug, Error, Diagnostic)]
#[error("{} error(s) in the step", errors.len())]
pub struct ParseErrors {
    #[related]
    pub errors: Vec<ParseError>,
}

pub fn parse(_src: &str) -> Result<Graph, ParseErrors> {
    Err(ParseErrors { errors: vec![ParseError::NotYet] })
}
