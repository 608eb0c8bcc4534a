//! The verifier: checks a graph's invariants and reports every violation, not the first.
//!
//! It runs on parsed graphs and, in the pipeline, after every pass, so it assumes nothing:
//! ids may be out of range, types may disagree with the op table. It establishes what the
//! rest of memplan assumes of a graph (see `graph.rs`):
//! - names are unique, every id is in range, every value is defined exactly where its
//!   `def` says (an argument listed in `args`, or output `k` of the op that lists it);
//! - ops are in a topological order: every input is an argument or an output of an
//!   earlier op (so program order is a valid schedule and there are no cycles);
//! - arity and attributes match the op's row, and every value's type is the one the row's
//!   rule gives; every type's byte size fits in a `u64`;
//! - views are taken of contiguous memory where the view needs it (`reshape` of a
//!   transposed or expanded value must go through `contiguous`);
//! - updates: the target is a `param` or `state` argument updated once, the new value is
//!   computed by an op (not an argument, not a view) and has the target's type.

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Role, ValueDef};
use crate::ir::ops::OpKind;
use crate::ir::types::TensorType;

/// One broken invariant. Spans are absent for graphs built by code.
#[derive(Debug, Error, Diagnostic, PartialEq)]
pub enum VerifyError {
    /// Two values share a name; the printed IR would be ambiguous.
    #[error("%{name} is defined twice")]
    DuplicateName {
        name: String,
        value: ValueId,
        #[label("second definition")]
        span: Option<SourceSpan>,
    },

    /// A value's `def` and the argument list or op output list disagree: a bug in whatever
    /// built the graph.
    #[error("value {value} (%{name}) is not defined where its definition says")]
    BrokenDefinition { value: ValueId, name: String },

    /// An op refers to a value id that does not exist: a bug in whatever built the graph.
    #[error("{op} refers to value {value}, which does not exist")]
    DanglingValue { op: OpId, value: ValueId },

    /// An op reads a value that is not an argument or an output of an earlier op.
    #[error("`{op_text}` reads %{name} before it is defined")]
    #[diagnostic(help("ops must come after the ops defining their inputs (no cycles)"))]
    UseBeforeDefinition {
        op: OpId,
        value: ValueId,
        name: String,
        op_text: String,
        #[label("used here")]
        span: Option<SourceSpan>,
    },

    /// An op has the wrong number of inputs or outputs for its row.
    #[error("{kind} takes {expected_inputs} input(s) and gives {expected_outputs} output(s), not {inputs} and {outputs}")]
    Arity {
        op: OpId,
        kind: OpKind,
        expected_inputs: usize,
        expected_outputs: usize,
        inputs: usize,
        outputs: usize,
        #[label("here")]
        span: Option<SourceSpan>,
    },

    /// An op's attributes are not exactly its row's, in row order, with the right kinds.
    #[error("{kind}'s attributes do not match its row: {message}")]
    Attributes {
        op: OpId,
        kind: OpKind,
        message: String,
        #[label("here")]
        span: Option<SourceSpan>,
    },

    /// The op's type rule rejects its inputs.
    #[error("{kind}: {message}")]
    TypeRule {
        op: OpId,
        kind: OpKind,
        message: String,
        #[label("here")]
        span: Option<SourceSpan>,
    },

    /// A value's type (written in the text, or set by a pass) is not the one its op gives.
    #[error("%{name} is declared {declared} but {kind} gives {inferred}")]
    #[diagnostic(help("write `%{name}: {inferred}` or drop the written type to let it be inferred"))]
    TypeMismatch {
        value: ValueId,
        name: String,
        kind: OpKind,
        declared: TensorType,
        inferred: TensorType,
        #[label("declared {declared}")]
        span: Option<SourceSpan>,
    },

    /// A type whose size in bytes does not fit in 64 bits.
    #[error("%{name}: {ty} is too large: its size in bytes overflows 64 bits")]
    #[diagnostic(help("the largest tensor memplan can plan has 2^64 - 1 bytes; check the dimensions"))]
    SizeOverflow {
        value: ValueId,
        name: String,
        ty: TensorType,
        #[label("too large")]
        span: Option<SourceSpan>,
    },

