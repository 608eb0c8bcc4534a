//! Seeded random training steps, for property tests of the planner, the checker and the
//! executors.
//!
//! [`random_step`]`(seed)` builds a small VALID step (it passes [`verify`](crate::verify)):
//! 5 to 40 ops, tensors of at most [`MAX_OUT`] elements, so the CPU reference runs it in
//! milliseconds. The same seed always gives the same graph: every random choice comes
//! from one [`Rng`] (SplitMix64, whose stream never changes) and nothing iterates a hash map.
//!
//! # How
//!
//! The generator keeps a *pool* of typed values that later ops may read (arguments and op
//! outputs). It repeatedly picks an op *family* (binary arithmetic, a linear layer, an
//! attention block, a conv block, a view, a reduction, a loss, a backward op, an optimizer
//! update, ...), picks inputs of fitting types from the pool (half the time among the most
//! recent ones, which makes chains and short lifetimes; otherwise any, which makes long
//! lifetimes and values with several users), or creates a new `input`/`param` argument of
//! the needed type, builds the attributes, and asks the op's row (`infer`) for the output
//! types. A rule that says no (or an output larger than [`MAX_OUT`]) just drops that op and
//! the loop goes on; ops already emitted stay (values that are never read are part of the
//! variety). Forward ops are recorded so that backward families can find them:
//! `relu_backward` reads a relu's output, `layer_norm_backward` its x and gamma,
//! `conv2d_backward` the conv's x and w, and so on.
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
//! (in-place candidates), relu/gelu/softmax and their backward ops, causal_mask in attention
//! blocks (batched matmuls with `transpose_b`), matmul with transposes and batch dims,
//! sum/mean with random axes (negative spellings) and keepdim, reshape of dense values,
//! transpose, expand, contiguous (and reshape of a transposed or expanded value only
//! through contiguous), casts among f32/f16/bf16 (and to i32/i64/bool and back), fill,
//! embedding and its backward, layer_norm/batch_norm and their 3-output backward ops,
//! conv2d/max_pool2d (small NCHW, strides, padding) and their backward ops,
//! cross_entropy with i32 or i64 labels and its backward, and the optimizers sgd,
//! sgd_momentum (state `buf`), adam/adamw (states `m`, `v` and a shared step count `t`
//! incremented by `add_scalar` and updated), plus hand-written updates (`p + (-lr)·g`) and
//! running-average `state` updates. Updates come in the middle of the step as well as at
//! the end; their new values may be read later and returned. Several values are returned.
//!
//! Names: params `%p0, %p1, ...`, inputs `%x0, ...`, labels `%y0, ...`, ids `%ids0, ...`,
//! states `%m_p0`, `%v_p0`, `%buf_p0`, `%s0`, the step count `%t`; op outputs `%v0, %v1,
//! ...`; new values of updates `%p0_new`, `%m_p0_new`, `%t_new`, ....

use std::collections::BTreeMap;

use crate::exec::data::Rng;
use crate::index::ValueId;
use crate::ir::graph::{Graph, Return, Role, Span, Update};
use crate::ir::ops::{Attr, Attrs, OpKind, broadcast};
use crate::ir::types::{DType, TensorType};

/// The most elements of an argument or constant the generator creates.
pub const MAX_NUMEL: u64 = 256;
/// The most elements of any value (an op output) in a generated step.
pub const MAX_OUT: u64 = 512;
/// The most ops of a generated step.
pub const MAX_OPS: usize = 40;
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
    Softmax,
    Attention,
    Matmul,
    Linear,
    Reduce,
    View,
    Cast,
    Fill,
    LayerNorm,
    BatchNorm,
    Conv,
    Pool,
    Embedding,
    Loss,
    Backward,
    Update,
    NewState,
}

