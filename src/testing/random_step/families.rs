//! The op families the generator draws from: elementwise chains, broadcasting, activations,
//! math functions, attention (written out and fused), matmuls, reductions, views, casts,
//! constants, normalisation, conv blocks, resampling, masks, embeddings, dropout. Each
//! builds a few valid ops from values in the pool (or new arguments).

use super::*;

impl Gen {
    pub(super) fn scalar_op(&mut self, x: usize) -> Option<usize> {
        let kind = if self.chance(0.5) { OpKind::AddScalar } else { OpKind::MulScalar };
        let value = self.choose(&[0.5, 2.0, -1.0, 0.1, 3.0, -0.25]);
        self.emit(kind, &[x], &[("value", Attr::Float(value))])
    }

    /// A second operand for `a` in a binary op of dtype `dtype`.
    pub(super) fn operand_for(&mut self, a: usize) -> usize {
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

    pub(super) fn binary(&mut self) {
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

    /// An activation of `x`, recorded for its backward op: relu, gelu (either form), silu,
    /// sigmoid, tanh, hardswish or hardsigmoid.
    pub(super) fn activation(&mut self, x: usize) -> Option<usize> {
        let kinds = [OpKind::Relu, OpKind::Gelu, OpKind::Silu, OpKind::Sigmoid, OpKind::Tanh, OpKind::Hardswish, OpKind::Hardsigmoid];
        let kind = self.choose(&kinds);
        let given = if kind == OpKind::Gelu && self.chance(0.5) { vec![("approximate", Attr::Bool(false))] } else { vec![] };
        self.emit_recorded(kind, &[x], &given)
    }

    /// A math function where it is defined and finite on any input: neg and integer powers
    /// of x itself; cumsum, topk's values, and argmax (cast back to x's dtype); exp of tanh(x) (within [1/e, e]); log, sqrt, rsqrt and fractional powers
    /// of x² + 1 (at least 1).
    pub(super) fn math(&mut self) -> Option<usize> {
        let x = self.float_value(0, 4);
        match self.below(7) {
            0 => self.emit(OpKind::Neg, &[x], &[]),
            5 => {
                let rank = self.ty(x).rank() as i64;
                if rank == 0 {
                    return self.emit(OpKind::Neg, &[x], &[]);
                }
                let axis = self.below(rank as usize) as i64 - if self.chance(0.5) { rank } else { 0 };
                if self.chance(0.25) {
                    // The k largest (or smallest) along the axis: their values.
                    let k = self.below(self.ty(x).dims()[axis.rem_euclid(rank) as usize] as usize + 1) as i64;
                    let largest = self.chance(0.7);
                    let given = [("k", Attr::Int(k)), ("axis", Attr::Int(axis)), ("largest", Attr::Bool(largest))];
                    return self.emit(OpKind::Topk, &[x], &given);
                }
                if self.chance(0.3) {
                    // The positions of the maxima, as numbers of x's dtype (no gradient).
                    let keepdim = self.chance(0.5);
                    let at = self.emit(OpKind::Argmax, &[x], &[("axis", Attr::Int(axis)), ("keepdim", Attr::Bool(keepdim))])?;
                    return self.emit(OpKind::Cast, &[at], &[("to", Attr::DType(self.ty(x).dtype))]);
                }
                let reverse = self.chance(0.3);
                self.emit(OpKind::Cumsum, &[x], &[("axis", Attr::Int(axis)), ("reverse", Attr::Bool(reverse))])
            }
            4 => {
                let kind = self.choose(&[OpKind::Sin, OpKind::Cos, OpKind::Erf]);
                self.emit(kind, &[x], &[])
            }
            1 => {
                let exponent = self.choose(&[0.0, 1.0, 2.0, 3.0]);
                self.emit(OpKind::PowScalar, &[x], &[("exponent", Attr::Float(exponent))])
            }
            2 => {
                let t = self.emit(OpKind::Tanh, &[x], &[])?;
                self.emit(OpKind::Exp, &[t], &[])
            }
            _ => {
                let square = self.emit(OpKind::Mul, &[x, x], &[])?;
                let positive = self.emit(OpKind::AddScalar, &[square], &[("value", Attr::Float(1.0))])?;
                match self.below(4) {
                    0 => self.emit(OpKind::Log, &[positive], &[]),
                    1 => self.emit(OpKind::Sqrt, &[positive], &[]),
                    2 => self.emit(OpKind::Rsqrt, &[positive], &[]),
                    _ => self.emit(OpKind::PowScalar, &[positive], &[("exponent", Attr::Float(-1.5))]),
                }
            }
        }
    }

    /// A chain of elementwise ops on one value: each result dies at the next op.
    pub(super) fn chain(&mut self) {
        let mut x = self.float_value(0, 4);
        for _ in 0..2 + self.below(3) {
            let next = match self.below(8) {
                0 => self.emit(OpKind::Relu, &[x], &[]),
                1 => self.emit(OpKind::Gelu, &[x], &[]),
                2 => self.emit(OpKind::Mul, &[x, x], &[]),
                6 => {
                    let kind = self.choose(&[OpKind::Silu, OpKind::Sigmoid, OpKind::Tanh, OpKind::Hardswish, OpKind::Hardsigmoid]);
                    self.emit(kind, &[x], &[])
                }
                7 => self.emit(OpKind::Neg, &[x], &[]),
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

    pub(super) fn softmax(&mut self, x: usize) -> Option<usize> {
        let rank = self.ty(x).rank() as i64;
        let axis = self.below(2 * rank as usize) as i64 - rank;
        self.emit_recorded(OpKind::Softmax, &[x], &[("axis", Attr::Int(axis))])
    }

    /// A value of `v`'s type from the pool (not `v` itself half the time), or a new input.
    pub(super) fn same_type(&mut self, v: usize) -> usize {
        let ty = self.ty(v).clone();
        if self.chance(0.5)
            && let Some(o) = self.pick(|g, o| o != v && g.ty(o) == &ty)
        {
            return o;
        }
        if self.chance(0.3) { v } else { self.new_input(ty) }
    }

    /// softmax(causal_mask(q @ kᵀ · s)) @ v, with batch dims.
    pub(super) fn attention(&mut self) {
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

    /// `attention(q, k, v)` over heads: grouped-query heads (H a multiple of Hkv) and
    /// causal masks sometimes, T ≠ S and E ≠ Ev sometimes, `out` rows before heads
    /// (`transpose_out`) sometimes, the backward op right away sometimes. q, k and v come
    /// from [`heads`](Self::heads).
    pub(super) fn fused_attention(&mut self) {
        let dtype = self.float_dtype();
        let batch: Vec<u64> = match self.below(3) {
            0 => vec![],
            1 => vec![1],
            _ => vec![2],
        };
        let kv_heads = self.choose(&[1, 2]);
        let group = self.choose(&[1, 1, 2, 4]);
        let (t, e) = (self.choose(&[1, 2, 3, 4, 6]), self.choose(&[1, 2, 4, 8]));
        let s = if self.chance(0.6) { t } else { self.choose(&[1, 2, 5, 8]) };
        let ev = if self.chance(0.7) { e } else { self.choose(&[1, 3, 4]) };
        let Some(q) = self.heads(dtype, &batch, kv_heads * group, t, e) else { return };
        let Some(k) = self.heads(dtype, &batch, kv_heads, s, e) else { return };
        let Some(v) = self.heads(dtype, &batch, kv_heads, s, ev) else { return };
        let causal = self.chance(0.5);
        let scale = if self.chance(0.7) { 1.0 / (e as f64).sqrt() } else { self.choose(&[0.1, 1.0, 2.0]) };
        let transpose_out = self.chance(0.5);
        let given =
            [("causal", Attr::Bool(causal)), ("scale", Attr::Float(scale)), ("transpose_out", Attr::Bool(transpose_out))];
        // Sometimes PyTorch's attn_mask: a bias of the scores' shape or one that broadcasts
        // to it (a padding mask [.., 1, 1, S], a position bias [H, T, S]).
        let heads = kv_heads * group;
        let bias = if self.chance(0.35) {
            let full = [&batch[..], &[heads, t, s]].concat();
            let shape = match self.below(3) {
                0 => full,
                1 => [&batch[..], &[1, 1, s]].concat(),
                _ => vec![heads, t, s],
            };
            Some(self.new_input(TensorType::new(dtype, shape)))
        } else {
            None
        };
        // Sometimes dropout on the probabilities (PyTorch's dropout_p): dropout_attention,
        // with a bias of [] (0) where there is no mask.
        let recorded = if self.chance(0.25) {
            let bias = match bias {
                Some(bias) => bias,
                None => self.new_input(TensorType::new(dtype, vec![])),
            };
            let seed = self.dropout_seed();
            let mut given = given.to_vec();
            given.push(("p", Attr::Float(self.choose(&[0.0, 0.2, 0.5]))));
            given.push(("stream", Attr::Int(self.next_stream())));
            self.emit_recorded(OpKind::DropoutAttention, &[q, k, v, bias, seed], &given)
        } else {
            match bias {
                Some(bias) => self.emit_recorded(OpKind::MaskedAttention, &[q, k, v, bias], &given),
                None => self.emit_recorded(OpKind::Attention, &[q, k, v], &given),
            }
        };
        if recorded.is_some() && self.chance(0.3) {
            self.backward_of(self.records.len() - 1);
        }
    }

    /// A float `[..batch, heads, len, width]` value of `dtype`: half the time a projection
    /// `x @ W` of a `[B·len, D]` value (from the pool or new) split into heads, reshaped to
    /// `[..batch, len, heads, width]` and transposed to `[..batch, heads, len, width]` (a
    /// strided view, as models write it); else a value of that type from the pool or a new
    /// input. `None` if it would be too large or an op is refused.
    fn heads(&mut self, dtype: DType, batch: &[u64], heads: u64, len: u64, width: u64) -> Option<usize> {
        let ty = TensorType::new(dtype, [batch, &[heads, len, width]].concat());
        if numel(&ty) > MAX_NUMEL {
            return None;
        }
        if self.chance(0.5) {
            let rows = batch.iter().product::<u64>() * len;
            let x = match self.pick(|g, v| g.ty(v).dtype == dtype && g.ty(v).rank() == 2 && g.ty(v).dims()[0] == rows) {
                Some(x) => x,
                None => {
                    let d = self.choose(&DIMS[1..]);
                    self.new_input(TensorType::new(dtype, vec![rows, d]))
                }
            };
            let weight = TensorType::new(dtype, vec![self.ty(x).dims()[1], heads * width]);
            if numel(&weight) > MAX_NUMEL {
                return None;
            }
            let w = self.param(weight);
            let projected = self.emit(OpKind::Matmul, &[x, w], &[])?;
            let split_shape = ints(&[batch, &[len, heads, width]].concat());
            let split = self.emit(OpKind::Reshape, &[projected], &[("shape", split_shape)])?;
            let b = batch.len() as i64;
            let perm: Vec<i64> = (0..b).chain([b + 1, b, b + 2]).collect();
            return self.emit(OpKind::Transpose, &[split], &[("perm", Attr::Ints(perm))]);
        }
        if self.chance(0.3)
            && let Some(v) = self.pick(|g, v| g.ty(v) == &ty)
        {
            return Some(v);
        }
        Some(self.new_input(ty))
    }

    pub(super) fn matmul(&mut self) {
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
    pub(super) fn linear(&mut self) {
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
        if self.chance(2.0 / 3.0) {
            self.activation(h2);
        }
    }

    pub(super) fn reduce(&mut self) {
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
    pub(super) fn factor_shape(&mut self, n: u64) -> Vec<u64> {
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

    pub(super) fn view(&mut self) {
        match self.below(6) {
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
            4 => {
                // A detach: the values computed from it carry no gradient.
                let Some(x) = self.pick(|_, _| true) else { return };
                self.emit(OpKind::Detach, &[x], &[]);
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

    /// A slice (recorded, for its backward op), a select, a concatenation of values that
    /// agree but along one axis (a value with a slice of itself or with another), or a write
    /// into a slice (`slice_scatter`).
    pub(super) fn slices(&mut self) {
        let Some(x) = self.pick(|g, v| g.ty(v).rank() >= 1 && g.ty(v).dims().iter().all(|&d| d >= 1)) else { return };
        let dims = self.ty(x).dims().to_vec();
        let axis = self.below(dims.len());
        let spelled = if self.chance(0.3) { axis as i64 - dims.len() as i64 } else { axis as i64 };
        match self.below(4) {
            0 => {
                let start = self.below(dims[axis] as usize) as i64;
                let end = start + 1 + self.below(dims[axis] as usize - start as usize) as i64;
                let step = 1 + self.below(2) as i64;
                let attrs = [("axis", Attr::Int(spelled)), ("start", Attr::Int(start)), ("end", Attr::Int(end)), ("step", Attr::Int(step))];
                self.emit_recorded(OpKind::Slice, &[x], &attrs);
            }
            1 => {
                let index = self.below(dims[axis] as usize) as i64;
                self.emit(OpKind::Select, &[x], &[("axis", Attr::Int(spelled)), ("index", Attr::Int(index))]);
            }
            3 => {
                let start = self.below(dims[axis] as usize) as i64;
                let end = start + 1 + self.below(dims[axis] as usize - start as usize) as i64;
                let step = 1 + self.below(2) as i64;
                let mut part = dims.clone();
                part[axis] = ((end - start + step - 1) / step) as u64;
                let ty = TensorType::new(self.ty(x).dtype, part);
                let src = self.derive(&ty, None);
                let attrs = [("axis", Attr::Int(spelled)), ("start", Attr::Int(start)), ("end", Attr::Int(end)), ("step", Attr::Int(step))];
                self.emit(OpKind::SliceScatter, &[x, src], &attrs);
            }
            _ => {
                let n = 1 + self.below(dims[axis] as usize) as i64;
                let attrs = [("axis", Attr::Int(axis as i64)), ("start", Attr::Int(0)), ("end", Attr::Int(n))];
                let Some(part) = self.emit(OpKind::Slice, &[x], &attrs) else { return };
                let ty = self.ty(x).clone();
                let other = self.derive(&ty, None);
                let inputs = if self.chance(0.5) { vec![x, part, other] } else { vec![part, x] };
                self.emit(OpKind::Cat, &inputs, &[("axis", Attr::Int(spelled))]);
            }
        }
    }

    pub(super) fn cast(&mut self) {
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

    pub(super) fn fill(&mut self) {
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
        let mut attrs = vec![("shape", ints(&shape)), ("dtype", Attr::DType(dtype)), ("value", Attr::Float(value))];
        // An arange (PyTorch's positions): an integer step for integer dtypes.
        if dtype != DType::Bool && self.chance(0.4) {
            let step = if dtype.is_float() { self.choose(&[1.0, -0.5, 0.25]) } else { self.choose(&[1.0, -3.0]) };
            attrs.push(("step", Attr::Float(step)));
        }
        self.emit(OpKind::Fill, &[], &attrs);
    }

    pub(super) fn eps(&mut self) -> Vec<(&'static str, Attr)> {
        if self.chance(0.3) { vec![("eps", Attr::Float(1e-6))] } else { vec![] }
    }

    pub(super) fn layer_norm(&mut self, x: usize) -> Option<usize> {
        let t = self.ty(x).clone();
        let p = TensorType::new(t.dtype, vec![*t.dims().last()?]);
        let gamma = self.param(p.clone());
        let beta = self.param(p);
        let eps = self.eps();
        self.emit_recorded(OpKind::LayerNorm, &[x, gamma, beta], &eps)
    }

    pub(super) fn rms_norm(&mut self, x: usize) -> Option<usize> {
        let t = self.ty(x).clone();
        let gamma = self.param(TensorType::new(t.dtype, vec![*t.dims().last()?]));
        let eps = self.eps();
        self.emit_recorded(OpKind::RmsNorm, &[x, gamma], &eps)
    }

    pub(super) fn batch_norm(&mut self, x: usize) -> Option<usize> {
        let t = self.ty(x).clone();
        // A half x's params are f32 sometimes, as under autocast.
        let half = matches!(t.dtype, DType::F16 | DType::Bf16);
        let dtype = if half && self.chance(0.5) { DType::F32 } else { t.dtype };
        let p = TensorType::new(dtype, vec![*t.dims().get(1)?]);
        let gamma = self.param(p.clone());
        let beta = self.param(p);
        let eps = self.eps();
        self.emit_recorded(OpKind::BatchNorm, &[x, gamma, beta], &eps)
    }

    /// A small float [N,C,H,W] value: from the pool or a new input.
    pub(super) fn nchw(&mut self) -> usize {
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

    /// A convolution, then maybe batch_norm, relu, max_pool2d: conv2d (sometimes grouped,
    /// depthwise among them, sometimes dilated) or, a third of the time, conv_transpose2d
    /// (likewise, and with output_padding where its stride or dilation allows one); or,
    /// sometimes, a conv3d instead.
    pub(super) fn conv_block(&mut self) {
        if self.chance(0.2) {
            self.conv3d();
            return;
        }
        let x = self.nchw();
        let t = self.ty(x).clone();
        let (c, h, w) = (t.dims()[1], t.dims()[2], t.dims()[3]);
        // Groups: a divisor of C above 1 sometimes (C itself: depthwise).
        let divisors: Vec<u64> = (2..=c).filter(|g| c.is_multiple_of(*g)).collect();
        let groups = if !divisors.is_empty() && self.chance(0.4) { self.choose(&divisors) } else { 1 };
        let k = groups * (1 + self.below(if groups > 1 { 2 } else { 4 }) as u64);
        let dilation = [1 + u64::from(self.chance(0.25)), 1 + u64::from(self.chance(0.25))];
        let stride = [1 + self.below(2) as u64, 1 + self.below(2) as u64];
        let padding = [self.below(2) as u64, self.below(2) as u64];
        let first_record = self.records.len();
        let mut given = vec![("stride", ints(&stride)), ("padding", ints(&padding))];
        if dilation != [1, 1] {
            given.push(("dilation", ints(&dilation)));
        }
        if groups > 1 {
            given.push(("groups", Attr::Int(groups as i64)));
        }
        let y = if self.chance(1.0 / 3.0) {
            // conv_transpose2d: w [C, K/groups, R, S]; output_padding 1 only below the
            // stride or the dilation.
            let (r, s) = (1 + self.below(3) as u64, 1 + self.below(3) as u64);
            let weight = TensorType::new(t.dtype, vec![c, k / groups, r, s]);
            if numel(&weight) > MAX_NUMEL {
                return;
            }
            let weight = self.param(weight);
            let output_padding: Vec<u64> =
                (0..2).map(|i| u64::from(stride[i].max(dilation[i]) > 1 && self.chance(0.5))).collect();
            given.push(("output_padding", ints(&output_padding)));
            self.emit_recorded(OpKind::ConvTranspose2d, &[x, weight], &given)
        } else {
            // conv2d: w [K, C/groups, R, S], its dilated extent within the input.
            let taps = |g: &mut Gen, size: u64, dilation: u64| (1 + g.below(3) as u64).min((size - 1) / dilation + 1);
            let (r, s) = (taps(self, h, dilation[0]), taps(self, w, dilation[1]));
            let weight = TensorType::new(t.dtype, vec![k, c / groups, r, s]);
            if numel(&weight) > MAX_NUMEL {
                return;
            }
            let weight = self.param(weight);
            self.emit_recorded(OpKind::Conv2d, &[x, weight], &given)
        };
        let Some(mut y) = y else { return };
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

    /// conv3d of a new small [N,C,D,H,W] input: grouped sometimes, strides, padding and
    /// dilation per dimension, its backward op right away sometimes.
    fn conv3d(&mut self) {
        let dtype = self.float_dtype();
        let groups = self.choose(&[1, 1, 2]);
        let c = groups * (1 + self.below(2) as u64);
        let k = groups * (1 + self.below(2) as u64);
        let sizes: Vec<u64> = (0..3).map(|_| 2 + self.below(4) as u64).collect();
        let dilation: Vec<u64> = (0..3).map(|_| 1 + u64::from(self.chance(0.25))).collect();
        let stride: Vec<u64> = (0..3).map(|_| 1 + self.below(2) as u64).collect();
        let padding: Vec<u64> = (0..3).map(|_| self.below(2) as u64).collect();
        let taps: Vec<u64> = (0..3).map(|i| (1 + self.below(3) as u64).min((sizes[i] - 1) / dilation[i] + 1)).collect();
        let n = 1 + self.below(2) as u64;
        let x = self.new_input(TensorType::new(dtype, [&[n, c][..], &sizes].concat()));
        let weight = self.param(TensorType::new(dtype, [&[k, c / groups][..], &taps].concat()));
        let mut given = vec![("stride", ints(&stride)), ("padding", ints(&padding)), ("dilation", ints(&dilation))];
        if groups > 1 {
            given.push(("groups", Attr::Int(groups as i64)));
        }
        if self.emit_recorded(OpKind::Conv3d, &[x, weight], &given).is_some() && self.chance(0.5) {
            self.backward_of(self.records.len() - 1);
        }
    }

    /// The backward ops of the records from `first` on, last first (as backprop runs).
    pub(super) fn backward_chain(&mut self, first: usize) {
        for i in (first..self.records.len()).rev() {
            if self.record_usable(i) {
                self.backward_of(i);
            }
        }
    }

    pub(super) fn pool_op(&mut self, x: usize) -> Option<usize> {
        let kernel = [1 + self.below(3) as u64, 1 + self.below(3) as u64];
        let stride = [1 + self.below(2) as u64, 1 + self.below(2) as u64];
        let padding = [self.below(kernel[0] as usize / 2 + 1) as u64, self.below(kernel[1] as usize / 2 + 1) as u64];
        self.emit_recorded(
            OpKind::MaxPool2d,
            &[x],
            &[("kernel", ints(&kernel)), ("stride", ints(&stride)), ("padding", ints(&padding))],
        )
    }

    /// adaptive_avg_pool2d (global, or to any size: overlapping bins, more bins than pixels)
    /// or upsample_nearest2d or upsample_bilinear2d (align_corners or not; integer factors,
    /// other ratios, down as well as up) of a small
    /// NCHW value, recorded for its backward op, which follows right away sometimes.
    pub(super) fn resample(&mut self) {
        let x = self.nchw();
        if self.chance(0.25) {
            // grid_sample at a new grid of N(0, 1) positions (a third of them outside the
            // image), every mode and padding.
            let t = self.ty(x).clone();
            let (p, q) = (1 + self.below(3) as u64, 1 + self.below(4) as u64);
            let grid = self.new_input(TensorType::new(t.dtype, vec![t.dims()[0], p, q, 2]));
            let given = [
                ("mode", Attr::Str(self.choose(&["bilinear", "bilinear", "nearest"]).to_string())),
                ("padding_mode", Attr::Str(self.choose(&["zeros", "border"]).to_string())),
                ("align_corners", Attr::Bool(self.chance(0.5))),
            ];
            if self.emit_recorded(OpKind::GridSample, &[x, grid], &given).is_some() && self.chance(0.5) {
                self.backward_of(self.records.len() - 1);
            }
            return;
        }
        let (h, w) = (self.ty(x).dims()[2], self.ty(x).dims()[3]);
        let upsample = self.chance(0.5);
        let size = |g: &mut Gen, d: u64| match g.below(3) {
            0 if upsample => d * (1 + g.below(3) as u64),
            0 => 1,
            _ => 1 + g.below(2 * d as usize) as u64,
        };
        let out = [size(self, h), size(self, w)];
        let kind = match upsample {
            true if self.chance(0.5) => OpKind::UpsampleBilinear2d,
            true => OpKind::UpsampleNearest2d,
            false => OpKind::AdaptiveAvgPool2d,
        };
        let mut given = vec![("output_size", ints(&out))];
        if kind == OpKind::UpsampleBilinear2d && self.chance(0.5) {
            given.push(("align_corners", Attr::Bool(true)));
        }
        if self.emit_recorded(kind, &[x], &given).is_some() && self.chance(0.3) {
            self.backward_of(self.records.len() - 1);
        }
    }

    /// A bool value that broadcasts to `ty`'s shape: from the pool sometimes, or a
    /// comparison of a value of that shape (with a number, or an operand as binary ops pick
    /// one), else a new input of that shape with leading dimensions dropped and others set
    /// to 1 at random (a padding mask over attention scores is `[T]` against `[B, H, T, T]`).
    fn mask_for(&mut self, ty: &TensorType) -> usize {
        if self.chance(0.4)
            && let Some(v) = self.pick(|g, v| g.ty(v).shape == ty.shape && g.ty(v).dtype != DType::Bool)
        {
            let op = Attr::Str(self.choose(&["lt", "le", "gt", "ge", "eq", "ne"]).to_string());
            let mask = if self.chance(0.5) {
                let value = self.choose(&[-1.0, 0.0, 0.5]);
                self.emit(OpKind::CompareScalar, &[v], &[("value", Attr::Float(value)), ("op", op)])
            } else {
                let other = self.operand_for(v);
                self.emit(OpKind::Compare, &[v, other], &[("op", op)])
            };
            if let Some(mask) = mask {
                return mask;
            }
        }
        if self.chance(0.4)
            && let Some(m) = self.pick(|g, v| {
                g.ty(v).dtype == DType::Bool && broadcast(&g.ty(v).shape, &ty.shape).is_ok_and(|s| s == ty.shape)
            })
        {
            return m;
        }
        let keep = self.below(ty.rank() + 1);
        let dims = ty.dims()[ty.rank() - keep..].iter().map(|&d| if self.chance(0.3) { 1 } else { d }).collect::<Vec<_>>();
        self.new_input(TensorType::new(DType::Bool, dims))
    }

    /// masked_fill(x, mask, value) or where(cond, a, b) with a and b that broadcast (the
    /// second operand as binary ops pick one: a value of the same type, a bias, a scalar).
    pub(super) fn masking(&mut self) {
        let x = self.float_value(0, 4);
        let ty = self.ty(x).clone();
        let mask = self.mask_for(&ty);
        if self.chance(0.5) {
            let value = self.choose(&[-2.0, 0.0, 0.5, 3.0]);
            self.emit(OpKind::MaskedFill, &[x, mask], &[("value", Attr::Float(value))]);
        } else {
            let other = self.operand_for(x);
            let (a, b) = if self.chance(0.5) { (x, other) } else { (other, x) };
            self.emit(OpKind::Where, &[mask, a, b], &[]);
        }
    }

    pub(super) fn index_dtype(&mut self) -> DType {
        if self.chance(0.5) { DType::I32 } else { DType::I64 }
    }

    pub(super) fn embedding(&mut self) {
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
        if self.chance(0.25) {
            // embedding_bag of the ids read flat, in bags of `every` ids (offsets an arange,
            // so the bags are valid whatever the ids), sum or mean.
            let count = self.ty(ids).dims().iter().product::<u64>();
            let flat = self.emit(OpKind::Reshape, &[ids], &[("shape", ints(&[count]))]);
            let every = 1 + self.below(3) as u64;
            let given = [
                ("shape", ints(&[count.div_ceil(every)])),
                ("dtype", Attr::DType(DType::I64)),
                ("step", Attr::Float(every as f64)),
            ];
            let offsets = self.emit(OpKind::Fill, &[], &given);
            if let (Some(flat), Some(offsets)) = (flat, offsets) {
                let mode = Attr::Str(self.choose(&["sum", "mean"]).to_string());
                self.emit_recorded(OpKind::EmbeddingBag, &[table, flat, offsets], &[("mode", mode)]);
            }
        } else if self.emit_recorded(OpKind::Embedding, &[table, ids], &[]).is_some() && !reuse.contains(&ids) {
            self.ids.entry(vocab).or_default().push(ids);
        }
        if self.chance(0.5) {
            self.gather();
        }
    }

    /// gather of a float value along a random axis by a new index input (each of its
    /// dimensions at most x's but along the axis), recorded for its backward op; and
    /// scatter_add of the gathered values back into x sometimes.
    fn gather(&mut self) {
        let x = self.float_value(1, 4);
        let dims = self.ty(x).dims().to_vec();
        let axis = self.below(dims.len());
        let shape: Vec<u64> = dims
            .iter()
            .enumerate()
            .map(|(d, &n)| if d == axis { 1 + self.below(4) as u64 } else if n > 1 && self.chance(0.3) { n - 1 } else { n })
            .collect();
        let dtype = self.index_dtype();
        let name = self.name("index");
        let index = self.arg(name, TensorType::new(dtype, shape), Role::Input);
        let axis = axis as i64 - if self.chance(0.5) { dims.len() as i64 } else { 0 };
        let Some(picked) = self.emit_recorded(OpKind::Gather, &[x, index], &[("axis", Attr::Int(axis))]) else { return };
        if self.chance(0.5) {
            self.backward_of(self.records.len() - 1);
        }
        if self.chance(0.5) {
            // The picked values added back where they came from (repeated indices add up).
            self.emit(OpKind::ScatterAdd, &[x, index, picked], &[("axis", Attr::Int(axis))]);
        }
    }

    /// dropout of a float value, recorded for its backward op: p from 0 (the identity) to
    /// 0.9 (or, sometimes, `random` noise added to the value instead), each site its own stream (the verifier requires it), every site reading the one
    /// `i64[]` seed input (made at the first dropout; `init_args` fills it like any integer
    /// input).
    pub(super) fn dropout(&mut self) {
        let x = self.float_value(0, 4);
        let seed = self.dropout_seed();
        if self.chance(0.3) {
            // Noise added to x: `random`, uniform or normal, of x's type from its own stream.
            let ty = self.ty(x).clone();
            let shape = Attr::Ints(ty.dims().iter().map(|&d| d as i64).collect());
            let normal = Attr::Bool(self.chance(0.5));
            let given = [("shape", shape), ("dtype", Attr::DType(ty.dtype)), ("stream", Attr::Int(self.next_stream())), ("normal", normal)];
            if let Some(noise) = self.emit(OpKind::Random, &[seed], &given) {
                self.emit(OpKind::Add, &[x, noise], &[]);
            }
            return;
        }
        let p = self.choose(&[0.0, 0.1, 0.5, 0.9]);
        let stream = self.next_stream();
        self.emit_recorded(OpKind::Dropout, &[x, seed], &[("p", Attr::Float(p)), ("stream", Attr::Int(stream))]);
    }

    /// The step's one `i64[]` seed input, made at its first reader.
    fn dropout_seed(&mut self) -> usize {
        match self.dropout_seed {
            Some(seed) => seed,
            None => {
                let name = self.name("seed");
                let seed = self.arg(name, TensorType::new(DType::I64, vec![]), Role::Input);
                self.dropout_seed = Some(seed);
                seed
            }
        }
    }

    /// A stream no op drawing random numbers has used yet (the verifier requires each
    /// site's own).
    fn next_stream(&self) -> i64 {
        self.ops.iter().filter(|op| op.kind.def().draws.is_some()).count() as i64
    }
}
