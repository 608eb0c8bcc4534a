//! Autodiff: expands a forward-only step (`backward %loss with adam(...)`) into the full
//! training step: gradients, optimizer ops, state arguments and updates, as ordinary IR.
//!
//! [`expand`] runs in four stages (docs/AUTODIFF.md is the user's description):
//! 1. **Needs-grad analysis.** A value needs a gradient when it lies on a path from a float
//!    `param` to the loss through float values (integer and bool values never get one).
//!    Every op on such a path must have a gradient rule (`rules::rule`), and no output it
//!    has that carries no gradient (`attention`'s `lse`), nor an input that takes none
//!    (`bce_with_logits`'s `targets`), may lie on one.
//! 2. **Seed.** `%loss.grad = fill(shape=[], dtype=<loss dtype>, value=1.0)`.
//! 3. **Reverse sweep.** Ops on a path, in reverse program order: each op's rule returns
//!    one contribution per input, and a contribution is added to the value's running sum
//!    as soon as it arrives (`add`, in order of creation: `((c1 + c2) + c3) ...`), as
//!    PyTorch accumulates into one gradient buffer; so a value read by many ops (a weight
//!    shared by every step of a recurrence) holds one gradient, not one per reader, and the
//!    in-place pass can keep the sum in one buffer. The gradient of each output is final
//!    once every later reader has contributed (program order is topological), and is then
//!    handed to the op's rule. The ops of a checkpointed region (`checkpoint(N)`, the
//!    user's `torch.utils.checkpoint`) run again when the sweep reaches the region, and
//!    their rules read those recomputes (`Recomputes`).
//! 4. **Optimizer.** One optimizer op per param, in argument order, after all gradient
//!    ops; new state arguments (`%p.m`, `%p.v`, `%p.momentum`, one `%step`) are appended
//!    after the existing arguments, and every param and state gets its `update`.
//!
//! Names: `%v.grad` is the gradient of `%v`; `%v.grad.1`, `%v.grad.2`, ... its partial
//! contributions when several ops read `%v`; `%v.grad.t1`, ... temporaries; a name already
//! taken gets `_1`, `_2`, ... Locations: the ops a gradient rule builds carry the location
//! of the value whose gradient they compute (the op that made its bytes; `builder.rs`),
//! that of the op differentiated for a param's gradient; the seed, the step count and the
//! optimizer ops carry the `backward` statement's span. The result has `backward: None`;
//! it verifies whenever the input verified.

pub mod builder;
pub mod fuse_loss;
pub(crate) mod rules;
pub mod warnings;
#[cfg(test)]
mod tests;

use indexmap::IndexMap;
use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::graph::{Backward, Bind, Graph, Region, Role, Update, ValueDef};
use crate::ir::verify::{VerifyErrors, verify};
use crate::ir::ops::{Attr, OpKind};
use crate::ir::types::{DType, TensorType};
pub use builder::{Builder, GradCall, GradFn, Grads};
pub use warnings::{StepWarning, warnings};

/// Why a step cannot be expanded.
#[derive(Debug, Error, Diagnostic, PartialEq)]
pub enum AutodiffError {
    /// The step breaks an invariant the verifier checks (for `backward`: the loss is a
    /// float scalar computed by an op, the optimizer is an optimizer with valid attribute
    /// values, no `update` lines). Expansion needs a verified graph.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Invalid(VerifyErrors),

