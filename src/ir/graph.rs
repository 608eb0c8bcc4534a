//! The graph of one training step: typed values, ops in program order, updates, returns.
//!
//! Invariants of a *verified* graph (see `verify.rs`): every value is defined exactly
//! once, by an argument or by one output of one op; ops are in a topological order (every
//! input is an argument or an output of an earlier op), so program order is a valid
//! schedule; every op's value types are the ones its op-table rule gives; update targets
//! are `param` or `state` arguments, each updated at most once, by a value of the same type.
//!
//! Spans point into the source text a graph was parsed from. They are not part of a graph's
//! identity: [`Span`]'s equality ignores positions, so `parse(print(g)) == g` compares
//! structure only (as syn's syntax trees do).

use std::fmt;

use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::ops::{Attrs, OpKind};
use crate::ir::types::TensorType;

/// A byte range in the source text, or none for graphs built by code.
#[derive(Clone, Copy, Default)]
pub struct Span(Option<(usize, usize)>);

impl Span {
    pub const NONE: Span = Span(None);

    pub fn new(start: usize, end: usize) -> Span {
        Span(Some((start, end.max(start))))
    }

    /// `(offset, length)` for diagnostics.
    pub fn range(self) -> Option<(usize, usize)> {
        self.0.map(|(s, e)| (s, e - s))
    }

    /// The smallest span covering both (either may be none).
    pub fn to(self, other: Span) -> Span {
        match (self.0, other.0) {
            (Some((a, b)), Some((c, d))) => Span(Some((a.min(c), b.max(d)))),
            (Some(_), None) => self,
            _ => other,
        }
    }
}

impl From<Span> for Option<miette::SourceSpan> {
    fn from(span: Span) -> Self {
        span.range().map(Into::into)
    }
}

impl PartialEq for Span {
    /// Spans never distinguish graphs: see the module docs.
    fn eq(&self, _: &Span) -> bool {
        true
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((s, e)) => write!(f, "{s}..{e}"),
            None => f.write_str("-"),
        }
    }
}

/// The role of a step argument.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Role {
    /// A trained parameter: lives across steps, usually updated in place.
    Param,
    /// Data fed to this step (a batch, labels): dead after its last read.
    Input,
    /// Optimizer state (momentum, Adam moments, step count): lives across steps.
    State,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Param => "param",
            Role::Input => "input",
            Role::State => "state",
        }
    }

    pub fn from_name(name: &str) -> Option<Role> {
        [Role::Param, Role::Input, Role::State].into_iter().find(|r| r.name() == name)
    }

    /// Whether values of this role persist from one step to the next.
    pub fn persists(self) -> bool {
        matches!(self, Role::Param | Role::State)
    }
}

/// Where a value comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ValueDef {
    Arg(Role),
    /// Output number `output` of `op`.
    Op { op: OpId, output: usize },
}

#[derive(Clone, PartialEq, Debug)]
pub struct Value {
    /// The name without its `%`.
    pub name: String,
    pub ty: TensorType,
    pub def: ValueDef,
    pub span: Span,
}

/// A source location from `loc("model.py":14)`, carried into reports.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Loc {
    pub file: String,
    pub line: u32,
    /// The path of the module computing the op (`blocks.3.attn`; `""` for a model's root
    /// module), when the step came from a framework that has modules.
    pub module: Option<String>,
}

impl fmt::Display for Loc {
    /// `file:line`, control characters in the file's name escaped (`\u{1b}`): never raw
    /// on a terminal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", crate::ir::ops::escape_controls(&self.file), self.line)
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct Op {
    pub kind: OpKind,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Every attribute of the op's row, in row order, defaults filled in.
    pub attrs: Attrs,
    pub loc: Option<Loc>,
    /// The user's region the op belongs to (a checkpointed block, its recompute, a custom
    /// autograd Function's forward), if any.
    pub region: Option<Region>,
    pub span: Span,
}

/// An op's part in a region of the user's step whose backward is not the plain derivative
/// of its ops (docs/AUTODIFF.md): PyTorch's `torch.utils.checkpoint`, whose region autodiff
/// recomputes in the backward instead of keeping what its ops' gradients read, and a custom
/// `torch.autograd.Function`, whose backward is the one the user wrote.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Region {
    /// `checkpoint(N)`: the op ran inside checkpointed region N of the forward.
    Checkpoint(u32),
    /// `checkpoint_saved(N)`: the op ran inside checkpointed region N, and the user's
    /// selective checkpoint policy saves its outputs (PyTorch's `MUST_SAVE`/`PREFER_SAVE`):
    /// the backward reads them as the forward computed them, the op is not run again.
    CheckpointSaved(u32),
    /// `recompute(N)`: autodiff's run of a region-N op again in the backward.
    Recompute(u32),
    /// `custom(N)`: the op ran inside the forward of custom region N (the user's
    /// `autograd.Function`), whose gradient is the step's `custom_backward(N)` block.
    Custom(u32),
}

impl Region {
    /// The checkpointed region the op belongs to (`checkpoint(N)`, `checkpoint_saved(N)`).
    pub fn checkpointed(self) -> Option<u32> {
        match self {
            Region::Checkpoint(n) | Region::CheckpointSaved(n) => Some(n),
            Region::Recompute(_) | Region::Custom(_) => None,
        }
    }
}

