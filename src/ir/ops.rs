//! The op table: one row per op, the single place that says what an op is.
//!
//! A row gives an op's IR name, its inputs and outputs (names used in docs and errors),
//! its attributes with defaults, its class (forward, backward, optimizer), its type rule
//! (output types from input types and attributes), its FLOPs, and its memory behaviour:
//! whether its output is a *view* of an input (shares the input's bytes, no copy) and over
//! which inputs it *may* write its outputs in place. Adding an op means adding a row here
//! (and its kernels, where executors exist).
//!
//! Invariant: `OPS[k as usize].kind == k` for every `OpKind` (a test checks it), so
//! [`OpKind::def`] is an array index.

use std::fmt;

use crate::ir::types::{DType, Shape, TensorType};

/// Every op memplan knows. The order is the table's order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum OpKind {
    // Elementwise arithmetic with broadcasting.
    Add,
    Sub,
    Mul,
    Div,
    AddScalar,
    MulScalar,
    // Activations and their gradients.
    Relu,
    ReluBackward,
    Gelu,
    GeluBackward,
    Softmax,
    SoftmaxBackward,
    CausalMask,
    // Linear algebra.
    Matmul,
    // Reductions and broadcasts.
    Sum,
    Mean,
    // Views and copies.
    Reshape,
    Transpose,
    Expand,
    Contiguous,
    Cast,
    Fill,
    // Embeddings and normalisation.
    Embedding,
    EmbeddingBackward,
    LayerNorm,
    LayerNormBackward,
    BatchNorm,
    BatchNormBackward,
    // Convolution and pooling.
    Conv2d,
    Conv2dBackward,
    MaxPool2d,
    MaxPool2dBackward,
    // Losses.
    CrossEntropy,
    CrossEntropyBackward,
    // Optimizer updates.
    Sgd,
    SgdMomentum,
    Adam,
    Adamw,
}

impl OpKind {
    /// This op's row.
    pub fn def(self) -> &'static OpDef {
        &OPS[self as usize]
    }

    /// The IR spelling.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The op spelled `name`, if any.
    pub fn from_name(name: &str) -> Option<OpKind> {
        OPS.iter().find(|row| row.name == name).map(|row| row.kind)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What part of a training step an op belongs to; reports class values by it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OpClass {
    /// Forward computation, including the loss and constants.
    Forward,
    /// A gradient computation (`*_backward`).
    Backward,
    /// An optimizer update: its outputs are new params and new state.
    Optimizer,
}

/// An attribute value.
#[derive(Clone, PartialEq, Debug)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(Vec<i64>),
    DType(DType),
}

/// The kind of value an attribute takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AttrKind {
    Int,
    Float,
    Bool,
    Ints,
    DType,
}

impl AttrKind {
    /// How the IR writes a value of this kind, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            AttrKind::Int => "an integer",
            AttrKind::Float => "a number",
            AttrKind::Bool => "true or false",
            AttrKind::Ints => "a list of integers like [0, 1]",
            AttrKind::DType => "a dtype (f32, f16, bf16, i32, i64, bool)",
        }
    }
}

impl Attr {
    pub fn kind(&self) -> AttrKind {
        match self {
            Attr::Int(_) => AttrKind::Int,
            Attr::Float(_) => AttrKind::Float,
            Attr::Bool(_) => AttrKind::Bool,
            Attr::Ints(_) => AttrKind::Ints,
            Attr::DType(_) => AttrKind::DType,
        }
    }
}

impl fmt::Display for Attr {
    /// The canonical IR spelling (floats in Rust's shortest round-trip form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => write!(f, "{x:?}"),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            Attr::DType(d) => write!(f, "{d}"),
        }
    }
}

/// A default for an attribute the IR may leave out.
#[derive(Clone, Copy, Debug)]
pub enum AttrDefault {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(&'static [i64]),
}

impl AttrDefault {
    pub fn to_attr(self) -> Attr {
        match self {
            AttrDefault::Int(i) => Attr::Int(i),
            AttrDefault::Float(x) => Attr::Float(x),
            AttrDefault::Bool(b) => Attr::Bool(b),
            AttrDefault::Ints(v) => Attr::Ints(v.to_vec()),
        }
    }
}

/// One attribute of a row.
#[derive(Debug)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    /// `None`: the attribute must be written.
    pub default: Option<AttrDefault>,
}

