//! Resolution: syntax tree → [`Graph`], collecting every name, op, attribute and type error.
//!
//! Assumes a syntactically well-formed tree from the parser (`syntax`), whose own
//! token-level errors are already collected. Binds value names (reporting undefined and
//! redefined names, a use before the definition, and a cycle with its values in data-flow
//! order), checks each op's name, input and output counts and attributes against its row of
//! the op table (filling in defaults), and infers the types of outputs without a written
//! type. The `backward` statement's optimizer resolves like an op (same attribute code),
//! must be an optimizer-class row (`sgd` with `momentum` means `sgd_momentum`), and may
//! appear once. Errors never cascade: an op whose inputs are unknown because of an earlier error is
//! skipped silently. Establishes: when no error was pushed, a graph whose values all have
//! types, whose ops have valid kinds and complete attribute lists in row order, and whose
//! ops are in text order (so every input is defined by an earlier op or an argument); the
//! verifier checks the rest. Also holds the op signatures of help texts; did-you-mean
//! suggestions come from `suggest`.

use std::collections::hash_map::Entry;

use super::lex::Sp;
use super::suggest::did_you_mean;
use super::syntax::{Ast, AttrAst, AttrVal, BackwardAst, DefAst, unknown_dtype};
use super::{PResult, ParseError};
use crate::hashing::FastMap;
use crate::index::{Idx, OpId, ValueId};
use crate::ir::graph::{Backward, Bind, CustomBackward, Graph, Op, Return, Role, Update, Value, ValueDef};
use crate::ir::ops::{Attr, AttrKind, Attrs, OPS, OpClass, OpDef, OpKind};
use crate::ir::types::{DType, Shape, TensorType};

/// Value names bound so far, borrowed from the syntax tree (hashed fast: see
/// `crate::hashing`).
type Names<'a> = FastMap<&'a str, ValueId>;

