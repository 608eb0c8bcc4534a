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
//! - views are taken of memory they can index: a `reshape` is a view of its input's layout
//!   (`ir::layout`: as PyTorch's `view`), else the step must copy with `contiguous` first;
//! - updates: the target is a `param` or `state` argument updated once, the new value is
//!   computed by an op (not an argument, not a view) and has the target's type;
//! - dropout sites draw independent masks: no two forward `dropout` ops share a `stream`
//!   unless they are one computation (a recompute's clone of the original, see
//!   `same_computation`);
//! - `backward` (a forward-only step, before autodiff expands it): the loss is a float
//!   scalar computed by an op; the optimizer is an optimizer-class op whose attribute values
//!   its row's rule accepts (called on `f32[1]` tensors and an `f32[]` step count); the
//!   step writes no `update` lines (autodiff writes them);
//! - custom regions (`custom(N)`, the user's `autograd.Function`) and their
//!   `custom_backward(N)` blocks: see `custom.rs`.

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::hashing::FastSet;
use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::graph::{Region, Graph, Role, ValueDef};
use crate::ir::layout::{Layout, view_layout};
use crate::ir::ops::{Attr, Attrs, OPS, OpClass, OpKind};
use crate::ir::types::{DType, TensorType};

mod custom;

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

    /// `reshape` reads a view whose elements cannot be read in row-major order under the
    /// new shape without a copy (PyTorch's `view` would refuse it too).
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

    /// The loss of `backward` is not a float scalar: autodiff seeds d loss / d loss = 1 with
    /// a one-element float tensor, so a tensor or an integer loss has no gradient to start from.
    #[error("the loss %{name} of `backward` is {ty}, not a float scalar")]
    LossNotFloatScalar {
        loss: ValueId,
        name: String,
        ty: TensorType,
        #[label("differentiates %{name}: {ty}")]
        span: Option<SourceSpan>,
        #[label("defined here")]
        def: Option<SourceSpan>,
        #[help]
        help: String,
    },

    /// The loss of `backward` is an argument, not computed by an op: it depends on no
    /// param, so there is nothing to differentiate.
    #[error("the loss %{name} of `backward` is an argument, not computed by an op")]
    #[diagnostic(help("compute the loss from the params in the step (e.g. with `cross_entropy`) and differentiate that"))]
    LossNotComputed {
        loss: ValueId,
        name: String,
        #[label("differentiates an argument")]
        span: Option<SourceSpan>,
        #[label("declared here")]
        def: Option<SourceSpan>,
    },

    /// The optimizer of `backward` is not an optimizer-class op (only graphs built by code
    /// can have one: the parser rejects it).
    #[error("`backward` uses {kind}, which is not an optimizer")]
    NotAnOptimizer {
        kind: OpKind,
        #[label("not an optimizer")]
        span: Option<SourceSpan>,
        #[help]
        help: String,
    },

    /// The optimizer attributes of `backward` are not exactly its row's, in row order, with
    /// the right kinds (only graphs built by code: the parser fills them in).
    #[error("`backward` with {kind}: the attributes do not match its row: {message}")]
    BackwardAttributes {
        kind: OpKind,
        message: String,
        #[label("here")]
        span: Option<SourceSpan>,
    },

    /// An optimizer attribute value of `backward` is out of range (a negative `lr`, a
    /// `beta1` outside [0, 1), ...): the optimizer row's type rule rejects it.
    #[error("`backward` with {kind}: {message}")]
    #[diagnostic(help("docs/IR.md gives the range of every optimizer attribute"))]
    BadOptimizerAttr {
        kind: OpKind,
        message: String,
        #[label("rejected attribute value")]
        span: Option<SourceSpan>,
    },

    /// An `update` of a `param` in a step with `backward`: autodiff writes the update of
    /// every param it trains (with the optimizer). A `state` argument the forward computes
    /// anew (a running mean, a counter) may be updated.
    #[error("update of param %{name} in a step with `backward`")]
    #[diagnostic(help(
        "remove this `update` line: `backward` updates every param the loss depends on with the optimizer (a value kept across steps that the forward itself rewrites is a `state` argument)"
    ))]
    UpdateWithBackward {
        target: ValueId,
        name: String,
        #[label("written update")]
        span: Option<SourceSpan>,
        #[label("autodiff writes the updates")]
        backward: Option<SourceSpan>,
    },

    /// A `recompute(N)` op in a step with `backward`: recomputes are what autodiff writes
    /// for the user's checkpointed regions, in the expanded step; a forward-only step marks
    /// the region's ops `checkpoint(N)` instead.
    #[error("`{op_text}` is marked recompute({region}) in a step with `backward`")]
    #[diagnostic(help(
        "mark the ops of a checkpointed region `checkpoint({region})`: autodiff writes their recomputes in the backward"
    ))]
    RecomputeWithBackward {
        op: OpId,
        region: u32,
        op_text: String,
        #[label("written recompute")]
        span: Option<SourceSpan>,
    },

    /// Two forward `dropout` ops draw from one `stream`: their masks would be correlated
    /// (the same mask, when they read one seed value and have as many elements), where
    /// dropout sites are meant to be independent. A recompute of a dropout (the same
    /// computation again, see `same_computation`) shares its original's stream by design.
    #[error("`{op_text}` draws from stream {stream}, as `{first_text}` does")]
    #[diagnostic(help("give each dropout site its own stream (their masks would be correlated)"))]
    DropoutStreamReused {
        op: OpId,
        first: OpId,
        stream: i64,
        op_text: String,
        first_text: String,
        #[label("stream {stream} again")]
        span: Option<SourceSpan>,
        #[label("first drawn here")]
        first_span: Option<SourceSpan>,
    },

    /// A custom region (`custom(N)` ops, the user's `autograd.Function`) or its
    /// `custom_backward(N)` block breaks a rule of `custom.rs` (the message says which).
    #[error("custom region {region}: {message}")]
    #[diagnostic(help(
        "a custom region's ops are contiguous and marked custom(N); its one `custom_backward(N)(%a: type = %v, %g: type = grad %y) -> (%x) {{ ... return %gx }}` block reads forward values and gradients of the region's outputs, and returns the gradients of values the region reads"
    ))]
    BadCustomBackward {
        region: u32,
        message: String,
        #[label("here")]
        span: Option<SourceSpan>,
    },

    /// The body of a `custom_backward(N)` block is not a valid graph (its own errors
    /// follow).
    #[error("the body of custom_backward({region}) is not valid ({} error{})", errors.len(), if errors.len() == 1 { "" } else { "s" })]
    CustomBackwardBody {
        region: u32,
        #[related]
        errors: Vec<VerifyError>,
    },

    /// A schedule that does not run every op exactly once in a topological order: always a
    /// planner bug.
    #[error("bad schedule: {message}")]
    BadSchedule { message: String },

    /// A return, update or `backward` names a value id that does not exist: a bug in
    /// whatever built the graph.
    #[error("a return, update or backward refers to value {value}, which does not exist")]
    DanglingOutput { value: ValueId },
}