const fn attr(name: &'static str, kind: AttrKind, default: Option<AttrDefault>) -> AttrSpec {
    AttrSpec { name, kind, default }
}

/// An op's attributes: every attribute of its row, in row order, defaults filled in.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Attrs(pub Vec<(&'static str, Attr)>);

impl Attrs {
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, a)| a)
    }

    /// The defaults of `kind`'s row, `None` if some attribute has no default.
    pub fn defaults(kind: OpKind) -> Option<Attrs> {
        kind.def().attrs.iter().map(|spec| Some((spec.name, spec.default?.to_attr()))).collect::<Option<_>>().map(Attrs)
    }

    /// Sets `name` (which must be an attribute of the row these attrs were made for).
    pub fn with(mut self, name: &'static str, value: Attr) -> Attrs {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
        self
    }

    // Typed getters. Rows read only their own attributes, which the front end resolved
    // with the right kinds; a missing or mistyped one is a bug in memplan, hence the panics.

    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Some(Attr::Int(i)) => *i,
            other => panic!("attribute {name}: expected an integer, found {other:?}"),
        }
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.get(name) {
            Some(Attr::Float(x)) => *x,
            other => panic!("attribute {name}: expected a float, found {other:?}"),
        }
    }

    pub fn bool(&self, name: &str) -> bool {
        match self.get(name) {
            Some(Attr::Bool(b)) => *b,
            other => panic!("attribute {name}: expected a bool, found {other:?}"),
        }
    }

    pub fn ints(&self, name: &str) -> &[i64] {
        match self.get(name) {
            Some(Attr::Ints(v)) => v,
            other => panic!("attribute {name}: expected a list of integers, found {other:?}"),
        }
    }

    pub fn dtype(&self, name: &str) -> DType {
        match self.get(name) {
            Some(Attr::DType(d)) => *d,
            other => panic!("attribute {name}: expected a dtype, found {other:?}"),
        }
    }
}

/// The type rule: output types from input types and attributes, or why the inputs do not fit.
/// Inputs arrive in row order and their count already matches the row.
pub type InferFn = fn(&[&TensorType], &Attrs) -> Result<Vec<TensorType>, String>;

/// Floating-point operations of one execution, from input and output types (saturating).
pub type FlopsFn = fn(&[&TensorType], &[&TensorType], &Attrs) -> u64;

/// One row of the op table.
pub struct OpDef {
    pub kind: OpKind,
    /// The IR spelling.
    pub name: &'static str,
    /// Names of the inputs, in order; the arity is their number.
    pub inputs: &'static [&'static str],
    /// Names of the outputs, in order.
    pub outputs: &'static [&'static str],
    pub attrs: &'static [AttrSpec],
    pub class: OpClass,
    pub infer: InferFn,
    pub flops: FlopsFn,
    /// `Some(k)`: output 0 is a view of input `k` (same bytes, no copy).
    pub view_of: Option<usize>,
    /// `(output, input)` pairs: the op may write that output over that input's bytes when
    /// the input dies at this op and both have the same dtype and size.
    pub inplace: &'static [(usize, usize)],
    /// One line for docs/IR.md and `--help`.
    pub doc: &'static str,
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpDef").field("name", &self.name).finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------
// Shared pieces of rules.

/// Numpy broadcasting of two shapes.
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let rank = a.rank().max(b.rank());
    let mut dims = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.rank() { 1 } else { a.dims()[i - (rank - a.rank())] };
        let db = if i < rank - b.rank() { 1 } else { b.dims()[i - (rank - b.rank())] };
        dims[i] = match (da, db) {
            _ if da == db => da,
            (1, d) | (d, 1) => d,
            _ => return Err(format!("shapes {a} and {b} do not broadcast: dimension {i} is {da} vs {db}")),
        };
    }
    Ok(Shape(dims))
}

fn same_dtype(inputs: &[&TensorType]) -> Result<DType, String> {
    let dtype = inputs[0].dtype;
    match inputs.iter().find(|t| t.dtype != dtype) {
        Some(t) => Err(format!("dtypes differ: {} and {} (insert a cast)", inputs[0], t)),
        None => Ok(dtype),
    }
}

fn float_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_float() { Ok(()) } else { Err(format!("{what} must be a float tensor, found {t}")) }
}

fn binary_broadcast(inputs: &[&TensorType], _: &Attrs) -> Result<Vec<TensorType>, String> {
    let dtype = same_dtype(inputs)?;
    Ok(vec![TensorType { dtype, shape: broadcast(&inputs[0].shape, &inputs[1].shape)? }])
}