    /// No float param reaches the loss through float values: there is nothing to train.
    #[error("the loss %{name} does not depend on any param")]
    #[diagnostic(help(
        "params are arguments with role `param` and a float dtype; integer and bool values carry no gradient"
    ))]
    NoParams {
        name: String,
        #[label("nothing to differentiate")]
        span: Option<SourceSpan>,
    },

    /// A param reaches the loss through an op that has no gradient rule (a backward or
    /// optimizer op): its gradient cannot be computed.
    #[error("%{param} reaches the loss through `{op_text}`, and {kind} has no gradient rule")]
    #[diagnostic(help("backward and optimizer ops cannot be differentiated; compute the loss from forward ops only"))]
    NoGradientRule {
        param: String,
        kind: OpKind,
        op_text: String,
        #[label("not differentiable")]
        span: Option<SourceSpan>,
    },

    /// A param reaches the loss through an output that carries no gradient (`attention`'s
    /// `lse`, which its backward op reads): the gradient through it cannot be computed.
    #[error("%{param} reaches the loss through %{value}, the `{output}` output of `{op_text}`, which has no gradient")]
    #[diagnostic(help("{kind}'s `{output}` is kept for its backward op; compute the loss from its other outputs"))]
    NoGradientThrough {
        param: String,
        value: String,
        output: &'static str,
        kind: OpKind,
        op_text: String,
        #[label("not differentiable")]
        span: Option<SourceSpan>,
    },

    /// A param reaches the loss through an input that takes no gradient
    /// (`bce_with_logits`'s `targets`): the gradient through it cannot be computed.
    #[error("%{param} reaches the loss through %{value}, the `{input}` input of `{op_text}`, which takes no gradient")]
    #[diagnostic(help("{kind} differentiates its other inputs only; compute its `{input}` from values that need no gradient"))]
    NoGradientInto {
        param: String,
        value: String,
        input: &'static str,
        kind: OpKind,
        op_text: String,
        #[label("not differentiable")]
        span: Option<SourceSpan>,
    },

    /// A gradient rule could not build its ops: a bug in memplan's rules.
    #[error("the gradient rule of `{op_text}` failed: {message} (a memplan bug)")]
    RuleFailed {
        op_text: String,
        message: String,
        #[label("differentiating this op")]
        span: Option<SourceSpan>,
    },
}

/// Choices the expansion leaves to its caller.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ExpandOptions {
    /// Fuse the loss with the output projection where that computes the same loss
    /// ([`fuse_loss`](fuse_loss::fuse_loss)): its logits and their gradient never exist whole.
    pub fuse_loss: bool,
}

impl Default for ExpandOptions {
    fn default() -> Self {
        ExpandOptions { fuse_loss: true }
    }
}

/// Expands `graph`'s `backward` statement into gradients, optimizer ops and updates (see
/// the module docs), with the default [`ExpandOptions`]. A graph without `backward` is
/// returned unchanged. `graph` should have passed [`verify`].
pub fn expand(graph: &Graph) -> Result<Graph, AutodiffError> {
    expand_with(graph, ExpandOptions::default())
}

/// [`expand`] with the caller's options.
pub fn expand_with(graph: &Graph, options: ExpandOptions) -> Result<Graph, AutodiffError> {
    if graph.backward.is_none() {
        return Ok(graph.clone());
    }
    verify(graph).map_err(AutodiffError::Invalid)?;
    let fused = if options.fuse_loss { fuse_loss::fuse_loss(graph) } else { None };
    let graph = fused.as_ref().unwrap_or(graph);
    let backward = graph.backward.as_ref().expect("a fused step keeps its backward statement");
    let needs = analyse(graph, backward)?;
    let mut forward = graph.clone();
    forward.backward = None;
    forward.custom_backwards.clear();
    let mut b = Builder::new(forward);
    let grads = sweep(&mut b, graph, backward, &needs)?;
    optimize(&mut b, backward, &grads)?;
    Ok(drop_unread_recomputes(b.into_graph()).into_canonical_ids())
}

/// Which values need a gradient, and how many contributions each will receive.
struct Needs {
    needs: IndexVec<ValueId, bool>,
    /// Params needing a gradient, in argument order.
    params: Vec<ValueId>,
    /// Contributions per value: the input slots of ops on a path that read it.
    count: IndexVec<ValueId, u32>,
}

impl Needs {
    /// Whether `op` lies on a path from a param to the loss.
    fn active(&self, graph: &Graph, op: OpId) -> bool {
        graph.ops[op].outputs.iter().any(|&v| self.needs[v])
    }
}

