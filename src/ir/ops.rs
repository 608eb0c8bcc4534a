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


impl OpDef {
    /// One-line usage, for help lines and docs: inputs, attributes with their defaults (or
    /// `<kind>` where the attribute must be written), outputs. For example
    /// `conv2d_backward(dy, x, w, stride=[1, 1], padding=[0, 0]) -> (dx, dw)`.
    pub fn signature(&self) -> String {
        let mut parts: Vec<String> = self.inputs.iter().map(|name| name.to_string()).collect();
        for spec in self.attrs {
            let value = match spec.default {
                Some(default) => default.to_attr().to_string(),
                None => format!("<{}>", kind_word(spec.kind)),
            };
            parts.push(format!("{}={}", spec.name, value));
        }
        let outputs = match self.outputs {
            [one] => one.to_string(),
            many => format!("({})", many.join(", ")),
        };
        format!("{}({}) -> {}", self.name, parts.join(", "), outputs)
    }
}

/// The short word for an attribute kind in signatures: `lr=<float>`.
fn kind_word(kind: AttrKind) -> &'static str {
    match kind {
        AttrKind::Int => "int",
        AttrKind::Float => "float",
        AttrKind::Bool => "bool",
        AttrKind::Ints => "ints",
        AttrKind::DType => "dtype",
    }
}

// ---------------------------------------------------------------------------------------
// Shared pieces of rules. Every rule checks its inputs and attribute values and returns a
// one-line message naming the types involved; none panics, whatever the types. Sizes use
// checked arithmetic, and every rule ends with `done`, which rejects an output whose byte
// size does not fit in a u64.

type Rule = Result<Vec<TensorType>, String>;

/// Numpy broadcasting of two shapes.
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let rank = a.rank().max(b.rank());
    let mut dims = vec![0; rank];
    for (i, slot) in dims.iter_mut().enumerate() {
        let da = if i < rank - a.rank() { 1 } else { a.dims()[i - (rank - a.rank())] };
        let db = if i < rank - b.rank() { 1 } else { b.dims()[i - (rank - b.rank())] };
        *slot = match (da, db) {
            _ if da == db => da,
            (1, d) | (d, 1) => d,
            _ => return Err(format!("shapes {a} and {b} do not broadcast: dimension {i} is {da} vs {db}")),
        };
    }
    Ok(Shape(dims))
}

/// The rule's outputs, once each is known to have a byte size that fits in a `u64`.
fn done(outputs: Vec<TensorType>) -> Rule {
    match outputs.iter().find(|t| t.bytes().is_none()) {
        Some(t) => Err(format!("the output {t} would have more than 2^64 bytes")),
        None => Ok(outputs),
    }
}

fn same_dtype(inputs: &[&TensorType]) -> Result<DType, String> {
    let dtype = inputs[0].dtype;
    match inputs.iter().find(|t| t.dtype != dtype) {
        Some(t) => Err(format!("dtypes differ: {} and {} (insert a cast)", inputs[0], t)),
        None => Ok(dtype),
    }
}

fn same_type(a: &TensorType, a_name: &str, b: &TensorType, b_name: &str) -> Result<(), String> {
    if a == b { Ok(()) } else { Err(format!("{a_name} and {b_name} must have the same type, found {a} and {b}")) }
}

fn float_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_float() { Ok(()) } else { Err(format!("{what} must be a float tensor, found {t}")) }
}

fn index_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_index() { Ok(()) } else { Err(format!("{what} must be an i32 or i64 tensor, found {t}")) }
}

/// An axis attribute resolved against `t`'s rank (negative counts from the end).
fn axis(value: i64, t: &TensorType) -> Result<usize, String> {
    let rank = t.rank() as i64;
    let resolved = if value < 0 { value + rank } else { value };
    if (0..rank).contains(&resolved) {
        Ok(resolved as usize)
    } else if rank == 0 {
        Err(format!("axis {value} is out of range: {t} is a scalar and has no axes"))
    } else {
        Err(format!("axis {value} is out of range for {t} (use {}..={})", -rank, rank - 1))
    }
}

/// A list-of-dimensions attribute (`shape=[2, 3]`): every entry must be >= 0.
fn dims_attr(attrs: &Attrs, name: &str) -> Result<Vec<u64>, String> {
    let values = attrs.ints(name);
    values
        .iter()
        .map(|&d| {
            u64::try_from(d).map_err(|_| format!("{name}={} has a negative dimension {d}", Attr::Ints(values.to_vec())))
        })
        .collect()
}

/// A (height, width) attribute like `stride=[2, 2]`, each entry at least `min`.
fn pair(attrs: &Attrs, name: &str, min: i64) -> Result<[u64; 2], String> {
    let values = attrs.ints(name);
    let shown = Attr::Ints(values.to_vec());
    match *values {
        [h, w] if h >= min && w >= min => Ok([h as u64, w as u64]),
        [_, _] => Err(format!("{name}={shown}: each entry must be at least {min}")),
        _ => Err(format!("{name}={shown} must have 2 entries (height, width)")),
    }
}

/// A float attribute that must satisfy `ok` (`rule` says how, for the message).
fn float_attr(attrs: &Attrs, name: &str, ok: fn(f64) -> bool, rule: &str) -> Result<f64, String> {
    let x = attrs.float(name);
    if ok(x) { Ok(x) } else { Err(format!("{name}={x:?} must be {rule}")) }
}

fn not_nan(attrs: &Attrs, name: &str) -> Result<f64, String> {
    float_attr(attrs, name, |x| !x.is_nan(), "a number (not NaN)")
}

fn positive_eps(attrs: &Attrs) -> Result<f64, String> {
    float_attr(attrs, "eps", |x| x > 0.0 && x.is_finite(), "a positive finite number")
}

fn non_negative(attrs: &Attrs, name: &str) -> Result<f64, String> {
    float_attr(attrs, name, |x| x >= 0.0 && x.is_finite(), "a finite number >= 0")
}

/// The output extent of a sliding window: `(size + 2*pad - kernel) / stride + 1`.
fn window(size: u64, kernel: u64, stride: u64, pad: u64, dim: &str) -> Result<u64, String> {
    let padded = pad.checked_mul(2).and_then(|p| p.checked_add(size));
    let Some(padded) = padded else {
        return Err(format!("{dim} {size} with padding {pad} is too large"));
    };
    match padded.checked_sub(kernel) {
        Some(room) => Ok(room / stride + 1),
        None => Err(format!("{dim} {size} plus padding 2*{pad} is smaller than the window ({kernel})")),
    }
}

fn numel(t: &TensorType) -> u64 {
    t.shape.numel().unwrap_or(u64::MAX)
}

fn dim(t: &TensorType, i: usize) -> u64 {
    t.dims().get(i).copied().unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// FLOPs. Arithmetic counts; copies, casts, gathers and views count 0.

/// `K` FLOPs per output element.
fn per_output<const K: u64>(_: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    outputs.iter().map(|t| numel(t)).fold(0u64, |a, n| a.saturating_add(n.saturating_mul(K)))
}

/// `K` FLOPs per element of input 0.
fn per_input<const K: u64>(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    inputs.first().map_or(0, |t| numel(t).saturating_mul(K))
}

fn no_flops(_: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    0
}

// ---------------------------------------------------------------------------------------
// Rules, in table order.

fn infer_binary(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let dtype = same_dtype(inputs)?;
    if dtype == DType::Bool {
        return Err(format!("arithmetic needs numbers, found {} and {} (cast first)", inputs[0], inputs[1]));
    }
    done(vec![TensorType { dtype, shape: broadcast(&inputs[0].shape, &inputs[1].shape)? }])
}

fn infer_scalar_op(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    not_nan(attrs, "value")?;
    done(vec![inputs[0].clone()])
}

fn infer_unary_float(inputs: &[&TensorType], _: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    done(vec![inputs[0].clone()])
}

/// `(dy, saved) -> dx` where all three have one float type.
fn unary_backward(inputs: &[&TensorType], saved: &str) -> Rule {
    float_input(inputs[0], "dy")?;
    same_type(inputs[0], "dy", inputs[1], saved)?;
    done(vec![inputs[0].clone()])
}

fn infer_relu_backward(inputs: &[&TensorType], _: &Attrs) -> Rule {
    unary_backward(inputs, "y")
}

fn infer_gelu_backward(inputs: &[&TensorType], _: &Attrs) -> Rule {
    unary_backward(inputs, "x")
}

fn infer_softmax(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    axis(attrs.int("axis"), inputs[0])?;
    done(vec![inputs[0].clone()])
}

fn infer_softmax_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "dy")?;
    same_type(inputs[0], "dy", inputs[1], "y")?;
    axis(attrs.int("axis"), inputs[0])?;
    done(vec![inputs[0].clone()])
}

fn infer_causal_mask(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    float_input(x, "x")?;
    not_nan(attrs, "value")?;
    match *x.dims() {
        [.., rows, cols] if rows == cols => done(vec![x.clone()]),
        _ => Err(format!("x must end in a square [..,T,T], found {x}")),
    }
}