    /// `reshape` reads a value whose elements are not laid out densely in row-major order.
    #[error("reshape of %{name}, which is a non-contiguous view")]
    #[diagnostic(help("insert `contiguous(%{name})` and reshape its result"))]
    ReshapeOfNonContiguous {
        op: OpId,
        value: ValueId,
        name: String,
        #[label("reads a transposed or expanded view")]
        span: Option<SourceSpan>,
    },

    /// The target of an update is not a `param` or `state` argument.
    #[error("update target %{name} is {what}, not a param or state argument")]
    #[diagnostic(help("only `param` and `state` arguments persist across steps and can be updated"))]
    BadUpdateTarget {
        target: ValueId,
        name: String,
        what: String,
        #[label("not updatable")]
        span: Option<SourceSpan>,
    },

    /// Two updates of the same target.
    #[error("%{name} is updated twice")]
    DuplicateUpdate {
        target: ValueId,
        name: String,
        #[label("second update")]
        span: Option<SourceSpan>,
    },

    /// The new value of an update has another type than its target.
    #[error("update %{target_name} <- %{value_name}: {value_ty} does not match {target_ty}")]
    UpdateTypeMismatch {
        target: ValueId,
        value: ValueId,
        target_name: String,
        value_name: String,
        target_ty: TensorType,
        value_ty: TensorType,
        #[label("types differ")]
        span: Option<SourceSpan>,
    },

    /// The new value of an update must be computed by an op and own its bytes, so it can be
    /// placed in the target's memory.
    #[error("update %{target_name} <- %{value_name}: the new value is {what}")]
    #[diagnostic(help("compute the new value with an op (e.g. `contiguous(%{value_name})`)"))]
    BadUpdateValue {
        target: ValueId,
        value: ValueId,
        target_name: String,
        value_name: String,
        what: String,
        #[label("cannot land in %{target_name}'s memory")]
        span: Option<SourceSpan>,
    },

    /// A schedule that does not run every op exactly once in a topological order: always a
    /// planner bug.
    #[error("bad schedule: {message}")]
    BadSchedule { message: String },

    /// A return or update names a value id that does not exist: a bug in whatever built the graph.
    #[error("a return or update refers to value {value}, which does not exist")]
    DanglingOutput { value: ValueId },
}

/// Every invariant the graph breaks.
#[derive(Debug, Error, Diagnostic)]
#[error("the step @{step} is not valid ({} error{})", errors.len(), if errors.len() == 1 { "" } else { "s" })]
pub struct VerifyErrors {
    pub step: String,
    #[related]
    pub errors: Vec<VerifyError>,
}

/// Checks every invariant listed in the module docs.
pub fn verify(graph: &Graph) -> Result<(), VerifyErrors> {
    let mut errors = Vec::new();
    check_definitions(graph, &mut errors);
    // Later checks index values by the ids ops hold; stop if those are broken.
    if errors.iter().all(|e| matches!(e, VerifyError::DuplicateName { .. })) {
        check_ops(graph, &mut errors);
        check_updates(graph, &mut errors);
    }
    if errors.is_empty() { Ok(()) } else { Err(VerifyErrors { step: graph.name.clone(), errors }) }
}