fn analyse(graph: &Graph, backward: &Backward) -> Result<Needs, AutodiffError> {
    let float = |v: ValueId| graph.values[v].ty.dtype.is_float();
    // A float param each value depends on through float values (the first found).
    let mut origin: IndexVec<ValueId, Option<ValueId>> = graph
        .values
        .iter_enumerated()
        .map(|(id, v)| (v.def == ValueDef::Arg(Role::Param) && float(id)).then_some(id))
        .collect();
    for op in &graph.ops {
        // Through `detach` (a row that stops the gradient) nothing depends on a param; in a
        // custom region the user's backward says what the gradient is, whatever its ops.
        let custom = matches!(op.region, Some(Region::Custom(_)));
        let stops = op.kind.def().stops_gradient && !custom;
        let from = if stops { None } else { op.inputs.iter().find_map(|&i| origin[i]) };
        for &out in op.outputs.iter().filter(|&&out| float(out)) {
            origin[out] = from;
        }
    }
    let to_loss = reaches_loss(graph, backward.loss, true);
    let custom = |op: &crate::ir::graph::Op| matches!(op.region, Some(Region::Custom(_)));
    let needs: IndexVec<ValueId, bool> = graph.values.indices().map(|v| origin[v].is_some() && to_loss[v]).collect();
    let params: Vec<ValueId> = graph.args.iter().copied().filter(|&a| needs[a] && origin[a] == Some(a)).collect();
    if params.is_empty() {
        let name = graph.values[backward.loss].name.clone();
        return Err(AutodiffError::NoParams { name, span: backward.span.into() });
    }
    let param_of = |v: ValueId| origin[v].expect("a value needing a gradient has a param");
    let mut count = IndexVec::from_elem(0u32, graph.values.len());
    for c in &graph.custom_backwards {
        // The user's backward gives one contribution to each value it returns a gradient of.
        for &x in c.grads.iter().filter(|&&x| needs[x]) {
            count[x] += 1;
        }
    }
    for (id, op) in graph.ops.iter_enumerated() {
        if custom(op) || !op.outputs.iter().any(|&v| needs[v]) {
            continue;
        }
        if rules::rule(op.kind).is_none() {
            let param = op
                .inputs
                .iter()
                .find(|&&i| needs[i])
                .and_then(|&i| origin[i])
                .expect("an active op reads a param path");
            return Err(AutodiffError::NoGradientRule {
                param: graph.values[param].name.clone(),
                kind: op.kind,
                op_text: graph.describe_op(id),
                span: op.span.into(),
            });
        }
        let output = op.kind.def().outputs_without_gradient.iter().copied().find(|&k| needs[op.outputs[k]]);
        if let Some(k) = output {
            let value = op.outputs[k];
            return Err(AutodiffError::NoGradientThrough {
                param: graph.values[param_of(value)].name.clone(),
                value: graph.values[value].name.clone(),
                output: op.kind.def().outputs[k],
                kind: op.kind,
                op_text: graph.describe_op(id),
                span: op.span.into(),
            });
        }
        let input = op.kind.def().inputs_without_gradient.iter().copied().find(|&k| needs[op.inputs[k]]);
        if let Some(k) = input {
            let value = op.inputs[k];
            return Err(AutodiffError::NoGradientInto {
                param: graph.values[param_of(value)].name.clone(),
                value: graph.values[value].name.clone(),
                input: op.kind.def().input_name(k),
                kind: op.kind,
                op_text: graph.describe_op(id),
                span: op.span.into(),
            });
        }
        for &input in op.inputs.iter().filter(|&&i| needs[i]) {
            count[input] += 1;
        }
    }
    Ok(Needs { needs, params, count })
}

/// Which values the loss depends on through float values (integer and bool values carry no
/// gradient): a float param outside this set gets no gradient. With `gradients`, only
/// through ops a gradient flows back through (not `detach`); without, every dependence (the
/// warnings' question: does the loss read this param at all?).
fn reaches_loss(graph: &Graph, loss: ValueId, gradients: bool) -> IndexVec<ValueId, bool> {
    let float = |v: ValueId| graph.values[v].ty.dtype.is_float();
    let mut to_loss = IndexVec::from_elem(false, graph.values.len());
    to_loss[loss] = true;
    // A custom region's gradient is its block's: it flows to the values the block returns
    // gradients of when any value the region computes reaches the loss (its ops are
    // contiguous, so every reader outside it has been seen when the sweep reaches its first
    // op).
    let mut region_reaches: IndexMap<u32, bool> = IndexMap::new();
    for (id, op) in graph.ops.iter_enumerated().rev() {
        let reaches = op.outputs.iter().any(|&v| to_loss[v]);
        if let (true, Some(Region::Custom(n))) = (gradients, op.region) {
            let any = region_reaches.entry(n).or_default();
            *any |= reaches;
            let first = id.index() == 0 || graph.ops[OpId::new(id.index() - 1)].region != op.region;
            if first && *any {
                let grads = graph.custom_backwards.iter().filter(|c| c.region == n).flat_map(|c| c.grads.iter());
                for &x in grads.filter(|&&x| float(x)) {
                    to_loss[x] = true;
                }
            }
            continue;
        }
        if gradients && op.kind.def().stops_gradient {
            continue;
        }
        if reaches {
            for &input in op.inputs.iter().filter(|&&i| float(i)) {
                to_loss[input] = true;
            }
        }
    }
    to_loss
}

