//! `fused`: a chain or tree of elementwise ops run as one op, whose inner values are never
//! tensors in memory, possibly ending with a reduction that sums the last of them. The
//! fusion pass (`passes/fuse.rs`) makes them from the step's elementwise ops (rows marked
//! [`OpDef::elementwise`]) and reductions ([`OpDef::reduction`]: `sum`, `mean`); a step may
//! also spell one out.
//!
//! The op's `body` attribute is its inner program, one inner op per item, `;` between
//! items: `t0: f32 = cast(x0, to=f32); t1: f32 = mul(t0, x1); t2: bf16 = cast(t1, to=bf16)`.
//! Item `j` defines the inner value `tj` (numbered in order) of the dtype written after the
//! colon, by an elementwise op of the table on operands `xk` (the fused op's input `k`) or
//! earlier `ti`, with the op's attributes written as in the IR (a string attribute as a bare
//! word: `op=lt`). The last value is the output. Every input and every inner value but the
//! last is read. The last op may be a reduction (`t2: f32 = sum(t1, axes=[0, 1])`) that
//! reduces something (fewer elements out than in): the inner values before it are computed
//! an element of its input at a time and summed, never stored.
//!
//! Meaning: exactly the unfused ops, each inner value rounded to its dtype as a tensor of
//! that dtype would be stored, so executors compute the same numbers as the ops one by one
//! (the CPU reference bit for bit). Shapes broadcast as the inner ops' own rules say; an
//! input of the output's shape is read element for element, so the output may be written
//! over it (in-place; not when the body ends with a reduction, which reads every input at
//! many outputs' places). The type rule checks every inner op with its own row's rule and the
//! written dtypes against them; FLOPs are the inner ops' FLOPs.
//!
//! `recomputed` lists the inner values (by number) that recompute a value the step also
//! computes and stores elsewhere: the fusion pass recomputes a cheap value inside its last
//! reader's fused op so that the stored one dies earlier. It changes nothing a fused op
//! computes; reports count those ops' FLOPs as recomputation.
//!
//! Limits ([`FUSED_MAX_OPS`], [`FUSED_MAX_INPUTS`]) keep a fused op's generated GPU kernel
//! small: its inner values in registers, its inputs a handful of descriptors.
//!
//! `fused_norm` is a fused op whose value is also normalised over its last dimension, as
//! `layer_norm` (`norm=layer`, its last two inputs gamma and beta) or `rms_norm` (`norm=rms`,
//! its last input gamma) would: `%h, %y = fused_norm(%mm, %bias, %x, %g, %b, body="t0: f32 =
//! add(x0, x1); t1: f32 = add(x2, t0)", norm=layer, eps=1e-5)` is the residual stream `%h`
//! and its normalisation `%y` in one pass (the fusion pass makes it where a norm reads a
//! fused op's or an elementwise op's value). Its body is a fused body over the inputs before
//! the norm's parameters (it may not end with a reduction); `out` is exactly the body's
//! value, `y` exactly the norm of `out` as stored. Only `out` may be written over an input,
//! one of the body's.

use std::fmt;

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, Attrs, Init, OpDef, attr, def_named};
use crate::ir::types::{DType, Shape, TensorType};

/// The most inner ops of one fused op.
pub const FUSED_MAX_OPS: usize = 16;

/// The most inputs of one fused op.
pub const FUSED_MAX_INPUTS: usize = 8;

pub(super) const FUSED: OpDef = OpDef::new("fused", &["xs..."], &["out"], infer_fused, "elementwise ops run as one (body: `t0: f32 = mul(x0, x1); t1: f32 = relu(t0)`), their inner values never stored")
    .attrs(&[attr("body", AttrKind::Str, None), attr("recomputed", AttrKind::Ints, Some(AttrDefault::Ints(&[])))])
    .flops(fused_flops)
    .inplace_over_any_input()
    .pointwise_over_every_input();

pub(super) const FUSED_NORM: OpDef = OpDef::new("fused_norm", &["xs..."], &["out", "y"], infer_fused_norm, "a fused body's value and its layer_norm (norm=layer: the last inputs gamma, beta) or rms_norm (norm=rms: the last input gamma), in one pass")
    .attrs(&[
        attr("body", AttrKind::Str, None),
        attr("recomputed", AttrKind::Ints, Some(AttrDefault::Ints(&[]))),
        attr("norm", AttrKind::Str, None),
        attr("eps", AttrKind::Float, None),
    ])
    .flops(fused_norm_flops)
    .inplace_over_any_input();

