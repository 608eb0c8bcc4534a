//! The small API gradient rules build with: emit an op whose output types come from its
//! row's type rule, under fresh unique names, plus the two helpers most rules need
//! ([`Builder::reshapable`] and [`Builder::unbroadcast`]).
//!
//! A gradient rule ([`GradFn`], one per forward row of the op table) sees the forward op
//! as a [`GradCall`] (its inputs, outputs, attributes, the gradients of its outputs and
//! which inputs want a gradient) and returns one `Option<ValueId>` per input: the
//! contribution of this op to d loss / d input. It may return an existing value (`add`'s
//! gradient is `dy` itself) or a value it built.
//!
//! Naming: every value a rule builds is a temporary of the forward value whose gradient it
//! helps compute, its *owner*: `%x.grad.t1`, `%x.grad.t2`, ... The expansion then renames
//! the value a rule returns to its final name (`%x.grad`, or `%x.grad.1`, `%x.grad.2` for
//! partial contributions). [`Builder::fresh`] keeps every name unique: a name already taken
//! gets a suffix `_1`, `_2`, ...
//!
//! Attribution: while gradient rules run ([`Builder::set_rule_origin`]), an op carries the
//! location (`loc` and span) of the forward value whose gradient it helps compute, its
//! owner: the location of the op that made the owner's bytes (for a view, the op that made
//! its base, following views back). So a gradient is reported where the value it is the
//! gradient of is: the logits' gradient at the logits' line and module (`lm_head`), not at
//! the loss line whose backward happens to compute it. An owner that is an argument (a
//! param's gradient) or owners made by different ops with different locations (a
//! multi-output backward op: `attention`'s dq, dk, dv of three projections) leave the op
//! the location of the forward op being differentiated, as every other op the builder
//! emits has ([`Builder::set_origin`]).
//!
//! Invariant: every op the builder emits has attributes exactly its row's (row order,
//! right kinds) and output types its row's rule gives, so the result verifies as long as
//! the rules pass well-typed inputs; a rule that does not is caught here as an `Err`
//! (a memplan bug reported as [`AutodiffError::RuleFailed`](super::AutodiffError)).

use crate::hashing::{FastMap, FastSet};
use crate::index::{OpId, ValueId};
use crate::ir::graph::{Region, Graph, Loc, Role, Span, Update};
use crate::ir::layout::reshape_is_view;
use crate::ir::ops::{Attr, Attrs, OpKind};
use crate::ir::types::TensorType;

/// What a gradient rule sees of one forward op (copied out of the graph, so the rule may
/// build while it reads).
#[derive(Clone, Debug)]
pub struct GradCall {
    pub kind: OpKind,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub attrs: Attrs,
    /// d loss / d output k; `None` where output k does not reach the loss.
    pub dy: Vec<Option<ValueId>>,
    /// Whether input k needs a gradient (it lies on a path from a param to the loss).
    pub wants: Vec<bool>,
}

impl GradCall {
    /// The gradient of output 0 (the one output every rule differentiates: `attention`'s
    /// second output, `lse`, takes no gradient), which the expansion provides whenever it
    /// calls a rule.
    pub fn dy(&self) -> Result<ValueId, String> {
        self.dy
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| format!("{} was called without the gradient of its output", self.kind))
    }

    pub fn wants(&self, k: usize) -> bool {
        self.wants.get(k).copied().unwrap_or(false)
    }
}

/// One gradient contribution per input of the forward op (`None` where not wanted or
/// where the input has no gradient, such as index inputs).
pub type Grads = Vec<Option<ValueId>>;

/// A gradient rule, as `rules::rule` gives it for an op kind. See the module docs.
pub type GradFn = fn(&mut Builder, &GradCall) -> Result<Grads, String>;

/// Builds the expanded step: the forward graph plus the ops gradient rules and the
/// optimizer section emit.
pub struct Builder {
    graph: Graph,
    /// Every name in use.
    names: FastSet<String>,
    /// The last temporary number used per owner.
    temps: FastMap<ValueId, u32>,
    /// Stamped on every new op: the forward op a gradient op comes from (its `loc` for
    /// reports, its span for diagnostics), or the `backward` statement's span.
    loc: Option<Loc>,
    span: Span,
    /// Whether ops built with owners take their owners' location instead (see the module
    /// docs): while gradient rules run.
    by_owner: bool,
}

impl Builder {
    pub fn new(graph: Graph) -> Builder {
        let names = graph.values.iter().map(|v| v.name.clone()).collect();
        Builder { graph, names, temps: FastMap::default(), loc: None, span: Span::NONE, by_owner: false }
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn into_graph(self) -> Graph {
        self.graph
    }

    /// The type of `v`.
    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.graph.values[v].ty
    }

    /// The name of `v`, without `%`.
    pub fn name(&self, v: ValueId) -> &str {
        &self.graph.values[v].name
    }