fn check_definitions(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let mut seen = indexmap::IndexSet::new();
    for (id, value) in graph.values.iter_enumerated() {
        if !seen.insert(value.name.as_str()) {
            errors.push(VerifyError::DuplicateName { name: value.name.clone(), value: id, span: value.span.into() });
        }
        let defined_there = match value.def {
            ValueDef::Arg(_) => graph.args.contains(&id),
            ValueDef::Op { op, output } => graph.ops.get(op).is_some_and(|o| o.outputs.get(output) == Some(&id)),
        };
        if !defined_there {
            errors.push(VerifyError::BrokenDefinition { value: id, name: value.name.clone() });
        }
        if value.ty.bytes().is_none() {
            errors.push(VerifyError::SizeOverflow {
                value: id,
                name: value.name.clone(),
                ty: value.ty.clone(),
                span: value.span.into(),
            });
        }
    }
    for (op_id, op) in graph.ops.iter_enumerated() {
        for &v in op.inputs.iter().chain(&op.outputs) {
            if graph.values.get(v).is_none() {
                errors.push(VerifyError::DanglingValue { op: op_id, value: v });
            }
        }
        for (k, &v) in op.outputs.iter().enumerate() {
            if graph.values.get(v).is_some_and(|val| val.def != (ValueDef::Op { op: op_id, output: k })) {
                errors.push(VerifyError::BrokenDefinition { value: v, name: graph.values[v].name.clone() });
            }
        }
    }
    for &arg in &graph.args {
        if graph.values.get(arg).is_none_or(|v| !matches!(v.def, ValueDef::Arg(_))) {
            errors.push(VerifyError::DanglingValue { op: OpId(u32::MAX), value: arg });
        }
    }
    for v in graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().flat_map(|u| [u.target, u.value])) {
        if graph.values.get(v).is_none() {
            errors.push(VerifyError::DanglingOutput { value: v });
        }
    }
}

fn check_ops(graph: &Graph, errors: &mut Vec<VerifyError>) {
    // Whether each value is defined yet, walking ops in program order.
    let mut defined: IndexVec<ValueId, bool> =
        graph.values.iter().map(|v| matches!(v.def, ValueDef::Arg(_))).collect();
    // Whether each value's elements are dense row-major in its storage.
    let mut contiguous: IndexVec<ValueId, bool> = IndexVec::from_elem(true, graph.values.len());
    for (op_id, op) in graph.ops.iter_enumerated() {
        let row = op.kind.def();
        let span = op.span.into();
        for &input in &op.inputs {
            if !defined[input] {
                errors.push(VerifyError::UseBeforeDefinition {
                    op: op_id,
                    value: input,
                    name: graph.values[input].name.clone(),
                    op_text: graph.describe_op(op_id),
                    span,
                });
            }
        }
        for &output in &op.outputs {
            defined[output] = true;
        }
        if op.inputs.len() != row.inputs.len() || op.outputs.len() != row.outputs.len() {
            errors.push(VerifyError::Arity {
                op: op_id,
                kind: op.kind,
                expected_inputs: row.inputs.len(),
                expected_outputs: row.outputs.len(),
                inputs: op.inputs.len(),
                outputs: op.outputs.len(),
                span,
            });
            continue;
        }
        let names: Vec<&str> = op.attrs.0.iter().map(|(n, _)| *n).collect();
        let expected: Vec<&str> = row.attrs.iter().map(|s| s.name).collect();
        if names != expected {
            let message = format!("expected [{}], found [{}]", expected.join(", "), names.join(", "));
            errors.push(VerifyError::Attributes { op: op_id, kind: op.kind, message, span });
            continue;
        }
        if let Some((spec, (_, attr))) = row.attrs.iter().zip(&op.attrs.0).find(|(spec, (_, a))| a.kind() != spec.kind) {
            let message = format!("{} must be {}, found {attr}", spec.name, spec.kind.describe());
            errors.push(VerifyError::Attributes { op: op_id, kind: op.kind, message, span });
            continue;
        }
        let input_types: Vec<&TensorType> = op.inputs.iter().map(|&v| &graph.values[v].ty).collect();
        match (row.infer)(&input_types, &op.attrs) {
            Err(message) => errors.push(VerifyError::TypeRule { op: op_id, kind: op.kind, message, span }),
            Ok(types) => {
                for (&output, inferred) in op.outputs.iter().zip(types) {
                    let value = &graph.values[output];
                    if value.ty != inferred {
                        errors.push(VerifyError::TypeMismatch {
                            value: output,
                            name: value.name.clone(),
                            kind: op.kind,
                            declared: value.ty.clone(),
                            inferred,
                            span: value.span.into(),
                        });
                    }
                }
            }
        }
        if row.view_of.is_some() {
            let input = op.inputs[0];
            let input_dense = contiguous[input];
            let output = op.outputs[0];
            contiguous[output] = match op.kind {
                OpKind::Reshape => {
                    if !input_dense {
                        errors.push(VerifyError::ReshapeOfNonContiguous {
                            op: op_id,
                            value: input,
                            name: graph.values[input].name.clone(),
                            span,
                        });
                    }
                    true
                }
                OpKind::Transpose => {
                    input_dense && op.attrs.ints("perm").iter().enumerate().all(|(i, &p)| p == i as i64)
                }
                // Only an expand that adds nothing keeps the layout dense.
                _ => input_dense && graph.values[input].ty == graph.values[output].ty,
            };
        }
    }
}