/// The gradient of each param, in argument order.
struct ParamGrads(Vec<(ValueId, ValueId)>);

/// Stages 2 and 3: the seed and the reverse sweep.
fn sweep(b: &mut Builder, graph: &Graph, backward: &Backward, needs: &Needs) -> Result<ParamGrads, AutodiffError> {
    let n = graph.values.len();
    // Each value's running sum of the contributions received so far.
    let mut sums = IndexVec::from_elem(Sum::default(), n);
    let mut checkpoints = Recomputes::new(graph);
    let loss = backward.loss;
    b.set_origin(None, backward.span);
    let seed_name = b.fresh(&format!("{}.grad", graph.values[loss].name));
    let dtype = graph.values[loss].ty.dtype;
    let attrs = Builder::attrs(
        OpKind::Fill,
        &[("shape", Attr::Ints(vec![])), ("dtype", Attr::DType(dtype)), ("value", Attr::Float(1.0))],
    )
    .expect("fill's attributes");
    let seed = b.emit(OpKind::Fill, vec![], attrs, vec![seed_name]).expect("a scalar fill")[0];
    sums[loss] = Sum { value: Some(seed), received: 1 };
    let mut acc = Accumulator { sums, renamed: crate::hashing::FastSet::default() };
    for (op_id, op) in graph.ops.iter_enumerated().rev() {
        if let Some(Region::Custom(n)) = op.region {
            let last = graph.ops.get(OpId::new(op_id.index() + 1)).is_none_or(|next| next.region != op.region);
            if last {
                custom_backward(b, graph, needs, &mut acc, op_id, n)?;
            }
            continue;
        }
        if !needs.active(graph, op_id) {
            continue;
        }
        let failed = |message: String| AutodiffError::RuleFailed {
            op_text: graph.describe_op(op_id),
            message,
            span: op.span.into(),
        };
        let region = op.region.and_then(Region::checkpointed);
        if let Some(region) = region {
            checkpoints.recompute(b, graph, region).map_err(&failed)?;
        }
        b.set_rule_origin(op.loc.clone(), op.span);
        let dy = op
            .outputs
            .iter()
            .map(|&v| if needs.needs[v] { total(b, v, &acc.sums[v]).map(Some) } else { Ok(None) })
            .collect::<Result<Vec<_>, _>>()
            .map_err(&failed)?;
        let call = GradCall {
            kind: op.kind,
            inputs: op.inputs.iter().map(|&v| checkpoints.read(graph, region, v)).collect(),
            outputs: op.outputs.iter().map(|&v| checkpoints.read(graph, region, v)).collect(),
            attrs: op.attrs.clone(),
            wants: op.inputs.iter().map(|&i| needs.needs[i]).collect(),
            dy,
        };
        let first_new = b.graph().values.len();
        let rule = rules::rule(op.kind).expect("analyse checked every active op has a rule");
        let grads = rule(b, &call).map_err(&failed)?;
        if grads.len() != op.inputs.len() {
            return Err(failed(format!("it gave {} gradients for {} inputs", grads.len(), op.inputs.len())));
        }
        for (k, (&x, g)) in op.inputs.iter().zip(grads).enumerate() {
            if !call.wants(k) {
                continue;
            }
            let g = g.ok_or_else(|| failed(format!("it gave no gradient for %{}", graph.values[x].name)))?;
            acc.add(b, graph, needs, x, g, first_new).map_err(&failed)?;
        }
    }
    b.set_origin(None, backward.span);
    let mut grads = Vec::with_capacity(needs.params.len());
    for &p in &needs.params {
        let g = total(b, p, &acc.sums[p]).map_err(|message| AutodiffError::RuleFailed {
            op_text: format!("the sum of the gradients of %{}", graph.values[p].name),
            message,
            span: backward.span.into(),
        })?;
        grads.push((p, g));
    }
    Ok(ParamGrads(grads))
}