/// Matmul: `a[..., m, k] @ b[..., k, n]` with optional transposes of the last two dims and
/// broadcasting batch dims.
fn infer_matmul(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (a, b) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    if !dtype.is_float() {
        return Err(format!("needs float tensors, found {a} and {b}"));
    }
    if a.rank() < 2 || b.rank() < 2 {
        return Err(format!("needs operands of rank >= 2, found {a} and {b}"));
    }
    let last2 = |t: &TensorType, transposed: bool| {
        let d = t.dims();
        let (r, c) = (d[d.len() - 2], d[d.len() - 1]);
        if transposed { (c, r) } else { (r, c) }
    };
    let (ta, tb) = (attrs.bool("transpose_a"), attrs.bool("transpose_b"));
    let (m, k1) = last2(a, ta);
    let (k2, n) = last2(b, tb);
    if k1 != k2 {
        return Err(format!(
            "inner dimensions differ: {a}{} @ {b}{} is [{m},{k1}] @ [{k2},{n}]",
            if ta { "ᵀ" } else { "" },
            if tb { "ᵀ" } else { "" },
        ));
    }
    let batch_a = Shape(a.dims()[..a.rank() - 2].to_vec());
    let batch_b = Shape(b.dims()[..b.rank() - 2].to_vec());
    let mut dims = broadcast(&batch_a, &batch_b).map_err(|e| format!("batch dimensions: {e}"))?.0;
    dims.extend([m, n]);
    done(vec![TensorType { dtype, shape: Shape(dims) }])
}

/// 2 FLOPs (multiply, add) per output element per step of the inner dimension.
fn flops_matmul(inputs: &[&TensorType], outputs: &[&TensorType], attrs: &Attrs) -> u64 {
    let a = inputs[0];
    let k = match attrs.get("transpose_a") {
        Some(Attr::Bool(true)) => dim(a, a.rank().wrapping_sub(2)),
        _ => dim(a, a.rank().wrapping_sub(1)),
    };
    outputs.first().map_or(0, |out| numel(out)).saturating_mul(k).saturating_mul(2)
}

fn reduce(x: &TensorType, attrs: &Attrs) -> Rule {
    let axes = attrs.ints("axes");
    let shown = Attr::Ints(axes.to_vec());
    if axes.is_empty() {
        return Err(format!("axes=[] is empty: list the dimensions of {x} to reduce"));
    }
    let mut reduced = vec![false; x.rank()];
    for &a in axes {
        let i = axis(a, x)?;
        if reduced[i] {
            return Err(format!("axes={shown} names dimension {i} of {x} twice"));
        }
        reduced[i] = true;
    }
    let keepdim = attrs.bool("keepdim");
    let dims = x
        .dims()
        .iter()
        .zip(&reduced)
        .filter_map(|(&d, &r)| match (r, keepdim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect::<Vec<_>>();
    done(vec![TensorType::new(x.dtype, dims)])
}

fn infer_sum(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    if inputs[0].dtype == DType::Bool {
        return Err(format!("cannot sum a bool tensor {} (cast it first)", inputs[0]));
    }
    reduce(inputs[0], attrs)
}

fn infer_mean(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    reduce(inputs[0], attrs)
}

fn infer_reshape(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let out = TensorType::new(x.dtype, dims_attr(attrs, "shape")?);
    match (x.shape.numel(), out.shape.numel()) {
        (Some(a), Some(b)) if a == b => done(vec![out]),
        (Some(a), Some(b)) => Err(format!("cannot reshape {x} ({a} elements) to {} ({b} elements)", out.shape)),
        _ => Err(format!("cannot reshape {x} to {}: more than 2^64 elements", out.shape)),
    }
}

fn infer_transpose(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let perm = attrs.ints("perm");
    let shown = Attr::Ints(perm.to_vec());
    if perm.len() != x.rank() {
        return Err(format!("perm={shown} has {} entries but {x} has rank {}", perm.len(), x.rank()));
    }
    let mut seen = vec![false; x.rank()];
    let mut dims = Vec::with_capacity(x.rank());
    for &p in perm {
        match usize::try_from(p) {
            Ok(i) if i < x.rank() && !seen[i] => {
                seen[i] = true;
                dims.push(x.dims()[i]);
            }
            _ => return Err(format!("perm={shown} is not a permutation of 0..{} (for {x})", x.rank())),
        }
    }
    done(vec![TensorType::new(x.dtype, dims)])
}

fn infer_expand(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let shape = Shape(dims_attr(attrs, "shape")?);
    let Some(offset) = shape.rank().checked_sub(x.rank()) else {
        return Err(format!("cannot expand {x} to {shape}: the target has fewer dimensions"));
    };
    for (i, &d) in x.dims().iter().enumerate() {
        let target = shape.dims()[offset + i];
        if d != target && d != 1 {
            return Err(format!("cannot expand {x} to {shape}: dimension {i} is {d}, not 1 or {target}"));
        }
    }
    done(vec![TensorType { dtype: x.dtype, shape }])
}

fn infer_contiguous(inputs: &[&TensorType], _: &Attrs) -> Rule {
    done(vec![inputs[0].clone()])
}

fn infer_cast(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    done(vec![TensorType { dtype: attrs.dtype("to"), shape: inputs[0].shape.clone() }])
}

fn infer_fill(_: &[&TensorType], attrs: &Attrs) -> Rule {
    let dims = dims_attr(attrs, "shape")?;
    let dtype = attrs.dtype("dtype");
    let value = not_nan(attrs, "value")?;
    let fits = match dtype {
        DType::F32 | DType::F16 | DType::Bf16 => true,
        DType::Bool => value == 0.0 || value == 1.0,
        DType::I32 => value.fract() == 0.0 && value >= i32::MIN as f64 && value <= i32::MAX as f64,
        // 2^63 is exactly representable; every f64 below it fits in an i64.
        DType::I64 => value.fract() == 0.0 && value >= -(2f64.powi(63)) && value < 2f64.powi(63),
    };
    if !fits {
        return Err(format!("value={value:?} is not representable as {dtype}"));
    }
    done(vec![TensorType::new(dtype, dims)])
}

fn infer_embedding(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let (table, ids) = (inputs[0], inputs[1]);
    float_input(table, "table")?;
    index_input(ids, "ids")?;
    let [_, d] = *table.dims() else {
        return Err(format!("table must be [V,D], found {table}"));
    };
    let mut dims = ids.dims().to_vec();
    dims.push(d);
    done(vec![TensorType::new(table.dtype, dims)])
}

fn infer_embedding_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, ids) = (inputs[0], inputs[1]);
    float_input(dy, "dy")?;
    index_input(ids, "ids")?;
    let vocab = attrs.int("vocab");
    if vocab < 1 {
        return Err(format!("vocab={vocab} must be at least 1"));
    }
    match dy.dims().split_last() {
        Some((&d, prefix)) if prefix == ids.dims() => done(vec![TensorType::new(dy.dtype, vec![vocab as u64, d])]),
        _ => Err(format!("dy must be ids' shape plus a last dimension D, found dy {dy} and ids {ids}")),
    }
}

/// Shared by the norms: `x` float with channel count `channels` (`None` if `x` has no such
/// dimension; `layout` says which), each param exactly `x.dtype[channels]`, eps positive.
/// Returns the param type.
fn norm_params(
    x: &TensorType,
    channels: Option<u64>,
    layout: &str,
    params: &[(&TensorType, &str)],
    attrs: &Attrs,
) -> Result<TensorType, String> {
    float_input(x, "x")?;
    positive_eps(attrs)?;
    let Some(c) = channels else {
        return Err(format!("x must be {layout}, found {x}"));
    };
    let want = TensorType::new(x.dtype, vec![c]);
    for &(t, name) in params {
        if *t != want {
            return Err(format!("{name} must be {want} for x {x}, found {t}"));
        }
    }
    Ok(want)
}

fn infer_layer_norm(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let d = x.dims().last().copied();
    norm_params(x, d, "[...,D]", &[(inputs[1], "gamma"), (inputs[2], "beta")], attrs)?;
    done(vec![x.clone()])
}

fn infer_layer_norm_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    same_type(dy, "dy", x, "x")?;
    let d = x.dims().last().copied();
    let p = norm_params(x, d, "[...,D]", &[(inputs[2], "gamma")], attrs)?;
    done(vec![x.clone(), p.clone(), p])
}

fn batch_channels(x: &TensorType) -> Option<u64> {
    if x.rank() >= 2 { Some(x.dims()[1]) } else { None }
}

fn infer_batch_norm(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    norm_params(x, batch_channels(x), "[N,C,...]", &[(inputs[1], "gamma"), (inputs[2], "beta")], attrs)?;
    done(vec![x.clone()])
}

fn infer_batch_norm_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    same_type(dy, "dy", x, "x")?;
    let p = norm_params(x, batch_channels(x), "[N,C,...]", &[(inputs[2], "gamma")], attrs)?;
    done(vec![x.clone(), p.clone(), p])
}

fn infer_conv2d(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, w) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    float_input(x, "x")?;
    let (&[n, c, h, wd], &[k, wc, r, s]) = (x.dims(), w.dims()) else {
        return Err(format!("x must be [N,C,H,W] and w [K,C,R,S], found {x} and {w}"));
    };
    if c != wc {
        return Err(format!("channels differ: x {x} has C={c} but w {w} has C={wc}"));
    }
    let stride = pair(attrs, "stride", 1)?;
    let padding = pair(attrs, "padding", 0)?;
    let in_context = |e: String| format!("{e} (x {x}, w {w})");
    let p = window(h, r, stride[0], padding[0], "height").map_err(in_context)?;
    let q = window(wd, s, stride[1], padding[1], "width").map_err(in_context)?;
    done(vec![TensorType::new(dtype, vec![n, k, p, q])])
}