    /// Sets the `loc` and span stamped on the ops emitted from now on.
    pub fn set_origin(&mut self, loc: Option<Loc>, span: Span) {
        self.loc = loc;
        self.span = span;
        self.by_owner = false;
    }

    /// As [`set_origin`](Self::set_origin), for the ops of a gradient rule: each op built
    /// with owners takes their location (see the module docs), `loc` and `span` where they
    /// have none.
    pub fn set_rule_origin(&mut self, loc: Option<Loc>, span: Span) {
        self.set_origin(loc, span);
        self.by_owner = true;
    }

    /// The op that made the bytes of `v`: the op writing it, or for a view the one writing
    /// its base (views followed back); `None` for an argument or a view of one.
    fn maker(&self, mut v: ValueId) -> Option<OpId> {
        loop {
            let op = self.graph.def_op(v)?;
            match self.graph.ops[op].kind.def().view_of() {
                Some(k) => v = self.graph.ops[op].inputs[k],
                None => return Some(op),
            }
        }
    }

    /// The `loc` and span of an op whose outputs are temporaries of `owners`: the op that
    /// made them, when one did (or ops at one `loc`) and the builder attributes by owner;
    /// else the origin's.
    fn stamp(&self, owners: &[ValueId]) -> (Option<Loc>, Span) {
        let makers: Option<Vec<OpId>> = if self.by_owner { owners.iter().map(|&o| self.maker(o)).collect() } else { None };
        if let Some(&first) = makers.as_ref().and_then(|m| m.first()) {
            let made = &self.graph.ops[first];
            let one = makers.iter().flatten().all(|&m| m == first || (made.loc.is_some() && self.graph.ops[m].loc == made.loc));
            if one {
                return (made.loc.clone(), made.span);
            }
        }
        (self.loc.clone(), self.span)
    }

