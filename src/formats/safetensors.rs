//! safetensors files: weights in and out of `memplan run` (`--weights`, `--save`).
//!
//! The format: an 8-byte little-endian header length, a JSON header
//! `{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}` (an
//! optional `__metadata__` entry is skipped), then the data. Tensors are the executors'
//! [`HostTensor`]s by name; every dtype memplan has is supported. Reading checks every
//! offset and size against the file before slicing it.

use thiserror::Error;

use crate::exec::data::{HostTensor, Tensors};
use crate::ir::types::{DType, Shape, TensorType};

/// Why bytes are not a safetensors file memplan can read.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum SafetensorsError {
    /// Fewer than the 8 bytes of the header length.
    #[error("shorter than a safetensors header")]
    TooShort,
    /// The header length does not fit this machine's addresses.
    #[error("header length too large")]
    HeaderTooLarge,
    /// The header length points past the end of the file.
    #[error("header length past the end of the file")]
    HeaderPastEnd,
    /// The header is not a JSON object.
    #[error("bad header: {0}")]
    Header(String),
    /// A tensor's entry is malformed or does not match its data; `problem` says how.
    #[error("tensor {name}: {problem}")]
    Tensor { name: String, problem: String },
}

/// The format's name of `dtype`.
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::Bf16 => "BF16",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::Bool => "BOOL",
    }
}

/// Every tensor of a safetensors file's bytes.
pub fn from_bytes(bytes: &[u8]) -> Result<Tensors, SafetensorsError> {
    let header_len = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).ok_or(SafetensorsError::TooShort)?;
    let data_start = 8usize
        .checked_add(usize::try_from(header_len).map_err(|_| SafetensorsError::HeaderTooLarge)?)
        .filter(|&s| s <= bytes.len())
        .ok_or(SafetensorsError::HeaderPastEnd)?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..data_start]).map_err(|e| SafetensorsError::Header(e.to_string()))?;
    let data = &bytes[data_start..];
    let mut tensors = Tensors::new();
    for (name, entry) in header {
        if name == "__metadata__" {
            continue;
        }
        let fail = |problem: String| SafetensorsError::Tensor { name: name.clone(), problem };
        let field = |key: &str| entry.get(key).ok_or_else(|| fail(format!("no `{key}`")));
        let numbers = |key: &str| -> Result<Vec<u64>, SafetensorsError> {
            field(key)?.as_array().and_then(|a| a.iter().map(|d| d.as_u64()).collect()).ok_or_else(|| fail(format!("bad {key}")))
        };
        let dtype_value = field("dtype")?;
        let dtype = DType::ALL
            .into_iter()
            .find(|&d| dtype_value.as_str() == Some(dtype_name(d)))
            .ok_or_else(|| fail(format!("dtype {dtype_value} is not supported")))?;
        let shape = numbers("shape")?;
        let offsets = numbers("data_offsets")?;
        let ty = TensorType { dtype, shape: Shape(shape) };
        let (begin, end) = match offsets[..] {
            [b, e] if b <= e && e <= data.len() as u64 => (b as usize, e as usize),
            _ => return Err(fail("data_offsets outside the file".into())),
        };
        match ty.bytes() {
            Some(needed) if needed == (end - begin) as u64 => {}
            Some(needed) => return Err(fail(format!("{ty} needs {needed} bytes, the file has {}", end - begin))),
            None => return Err(fail(format!("{ty} is too large: more than 2^64 - 1 bytes"))),
        }
        tensors.insert(name, HostTensor { ty, bytes: data[begin..end].to_vec() });
    }
    Ok(tensors)
}

/// The bytes of a safetensors file holding `tensors`, in their order.
pub fn to_bytes(tensors: &Tensors) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, t) in tensors {
        let entry = serde_json::json!({
            "dtype": dtype_name(t.ty.dtype),
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_round_trip_and_bad_files_are_refused() {
        let mut t = Tensors::new();
        t.insert("w".into(), HostTensor::from_f64(TensorType::new(DType::F16, vec![2, 3]), &[1.0, -2.0, 0.5, 3.0, 0.0, 7.0]));
        t.insert("y".into(), HostTensor::from_f64(TensorType::new(DType::I32, vec![2]), &[3.0, 9.0]));
        let bytes = to_bytes(&t);
        assert_eq!(from_bytes(&bytes), Ok(t));
        assert_eq!(from_bytes(b"\xff\xff\xff\xff\xff\xff\xff\xff{}"), Err(SafetensorsError::HeaderPastEnd));
        assert_eq!(from_bytes(b"\x02"), Err(SafetensorsError::TooShort));
        let mut short = bytes.clone();
        short.truncate(short.len() - 1);
        assert!(matches!(from_bytes(&short), Err(SafetensorsError::Tensor { .. })), "a tensor past the end is refused");
    }

    /// Errors name sizes and dtypes as a person writes them, not as Rust debug-prints them
    /// (`needs Some(24) bytes`).
    #[test]
    fn errors_read_plainly() {
        let file = |header: &str| {
            let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
            bytes.extend_from_slice(header.as_bytes());
            bytes.extend_from_slice(&[0; 4]);
            from_bytes(&bytes).unwrap_err().to_string()
        };
        let entry = |dtype: &str, shape: &str| format!(r#"{{"w": {{"dtype": {dtype}, "shape": {shape}, "data_offsets": [0, 4]}}}}"#);
        assert_eq!(file(&entry(r#""F32""#, "[2, 3]")), "tensor w: f32[2,3] needs 24 bytes, the file has 4");
        let huge = file(&entry(r#""F32""#, "[4294967296, 4294967296]"));
        assert_eq!(huge, "tensor w: f32[4294967296,4294967296] is too large: more than 2^64 - 1 bytes");
        assert_eq!(file(&entry("7", "[1]")), "tensor w: dtype 7 is not supported");
    }
}
