//! The pipeline. (Being written.)

use thiserror::Error;

use crate::ir::graph::Graph;
use crate::plan::Plan;

#[derive(Debug, Error)]
pub enum PlanError {}

#[derive(Clone, Debug)]
pub struct PlanOptions {
    pub alignment: u64,
}

pub fn plan(_graph: &Graph, _options: &PlanOptions) -> Result<Plan, PlanError> {
    todo!()
}
