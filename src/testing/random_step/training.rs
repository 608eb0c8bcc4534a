//! The training part of a random step: losses, backward ops of recorded forward ops,
//! gradients of each param's type, and the updates (optimizers or by hand).

use super::*;

impl Gen {
    /// cross_entropy of [N,C] logits (from the pool, a new linear head, or a new input).
    pub(super) fn loss(&mut self) {
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
        // Sometimes PyTorch's options: a class that is ignored (only with 3+ rows of 3+
        // classes, so that rarely every row is ignored: a NaN loss), label smoothing.
        let mut given = Vec::new();
        if n >= 3 && c >= 3 && self.chance(0.3) {
            given.push(("ignore_index", Attr::Int(self.below(c as usize) as i64)));
        }
        if self.chance(0.3) {
            given.push(("label_smoothing", Attr::Float(self.choose(&[0.1, 0.5, 1.0]))));
        }
        // Half logits: sometimes CUDA autocast's loss, f32 (its backward's dloss too).
        if matches!(self.ty(logits).dtype, DType::F16 | DType::Bf16) && self.chance(0.5) {
            given.push(("f32_loss", Attr::Bool(true)));
        }
        // Sometimes the loss fused with a projection of new rows, in chunks of any size.
        if self.chance(0.2) {
            let (dtype, hidden) = (self.ty(logits).dtype, 1 + self.below(8) as u64);
            let x = self.new_input(TensorType::new(dtype, vec![n, hidden]));
            let weight = self.new_input(TensorType::new(dtype, vec![c, hidden]));
            given.push(("rows", Attr::Int(1 + self.below(n as usize) as i64)));
            if let Some(loss) = self.emit(OpKind::LinearCrossEntropy, &[x, weight, labels], &given) {
                self.losses.push(loss);
            }
            return;
        }
        let Some(loss) = self.emit_recorded(OpKind::CrossEntropy, &[logits, labels], &given) else { return };
        self.labels.entry((n, c)).or_insert(labels);
        self.losses.push(loss);
        if self.chance(0.5) {
            let index = self.records.len() - 1;
            self.backward_of(index);
        }
    }

    /// bce_with_logits of a float value and targets of its type (from the pool, the logits
    /// themselves, or a new input), recorded for its backward op.
    pub(super) fn binary_loss(&mut self) {
        let logits = self.float_value(0, 4);
        let targets = self.same_type(logits);
        let Some(loss) = self.emit_recorded(OpKind::BceWithLogits, &[logits, targets], &[]) else { return };
        self.losses.push(loss);
        if self.chance(0.5) {
            self.backward_of(self.records.len() - 1);
        }
    }

    pub(super) fn backward(&mut self) {
        let usable: Vec<usize> = (0..self.records.len()).filter(|&i| self.record_usable(i)).collect();
        if !usable.is_empty() {
            // Favour recent records: backward runs in reverse order of the forward.
            let i = if self.chance(0.5) { usable[usable.len() - 1] } else { self.choose(&usable) };
            self.backward_of(i);
        }
    }

    /// Whether the values a record's backward op reads are still readable.
    pub(super) fn record_usable(&self, i: usize) -> bool {
        let r = &self.records[i];
        let needed: Vec<usize> = match r.kind {
            OpKind::Relu | OpKind::Sigmoid | OpKind::Tanh | OpKind::Softmax => vec![r.output],
            OpKind::Gelu | OpKind::Silu | OpKind::Hardswish | OpKind::Hardsigmoid | OpKind::MaxPool2d => vec![r.inputs[0]],
            OpKind::LayerNorm | OpKind::RmsNorm | OpKind::BatchNorm => vec![r.inputs[0], r.inputs[1]],
            OpKind::Conv2d
            | OpKind::Conv3d
            | OpKind::ConvTranspose2d
            | OpKind::CrossEntropy
            | OpKind::BceWithLogits
            | OpKind::GridSample => {
                vec![r.inputs[0], r.inputs[1]]
            }
            OpKind::Embedding | OpKind::Gather => vec![r.inputs[1]],
            OpKind::EmbeddingBag => vec![r.inputs[1], r.inputs[2]],
            OpKind::Attention | OpKind::MaskedAttention | OpKind::DropoutAttention => {
                [&r.inputs[..], &[r.output], &r.later_outputs[..]].concat()
            }
            _ => vec![],
        };
        needed.iter().all(|&v| self.readable(v))
    }