/// Each value's running sum of the gradient contributions it has received (see the module
/// docs), and the contributions already given their final names.
struct Accumulator {
    sums: IndexVec<ValueId, Sum>,
    renamed: crate::hashing::FastSet<ValueId>,
}

impl Accumulator {
    /// Adds the contribution `g` to the gradient of `x`. A value built since `first_new`
    /// (not one the forward or an earlier contribution already had) is named after `x`:
    /// `%x.grad`, or `%x.grad.K` when `x` receives several.
    fn add(&mut self, b: &mut Builder, graph: &Graph, needs: &Needs, x: ValueId, g: ValueId, first_new: usize) -> Result<(), String> {
        let x_name = &graph.values[x].name;
        if b.ty(g) != &graph.values[x].ty {
            return Err(format!("the gradient of %{x_name} is {}, not {}", b.ty(g), graph.values[x].ty));
        }
        let received = self.sums[x].received + 1;
        if g.index() >= first_new && self.renamed.insert(g) {
            let base = if needs.count[x] == 1 { format!("{x_name}.grad") } else { format!("{x_name}.grad.{received}") };
            b.rename(g, &base);
        }
        let value = match self.sums[x].value {
            None => g,
            Some(sum) => {
                let sum = b.op1(x, OpKind::Add, vec![sum, g], &[])?;
                if received == needs.count[x] {
                    b.rename(sum, &format!("{x_name}.grad"));
                }
                sum
            }
        };
        self.sums[x] = Sum { value: Some(value), received };
        Ok(())
    }
}

/// Custom region `region` (the user's `autograd.Function`), whose last op is `last`: when
/// any value it computes needs a gradient, its `custom_backward` block's body is inlined
/// here, each argument bound to the forward value it names or to the gradient of the
/// region output it names (zeros where that output does not reach the loss, as PyTorch
/// materializes it), and each returned value is a contribution to the gradient of the value
/// the block lists at its position.
fn custom_backward(
    b: &mut Builder,
    graph: &Graph,
    needs: &Needs,
    acc: &mut Accumulator,
    last: OpId,
    region: u32,
) -> Result<(), AutodiffError> {
    let mut first = last.index();
    while first > 0 && graph.ops[OpId::new(first - 1)].region == Some(Region::Custom(region)) {
        first -= 1;
    }
    let active = (first..=last.index()).any(|i| needs.active(graph, OpId::new(i)));
    let Some(custom) = graph.custom_backwards.iter().find(|c| c.region == region) else {
        return Ok(()); // verify: a step with `backward` has a block for every custom region
    };
    if !active {
        return Ok(());
    }
    let failed = |message: String| AutodiffError::RuleFailed {
        op_text: format!("custom_backward({region})"),
        message,
        span: custom.span.into(),
    };
    let body = &custom.body;
    let first_new = b.graph().values.len();
    let mut env: IndexVec<ValueId, Option<ValueId>> = IndexVec::from_elem(None, body.values.len());
    for (&arg, bind) in body.args.iter().zip(&custom.binds) {
        env[arg] = Some(match *bind {
            Bind::Value(v) => v,
            Bind::GradOf(y) if needs.needs[y] => total(b, y, &acc.sums[y]).map_err(&failed)?,
            Bind::GradOf(y) => {
                b.set_origin(graph.ops[last].loc.clone(), custom.span);
                let ty = &graph.values[y].ty;
                let dims = ty.shape.0.iter().map(|&d| i64::try_from(d).map_err(|_| format!("dimension {d} of %{}", graph.values[y].name)));
                let dims = dims.collect::<Result<Vec<i64>, String>>().map_err(&failed)?;
                let attrs = Builder::attrs(
                    OpKind::Fill,
                    &[("shape", Attr::Ints(dims)), ("dtype", Attr::DType(ty.dtype)), ("value", Attr::Float(0.0))],
                )
                .map_err(&failed)?;
                let name = b.fresh(&format!("{}.grad.zeros", graph.values[y].name));
                b.emit(OpKind::Fill, vec![], attrs, vec![name]).map_err(&failed)?[0]
            }
        });
    }
    for op in &body.ops {
        b.set_origin(op.loc.clone(), op.span);
        let mut inputs: Vec<ValueId> =
            op.inputs.iter().map(|&v| env[v].ok_or_else(|| failed(format!("{} is not bound", body.value_name(v))))).collect::<Result<_, _>>()?;
        if op.kind == OpKind::Reshape {
            // A view of the body's own (contiguous) argument; the forward value bound to it
            // may be strided (a transpose): copy first where the reshape is no view of it.
            let to = body.values[op.outputs[0]].ty.shape.0.clone();
            inputs[0] = b.reshapable(inputs[0], inputs[0], &to).map_err(&failed)?;
        }
        let names = op.outputs.iter().map(|&v| b.fresh(&body.values[v].name)).collect();
        let outputs = b.emit(op.kind, inputs, op.attrs.clone(), names).map_err(&failed)?;
        for (&v, out) in op.outputs.iter().zip(outputs) {
            env[v] = Some(out);
        }
    }
    for (&x, ret) in custom.grads.iter().zip(&body.returns) {
        if !needs.needs[x] {
            continue;
        }
        let g = env[ret.value].ok_or_else(|| failed(format!("{} is not computed", body.value_name(ret.value))))?;
        acc.add(b, graph, needs, x, g, first_new).map_err(&failed)?;
    }
    Ok(())
}