/// Builds the graph, pushing every error into `errors`. The graph is only meaningful when
/// no error was found (values with unknown types get a placeholder type, unknown ops a
/// placeholder kind).
pub(super) fn resolve<'a>(ast: &'a Ast, errors: &mut Vec<ParseError>) -> Graph {
    let placeholder = TensorType::new(DType::F32, Shape::scalar());
    let mut g = Graph::new(ast.name.clone());
    // Per value: whether its type is known, and the span of its definition.
    let values = ast.args.len() + ast.defs.iter().map(|d| d.outs.len()).sum::<usize>();
    let mut known: Vec<bool> = Vec::with_capacity(values);
    let mut def_sp: Vec<Sp> = Vec::with_capacity(values);
    let mut bound: Names<'a> = FastMap::with_capacity_and_hasher(values, Default::default());

    let mut define = |g: &mut Graph, errors: &mut Vec<ParseError>, name: &'a str, sp: Sp, ty: Option<TensorType>, def| {
        let id = g.values.push(Value {
            name: name.to_string(),
            ty: ty.clone().unwrap_or_else(|| placeholder.clone()),
            def,
            span: sp.into(),
        });
        known.push(ty.is_some());
        def_sp.push(sp);
        match bound.entry(name) {
            Entry::Occupied(first) => errors.push(ParseError::Redefined {
                name: name.to_string(),
                span: sp.into(),
                first: def_sp.get(first.get().index()).copied().unwrap_or(sp).into(),
            }),
            Entry::Vacant(slot) => {
                slot.insert(id);
            }
        }
        id
    };

    for arg in &ast.args {
        let role = arg.role.unwrap_or(Role::Input);
        let id = define(&mut g, errors, &arg.name, arg.sp, arg.ty.clone(), ValueDef::Arg(role));
        g.args.push(id);
    }
    // Outputs of every op, in text order, before looking at any input: uses may name values
    // defined later (an error, but one to explain precisely).
    let mut outputs: Vec<Vec<ValueId>> = Vec::with_capacity(ast.defs.len());
    for (i, def) in ast.defs.iter().enumerate() {
        let op = OpId::new(i);
        let ids = def
            .outs
            .iter()
            .enumerate()
            .map(|(output, out)| define(&mut g, errors, &out.name, out.sp, None, ValueDef::Op { op, output }))
            .collect();
        outputs.push(ids);
    }

    let op_of = |g: &Graph, v: ValueId| g.def_op(v).map(Idx::index);
    // deps[i]: (value, op defining it) for every input of op i that an op defines; made
    // only for the first use before a definition (to tell a cycle).
    let mut deps: Option<Vec<Vec<(ValueId, usize)>>> = None;

    for (i, def) in ast.defs.iter().enumerate() {
        let row = resolve_op_kind(def, errors);
        let mut inputs = Vec::new();
        let mut inputs_ok = true;
        for (name, sp) in &def.operands {
            let Some(&v) = bound.get(name.as_str()) else {
                errors.push(undefined(name, *sp, &bound));
                inputs_ok = false;
                continue;
            };
            if let Some(d) = op_of(&g, v).filter(|&d| d >= i) {
                let deps = deps.get_or_insert_with(|| {
                    let defs = ast.defs.iter();
                    defs.map(|def| def.operands.iter().filter_map(|(name, _)| bound.get(name.as_str())).filter_map(|&v| op_of(&g, v).map(|d| (v, d))).collect())
                        .collect()
                });
                errors.push(later_use(&g, deps, name, *sp, v, d, i, def_sp.get(v.index()).copied().unwrap_or(*sp)));
                inputs_ok = false;
            }
            inputs.push(v);
        }
        let mut counts_ok = true;
        let mut attrs = None;
        if let Some(row) = row {
            if !row.takes_inputs(def.operands.len()) {
                counts_ok = false;
                errors.push(ParseError::InputCount {
                    op: row.name,
                    expected: row.inputs.len(),
                    found: def.operands.len(),
                    span: def.sp.into(),
                    help: format!("the signature is {}", signature(row)),
                });
            }
            if def.outs.len() != row.outputs.len() {
                counts_ok = false;
                let first = def.outs.first().map_or(def.sp, |o| o.sp);
                let last = def.outs.last().map_or(def.sp, |o| o.sp);
                errors.push(ParseError::OutputCount {
                    op: row.name,
                    expected: row.outputs.len(),
                    found: def.outs.len(),
                    span: first.to(last).into(),
                    help: format!("the signature is {}", signature(row)),
                });
            }
            attrs = resolve_attrs(row, &def.attrs, def.sp, errors);
        }

        // Inference, when everything it needs is known.
        let out_ids = outputs.get_mut(i).map(std::mem::take).unwrap_or_default();
        let mut inferred: Option<Vec<TensorType>> = None;
        if let (Some(row), Some(attrs)) = (row, &attrs) {
            let all_known = inputs_ok && inputs.iter().all(|v| known.get(v.index()).copied().unwrap_or(false));
            if counts_ok && all_known {
                let tys: Vec<&TensorType> = inputs.iter().map(|&v| &g.values[v].ty).collect();
                match (row.infer)(&tys, attrs) {
                    Ok(t) if t.len() == def.outs.len() => inferred = Some(t),
                    Ok(t) => errors.push(ParseError::TypeError {
                        op: row.name,
                        message: format!(
                            "the op table's type rule gave {} type(s) for {} output(s) (a bug in memplan)",
                            t.len(),
                            def.outs.len()
                        ),
                        span: def.sp.into(),
                    }),
                    Err(message) => {
                        if def.outs.iter().any(|o| o.ty.is_none()) {
                            errors.push(ParseError::TypeError { op: row.name, message, span: def.sp.into() });
                        }
                    }
                }
            }
        }
        for (j, (out, &v)) in def.outs.iter().zip(&out_ids).enumerate() {
            let ty = match &out.ty {
                Some(written) => written.clone(),
                None => inferred.as_ref().and_then(|t| t.get(j).cloned()),
            };
            if let Some(ty) = ty {
                g.values[v].ty = ty;
                if let Some(k) = known.get_mut(v.index()) {
                    *k = true;
                }
            }
        }
        g.ops.push(Op {
            kind: row.map_or(OpKind::Add, |r| r.kind),
            inputs,
            outputs: out_ids,
            attrs: attrs.unwrap_or_default(),
            loc: def.loc.clone(),
            region: def.region,
            span: def.sp.into(),
        });
    }

    for up in &ast.updates {
        let target = bound.get(up.target.0.as_str()).copied();
        let value = bound.get(up.value.0.as_str()).copied();
        if target.is_none() {
            errors.push(undefined(&up.target.0, up.target.1, &bound));
        }
        if value.is_none() {
            errors.push(undefined(&up.value.0, up.value.1, &bound));
        }
        if let (Some(target), Some(value)) = (target, value) {
            g.updates.push(Update { target, value, span: up.sp.into() });
        }
    }
    for (k, ret) in ast.returns.iter().enumerate() {
        if k > 0 {
            errors.push(ParseError::DuplicateReturn { span: ret.sp.into(), first: ast.returns[0].sp.into() });
        }
        for (name, sp) in &ret.values {
            match bound.get(name.as_str()) {
                Some(&value) if k == 0 => g.returns.push(Return { value, span: (*sp).into() }),
                Some(_) => {}
                None => errors.push(undefined(name, *sp, &bound)),
            }
        }
    }
    for (k, bw) in ast.backwards.iter().enumerate() {
        if k > 0 {
            errors.push(ParseError::DuplicateBackward { span: bw.sp.into(), first: ast.backwards[0].sp.into() });
            continue;
        }
        let loss = bound.get(bw.loss.0.as_str()).copied();
        if loss.is_none() {
            errors.push(undefined(&bw.loss.0, bw.loss.1, &bound));
        }
        let row = resolve_optimizer(bw, errors);
        let attrs = row.and_then(|row| resolve_attrs(row, &bw.attrs, bw.call_sp, errors));
        if let (Some(loss), Some(row), Some(attrs)) = (loss, row, attrs) {
            g.backward = Some(Backward { loss, optimizer: row.kind, attrs, span: bw.sp.into() });
        }
    }
    for block in &ast.custom_backwards {
        // The body is a step of its own (its own names); its bindings name forward values.
        let body = resolve(&block.body, errors);
        let mut lookup = |(name, sp): &(String, Sp)| {
            let found = bound.get(name.as_str()).copied();
            if found.is_none() {
                errors.push(undefined(name, *sp, &bound));
            }
            found
        };
        let binds: Vec<Option<Bind>> = block
            .binds
            .iter()
            .map(|b| lookup(&b.value).map(|v| if b.grad { Bind::GradOf(v) } else { Bind::Value(v) }))
            .collect();
        let grads: Vec<Option<ValueId>> = block.grads.iter().map(&mut lookup).collect();
        let binds: Option<Vec<Bind>> = binds.into_iter().collect();
        let grads: Option<Vec<ValueId>> = grads.into_iter().collect();
        if let (Some(region), Some(binds), Some(grads)) = (block.region, binds, grads) {
            g.custom_backwards.push(CustomBackward { region, binds, grads, body, span: block.sp.into() });
        }
    }
    g
}

