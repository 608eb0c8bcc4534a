//! Seeded random training steps, for property tests of the planner, the checker and the
//! executors.
//!
//! [`random_step`]`(seed)` builds a small VALID step (it passes [`verify`](crate::verify)):
//! 5 to 40 ops, tensors of at most [`MAX_OUT`] elements, so the CPU reference runs it in
//! milliseconds. The same seed always gives the same graph: every random choice comes
//! from one [`Rng`] (`crate::rng`, whose stream never changes) and nothing iterates a hash
//! map.
//!
//! # How
//!
//! The generator keeps a *pool* of typed values that later ops may read (arguments and op
//! outputs). It repeatedly picks an op *family* (binary arithmetic, a linear layer, an
//! attention block, fused attention, a conv block, a view, a reduction, a loss, a backward
//! op, an optimizer update, ...), picks inputs of fitting types from the pool (half the
//! time among the most recent ones, which makes chains and short lifetimes; otherwise any,
//! which makes long lifetimes and values with several users), or creates a new
//! `input`/`param` argument of the needed type, builds the attributes, and asks the op's
//! row (`infer`) for the output types. A rule that says no (or an output larger than
//! [`MAX_OUT`]) just drops that op and the loop goes on; ops already emitted stay (values
//! that are never read are part of the variety). Forward ops are recorded so that backward
//! families can find them: `relu_backward` reads a relu's output, `attention_backward`
//! attention's inputs and both its outputs, `layer_norm_backward` its x and gamma,
//! `conv2d_backward` and `conv_transpose2d_backward` the conv's x and w, and so on.
//!
//! Gradients of optimizers need the param's exact type. A backward op that yields one
//! (`dgamma`, `dw`, `dtable`) is remembered for its param; otherwise `derive` computes a
//! value of that type from the pool: the same type as is, a cast of the same shape, a
//! matmul with transposes (`[R,M]ᵀ @ [R,N]`), a sum over leading dims, an expand, or a
//! `fill` as the last resort. Only validity matters, not that it is the true gradient.
//!
//! Updates must land in place: once a param or state has an update op, nothing reads it (or
//! a view of it) again, so an updated value is *retired* from the pool at its update, and
//! recorded forward ops that read it are no longer used for backward ops. Returns never
//! name a retired value either: the old value of a param updated in place cannot survive
//! the step (today the planner accepts such a return and the checker rejects its plan). Integer labels and ids are `input` arguments read only by
//! `cross_entropy`/`embedding` and their backward ops, with the class count or vocabulary
//! of their first reader, so `init_args` fills them in range.
//!
//! # What it covers
//!
//! Every op of the table: add/sub/mul/div with broadcasting (a bias param, keepdim
//! reductions, scalars, operands read twice), add_scalar/mul_scalar, elementwise chains
//! (in-place candidates), the activations relu, gelu (tanh and exact), silu, sigmoid,
//! tanh, hardswish, hardsigmoid and softmax with their backward ops, the math functions
//! neg, exp, log, sqrt, rsqrt and pow_scalar (on values where they are finite), causal_mask in attention
//! blocks (batched matmuls with `transpose_b`), fused attention (q, k, v new inputs or
//! projections split into heads by a reshape and a transposing view; causal or not,
//! grouped-query heads, T ≠ S, E ≠ Ev, `out` rows before heads or not) and its backward op, matmul with transposes and
//! batch dims, sum/mean with random axes (negative spellings) and keepdim, reshape of dense values,
//! transpose, expand, contiguous (and reshape of a transposed or expanded value only
//! through contiguous), casts among f32/f16/bf16 (and to i32/i64/bool and back), fill,
//! embedding and its backward, layer_norm/batch_norm and their 3-output backward ops,
//! rms_norm and its 2-output backward, conv2d (small NCHW, strides, padding, dilation,
//! groups, depthwise), conv_transpose2d (the same, and output_padding), max_pool2d and their
//! backward ops, adaptive_avg_pool2d and upsample_nearest2d (to sizes that divide the
//! input's, and to sizes that do not, up and down) and their backward ops, where and
//! masked_fill with bool masks that broadcast (new `input`s: fair coins, or compare /
//! compare_scalar of a value), cross_entropy
//! with i32 or i64 labels (sometimes an ignore_index that is a class, sometimes label
//! smoothing; of f16/bf16 logits, sometimes an f32 loss) and bce_with_logits, and their backward ops, and the optimizers sgd,
//! sgd_momentum (state `buf`), adam/adamw (states `m`, `v` and a shared step count `t`
//! incremented by `add_scalar` and updated), dropout (p from 0 to 0.9, each site its own
//! stream, all reading one `i64[]` seed input) and its backward, plus hand-written updates
//! (`p + (-lr)·g`) and running-average `state` updates. Updates come in the middle of the
//! step as well as at the end; their new values may be read later and returned. Several
//! values are returned.
//!
//! Names: params `%p0, %p1, ...`, inputs `%x0, ...`, labels `%y0, ...`, ids `%ids0, ...`,
//! the dropout seed `%seed0`, states `%m_p0`, `%v_p0`, `%buf_p0`, `%s0`, the step count
//! `%t`; op outputs `%v0, %v1, ...`; new values of updates `%p0_new`, `%m_p0_new`,
//! `%t_new`, ....
//!
//! Parts: this file holds the pool of values and the driver; `families.rs` the op
//! families; `training.rs` the loss, backward ops, gradients and updates.