fn infer_conv2d_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x, w) = (inputs[0], inputs[1], inputs[2]);
    let y = infer_conv2d(&[x, w], attrs)?.remove(0);
    if *dy != y {
        return Err(format!("dy must be conv2d(x {x}, w {w})'s type {y}, found {dy}"));
    }
    done(vec![x.clone(), w.clone()])
}

/// 2·N·K·P·Q·C·R·S: multiply-add per output element per kernel tap.
fn conv_flops(y: Option<&&TensorType>, w: Option<&&TensorType>) -> u64 {
    let taps = w.map_or(0, |w| dim(w, 1).saturating_mul(dim(w, 2)).saturating_mul(dim(w, 3)));
    y.map_or(0, |y| numel(y)).saturating_mul(taps).saturating_mul(2)
}

fn flops_conv2d(inputs: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    conv_flops(outputs.first(), inputs.get(1))
}

/// dx and dw each cost as much as the forward.
fn flops_conv2d_backward(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    conv_flops(inputs.first(), inputs.get(2)).saturating_mul(2)
}

fn infer_max_pool2d(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    float_input(x, "x")?;
    let &[n, c, h, w] = x.dims() else {
        return Err(format!("x must be [N,C,H,W], found {x}"));
    };
    let kernel = pair(attrs, "kernel", 1)?;
    let stride = pair(attrs, "stride", 1)?;
    let padding = pair(attrs, "padding", 0)?;
    if padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2 {
        return Err(format!(
            "padding={} must be at most half of kernel={}",
            Attr::Ints(attrs.ints("padding").to_vec()),
            Attr::Ints(attrs.ints("kernel").to_vec())
        ));
    }
    let in_context = |e: String| format!("{e} (x {x})");
    let p = window(h, kernel[0], stride[0], padding[0], "height").map_err(in_context)?;
    let q = window(w, kernel[1], stride[1], padding[1], "width").map_err(in_context)?;
    done(vec![TensorType::new(x.dtype, vec![n, c, p, q])])
}

fn infer_max_pool2d_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    let y = infer_max_pool2d(&[x], attrs)?.remove(0);
    if *dy != y {
        return Err(format!("dy must be max_pool2d(x {x})'s type {y}, found {dy}"));
    }
    done(vec![x.clone()])
}

fn window_size(attrs: &Attrs) -> u64 {
    match attrs.get("kernel") {
        Some(Attr::Ints(k)) => k.iter().fold(1u64, |a, &d| a.saturating_mul(u64::try_from(d).unwrap_or(0))),
        _ => 0,
    }
}

/// One comparison per window element per output element.
fn flops_max_pool2d(_: &[&TensorType], outputs: &[&TensorType], attrs: &Attrs) -> u64 {
    outputs.first().map_or(0, |y| numel(y)).saturating_mul(window_size(attrs))
}

/// The forward's comparisons again, to find each window's maximum (dy has y's shape).
fn flops_max_pool2d_backward(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    inputs.first().map_or(0, |dy| numel(dy)).saturating_mul(window_size(attrs))
}

fn check_cross_entropy(logits: &TensorType, labels: &TensorType) -> Result<(), String> {
    float_input(logits, "logits")?;
    index_input(labels, "labels")?;
    let &[n, _] = logits.dims() else {
        return Err(format!("logits must be [N,C], found {logits}"));
    };
    if labels.dims() != [n] {
        return Err(format!("labels must be [{n}] for logits {logits}, found {labels}"));
    }
    Ok(())
}

fn infer_cross_entropy(inputs: &[&TensorType], _: &Attrs) -> Rule {
    check_cross_entropy(inputs[0], inputs[1])?;
    done(vec![TensorType::new(inputs[0].dtype, vec![])])
}

fn infer_cross_entropy_backward(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let (dloss, logits) = (inputs[0], inputs[1]);
    check_cross_entropy(logits, inputs[2])?;
    let want = TensorType::new(logits.dtype, vec![]);
    if *dloss != want {
        return Err(format!("dloss must be {want} for logits {logits}, found {dloss}"));
    }
    done(vec![logits.clone()])
}

/// Optimizer tensors (every input but adam's `t`): one float type, named by the row.
fn optimizer_tensors(inputs: &[&TensorType], names: &[&str]) -> Result<(), String> {
    float_input(inputs[0], names[0])?;
    for (t, name) in inputs.iter().zip(names).skip(1) {
        same_type(inputs[0], names[0], t, name)?;
    }
    Ok(())
}

fn infer_sgd(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(inputs, &["p", "g"])?;
    non_negative(attrs, "lr")?;
    done(vec![inputs[0].clone()])
}

fn infer_sgd_momentum(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(inputs, &["p", "g", "buf"])?;
    non_negative(attrs, "lr")?;
    non_negative(attrs, "momentum")?;
    done(vec![inputs[0].clone(), inputs[0].clone()])
}