/// The user's checkpointed regions (`checkpoint(N)` ops, PyTorch's
/// `torch.utils.checkpoint`) and their recomputation. When the sweep reaches a region's
/// last op, every op of the region runs again (`recompute(N)` clones, in forward order,
/// reading the region's inputs as they were kept), as PyTorch's checkpoint re-runs its
/// function when the backward first needs a value it saved; the gradient rules of the
/// region's ops then read the clones, so nothing computed inside a region is kept for the
/// backward but what ops outside it read. Clones no rule reads are dropped at the end.
struct Recomputes {
    /// The ops of each region, in forward order.
    regions: IndexMap<u32, Vec<OpId>>,
    /// Each value's clone, once its region is recomputed.
    clone: IndexVec<ValueId, Option<ValueId>>,
}

impl Recomputes {
    fn new(graph: &Graph) -> Recomputes {
        let mut regions: IndexMap<u32, Vec<OpId>> = IndexMap::new();
        for (id, op) in graph.ops.iter_enumerated() {
            if let Some(region) = op.region.and_then(Region::checkpointed) {
                regions.entry(region).or_default().push(id);
            }
        }
        Recomputes { regions, clone: IndexVec::from_elem(None, graph.values.len()) }
    }

    /// Runs `region`'s ops again, once; not those whose outputs the user's selective
    /// policy saves (`checkpoint_saved(N)`), which are read as the forward computed them.
    fn recompute(&mut self, b: &mut Builder, graph: &Graph, region: u32) -> Result<(), String> {
        let Some(ops) = self.regions.swap_remove(&region) else { return Ok(()) };
        for id in ops {
            let op = &graph.ops[id];
            if op.region == Some(Region::CheckpointSaved(region)) {
                continue;
            }
            let inputs = op.inputs.iter().map(|&v| self.read(graph, Some(region), v)).collect();
            let names = op.outputs.iter().map(|&v| b.fresh(&format!("{}.recompute", graph.values[v].name))).collect();
            b.set_origin(op.loc.clone(), op.span);
            let outputs = b.emit(op.kind, inputs, op.attrs.clone(), names)?;
            b.mark_recompute(outputs[0], region);
            for (&v, c) in op.outputs.iter().zip(outputs) {
                self.clone[v] = Some(c);
            }
        }
        Ok(())
    }

    /// What a gradient rule of an op in `region` reads for `v`: the clone of a value
    /// computed in the same region, else `v` itself (kept from the forward).
    fn read(&self, graph: &Graph, region: Option<u32>, v: ValueId) -> ValueId {
        let same = region.is_some()
            && graph.def_op(v).is_some_and(|op| graph.ops[op].region.and_then(Region::checkpointed) == region);
        if same { self.clone[v].unwrap_or(v) } else { v }
    }
}

