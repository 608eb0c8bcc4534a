//! `fused`: the inner ops one after another on whole tensors, through [`eval`] (the same
//! kernels as the unfused ops, a closing reduction's included), each inner value rounded
//! to its dtype as storing it would round it ([`stored`]), so a fused op gives the unfused
//! ops' bits. The inner values live only while the op runs.
//!
//! `fused_norm`: the body's value so, then the norm's own kernel over it as stored: the
//! unfused body and norm's bits.

use super::{eval, nn};
use crate::exec::data::stored;
use crate::exec::{Dense, ExecError};
use crate::ir::ops::{FusedBody, Norm, Operand, inner_shape};
use crate::ir::types::{Shape, TensorType};

/// The fused op of `body` on `inputs`; its value of type `out`.
pub(super) fn fused(body: &FusedBody, inputs: &[Dense], out: &TensorType) -> Result<Dense, ExecError> {
    let bad = |message: String| ExecError::BadPlan(format!("fused: {message}"));
    if body.inputs() != inputs.len() {
        return Err(bad(format!("the body reads {} inputs, given {}", body.inputs(), inputs.len())));
    }
    let mut values: Vec<Dense> = Vec::with_capacity(body.ops.len());
    for (j, op) in body.ops.iter().enumerate() {
        let operands: Vec<Dense> = op
            .operands
            .iter()
            .map(|&o| match o {
                Operand::Input(k) => inputs[k].clone(),
                Operand::Inner(i) => values[i].clone(),
            })
            .collect();
        let shapes: Vec<Shape> = operands.iter().map(|d| Shape(d.shape.iter().map(|&n| n as u64).collect())).collect();
        let ty = if op.def.reduction {
            // A reduction keeps its operand's dtype (the body's rule), so its row's rule
            // gives its shape from the operand's.
            let operand = TensorType { dtype: op.dtype, shape: shapes[0].clone() };
            let ty = (op.def.infer)(&[&operand], &op.attrs).map_err(|e| bad(format!("t{j}: {e}")))?;
            ty.into_iter().next().ok_or_else(|| bad(format!("t{j}: no output")))?
        } else {
            let shape = inner_shape(&shapes.iter().collect::<Vec<_>>()).map_err(|e| bad(format!("t{j}: {e}")))?;
            TensorType { dtype: op.dtype, shape }
        };
        let mut value = eval(op.def.kind, &op.attrs, &operands, std::slice::from_ref(&ty))?.remove(0);
        for x in &mut value.data {
            *x = stored(op.dtype, *x);
        }
        values.push(value);
    }
    let value = values.pop().expect("a body has an op");
    let dims: Vec<usize> = out.shape.dims().iter().map(|&d| d as usize).collect();
    if value.shape != dims {
        return Err(bad(format!("the body gives shape {:?}, the output is {}", value.shape, out)));
    }
    Ok(value)
}

