//! What every op computes: one function per op family, dispatched by [`eval`].
//! (Being written.)

use crate::exec::{Dense, ExecError};
use crate::ir::ops::{Attrs, OpKind};
use crate::ir::types::TensorType;

/// Computes `kind` on dense inputs. `outputs` are the output types (shapes and dtypes) the
/// op's type rule gives; results must have exactly those shapes. Integer and bool outputs
/// must hold exact integers (0/1 for bool).
pub fn eval(kind: OpKind, attrs: &Attrs, inputs: &[Dense], outputs: &[TensorType]) -> Result<Vec<Dense>, ExecError> {
    let _ = (kind, attrs, inputs, outputs);
    Err(ExecError::BadPlan("kernels are being written".into()))
}
