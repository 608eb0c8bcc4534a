//! Element types, shapes and tensor types.
//!
//! Sizes are computed with checked arithmetic: a type whose byte size does not fit in a
//! `u64` has no size ([`TensorType::bytes`] returns `None`) and the verifier rejects it, so
//! every later layer may assume sizes fit.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An element type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    Bf16,
    I32,
    I64,
    Bool,
}

impl DType {
    pub const ALL: [DType; 6] = [DType::F32, DType::F16, DType::Bf16, DType::I32, DType::I64, DType::Bool];

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// The IR spelling.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::Bf16)
    }

    /// A float type's significand bits, the implicit one included (24 for f32, 11 for f16,
    /// 8 for bf16): the integers up to 2^bits and the fractions k / 2^bits it holds exactly.
    pub fn significand_bits(self) -> Option<u32> {
        match self {
            DType::F32 => Some(24),
            DType::F16 => Some(11),
            DType::Bf16 => Some(8),
            DType::I32 | DType::I64 | DType::Bool => None,
        }
    }

    /// Integer types usable as labels or indices.
    pub fn is_index(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A shape: one extent per dimension; `[]` is a scalar.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(pub Vec<u64>);

impl Shape {
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[u64] {
        &self.0
    }

    /// Number of elements, or `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.0.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl From<Vec<u64>> for Shape {
    fn from(dims: Vec<u64>) -> Shape {
        Shape(dims)
    }
}

/// A tensor type such as `f32[64,256]`.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType { dtype, shape: shape.into() }
    }

    /// Bytes of a dense tensor of this type, or `None` on overflow.
    pub fn bytes(&self) -> Option<u64> {
        self.shape.numel()?.checked_mul(self.dtype.size())
    }

    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    pub fn dims(&self) -> &[u64] {
        self.shape.dims()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

/// Row-major strides of `shape`.
pub fn dense_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        let t = TensorType::new(DType::F16, vec![64, 256]);
        assert_eq!(t.bytes(), Some(64 * 256 * 2));
        assert_eq!(t.to_string(), "f16[64,256]");
        let scalar = TensorType::new(DType::F32, vec![]);
        assert_eq!(scalar.bytes(), Some(4));
        assert_eq!(scalar.to_string(), "f32[]");
        let huge = TensorType::new(DType::F32, vec![1 << 32, 1 << 31]);
        assert_eq!(huge.bytes(), None);
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f64"), None);
    }
}