use std::collections::BTreeMap;

use crate::rng::Rng;
use crate::index::ValueId;
use crate::ir::graph::{Graph, Return, Role, Span, Update};
use crate::ir::ops::{Attr, Attrs, OpKind, broadcast};
use crate::ir::types::{DType, TensorType};

mod families;
mod training;

/// The most elements of an argument or constant the generator creates.
pub const MAX_NUMEL: u64 = 256;
/// The most elements of any value (an op output) in a generated step.
pub const MAX_OUT: u64 = 512;
/// The most ops of a generated step.
pub const MAX_OPS: usize = 40;

/// The most ops one family of the generator emits at once.
const LARGEST_FAMILY: usize = 14;
/// The fewest ops of a generated step.
pub const MIN_OPS: usize = 5;
/// The most params a step creates (further weights reuse params or become inputs).
const MAX_PARAMS: usize = 8;
/// Small extents; products stay small.
const DIMS: [u64; 8] = [1, 2, 3, 4, 4, 5, 6, 8];

/// A random valid training step; the same `seed` always gives the same graph.
pub fn random_step(seed: u64) -> Graph {
    let mut generator = Gen::new(seed);
    generator.run();
    generator.into_graph(format!("random_{seed}"))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Def {
    Arg(Role),
    Op,
}

struct Val {
    name: String,
    ty: TensorType,
    def: Def,
}

struct GenOp {
    kind: OpKind,
    inputs: Vec<usize>,
    attrs: Attrs,
    outputs: Vec<usize>,
}

/// A forward op a backward op may later differentiate.
#[derive(Clone)]
struct Record {
    kind: OpKind,
    inputs: Vec<usize>,
    output: usize,
    /// The outputs after the first (attention's lse).
    later_outputs: Vec<usize>,
    attrs: Attrs,
}

/// What a param or state is updated by.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Updatable {
    Param,
    /// A running average: `s_new = 0.9·s + g`.
    State,
}

#[derive(Clone, Copy, Debug)]
enum Family {
    Binary,
    Scalar,
    Chain,
    Activation,
    Math,
    Softmax,
    Attention,
    FusedAttention,
    Matmul,
    Linear,
    Reduce,
    View,
    Slice,
    Cast,
    Fill,
    LayerNorm,
    RmsNorm,
    BatchNorm,
    Conv,
    Pool,
    Resample,
    Masking,
    Embedding,
    Loss,
    BinaryLoss,
    Backward,
    Update,
    NewState,
    Dropout,
}