/// The names of the optimizer-class rows, in table order.
fn optimizer_names() -> impl Iterator<Item = &'static str> {
    OPS.iter().filter(|r| r.class == OpClass::Optimizer).map(|r| r.name)
}

/// The row of a `backward` statement's optimizer, reporting an unknown name or an op that
/// is not an optimizer. `sgd` with a `momentum` attribute means `sgd_momentum`.
fn resolve_optimizer(bw: &BackwardAst, errors: &mut Vec<ParseError>) -> Option<&'static OpDef> {
    let list = optimizer_names().collect::<Vec<_>>().join(", ");
    let kind = match OpKind::from_name(&bw.op) {
        Some(OpKind::Sgd) if bw.attrs.iter().any(|a| a.name == "momentum") => OpKind::SgdMomentum,
        Some(kind) => kind,
        None => {
            let help = match did_you_mean(&bw.op, optimizer_names()) {
                Some(m) => format!("did you mean `{m}`? the optimizers are {list}"),
                None => format!("the optimizers are {list}"),
            };
            errors.push(ParseError::UnknownOptimizer { name: bw.op.clone(), span: bw.op_sp.into(), help });
            return None;
        }
    };
    let row = kind.def();
    if row.class != OpClass::Optimizer {
        errors.push(ParseError::NotAnOptimizer {
            name: row.name,
            span: bw.op_sp.into(),
            help: format!(
                "`backward` applies an optimizer to every param the loss depends on; the optimizers are {list}"
            ),
        });
        return None;
    }
    Some(row)
}

/// The row of a def's op, reporting an unknown op name.
fn resolve_op_kind(def: &DefAst, errors: &mut Vec<ParseError>) -> Option<&'static OpDef> {
    let row = OpKind::from_name(&def.op).map(OpKind::def);
    if row.is_none() {
        let help = match did_you_mean(&def.op, OPS.iter().map(|r| r.name)) {
            Some(m) => format!("did you mean `{m}`?"),
            None => "docs/IR.md lists every op".to_string(),
        };
        errors.push(ParseError::UnknownOp { name: def.op.clone(), span: def.op_sp.into(), help });
    }
    row
}