/// Every invariant the graph breaks.
#[derive(Debug, Error, Diagnostic, PartialEq)]
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
        check_dropout_streams(graph, &mut errors);
        check_updates(graph, &mut errors);
        check_backward(graph, &mut errors);
        custom::check_custom_backwards(graph, &mut errors);
    }
    if errors.is_empty() { Ok(()) } else { Err(VerifyErrors { step: graph.name.clone(), errors }) }
}

fn check_definitions(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let mut seen = FastSet::with_capacity_and_hasher(graph.values.len(), Default::default());
    let mut is_arg: IndexVec<ValueId, bool> = IndexVec::from_elem(false, graph.values.len());
    for &arg in graph.args.iter().filter(|&&arg| arg.index() < graph.values.len()) {
        is_arg[arg] = true;
    }
    for (id, value) in graph.values.iter_enumerated() {
        if !seen.insert(value.name.as_str()) {
            errors.push(VerifyError::DuplicateName { name: value.name.clone(), value: id, span: value.span.into() });
        }
        let defined_there = match value.def {
            ValueDef::Arg(_) => is_arg[id],
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
    let returned = graph.returns.iter().map(|r| r.value);
    let updated = graph.updates.iter().flat_map(|u| [u.target, u.value]);
    for v in returned.chain(updated).chain(graph.backward.as_ref().map(|b| b.loss)) {
        if graph.values.get(v).is_none() {
            errors.push(VerifyError::DanglingOutput { value: v });
        }
    }
}

fn check_ops(graph: &Graph, errors: &mut Vec<VerifyError>) {
    // Whether each value is defined yet, walking ops in program order.
    let mut defined: IndexVec<ValueId, bool> =
        graph.values.iter().map(|v| matches!(v.def, ValueDef::Arg(_))).collect();
    // Where each view's elements sit in its root's bytes (`ir::layout`; `None`: not a
    // contiguous view); every other value is dense (made only when a view reads it: two
    // vectors per value of a 1,000,000-op step were a third of the verifier's time).
    let mut layouts: std::collections::HashMap<ValueId, Option<Layout>> = std::collections::HashMap::new();
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
        if !row.takes_inputs(op.inputs.len()) || op.outputs.len() != row.outputs.len() {
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
        if let Some(message) = attrs_mismatch(op.kind, &op.attrs) {
            errors.push(VerifyError::Attributes { op: op_id, kind: op.kind, message, span });
            continue;
        }
        let input_types: Vec<&TensorType> = op.inputs.iter().map(|&v| &graph.values[v].ty).collect();
        let typed = match (row.infer)(&input_types, &op.attrs) {
            Err(message) => {
                errors.push(VerifyError::TypeRule { op: op_id, kind: op.kind, message, span });
                false
            }
            Ok(types) => {
                let mut all_match = true;
                for (&output, inferred) in op.outputs.iter().zip(types) {
                    let value = &graph.values[output];
                    if value.ty != inferred {
                        all_match = false;
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
                all_match
            }
        };
        // A view's layout, once its types are right (`view_layout` trusts them).
        if row.view_of().is_some() && typed {
            let (input, output) = (op.inputs[0], op.outputs[0]);
            let out_shape = graph.values[output].ty.dims();
            let dense;
            let base = match layouts.get(&input) {
                Some(layout) => layout.as_ref(),
                None => {
                    dense = Layout::dense(input, graph.values[input].ty.dims());
                    Some(&dense)
                }
            };
            let layout = base.and_then(|l| view_layout(op.kind, &op.attrs, l, out_shape));
            let broken = layout.is_none() && base.is_some();
            layouts.insert(output, layout);
            if broken {
                errors.push(VerifyError::ReshapeOfNonContiguous {
                    op: op_id,
                    value: input,
                    name: graph.values[input].name.clone(),
                    span,
                });
            }
        }
    }
}

/// Ops that draw random numbers (`dropout`: rows with `draws`): each stream is drawn by one
/// site. A later op with the stream of an earlier one is an error unless it is the same
/// computation (a recompute).
fn check_dropout_streams(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let mut first: indexmap::IndexMap<i64, OpId> = indexmap::IndexMap::new();
    for (op_id, op) in graph.ops.iter_enumerated() {
        let Some(attr) = op.kind.def().draws else { continue };
        // A missing or mistyped attribute is reported by `check_ops`.
        let Some(Attr::Int(stream)) = op.attrs.get(attr) else { continue };
        match first.get(stream) {
            None => {
                first.insert(*stream, op_id);
            }
            Some(&earlier) if same_computation(graph, earlier, op_id) => {}
            Some(&earlier) => errors.push(VerifyError::DropoutStreamReused {
                op: op_id,
                first: earlier,
                stream: *stream,
                op_text: graph.describe_op(op_id),
                first_text: graph.describe_op(earlier),
                span: op.span.into(),
                first_span: graph.ops[earlier].span.into(),
            }),
        }
    }
}

/// Whether ops `a` and `b` compute the same bits: the same kind and attributes, reading at
/// each position the same value, or the same output of ops that (recursively) compute the
/// same bits. Arguments are equal only to themselves. Sound because every op memplan runs
/// is a deterministic function of its inputs and attributes (dropout's mask included: a
/// hash of the seed value, the stream and the element index); `extern` ops are not known
/// to be, so they are never the same computation as another op. The remat pass's clones
/// are exactly this: the original's kind and attributes over clones of its inputs.
/// Iterative (a chain of clones may be long); each pair of ops is compared once.
fn same_computation(graph: &Graph, a: OpId, b: OpId) -> bool {
    let mut pending = vec![(a, b)];
    let mut seen = std::collections::HashSet::new();
    while let Some((a, b)) = pending.pop() {
        if a == b || !seen.insert((a, b)) {
            continue;
        }
        let (x, y) = (&graph.ops[a], &graph.ops[b]);
        if x.kind != y.kind || x.kind.is_extern() || x.attrs != y.attrs || x.inputs.len() != y.inputs.len() {
            return false;
        }
        for (&u, &v) in x.inputs.iter().zip(&y.inputs) {
            if u == v {
                continue;
            }
            match (graph.values[u].def, graph.values[v].def) {
                (ValueDef::Op { op: p, output: i }, ValueDef::Op { op: q, output: j }) if i == j => pending.push((p, q)),
                _ => return false,
            }
        }
    }
    true
}

fn check_updates(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let mut updated = indexmap::IndexSet::new();
    let mut updates_writing: IndexVec<ValueId, usize> = IndexVec::from_elem(0, graph.values.len());
    for update in &graph.updates {
        updates_writing[update.value] += 1;
    }
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
            ValueDef::Op { op, .. } if graph.ops[op].kind.def().view_of().is_some() => Some("a view of another value"),
            ValueDef::Op { .. } if updates_writing[update.value] > 1 => {
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

/// Why `attrs` are not exactly `kind`'s row attributes (names in row order, right kinds).
fn attrs_mismatch(kind: OpKind, attrs: &Attrs) -> Option<String> {
    let row = kind.def();
    let same_names = attrs.0.len() == row.attrs.len() && attrs.0.iter().zip(row.attrs).all(|((name, _), spec)| *name == spec.name);
    if !same_names {
        let names: Vec<&str> = attrs.0.iter().map(|(n, _)| *n).collect();
        let expected: Vec<&str> = row.attrs.iter().map(|s| s.name).collect();
        return Some(format!("expected [{}], found [{}]", expected.join(", "), names.join(", ")));
    }
    row.attrs
        .iter()
        .zip(&attrs.0)
        .find(|(spec, (_, a))| a.kind() != spec.kind)
        .map(|(spec, (_, attr))| format!("{} must be {}, found {attr}", spec.name, spec.kind.describe()))
}

/// The `backward` statement: a float scalar loss computed by an op, an optimizer-class op
/// with valid attributes, and no written `update` lines.
fn check_backward(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let Some(bw) = &graph.backward else { return };
    let span: Option<SourceSpan> = bw.span.into();
    if let Some(loss) = graph.values.get(bw.loss) {
        if matches!(loss.def, ValueDef::Arg(_)) {
            errors.push(VerifyError::LossNotComputed {
                loss: bw.loss,
                name: loss.name.clone(),
                span,
                def: loss.span.into(),
            });
        }
        if !(loss.ty.dtype.is_float() && loss.ty.rank() == 0) {
            let help = if loss.ty.dtype.is_float() {
                format!("reduce the loss to a scalar first: `mean(%{}, axes=[...])` or `sum`", loss.name)
            } else {
                format!("compute the loss in a float dtype (`cast(%{}, to=f32)`), as a scalar", loss.name)
            };
            errors.push(VerifyError::LossNotFloatScalar {
                loss: bw.loss,
                name: loss.name.clone(),
                ty: loss.ty.clone(),
                span,
                def: loss.span.into(),
                help,
            });
        }
    }
    let row = bw.optimizer.def();
    if row.class != OpClass::Optimizer {
        let names: Vec<&str> = OPS.iter().filter(|r| r.class == OpClass::Optimizer).map(|r| r.name).collect();
        errors.push(VerifyError::NotAnOptimizer {
            kind: bw.optimizer,
            span,
            help: format!("the optimizers are {}", names.join(", ")),
        });
    } else if let Some(message) = attrs_mismatch(bw.optimizer, &bw.attrs) {
        errors.push(VerifyError::BackwardAttributes { kind: bw.optimizer, message, span });
    } else {
        // The values are checked by the row's own rule, on the types autodiff will give it:
        // p, g and the state tensors f32[1], the step count t a f32[] scalar.
        let types: Vec<TensorType> = row
            .inputs
            .iter()
            .map(|&name| TensorType::new(DType::F32, if name == "t" { vec![] } else { vec![1] }))
            .collect();
        let refs: Vec<&TensorType> = types.iter().collect();
        if let Err(message) = (row.infer)(&refs, &bw.attrs) {
            errors.push(VerifyError::BadOptimizerAttr { kind: bw.optimizer, message, span });
        }
    }
    for (id, op) in graph.ops.iter_enumerated() {
        if let Some(Region::Recompute(region)) = op.region {
            errors.push(VerifyError::RecomputeWithBackward {
                op: id,
                region,
                op_text: graph.describe_op(id),
                span: op.span.into(),
            });
        }
    }
    let param = |v: ValueId| graph.values.get(v).is_some_and(|v| v.def == ValueDef::Arg(Role::Param));
    for update in graph.updates.iter().filter(|u| param(u.target)) {
        errors.push(VerifyError::UpdateWithBackward {
            target: update.target,
            name: graph.values.get(update.target).map_or_else(|| update.target.to_string(), |v| v.name.clone()),
            span: update.span.into(),
            backward: span,
        });
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

#[cfg(test)]
mod tests {
    //! The `backward` checks and dropout streams (the others are exercised by the ir/
    //! corpus).

    use super::*;
    use crate::ir::graph::{Backward, Span};
    use crate::ir::parse::parse;

    /// A step with a param `%w`, inputs `%x` (f32[8,4]), `%y` (i32[8]), `%s` (f32[]) and a
    /// state `%t`; `body` follows the cross-entropy loss `%loss`.
    fn step(body: &str) -> String {
        format!(
            "step @s(\n  %w: f32[4,3] param,\n  %x: f32[8,4] input,\n  %y: i32[8] input,\n  %s: f32[] input,\n  %t: f32[] state,\n) {{\n  %o = matmul(%x, %w)\n  %loss = cross_entropy(%o, %y)\n{body}\n}}\n"
        )
    }

    fn errors_of(src: &str) -> Vec<VerifyError> {
        let g = parse(src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
        verify(&g).err().map(|e| e.errors).unwrap_or_default()
    }

    /// The text a span covers.
    fn text(src: &str, span: Option<SourceSpan>) -> &str {
        let span = span.expect("a span");
        &src[span.offset()..span.offset() + span.len()]
    }

    #[test]
    fn forward_only_steps_verify() {
        for bw in [
            "backward %loss with adam()",
            "backward %loss with adamw(lr=0, beta1=0, beta2=0.5, eps=1e-12, weight_decay=0)",
            "backward %loss with sgd(lr=0.1)",
            "backward %loss with sgd(lr=0.1, momentum=0)",
            "backward %loss with sgd_momentum(lr=1e3, momentum=2)",
        ] {
            let src = step(&format!("  {bw}\n  return %loss"));
            assert_eq!(errors_of(&src), vec![], "{bw}");
        }
    }

    #[test]
    fn loss_must_be_a_float_scalar() {
        let src = step("  backward %o with adam()");
        let errs = errors_of(&src);
        assert_eq!(errs.len(), 1, "{errs:?}");
        let e = &errs[0];
        assert_eq!(e.to_string(), "the loss %o of `backward` is f32[8,3], not a float scalar");
        let VerifyError::LossNotFloatScalar { span, def, help, .. } = e else { panic!("{e:?}") };
        assert_eq!(text(&src, *span), "backward %o with adam()");
        assert_eq!(text(&src, *def), "%o");
        assert_eq!(help, "reduce the loss to a scalar first: `mean(%o, axes=[...])` or `sum`");

        let src = step("  %n = sum(%y, axes=[0])\n  backward %n with adam()");
        let errs = errors_of(&src);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].to_string(), "the loss %n of `backward` is i32[], not a float scalar");
        assert_eq!(
            errs[0].help().unwrap().to_string(),
            "compute the loss in a float dtype (`cast(%n, to=f32)`), as a scalar"
        );
    }

    #[test]
    fn loss_must_be_computed_by_an_op() {
        let src = step("  backward %s with adam()");
        let errs = errors_of(&src);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].to_string(), "the loss %s of `backward` is an argument, not computed by an op");
        let VerifyError::LossNotComputed { span, def, .. } = &errs[0] else { panic!("{:?}", errs[0]) };
        assert_eq!(text(&src, *span), "backward %s with adam()");
        assert_eq!(text(&src, *def), "%s");
        // An argument that is not a float scalar either: both are reported.
        let errs = errors_of(&step("  backward %x with adam()"));
        assert!(matches!(errs[..], [VerifyError::LossNotComputed { .. }, VerifyError::LossNotFloatScalar { .. }]), "{errs:?}");
    }

    #[test]
    fn optimizer_attribute_values_are_checked_by_the_rows_rule() {
        let cases = [
            ("sgd(lr=-1)", "`backward` with sgd: lr=-1.0 must be a finite number >= 0"),
            ("sgd(lr=inf)", "`backward` with sgd: lr=inf must be a finite number >= 0"),
            ("sgd(lr=1, momentum=-0.5)", "`backward` with sgd_momentum: momentum=-0.5 must be a finite number >= 0"),
            ("adam(beta1=1)", "`backward` with adam: beta1=1.0 must be in [0, 1)"),
            ("adam(eps=0)", "`backward` with adam: eps=0.0 must be a positive finite number"),
            ("adamw(weight_decay=-0.1)", "`backward` with adamw: weight_decay=-0.1 must be a finite number >= 0"),
        ];
        for (call, message) in cases {
            let src = step(&format!("  backward %loss with {call}"));
            let errs = errors_of(&src);
            assert_eq!(errs.len(), 1, "{call}: {errs:?}");
            assert!(matches!(errs[0], VerifyError::BadOptimizerAttr { .. }), "{call}: {errs:?}");
            assert_eq!(errs[0].to_string(), message);
            let VerifyError::BadOptimizerAttr { span, .. } = &errs[0] else { unreachable!() };
            assert_eq!(text(&src, *span), format!("backward %loss with {call}"));
        }
    }

    #[test]
    fn no_update_of_a_param_with_backward() {
        let src = step("  %t2 = add_scalar(%t, value=1)\n  update %t <- %t2\n  backward %loss with adam()\n  %w2 = relu(%w)\n  update %w <- %w2");
        let errs = errors_of(&src);
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(msgs, ["update of param %w in a step with `backward`"]);
        let VerifyError::UpdateWithBackward { span, backward, .. } = &errs[0] else { panic!("{errs:?}") };
        assert_eq!(text(&src, *span), "update %w <- %w2");
        assert_eq!(text(&src, *backward), "backward %loss with adam()");
        assert!(errs[0].help().unwrap().to_string().starts_with("remove this `update` line"));
        // The update of the state %t is fine, and so are both without backward.
        let src = step("  %t2 = add_scalar(%t, value=1)\n  update %t <- %t2\n  backward %loss with adam()");
        assert_eq!(errors_of(&src), vec![]);
        let src = step("  %t2 = add_scalar(%t, value=1)\n  update %t <- %t2\n  %w2 = relu(%w)\n  update %w <- %w2");
        assert_eq!(errors_of(&src), vec![]);
    }

    #[test]
    fn recomputes_are_autodiffs_to_write() {
        let src = step("  %t2 = relu(%t) checkpoint(0)\n  %t3 = relu(%t) recompute(0)\n  backward %loss with adam()");
        let msgs: Vec<String> = errors_of(&src).iter().map(ToString::to_string).collect();
        assert_eq!(msgs, ["`%t3 = relu(%t)` is marked recompute(0) in a step with `backward`"]);
        // Without backward (an expanded step), both marks are labels.
        let src = step("  %t2 = relu(%t) checkpoint(0)\n  %t3 = relu(%t) recompute(0)");
        assert_eq!(errors_of(&src), vec![]);
    }

    /// A step reading `%x: f32[4,3]` and the seeds `%seed`, `%seed2: i64[]`, with the
    /// statements `lines`.
    fn dropouts(lines: &[&str]) -> String {
        let body: String = lines.iter().map(|line| format!("  {line}\n")).collect();
        format!("step @d(\n  %x: f32[4,3] input,\n  %seed: i64[] input,\n  %seed2: i64[] input,\n) {{\n{body}}}\n")
    }

    #[test]
    fn each_dropout_site_draws_its_own_stream() {
        let src = dropouts(&[
            "%a = dropout(%x, %seed, p=0.1, stream=0)",
            "%h = relu(%a)",
            "%b = dropout(%h, %seed, p=0.5, stream=0)",
            "return %b",
        ]);
        let errs = errors_of(&src);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].to_string(),
            "`%b = dropout(%h, %seed, p=0.5, stream=0)` draws from stream 0, \
             as `%a = dropout(%x, %seed, p=0.1, stream=0)` does"
        );
        let help = errs[0].help().unwrap().to_string();
        assert_eq!(help, "give each dropout site its own stream (their masks would be correlated)");
        let VerifyError::DropoutStreamReused { span, first_span, stream, .. } = &errs[0] else { panic!("{errs:?}") };
        assert_eq!(*stream, 0);
        assert_eq!(text(&src, *span), "dropout(%h, %seed, p=0.5, stream=0)");
        assert_eq!(text(&src, *first_span), "dropout(%x, %seed, p=0.1, stream=0)");
        // Another seed value does not make it another site: streams tell sites apart.
        let src = dropouts(&[
            "%a = dropout(%x, %seed, p=0.1, stream=4)",
            "%b = dropout(%x, %seed2, p=0.1, stream=4)",
            "return %a, %b",
        ]);
        assert!(matches!(errors_of(&src)[..], [VerifyError::DropoutStreamReused { stream: 4, .. }]));
        // Own streams are fine, and backward ops share their forward's.
        let src = dropouts(&[
            "%a = dropout(%x, %seed, p=0.1, stream=0)",
            "%b = dropout(%a, %seed, p=0.1, stream=1)",
            "%da = dropout_backward(%b, %seed, p=0.1, stream=0)",
            "%db = dropout_backward(%da, %seed, p=0.1, stream=1)",
            "return %db",
        ]);
        assert_eq!(errors_of(&src), vec![]);
    }

    #[test]
    fn a_recomputed_dropout_shares_its_stream() {
        // What the remat pass writes: the same kind and attributes over the same values or
        // over clones of them (here %h.remat1 of %h) is one computation, drawing one mask.
        let clone = ["%h = mul(%x, %x)", "%a = dropout(%h, %seed, p=0.1, stream=2)", "%h.remat1 = mul(%x, %x)"];
        for (tail, same) in [
            (&["%a.remat1 = dropout(%h.remat1, %seed, p=0.1, stream=2)"][..], true),
            (&["%a.remat1 = dropout(%h, %seed, p=0.1, stream=2)"], true),
            // Not the same computation: another p, another seed, another input.
            (&["%a.remat1 = dropout(%h.remat1, %seed, p=0.2, stream=2)"], false),
            (&["%a.remat1 = dropout(%h.remat1, %seed2, p=0.1, stream=2)"], false),
            (&["%s = add(%x, %x)", "%a.remat1 = dropout(%s, %seed, p=0.1, stream=2)"], false),
        ] {
            let src = dropouts(&[&clone[..], tail, &["return %a, %a.remat1"]].concat());
            let errs = errors_of(&src);
            assert_eq!(errs.is_empty(), same, "{tail:?}: {errs:?}");
        }
    }

    /// `%loss = sum(%w)` over a param, differentiated with `optimizer(attrs)`, built by code.
    fn built(optimizer: OpKind, attrs: Attrs) -> Graph {
        let mut g = Graph::new("built");
        let w = g.add_arg("w", TensorType::new(DType::F32, vec![3]), Role::Param);
        let sum_attrs = Attrs(vec![("axes", Attr::Ints(vec![0])), ("keepdim", Attr::Bool(false))]);
        let op = g.add_op(OpKind::Sum, vec![w], sum_attrs, vec![("loss".into(), TensorType::new(DType::F32, vec![]))]);
        let loss = g.ops[op].outputs[0];
        g.backward = Some(Backward { loss, optimizer, attrs, span: Span::NONE });
        g
    }

    fn built_errors(g: &Graph) -> Vec<VerifyError> {
        verify(g).err().map(|e| e.errors).unwrap_or_default()
    }

    #[test]
    fn graphs_built_by_code() {
        let sgd = Attrs(vec![("lr", Attr::Float(0.1))]);
        assert_eq!(built_errors(&built(OpKind::Sgd, sgd)), vec![]);

        let errs = built_errors(&built(OpKind::Relu, Attrs::default()));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].to_string(), "`backward` uses relu, which is not an optimizer");
        assert_eq!(errs[0].help().unwrap().to_string(), "the optimizers are sgd, sgd_momentum, adam, adamw");
        let errs = built_errors(&built(OpKind::Matmul, Attrs::defaults(OpKind::Matmul).unwrap()));
        assert!(matches!(errs[..], [VerifyError::NotAnOptimizer { kind: OpKind::Matmul, span: None, .. }]), "{errs:?}");

        // Missing, reordered and wrong-kind attributes (the rule is not called on them).
        let errs = built_errors(&built(OpKind::Sgd, Attrs::default()));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].to_string(), "`backward` with sgd: the attributes do not match its row: expected [lr], found []");
        let errs = built_errors(&built(OpKind::Sgd, Attrs(vec![("lr", Attr::Int(1))])));
        assert_eq!(errs[0].to_string(), "`backward` with sgd: the attributes do not match its row: lr must be a number, found 1");
        let swapped = Attrs(vec![("momentum", Attr::Float(0.9)), ("lr", Attr::Float(0.1))]);
        let errs = built_errors(&built(OpKind::SgdMomentum, swapped));
        assert!(matches!(errs[..], [VerifyError::BackwardAttributes { .. }]), "{errs:?}");

        let errs = built_errors(&built(OpKind::Adam, Attrs::defaults(OpKind::Adam).unwrap().with("lr", Attr::Float(-0.5))));
        assert_eq!(errs, vec![VerifyError::BadOptimizerAttr {
            kind: OpKind::Adam,
            message: "lr=-0.5 must be a finite number >= 0".into(),
            span: None,
        }]);

        // A loss id out of range is reported, not a panic.
        let mut g = built(OpKind::Sgd, Attrs(vec![("lr", Attr::Float(0.1))]));
        if let Some(bw) = &mut g.backward {
            bw.loss = ValueId(99);
        }
        assert_eq!(built_errors(&g), vec![VerifyError::DanglingOutput { value: ValueId(99) }]);
    }
}