const FAMILIES: &[(Family, u64)] = &[
    (Family::Binary, 12),
    (Family::Scalar, 5),
    (Family::Chain, 5),
    (Family::Activation, 8),
    (Family::Math, 6),
    (Family::Softmax, 4),
    (Family::Attention, 3),
    (Family::FusedAttention, 3),
    (Family::Matmul, 8),
    (Family::Linear, 6),
    (Family::Reduce, 6),
    (Family::View, 10),
    (Family::Slice, 4),
    (Family::Cast, 5),
    (Family::Fill, 3),
    (Family::LayerNorm, 4),
    (Family::RmsNorm, 2),
    (Family::BatchNorm, 2),
    (Family::Conv, 3),
    (Family::Pool, 2),
    (Family::Resample, 3),
    (Family::Masking, 4),
    (Family::Embedding, 2),
    (Family::Loss, 5),
    (Family::BinaryLoss, 2),
    (Family::Backward, 12),
    (Family::Update, 7),
    (Family::NewState, 1),
    (Family::Dropout, 3),
];

struct Gen {
    rng: Rng,
    vals: Vec<Val>,
    ops: Vec<GenOp>,
    /// Values later ops may read, in creation order (labels, ids and optimizer state are not).
    pool: Vec<usize>,
    /// The value owning each value's bytes (views share their base's root).
    root: Vec<usize>,
    /// Whether each value's elements are dense row-major (reshape needs it).
    dense: Vec<bool>,
    /// Roots updated already: never read again.
    retired: Vec<bool>,
    updatable: Vec<(usize, Updatable)>,
    updates: Vec<(usize, usize)>,
    records: Vec<Record>,
    /// A value of a param's type computed by a backward op (its gradient, by name).
    grads: BTreeMap<usize, usize>,
    /// Labels by (N, classes); ids by vocabulary size.
    labels: BTreeMap<(u64, u64), usize>,
    ids: BTreeMap<u64, Vec<usize>>,
    losses: Vec<usize>,
    returns: Vec<usize>,
    /// Adam's step count `t` and `t_new`, made at the first adam.
    step_count: Option<usize>,
    /// The `i64[]` seed input every dropout reads, made at the first dropout.
    dropout_seed: Option<usize>,
    counters: BTreeMap<&'static str, usize>,
    params: usize,
}