/// The normalisation a `fused_norm` ends with (its `norm` attribute).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Norm {
    /// `layer_norm`: the last two inputs are gamma and beta.
    Layer,
    /// `rms_norm`: the last input is gamma.
    Rms,
}

impl Norm {
    /// Every norm and its IR spelling.
    pub const ALL: [(Norm, &'static str); 2] = [(Norm::Layer, "layer"), (Norm::Rms, "rms")];

    pub fn parse(text: &str) -> Option<Norm> {
        Norm::ALL.iter().find(|(_, name)| *name == text).map(|&(n, _)| n)
    }

    /// The norm of a `fused_norm` the verifier accepted.
    pub fn of(attrs: &Attrs) -> Norm {
        Norm::parse(attrs.str("norm")).expect("the type rule accepts only known norms")
    }

    /// How many of the op's inputs, at the end, are the norm's parameters.
    pub fn params(self) -> usize {
        match self {
            Norm::Layer => 2,
            Norm::Rms => 1,
        }
    }

    /// The unfused op's row (`layer_norm`, `rms_norm`).
    pub fn def(self) -> &'static OpDef {
        let name = match self {
            Norm::Layer => "layer_norm",
            Norm::Rms => "rms_norm",
        };
        def_named(name).expect("both norms are rows of the table")
    }
}

/// How many trailing inputs of an op with attributes `attrs` are a norm's parameters: a
/// `fused_norm`'s (its `norm`), 0 for any other op. Only the inputs before them are its
/// body's, and only those may be written over.
pub fn norm_params(attrs: &Attrs) -> usize {
    match attrs.get("norm") {
        Some(Attr::Str(norm)) => Norm::parse(norm).map_or(0, Norm::params),
        _ => 0,
    }
}

/// What an inner op reads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Operand {
    /// The fused op's input `k` (`xk`).
    Input(usize),
    /// An earlier inner value (`tj`).
    Inner(usize),
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Input(k) => write!(f, "x{k}"),
            Operand::Inner(j) => write!(f, "t{j}"),
        }
    }
}

/// One inner op: an elementwise op of the table (its row), what it reads, its attributes
/// (every one of its row, defaults filled in) and the dtype of its value.
#[derive(Clone, Debug)]
pub struct InnerOp {
    pub def: &'static OpDef,
    pub operands: Vec<Operand>,
    pub attrs: Attrs,
    pub dtype: DType,
}

/// A fused op's `body`, decoded (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct FusedBody {
    pub ops: Vec<InnerOp>,
}

impl FusedBody {
    /// The body of a fused op the verifier accepted (its type rule decoded it).
    pub fn of(attrs: &Attrs) -> FusedBody {
        FusedBody::parse(attrs.str("body")).expect("the type rule accepts only bodies that parse")
    }

    /// Decodes `text`; an error says what is wrong and where (the item's number).
    pub fn parse(text: &str) -> Result<FusedBody, String> {
        let mut ops = Vec::new();
        let items: Vec<&str> = text.split(';').map(str::trim).collect();
        for (j, &item) in items.iter().enumerate() {
            // A `;` after the last item is fine.
            if item.is_empty() && j > 0 && j + 1 == items.len() {
                continue;
            }
            ops.push(parse_item(item, j).map_err(|e| format!("body item {j} (`{item}`): {e}"))?);
        }
        Ok(FusedBody { ops })
    }

    /// Whether the body ends with a reduction.
    pub fn reduces(&self) -> bool {
        self.ops.last().is_some_and(|op| op.def.reduction)
    }

    /// How many inputs the body reads: one more than the largest `xk`.
    pub fn inputs(&self) -> usize {
        let inputs = self.ops.iter().flat_map(|op| &op.operands);
        inputs.filter_map(|o| if let Operand::Input(k) = o { Some(k.saturating_add(1)) } else { None }).max().unwrap_or(0)
    }

