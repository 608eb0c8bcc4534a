//! The IR of a training step: types, the op table, the graph, and its text form
//! (parser with spans, canonical printer) and verifier. docs/IR.md is the user's manual.

pub mod graph;
pub mod layout;
pub mod ops;
pub mod parse;
pub mod print;
pub mod types;
pub mod verify;
