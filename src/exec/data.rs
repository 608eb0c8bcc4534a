//! Step arguments and results as named host tensors; the dtype codec; seeded
//! initialisation; safetensors files.
//!
//! A [`HostTensor`] holds dense row-major little-endian bytes in its dtype. Conversions go
//! through `f64` ([`decode`], [`encode`]): exact for every dtype memplan has (i64 up to
//! 2^53); floats round to nearest even when encoded.
//!
//! Initialisation is seeded and deterministic on every platform (`crate::rng`): params by
//! how the step uses them (norm scales 1, shifts and 1-D biases 0, embedding tables
//! N(0, 0.02), other weights uniform in ±1/sqrt(fan_in)); state 0; float inputs N(0, 1);
//! integer inputs that are labels or ids in their valid range; other integer inputs in
//! 0..10; bool inputs fair coins.

use std::path::Path;

use half::{bf16, f16};
use indexmap::IndexMap;

use crate::exec::ExecError;
use crate::index::{OpId, ValueId};
use crate::ir::graph::{Graph, Role};
use crate::ir::ops::OpKind;
use crate::ir::types::{DType, Shape, TensorType};
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
        op.inputs.iter().position(|&i| i == arg).map(|k| (id, op.kind.def().inputs[k]))
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
                Some((OpKind::LayerNorm | OpKind::BatchNorm, "gamma")) => vec![1.0; n],
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

// ---------------------------------------------------------------------------------------
// safetensors: 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}, then data.

fn st_dtype(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::Bf16 => "BF16",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::Bool => "BOOL",
    }
}

/// Reads every tensor of a safetensors file.
pub fn load_safetensors(path: &Path) -> Result<Tensors, ExecError> {
    let fail = |message: String| ExecError::Weights { path: path.display().to_string(), message };
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let header_len = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).ok_or_else(|| fail("shorter than a safetensors header".into()))?;
    let data_start = 8usize.checked_add(usize::try_from(header_len).map_err(|_| fail("header length too large".into()))?).filter(|&s| s <= bytes.len()).ok_or_else(|| fail("header length past the end of the file".into()))?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..data_start]).map_err(|e| fail(format!("bad header: {e}")))?;
    let data = &bytes[data_start..];
    let mut tensors = Tensors::new();
    for (name, entry) in header {
        if name == "__metadata__" {
            continue;
        }
        let field = |key: &str| entry.get(key).ok_or_else(|| fail(format!("tensor {name}: no `{key}`")));
        let dtype_name = field("dtype")?.as_str().unwrap_or("");
        let dtype = DType::ALL.into_iter().find(|&d| st_dtype(d) == dtype_name).ok_or_else(|| fail(format!("tensor {name}: dtype {dtype_name} is not supported")))?;
        let shape: Vec<u64> = field("shape")?.as_array().and_then(|a| a.iter().map(|d| d.as_u64()).collect()).ok_or_else(|| fail(format!("tensor {name}: bad shape")))?;
        let offsets: Vec<u64> = field("data_offsets")?.as_array().and_then(|a| a.iter().map(|d| d.as_u64()).collect()).ok_or_else(|| fail(format!("tensor {name}: bad data_offsets")))?;
        let ty = TensorType { dtype, shape: Shape(shape) };
        let (begin, end) = match offsets[..] {
            [b, e] if b <= e && e <= data.len() as u64 => (b as usize, e as usize),
            _ => return Err(fail(format!("tensor {name}: data_offsets outside the file"))),
        };
        if ty.bytes() != Some((end - begin) as u64) {
            return Err(fail(format!("tensor {name}: {ty} needs {:?} bytes, the file has {}", ty.bytes(), end - begin)));
        }
        tensors.insert(name, HostTensor { ty, bytes: data[begin..end].to_vec() });
    }
    Ok(tensors)
}

/// Writes `tensors` as a new safetensors file; refuses to overwrite an existing file.
pub fn save_safetensors(path: &Path, tensors: &Tensors) -> Result<(), ExecError> {
    let fail = |message: String| ExecError::Weights { path: path.display().to_string(), message };
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, t) in tensors {
        let entry = serde_json::json!({
            "dtype": st_dtype(t.ty.dtype),
            "shape": t.ty.dims(),
            "data_offsets": [offset, offset + t.bytes.len()],
        });
        header.insert(name.clone(), entry);
        offset += t.bytes.len();
    }
    let mut header = serde_json::to_vec(&header).expect("a JSON map serialises");
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for t in tensors.values() {
        out.extend_from_slice(&t.bytes);
    }
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| fail(format!("cannot create (memplan never overwrites a file): {e}")))?;
    file.write_all(&out).map_err(|e| fail(format!("cannot write: {e}")))
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

    #[test]
    fn safetensors_round_trip_and_never_overwrite() {
        let dir = std::env::temp_dir().join(format!("memplan-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.safetensors");
        let _ = std::fs::remove_file(&path);
        let mut t = Tensors::new();
        t.insert("w".into(), HostTensor::from_f64(TensorType::new(DType::F16, vec![2, 3]), &[1.0, -2.0, 0.5, 3.0, 0.0, 7.0]));
        t.insert("y".into(), HostTensor::from_f64(TensorType::new(DType::I32, vec![2]), &[3.0, 9.0]));
        save_safetensors(&path, &t).unwrap();
        assert_eq!(load_safetensors(&path).unwrap(), t);
        let err = save_safetensors(&path, &t).unwrap_err();
        assert!(err.to_string().contains("never overwrites"), "{err}");
        std::fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\xff{}").unwrap();
        assert!(load_safetensors(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
