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

use crate::ir::ops::OpKind;
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
#[derive(Debug, Error, PartialEq)]
pub enum ExecError {
    /// An argument the step needs was not given.
    #[error("no value for argument %{name} ({ty})")]
    MissingArgument { name: String, ty: String },

    /// An argument was given with another type than the step declares.
    #[error("argument %{name} is {found} but the step declares {expected}")]
    ArgumentType { name: String, expected: String, found: String },

    /// A tensor is too large to hold in this machine's memory.
    #[error("%{name} needs {bytes} bytes, more than this machine can address")]
    TooLarge { name: String, bytes: u64 },

    /// An index input (labels, ids) holds a value outside its valid range.
    #[error("{op}: index {index} is out of range 0..{bound}")]
    IndexOutOfRange { op: String, index: i64, bound: usize },

    /// The step has ops of another framework (`extern`, `extern_view`, `extern_backward`),
    /// which memplan plans but cannot execute; `ops` lists them (`aten::cumsum (2x), ...`).
    #[error("the step has ops memplan cannot execute: {ops}")]
    Extern { ops: String },

    /// The plan does not fit the graph (wrong lengths, ids out of range): a plan that
    /// passed the checker never does this.
    #[error("the plan does not fit the step: {0}")]
    BadPlan(String),
}

/// `Err(ExecError::Extern)` naming the extern ops of `graph` (by target, with counts, in
/// order of first appearance) if it has any: executors refuse such a step before running.
/// The forward ops are named (each `extern_backward` follows from one); a step with only
/// `extern_backward` ops names those.
pub fn refuse_extern(graph: &crate::ir::graph::Graph) -> Result<(), ExecError> {
    let count = |forward: bool| {
        let mut counts: indexmap::IndexMap<&str, usize> = indexmap::IndexMap::new();
        for op in graph.ops.iter().filter(|op| op.kind.is_extern() && (op.kind != OpKind::ExternBackward) == forward) {
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