/// The fused_norm of `body` and `norm` (epsilon `eps`) on `inputs` (the body's, then the
/// norm's parameters): its value and the norm of it, of types `outputs`.
pub(super) fn fused_norm(body: &FusedBody, norm: Norm, eps: f64, inputs: &[Dense], outputs: &[TensorType]) -> Result<Vec<Dense>, ExecError> {
    let Some(split) = inputs.len().checked_sub(norm.params()) else {
        return Err(ExecError::BadPlan(format!("fused_norm: given {} inputs, fewer than the norm's parameters", inputs.len())));
    };
    let (body_inputs, params) = inputs.split_at(split);
    let value = fused(body, body_inputs, &outputs[0])?;
    let y = match norm {
        Norm::Layer => nn::layer_norm(&value, &params[0], &params[1], eps),
        Norm::Rms => nn::rms_norm(&value, &params[0], eps),
    };
    Ok(vec![value, y])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ops::{Attr, Attrs, OpKind};
    use crate::ir::types::DType;

    fn dense(shape: &[usize], data: &[f64]) -> Dense {
        Dense::new(shape.to_vec(), data.to_vec())
    }

    /// The fused op gives the unfused ops' numbers, each inner value rounded to its dtype
    /// (here bf16, where leaving it unrounded would change the sum), broadcasting included.
    #[test]
    fn a_fused_op_rounds_each_inner_value_like_the_unfused_ops() {
        let body = FusedBody::parse("t0: bf16 = cast(x0, to=bf16); t1: bf16 = add(t0, x1); t2: f32 = cast(t1, to=f32)").unwrap();
        let x = dense(&[2, 3], &[1.001, 2.003, -3.0007, 100.3, 0.0, 7.77]);
        let bias = dense(&[3], &[0.0039, 1.0, -0.5]);
        let out = TensorType::new(DType::F32, vec![2, 3]);
        let fused_out = fused(&body, &[x.clone(), bias.clone()], &out).unwrap();

        let bf16 = |n: Vec<u64>| TensorType::new(DType::Bf16, n);
        let round = |mut d: Dense, dtype: DType| {
            d.data.iter_mut().for_each(|v| *v = stored(dtype, *v));
            d
        };
        let cast = Attrs::for_op(OpKind::Cast, &[("to", Attr::DType(DType::Bf16))]).unwrap();
        let t0 = round(eval(OpKind::Cast, &cast, std::slice::from_ref(&x), &[bf16(vec![2, 3])]).unwrap().remove(0), DType::Bf16);
        let t1 = round(eval(OpKind::Add, &Attrs::default(), &[t0, bias.clone()], &[bf16(vec![2, 3])]).unwrap().remove(0), DType::Bf16);
        assert_eq!(fused_out.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), t1.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        // Without the rounding of t0 the sums differ: the rounding is what makes it exact.
        let unrounded: Vec<f64> = x.data.iter().enumerate().map(|(i, v)| stored(DType::Bf16, v + bias.data[i % 3])).collect();
        assert_ne!(unrounded, fused_out.data);
    }

    /// A body that ends with a reduction gives the unfused ops' bits too: the product
    /// rounded to bf16 element by element, then summed and rounded as `sum` does.
    #[test]
    fn a_closing_reduction_sums_the_rounded_inner_values() {
        let body = FusedBody::parse("t0: bf16 = mul(x0, x1); t1: bf16 = sum(t0, axes=[0])").unwrap();
        let x = dense(&[3, 2], &[1.001, 2.003, -3.0007, 100.3, 0.5, 7.77]);
        let y = dense(&[2], &[1.01, -0.3]);
        let out = TensorType::new(DType::Bf16, vec![2]);
        let fused_out = fused(&body, &[x.clone(), y.clone()], &out).unwrap();
        let bf16 = |n: Vec<u64>| TensorType::new(DType::Bf16, n);
        let mut product = eval(OpKind::Mul, &Attrs::default(), &[x, y], &[bf16(vec![3, 2])]).unwrap().remove(0);
        product.data.iter_mut().for_each(|v| *v = stored(DType::Bf16, *v));
        let sum = Attrs::for_op(OpKind::Sum, &[("axes", Attr::Ints(vec![0]))]).unwrap();
        let mut unfused = eval(OpKind::Sum, &sum, &[product], &[bf16(vec![2])]).unwrap().remove(0);
        unfused.data.iter_mut().for_each(|v| *v = stored(DType::Bf16, *v));
        assert_eq!(fused_out.shape, [2]);
        assert_eq!(fused_out.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), unfused.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    }

    #[test]
    fn a_body_of_the_wrong_arity_or_shape_is_a_bad_plan() {
        let body = FusedBody::parse("t0: f32 = add(x0, x1)").unwrap();
        let out = TensorType::new(DType::F32, vec![2]);
        let x = dense(&[2], &[1.0, 2.0]);
        assert!(matches!(fused(&body, std::slice::from_ref(&x), &out), Err(ExecError::BadPlan(m)) if m.contains("reads 2 inputs, given 1")));
        let wrong = TensorType::new(DType::F32, vec![3]);
        assert!(matches!(fused(&body, &[x.clone(), x], &wrong), Err(ExecError::BadPlan(m)) if m.contains("the output is")));
    }
}
