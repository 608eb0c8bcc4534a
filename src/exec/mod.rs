//! Executors: run a planned step with real numbers.
//!
//! - `cpu.rs`: the reference executor. It runs a plan inside ONE byte arena, every value at
//!   its planned offset, and runs the same step unplanned (every value in its own bytes);
//!   the two must agree bit for bit, which proves the plan changes nothing but memory.
//! - `kernels/`: what each op computes, on dense row-major tensors of `f64` numbers.
//!   Executors gather inputs into [`Dense`] tensors, call [`kernels::eval`], and store the
//!   results in the outputs' dtypes (f32, f16, bf16 rounded to nearest even; integers and
//!   bools exact).
//! - `dense.rs`: a dense `f64` interpreter (no arena, no rounding) for exact checks.
//! - `data.rs`: step arguments as named host tensors: the dtype codec, seeded initialisation.
//! - `cuda/`: the CUDA executor (its device part behind the `cuda` feature; docs/CUDA.md).
//! - `compare.rs`: two runs compared within a tolerance per dtype (`run --check`).

pub mod compare;
pub mod cpu;
pub mod cuda;
pub mod data;
pub mod dense;
pub mod kernels;

use crate::index::OpId;
use crate::ir::graph::Graph;
use crate::ir::ops::OpClass;
use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

/// A dense row-major tensor of numbers, as kernels see it.
///
/// Kernels compute in `f64`: every f32, f16, bf16, i32 and bool value is exact in it, and
/// i64 values up to 2^53 (labels and indices are far below). Executors round results to
/// the output's dtype when storing them.
#[derive(Clone, PartialEq, Debug)]
pub struct Dense {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Dense {
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Dense {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Dense { shape, data }
    }

    pub fn zeros(shape: Vec<usize>) -> Dense {
        let n = shape.iter().product();
        Dense { shape, data: vec![0.0; n] }
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }
}

/// Why a step could not run.
#[derive(Debug, Error, Diagnostic, PartialEq)]
pub enum ExecError {
    /// An argument the step needs was not given.
    #[error("no value for argument %{name} ({ty})")]
    MissingArgument { name: String, ty: String },

    /// An argument was given with another type than the step declares.
    #[error("argument %{name} is {found} but the step declares {expected}")]
    ArgumentType { name: String, expected: String, found: String },

    /// Memory for `what` (the arena, an argument, an op's inputs) could not be allocated:
    /// it needs `bytes` bytes (`None`: more than 2^64 - 1).
    #[error("{what} needs {}, which this machine cannot allocate", needed(*.bytes))]
    OutOfMemory { what: String, bytes: Option<u64> },

    /// An index input (labels, ids) holds a value outside its valid range.
    #[error("{op}: index {index} is out of range 0..{bound}")]
    IndexOutOfRange { op: String, index: i64, bound: usize },

    /// embedding_bag's offsets do not start at 0, decrease, or pass the number of ids.
    #[error("{op}: bad offsets: {detail} (they must start at 0 and not decrease)")]
    BadOffsets { op: String, detail: String },

    /// Op `op` (`text` as the IR prints it, at `span` in the step's file) failed with
    /// `error`.
    #[error("`{text}`: {error}")]
    AtOp {
        op: OpId,
        text: String,
        error: Box<ExecError>,
        #[label("this op")]
        span: Option<SourceSpan>,
    },

    /// The step has ops of another framework (`extern`, `extern_view`, `extern_backward`),
    /// which memplan plans but cannot execute; `ops` lists them (`aten::cumsum (2x), ...`).
    #[error("the step has ops memplan cannot execute: {ops}")]
    Extern { ops: String },

    /// The plan does not fit the graph (wrong lengths, ids out of range): a plan that
    /// passed the checker never does this.
    #[error("the plan does not fit the step: {0}")]
    BadPlan(String),
}

impl ExecError {
    /// `error` of op `op` of `graph`, with the op's text and place (an error that has them
    /// already stays as it is).
    pub fn at_op(graph: &Graph, op: OpId, error: ExecError) -> ExecError {
        match error {
            ExecError::AtOp { .. } => error,
            error => ExecError::AtOp { op, text: graph.describe_op(op), error: Box::new(error), span: graph.ops[op].span.into() },
        }
    }
}

/// `N bytes (human)`, or more than a u64 can count.
fn needed(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "more than 2^64 - 1 bytes".to_string(), crate::bytes::format_bytes)
}

/// `Err(ExecError::Extern)` naming the extern ops of `graph` (by target, with counts, in
/// order of first appearance) if it has any: executors refuse such a step before running.
/// The forward ops are named (each `extern_backward` follows from one); a step with only
/// `extern_backward` ops names those.
pub fn refuse_extern(graph: &crate::ir::graph::Graph) -> Result<(), ExecError> {
    let count = |forward: bool| {
        let mut counts: indexmap::IndexMap<&str, usize> = indexmap::IndexMap::new();
        for op in graph.ops.iter().filter(|op| op.kind.is_extern() && (op.kind.def().class != OpClass::Backward) == forward) {
            *counts.entry(op.attrs.str("target")).or_default() += 1;
        }
        counts
    };
    let mut counts = count(true);
    if counts.is_empty() {
        counts = count(false);
    }
    if counts.is_empty() {
        return Ok(());
    }
    let ops: Vec<String> = counts.iter().map(|(target, n)| format!("{target} ({n}x)")).collect();
    Err(ExecError::Extern { ops: ops.join(", ") })
}
