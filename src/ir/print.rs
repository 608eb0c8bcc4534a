//! The printer: [`Graph`] → canonical text. (Being written.)

use crate::ir::graph::Graph;

pub fn print(graph: &Graph) -> String {
    format!("step @{}() {{\n}}\n", graph.name)
}