fn infer_adam(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
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

use AttrKind as K;

const LR: AttrSpec = attr("lr", K::Float, None);
const EPS: AttrSpec = attr("eps", K::Float, Some(AttrDefault::Float(1e-5)));
const STRIDE_1: AttrSpec = attr("stride", K::Ints, Some(AttrDefault::Ints(&[1, 1])));
const PADDING_0: AttrSpec = attr("padding", K::Ints, Some(AttrDefault::Ints(&[0, 0])));
const POOL: &[AttrSpec] =
    &[attr("kernel", K::Ints, None), attr("stride", K::Ints, None), PADDING_0];
const ADAM: &[AttrSpec] = &[
    attr("lr", K::Float, Some(AttrDefault::Float(0.001))),
    attr("beta1", K::Float, Some(AttrDefault::Float(0.9))),
    attr("beta2", K::Float, Some(AttrDefault::Float(0.999))),
    attr("eps", K::Float, Some(AttrDefault::Float(1e-8))),
];
const ADAMW: &[AttrSpec] = &[
    attr("lr", K::Float, Some(AttrDefault::Float(0.001))),
    attr("beta1", K::Float, Some(AttrDefault::Float(0.9))),
    attr("beta2", K::Float, Some(AttrDefault::Float(0.999))),
    attr("eps", K::Float, Some(AttrDefault::Float(1e-8))),
    attr("weight_decay", K::Float, Some(AttrDefault::Float(0.01))),
];
/// The table. Row order = `OpKind` order.
pub static OPS: &[OpDef] = &[
    OpDef {
        kind: OpKind::Add,
        name: "add",
        inputs: &["a", "b"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_binary,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0), (0, 1)],
        doc: "a + b, numpy broadcasting",
    },
    OpDef {
        kind: OpKind::Sub,
        name: "sub",
        inputs: &["a", "b"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_binary,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0), (0, 1)],
        doc: "a - b, numpy broadcasting",
    },
    OpDef {
        kind: OpKind::Mul,
        name: "mul",
        inputs: &["a", "b"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_binary,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0), (0, 1)],
        doc: "a * b, numpy broadcasting",
    },
    OpDef {
        kind: OpKind::Div,
        name: "div",
        inputs: &["a", "b"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_binary,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0), (0, 1)],
        doc: "a / b, numpy broadcasting",
    },
    OpDef {
        kind: OpKind::AddScalar,
        name: "add_scalar",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("value", K::Float, None)],
        class: OpClass::Forward,
        infer: infer_scalar_op,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "x + value",
    },
    OpDef {
        kind: OpKind::MulScalar,
        name: "mul_scalar",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("value", K::Float, None)],
        class: OpClass::Forward,
        infer: infer_scalar_op,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "x * value",
    },
    OpDef {
        kind: OpKind::Relu,
        name: "relu",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_unary_float,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "max(x, 0)",
    },
    OpDef {
        kind: OpKind::ReluBackward,
        name: "relu_backward",
        inputs: &["dy", "y"],
        outputs: &["dx"],
        attrs: &[],
        class: OpClass::Backward,
        infer: infer_relu_backward,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "dy where relu's output y > 0, else 0",
    },
    OpDef {
        kind: OpKind::Gelu,
        name: "gelu",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_unary_float,
        flops: per_output::<8>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "GELU, tanh approximation",
    },
    OpDef {
        kind: OpKind::GeluBackward,
        name: "gelu_backward",
        inputs: &["dy", "x"],
        outputs: &["dx"],
        attrs: &[],
        class: OpClass::Backward,
        infer: infer_gelu_backward,
        flops: per_output::<12>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "dy * gelu'(x), x being gelu's input",
    },
    OpDef {
        kind: OpKind::Softmax,
        name: "softmax",
        inputs: &["x"],
        outputs: &["y"],
        attrs: &[attr("axis", K::Int, Some(AttrDefault::Int(-1)))],
        class: OpClass::Forward,
        infer: infer_softmax,
        flops: per_output::<5>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "exp(x) / sum(exp(x)) along axis (max-subtracted)",
    },
    OpDef {
        kind: OpKind::SoftmaxBackward,
        name: "softmax_backward",
        inputs: &["dy", "y"],
        outputs: &["dx"],
        attrs: &[attr("axis", K::Int, Some(AttrDefault::Int(-1)))],
        class: OpClass::Backward,
        infer: infer_softmax_backward,
        flops: per_output::<4>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "y * (dy - sum(dy * y) along axis), y being softmax's output",
    },
    OpDef {
        kind: OpKind::CausalMask,
        name: "causal_mask",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("value", K::Float, Some(AttrDefault::Float(f64::NEG_INFINITY)))],
        class: OpClass::Forward,
        infer: infer_causal_mask,
        flops: per_output::<1>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "x with entries [..., i, j] for j > i set to value",
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
    OpDef {
        kind: OpKind::Sum,
        name: "sum",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("axes", K::Ints, None), attr("keepdim", K::Bool, Some(AttrDefault::Bool(false)))],
        class: OpClass::Forward,
        infer: infer_sum,
        flops: per_input::<1>,
        view_of: None,
        inplace: &[],
        doc: "sum over axes",
    },
    OpDef {
        kind: OpKind::Mean,
        name: "mean",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("axes", K::Ints, None), attr("keepdim", K::Bool, Some(AttrDefault::Bool(false)))],
        class: OpClass::Forward,
        infer: infer_mean,
        flops: per_input::<1>,
        view_of: None,
        inplace: &[],
        doc: "mean over axes",
    },
    OpDef {
        kind: OpKind::Reshape,
        name: "reshape",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("shape", K::Ints, None)],
        class: OpClass::Forward,
        infer: infer_reshape,
        flops: no_flops,
        view_of: Some(0),
        inplace: &[],
        doc: "x's elements in row-major order with a new shape (a view)",
    },
    OpDef {
        kind: OpKind::Transpose,
        name: "transpose",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("perm", K::Ints, None)],
        class: OpClass::Forward,
        infer: infer_transpose,
        flops: no_flops,
        view_of: Some(0),
        inplace: &[],
        doc: "x with dimensions permuted: out dim i = x dim perm[i] (a view)",
    },
    OpDef {
        kind: OpKind::Expand,
        name: "expand",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("shape", K::Ints, None)],
        class: OpClass::Forward,
        infer: infer_expand,
        flops: no_flops,
        view_of: Some(0),
        inplace: &[],
        doc: "x broadcast to shape (a view)",
    },
    OpDef {
        kind: OpKind::Contiguous,
        name: "contiguous",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_contiguous,
        flops: no_flops,
        view_of: None,
        inplace: &[],
        doc: "a dense row-major copy of x",
    },
    OpDef {
        kind: OpKind::Cast,
        name: "cast",
        inputs: &["x"],
        outputs: &["out"],
        attrs: &[attr("to", K::DType, None)],
        class: OpClass::Forward,
        infer: infer_cast,
        flops: no_flops,
        view_of: None,
        inplace: &[],
        doc: "x converted to dtype `to`",
    },
    OpDef {
        kind: OpKind::Fill,
        name: "fill",
        inputs: &[],
        outputs: &["out"],
        attrs: &[
            attr("shape", K::Ints, None),
            attr("dtype", K::DType, None),
            attr("value", K::Float, Some(AttrDefault::Float(0.0))),
        ],
        class: OpClass::Forward,
        infer: infer_fill,
        flops: no_flops,
        view_of: None,
        inplace: &[],
        doc: "a new tensor with every element = value",
    },
    OpDef {
        kind: OpKind::Embedding,
        name: "embedding",
        inputs: &["table", "ids"],
        outputs: &["out"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_embedding,
        flops: no_flops,
        view_of: None,
        inplace: &[],
        doc: "rows of table[V,D] picked by ids: out[..., :] = table[ids[...], :]",
    },
    OpDef {
        kind: OpKind::EmbeddingBackward,
        name: "embedding_backward",
        inputs: &["dy", "ids"],
        outputs: &["dtable"],
        attrs: &[attr("vocab", K::Int, None)],
        class: OpClass::Backward,
        infer: infer_embedding_backward,
        flops: per_input::<1>,
        view_of: None,
        inplace: &[],
        doc: "dtable[vocab,D]: rows of dy summed into the rows ids name",
    },
    OpDef {
        kind: OpKind::LayerNorm,
        name: "layer_norm",
        inputs: &["x", "gamma", "beta"],
        outputs: &["y"],
        attrs: &[EPS],
        class: OpClass::Forward,
        infer: infer_layer_norm,
        flops: per_input::<8>,
        view_of: None,
        inplace: &[],
        doc: "normalise the last dim D to mean 0, variance 1; then * gamma + beta",
    },
    OpDef {
        kind: OpKind::LayerNormBackward,
        name: "layer_norm_backward",
        inputs: &["dy", "x", "gamma"],
        outputs: &["dx", "dgamma", "dbeta"],
        attrs: &[EPS],
        class: OpClass::Backward,
        infer: infer_layer_norm_backward,
        flops: per_input::<12>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "layer_norm's gradients w.r.t. x, gamma and beta",
    },
    OpDef {
        kind: OpKind::BatchNorm,
        name: "batch_norm",
        inputs: &["x", "gamma", "beta"],
        outputs: &["y"],
        attrs: &[EPS],
        class: OpClass::Forward,
        infer: infer_batch_norm,
        flops: per_input::<8>,
        view_of: None,
        inplace: &[],
        doc: "normalise each channel (dim 1) with batch statistics; then * gamma + beta",
    },
    OpDef {
        kind: OpKind::BatchNormBackward,
        name: "batch_norm_backward",
        inputs: &["dy", "x", "gamma"],
        outputs: &["dx", "dgamma", "dbeta"],
        attrs: &[EPS],
        class: OpClass::Backward,
        infer: infer_batch_norm_backward,
        flops: per_input::<12>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "batch_norm's gradients w.r.t. x, gamma and beta",
    },
    OpDef {
        kind: OpKind::Conv2d,
        name: "conv2d",
        inputs: &["x", "w"],
        outputs: &["y"],
        attrs: &[STRIDE_1, PADDING_0],
        class: OpClass::Forward,
        infer: infer_conv2d,
        flops: flops_conv2d,
        view_of: None,
        inplace: &[],
        doc: "2-d cross-correlation of x[N,C,H,W] with w[K,C,R,S], zero padding",
    },
    OpDef {
        kind: OpKind::Conv2dBackward,
        name: "conv2d_backward",
        inputs: &["dy", "x", "w"],
        outputs: &["dx", "dw"],
        attrs: &[STRIDE_1, PADDING_0],
        class: OpClass::Backward,
        infer: infer_conv2d_backward,
        flops: flops_conv2d_backward,
        view_of: None,
        inplace: &[],
        doc: "conv2d's gradients w.r.t. x and w",
    },
    OpDef {
        kind: OpKind::MaxPool2d,
        name: "max_pool2d",
        inputs: &["x"],
        outputs: &["y"],
        attrs: POOL,
        class: OpClass::Forward,
        infer: infer_max_pool2d,
        flops: flops_max_pool2d,
        view_of: None,
        inplace: &[],
        doc: "maximum over kernel windows of x[N,C,H,W] (padding counts as -inf)",
    },
    OpDef {
        kind: OpKind::MaxPool2dBackward,
        name: "max_pool2d_backward",
        inputs: &["dy", "x"],
        outputs: &["dx"],
        attrs: POOL,
        class: OpClass::Backward,
        infer: infer_max_pool2d_backward,
        flops: flops_max_pool2d_backward,
        view_of: None,
        inplace: &[],
        doc: "dy routed to each window's (first) maximum in x; overlaps add",
    },
    OpDef {
        kind: OpKind::CrossEntropy,
        name: "cross_entropy",
        inputs: &["logits", "labels"],
        outputs: &["loss"],
        attrs: &[],
        class: OpClass::Forward,
        infer: infer_cross_entropy,
        flops: per_input::<4>,
        view_of: None,
        inplace: &[],
        doc: "mean over N of -log softmax(logits[n])[labels[n]]",
    },
    OpDef {
        kind: OpKind::CrossEntropyBackward,
        name: "cross_entropy_backward",
        inputs: &["dloss", "logits", "labels"],
        outputs: &["dlogits"],
        attrs: &[],
        class: OpClass::Backward,
        infer: infer_cross_entropy_backward,
        flops: per_output::<4>,
        view_of: None,
        inplace: &[],
        doc: "dloss * (softmax(logits) - onehot(labels)) / N",
    },
    OpDef {
        kind: OpKind::Sgd,
        name: "sgd",
        inputs: &["p", "g"],
        outputs: &["p_new"],
        attrs: &[LR],
        class: OpClass::Optimizer,
        infer: infer_sgd,
        flops: per_output::<2>,
        view_of: None,
        inplace: &[(0, 0)],
        doc: "p - lr * g",
    },
    OpDef {
        kind: OpKind::SgdMomentum,
        name: "sgd_momentum",
        inputs: &["p", "g", "buf"],
        outputs: &["p_new", "buf_new"],
        attrs: &[LR, attr("momentum", K::Float, Some(AttrDefault::Float(0.9)))],
        class: OpClass::Optimizer,
        infer: infer_sgd_momentum,
        flops: per_output::<2>,
        view_of: None,
        inplace: &[(0, 0), (1, 2)],
        doc: "buf_new = momentum * buf + g; p_new = p - lr * buf_new",
    },
    OpDef {
        kind: OpKind::Adam,
        name: "adam",
        inputs: &["p", "g", "m", "v", "t"],
        outputs: &["p_new", "m_new", "v_new"],
        attrs: ADAM,
        class: OpClass::Optimizer,
        infer: infer_adam,
        flops: per_output::<4>,
        view_of: None,
        inplace: &[(0, 0), (1, 2), (2, 3)],
        doc: "Adam with bias correction by step count t",
    },
    OpDef {
        kind: OpKind::Adamw,
        name: "adamw",
        inputs: &["p", "g", "m", "v", "t"],
        outputs: &["p_new", "m_new", "v_new"],
        attrs: ADAMW,
        class: OpClass::Optimizer,
        infer: infer_adam,
        flops: per_output::<5>,
        view_of: None,
        inplace: &[(0, 0), (1, 2), (2, 3)],
        doc: "Adam with decoupled weight decay: p_new also loses lr * weight_decay * p",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `f32[2,3]` → a tensor type.
    fn ty(s: &str) -> TensorType {
        let (dtype, rest) = s.split_once('[').expect("type");
        let dims = rest.trim_end_matches(']').split(',').filter(|d| !d.is_empty()).map(|d| d.parse().unwrap());
        TensorType::new(DType::from_name(dtype).expect("dtype"), dims.collect::<Vec<u64>>())
    }

    /// The row's attributes: `given` ones, defaults for the rest.
    fn attrs_for(kind: OpKind, given: &[(&str, Attr)]) -> Attrs {
        for (name, _) in given {
            assert!(kind.def().attrs.iter().any(|s| s.name == *name), "{kind} has no attribute {name}");
        }
        Attrs(
            kind.def()
                .attrs
                .iter()
                .map(|spec| {
                    let value = given.iter().find(|(n, _)| *n == spec.name).map(|(_, a)| a.clone());
                    let value = value.or(spec.default.map(AttrDefault::to_attr));
                    (spec.name, value.unwrap_or_else(|| panic!("test must give {kind}'s {}", spec.name)))
                })
                .collect(),
        )
    }

    fn infer(kind: OpKind, inputs: &[&str], given: &[(&str, Attr)]) -> Result<Vec<String>, String> {
        let types: Vec<TensorType> = inputs.iter().map(|s| ty(s)).collect();
        let refs: Vec<&TensorType> = types.iter().collect();
        assert_eq!(refs.len(), kind.def().inputs.len(), "{kind}: wrong number of inputs in the test");
        let outputs = (kind.def().infer)(&refs, &attrs_for(kind, given))?;
        assert_eq!(outputs.len(), kind.def().outputs.len(), "{kind}: rule gave the wrong number of outputs");
        Ok(outputs.iter().map(|t| t.to_string()).collect())
    }

    #[track_caller]
    fn ok(kind: OpKind, inputs: &[&str], given: &[(&str, Attr)]) -> Vec<String> {
        infer(kind, inputs, given).unwrap_or_else(|e| panic!("{kind} rejected {inputs:?}: {e}"))
    }

    /// The rejection message, which must mention `needle`.
    #[track_caller]
    fn err(kind: OpKind, inputs: &[&str], given: &[(&str, Attr)], needle: &str) -> String {
        match infer(kind, inputs, given) {
            Err(e) => {
                assert!(e.contains(needle), "{kind}: message {e:?} does not mention {needle:?}");
                e
            }
            Ok(out) => panic!("{kind} accepted {inputs:?} giving {out:?}"),
        }
    }

    fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    fn float(x: f64) -> Attr {
        Attr::Float(x)
    }

    const HUGE: &str = "f32[4294967296,4294967296]";

    #[test]
    fn rows_are_in_kind_order() {
        for (i, row) in OPS.iter().enumerate() {
            assert_eq!(row.kind as usize, i, "row {} ({}) is out of place", i, row.name);
        }
    }

    #[test]
    fn every_kind_has_a_row_and_a_unique_name() {
        assert_eq!(OPS.len(), OpKind::Adamw as usize + 1);
        for row in OPS {
            assert_eq!(OpKind::from_name(row.name), Some(row.kind));
            assert!(row.view_of.is_none_or(|k| k < row.inputs.len()), "{}", row.name);
            for &(o, i) in row.inplace {
                assert!(o < row.outputs.len() && i < row.inputs.len(), "{}: bad inplace pair", row.name);
            }
        }
        assert_eq!(OpKind::from_name("conv3d"), None);
    }

    #[test]
    fn broadcasting() {
        let s = |d: &[u64]| Shape(d.to_vec());
        assert_eq!(broadcast(&s(&[64, 256]), &s(&[256])).unwrap(), s(&[64, 256]));
        assert_eq!(broadcast(&s(&[8, 1, 4]), &s(&[3, 1])).unwrap(), s(&[8, 3, 4]));
        assert_eq!(broadcast(&s(&[]), &s(&[3])).unwrap(), s(&[3]));
        assert_eq!(broadcast(&s(&[0, 3]), &s(&[1, 3])).unwrap(), s(&[0, 3]));
        assert!(broadcast(&s(&[64, 256]), &s(&[255])).is_err());
        assert!(broadcast(&s(&[0]), &s(&[2])).is_err());
    }

    #[test]
    fn signatures() {
        assert_eq!(
            OpKind::Conv2dBackward.def().signature(),
            "conv2d_backward(dy, x, w, stride=[1, 1], padding=[0, 0]) -> (dx, dw)"
        );
        assert_eq!(OpKind::Sgd.def().signature(), "sgd(p, g, lr=<float>) -> p_new");
        assert_eq!(OpKind::Fill.def().signature(), "fill(shape=<ints>, dtype=<dtype>, value=0.0) -> out");
        assert_eq!(OpKind::LayerNorm.def().signature(), "layer_norm(x, gamma, beta, eps=1e-5) -> y");
        assert_eq!(OpKind::CausalMask.def().signature(), "causal_mask(x, value=-inf) -> out");
        assert_eq!(OpKind::Add.def().signature(), "add(a, b) -> out");
    }

    /// docs/IR.md lists every op with the signature its row gives.
    #[test]
    fn manual_lists_every_signature() {
        let manual = include_str!("../../docs/IR.md");
        for row in OPS {
            let signature = format!("`{}`", row.signature());
            assert!(manual.contains(&signature), "docs/IR.md lacks {signature}");
        }
    }

    #[test]
    fn elementwise_binary() {
        for kind in [OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div] {
            assert_eq!(ok(kind, &["f32[64,256]", "f32[256]"], &[]), ["f32[64,256]"]);
            assert_eq!(ok(kind, &["i32[]", "i32[3]"], &[]), ["i32[3]"]);
            assert_eq!(ok(kind, &["bf16[0,3]", "bf16[1,3]"], &[]), ["bf16[0,3]"]);
            err(kind, &["f32[2]", "f16[2]"], &[], "f32[2] and f16[2]");
            err(kind, &["bool[2]", "bool[2]"], &[], "bool[2]");
            err(kind, &["f32[64,256]", "f32[255]"], &[], "[64,256] and [255]");
            err(kind, &["f32[4294967296,1]", "f32[1,4294967296]"], &[], "2^64 bytes");
        }
    }

    #[test]
    fn scalar_ops() {
        for kind in [OpKind::AddScalar, OpKind::MulScalar] {
            assert_eq!(ok(kind, &["f16[2,3]"], &[("value", float(2.0))]), ["f16[2,3]"]);
            assert_eq!(ok(kind, &["f32[]"], &[("value", float(-1.5))]), ["f32[]"]);
            err(kind, &["i32[2]"], &[("value", float(1.0))], "i32[2]");
            err(kind, &["f32[2]"], &[("value", float(f64::NAN))], "NaN");
        }
    }

    #[test]
    fn activations_and_their_gradients() {
        for kind in [OpKind::Relu, OpKind::Gelu] {
            assert_eq!(ok(kind, &["f32[4,5]"], &[]), ["f32[4,5]"]);
            assert_eq!(ok(kind, &["bf16[]"], &[]), ["bf16[]"]);
            err(kind, &["i64[4]"], &[], "i64[4]");
            err(kind, &[HUGE], &[], "2^64");
        }
        for kind in [OpKind::ReluBackward, OpKind::GeluBackward] {
            assert_eq!(ok(kind, &["f32[4,5]", "f32[4,5]"], &[]), ["f32[4,5]"]);
            err(kind, &["f32[4,5]", "f32[4,6]"], &[], "f32[4,5] and f32[4,6]");
            err(kind, &["f32[4]", "f16[4]"], &[], "same type");
            err(kind, &["i32[4]", "i32[4]"], &[], "float");
        }
    }

    #[test]
    fn softmax_axes() {
        assert_eq!(ok(OpKind::Softmax, &["f32[2,3]"], &[]), ["f32[2,3]"]);
        assert_eq!(ok(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(0))]), ["f32[2,3]"]);
        assert_eq!(ok(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(-2))]), ["f32[2,3]"]);
        err(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(2))], "use -2..=1");
        err(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(-3))], "out of range");
        err(OpKind::Softmax, &["f32[2,3]"], &[("axis", Attr::Int(i64::MIN))], "out of range");
        err(OpKind::Softmax, &["f32[]"], &[], "scalar");
        err(OpKind::Softmax, &["i32[3]"], &[], "float");
        assert_eq!(ok(OpKind::SoftmaxBackward, &["f32[2,3]", "f32[2,3]"], &[]), ["f32[2,3]"]);
        err(OpKind::SoftmaxBackward, &["f32[2,3]", "f32[3,2]"], &[], "dy and y");
        err(OpKind::SoftmaxBackward, &["f32[2,3]", "f32[2,3]"], &[("axis", Attr::Int(5))], "out of range");
    }

    #[test]
    fn causal_mask() {
        assert_eq!(ok(OpKind::CausalMask, &["f32[2,4,4]"], &[]), ["f32[2,4,4]"]);
        assert_eq!(ok(OpKind::CausalMask, &["f16[0,0]"], &[("value", float(-1e4))]), ["f16[0,0]"]);
        err(OpKind::CausalMask, &["f32[4,5]"], &[], "[..,T,T]");
        err(OpKind::CausalMask, &["f32[4]"], &[], "f32[4]");
        err(OpKind::CausalMask, &["f32[4,4]"], &[("value", float(f64::NAN))], "NaN");
        err(OpKind::CausalMask, &["i32[4,4]"], &[], "float");
    }

    #[test]
    fn matmul_transposes_and_batches() {
        let m = OpKind::Matmul;
        let t = |a: bool, b: bool| [("transpose_a", Attr::Bool(a)), ("transpose_b", Attr::Bool(b))];
        assert_eq!(ok(m, &["f32[64,784]", "f32[784,256]"], &[]), ["f32[64,256]"]);
        assert_eq!(ok(m, &["f32[784,64]", "f32[784,256]"], &t(true, false)), ["f32[64,256]"]);
        assert_eq!(ok(m, &["f32[64,784]", "f32[256,784]"], &t(false, true)), ["f32[64,256]"]);
        assert_eq!(ok(m, &["f32[784,64]", "f32[256,784]"], &t(true, true)), ["f32[64,256]"]);
        assert_eq!(ok(m, &["f32[2,1,4,8]", "f32[3,8,5]"], &[]), ["f32[2,3,4,5]"]);
        assert_eq!(ok(m, &["f16[2,4,8]", "f16[8,5]"], &[]), ["f16[2,4,5]"]);
        assert_eq!(ok(m, &["f32[4,0]", "f32[0,5]"], &[]), ["f32[4,5]"]);
        err(m, &["f32[2,4,8]", "f32[3,8,5]"], &[], "batch dimensions");
        err(m, &["f32[4,8]", "f32[7,5]"], &[], "inner dimensions differ: f32[4,8] @ f32[7,5]");
        err(m, &["f32[4,8]", "f32[4,5]"], &t(false, true), "inner dimensions");
        err(m, &["f32[8]", "f32[8,5]"], &[], "rank >= 2");
        err(m, &["i32[2,2]", "i32[2,2]"], &[], "float");
        err(m, &["f32[2,2]", "f16[2,2]"], &[], "dtypes differ");
        err(m, &["f32[4294967296,1]", "f32[1,4294967296]"], &[], "2^64");
    }

    #[test]
    fn reductions() {
        for kind in [OpKind::Sum, OpKind::Mean] {
            let axes = |v: &[i64]| ("axes", ints(v));
            let keep = ("keepdim", Attr::Bool(true));
            assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[0])]), ["f32[5]"]);
            assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[0]), keep.clone()]), ["f32[1,5]"]);
            assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[-1])]), ["f32[4]"]);
            assert_eq!(ok(kind, &["f32[4,5]"], &[axes(&[1, 0])]), ["f32[]"]);
            assert_eq!(ok(kind, &["f32[2,3,4]"], &[axes(&[0, 2]), keep]), ["f32[1,3,1]"]);
            err(kind, &["f32[4,5]"], &[axes(&[1, -1])], "twice");
            err(kind, &["f32[4,5]"], &[axes(&[2])], "out of range for f32[4,5]");
            err(kind, &["f32[4,5]"], &[axes(&[])], "empty");
            err(kind, &["f32[]"], &[axes(&[0])], "scalar");
            err(kind, &["bool[4]"], &[axes(&[0])], "bool[4]");
        }
        assert_eq!(ok(OpKind::Sum, &["i64[4,5]"], &[("axes", ints(&[1]))]), ["i64[4]"]);
        err(OpKind::Mean, &["i32[4,5]"], &[("axes", ints(&[1]))], "float");
    }

    #[test]
    fn reshape_keeps_numel() {
        let r = |s: &[i64]| [("shape", ints(s))];
        assert_eq!(ok(OpKind::Reshape, &["f32[2,3]"], &r(&[3, 2])), ["f32[3,2]"]);
        assert_eq!(ok(OpKind::Reshape, &["i64[2,3]"], &r(&[6])), ["i64[6]"]);
        assert_eq!(ok(OpKind::Reshape, &["f32[]"], &r(&[1, 1])), ["f32[1,1]"]);
        assert_eq!(ok(OpKind::Reshape, &["f32[1]"], &r(&[])), ["f32[]"]);
        assert_eq!(ok(OpKind::Reshape, &["f32[0,5]"], &r(&[5, 0])), ["f32[5,0]"]);
        err(OpKind::Reshape, &["f32[2,3]"], &r(&[4, 2]), "f32[2,3] (6 elements) to [4,2] (8 elements)");
        err(OpKind::Reshape, &["f32[2,3]"], &r(&[-1, 6]), "negative");
        err(OpKind::Reshape, &["f32[2]"], &r(&[i64::MAX, i64::MAX]), "2^64 elements");
        assert_eq!(OpKind::Reshape.def().view_of, Some(0));
    }

    #[test]
    fn transpose_needs_a_permutation() {
        let p = |s: &[i64]| [("perm", ints(s))];
        assert_eq!(ok(OpKind::Transpose, &["f32[2,3]"], &p(&[1, 0])), ["f32[3,2]"]);
        assert_eq!(ok(OpKind::Transpose, &["f32[2,3,4]"], &p(&[0, 2, 1])), ["f32[2,4,3]"]);
        assert_eq!(ok(OpKind::Transpose, &["f32[]"], &p(&[])), ["f32[]"]);
        err(OpKind::Transpose, &["f32[2,3]"], &p(&[]), "has 0 entries but f32[2,3] has rank 2");
        err(OpKind::Transpose, &["f32[2,3]"], &p(&[0, 0]), "not a permutation");
        err(OpKind::Transpose, &["f32[2,3]"], &p(&[0, 2]), "not a permutation");
        err(OpKind::Transpose, &["f32[2,3]"], &p(&[-1, 0]), "not a permutation");
        assert_eq!(OpKind::Transpose.def().view_of, Some(0));
    }

    #[test]
    fn expand_broadcasts_to_exactly_shape() {
        let e = |s: &[i64]| [("shape", ints(s))];
        assert_eq!(ok(OpKind::Expand, &["f32[3,1]"], &e(&[2, 3, 4])), ["f32[2,3,4]"]);
        assert_eq!(ok(OpKind::Expand, &["f32[3]"], &e(&[3])), ["f32[3]"]);
        assert_eq!(ok(OpKind::Expand, &["f32[]"], &e(&[2, 2])), ["f32[2,2]"]);
        assert_eq!(ok(OpKind::Expand, &["f32[1]"], &e(&[0])), ["f32[0]"]);
        err(OpKind::Expand, &["f32[3]"], &e(&[2, 4]), "dimension 0 is 3, not 1 or 4");
        err(OpKind::Expand, &["f32[2,3]"], &e(&[3]), "fewer dimensions");
        err(OpKind::Expand, &["f32[1]"], &e(&[-2]), "negative");
        err(OpKind::Expand, &["f32[1]"], &e(&[4294967296, 4294967296]), "2^64");
        assert_eq!(OpKind::Expand.def().view_of, Some(0));
    }

    #[test]
    fn contiguous_and_cast() {
        assert_eq!(ok(OpKind::Contiguous, &["bool[2,3]"], &[]), ["bool[2,3]"]);
        err(OpKind::Contiguous, &[HUGE], &[], "2^64");
        let to = |d| [("to", Attr::DType(d))];
        assert_eq!(ok(OpKind::Cast, &["f32[2]"], &to(DType::Bf16)), ["bf16[2]"]);
        assert_eq!(ok(OpKind::Cast, &["bool[]"], &to(DType::I64)), ["i64[]"]);
        err(OpKind::Cast, &[HUGE], &to(DType::F16), "2^64");
    }

    #[test]
    fn fill_checks_value_against_dtype() {
        let f = |shape: &[i64], d, v| [("shape", ints(shape)), ("dtype", Attr::DType(d)), ("value", float(v))];
        assert_eq!(ok(OpKind::Fill, &[], &f(&[], DType::F32, 1.0)), ["f32[]"]);
        assert_eq!(ok(OpKind::Fill, &[], &f(&[2, 3], DType::I64, -7.0)), ["i64[2,3]"]);
        assert_eq!(ok(OpKind::Fill, &[], &f(&[4], DType::Bool, 1.0)), ["bool[4]"]);
        assert_eq!(ok(OpKind::Fill, &[], &f(&[0], DType::F16, f64::NEG_INFINITY)), ["f16[0]"]);
        err(OpKind::Fill, &[], &f(&[2], DType::I32, 1.5), "not representable as i32");
        err(OpKind::Fill, &[], &f(&[2], DType::I32, 3e9), "i32");
        err(OpKind::Fill, &[], &f(&[2], DType::I64, f64::INFINITY), "i64");
        err(OpKind::Fill, &[], &f(&[2], DType::Bool, 2.0), "bool");
        err(OpKind::Fill, &[], &f(&[2, -3], DType::F32, 0.0), "negative");
        err(OpKind::Fill, &[], &f(&[2], DType::F32, f64::NAN), "NaN");
    }

    #[test]
    fn embedding() {
        let e = OpKind::Embedding;
        assert_eq!(ok(e, &["f32[100,16]", "i64[4,8]"], &[]), ["f32[4,8,16]"]);
        assert_eq!(ok(e, &["bf16[100,16]", "i32[]"], &[]), ["bf16[16]"]);
        err(e, &["f32[100,16]", "f32[4]"], &[], "ids must be an i32 or i64 tensor, found f32[4]");
        err(e, &["f32[100,16,2]", "i32[4]"], &[], "[V,D]");
        err(e, &["i32[100,16]", "i32[4]"], &[], "float");
        let b = OpKind::EmbeddingBackward;
        let vocab = |v| [("vocab", Attr::Int(v))];
        assert_eq!(ok(b, &["f32[4,8,16]", "i64[4,8]"], &vocab(100)), ["f32[100,16]"]);
        err(b, &["f32[4,8,16]", "i64[4,8]"], &vocab(0), "vocab=0");
        err(b, &["f32[4,7,16]", "i64[4,8]"], &vocab(10), "dy f32[4,7,16] and ids i64[4,8]");
        err(b, &["f32[]", "i64[]"], &vocab(10), "last dimension");
    }

    #[test]
    fn norms() {
        assert_eq!(ok(OpKind::LayerNorm, &["f32[2,3,8]", "f32[8]", "f32[8]"], &[]), ["f32[2,3,8]"]);
        err(OpKind::LayerNorm, &["f32[2,3,8]", "f32[3]", "f32[8]"], &[], "gamma must be f32[8] for x f32[2,3,8]");
        err(OpKind::LayerNorm, &["f32[2,8]", "f32[8]", "f16[8]"], &[], "beta");
        err(OpKind::LayerNorm, &["f32[]", "f32[1]", "f32[1]"], &[], "[...,D]");
        err(OpKind::LayerNorm, &["f32[2,8]", "f32[8]", "f32[8]"], &[("eps", float(0.0))], "eps=0.0");
        assert_eq!(
            ok(OpKind::LayerNormBackward, &["f32[2,8]", "f32[2,8]", "f32[8]"], &[]),
            ["f32[2,8]", "f32[8]", "f32[8]"]
        );
        err(OpKind::LayerNormBackward, &["f32[2,7]", "f32[2,8]", "f32[8]"], &[], "dy and x");

        assert_eq!(ok(OpKind::BatchNorm, &["f32[4,3,5,5]", "f32[3]", "f32[3]"], &[]), ["f32[4,3,5,5]"]);
        assert_eq!(ok(OpKind::BatchNorm, &["f32[4,3]", "f32[3]", "f32[3]"], &[]), ["f32[4,3]"]);
        err(OpKind::BatchNorm, &["f32[4]", "f32[4]", "f32[4]"], &[], "[N,C,...]");
        err(OpKind::BatchNorm, &["f32[4,3,5,5]", "f32[5]", "f32[3]"], &[], "gamma must be f32[3]");
        err(OpKind::BatchNorm, &["f32[4,3]", "f32[3]", "f32[3]"], &[("eps", float(f64::INFINITY))], "eps");
        assert_eq!(
            ok(OpKind::BatchNormBackward, &["f32[4,3,5,5]", "f32[4,3,5,5]", "f32[3]"], &[]),
            ["f32[4,3,5,5]", "f32[3]", "f32[3]"]
        );
        err(OpKind::BatchNormBackward, &["f32[4,3,5,5]", "f32[4,3,5,5]", "f32[4]"], &[], "gamma");
    }

    #[test]
    fn conv2d_output_sizes() {
        let c = OpKind::Conv2d;
        let sp = |s: &[i64], p: &[i64]| [("stride", ints(s)), ("padding", ints(p))];
        assert_eq!(ok(c, &["f32[8,3,32,32]", "f32[16,3,3,3]"], &sp(&[2, 2], &[1, 1])), ["f32[8,16,16,16]"]);
        assert_eq!(ok(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &[]), ["f32[1,2,3,3]"]);
        assert_eq!(ok(c, &["f32[1,3,5,7]", "f32[2,3,1,3]"], &sp(&[1, 2], &[0, 1])), ["f32[1,2,5,4]"]);
        assert_eq!(ok(c, &["f32[1,3,3,3]", "f32[2,3,3,3]"], &[]), ["f32[1,2,1,1]"]);
        err(c, &["f32[1,3,5,5]", "f32[2,4,3,3]"], &[], "C=3 but w f32[2,4,3,3] has C=4");
        err(c, &["f32[1,3,2,2]", "f32[2,3,3,3]"], &[], "smaller than the window (3)");
        err(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &sp(&[0, 1], &[0, 0]), "stride=[0, 1]");
        err(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &sp(&[1, 1], &[-1, 0]), "padding=[-1, 0]");
        err(c, &["f32[1,3,5,5]", "f32[2,3,3,3]"], &sp(&[1], &[0, 0]), "2 entries");
        err(c, &["f32[3,5,5]", "f32[2,3,3,3]"], &[], "[N,C,H,W]");
        err(c, &["f32[1,3,5,5]", "f16[2,3,3,3]"], &[], "dtypes differ");
        err(c, &["f32[1,1,1,1]", "f32[1,1,1,1]"], &sp(&[1, 1], &[i64::MAX, i64::MAX]), "2^64");

        let b = OpKind::Conv2dBackward;
        let attrs = sp(&[2, 2], &[1, 1]);
        assert_eq!(
            ok(b, &["f32[8,16,16,16]", "f32[8,3,32,32]", "f32[16,3,3,3]"], &attrs),
            ["f32[8,3,32,32]", "f32[16,3,3,3]"]
        );
        err(b, &["f32[8,16,32,32]", "f32[8,3,32,32]", "f32[16,3,3,3]"], &attrs, "type f32[8,16,16,16]");
        err(b, &["f32[8,16,16,16]", "f32[8,3,32,32]", "f32[16,4,3,3]"], &attrs, "channels differ");
    }

    #[test]
    fn max_pool2d_output_sizes() {
        let m = OpKind::MaxPool2d;
        let kw = |k: &[i64], s: &[i64], p: &[i64]| [("kernel", ints(k)), ("stride", ints(s)), ("padding", ints(p))];
        assert_eq!(ok(m, &["f32[1,2,8,8]"], &kw(&[2, 2], &[2, 2], &[0, 0])), ["f32[1,2,4,4]"]);
        assert_eq!(ok(m, &["f32[1,2,7,7]"], &kw(&[3, 3], &[2, 2], &[1, 1])), ["f32[1,2,4,4]"]);
        assert_eq!(ok(m, &["f16[2,3,5,4]"], &kw(&[1, 2], &[1, 1], &[0, 1])), ["f16[2,3,5,5]"]);
        err(m, &["f32[1,2,8,8]"], &kw(&[3, 3], &[1, 1], &[2, 2]), "at most half");
        err(m, &["f32[1,2,8,8]"], &kw(&[0, 2], &[1, 1], &[0, 0]), "kernel=[0, 2]");
        err(m, &["f32[1,2,8,8]"], &kw(&[2, 2], &[0, 0], &[0, 0]), "stride");
        err(m, &["f32[1,2,1,8]"], &kw(&[2, 2], &[1, 1], &[0, 0]), "height 1");
        err(m, &["f32[2,8,8]"], &kw(&[2, 2], &[2, 2], &[0, 0]), "[N,C,H,W]");
        err(m, &["i32[1,2,8,8]"], &kw(&[2, 2], &[2, 2], &[0, 0]), "float");
        let b = OpKind::MaxPool2dBackward;
        let attrs = kw(&[2, 2], &[2, 2], &[0, 0]);
        assert_eq!(ok(b, &["f32[1,2,4,4]", "f32[1,2,8,8]"], &attrs), ["f32[1,2,8,8]"]);
        err(b, &["f32[1,2,8,8]", "f32[1,2,8,8]"], &attrs, "type f32[1,2,4,4]");
    }

    #[test]
    fn cross_entropy() {
        let c = OpKind::CrossEntropy;
        assert_eq!(ok(c, &["f32[64,10]", "i32[64]"], &[]), ["f32[]"]);
        assert_eq!(ok(c, &["bf16[4,3]", "i64[4]"], &[]), ["bf16[]"]);
        err(c, &["f32[64,10]", "i32[63]"], &[], "labels must be [64] for logits f32[64,10], found i32[63]");
        err(c, &["f32[64,10]", "f32[64]"], &[], "i32 or i64");
        err(c, &["f32[2,64,10]", "i32[64]"], &[], "[N,C]");
        err(c, &["i32[64,10]", "i32[64]"], &[], "float");
        let b = OpKind::CrossEntropyBackward;
        assert_eq!(ok(b, &["f32[]", "f32[64,10]", "i32[64]"], &[]), ["f32[64,10]"]);
        err(b, &["f16[]", "f32[64,10]", "i32[64]"], &[], "dloss must be f32[]");
        err(b, &["f32[1]", "f32[64,10]", "i32[64]"], &[], "found f32[1]");
        err(b, &["f32[]", "f32[64,10]", "i32[64,1]"], &[], "labels");
    }

    #[test]
    fn optimizers() {
        let lr = |x| ("lr", float(x));
        assert_eq!(ok(OpKind::Sgd, &["f32[3]", "f32[3]"], &[lr(0.1)]), ["f32[3]"]);
        assert_eq!(ok(OpKind::Sgd, &["bf16[]", "bf16[]"], &[lr(0.0)]), ["bf16[]"]);
        err(OpKind::Sgd, &["f32[3]", "f16[3]"], &[lr(0.1)], "p and g must have the same type");
        err(OpKind::Sgd, &["f32[3]", "f32[4]"], &[lr(0.1)], "f32[3] and f32[4]");
        err(OpKind::Sgd, &["i32[3]", "i32[3]"], &[lr(0.1)], "p must be a float tensor");
        err(OpKind::Sgd, &["f32[3]", "f32[3]"], &[lr(f64::NAN)], "lr=NaN");
        err(OpKind::Sgd, &["f32[3]", "f32[3]"], &[lr(-1.0)], "lr=-1.0");

        let s = OpKind::SgdMomentum;
        assert_eq!(ok(s, &["f32[3]", "f32[3]", "f32[3]"], &[lr(0.1)]), ["f32[3]", "f32[3]"]);
        err(s, &["f32[3]", "f32[3]", "f32[2]"], &[lr(0.1)], "p and buf");
        err(s, &["f32[3]", "f32[3]", "f32[3]"], &[lr(0.1), ("momentum", float(-0.5))], "momentum");

        for a in [OpKind::Adam, OpKind::Adamw] {
            let ins = ["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[]"];
            assert_eq!(ok(a, &ins, &[]), ["f32[4,4]", "f32[4,4]", "f32[4,4]"]);
            assert_eq!(ok(a, &["f16[2]", "f16[2]", "f16[2]", "f16[2]", "f32[]"], &[]).len(), 3);
            err(a, &["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[1]"], &[], "t (the step count)");
            err(a, &["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,4]", "i64[]"], &[], "i64[]");
            err(a, &["f32[4,4]", "f32[4,4]", "f32[4,4]", "f32[4,3]", "f32[]"], &[], "p and v");
            err(a, &["f32[4,4]", "f32[4,4]", "bf16[4,4]", "f32[4,4]", "f32[]"], &[], "p and m");
            err(a, &ins, &[("beta1", float(1.0))], "beta1=1.0 must be in [0, 1)");
            err(a, &ins, &[("eps", float(0.0))], "eps");
        }
        let ins = ["f32[4]", "f32[4]", "f32[4]", "f32[4]", "f32[]"];
        err(OpKind::Adamw, &ins, &[("weight_decay", float(-0.1))], "weight_decay");
    }

    #[test]
    fn flops() {
        let count = |kind: OpKind, inputs: &[&str], given: &[(&str, Attr)]| {
            let ins: Vec<TensorType> = inputs.iter().map(|s| ty(s)).collect();
            let ins: Vec<&TensorType> = ins.iter().collect();
            let attrs = attrs_for(kind, given);
            let outs = (kind.def().infer)(&ins, &attrs).unwrap();
            (kind.def().flops)(&ins, &outs.iter().collect::<Vec<_>>(), &attrs)
        };
        assert_eq!(count(OpKind::Add, &["f32[4,5]", "f32[5]"], &[]), 20);
        assert_eq!(count(OpKind::Matmul, &["f32[4,8]", "f32[8,5]"], &[]), 2 * 4 * 5 * 8);
        let ta = [("transpose_a", Attr::Bool(true))];
        assert_eq!(count(OpKind::Matmul, &["f32[8,4]", "f32[8,5]"], &ta), 2 * 4 * 5 * 8);
        // 2·N·K·P·Q·C·R·S with P = Q = 16.
        let sp = [("stride", ints(&[2, 2])), ("padding", ints(&[1, 1]))];
        let conv = 2 * 8 * 16 * 16 * 16 * 3 * 3 * 3;
        assert_eq!(count(OpKind::Conv2d, &["f32[8,3,32,32]", "f32[16,3,3,3]"], &sp), conv);
        let dy_x_w = ["f32[8,16,16,16]", "f32[8,3,32,32]", "f32[16,3,3,3]"];
        assert_eq!(count(OpKind::Conv2dBackward, &dy_x_w, &sp), 2 * conv);
        assert_eq!(count(OpKind::Transpose, &["f32[4,5]"], &[("perm", ints(&[1, 0]))]), 0);
        let pool = [("kernel", ints(&[2, 2])), ("stride", ints(&[2, 2]))];
        assert_eq!(count(OpKind::MaxPool2d, &["f32[1,2,8,8]"], &pool), 32 * 4);
        assert_eq!(count(OpKind::Sgd, &["f32[10]", "f32[10]"], &[("lr", float(0.1))]), 20);
        // Saturates instead of overflowing.
        let big = ["f16[1048576,1073741824]", "f16[1073741824,1048576]"];
        assert_eq!(count(OpKind::Matmul, &big, &[]), u64::MAX);
    }

    /// Attribute values for the no-panic sweep, sensible and nonsense alike.
    fn sweep_values(kind: AttrKind) -> Vec<Attr> {
        match kind {
            AttrKind::Int => [-5, -1, 0, 1, 3, i64::MAX, i64::MIN].map(Attr::Int).to_vec(),
            AttrKind::Float => {
                [0.0, -1.0, 1e-5, 0.5, 1.0, 2.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN].map(Attr::Float).to_vec()
            }
            AttrKind::Bool => vec![Attr::Bool(false), Attr::Bool(true)],
            AttrKind::Ints => [
                &[][..],
                &[0],
                &[-1],
                &[1, 1],
                &[2, 2],
                &[0, 1],
                &[1, 0],
                &[-1, 0],
                &[3, 3],
                &[0, 1, 2, 3],
                &[i64::MAX, i64::MAX],
                &[i64::MIN, 1],
                &[4294967296, 4294967296, 4294967296],
            ]
            .map(ints)
            .to_vec(),
            AttrKind::DType => DType::ALL.map(Attr::DType).to_vec(),
        }
    }

    /// Every rule, on odd inputs and odd attribute values: never a panic, and accepted
    /// outputs always have a byte size (so FLOPs and sizes downstream are safe).
    #[test]
    fn no_rule_panics() {
        let types: Vec<TensorType> = [
            "f32[]", "f32[0]", "f32[2,3]", "i32[2]", "bool[2,3]", "f32[1,3,4,4]", "f16[3,3]", "i64[0,5]", HUGE,
            "f32[18446744073709551615]", "f32[1,1,0,0]",
        ]
        .iter()
        .map(|s| ty(s))
        .collect();
        let mut accepted = 0;
        let mut rejected = 0;
        for row in OPS {
            let base = Attrs(
                row.attrs
                    .iter()
                    .map(|s| {
                        let required = || sweep_values(s.kind).swap_remove(3);
                        (s.name, s.default.map_or_else(required, AttrDefault::to_attr))
                    })
                    .collect(),
            );
            let mut variants = vec![base.clone()];
            for spec in row.attrs {
                for value in sweep_values(spec.kind) {
                    variants.push(base.clone().with(spec.name, value));
                }
            }
            // Inputs: all pairs for small arities, else all-equal with one position changed.
            let n = row.inputs.len();
            let mut combos: Vec<Vec<&TensorType>> = Vec::new();
            if n <= 2 {
                combos.push(vec![]);
                for _ in 0..n {
                    let mut longer = Vec::new();
                    for c in &combos {
                        for t in &types {
                            longer.push([c.clone(), vec![t]].concat());
                        }
                    }
                    combos = longer;
                }
            } else {
                for a in &types {
                    for b in &types {
                        for pos in 0..n {
                            let mut c = vec![a; n];
                            c[pos] = b;
                            combos.push(c);
                        }
                    }
                }
            }
            for inputs in &combos {
                for attrs in &variants {
                    match (row.infer)(inputs, attrs) {
                        Ok(outs) => {
                            accepted += 1;
                            assert_eq!(outs.len(), row.outputs.len(), "{}", row.name);
                            assert!(outs.iter().all(|t| t.bytes().is_some()), "{}: {outs:?}", row.name);
                            (row.flops)(inputs, &outs.iter().collect::<Vec<_>>(), attrs);
                        }
                        Err(e) => {
                            rejected += 1;
                            assert!(!e.is_empty() && !e.contains('\n'), "{}: {e:?}", row.name);
                        }
                    }
                }
            }
        }
        assert!(accepted > 1000 && rejected > 1000, "{accepted} accepted, {rejected} rejected");
    }
}