    /// The backward op of record `i`, with a dy of the right type.
    pub(super) fn backward_of(&mut self, i: usize) {
        let r = self.records[i].clone();
        let out_ty = self.ty(r.output).clone();
        match r.kind {
            OpKind::Relu => {
                let dy = self.derive(&out_ty, None);
                self.emit(OpKind::ReluBackward, &[dy, r.output], &[]);
            }
            OpKind::Gelu => {
                let dy = self.derive(&out_ty, None);
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                self.emit(OpKind::GeluBackward, &[dy, r.inputs[0]], &given);
            }
            OpKind::Silu | OpKind::Hardswish | OpKind::Hardsigmoid => {
                let kind = match r.kind {
                    OpKind::Silu => OpKind::SiluBackward,
                    OpKind::Hardswish => OpKind::HardswishBackward,
                    _ => OpKind::HardsigmoidBackward,
                };
                let dy = self.derive(&out_ty, None);
                self.emit(kind, &[dy, r.inputs[0]], &[]);
            }
            OpKind::Sigmoid | OpKind::Tanh => {
                let kind = if r.kind == OpKind::Sigmoid { OpKind::SigmoidBackward } else { OpKind::TanhBackward };
                let dy = self.derive(&out_ty, None);
                self.emit(kind, &[dy, r.output], &[]);
            }
            OpKind::RmsNorm => {
                let dy = self.derive(&out_ty, None);
                let eps = r.attrs.get("eps").unwrap().clone();
                if let Some(outs) = self.emit_named(OpKind::RmsNormBackward, &[dy, r.inputs[0], r.inputs[1]], &[("eps", eps)], None) {
                    self.grads.insert(r.inputs[1], outs[1]);
                }
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
            OpKind::Conv2d | OpKind::Conv3d | OpKind::ConvTranspose2d => {
                let kind = if r.kind == OpKind::Conv2d {
                    OpKind::Conv2dBackward
                } else if r.kind == OpKind::Conv3d {
                    OpKind::Conv3dBackward
                } else {
                    OpKind::ConvTranspose2dBackward
                };
                let dy = self.derive(&out_ty, None);
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                if let Some(outs) = self.emit_named(kind, &[dy, r.inputs[0], r.inputs[1]], &given, None) {
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
            OpKind::EmbeddingBag => {
                let dy = self.derive(&out_ty, None);
                let vocab = Attr::Int(self.ty(r.inputs[0]).dims()[0] as i64);
                let given = [("vocab", vocab), ("mode", r.attrs.get("mode").unwrap().clone())];
                if let Some(d) = self.emit(OpKind::EmbeddingBagBackward, &[dy, r.inputs[1], r.inputs[2]], &given) {
                    self.grads.insert(r.inputs[0], d);
                }
            }
            OpKind::Gather => {
                let dy = self.derive(&out_ty, None);
                let given = [("shape", ints(self.ty(r.inputs[0]).dims())), ("axis", Attr::Int(r.attrs.int("axis")))];
                if let Some(d) = self.emit(OpKind::GatherBackward, &[dy, r.inputs[1]], &given) {
                    self.grads.insert(r.inputs[0], d);
                }
            }
            OpKind::Slice => {
                let dy = self.derive(&out_ty, None);
                let mut given = vec![("shape", ints(self.ty(r.inputs[0]).dims()))];
                given.extend(r.attrs.0.iter().cloned());
                self.emit(OpKind::SliceBackward, &[dy], &given);
            }
            OpKind::Attention => {
                let dout = self.derive(&out_ty, None);
                let saved = [dout, r.inputs[0], r.inputs[1], r.inputs[2], r.output, r.later_outputs[0]];
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                if let Some(outs) = self.emit_named(OpKind::AttentionBackward, &saved, &given, None) {
                    for (&x, g) in r.inputs.iter().zip(outs) {
                        self.grads.insert(x, g);
                    }
                }
            }
            OpKind::MaskedAttention => {
                let dout = self.derive(&out_ty, None);
                let saved = [dout, r.inputs[0], r.inputs[1], r.inputs[2], r.inputs[3], r.output, r.later_outputs[0]];
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                if let Some(outs) = self.emit_named(OpKind::MaskedAttentionBackward, &saved, &given, None) {
                    for (&x, g) in r.inputs.iter().zip(outs) {
                        self.grads.insert(x, g);
                    }
                }
                if self.chance(0.5)
                    && let Some(dbias) = self.emit(OpKind::AttentionBiasBackward, &saved, &given)
                {
                    self.grads.insert(r.inputs[3], dbias);
                }
            }
            OpKind::DropoutAttention => {
                // The forward's seed and attributes: the same mask, drawn again.
                let dout = self.derive(&out_ty, None);
                let [q, k, v, bias, seed] = r.inputs[..] else { return };
                let saved = [dout, q, k, v, bias, seed, r.output, r.later_outputs[0]];
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                if let Some(outs) = self.emit_named(OpKind::DropoutAttentionBackward, &saved, &given, None) {
                    for (&x, g) in r.inputs.iter().zip(outs) {
                        self.grads.insert(x, g);
                    }
                }
                if self.chance(0.5)
                    && let Some(dbias) = self.emit(OpKind::DropoutAttentionBiasBackward, &saved, &given)
                {
                    self.grads.insert(bias, dbias);
                }
            }
            OpKind::Dropout => {
                // The forward's seed and attributes: the same mask, drawn again.
                let dy = self.derive(&out_ty, None);
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                self.emit(OpKind::DropoutBackward, &[dy, r.inputs[1]], &given);
            }
            OpKind::CrossEntropy | OpKind::BceWithLogits => {
                let dloss = if self.chance(0.6) {
                    let dtype = out_ty.dtype;
                    self.emit(OpKind::Fill, &[], &[("shape", ints(&[])), ("dtype", Attr::DType(dtype)), ("value", Attr::Float(1.0))])
                } else {
                    Some(self.derive(&out_ty, None))
                };
                let Some(dloss) = dloss else { return };
                let kind =
                    if r.kind == OpKind::CrossEntropy { OpKind::CrossEntropyBackward } else { OpKind::BceWithLogitsBackward };
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                self.emit(kind, &[dloss, r.inputs[0], r.inputs[1]], &given);
            }
            OpKind::GridSample => {
                let dy = self.derive(&out_ty, None);
                let given: Vec<(&'static str, Attr)> = r.attrs.0.clone();
                if let Some(outs) = self.emit_named(OpKind::GridSampleBackward, &[dy, r.inputs[0], r.inputs[1]], &given, None) {
                    self.grads.insert(r.inputs[0], outs[0]);
                    self.grads.insert(r.inputs[1], outs[1]);
                }
            }
            OpKind::AdaptiveAvgPool2d | OpKind::UpsampleNearest2d | OpKind::UpsampleBilinear2d => {
                let kind = match r.kind {
                    OpKind::AdaptiveAvgPool2d => OpKind::AdaptiveAvgPool2dBackward,
                    OpKind::UpsampleNearest2d => OpKind::UpsampleNearest2dBackward,
                    _ => OpKind::UpsampleBilinear2dBackward,
                };
                let dy = self.derive(&out_ty, None);
                let output_size = r.attrs.get("output_size").unwrap().clone();
                let mut given = vec![("shape", ints(self.ty(r.inputs[0]).dims())), ("output_size", output_size)];
                if let Some(align) = r.attrs.get("align_corners") {
                    given.push(("align_corners", align.clone()));
                }
                self.emit(kind, &[dy], &given);
            }
            _ => {}
        }
    }

    /// A value of type `ty` computed from the pool (see the module docs), never one whose
    /// root is `exclude` (the target of the update it feeds).
    pub(super) fn derive(&mut self, ty: &TensorType, exclude: Option<usize>) -> usize {
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
    pub(super) fn matmul_to(&mut self, ty: &TensorType, exclude: Option<usize>) -> Option<usize> {
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
    pub(super) fn step_count(&mut self) -> Option<usize> {
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

    pub(super) fn state_like(&mut self, prefix: &str, p: usize) -> usize {
        let name = format!("{prefix}_{}", self.vals[p].name);
        let ty = self.ty(p).clone();
        self.arg(name, ty, Role::State)
    }

    /// Updates param or state `p` (an optimizer or a hand-written update) and retires it.
    pub(super) fn update(&mut self, p: usize) {
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

    pub(super) fn finish_update(&mut self, pairs: &[(usize, usize)]) {
        for &(target, value) in pairs {
            self.updates.push((target, value));
            self.retired[target] = true;
        }
    }
}