    /// Reserves and returns `base`, or `base_1`, `base_2`, ... if taken.
    pub fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 0u64;
        while self.names.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        self.names.insert(name.clone());
        name
    }

    /// Gives `v` the name `base` (or a suffixed one if taken), freeing its old name.
    pub fn rename(&mut self, v: ValueId, base: &str) {
        let old = std::mem::take(&mut self.graph.values[v].name);
        self.names.remove(&old);
        self.graph.values[v].name = self.fresh(base);
    }

    /// The next temporary name of `owner`'s gradient: `%owner.grad.tN`.
    pub fn temp_name(&mut self, owner: ValueId) -> String {
        let n = self.temps.entry(owner).or_insert(0);
        *n += 1;
        let base = format!("{}.grad.t{n}", self.graph.values[owner].name);
        self.fresh(&base)
    }

    /// Appends an argument named `base` (made unique), with the current origin's span (for
    /// optimizer state: the `backward` statement, which reports show as its source line).
    pub fn add_arg(&mut self, base: &str, ty: TensorType, role: Role) -> ValueId {
        let name = self.fresh(base);
        let id = self.graph.add_arg(name, ty, role);
        self.graph.values[id].span = self.span;
        id
    }

    /// Appends an `update` line.
    pub fn push_update(&mut self, update: Update) {
        self.graph.updates.push(update);
    }

    /// `kind`'s attributes: the `given` ones, the row's defaults for the rest.
    pub fn attrs(kind: OpKind, given: &[(&'static str, Attr)]) -> Result<Attrs, String> {
        Attrs::for_op(kind, given)
    }

    /// Appends `kind(inputs, attrs)` with outputs named `names` (taken as they are: callers
    /// reserve them with [`fresh`](Self::fresh)); output types come from the row's rule.
    pub fn emit(
        &mut self,
        kind: OpKind,
        inputs: Vec<ValueId>,
        attrs: Attrs,
        names: Vec<String>,
    ) -> Result<Vec<ValueId>, String> {
        let (loc, span) = (self.loc.clone(), self.span);
        self.emit_at(kind, inputs, attrs, names, loc, span)
    }

    /// As [`emit`](Self::emit), the op stamped with `loc` and `span`.
    fn emit_at(
        &mut self,
        kind: OpKind,
        inputs: Vec<ValueId>,
        attrs: Attrs,
        names: Vec<String>,
        loc: Option<Loc>,
        span: Span,
    ) -> Result<Vec<ValueId>, String> {
        let row = kind.def();
        if !row.takes_inputs(inputs.len()) || names.len() != row.outputs.len() {
            return Err(format!("{kind} takes {} inputs and gives {} outputs", row.inputs.len(), row.outputs.len()));
        }
        let same_attrs = attrs.0.len() == row.attrs.len()
            && attrs
                .0
                .iter()
                .zip(row.attrs)
                .all(|((name, value), spec)| *name == spec.name && value.kind() == spec.kind);
        if !same_attrs {
            return Err(format!("{kind}: attributes {:?} do not match its row", attrs.0));
        }
        let types: Vec<&TensorType> = inputs.iter().map(|&v| &self.graph.values[v].ty).collect();
        let outputs = (row.infer)(&types, &attrs).map_err(|e| format!("{kind}: {e}"))?;
        let op = self.graph.add_op(kind, inputs, attrs, names.into_iter().zip(outputs).collect());
        let op = &mut self.graph.ops[op];
        op.loc = loc;
        op.span = span;
        Ok(op.outputs.clone())
    }

    /// Marks the op writing `output` as a recompute of a region-`region` op.
    pub fn mark_recompute(&mut self, output: ValueId, region: u32) {
        let op = self.graph.def_op(output).expect("an op's output");
        self.graph.ops[op].region = Some(Region::Recompute(region));
    }

    /// Appends `kind(inputs, given attributes)`; output k is a temporary of `owners[k]`.
    pub fn op(
        &mut self,
        owners: &[ValueId],
        kind: OpKind,
        inputs: Vec<ValueId>,
        given: &[(&'static str, Attr)],
    ) -> Result<Vec<ValueId>, String> {
        let attrs = Self::attrs(kind, given)?;
        self.op_attrs(owners, kind, inputs, attrs)
    }

    /// As [`op`](Self::op) with the attributes given in full (copied from the forward op
    /// when the rows share them, as `softmax` and `softmax_backward` do).
    pub fn op_attrs(
        &mut self,
        owners: &[ValueId],
        kind: OpKind,
        inputs: Vec<ValueId>,
        attrs: Attrs,
    ) -> Result<Vec<ValueId>, String> {
        let names = owners.iter().map(|&owner| self.temp_name(owner)).collect();
        let (loc, span) = self.stamp(owners);
        self.emit_at(kind, inputs, attrs, names, loc, span)
    }

    /// A one-output op whose output is a temporary of `owner`.
    pub fn op1(
        &mut self,
        owner: ValueId,
        kind: OpKind,
        inputs: Vec<ValueId>,
        given: &[(&'static str, Attr)],
    ) -> Result<ValueId, String> {
        Ok(self.op(&[owner], kind, inputs, given)?[0])
    }

    /// `v` itself if `reshape(v, shape=to)` is a view of it (the verifier's rule,
    /// `ir::layout`), else `contiguous(v)` (a temporary of `owner`) to reshape instead.
    pub fn reshapable(&mut self, owner: ValueId, v: ValueId, to: &[u64]) -> Result<ValueId, String> {
        if reshape_is_view(&self.graph, v, to) { Ok(v) } else { self.op1(owner, OpKind::Contiguous, vec![v], &[]) }
    }

    /// Reduces a gradient `g` of a broadcast result back to an operand of type `to`: sums
    /// over the dimensions broadcasting added (leading ones) or stretched (size 1 in `to`).
    ///
    /// Soundness: if `out = f(broadcast(x))`, each element of `x` was read by every element
    /// of its broadcast copies, so its gradient is the sum of theirs. The result is `g`
    /// itself where nothing was broadcast; `sum(g, leading axes)` where only leading
    /// dimensions were added (its shape is `to` already); otherwise
    /// `sum(g, axes, keepdim=true)` then `reshape` to `to` when leading dimensions remain.
    pub fn unbroadcast(&mut self, owner: ValueId, g: ValueId, to: &TensorType) -> Result<ValueId, String> {
        let from = self.ty(g).clone();
        if from.shape == to.shape {
            return Ok(g);
        }
        let Some(lead) = from.rank().checked_sub(to.rank()) else {
            return Err(format!("cannot unbroadcast {from} to {to}: the target has more dimensions"));
        };
        let mut axes: Vec<i64> = (0..lead as i64).collect();
        for (i, &d) in to.dims().iter().enumerate() {
            let f = from.dims()[lead + i];
            if d == f {
                continue;
            }
            if d != 1 {
                return Err(format!("cannot unbroadcast {from} to {to}: dimension {i} is {f}, not {d} or 1"));
            }
            axes.push((lead + i) as i64);
        }
        let only_leading = axes.len() == lead;
        let summed = self.op1(
            owner,
            OpKind::Sum,
            vec![g],
            &[("axes", Attr::Ints(axes)), ("keepdim", Attr::Bool(!only_leading))],
        )?;
        if self.ty(summed).shape == to.shape {
            return Ok(summed);
        }
        self.op1(owner, OpKind::Reshape, vec![summed], &[("shape", shape_attr(to.dims())?)])
    }
}

/// A `shape=[...]` attribute value for `dims`.
pub fn shape_attr(dims: &[u64]) -> Result<Attr, String> {
    dims.iter()
        .map(|&d| i64::try_from(d).map_err(|_| format!("dimension {d} does not fit an attribute")))
        .collect::<Result<_, _>>()
        .map(Attr::Ints)
}