fn undefined(name: &str, sp: Sp, bound: &Names<'_>) -> ParseError {
    ParseError::Undefined {
        name: name.to_string(),
        span: sp.into(),
        help: did_you_mean(name, bound.keys().copied()).map(|m| format!("did you mean `%{m}`?")),
    }
}

/// The error for op `user` reading `value` (named `name` at `sp`), which op `def_op` (at or
/// after `user` in the text) defines: a cycle if `def_op` depends on `user`.
#[allow(clippy::too_many_arguments)]
fn later_use(
    g: &Graph,
    deps: &[Vec<(ValueId, usize)>],
    name: &str,
    sp: Sp,
    value: ValueId,
    def_op: usize,
    user: usize,
    def: Sp,
) -> ParseError {
    match dependency_path(deps, def_op, user) {
        Some(path) => {
            let mut names: Vec<String> = path.iter().map(|&v| g.value_name(v)).collect();
            names.push(g.value_name(value));
            if let Some(first) = names.first().cloned() {
                names.push(first);
            }
            ParseError::Cycle { name: name.to_string(), cycle: names.join(" -> "), span: sp.into() }
        }
        None => ParseError::UseBeforeDef {
            name: name.to_string(),
            span: sp.into(),
            def: def.into(),
            help: format!("values must be defined before use; move this op below the definition of `%{name}`"),
        },
    }
}

/// If op `from` depends on op `to` through inputs, the values along the way in data-flow
/// order (the first is an output of `to`); empty when `from == to`.
fn dependency_path(deps: &[Vec<(ValueId, usize)>], from: usize, to: usize) -> Option<Vec<ValueId>> {
    if from == to {
        return Some(Vec::new());
    }
    // prev[op] = (the op that reads it, the value read) on a shortest path from `from`.
    let mut prev: Vec<Option<(usize, ValueId)>> = vec![None; deps.len()];
    let mut queue = std::collections::VecDeque::from([from]);
    let mut seen = vec![false; deps.len()];
    if let Some(s) = seen.get_mut(from) {
        *s = true;
    }
    while let Some(x) = queue.pop_front() {
        for &(v, d) in deps.get(x).map_or(&[][..], Vec::as_slice) {
            if seen.get(d).copied().unwrap_or(true) {
                continue;
            }
            seen[d] = true;
            prev[d] = Some((x, v));
            if d == to {
                let mut path = Vec::new();
                let mut cur = to;
                while cur != from {
                    let (x, v) = prev.get(cur).copied().flatten()?;
                    path.push(v);
                    cur = x;
                }
                return Some(path);
            }
            queue.push_back(d);
        }
    }
    None
}

/// The attributes `written` on a call of `row` (an op's, or a `backward` statement's
/// optimizer, spanning `call_sp`) in row order with defaults filled in, or `None` after
/// reporting unknown, duplicate, missing and wrong-kind attributes.
pub(super) fn resolve_attrs(
    row: &'static OpDef,
    written: &[AttrAst],
    call_sp: Sp,
    errors: &mut Vec<ParseError>,
) -> Option<Attrs> {
    let mut slots: Vec<Option<Attr>> = vec![None; row.attrs.len()];
    let mut seen: Vec<Option<Sp>> = vec![None; row.attrs.len()];
    let mut ok = true;
    for a in written {
        let Some(k) = row.attrs.iter().position(|s| s.name == a.name) else {
            ok = false;
            let names: Vec<&str> = row.attrs.iter().map(|s| s.name).collect();
            let help = match did_you_mean(&a.name, names.iter().copied()) {
                Some(m) => format!("did you mean `{m}`? the signature is {}", signature(row)),
                None if names.is_empty() => format!("`{}` takes no attributes", row.name),
                None => format!("the signature is {}", signature(row)),
            };
            errors.push(ParseError::UnknownAttr { op: row.name, attr: a.name.clone(), span: a.name_sp.into(), help });
            continue;
        };
        let (Some(spec), Some(seen_k)) = (row.attrs.get(k), seen.get_mut(k)) else { continue };
        if let Some(first) = *seen_k {
            ok = false;
            errors.push(ParseError::DuplicateAttr {
                attr: a.name.clone(),
                span: a.name_sp.into(),
                first: first.into(),
            });
            continue;
        }
        *seen_k = Some(a.name_sp);
        match attr_value(row.name, spec.name, spec.kind, &a.value, a.value_sp) {
            Ok(v) => slots[k] = Some(v),
            Err(e) => {
                ok = false;
                errors.push(e);
            }
        }
    }
    let mut attrs = Vec::with_capacity(row.attrs.len());
    for ((spec, slot), seen) in row.attrs.iter().zip(slots).zip(&seen) {
        match (slot, spec.default) {
            (Some(v), _) => attrs.push((spec.name, v)),
            (None, Some(d)) if seen.is_none() => attrs.push((spec.name, d.to_attr())),
            (None, _) if seen.is_some() => {} // written but invalid: reported above
            (None, _) => {
                ok = false;
                errors.push(ParseError::MissingAttr {
                    op: row.name,
                    attr: spec.name,
                    span: call_sp.into(),
                    help: format!(
                        "add `{}=...` ({}); the signature is {}",
                        spec.name,
                        spec.kind.describe(),
                        signature(row)
                    ),
                });
            }
        }
    }
    ok.then_some(Attrs(attrs))
}

