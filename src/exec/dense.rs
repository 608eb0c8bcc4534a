//! A dense `f64` interpreter: runs a graph op by op on [`Dense`] tensors, with no arena,
//! no dtype rounding and views materialised as dense copies.
//!
//! It is the mathematical meaning of a step, for tests that need exact-ish numbers
//! (autodiff's gradient checks compare it with finite differences); the CPU executor
//! (`cpu.rs`) is the one that rounds to each dtype and honours a plan. Integer and bool
//! values are still converted exactly like the kernels convert them.

use indexmap::IndexMap;

use crate::exec::{Dense, ExecError, kernels};
use crate::index::{IndexVec, ValueId};
use crate::ir::graph::Graph;
use crate::ir::types::TensorType;

/// Every value of `graph` computed from `args` (by argument name), in value-id order.
/// `graph` should have passed the verifier; ops run in program order.
pub fn eval_dense(graph: &Graph, args: &IndexMap<String, Dense>) -> Result<IndexVec<ValueId, Dense>, ExecError> {
    super::refuse_extern(graph)?;
    let mut values: IndexVec<ValueId, Option<Dense>> = IndexVec::from_elem(None, graph.values.len());
    for &arg in &graph.args {
        let value = &graph.values[arg];
        let given = args
            .get(&value.name)
            .ok_or_else(|| ExecError::MissingArgument { name: value.name.clone(), ty: value.ty.to_string() })?;
        let want: Vec<usize> = value.ty.dims().iter().map(|&d| d as usize).collect();
        if given.shape != want || given.data.len() != given.shape.iter().product::<usize>() {
            return Err(ExecError::ArgumentType {
                name: value.name.clone(),
                expected: value.ty.to_string(),
                found: format!("a dense tensor of shape {:?}", given.shape),
            });
        }
        values[arg] = Some(given.clone());
    }
    for (id, op) in graph.ops.iter_enumerated() {
        let inputs = op
            .inputs
            .iter()
            .map(|&v| values.get(v).cloned().flatten())
            .collect::<Option<Vec<Dense>>>()
            .ok_or_else(|| ExecError::BadPlan(format!("{id} reads a value not computed before it")))?;
        let types: Vec<TensorType> = op.outputs.iter().map(|&v| graph.values[v].ty.clone()).collect();
        let results = kernels::eval(op.kind, &op.attrs, &inputs, &types)?;
        for (&out, result) in op.outputs.iter().zip(results) {
            values[out] = Some(result);
        }
    }
    values
        .into_raw()
        .into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| ExecError::BadPlan(format!("value {i} is never computed"))))
        .collect::<Result<Vec<_>, _>>()
        .map(IndexVec::from_raw)
}
