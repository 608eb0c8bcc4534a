//! memplan plans the memory of one deep-learning training step ahead of time.
//!
//! A step is written in a small text IR (docs/IR.md). [`parse`] turns text into a
//! [`Graph`]; [`verify`] checks the graph's invariants; [`expand`] turns a forward-only step
//! (`backward %loss with adam(...)`) into the full training step (autodiff; verify it again
//! after); [`plan()`](passes::plan) runs the passes (schedule, in-place reuse, remat under a
//! budget, buffers, offsets; see `passes`) and returns a [`Plan`] that places every value
//! in ONE arena (under a memory budget, [`plan_step`] may recompute forward values and
//! returns the rewritten step with its plan); [`check`] re-derives everything from the
//! plan, independently of the planner, and reports every violation. Reports render plans
//! for people, `formats` reads and writes the files, executors run a plan.
//!
//! Data flows one way: text → graph → expand → passes (lowering to the IR-free solvers of
//! `solve`) → plan → (checker | report | formats | executor). docs/ARCHITECTURE.md draws
//! the layers and says what may import what.

pub mod analysis;
pub mod autodiff;
pub mod bytes;
pub mod caching;
pub mod checker;
pub mod diagnostics;
pub mod exec;
pub mod formats;
pub mod hashing;
pub mod index;
pub mod ir;
pub mod passes;
pub mod plan;
pub mod progress;
pub mod report;
pub mod rng;
pub mod solve;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use autodiff::{AutodiffError, ExpandOptions, expand, expand_with};
pub use checker::{Violation, Violations, check};
pub use index::{BufferId, OpId, ValueId};
pub use ir::graph::Graph;
pub use ir::parse::{ParseError, ParseErrors, parse};
pub use ir::print::print;
pub use ir::verify::{VerifyError, VerifyErrors, verify};
pub use passes::{PlanError, PlanOptions, plan, plan_step};
pub use plan::Plan;