    /// The type of every inner value for inputs of types `inputs`, each from its row's
    /// type rule, checked against the dtype written for it and the body's rules (see the
    /// module doc).
    pub fn types(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        if self.ops.is_empty() || self.ops.len() > FUSED_MAX_OPS {
            return Err(format!("a fused body has 1 to {FUSED_MAX_OPS} ops, found {}", self.ops.len()));
        }
        if inputs.len() > FUSED_MAX_INPUTS {
            return Err(format!("a fused op has at most {FUSED_MAX_INPUTS} inputs, found {}", inputs.len()));
        }
        let mut read_inputs = vec![false; inputs.len()];
        let mut read_inner = vec![false; self.ops.len()];
        let mut types: Vec<TensorType> = Vec::with_capacity(self.ops.len());
        for (j, op) in self.ops.iter().enumerate() {
            let mut operand_types = Vec::with_capacity(op.operands.len());
            for &operand in &op.operands {
                operand_types.push(match operand {
                    Operand::Input(k) if k < inputs.len() => {
                        read_inputs[k] = true;
                        inputs[k]
                    }
                    Operand::Input(k) => return Err(format!("t{j} reads x{k}, but the op has {} inputs", inputs.len())),
                    Operand::Inner(i) => {
                        read_inner[i] = true;
                        &types[i]
                    }
                });
            }
            let ty = (op.def.infer)(&operand_types, &op.attrs).map_err(|e| format!("t{j} = {}: {e}", op.def.name))?;
            let [ty] = <[TensorType; 1]>::try_from(ty).map_err(|_| format!("t{j}: {} has more than one output", op.def.name))?;
            if op.def.reduction && j + 1 < self.ops.len() {
                return Err(format!("t{j} = {}: a reduction can only be the last op of a body", op.def.name));
            }
            if op.def.reduction && ty.shape.numel() >= operand_types[0].shape.numel() {
                return Err(format!(
                    "t{j} = {}: reduces nothing ({} to {}); write the body without it",
                    op.def.name, operand_types[0], ty
                ));
            }
            if ty.dtype != op.dtype {
                return Err(format!("t{j} is written {}, but {} gives {}", op.dtype, op.def.name, ty.dtype));
            }
            types.push(ty);
        }
        if let Some(k) = read_inputs.iter().position(|read| !read) {
            return Err(format!("input x{k} is never read"));
        }
        if let Some(j) = read_inner[..self.ops.len() - 1].iter().position(|read| !read) {
            return Err(format!("t{j} is never read (only the last value is the output)"));
        }
        Ok(types)
    }
}

impl fmt::Display for FusedBody {
    /// The canonical text (what [`FusedBody::parse`] reads): attributes at their defaults
    /// left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (j, op) in self.ops.iter().enumerate() {
            if j > 0 {
                f.write_str("; ")?;
            }
            write!(f, "t{j}: {} = {}(", op.dtype, op.def.name)?;
            let mut parts: Vec<String> = op.operands.iter().map(Operand::to_string).collect();
            for (name, value) in &op.attrs.0 {
                let default = op.def.attrs.iter().find(|spec| spec.name == *name).and_then(|spec| spec.default);
                if default.map(AttrDefault::to_attr).as_ref() == Some(value) {
                    continue;
                }
                let shown = match value {
                    Attr::Str(word) => word.clone(),
                    other => other.to_string(),
                };
                parts.push(format!("{name}={shown}"));
            }
            write!(f, "{})", parts.join(", "))?;
        }
        Ok(())
    }
}

/// Whether `attrs` are a fused op's whose body ends with a reduction, read from the body's
/// last item alone (cheap enough for the in-place rules, which ask for every op).
pub(super) fn body_reduces(attrs: &Attrs) -> bool {
    let Some(Attr::Str(body)) = attrs.get("body") else { return false };
    let last = body.trim_end().trim_end_matches(';').rsplit(';').next().unwrap_or("");
    let op_name = last.split_once('=').and_then(|(_, call)| call.split_once('(')).map(|(name, _)| name.trim());
    op_name.and_then(def_named).is_some_and(|def| def.reduction)
}

