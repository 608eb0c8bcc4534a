//! The independent plan checker. (Being written.)

use thiserror::Error;

use crate::ir::graph::Graph;
use crate::plan::Plan;

#[derive(Debug, Error, PartialEq)]
pub enum Violation {}

#[derive(Debug, Error)]
#[error("{} violation(s)", .0.len())]
pub struct Violations(pub Vec<Violation>);

pub fn check(_graph: &Graph, _plan: &Plan) -> Result<(), Violations> {
    Ok(())
}
