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
//! 0; float inputs N(0, 1); integer inputs in the smallest range of the ops reading them,
//! directly or through views: labels' and ids' valid range (labels never hit a negative
//! ignore_index), 0..10 for any other reader (a view op included) or none (offsets, sorted
//! from 0); bool inputs fair coins. Each tensor's bytes are allocated fallibly and encoded as they are drawn.

use half::{bf16, f16};
use indexmap::IndexMap;

use crate::exec::ExecError;
use crate::index::ValueId;
use crate::ir::graph::{Graph, Op, Role};
use crate::index::IndexVec;
use crate::ir::layout::{Layout, layouts};
use crate::ir::ops::{Below, Init};
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

/// `value` as an element of `dtype` holds it: [`encode`] then [`decode`].
pub fn stored(dtype: DType, value: f64) -> f64 {
    let mut bytes = [0u8; 8];
    encode(dtype, value, &mut bytes);
    decode(dtype, &bytes)
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

/// How the first op reading `arg` seeds it, by its row's `init` for the input it reads it at
/// ([`OpDef::init_of`](crate::ir::ops::OpDef::init_of)).
fn first_use_init(graph: &Graph, arg: ValueId) -> Option<Init> {
    let (op, k) = graph.ops.iter().find_map(|op| op.inputs.iter().position(|&i| i == arg).map(|k| (op, k)))?;
    op.kind.def().init_of(k, op.inputs.len(), &op.attrs)
}

/// Seeded values for every argument of `graph` (see the module docs for the rules).
pub fn init_args(graph: &Graph, seed: u64) -> Result<Tensors, ExecError> {
    let mut rng = Rng::new(seed);
    let layouts = layouts(graph);
    let mut args = Tensors::new();
    for &arg in &graph.args {
        let value = &graph.values[arg];
        let role = graph.role(arg).expect("args have roles");
        let dims = value.ty.dims();
        let mut fill = |draw: &mut dyn FnMut(&mut Rng) -> f64| filled(&value.name, &value.ty, || draw(&mut rng));
        let tensor = match (role, value.ty.dtype) {
            (Role::State, _) => fill(&mut |_| 0.0),
            (_, DType::Bool) => fill(&mut |rng| rng.below(2) as f64),
            (_, d) if d.is_index() => {
                // The smallest range of the ops reading it or a view of it.
                let bounds = graph.ops.iter().flat_map(|op| {
                    op.inputs.iter().enumerate().filter(|&(_, &v)| layouts[v].root == arg).map(|(k, _)| index_bound(graph, op, k))
                });
                let bound = bounds.min().unwrap_or(10).max(1);
                let drawn = fill(&mut |rng| rng.below(bound) as f64);
                match drawn {
                    // Offsets (embedding_bag's bags): sorted, the first 0, so the bags are valid.
                    Ok(offsets) if reads_as_offsets(graph, &layouts, arg) => {
                        let mut values = offsets.to_f64();
                        values.sort_by(f64::total_cmp);
                        if let Some(first) = values.first_mut() {
                            *first = 0.0;
                        }
                        Ok(HostTensor::from_f64(offsets.ty, &values))
                    }
                    other => other,
                }
            }
            (Role::Input, _) => fill(&mut |rng| rng.normal()),
            (Role::Param, _) => match first_use_init(graph, arg) {
                Some(Init::Ones) => fill(&mut |_| 1.0),
                Some(Init::Zeros) => fill(&mut |_| 0.0),
                Some(Init::Normal(std)) => fill(&mut |rng| std * rng.normal()),
                None if dims.len() <= 1 => fill(&mut |_| 0.0),
                None => {
                    let fan_in = if dims.len() == 2 { dims[0] } else { dims[1..].iter().product() }.max(1);
                    let bound = 1.0 / (fan_in as f64).sqrt();
                    fill(&mut |rng| bound * (2.0 * rng.uniform() - 1.0))
                }
            },
        }?;
        args.insert(value.name.clone(), tensor);
    }
    Ok(args)
}

/// A tensor of `ty` holding `draw()` for each element in turn, its bytes allocated
/// fallibly (`name` names it in the error).
fn filled(name: &str, ty: &TensorType, mut draw: impl FnMut() -> f64) -> Result<HostTensor, ExecError> {
    let out_of_memory = || ExecError::OutOfMemory { what: format!("%{name}"), bytes: ty.bytes() };
    let bytes = ty.bytes().and_then(|b| usize::try_from(b).ok()).ok_or_else(out_of_memory)?;
    let mut tensor = HostTensor { ty: ty.clone(), bytes: Vec::new() };
    tensor.bytes.try_reserve_exact(bytes).map_err(|_| out_of_memory())?;
    tensor.bytes.resize(bytes, 0);
    let size = ty.dtype.size() as usize;
    for chunk in tensor.bytes.chunks_exact_mut(size) {
        encode(ty.dtype, draw(), chunk);
    }
    Ok(tensor)
}

/// The range `op` gives the integers it reads at input `k`: its row's bound for an input
/// of indices (labels' and ids' valid range), 0..10 for any other input (a view's
/// included).
/// Whether an op reads `arg` (or a view of it) as offsets (`Below::Offsets`).
fn reads_as_offsets(graph: &Graph, layouts: &IndexVec<ValueId, Layout>, arg: ValueId) -> bool {
    graph.ops.iter().any(|op| {
        op.kind.def().indices.iter().any(|ix| matches!(ix.below, Below::Offsets { .. }) && layouts[op.inputs[ix.input]].root == arg)
    })
}

fn index_bound(graph: &Graph, op: &Op, k: usize) -> u64 {
    match op.kind.def().indices.iter().find(|ix| ix.input == k).map(|ix| ix.below) {
        Some(Below::Dim { input, axis }) => graph.values[op.inputs[input]].ty.dims().get(axis).copied().unwrap_or(1),
        Some(Below::Attr(name)) => op.attrs.int(name).max(1) as u64,
        Some(Below::Offsets { input }) => graph.values[op.inputs[input]].ty.dims().first().copied().unwrap_or(0) + 1,
        Some(Below::DimAt { input, axis }) => {
            let ty = if input == usize::MAX { &graph.values[op.outputs[0]].ty } else { &graph.values[op.inputs[input]].ty };
            let rank = ty.rank() as i64;
            let a = op.attrs.int(axis);
            ty.dims().get((if a < 0 { a + rank } else { a }) as usize).copied().unwrap_or(1).max(1)
        }
        None => 10,
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