/// `tj: dtype = op(operands, name=value, ...)`.
fn parse_item(item: &str, j: usize) -> Result<InnerOp, String> {
    let (name, rest) = item.split_once(':').ok_or("expected `tN: dtype = op(...)`")?;
    if name.trim() != format!("t{j}") {
        return Err(format!("expected the value t{j} here, found `{}`", name.trim()));
    }
    let (dtype, call) = rest.split_once('=').ok_or("expected `= op(...)` after the dtype")?;
    let dtype = DType::from_name(dtype.trim()).ok_or_else(|| format!("`{}` is not a dtype (f32, f16, bf16, i32, i64, bool)", dtype.trim()))?;
    let call = call.trim();
    let (op_name, args) = call.split_once('(').ok_or("expected `op(...)`")?;
    let args = args.strip_suffix(')').ok_or("expected `)` at the end")?;
    let def = def_named(op_name.trim()).ok_or_else(|| format!("`{}` is not an op", op_name.trim()))?;
    let kind = def.name;
    if !def.elementwise && !def.reduction {
        return Err(format!("{kind} is neither an elementwise op nor a reduction (sum, mean), so it cannot be fused"));
    }
    let mut operands = Vec::new();
    let mut given: Vec<(&str, Attr)> = Vec::new();
    for arg in split_top_level(args) {
        let arg = arg.trim();
        if arg.is_empty() {
            return Err("an empty argument".to_string());
        }
        match arg.split_once('=') {
            None if !given.is_empty() => return Err(format!("operand {arg} after an attribute")),
            None => operands.push(parse_operand(arg, j)?),
            Some((attr_name, value)) => {
                let attr_name = attr_name.trim();
                let spec = def.attrs.iter().find(|s| s.name == attr_name).ok_or_else(|| format!("{kind} has no attribute {attr_name}"))?;
                given.push((spec.name, parse_value(value.trim(), spec.kind).map_err(|e| format!("{attr_name}: {e}"))?));
            }
        }
    }
    if !def.takes_inputs(operands.len()) || def.is_variadic() {
        return Err(format!("{kind} takes {} operands, found {}", def.inputs.len(), operands.len()));
    }
    let attrs = Attrs::for_op(def.kind, &given)?;
    Ok(InnerOp { def, operands, attrs, dtype })
}

fn parse_operand(text: &str, j: usize) -> Result<Operand, String> {
    let index = |digits: &str| digits.parse::<usize>().ok().filter(|_| digits.bytes().all(|b| b.is_ascii_digit()));
    match (text.strip_prefix('x').and_then(index), text.strip_prefix('t').and_then(index)) {
        (Some(k), _) => Ok(Operand::Input(k)),
        (_, Some(i)) if i < j => Ok(Operand::Inner(i)),
        (_, Some(i)) => Err(format!("t{i} is read before it is defined")),
        _ => Err(format!("`{text}` is not an operand (xN: an input, tN: an earlier value)")),
    }
}

/// `text` split at commas outside brackets.
fn split_top_level(text: &str) -> Vec<&str> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_value(text: &str, kind: AttrKind) -> Result<Attr, String> {
    let bad = || format!("`{text}` is not {}", kind.describe());
    Ok(match kind {
        AttrKind::Int => Attr::Int(text.parse().map_err(|_| bad())?),
        AttrKind::Float => Attr::Float(text.parse().map_err(|_| bad())?),
        AttrKind::Bool => Attr::Bool(text.parse().map_err(|_| bad())?),
        AttrKind::DType => Attr::DType(DType::from_name(text).ok_or_else(bad)?),
        AttrKind::Ints => {
            let inner = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).ok_or_else(bad)?;
            let items = split_top_level(inner);
            Attr::Ints(items.iter().map(|x| x.trim().parse().map_err(|_| bad())).collect::<Result<_, _>>()?)
        }
        AttrKind::Str if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => Attr::Str(text.to_string()),
        AttrKind::Str => return Err(bad()),
    })
}

/// The output's type: the last inner value's, once the body checks (see [`FusedBody::types`])
/// and `recomputed` names inner values before the last, in order.
fn infer_fused(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let body = FusedBody::parse(attrs.str("body"))?;
    let mut types = body.types(inputs)?;
    let recomputed = attrs.ints("recomputed");
    if !recomputed.is_sorted_by(|a, b| a < b) || recomputed.iter().any(|&j| j < 0 || j as usize + 1 >= body.ops.len()) {
        return Err(format!(
            "recomputed={} must list inner values before the last (t0..t{}), each once, in order",
            Attr::Ints(recomputed.to_vec()),
            body.ops.len().saturating_sub(2)
        ));
    }
    done(vec![types.pop().expect("a body has an op")])
}

