//! The solvers: problems on plain data, with no knowledge of the IR.
//!
//! Each solver takes an input type of its own and answers it; `passes` lowers a step to
//! each problem and applies the answer. Keeping them IR-free lets the same code serve
//! memplan's own steps and outside benchmarks (minimalloc's and idealloc's buffer lists,
//! Checkmate's graphs), and lets each be tested and benchmarked on its own.
//! - [`offsets`]: place buffers with known sizes and live ranges ([`offsets::Live`]) in one
//!   arena (`memplan alloc`, the offsets pass);
//! - [`order`]: a low-peak order of a plain DAG ([`order::Dag`]; `memplan schedule`, the
//!   schedule pass);
//! - [`remat`]: what to recompute so that a DAG's peak fits a budget
//!   ([`remat::Problem`]; `memplan remat`, the remat pass).
//!
//! The order and remat solvers see a step the same way: nodes `0..n` and [`DagValue`]s
//! between them (see `passes/lower.rs` for how a step becomes one).
//!
//! Solvers depend on nothing in the crate but the leaves (`progress`, `rng`).

pub mod offsets;
pub mod order;
pub mod remat;

/// A node of a DAG: an index in `0..n`.
pub type Node = u32;

/// A value written by at most one node and read by any number.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DagValue {
    /// Bytes it occupies while live.
    pub size: u64,
    /// The node that writes it; `None`: it exists before the first node (live from position 0).
    pub def: Option<Node>,
    /// The nodes that read it (any order; repeats are ignored).
    pub readers: Vec<Node>,
    /// It must survive to the last position (a persisting parameter, a returned value).
    pub to_end: bool,
}