/// `graph` without the `recompute` clones whose outputs nothing reads (a region op whose
/// gradient rule reads none of its values, or one the backward never needed).
fn drop_unread_recomputes(mut graph: Graph) -> Graph {
    let mut readers = IndexVec::from_elem(0u32, graph.values.len());
    for op in &graph.ops {
        op.inputs.iter().for_each(|&v| readers[v] += 1);
    }
    graph.updates.iter().for_each(|u| readers[u.value] += 1);
    graph.returns.iter().for_each(|r| readers[r.value] += 1);
    let mut keep = vec![true; graph.ops.len()];
    for (id, op) in graph.ops.iter_enumerated().rev() {
        if matches!(op.region, Some(Region::Recompute(_))) && op.outputs.iter().all(|&v| readers[v] == 0) {
            keep[id.index()] = false;
            op.inputs.iter().for_each(|&v| readers[v] -= 1);
        }
    }
    if keep.iter().all(|&k| k) {
        return graph;
    }
    let ops = std::mem::take(&mut graph.ops);
    for (op, _) in ops.into_raw().into_iter().zip(&keep).filter(|(_, k)| **k) {
        let id = graph.ops.push(op);
        for (output, &v) in graph.ops[id].outputs.iter().enumerate() {
            graph.values[v].def = ValueDef::Op { op: id, output };
        }
    }
    graph
}

/// The contributions a value has received, summed as they arrived.
#[derive(Clone, Copy, Default)]
struct Sum {
    /// The single contribution, or the sum of all so far; `None` before the first.
    value: Option<ValueId>,
    /// How many contributions it holds.
    received: u32,
}

/// The gradient of `v`: the sum of all its contributions (the sweep added each as it
/// arrived), an error if it received none.
fn total(b: &Builder, v: ValueId, sum: &Sum) -> Result<ValueId, String> {
    sum.value.ok_or_else(|| format!("%{} received no gradient", b.name(v)))
}

/// Stage 4: state arguments, the step count, one optimizer op per param, the updates.
fn optimize(b: &mut Builder, backward: &Backward, grads: &ParamGrads) -> Result<(), AutodiffError> {
    let kind = backward.optimizer;
    let span = backward.span;
    // The statement verified, so building its ops cannot fail but through a memplan bug.
    let failed = |message: String| AutodiffError::RuleFailed {
        op_text: format!("backward with {kind}"),
        message,
        span: span.into(),
    };
    b.set_origin(None, span);
    // State arguments: (suffix) per param, in the optimizer's input order after p and g.
    let suffixes = kind.def().state;
    let mut state: Vec<Vec<ValueId>> = Vec::new();
    for &(p, _) in &grads.0 {
        let ty = b.ty(p).clone();
        let p_name = b.name(p).to_string();
        state.push(suffixes.iter().map(|s| b.add_arg(&format!("{p_name}.{s}"), ty.clone(), Role::State)).collect());
    }
    let mut updates = Vec::new();
    let step = if kind.def().step_count {
        let step = b.add_arg("step", TensorType::new(DType::F32, vec![]), Role::State);
        let new_name = b.fresh(&format!("{}.new", b.name(step)));
        let attrs = Builder::attrs(OpKind::AddScalar, &[("value", Attr::Float(1.0))]).map_err(&failed)?;
        let step_new = b.emit(OpKind::AddScalar, vec![step], attrs, vec![new_name]).map_err(&failed)?[0];
        Some((step, step_new))
    } else {
        None
    };
    for (&(p, g), state) in grads.0.iter().zip(&state) {
        let mut inputs = vec![p, g];
        inputs.extend(state);
        inputs.extend(step.map(|(_, new)| new));
        let targets: Vec<ValueId> = std::iter::once(p).chain(state.iter().copied()).collect();
        let names = targets.iter().map(|&t| b.fresh(&format!("{}.new", b.name(t)))).collect();
        let outputs = b.emit(kind, inputs, backward.attrs.clone(), names).map_err(&failed)?;
        updates.extend(targets.into_iter().zip(outputs));
    }
    updates.extend(step);
    for (target, value) in updates {
        b.push_update(Update { target, value, span });
    }
    Ok(())
}
