//! Step arguments and results as named host tensors; the dtype codec; seeded
//! initialisation (safetensors files of them: `formats/safetensors.rs`).
//!
//! A [`HostTensor`] holds dense row-major little-endian bytes in its dtype. Conversions go
//! through `f64` ([`decode`], [`encode`]): exact for every dtype memplan has (i64 up to
//! 2^53); floats round to nearest even when encoded.
//!
//! Initialisation is seeded and deterministic on every platform (`crate::rng`): params by
//! how the step uses them (norm scales 1 (layer, rms and batch norm), shifts and 1-D
//! biases 0, embedding tables N(0, 0.02), other weights uniform in ±1/sqrt(fan_in)); state
//! 0; float inputs N(0, 1); integer inputs that are labels or ids in their valid range
//! (labels never hit a negative ignore_index); other integer inputs in 0..10; bool inputs
//! fair coins.

use half::{bf16, f16};
use indexmap::IndexMap;

use crate::index::{OpId, ValueId};
use crate::ir::graph::{Graph, Role};
use crate::ir::ops::OpKind;
use crate::ir::types::{DType, TensorType};
use crate::rng::Rng;

/// A tensor in host memory: dense row-major little-endian bytes of `ty.dtype`.
#[derive(Clone, PartialEq, Debug)]
pub struct HostTensor {
    pub ty: TensorType,
    pub bytes: Vec<u8>,
}

/// Tensors by value name (without `%`), in a stable order.
pub type Tensors = IndexMap<String, HostTensor>;

impl HostTensor {
    /// Encodes `values` (row-major) in `ty`'s dtype.
    pub fn from_f64(ty: TensorType, values: &[f64]) -> HostTensor {
        let size = ty.dtype.size() as usize;
        let mut bytes = vec![0u8; values.len() * size];
        for (chunk, &v) in bytes.chunks_exact_mut(size).zip(values) {
            encode(ty.dtype, v, chunk);
        }
        HostTensor { ty, bytes }
    }

    /// The elements as numbers, row-major.
    pub fn to_f64(&self) -> Vec<f64> {
        let size = self.ty.dtype.size() as usize;
        self.bytes.chunks_exact(size).map(|c| decode(self.ty.dtype, c)).collect()
    }
}

/// The number in `bytes`, one element of `dtype`.
pub fn decode(dtype: DType, bytes: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f32::from_le_bytes(bytes[..4].try_into().unwrap()) as f64,
        DType::F16 => f16::from_le_bytes(bytes[..2].try_into().unwrap()).to_f64(),
        DType::Bf16 => bf16::from_le_bytes(bytes[..2].try_into().unwrap()).to_f64(),
        DType::I32 => i32::from_le_bytes(bytes[..4].try_into().unwrap()) as f64,
        DType::I64 => i64::from_le_bytes(bytes[..8].try_into().unwrap()) as f64,
        DType::Bool => (bytes[0] != 0) as u8 as f64,
    }
}

/// Writes `value` as one element of `dtype` into `out` (floats round to nearest even,
/// integers saturate, bool is `value != 0`).
pub fn encode(dtype: DType, value: f64, out: &mut [u8]) {
    match dtype {
        DType::F32 => out[..4].copy_from_slice(&(value as f32).to_le_bytes()),
        DType::F16 => out[..2].copy_from_slice(&f16::from_f64(value).to_le_bytes()),
        DType::Bf16 => out[..2].copy_from_slice(&bf16::from_f64(value).to_le_bytes()),
        DType::I32 => out[..4].copy_from_slice(&(value as i32).to_le_bytes()),
        DType::I64 => out[..8].copy_from_slice(&(value as i64).to_le_bytes()),
        DType::Bool => out[0] = (value != 0.0) as u8,
    }
}

/// The first op reading `arg` and the name of the input slot it reads it in.
fn first_use(graph: &Graph, arg: ValueId) -> Option<(OpId, &'static str)> {
    graph.ops.iter_enumerated().find_map(|(id, op)| {
        op.inputs.iter().position(|&i| i == arg).map(|k| (id, op.kind.def().input_name(k)))
    })
}

/// Seeded values for every argument of `graph` (see the module docs for the rules).
pub fn init_args(graph: &Graph, seed: u64) -> Tensors {
    let mut rng = Rng::new(seed);
    let mut args = Tensors::new();
    for &arg in &graph.args {
        let value = &graph.values[arg];
        let n = value.ty.shape.numel().unwrap_or(0) as usize;
        let role = graph.role(arg).expect("args have roles");
        let usage = first_use(graph, arg);
        let dims = value.ty.dims();
        let data: Vec<f64> = match (role, value.ty.dtype) {
            (Role::State, _) => vec![0.0; n],
            (_, DType::Bool) => (0..n).map(|_| rng.below(2) as f64).collect(),
            (_, d) if d.is_index() => {
                let bound = usage.map_or(10, |(op, slot)| index_bound(graph, op, slot));
                (0..n).map(|_| rng.below(bound.max(1)) as f64).collect()
            }
            (Role::Input, _) => (0..n).map(|_| rng.normal()).collect(),
            (Role::Param, _) => match usage.map(|(op, slot)| (graph.ops[op].kind, slot)) {
                Some((OpKind::LayerNorm | OpKind::BatchNorm | OpKind::RmsNorm, "gamma")) => vec![1.0; n],
                Some((OpKind::LayerNorm | OpKind::BatchNorm, "beta")) => vec![0.0; n],
                Some((OpKind::Embedding, "table")) => (0..n).map(|_| 0.02 * rng.normal()).collect(),
                _ if dims.len() <= 1 => vec![0.0; n],
                _ => {
                    let fan_in = if dims.len() == 2 { dims[0] } else { dims[1..].iter().product() }.max(1);
                    let bound = 1.0 / (fan_in as f64).sqrt();
                    (0..n).map(|_| bound * (2.0 * rng.uniform() - 1.0)).collect()
                }
            },
        };
        args.insert(value.name.clone(), HostTensor::from_f64(value.ty.clone(), &data));
    }
    args
}

/// The valid range of an integer argument that `op` reads at input `slot`.
fn index_bound(graph: &Graph, op: OpId, slot: &str) -> u64 {
    let op = &graph.ops[op];
    let input_dims = |k: usize| graph.values[op.inputs[k]].ty.dims().to_vec();
    match (op.kind, slot) {
        (OpKind::CrossEntropy, "labels") => input_dims(0).get(1).copied().unwrap_or(1),
        (OpKind::CrossEntropyBackward, "labels") => input_dims(1).get(1).copied().unwrap_or(1),
        (OpKind::Embedding, "ids") => input_dims(0).first().copied().unwrap_or(1),
        (OpKind::EmbeddingBackward, "ids") => op.attrs.int("vocab").max(1) as u64,
        _ => 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_round_trips_and_rounds() {
        let mut b = [0u8; 8];
        for d in DType::ALL {
            encode(d, 1.0, &mut b);
            assert_eq!(decode(d, &b), 1.0, "{d}");
        }
        encode(DType::Bf16, 1.0 + 1.0 / 512.0, &mut b);
        assert_eq!(decode(DType::Bf16, &b), 1.0, "bf16 rounds to nearest even");
        encode(DType::I64, -(1i64 << 52) as f64, &mut b);
        assert_eq!(decode(DType::I64, &b), -(1i64 << 52) as f64);
    }
}