/// How a `fused_norm` (attributes `attrs`, `inputs` inputs) seeds its input `k` when that
/// is one of its norm's parameters: as the norm's own row seeds it (gamma ones, beta
/// zeros); `None` for any other input or op.
pub(super) fn norm_param_init(k: usize, inputs: usize, attrs: &Attrs) -> Option<Init> {
    let norm = match attrs.get("norm") {
        Some(Attr::Str(norm)) => Norm::parse(norm)?,
        _ => return None,
    };
    let first = inputs.checked_sub(norm.params())?;
    let param = k.checked_sub(first)?;
    // The norm's own inputs: x, then its parameters.
    norm.def().init.iter().find(|(input, _)| *input == param + 1).map(|&(_, init)| init)
}

/// `out` (the body's value over the inputs before the norm's parameters) and `y` (the
/// norm's rule over `out` and the parameters).
fn infer_fused_norm(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let norm = Norm::parse(attrs.str("norm")).ok_or_else(|| {
        let names: Vec<&str> = Norm::ALL.iter().map(|&(_, name)| name).collect();
        format!("norm={:?} is not a norm ({})", attrs.str("norm"), names.join(" or "))
    })?;
    let Some(split) = inputs.len().checked_sub(norm.params()).filter(|&n| n > 0) else {
        return Err(format!("norm={:?} takes the body's inputs, then {} parameter(s); found {} inputs", attrs.str("norm"), norm.params(), inputs.len()));
    };
    let (body_inputs, params) = inputs.split_at(split);
    if FusedBody::parse(attrs.str("body"))?.reduces() {
        return Err("the body of a fused_norm may not end with a reduction".to_string());
    }
    let [out] = <[TensorType; 1]>::try_from(infer_fused(body_inputs, attrs)?).expect("fused has one output");
    let mut norm_inputs = vec![&out];
    norm_inputs.extend_from_slice(params);
    let norm_attrs = Attrs::for_op(norm.def().kind, &[("eps", Attr::Float(attrs.float("eps")))])?;
    let [y] = <[TensorType; 1]>::try_from((norm.def().infer)(&norm_inputs, &norm_attrs).map_err(|e| format!("norm={:?}: {e}", attrs.str("norm")))?)
        .expect("a norm has one output");
    done(vec![out, y])
}

/// The body's FLOPs and the norm's.
fn fused_norm_flops(inputs: &[&TensorType], outputs: &[&TensorType], attrs: &Attrs) -> u64 {
    let (Some(norm), Some(out)) = (Norm::parse(attrs.str("norm")), outputs.first()) else { return 0 };
    let split = inputs.len().saturating_sub(norm.params());
    let mut norm_inputs = vec![*out];
    norm_inputs.extend_from_slice(&inputs[split..]);
    fused_flops(&inputs[..split], outputs, attrs).saturating_add((norm.def().flops)(&norm_inputs, &outputs[1..], attrs))
}

/// The FLOPs of the inner ops of `body` for inputs of types `inputs`, each (0 for a body
/// that does not check).
pub fn inner_flops(body: &FusedBody, inputs: &[&TensorType]) -> Vec<u64> {
    let Ok(types) = body.types(inputs) else { return vec![0; body.ops.len()] };
    body.ops
        .iter()
        .zip(&types)
        .map(|(op, ty)| {
            let operands: Vec<&TensorType> = op
                .operands
                .iter()
                .map(|&o| match o {
                    Operand::Input(k) => inputs[k],
                    Operand::Inner(i) => &types[i],
                })
                .collect();
            (op.def.flops)(&operands, &[ty], &op.attrs)
        })
        .collect()
}

/// The inner ops' FLOPs.
fn fused_flops(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    let Ok(body) = FusedBody::parse(attrs.str("body")) else { return 0 };
    inner_flops(&body, inputs).into_iter().fold(0u64, u64::saturating_add)
}

/// The shape of an inner value from its operands' shapes: their numpy broadcast (every
/// elementwise row's output shape; masked_fill's mask broadcasts to x's).
pub fn inner_shape(operands: &[&Shape]) -> Result<Shape, String> {
    let mut shape = Shape(Vec::new());
    for s in operands {
        shape = broadcast(&shape, s)?;
    }
    Ok(shape)
}