/// An attribute value of `kind` from its written form.
pub(super) fn attr_value(op: &'static str, attr: &'static str, kind: AttrKind, value: &AttrVal, sp: Sp) -> PResult<Attr> {
    let wrong = || ParseError::AttrKind { op, attr, expected: kind.describe(), span: sp.into() };
    let int = |text: &str, sp: Sp| {
        text.parse::<i64>().map_err(|_| ParseError::NumberTooLarge {
            literal: text.to_string(),
            what: "an integer attribute (i64)",
            span: sp.into(),
            help: format!("integer attributes are from {} to {}", i64::MIN, i64::MAX),
        })
    };
    match (kind, value) {
        (AttrKind::Int, AttrVal::Int(t)) => int(t, sp).map(Attr::Int),
        (AttrKind::Float, AttrVal::Int(t) | AttrVal::Float(t)) => match t.parse::<f64>() {
            Ok(x) if x.is_finite() || t.contains("inf") => Ok(Attr::Float(x)),
            _ => Err(ParseError::NumberTooLarge {
                literal: t.clone(),
                what: "a float attribute (f64)",
                span: sp.into(),
                help: "write `inf` or `-inf` for an infinity".to_string(),
            }),
        },
        (AttrKind::Float, AttrVal::Word(w)) if w == "inf" => Ok(Attr::Float(f64::INFINITY)),
        (AttrKind::Bool, AttrVal::Word(w)) if w == "true" => Ok(Attr::Bool(true)),
        (AttrKind::Bool, AttrVal::Word(w)) if w == "false" => Ok(Attr::Bool(false)),
        (AttrKind::Ints, AttrVal::List(items)) => {
            items.iter().map(|(t, sp)| int(t, *sp)).collect::<PResult<Vec<i64>>>().map(Attr::Ints)
        }
        (AttrKind::DType, AttrVal::Word(w)) => {
            DType::from_name(w).map(Attr::DType).ok_or_else(|| unknown_dtype(w.clone(), sp))
        }
        (AttrKind::Str, AttrVal::Str(text)) => Ok(Attr::Str(text.clone())),
        _ => Err(wrong()),
    }
}

/// `matmul(a, b) -> out [transpose_a: bool = false, ...]`, for help lines.
/// Not [`OpDef::signature`] (the docs/IR.md form, `matmul(a, b, transpose_a=false, ...)`):
/// this one names every attribute's kind and marks the required ones, and the help texts
/// in the corpus snapshots use it.
fn signature(row: &OpDef) -> String {
    let mut s = format!("{}({}) -> {}", row.name, row.inputs.join(", "), row.outputs.join(", "));
    if !row.attrs.is_empty() {
        let attrs: Vec<String> = row
            .attrs
            .iter()
            .map(|a| {
                let kind = match a.kind {
                    AttrKind::Int => "int",
                    AttrKind::Float => "float",
                    AttrKind::Bool => "bool",
                    AttrKind::Ints => "ints",
                    AttrKind::DType => "dtype",
                    AttrKind::Str => "string",
                };
                match a.default {
                    Some(d) => format!("{}: {kind} = {}", a.name, d.to_attr()),
                    None => format!("{}: {kind} (required)", a.name),
                }
            })
            .collect();
        s.push_str(&format!(" [{}]", attrs.join(", ")));
    }
    s
}