impl fmt::Display for Region {
    /// The IR spelling: `checkpoint(N)`, `checkpoint_saved(N)`, `recompute(N)` or
    /// `custom(N)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Region::Checkpoint(n) => write!(f, "checkpoint({n})"),
            Region::CheckpointSaved(n) => write!(f, "checkpoint_saved({n})"),
            Region::Recompute(n) => write!(f, "recompute({n})"),
            Region::Custom(n) => write!(f, "custom({n})"),
        }
    }
}

/// `custom_backward(N)(%t: f32[4] = %t, %gy: f32[4] = grad %y) -> (%x) { ... }`: the
/// backward the user wrote for custom region N (a `torch.autograd.Function`), in a step
/// with `backward`. `body` is a graph of its own (its own names; `input` arguments, no
/// updates, no `backward`) that autodiff inlines when the reverse sweep reaches region N:
/// each argument bound to what `binds` says, each returned value added to the gradient of
/// the forward value `grads` names at the same position. What the body reads of the
/// forward is exactly what the step keeps for it (PyTorch's `save_for_backward`).
#[derive(Clone, PartialEq, Debug)]
pub struct CustomBackward {
    pub region: u32,
    /// What each argument of `body` holds, in argument order.
    pub binds: Vec<Bind>,
    /// The forward values whose gradients `body` returns, in return order.
    pub grads: Vec<ValueId>,
    pub body: Graph,
    pub span: Span,
}

/// What an argument of a `custom_backward` body holds when it runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Bind {
    /// `= %v`: the forward value `%v`, kept for the backward.
    Value(ValueId),
    /// `= grad %y`: the gradient of `%y`, an output of the region (zeros when the loss
    /// does not depend on it, as PyTorch materializes it).
    GradOf(ValueId),
}

/// `update %target <- %value`: at the end of the step `%value` is in `%target`'s memory.
#[derive(Clone, PartialEq, Debug)]
pub struct Update {
    pub target: ValueId,
    pub value: ValueId,
    pub span: Span,
}

/// A returned value and where the `return` named it.
#[derive(Clone, PartialEq, Debug)]
pub struct Return {
    pub value: ValueId,
    pub span: Span,
}

/// `backward %loss with adam(lr=0.001)`: the step is written forward-only; autodiff
/// (src/autodiff/) expands it into the full step (gradients, optimizer, updates).
#[derive(Clone, PartialEq, Debug)]
pub struct Backward {
    /// The scalar to minimise.
    pub loss: ValueId,
    /// An optimizer-class op (`sgd`, `sgd_momentum`, `adam`, `adamw`) applied to every
    /// param the loss depends on.
    pub optimizer: OpKind,
    /// The optimizer's attributes, resolved like an op's (row order, defaults filled in).
    pub attrs: Attrs,
    pub span: Span,
}

