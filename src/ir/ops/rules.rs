//! What the op families' type rules and FLOPs functions share: checks of inputs and
//! attributes, window arithmetic, the FLOPs of per-element ops, and the attributes several
//! families spell alike. Each op's own rule lives with its row, in its family file.
//!
//! Every rule checks its inputs and attribute values and returns a one-line message naming
//! the types involved; none panics, whatever the types. Sizes use checked arithmetic, and
//! every rule ends with `done`, which rejects an output whose byte size does not fit in a
//! u64.

use crate::ir::ops::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, attr};
use crate::ir::types::{DType, Shape, TensorType};

pub(super) type Rule = Result<Vec<TensorType>, String>;

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
pub(super) fn done(outputs: Vec<TensorType>) -> Rule {
    match outputs.iter().find(|t| t.bytes().is_none()) {
        Some(t) => Err(format!("the output {t} would have more than 2^64 bytes")),
        None => Ok(outputs),
    }
}

pub(super) fn same_dtype(inputs: &[&TensorType]) -> Result<DType, String> {
    let dtype = inputs[0].dtype;
    match inputs.iter().find(|t| t.dtype != dtype) {
        Some(t) => Err(format!("dtypes differ: {} and {} (insert a cast)", inputs[0], t)),
        None => Ok(dtype),
    }
}

pub(super) fn same_type(a: &TensorType, a_name: &str, b: &TensorType, b_name: &str) -> Result<(), String> {
    if a == b { Ok(()) } else { Err(format!("{a_name} and {b_name} must have the same type, found {a} and {b}")) }
}

pub(super) fn float_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_float() { Ok(()) } else { Err(format!("{what} must be a float tensor, found {t}")) }
}

pub(super) fn index_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_index() { Ok(()) } else { Err(format!("{what} must be an i32 or i64 tensor, found {t}")) }
}

pub(super) fn bool_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype == DType::Bool { Ok(()) } else { Err(format!("{what} must be a bool tensor, found {t}")) }
}

/// An axis attribute resolved against `t`'s rank (negative counts from the end).
pub(super) fn axis(value: i64, t: &TensorType) -> Result<usize, String> {
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
pub(super) fn dims_attr(attrs: &Attrs, name: &str) -> Result<Vec<u64>, String> {
    let values = attrs.ints(name);
    values
        .iter()
        .map(|&d| {
            u64::try_from(d).map_err(|_| format!("{name}={} has a negative dimension {d}", Attr::Ints(values.to_vec())))
        })
        .collect()
}

/// A (height, width) attribute like `stride=[2, 2]`, each entry at least `min`.
pub(super) fn pair(attrs: &Attrs, name: &str, min: i64) -> Result<[u64; 2], String> {
    let values = attrs.ints(name);
    let shown = Attr::Ints(values.to_vec());
    match *values {
        [h, w] if h >= min && w >= min => Ok([h as u64, w as u64]),
        [_, _] => Err(format!("{name}={shown}: each entry must be at least {min}")),
        _ => Err(format!("{name}={shown} must have 2 entries (height, width)")),
    }
}

/// A float attribute that must satisfy `ok` (`rule` says how, for the message).
pub(super) fn float_attr(attrs: &Attrs, name: &str, ok: fn(f64) -> bool, rule: &str) -> Result<f64, String> {
    let x = attrs.float(name);
    if ok(x) { Ok(x) } else { Err(format!("{name}={x:?} must be {rule}")) }
}

pub(super) fn not_nan(attrs: &Attrs, name: &str) -> Result<f64, String> {
    float_attr(attrs, name, |x| !x.is_nan(), "a number (not NaN)")
}

pub(super) fn positive_eps(attrs: &Attrs) -> Result<f64, String> {
    float_attr(attrs, "eps", |x| x > 0.0 && x.is_finite(), "a positive finite number")
}

pub(super) fn non_negative(attrs: &Attrs, name: &str) -> Result<f64, String> {
    float_attr(attrs, name, |x| x >= 0.0 && x.is_finite(), "a finite number >= 0")
}

/// The output extent of a sliding window: `(size + 2*pad - kernel) / stride + 1`.
pub(super) fn window(size: u64, kernel: u64, stride: u64, pad: u64, dim: &str) -> Result<u64, String> {
    let padded = pad.checked_mul(2).and_then(|p| p.checked_add(size));
    let Some(padded) = padded else {
        return Err(format!("{dim} {size} with padding {pad} is too large"));
    };
    match padded.checked_sub(kernel) {
        Some(room) => Ok(room / stride + 1),
        None => Err(format!("{dim} {size} plus padding 2*{pad} is smaller than the window ({kernel})")),
    }
}

pub(super) fn numel(t: &TensorType) -> u64 {
    t.shape.numel().unwrap_or(u64::MAX)
}

pub(super) fn dim(t: &TensorType, i: usize) -> u64 {
    t.dims().get(i).copied().unwrap_or(0)
}

/// `K` FLOPs per output element.
pub(super) fn per_output<const K: u64>(_: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    outputs.iter().map(|t| numel(t)).fold(0u64, |a, n| a.saturating_add(n.saturating_mul(K)))
}

/// `K` FLOPs per element of input 0.
pub(super) fn per_input<const K: u64>(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    inputs.first().map_or(0, |t| numel(t).saturating_mul(K))
}


pub(super) const STRIDE_1: AttrSpec = attr("stride", AttrKind::Ints, Some(AttrDefault::Ints(&[1, 1])));
pub(super) const PADDING_0: AttrSpec = attr("padding", AttrKind::Ints, Some(AttrDefault::Ints(&[0, 0])));

/// A random site's inputs: `seed` an `i64[]` scalar, the `stream` attribute at least 0
/// (dropout's, dropout_attention's, random's).
pub(super) fn seed_and_stream(seed: &TensorType, attrs: &Attrs) -> Result<(), String> {
    if *seed != TensorType::new(DType::I64, vec![]) {
        return Err(format!("seed must be an i64[] scalar, found {seed}"));
    }
    let stream = attrs.int("stream");
    if stream < 0 {
        return Err(format!("stream={stream} must be at least 0"));
    }
    Ok(())
}

/// Dropout's `p`: a probability in [0, 1) (NaN is not).
pub(super) fn drop_probability(attrs: &Attrs) -> Result<f64, String> {
    float_attr(attrs, "p", |p| (0.0..1.0).contains(&p), "a probability in [0, 1)")
}