const FAMILIES: &[(Family, u64)] = &[
    (Family::Binary, 12),
    (Family::Scalar, 5),
    (Family::Chain, 5),
    (Family::Activation, 6),
    (Family::Softmax, 4),
    (Family::Attention, 3),
    (Family::Matmul, 8),
    (Family::Linear, 6),
    (Family::Reduce, 6),
    (Family::View, 10),
    (Family::Cast, 5),
    (Family::Fill, 3),
    (Family::LayerNorm, 4),
    (Family::BatchNorm, 2),
    (Family::Conv, 3),
    (Family::Pool, 2),
    (Family::Embedding, 2),
    (Family::Loss, 5),
    (Family::Backward, 12),
    (Family::Update, 7),
    (Family::NewState, 1),
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
        if let Some(k) = kind.def().view_of {
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

    /// Emits a one-output forward op and records it for its backward op.
    fn emit_recorded(&mut self, kind: OpKind, inputs: &[usize], given: &[(&'static str, Attr)]) -> Option<usize> {
        let out = self.emit(kind, inputs, given)?;
        let attrs = self.ops.last().expect("just emitted").attrs.clone();
        self.records.push(Record { kind, inputs: inputs.to_vec(), output: out, attrs });
        Some(out)
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
        while self.ops.len() < budget && attempts < 400 {
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
                let kind = if self.chance(0.5) { OpKind::Relu } else { OpKind::Gelu };
                self.emit_recorded(kind, &[x], &[]);
            }
            Family::Softmax => {
                let x = self.float_value(1, 4);
                self.softmax(x);
            }
            Family::Attention => self.attention(),
            Family::Matmul => self.matmul(),
            Family::Linear => self.linear(),
            Family::Reduce => self.reduce(),
            Family::View => self.view(),
            Family::Cast => self.cast(),
            Family::Fill => self.fill(),
            Family::LayerNorm => {
                let x = self.float_value(1, 4);
                self.layer_norm(x);
            }
            Family::BatchNorm => {
                let x = self.float_value(2, 4);
                self.batch_norm(x);
            }
            Family::Conv => self.conv_block(),
            Family::Pool => {
                let x = self.nchw();
                self.pool_op(x);
            }
            Family::Embedding => self.embedding(),
            Family::Loss => self.loss(),
            Family::Backward => self.backward(),
            Family::Update => {
                let live: Vec<usize> =
                    self.updatable.iter().map(|&(v, _)| v).filter(|&v| !self.retired[v]).collect();
                if !live.is_empty() {
                    let v = self.choose(&live);
                    self.update(v);
                }
            }
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

    fn scalar_op(&mut self, x: usize) -> Option<usize> {
        let kind = if self.chance(0.5) { OpKind::AddScalar } else { OpKind::MulScalar };
        let value = self.choose(&[0.5, 2.0, -1.0, 0.1, 3.0, -0.25]);
        self.emit(kind, &[x], &[("value", Attr::Float(value))])
    }

    /// A second operand for `a` in a binary op of dtype `dtype`.
    fn operand_for(&mut self, a: usize) -> usize {
        let ty = self.ty(a).clone();
        let same = |g: &Gen, v: usize| g.ty(v) == &ty;
        let found = match self.below(6) {
            0 | 1 => self.pick(same),
            2 if ty.rank() >= 1 && ty.dtype.is_float() => {
                // A bias along the last dimension.
                let bias = TensorType::new(ty.dtype, vec![*ty.dims().last().unwrap()]);
                Some(self.param(bias))
            }
            3 => self.pick(|g, v| {
                let t = g.ty(v);
                v != a
                    && t.dtype == ty.dtype
                    && broadcast(&ty.shape, &t.shape).is_ok_and(|s| s.numel().is_some_and(|n| n <= MAX_OUT))
            }),
            4 => {
                let other = self.pick(|g, v| g.ty(v).shape == ty.shape && g.ty(v).dtype != ty.dtype);
                other.and_then(|o| self.cast_to(o, ty.dtype))
            }
            _ => {
                let value = self.choose(&[1.0, 2.0, 0.5, -3.0]);
                let dims = if self.chance(0.5) { vec![] } else { vec![1; ty.rank()] };
                self.emit(OpKind::Fill, &[], &[("shape", ints(&dims)), ("dtype", Attr::DType(ty.dtype)), ("value", Attr::Float(value))])
            }
        };
        found.unwrap_or_else(|| self.new_input(ty))
    }

    fn binary(&mut self) {
        // Mostly floats; sometimes integers (from casts), never bool.
        let a = if self.chance(0.1)
            && let Some(v) = self.pick(|g, v| matches!(g.ty(v).dtype, DType::I32 | DType::I64))
        {
            v
        } else {
            self.float_value(0, 4)
        };
        let float = self.ty(a).dtype.is_float();
        let kinds: &[OpKind] =
            if float { &[OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div] } else { &[OpKind::Add, OpKind::Sub, OpKind::Mul] };
        let kind = self.choose(kinds);
        let mut b = self.operand_for(a);
        if kind == OpKind::Div {
            // Divide by b² + 1, never by zero.
            let Some(sq) = self.emit(OpKind::Mul, &[b, b], &[]) else { return };
            let Some(d) = self.emit(OpKind::AddScalar, &[sq], &[("value", Attr::Float(1.0))]) else { return };
            b = d;
        }
        let (x, y) = if kind != OpKind::Div && self.chance(0.3) { (b, a) } else { (a, b) };
        self.emit(kind, &[x, y], &[]);
    }

    /// A chain of elementwise ops on one value: each result dies at the next op.
    fn chain(&mut self) {
        let mut x = self.float_value(0, 4);
        for _ in 0..2 + self.below(3) {
            let next = match self.below(6) {
                0 => self.emit(OpKind::Relu, &[x], &[]),
                1 => self.emit(OpKind::Gelu, &[x], &[]),
                2 => self.emit(OpKind::Mul, &[x, x], &[]),
                3 => {
                    let ty = self.ty(x).clone();
                    let other = self.new_input(ty);
                    self.emit(OpKind::Add, &[x, other], &[])
                }
                _ => self.scalar_op(x),
            };
            match next {
                Some(v) => x = v,
                None => return,
            }
        }
    }

    fn softmax(&mut self, x: usize) -> Option<usize> {
        let rank = self.ty(x).rank() as i64;
        let axis = self.below(2 * rank as usize) as i64 - rank;
        self.emit_recorded(OpKind::Softmax, &[x], &[("axis", Attr::Int(axis))])
    }

    /// A value of `v`'s type from the pool (not `v` itself half the time), or a new input.
    fn same_type(&mut self, v: usize) -> usize {
        let ty = self.ty(v).clone();
        if self.chance(0.5)
            && let Some(o) = self.pick(|g, o| o != v && g.ty(o) == &ty)
        {
            return o;
        }
        if self.chance(0.3) { v } else { self.new_input(ty) }
    }

    /// softmax(causal_mask(q @ kᵀ · s)) @ v, with batch dims.
    fn attention(&mut self) {
        let q = if self.chance(0.5)
            && let Some(q) = self.pick(|g, v| g.ty(v).dtype.is_float() && (2..=4).contains(&g.ty(v).rank()))
        {
            q
        } else {
            let batch = self.below(3);
            let mut dims = self.shape(batch);
            dims.extend([self.choose(&[2, 3, 4, 6, 8]), self.choose(&[2, 4, 8])]);
            let dtype = self.float_dtype();
            if numel(&TensorType::new(dtype, dims.clone())) > MAX_NUMEL {
                return;
            }
            self.new_input(TensorType::new(dtype, dims))
        };
        let k = self.same_type(q);
        let Some(scores) = self.emit(OpKind::Matmul, &[q, k], &[("transpose_b", Attr::Bool(true))]) else { return };
        let Some(scaled) = self.emit(OpKind::MulScalar, &[scores], &[("value", Attr::Float(0.5))]) else { return };
        let fill = self.choose(&[f64::NEG_INFINITY, -1e4, -100.0]);
        let Some(masked) = self.emit(OpKind::CausalMask, &[scaled], &[("value", Attr::Float(fill))]) else { return };
        let Some(probs) = self.emit_recorded(OpKind::Softmax, &[masked], &[]) else { return };
        let v = self.same_type(q);
        self.emit(OpKind::Matmul, &[probs, v], &[]);
        if self.chance(0.3) {
            self.backward_chain(self.records.len() - 1);
        }
    }

    fn matmul(&mut self) {
        let a = self.float_value(2, 4);
        let ta = self.chance(0.3);
        let dims = self.ty(a).dims().to_vec();
        let dtype = self.ty(a).dtype;
        let (r, c) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        let k = if ta { r } else { c };
        let tb = self.chance(0.3);
        let n = self.choose(&DIMS[1..]);
        let weight = TensorType::new(dtype, if tb { vec![n, k] } else { vec![k, n] });
        if numel(&weight) > MAX_NUMEL {
            return;
        }
        let b = match self.below(10) {
            0..=4 => self.param(weight),
            5..=7 => {
                let found = self.pick(|g, v| {
                    let t = g.ty(v);
                    let attrs = attrs(OpKind::Matmul, &[("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))]);
                    (OpKind::Matmul.def().infer)(&[g.ty(a), t], &attrs).is_ok_and(|o| numel(&o[0]) <= MAX_OUT)
                });
                match found {
                    Some(b) => b,
                    None => self.param(weight),
                }
            }
            _ => {
                // A batched operand with a's batch dims, if it stays small.
                let mut bdims = dims[..dims.len() - 2].to_vec();
                bdims.extend(if tb { [n, k] } else { [k, n] });
                let ty = TensorType::new(dtype, bdims);
                if numel(&ty) <= MAX_NUMEL { self.new_input(ty) } else { self.param(weight) }
            }
        };
        self.emit(OpKind::Matmul, &[a, b], &[("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))]);
    }

    /// act(x @ W + b).
    fn linear(&mut self) {
        let x = self.float_value(2, 3);
        let dtype = self.ty(x).dtype;
        let k = *self.ty(x).dims().last().unwrap();
        let n = self.choose(&DIMS[1..]);
        let tb = self.chance(0.3);
        let weight = TensorType::new(dtype, if tb { vec![n, k] } else { vec![k, n] });
        if numel(&weight) > MAX_NUMEL {
            return;
        }
        let w = self.param(weight);
        let Some(h) = self.emit(OpKind::Matmul, &[x, w], &[("transpose_b", Attr::Bool(tb))]) else { return };
        let b = self.param(TensorType::new(dtype, vec![n]));
        let Some(h2) = self.emit(OpKind::Add, &[h, b], &[]) else { return };
        match self.below(3) {
            0 => self.emit_recorded(OpKind::Relu, &[h2], &[]),
            1 => self.emit_recorded(OpKind::Gelu, &[h2], &[]),
            _ => None,
        };
    }

    fn reduce(&mut self) {
        let Some(x) = self.pick(|g, v| g.ty(v).rank() >= 1 && g.ty(v).dtype != DType::Bool) else { return };
        let t = self.ty(x).clone();
        let kind = if t.dtype.is_float() && self.chance(0.5) { OpKind::Mean } else { OpKind::Sum };
        let rank = t.rank();
        let mut axes: Vec<i64> = (0..rank as i64).filter(|_| self.chance(0.5)).collect();
        if axes.is_empty() {
            axes.push(self.below(rank) as i64);
        }
        if self.chance(0.3) {
            axes = axes.iter().map(|&a| a - rank as i64).collect();
        }
        if self.chance(0.3) {
            axes.reverse();
        }
        let keepdim = self.chance(0.4);
        self.emit(kind, &[x], &[("axes", Attr::Ints(axes)), ("keepdim", Attr::Bool(keepdim))]);
    }

    /// A random shape with `n` elements.
    fn factor_shape(&mut self, n: u64) -> Vec<u64> {
        let mut factors = Vec::new();
        let mut m = n;
        let mut p = 2;
        while m > 1 {
            while m.is_multiple_of(p) {
                factors.push(p);
                m /= p;
            }
            p += 1;
        }
        let rank = 1 + self.below(4);
        let mut dims = vec![1u64; rank];
        for f in factors {
            let i = self.below(rank);
            dims[i] *= f;
        }
        dims
    }

    fn view(&mut self) {
        match self.below(5) {
            0 | 1 => {
                // reshape; of a non-contiguous view only through contiguous.
                let Some(x) = self.pick(|g, v| numel(g.ty(v)) <= MAX_OUT) else { return };
                let Some(x) = self.dense_of(x) else { return };
                let shape = self.factor_shape(numel(self.ty(x)));
                self.emit(OpKind::Reshape, &[x], &[("shape", ints(&shape))]);
            }
            2 => {
                let Some(x) = self.pick(|g, v| g.ty(v).rank() >= 2) else { return };
                let rank = self.ty(x).rank();
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                for i in (1..rank).rev() {
                    let j = self.below(i + 1);
                    perm.swap(i, j);
                }
                let Some(t) = self.emit(OpKind::Transpose, &[x], &[("perm", Attr::Ints(perm))]) else { return };
                if self.chance(0.4) {
                    // Reshape the transposed value: needs a dense copy first.
                    let Some(c) = self.dense_of(t) else { return };
                    let shape = self.factor_shape(numel(self.ty(c)));
                    self.emit(OpKind::Reshape, &[c], &[("shape", ints(&shape))]);
                }
            }
            3 => {
                let Some(x) = self.pick(|g, v| numel(g.ty(v)) <= MAX_OUT / 4) else { return };
                let mut shape: Vec<u64> = self.ty(x).dims().to_vec();
                for d in shape.iter_mut() {
                    if *d == 1 && self.chance(0.7) {
                        *d = 2 + self.below(3) as u64;
                    }
                }
                for _ in 0..self.below(3) {
                    shape.insert(0, 1 + self.below(3) as u64);
                }
                self.emit(OpKind::Expand, &[x], &[("shape", ints(&shape))]);
            }
            _ => {
                let x = match self.pick(|g, v| !g.dense[v]) {
                    Some(x) => x,
                    None => match self.pick(|_, _| true) {
                        Some(x) => x,
                        None => return,
                    },
                };
                self.emit(OpKind::Contiguous, &[x], &[]);
            }
        }
    }

    fn cast(&mut self) {
        // Back to a float from an integer or bool, sometimes.
        if self.chance(0.3)
            && let Some(x) = self.pick(|g, v| !g.ty(v).dtype.is_float())
        {
            let to = self.float_dtype();
            self.emit(OpKind::Cast, &[x], &[("to", Attr::DType(to))]);
            return;
        }
        let x = self.float_value(0, 4);
        let from = self.ty(x).dtype;
        let to = if self.chance(0.15) {
            self.choose(&[DType::I32, DType::I64, DType::Bool])
        } else {
            let others: Vec<DType> = [DType::F32, DType::F16, DType::Bf16].into_iter().filter(|&d| d != from).collect();
            self.choose(&others)
        };
        self.emit(OpKind::Cast, &[x], &[("to", Attr::DType(to))]);
    }

    fn fill(&mut self) {
        let shape = match self.pick(|_, _| true) {
            Some(v) if self.chance(0.5) => self.ty(v).dims().to_vec(),
            _ => {
                let rank = self.below(4);
                self.shape(rank)
            }
        };
        let (dtype, value) = match self.below(10) {
            0 => (DType::I32, self.choose(&[0.0, 3.0, -2.0])),
            1 => (DType::Bool, self.choose(&[0.0, 1.0])),
            _ => (self.float_dtype(), self.choose(&[0.0, 1.0, 0.5, -2.0, 0.015625])),
        };
        self.emit(OpKind::Fill, &[], &[("shape", ints(&shape)), ("dtype", Attr::DType(dtype)), ("value", Attr::Float(value))]);
    }

    fn eps(&mut self) -> Vec<(&'static str, Attr)> {
        if self.chance(0.3) { vec![("eps", Attr::Float(1e-6))] } else { vec![] }
    }

    fn layer_norm(&mut self, x: usize) -> Option<usize> {
        let t = self.ty(x).clone();
        let p = TensorType::new(t.dtype, vec![*t.dims().last()?]);
        let gamma = self.param(p.clone());
        let beta = self.param(p);
        let eps = self.eps();
        self.emit_recorded(OpKind::LayerNorm, &[x, gamma, beta], &eps)
    }

    fn batch_norm(&mut self, x: usize) -> Option<usize> {
        let t = self.ty(x).clone();
        let p = TensorType::new(t.dtype, vec![*t.dims().get(1)?]);
        let gamma = self.param(p.clone());
        let beta = self.param(p);
        let eps = self.eps();
        self.emit_recorded(OpKind::BatchNorm, &[x, gamma, beta], &eps)
    }

    /// A small float [N,C,H,W] value: from the pool or a new input.
    fn nchw(&mut self) -> usize {
        if self.chance(0.5)
            && let Some(x) = self.pick(|g, v| {
                let t = g.ty(v);
                t.dtype.is_float() && t.rank() == 4 && t.dims()[2] >= 2 && t.dims()[3] >= 2
            })
        {
            return x;
        }
        let dims = vec![1 + self.below(2) as u64, 1 + self.below(3) as u64, 3 + self.below(4) as u64, 3 + self.below(4) as u64];
        let dtype = self.float_dtype();
        self.new_input(TensorType::new(dtype, dims))
    }

    /// conv2d, then maybe batch_norm, relu, max_pool2d.
    fn conv_block(&mut self) {
        let x = self.nchw();
        let t = self.ty(x).clone();
        let (c, h, w) = (t.dims()[1], t.dims()[2], t.dims()[3]);
        let k = 1 + self.below(4) as u64;
        let r = (1 + self.below(3) as u64).min(h);
        let s = (1 + self.below(3) as u64).min(w);
        let weight = TensorType::new(t.dtype, vec![k, c, r, s]);
        if numel(&weight) > MAX_NUMEL {
            return;
        }
        let weight = self.param(weight);
        let first_record = self.records.len();
        let stride = [1 + self.below(2) as u64, 1 + self.below(2) as u64];
        let padding = [self.below(2) as u64, self.below(2) as u64];
        let Some(mut y) = self.emit_recorded(OpKind::Conv2d, &[x, weight], &[("stride", ints(&stride)), ("padding", ints(&padding))])
        else {
            return;
        };
        if self.chance(0.5)
            && let Some(b) = self.batch_norm(y)
        {
            y = b;
        }
        if self.chance(0.6)
            && let Some(r) = self.emit_recorded(OpKind::Relu, &[y], &[])
        {
            y = r;
        }
        if self.chance(0.4) {
            self.pool_op(y);
        }
        if self.chance(0.4) {
            self.backward_chain(first_record);
        }
    }

    /// The backward ops of the records from `first` on, last first (as backprop runs).
    fn backward_chain(&mut self, first: usize) {
        for i in (first..self.records.len()).rev() {
            if self.record_usable(i) {
                self.backward_of(i);
            }
        }
    }

    fn pool_op(&mut self, x: usize) -> Option<usize> {
        let kernel = [1 + self.below(3) as u64, 1 + self.below(3) as u64];
        let stride = [1 + self.below(2) as u64, 1 + self.below(2) as u64];
        let padding = [self.below(kernel[0] as usize / 2 + 1) as u64, self.below(kernel[1] as usize / 2 + 1) as u64];
        self.emit_recorded(
            OpKind::MaxPool2d,
            &[x],
            &[("kernel", ints(&kernel)), ("stride", ints(&stride)), ("padding", ints(&padding))],
        )
    }

    fn index_dtype(&mut self) -> DType {
        if self.chance(0.5) { DType::I32 } else { DType::I64 }
    }

    fn embedding(&mut self) {
        let table = match self.pick(|g, v| {
            let t = g.ty(v);
            g.vals[v].def == Def::Arg(Role::Param) && t.rank() == 2 && t.dtype.is_float() && t.dims()[0] >= 1
        }) {
            Some(t) if self.chance(0.3) => t,
            _ => {
                let dims = vec![4 + self.below(7) as u64, self.choose(&[2, 4, 8])];
                let dtype = self.float_dtype();
                self.new_param(TensorType::new(dtype, dims))
            }
        };
        let vocab = self.ty(table).dims()[0];
        let reuse = self.ids.get(&vocab).cloned().unwrap_or_default();
        let ids = if !reuse.is_empty() && self.chance(0.4) {
            self.choose(&reuse)
        } else {
            let mut dims = vec![1 + self.below(4) as u64];
            if self.chance(0.5) {
                dims.push(2 + self.below(4) as u64);
            }
            let dtype = self.index_dtype();
            let name = self.name("ids");
            self.arg(name, TensorType::new(dtype, dims), Role::Input)
        };
        if self.emit_recorded(OpKind::Embedding, &[table, ids], &[]).is_some() && !reuse.contains(&ids) {
            self.ids.entry(vocab).or_default().push(ids);
        }
    }

    /// cross_entropy of [N,C] logits (from the pool, a new linear head, or a new input).
    fn loss(&mut self) {
        let logits = match self.pick(|g, v| {
            let t = g.ty(v);
            t.dtype.is_float() && t.rank() == 2 && t.dims()[1] >= 2
        }) {
            Some(l) if self.chance(0.6) => l,
            _ => {
                let c = 2 + self.below(7) as u64;
                match self.pick(|g, v| g.ty(v).dtype.is_float() && g.ty(v).rank() == 2) {
                    Some(h) => {
                        let t = self.ty(h).clone();
                        let weight = TensorType::new(t.dtype, vec![t.dims()[1], c]);
                        if numel(&weight) > MAX_NUMEL {
                            return;
                        }
                        let w = self.param(weight);
                        match self.emit(OpKind::Matmul, &[h, w], &[]) {
                            Some(l) => l,
                            None => return,
                        }
                    }
                    None => {
                        let n = 1 + self.below(6) as u64;
                        let dtype = self.float_dtype();
                        self.new_input(TensorType::new(dtype, vec![n, c]))
                    }
                }
            }
        };
        let (n, c) = (self.ty(logits).dims()[0], self.ty(logits).dims()[1]);
        let labels = match self.labels.get(&(n, c)).copied() {
            Some(l) if self.chance(0.5) => l,
            _ => {
                let dtype = self.index_dtype();
                let name = self.name("y");
                self.arg(name, TensorType::new(dtype, vec![n]), Role::Input)
            }
        };
        let Some(loss) = self.emit_recorded(OpKind::CrossEntropy, &[logits, labels], &[]) else { return };
        self.labels.entry((n, c)).or_insert(labels);
        self.losses.push(loss);
        if self.chance(0.5) {
            let index = self.records.len() - 1;
            self.backward_of(index);
        }
    }

    fn backward(&mut self) {
        let usable: Vec<usize> = (0..self.records.len()).filter(|&i| self.record_usable(i)).collect();
        if !usable.is_empty() {
            // Favour recent records: backward runs in reverse order of the forward.
            let i = if self.chance(0.5) { usable[usable.len() - 1] } else { self.choose(&usable) };
            self.backward_of(i);
        }
    }

    /// Whether the values a record's backward op reads are still readable.
    fn record_usable(&self, i: usize) -> bool {
        let r = &self.records[i];
        let needed: Vec<usize> = match r.kind {
            OpKind::Relu | OpKind::Softmax => vec![r.output],
            OpKind::Gelu | OpKind::MaxPool2d => vec![r.inputs[0]],
            OpKind::LayerNorm | OpKind::BatchNorm => vec![r.inputs[0], r.inputs[1]],
            OpKind::Conv2d | OpKind::CrossEntropy => vec![r.inputs[0], r.inputs[1]],
            OpKind::Embedding => vec![r.inputs[1]],
            _ => vec![],
        };
        needed.iter().all(|&v| self.readable(v))
    }

    /// The backward op of record `i`, with a dy of the right type.
    fn backward_of(&mut self, i: usize) {
        let r = self.records[i].clone();
        let out_ty = self.ty(r.output).clone();
        match r.kind {
            OpKind::Relu => {
                let dy = self.derive(&out_ty, None);
                self.emit(OpKind::ReluBackward, &[dy, r.output], &[]);
            }
            OpKind::Gelu => {
                let dy = self.derive(&out_ty, None);
                self.emit(OpKind::GeluBackward, &[dy, r.inputs[0]], &[]);
            }
            OpKind::Softmax => {
                let dy = self.derive(&out_ty, None);
                self.emit(OpKind::SoftmaxBackward, &[dy, r.output], &[("axis", r.attrs.get("axis").unwrap().clone())]);
            }
            OpKind::LayerNorm | OpKind::BatchNorm => {
                let kind = if r.kind == OpKind::LayerNorm { OpKind::LayerNormBackward } else { OpKind::BatchNormBackward };
                let dy = self.derive(&out_ty, None);
                let eps = r.attrs.get("eps").unwrap().clone();
                if let Some(outs) = self.emit_named(kind, &[dy, r.inputs[0], r.inputs[1]], &[("eps", eps)], None) {
                    self.grads.insert(r.inputs[1], outs[1]);
                    self.grads.insert(r.inputs[2], outs[2]);
                }
            }
            OpKind::Conv2d => {
                let dy = self.derive(&out_ty, None);
                let given = [("stride", r.attrs.get("stride").unwrap().clone()), ("padding", r.attrs.get("padding").unwrap().clone())];
                if let Some(outs) = self.emit_named(OpKind::Conv2dBackward, &[dy, r.inputs[0], r.inputs[1]], &given, None) {
                    self.grads.insert(r.inputs[1], outs[1]);
                }
            }
            OpKind::MaxPool2d => {
                let dy = self.derive(&out_ty, None);
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                self.emit(OpKind::MaxPool2dBackward, &[dy, r.inputs[0]], &given);
            }
            OpKind::Embedding => {
                let dy = self.derive(&out_ty, None);
                let vocab = self.ty(r.inputs[0]).dims()[0] as i64;
                if let Some(d) = self.emit(OpKind::EmbeddingBackward, &[dy, r.inputs[1]], &[("vocab", Attr::Int(vocab))]) {
                    self.grads.insert(r.inputs[0], d);
                }
            }
            OpKind::CrossEntropy => {
                let dloss = if self.chance(0.6) {
                    let dtype = out_ty.dtype;
                    self.emit(OpKind::Fill, &[], &[("shape", ints(&[])), ("dtype", Attr::DType(dtype)), ("value", Attr::Float(1.0))])
                } else {
                    Some(self.derive(&out_ty, None))
                };
                let Some(dloss) = dloss else { return };
                self.emit(OpKind::CrossEntropyBackward, &[dloss, r.inputs[0], r.inputs[1]], &[]);
            }
            _ => {}
        }
    }

    /// A value of type `ty` computed from the pool (see the module docs), never one whose
    /// root is `exclude` (the target of the update it feeds).
    fn derive(&mut self, ty: &TensorType, exclude: Option<usize>) -> usize {
        let ok = move |g: &Gen, v: usize| Some(g.root[v]) != exclude;
        let float = ty.dtype.is_float();
        if self.chance(0.8)
            && let Some(v) = self.pick(|g, v| ok(g, v) && g.ty(v) == ty)
        {
            if float && self.chance(0.3)
                && let Some(s) = self.emit(OpKind::MulScalar, &[v], &[("value", Attr::Float(0.5))])
            {
                return s;
            }
            return v;
        }
        if self.chance(0.8)
            && let Some(v) = self.pick(|g, v| ok(g, v) && g.ty(v).shape == ty.shape && g.ty(v).dtype.is_float())
            && let Some(c) = self.cast_to(v, ty.dtype)
        {
            return c;
        }
        if ty.rank() == 2
            && float
            && self.chance(0.8)
            && let Some(v) = self.matmul_to(ty, exclude)
        {
            return v;
        }
        if self.chance(0.8)
            && let Some(x) = self.pick(|g, v| {
                let t = g.ty(v);
                ok(g, v) && t.dtype.is_float() && t.rank() > ty.rank() && t.dims().ends_with(ty.dims())
            })
        {
            let lead = (self.ty(x).rank() - ty.rank()) as i64;
            if let Some(s) = self.emit(OpKind::Sum, &[x], &[("axes", Attr::Ints((0..lead).collect()))])
                && let Some(c) = self.cast_to(s, ty.dtype)
            {
                return c;
            }
        }
        if self.chance(0.8)
            && let Some(x) = self.pick(|g, v| {
                let t = g.ty(v);
                let fits = t.rank() <= ty.rank()
                    && t.dims().iter().rev().zip(ty.dims().iter().rev()).all(|(&a, &b)| a == b || a == 1);
                ok(g, v) && t.dtype.is_float() && fits && t.shape != ty.shape
            })
            && let Some(e) = self.emit(OpKind::Expand, &[x], &[("shape", ints(ty.dims()))])
            && let Some(c) = self.cast_to(e, ty.dtype)
        {
            return c;
        }
        let value = if float { 0.01 } else { 0.0 };
        self.emit(OpKind::Fill, &[], &[("shape", ints(ty.dims())), ("dtype", Attr::DType(ty.dtype)), ("value", Attr::Float(value))])
            .expect("a fill of a valid type is valid")
    }

    /// `[M,N]` as `a @ b` with transposes, from pool values `a` with M in its dims.
    fn matmul_to(&mut self, ty: &TensorType, exclude: Option<usize>) -> Option<usize> {
        let (m, n) = (ty.dims()[0], ty.dims()[1]);
        let a = self.pick(|g, v| {
            let t = g.ty(v);
            Some(g.root[v]) != exclude && t.dtype.is_float() && t.rank() == 2 && t.dims().contains(&m)
        })?;
        let (adt, adims) = (self.ty(a).dtype, self.ty(a).dims().to_vec());
        // a = [R, M] read transposed, or [M, R].
        let ta = adims[1] == m && (adims[0] != m || self.chance(0.5));
        let r = if ta { adims[0] } else { adims[1] };
        let b = self.pick(|g, v| {
            let t = g.ty(v);
            Some(g.root[v]) != exclude && t.dtype == adt && (t.dims() == [r, n] || t.dims() == [n, r])
        });
        let b = match b {
            Some(b) => b,
            None if r * n <= MAX_NUMEL && self.chance(0.5) => self.new_input(TensorType::new(adt, vec![r, n])),
            None => return None,
        };
        let tb = self.ty(b).dims() != [r, n];
        let out = self.emit(OpKind::Matmul, &[a, b], &[("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))])?;
        self.cast_to(out, ty.dtype)
    }

    /// The step count `t_new = t + 1`, made once and shared by every adam.
    fn step_count(&mut self) -> Option<usize> {
        if let Some(t_new) = self.step_count {
            return Some(t_new);
        }
        let t = self.arg("t".into(), TensorType::new(DType::F32, vec![]), Role::State);
        let t_new =
            self.emit_named(OpKind::AddScalar, &[t], &[("value", Attr::Float(1.0))], Some(vec!["t_new".into()]))?[0];
        self.updates.push((t, t_new));
        self.retired[t] = true;
        self.step_count = Some(t_new);
        Some(t_new)
    }

    fn state_like(&mut self, prefix: &str, p: usize) -> usize {
        let name = format!("{prefix}_{}", self.vals[p].name);
        let ty = self.ty(p).clone();
        self.arg(name, ty, Role::State)
    }

    /// Updates param or state `p` (an optimizer or a hand-written update) and retires it.
    fn update(&mut self, p: usize) {
        let ty = self.ty(p).clone();
        let kind = self.updatable.iter().find(|&&(v, _)| v == p).map(|&(_, k)| k).expect("p is updatable");
        let g = match self.grads.get(&p) {
            Some(&g) if self.readable(g) && self.root[g] != p => g,
            _ => self.derive(&ty, Some(p)),
        };
        let pname = self.vals[p].name.clone();
        let new = |suffix: &str| format!("{pname}{suffix}");
        if kind == Updatable::State {
            let Some(decayed) = self.emit(OpKind::MulScalar, &[p], &[("value", Attr::Float(0.9))]) else { return };
            if let Some(o) = self.emit_named(OpKind::Add, &[decayed, g], &[], Some(vec![new("_new")])) {
                self.finish_update(&[(p, o[0])]);
            }
            return;
        }
        let lr = Attr::Float(self.choose(&[0.1, 0.01, 0.5]));
        match self.below(20) {
            0..=6 => {
                if let Some(o) = self.emit_named(OpKind::Sgd, &[p, g], &[("lr", lr)], Some(vec![new("_new")])) {
                    self.finish_update(&[(p, o[0])]);
                }
            }
            7..=10 => {
                let buf = self.state_like("buf", p);
                let mut given = vec![("lr", lr)];
                if self.chance(0.5) {
                    given.push(("momentum", Attr::Float(0.5)));
                }
                let names = Some(vec![new("_new"), format!("buf_{pname}_new")]);
                if let Some(o) = self.emit_named(OpKind::SgdMomentum, &[p, g, buf], &given, names) {
                    self.finish_update(&[(p, o[0]), (buf, o[1])]);
                }
            }
            11..=17 => {
                let Some(t_new) = self.step_count() else { return };
                let (m, v) = (self.state_like("m", p), self.state_like("v", p));
                let kind = if self.chance(0.5) { OpKind::Adam } else { OpKind::Adamw };
                let mut given = vec![];
                if self.chance(0.5) {
                    given.push(("lr", Attr::Float(0.01)));
                }
                if self.chance(0.3) {
                    given.push(("beta2", Attr::Float(0.99)));
                }
                let names = Some(vec![new("_new"), format!("m_{pname}_new"), format!("v_{pname}_new")]);
                if let Some(o) = self.emit_named(kind, &[p, g, m, v, t_new], &given, names) {
                    self.finish_update(&[(p, o[0]), (m, o[1]), (v, o[2])]);
                }
            }
            _ => {
                // By hand: p + (-lr)·g, written over p in place.
                let Some(step) = self.emit(OpKind::MulScalar, &[g], &[("value", Attr::Float(-0.01))]) else { return };
                if let Some(o) = self.emit_named(OpKind::Add, &[p, step], &[], Some(vec![new("_new")])) {
                    self.finish_update(&[(p, o[0])]);
                }
            }
        }
    }

    fn finish_update(&mut self, pairs: &[(usize, usize)]) {
        for &(target, value) in pairs {
            self.updates.push((target, value));
            self.retired[target] = true;
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