fn unary_float(inputs: &[&TensorType], _: &Attrs) -> Result<Vec<TensorType>, String> {
    float_input(inputs[0], "the input")?;
    Ok(vec![inputs[0].clone()])
}

fn numel(t: &TensorType) -> u64 {
    t.shape.numel().unwrap_or(u64::MAX)
}

/// `k` FLOPs per output element.
fn per_output<const K: u64>(_: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    outputs.iter().map(|t| numel(t)).fold(0u64, |a, n| a.saturating_add(n.saturating_mul(K)))
}

/// Matmul: `a[..., m, k] @ b[..., k, n]` with optional transposes of the last two dims and
/// broadcasting batch dims.
fn infer_matmul(inputs: &[&TensorType], attrs: &Attrs) -> Result<Vec<TensorType>, String> {
    let (a, b) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    if dtype.is_index() || dtype == DType::Bool {
        return Err(format!("matmul needs float tensors, found {a}"));
    }
    if a.rank() < 2 || b.rank() < 2 {
        return Err(format!("matmul needs rank >= 2 operands, found {a} and {b}"));
    }
    let last2 = |t: &TensorType, transposed: bool| {
        let d = t.dims();
        let (r, c) = (d[d.len() - 2], d[d.len() - 1]);
        if transposed { (c, r) } else { (r, c) }
    };
    let (m, k1) = last2(a, attrs.bool("transpose_a"));
    let (k2, n) = last2(b, attrs.bool("transpose_b"));
    if k1 != k2 {
        return Err(format!(
            "inner dimensions differ: {a}{} @ {b}{} is [{m},{k1}] @ [{k2},{n}]",
            if attrs.bool("transpose_a") { "ᵀ" } else { "" },
            if attrs.bool("transpose_b") { "ᵀ" } else { "" },
        ));
    }
    let batch_a = Shape(a.dims()[..a.rank() - 2].to_vec());
    let batch_b = Shape(b.dims()[..b.rank() - 2].to_vec());
    let mut dims = broadcast(&batch_a, &batch_b).map_err(|e| format!("batch dimensions: {e}"))?.0;
    dims.extend([m, n]);
    Ok(vec![TensorType { dtype, shape: Shape(dims) }])
}

fn flops_matmul(inputs: &[&TensorType], outputs: &[&TensorType], attrs: &Attrs) -> u64 {
    let a = inputs[0].dims();
    let k = if attrs.bool("transpose_a") { a[a.len() - 2] } else { a[a.len() - 1] };
    numel(outputs[0]).saturating_mul(k).saturating_mul(2)
}

use AttrKind as K;

/// The table. Row order = `OpKind` order.
pub static OPS: &[OpDef] = &[
    OpDef {
        kind: OpKind::Add,
        name: "add",
        inputs: &["a", "b"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: binary_broadcast,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0), (0, 1)],
        doc: "a + b, numpy broadcasting",
    },
    // ... the remaining rows follow the same pattern ...
    OpDef {
        kind: OpKind::Relu,
        name: "relu",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: unary_float,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "max(x, 0)",
    },
    OpDef {
        kind: OpKind::Matmul,
        name: "matmul",
        inputs: &["a", "b"],
        outputs: &["out"],
        attrs: &[
            attr("transpose_a", K::Bool, Some(AttrDefault::Bool(false))),
            attr("transpose_b", K::Bool, Some(AttrDefault::Bool(false))),
        ],
        class: OpClass::Forward,
        infer: infer_matmul,
        flops: flops_matmul,
        view_of: None,
        inplace: &[],
        doc: "a @ b over the last two dims (each optionally transposed), batch dims broadcast",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_kind_order() {
        for (i, row) in OPS.iter().enumerate() {
            assert_eq!(row.kind as usize, i, "row {} ({}) is out of place", i, row.name);
        }
    }

    #[test]
    fn broadcasting() {
        let s = |d: &[u64]| Shape(d.to_vec());
        assert_eq!(broadcast(&s(&[64, 256]), &s(&[256])).unwrap(), s(&[64, 256]));
        assert_eq!(broadcast(&s(&[8, 1, 4]), &s(&[3, 1])).unwrap(), s(&[8, 3, 4]));
        assert!(broadcast(&s(&[64, 256]), &s(&[255])).is_err());
    }
}