fn check_updates(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let mut updated = indexmap::IndexSet::new();
    for update in &graph.updates {
        let (target, value) = (&graph.values[update.target], &graph.values[update.value]);
        let span = update.span.into();
        match target.def {
            ValueDef::Arg(Role::Param | Role::State) => {}
            ValueDef::Arg(Role::Input) => errors.push(VerifyError::BadUpdateTarget {
                target: update.target,
                name: target.name.clone(),
                what: "an input argument".into(),
                span,
            }),
            ValueDef::Op { .. } => errors.push(VerifyError::BadUpdateTarget {
                target: update.target,
                name: target.name.clone(),
                what: "computed by an op".into(),
                span,
            }),
        }
        if !updated.insert(update.target) {
            errors.push(VerifyError::DuplicateUpdate { target: update.target, name: target.name.clone(), span });
        }
        if target.ty != value.ty {
            errors.push(VerifyError::UpdateTypeMismatch {
                target: update.target,
                value: update.value,
                target_name: target.name.clone(),
                value_name: value.name.clone(),
                target_ty: target.ty.clone(),
                value_ty: value.ty.clone(),
                span,
            });
        }
        let bad_value = match value.def {
            ValueDef::Arg(_) => Some("an argument"),
            ValueDef::Op { op, .. } if graph.ops[op].kind.def().view_of.is_some() => Some("a view of another value"),
            ValueDef::Op { .. } if graph.updates.iter().filter(|u| u.value == update.value).count() > 1 => {
                Some("the new value of several updates")
            }
            ValueDef::Op { .. } => None,
        };
        if let Some(what) = bad_value {
            errors.push(VerifyError::BadUpdateValue {
                target: update.target,
                value: update.value,
                target_name: target.name.clone(),
                value_name: value.name.clone(),
                what: what.into(),
                span,
            });
        }
    }
}

/// Checks that `schedule` runs every op of `graph` exactly once, each after the ops
/// defining its inputs.
pub fn verify_schedule(graph: &Graph, schedule: &[OpId]) -> Result<(), VerifyErrors> {
    let mut errors = Vec::new();
    let mut done: IndexVec<ValueId, bool> = graph.values.iter().map(|v| matches!(v.def, ValueDef::Arg(_))).collect();
    let mut scheduled: IndexVec<OpId, usize> = IndexVec::from_elem(0, graph.ops.len());
    for (position, &op) in schedule.iter().enumerate() {
        let Some(o) = graph.ops.get(op) else {
            errors.push(VerifyError::BadSchedule { message: format!("position {position} names {op}, which does not exist") });
            continue;
        };
        scheduled[op] += 1;
        if let Some(&input) = o.inputs.iter().find(|&&i| !done[i]) {
            errors.push(VerifyError::BadSchedule {
                message: format!("`{}` runs at position {position}, before %{} is computed", graph.describe_op(op), graph.values[input].name),
            });
        }
        for &output in &o.outputs {
            done[output] = true;
        }
    }
    for (op, &count) in scheduled.iter_enumerated() {
        if count != 1 {
            errors.push(VerifyError::BadSchedule { message: format!("`{}` is scheduled {count} times", graph.describe_op(op)) });
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(VerifyErrors { step: graph.name.clone(), errors }) }
}