/// One training step.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Graph {
    /// The step's name without its `@`.
    pub name: String,
    pub values: IndexVec<ValueId, Value>,
    /// Arguments in declaration order.
    pub args: Vec<ValueId>,
    /// Ops in program order.
    pub ops: IndexVec<OpId, Op>,
    pub updates: Vec<Update>,
    pub returns: Vec<Return>,
    /// Present while the step is forward-only; `None` once expanded (or written in full).
    pub backward: Option<Backward>,
    /// The user's backward of each custom region, in text order; present with `backward`
    /// only (autodiff inlines them).
    pub custom_backwards: Vec<CustomBackward>,
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Graph {
        Graph { name: name.into(), ..Graph::default() }
    }

    /// Adds an argument.
    pub fn add_arg(&mut self, name: impl Into<String>, ty: TensorType, role: Role) -> ValueId {
        let id = self.values.push(Value { name: name.into(), ty, def: ValueDef::Arg(role), span: Span::NONE });
        self.args.push(id);
        id
    }

    /// Appends an op whose outputs have the given names and types; returns its id.
    pub fn add_op(
        &mut self,
        kind: OpKind,
        inputs: Vec<ValueId>,
        attrs: Attrs,
        outputs: Vec<(String, TensorType)>,
    ) -> OpId {
        let op = self.ops.next_id();
        let outputs = outputs
            .into_iter()
            .enumerate()
            .map(|(output, (name, ty))| {
                self.values.push(Value { name, ty, def: ValueDef::Op { op, output }, span: Span::NONE })
            })
            .collect();
        self.ops.push(Op { kind, inputs, outputs, attrs, loc: None, region: None, span: Span::NONE })
    }

    /// The same graph with values renumbered in canonical order: the arguments in order,
    /// then every op's outputs in program order. That is the order the parser gives, so a
    /// graph built by code (autodiff appends state arguments after op outputs) compares
    /// equal to its printed and re-parsed form only once renumbered. Assumes every value is
    /// an argument or an op output (a verified graph).
    pub fn canonical_ids(&self) -> Graph {
        self.clone().into_canonical_ids()
    }

    /// [`canonical_ids`](Self::canonical_ids), renumbering this graph in place of a copy
    /// (a copy of every op and value was a tenth of expanding a 1,000,000-op step).
    pub fn into_canonical_ids(mut self) -> Graph {
        let order: Vec<ValueId> =
            self.args.iter().copied().chain(self.ops.iter().flat_map(|op| op.outputs.iter().copied())).collect();
        let mut new_id = IndexVec::from_elem(ValueId(u32::MAX), self.values.len());
        for (i, &v) in order.iter().enumerate() {
            new_id[v] = ValueId::new(i);
        }
        let mut old_values: IndexVec<ValueId, Option<Value>> =
            IndexVec::from_raw(std::mem::take(&mut self.values).into_raw().into_iter().map(Some).collect());
        self.values = order.iter().map(|&v| old_values[v].take().expect("each value once")).collect();
        let map = |v: &mut ValueId| *v = new_id[*v];
        for op in self.ops.iter_mut() {
            op.inputs.iter_mut().for_each(map);
            op.outputs.iter_mut().for_each(map);
        }
        self.args.iter_mut().for_each(map);
        for update in &mut self.updates {
            map(&mut update.target);
            map(&mut update.value);
        }
        self.returns.iter_mut().for_each(|r| map(&mut r.value));
        if let Some(backward) = &mut self.backward {
            map(&mut backward.loss);
        }
        for custom in &mut self.custom_backwards {
            custom.grads.iter_mut().for_each(map);
            for bind in &mut custom.binds {
                match bind {
                    Bind::Value(v) | Bind::GradOf(v) => map(v),
                }
            }
        }
        self
    }

    /// The op that defines `value`, if it is not an argument.
    pub fn def_op(&self, value: ValueId) -> Option<OpId> {
        match self.values[value].def {
            ValueDef::Op { op, .. } => Some(op),
            ValueDef::Arg(_) => None,
        }
    }

    /// The role of `value` if it is an argument.
    pub fn role(&self, value: ValueId) -> Option<Role> {
        match self.values[value].def {
            ValueDef::Arg(role) => Some(role),
            ValueDef::Op { .. } => None,
        }
    }

    /// `%name`, as the IR spells it.
    pub fn value_name(&self, value: ValueId) -> String {
        format!("%{}", self.values[value].name)
    }

    /// The ops that read each value, in program order (an op reading a value twice is listed once).
    pub fn users(&self) -> IndexVec<ValueId, Vec<OpId>> {
        let mut users = IndexVec::from_elem(Vec::new(), self.values.len());
        for (op_id, op) in self.ops.iter_enumerated() {
            for &input in &op.inputs {
                let list: &mut Vec<OpId> = &mut users[input];
                if list.last() != Some(&op_id) {
                    list.push(op_id);
                }
            }
        }
        users
    }

    /// An op's right-hand side as the printer writes it: `matmul(%a, %w, transpose_b=true)`
    /// (operands, then the attributes that differ from the row's defaults, in row order).
    pub fn call_text(&self, op: OpId) -> String {
        let op = &self.ops[op];
        let row = op.kind.def();
        let mut operands: Vec<String> = op.inputs.iter().map(|&v| self.value_name(v)).collect();
        operands.extend(non_default_attrs(op.kind, &op.attrs));
        format!("{}({})", row.name, operands.join(", "))
    }

    /// The `backward` statement as the printer writes it, `backward %loss with
    /// adam(lr=0.01)` (attributes that differ from the row's defaults, in row order), if the
    /// step has one.
    pub fn backward_text(&self) -> Option<String> {
        let bw = self.backward.as_ref()?;
        let loss = self.values.get(bw.loss).map_or_else(|| format!("{}", bw.loss), |v| format!("%{}", v.name));
        let attrs = non_default_attrs(bw.optimizer, &bw.attrs);
        Some(format!("backward {loss} with {}({})", bw.optimizer.name(), attrs.join(", ")))
    }

    /// The op table's FLOPs of one run of `op`.
    pub fn op_flops(&self, op: OpId) -> u64 {
        let op = &self.ops[op];
        let types = |values: &[ValueId]| -> Vec<&TensorType> { values.iter().map(|&v| &self.values[v].ty).collect() };
        (op.kind.def().flops)(&types(&op.inputs), &types(&op.outputs), &op.attrs)
    }

    /// A one-line description of an op for diagnostics: `%h = matmul(%x, %w1)`.
    pub fn describe_op(&self, op: OpId) -> String {
        let outs: Vec<String> = self.ops[op].outputs.iter().map(|&v| self.value_name(v)).collect();
        format!("{} = {}", outs.join(", "), self.call_text(op))
    }
}

/// `name=value` for each attribute of `attrs` that differs from `kind`'s row default.
fn non_default_attrs(kind: OpKind, attrs: &Attrs) -> Vec<String> {
    let row = kind.def();
    let mut out = Vec::new();
    for (name, value) in &attrs.0 {
        let default = row.attrs.iter().find(|spec| spec.name == *name).and_then(|spec| spec.default);
        if default.map(|d| d.to_attr()).as_ref() != Some(value) {
            out.push(format!("{name}={value}"));
        }
    }
    out
}
