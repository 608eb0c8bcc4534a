//! Analyses that read a graph (and a schedule) and compute facts; they change nothing.

pub mod classes;
pub mod liveness;