/// The attributes of `kind`'s row in row order: `given` ones, defaults for the rest.
fn attrs(kind: OpKind, given: &[(&'static str, Attr)]) -> Attrs {
    Attrs::for_op(kind, given).unwrap_or_else(|e| panic!("random_step: {e}"))
}

fn ints(v: &[u64]) -> Attr {
    Attr::Ints(v.iter().map(|&d| d as i64).collect())
}

fn numel(ty: &TensorType) -> u64 {
    ty.shape.numel().unwrap_or(u64::MAX)
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            vals: Vec::new(),
            ops: Vec::new(),
            pool: Vec::new(),
            root: Vec::new(),
            dense: Vec::new(),
            retired: Vec::new(),
            updatable: Vec::new(),
            updates: Vec::new(),
            records: Vec::new(),
            grads: BTreeMap::new(),
            labels: BTreeMap::new(),
            ids: BTreeMap::new(),
            losses: Vec::new(),
            returns: Vec::new(),
            step_count: None,
            dropout_seed: None,
            counters: BTreeMap::new(),
            params: 0,
        }
    }

    // ---- randomness -------------------------------------------------------------------

    fn below(&mut self, n: usize) -> usize {
        self.rng.below(n as u64) as usize
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.uniform() < p
    }

    fn choose<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn float_dtype(&mut self) -> DType {
        match self.below(10) {
            0..=5 => DType::F32,
            6 | 7 => DType::F16,
            _ => DType::Bf16,
        }
    }

    fn shape(&mut self, rank: usize) -> Vec<u64> {
        let mut dims = Vec::with_capacity(rank);
        let mut product = 1;
        for _ in 0..rank {
            let mut d = self.choose(&DIMS);
            if product * d > MAX_NUMEL / 2 {
                d = 1;
            }
            product *= d;
            dims.push(d);
        }
        dims
    }

    fn rank(&mut self) -> usize {
        match self.below(20) {
            0..=2 => 1,
            3..=11 => 2,
            12..=16 => 3,
            _ => 4,
        }
    }

    // ---- values -------------------------------------------------------------------------

    fn name(&mut self, prefix: &'static str) -> String {
        let n = self.counters.entry(prefix).or_insert(0);
        *n += 1;
        format!("{prefix}{}", *n - 1)
    }

    fn push_val(&mut self, name: String, ty: TensorType, def: Def) -> usize {
        let id = self.vals.len();
        self.vals.push(Val { name, ty, def });
        self.root.push(id);
        self.dense.push(true);
        self.retired.push(false);
        id
    }

    fn ty(&self, v: usize) -> &TensorType {
        &self.vals[v].ty
    }

    fn arg(&mut self, name: String, ty: TensorType, role: Role) -> usize {
        self.push_val(name, ty, Def::Arg(role))
    }

    fn new_input(&mut self, ty: TensorType) -> usize {
        let name = self.name("x");
        let v = self.arg(name, ty, Role::Input);
        self.pool.push(v);
        v
    }

    /// A new param (or, past [`MAX_PARAMS`], a new input) of type `ty`, in the pool.
    fn new_param(&mut self, ty: TensorType) -> usize {
        if self.params >= MAX_PARAMS {
            return self.new_input(ty);
        }
        self.params += 1;
        let name = self.name("p");
        let v = self.arg(name, ty, Role::Param);
        self.pool.push(v);
        self.updatable.push((v, Updatable::Param));
        v
    }

    /// An existing readable param of type `ty` (30%: weight sharing), else a new one.
    fn param(&mut self, ty: TensorType) -> usize {
        if self.chance(0.3)
            && let Some(p) = self.pick(|g, v| g.vals[v].def == Def::Arg(Role::Param) && g.vals[v].ty == ty)
        {
            return p;
        }
        self.new_param(ty)
    }

    fn readable(&self, v: usize) -> bool {
        !self.retired[self.root[v]]
    }

    /// A readable pool value satisfying `ok`: half the time one of the 3 most recent.
    fn pick(&mut self, ok: impl Fn(&Gen, usize) -> bool) -> Option<usize> {
        let cands: Vec<usize> = self.pool.iter().copied().filter(|&v| self.readable(v) && ok(self, v)).collect();
        if cands.is_empty() {
            return None;
        }
        if self.chance(0.5) {
            let k = cands.len().min(3);
            let i = cands.len() - 1 - self.below(k);
            return Some(cands[i]);
        }
        Some(self.choose(&cands))
    }

    /// A float value of rank in `ranks` (or a new input, sometimes or when there is none).
    fn float_value(&mut self, min_rank: usize, max_rank: usize) -> usize {
        if !self.chance(0.12)
            && let Some(v) = self.pick(|g, v| {
                let t = g.ty(v);
                t.dtype.is_float() && (min_rank..=max_rank).contains(&t.rank()) && numel(t) <= MAX_NUMEL
            })
        {
            return v;
        }
        let rank = self.rank().clamp(min_rank, max_rank);
        let dtype = self.float_dtype();
        let shape = self.shape(rank);
        self.new_input(TensorType::new(dtype, shape))
    }

    // ---- emitting ops -----------------------------------------------------------------

    /// Appends `kind` if its rule accepts the inputs and outputs stay small; names outputs
    /// `names` (or `%vN`); puts them in the pool. `None` if the rule says no.
    fn emit_named(
        &mut self,
        kind: OpKind,
        inputs: &[usize],
        given: &[(&'static str, Attr)],
        names: Option<Vec<String>>,
    ) -> Option<Vec<usize>> {
        let attrs = attrs(kind, given);
        let types: Vec<&TensorType> = inputs.iter().map(|&v| &self.vals[v].ty).collect();
        let outs = (kind.def().infer)(&types, &attrs).ok()?;
        if outs.iter().any(|t| numel(t) > MAX_OUT) {
            return None;
        }
        if inputs.iter().any(|&v| !self.readable(v)) {
            return None;
        }
        if kind == OpKind::Reshape && !self.dense[inputs[0]] {
            return None;
        }
        let names = names.unwrap_or_else(|| outs.iter().map(|_| self.name("v")).collect());
        let outputs: Vec<usize> =
            outs.into_iter().zip(names).map(|(ty, name)| self.push_val(name, ty, Def::Op)).collect();
        if let Some(k) = kind.def().view_of() {
            let (input, out) = (inputs[k], outputs[0]);
            self.root[out] = self.root[input];
            self.dense[out] = match kind {
                OpKind::Reshape => true,
                OpKind::Transpose => {
                    self.dense[input] && attrs.ints("perm").iter().enumerate().all(|(i, &p)| p == i as i64)
                }
                _ => self.dense[input] && self.vals[input].ty == self.vals[out].ty,
            };
        }
        self.pool.extend(&outputs);
        self.ops.push(GenOp { kind, inputs: inputs.to_vec(), attrs, outputs: outputs.clone() });
        Some(outputs)
    }

    fn emit(&mut self, kind: OpKind, inputs: &[usize], given: &[(&'static str, Attr)]) -> Option<usize> {
        self.emit_named(kind, inputs, given, None).map(|o| o[0])
    }

    /// Emits a forward op and records it for its backward op; returns its first output.
    fn emit_recorded(&mut self, kind: OpKind, inputs: &[usize], given: &[(&'static str, Attr)]) -> Option<usize> {
        let outputs = self.emit_named(kind, inputs, given, None)?;
        let attrs = self.ops.last().expect("just emitted").attrs.clone();
        let (output, later_outputs) = (outputs[0], outputs[1..].to_vec());
        self.records.push(Record { kind, inputs: inputs.to_vec(), output, later_outputs, attrs });
        Some(output)
    }

    fn cast_to(&mut self, v: usize, dtype: DType) -> Option<usize> {
        if self.ty(v).dtype == dtype { Some(v) } else { self.emit(OpKind::Cast, &[v], &[("to", Attr::DType(dtype))]) }
    }

    /// `v` in dense row-major layout (a `contiguous` copy of a transposed or expanded view).
    fn dense_of(&mut self, v: usize) -> Option<usize> {
        if self.dense[v] { Some(v) } else { self.emit(OpKind::Contiguous, &[v], &[]) }
    }

    // ---- the generator ----------------------------------------------------------------

    fn run(&mut self) {
        // A few inputs to start from, sometimes a param.
        for _ in 0..1 + self.below(2) {
            let rank = self.rank();
            let (dtype, shape) = (self.float_dtype(), self.shape(rank));
            self.new_input(TensorType::new(dtype, shape));
        }
        if self.chance(0.5) {
            let rank = self.rank();
            let (dtype, shape) = (self.float_dtype(), self.shape(rank));
            self.new_param(TensorType::new(dtype, shape));
        }
        let budget = (4 + self.below(26)).max(MIN_OPS);
        let mut attempts = 0;
        // A family emits up to [`LARGEST_FAMILY`] ops at once (attention with its inputs and
        // backward): none starts where it could pass MAX_OPS.
        while self.ops.len() < budget.min(MAX_OPS - LARGEST_FAMILY) && attempts < 400 {
            attempts += 1;
            let total: u64 = FAMILIES.iter().map(|&(_, w)| w).sum();
            let mut r = self.rng.below(total);
            let family = FAMILIES
                .iter()
                .find(|&&(_, w)| {
                    if r < w {
                        true
                    } else {
                        r -= w;
                        false
                    }
                })
                .map(|&(f, _)| f)
                .expect("weights sum to total");
            self.family(family);
        }
        // Most params and states still alive get their update at the end.
        let pending: Vec<usize> = self.updatable.iter().map(|&(v, _)| v).collect();
        for v in pending {
            if self.ops.len() + 6 > MAX_OPS {
                break;
            }
            if !self.retired[v] && self.chance(0.8) {
                self.update(v);
            }
        }
        self.choose_returns();
    }

    fn family(&mut self, family: Family) {
        match family {
            Family::Binary => self.binary(),
            Family::Scalar => {
                let x = self.float_value(0, 4);
                self.scalar_op(x);
            }
            Family::Chain => self.chain(),
            Family::Activation => {
                let x = self.float_value(0, 4);
                self.activation(x);
            }
            Family::Math => {
                self.math();
            }
            Family::Softmax => {
                let x = self.float_value(1, 4);
                self.softmax(x);
            }
            Family::Attention => self.attention(),
            Family::FusedAttention => self.fused_attention(),
            Family::Matmul => self.matmul(),
            Family::Linear => self.linear(),
            Family::Reduce => self.reduce(),
            Family::View => self.view(),
            Family::Slice => self.slices(),
            Family::Cast => self.cast(),
            Family::Fill => self.fill(),
            Family::LayerNorm => {
                let x = self.float_value(1, 4);
                self.layer_norm(x);
            }
            Family::RmsNorm => {
                let x = self.float_value(1, 4);
                self.rms_norm(x);
            }
            Family::BatchNorm => {
                let x = self.float_value(2, 4);
                self.batch_norm(x);
                if self.chance(0.5) {
                    // Its running statistics, as an exported BatchNorm updates them.
                    let correction = self.below(2) as i64;
                    self.emit(OpKind::BatchNormStats, &[x], &[("correction", Attr::Int(correction))]);
                }
            }
            Family::Conv => self.conv_block(),
            Family::Pool => {
                let x = self.nchw();
                self.pool_op(x);
            }
            Family::Resample => self.resample(),
            Family::Masking => self.masking(),
            Family::Embedding => self.embedding(),
            Family::Loss => self.loss(),
            Family::BinaryLoss => self.binary_loss(),
            Family::Backward => self.backward(),
            Family::Update => {
                let live: Vec<usize> =
                    self.updatable.iter().map(|&(v, _)| v).filter(|&v| !self.retired[v]).collect();
                if !live.is_empty() {
                    let v = self.choose(&live);
                    self.update(v);
                }
            }
            Family::Dropout => self.dropout(),
            Family::NewState => {
                // A running average of some value: read now and then, updated later.
                if let Some(x) = self.pick(|g, v| g.ty(v).dtype.is_float() && numel(g.ty(v)) <= MAX_NUMEL) {
                    let ty = self.ty(x).clone();
                    let name = self.name("s");
                    let s = self.arg(name, ty, Role::State);
                    self.pool.push(s);
                    self.updatable.push((s, Updatable::State));
                }
            }
        }
    }

    /// 1 to 4 returned values: most losses, then random readable values.
    fn choose_returns(&mut self) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for l in self.losses.clone() {
            if self.readable(l) && self.chance(0.7) {
                out.push(l);
            }
        }
        let want = 1 + self.below(4);
        let mut tries = 0;
        while out.len() < want && tries < 10 {
            tries += 1;
            let prefer_op = self.chance(0.9);
            if let Some(v) = self.pick(|g, v| !prefer_op || g.vals[v].def == Def::Op) {
                out.push(v);
            }
        }
        self.returns = out.clone();
        out
    }

    fn into_graph(self, name: String) -> Graph {
        let mut g = Graph::new(name);
        let mut ids: Vec<Option<ValueId>> = vec![None; self.vals.len()];
        for (i, v) in self.vals.iter().enumerate() {
            if let Def::Arg(role) = v.def {
                ids[i] = Some(g.add_arg(v.name.clone(), v.ty.clone(), role));
            }
        }
        for op in &self.ops {
            let inputs = op.inputs.iter().map(|&i| ids[i].expect("inputs are defined first")).collect();
            let outputs = op.outputs.iter().map(|&o| (self.vals[o].name.clone(), self.vals[o].ty.clone())).collect();
            let id = g.add_op(op.kind, inputs, op.attrs.clone(), outputs);
            for (k, &o) in op.outputs.iter().enumerate() {
                ids[o] = Some(g.ops[id].outputs[k]);
            }
        }
        let id = |v: usize| ids[v].expect("defined");
        g.updates = self.updates.iter().map(|&(t, v)| Update { target: id(t), value: id(v), span: Span::NONE }).collect();
        g.returns = self.returns.iter().map(|&v| Return { value: id(v), span: Span::NONE }).collect();
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_seeds_verify() {
        for seed in 0..50 {
            let g = random_step(seed);
            if let Err(e) = crate::verify(&g) {
                panic!("seed {seed}: {e:?}\n{}", crate::print(&g));
            }
            assert!((MIN_OPS..=MAX_OPS).contains(&g.ops.len()), "seed {seed}: {} ops", g.ops.len());
        }
    }
}