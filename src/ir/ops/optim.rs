//! Optimizer updates: `sgd`, `sgd_momentum`, `adam` and `adamw`, element by element over
//! the param, its gradient and its state (and Adam's step count `t`, read whole). Their
//! outputs are the new param and state, written in place over the old ones by the
//! planner.

use super::rules::*;
use super::{AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, attr};
use crate::ir::types::TensorType;

use AttrKind as K;

const LR: AttrSpec = attr("lr", K::Float, None);
const ADAM_ATTRS: &[AttrSpec] = &[
    attr("lr", K::Float, Some(AttrDefault::Float(0.001))),
    attr("beta1", K::Float, Some(AttrDefault::Float(0.9))),
    attr("beta2", K::Float, Some(AttrDefault::Float(0.999))),
    attr("eps", K::Float, Some(AttrDefault::Float(1e-8))),
];
const ADAMW_ATTRS: &[AttrSpec] = &[
    attr("lr", K::Float, Some(AttrDefault::Float(0.001))),
    attr("beta1", K::Float, Some(AttrDefault::Float(0.9))),
    attr("beta2", K::Float, Some(AttrDefault::Float(0.999))),
    attr("eps", K::Float, Some(AttrDefault::Float(1e-8))),
    attr("weight_decay", K::Float, Some(AttrDefault::Float(0.01))),
];

pub(super) const SGD: OpDef = OpDef::new("sgd", &["p", "g"], &["p_new"], infer_sgd, "p - lr * g")
    .attrs(&[LR])
    .optimizer(&[], false)
    .flops(per_output::<2>)
    .inplace(&[(0, 0)])
    .pointwise(&[0, 1]);

pub(super) const SGD_MOMENTUM: OpDef = OpDef::new("sgd_momentum", &["p", "g", "buf"], &["p_new", "buf_new"], infer_sgd_momentum, "buf_new = momentum * buf + g; p_new = p - lr * buf_new")
    .attrs(&[LR, attr("momentum", K::Float, Some(AttrDefault::Float(0.9)))])
    .optimizer(&["momentum"], false)
    .flops(per_output::<2>)
    .inplace(&[(0, 0), (1, 2)])
    .pointwise(&[0, 1, 2]);

pub(super) const ADAM: OpDef = OpDef::new("adam", &["p", "g", "m", "v", "t"], &["p_new", "m_new", "v_new"], infer_adam, "Adam with bias correction by step count t")
    .attrs(ADAM_ATTRS)
    .optimizer(&["m", "v"], true)
    .flops(per_output::<4>)
    .inplace(&[(0, 0), (1, 2), (2, 3)])
    .pointwise(&[0, 1, 2, 3]);

pub(super) const ADAMW: OpDef = OpDef::new("adamw", &["p", "g", "m", "v", "t"], &["p_new", "m_new", "v_new"], infer_adam, "Adam with decoupled weight decay: p_new also loses lr * weight_decay * p")
    .attrs(ADAMW_ATTRS)
    .optimizer(&["m", "v"], true)
    .flops(per_output::<5>)
    .inplace(&[(0, 0), (1, 2), (2, 3)])
    .pointwise(&[0, 1, 2, 3]);

/// Optimizer tensors (every input but adam's `t`): one float type, named by the row.
pub(super) fn optimizer_tensors(inputs: &[&TensorType], names: &[&str]) -> Result<(), String> {
    float_input(inputs[0], names[0])?;
    for (t, name) in inputs.iter().zip(names).skip(1) {
        same_type(inputs[0], names[0], t, name)?;
    }
    Ok(())
}

pub(super) fn infer_sgd(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(inputs, &["p", "g"])?;
    non_negative(attrs, "lr")?;
    done(vec![inputs[0].clone()])
}

pub(super) fn infer_sgd_momentum(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(inputs, &["p", "g", "buf"])?;
    non_negative(attrs, "lr")?;
    non_negative(attrs, "momentum")?;
    done(vec![inputs[0].clone(), inputs[0].clone()])
}

pub(super) fn infer_adam(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(&inputs[..4], &["p", "g", "m", "v"])?;
    let t = inputs[4];
    if !(t.dtype.is_float() && t.rank() == 0) {
        return Err(format!("t (the step count) must be a float scalar like f32[], found {t}"));
    }
    non_negative(attrs, "lr")?;
    for beta in ["beta1", "beta2"] {
        float_attr(attrs, beta, |b| (0.0..1.0).contains(&b), "in [0, 1)")?;
    }
    positive_eps(attrs)?;
    if attrs.get("weight_decay").is_some() {
        non_negative(attrs, "weight_decay")?;
    }
    done(vec![inputs[0].clone(), inputs[0].clone(), inputs[0].clone()])
}

/// adam's and adamw's attributes, decoded once for every layer that reads them
/// (`weight_decay` is 0 for adam, which has none).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct AdamAttrs {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// adamw's decoupled weight decay.
    pub weight_decay: f64,
}

impl AdamAttrs {
    /// The attributes of an op that passed its type rule.
    pub fn of(attrs: &Attrs) -> AdamAttrs {
        AdamAttrs {
            lr: attrs.float("lr"),
            beta1: attrs.float("beta1"),
            beta2: attrs.float("beta2"),
            eps: attrs.float("eps"),
            weight_decay: if attrs.get("weight_decay").is_some() { attrs.float("weight_decay") } else { 0.0 },
        }
    }
}
