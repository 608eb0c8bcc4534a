//! Fused attention (`attention`, FlashAttention's contract) and its backward: scores,
//! softmax and the weighted sum in one op that keeps only `out` and the row log-sum-exp
//! `lse`, never the T×S scores. `masked_attention` adds a mask to the scaled scores as they
//! are formed (PyTorch's float `attn_mask`, broadcast; −inf where a key is not attended);
//! the gradient of a float mask is its own op (`attention_bias_backward`), emitted only
//! when the mask needs one, since it is as large as the mask. `dropout_attention` is
//! `masked_attention` with dropout on its probabilities (PyTorch's SDPA `dropout_p`), the
//! mask drawn from (seed, stream, score index) as `dropout` draws it and drawn again by its
//! backward ops, so no T×S mask is saved either. The FLOPs count the pairs a call scores
//! (fewer under `causal`).

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, attr};
use crate::ir::types::{DType, TensorType};

use AttrKind as K;

/// attention's arguments: the causal mask, the scores' scale, and `transpose_out`: `out` (and
/// so `dout`) laid out `[..., T, H, Ev]`, rows before heads, as PyTorch's flash attention
/// writes it.
const ATTENTION_ATTRS: &[AttrSpec] = &[
    attr("causal", K::Bool, Some(AttrDefault::Bool(false))),
    attr("scale", K::Float, None),
    attr("transpose_out", K::Bool, Some(AttrDefault::Bool(false))),
];

/// dropout_attention's arguments: attention's, dropout's probability of zeroing a
/// probability, and the stream it draws from (as `dropout`'s).
const DROPOUT_ATTENTION_ATTRS: &[AttrSpec] = &[
    attr("causal", K::Bool, Some(AttrDefault::Bool(false))),
    attr("scale", K::Float, None),
    attr("transpose_out", K::Bool, Some(AttrDefault::Bool(false))),
    attr("p", K::Float, None),
    attr("stream", K::Int, None),
];

pub(super) const ATTENTION: OpDef = OpDef::new("attention", &["q", "k", "v"], &["out", "lse"], infer_attention, "softmax(scale * q @ kᵀ, causal mask) @ v per (grouped-query) head (rows first: transpose_out), and row logsumexps")
    .attrs(ATTENTION_ATTRS)
    .flops(flops_attention)
    // lse is saved for the backward op, not a result.
    .outputs_without_gradient(&[1]);

pub(super) const ATTENTION_BACKWARD: OpDef = OpDef::new("attention_backward", &["dout", "q", "k", "v", "out", "lse"], &["dq", "dk", "dv"], infer_attention_backward, "attention's gradients w.r.t. q, k and v, recomputing the probabilities from lse")
    .attrs(ATTENTION_ATTRS)
    .backward()
    .flops(flops_attention_backward);

pub(super) const MASKED_ATTENTION: OpDef = OpDef::new("masked_attention", &["q", "k", "v", "bias"], &["out", "lse"], infer_masked_attention, "attention with a bias (PyTorch's float attn_mask) added to its scaled scores, broadcast to [..., H, T, S] (−inf: not attended)")
    .attrs(ATTENTION_ATTRS)
    .flops(flops_attention)
    .outputs_without_gradient(&[1]);

pub(super) const MASKED_ATTENTION_BACKWARD: OpDef = OpDef::new("masked_attention_backward", &["dout", "q", "k", "v", "bias", "out", "lse"], &["dq", "dk", "dv"], infer_masked_attention_backward, "masked_attention's gradients w.r.t. q, k and v, recomputing the probabilities from lse")
    .attrs(ATTENTION_ATTRS)
    .backward()
    .flops(flops_attention_backward);

pub(super) const ATTENTION_BIAS_BACKWARD: OpDef = OpDef::new("attention_bias_backward", &["dout", "q", "k", "v", "bias", "out", "lse"], &["dbias"], infer_attention_bias_backward, "the gradient of masked_attention's bias: the scores' gradient summed over the bias's broadcast dimensions")
    .attrs(ATTENTION_ATTRS)
    .backward()
    .flops(flops_attention_bias_backward);

pub(super) const DROPOUT_ATTENTION: OpDef = OpDef::new("dropout_attention", &["q", "k", "v", "bias", "seed"], &["out", "lse"], infer_dropout_attention, "masked_attention with each probability kept (times 1 / (1 - p)) where the uniform number hashed from (seed, stream, score index) is >= p, else 0; lse is of the probabilities before dropout; saves no mask")
    .attrs(DROPOUT_ATTENTION_ATTRS)
    .flops(flops_attention)
    .outputs_without_gradient(&[1])
    .inputs_without_gradient(&[4])
    .draws("stream");

pub(super) const DROPOUT_ATTENTION_BACKWARD: OpDef = OpDef::new("dropout_attention_backward", &["dout", "q", "k", "v", "bias", "seed", "out", "lse"], &["dq", "dk", "dv"], infer_dropout_attention_backward, "dropout_attention's gradients w.r.t. q, k and v, recomputing the probabilities from lse and the dropout mask from (seed, stream)")
    .attrs(DROPOUT_ATTENTION_ATTRS)
    .backward()
    .flops(flops_attention_backward);

pub(super) const DROPOUT_ATTENTION_BIAS_BACKWARD: OpDef = OpDef::new("dropout_attention_bias_backward", &["dout", "q", "k", "v", "bias", "seed", "out", "lse"], &["dbias"], infer_dropout_attention_bias_backward, "the gradient of dropout_attention's bias: the scores' gradient (through the regenerated mask) summed over the bias's broadcast dimensions")
    .attrs(DROPOUT_ATTENTION_ATTRS)
    .backward()
    .flops(flops_attention_bias_backward);

/// `attention(q, k, v)`: `q [..., H, T, E]`, `k [..., Hkv, S, E]`, `v [..., Hkv, S, Ev]` of
/// one float dtype and one rank >= 3 with equal leading (batch) dimensions, H a positive
/// multiple of Hkv (grouped-query heads), `scale` positive and finite. Gives
/// `out [..., H, T, Ev]` (q's dtype; `[..., T, H, Ev]` with `transpose_out`) and
/// `lse f32[..., H, T]`. T, S, E, Ev and the batch dimensions may be 0.
pub(super) fn infer_attention(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let dtype = same_dtype(inputs)?;
    float_input(q, "q")?;
    let rank = q.rank();
    if rank < 3 || k.rank() != rank || v.rank() != rank {
        return Err(format!(
            "q, k and v must be [...,H,T,E], [...,Hkv,S,E] and [...,Hkv,S,Ev] of one rank >= 3, found {q}, {k} and {v}"
        ));
    }
    let batch = &q.dims()[..rank - 3];
    if k.dims()[..rank - 3] != *batch || v.dims()[..rank - 3] != *batch {
        return Err(format!("q, k and v must have the same batch dimensions, found {q}, {k} and {v}"));
    }
    let last3 = |x: &TensorType| {
        let d = &x.dims()[rank - 3..];
        (d[0], d[1], d[2])
    };
    let ((h, t, e), (hkv, s, ek), (hv, sv, ev)) = (last3(q), last3(k), last3(v));
    if ek != e {
        return Err(format!("q and k must have the same last dimension E, found q {q} and k {k}"));
    }
    if (hv, sv) != (hkv, s) {
        return Err(format!("k and v must have the same heads and length [...,Hkv,S,_], found k {k} and v {v}"));
    }
    if hkv == 0 || h == 0 || !h.is_multiple_of(hkv) {
        return Err(format!(
            "the query heads H={h} must be a positive multiple of the key/value heads Hkv={hkv} (q {q}, k {k})"
        ));
    }
    float_attr(attrs, "scale", |x| x > 0.0 && x.is_finite(), "a positive finite number")?;
    let mut out = batch.to_vec();
    out.extend(if attrs.bool("transpose_out") { [t, h, ev] } else { [h, t, ev] });
    let mut lse = batch.to_vec();
    lse.extend([h, t]);
    done(vec![TensorType::new(dtype, out), TensorType::new(DType::F32, lse)])
}

/// `attention_backward(dout, q, k, v, out, lse)`: q, k, v as for `attention`, whose outputs
/// fix the rest: `dout` and `out` have `out`'s type, `lse` has `lse`'s. Gives dq, dk, dv of
/// q's, k's and v's types.
pub(super) fn infer_attention_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (q, k, v) = (inputs[1], inputs[2], inputs[3]);
    let forward = infer_attention(&[q, k, v], attrs)?;
    let saved = [(inputs[0], "dout", &forward[0]), (inputs[4], "out", &forward[0]), (inputs[5], "lse", &forward[1])];
    for (t, name, want) in saved {
        if t != want {
            return Err(format!("{name} must be {want} for q {q}, k {k} and v {v}, found {t}"));
        }
    }
    done(vec![q.clone(), k.clone(), v.clone()])
}

/// `masked_attention(q, k, v, bias)`: `attention`'s rule for q, k and v, and a mask `bias` of
/// q's dtype (added to the scaled scores; PyTorch's bool masks are `where(mask, 0, −inf)`
/// first, as its SDPA converts them), whose shape broadcasts to the scores `[..., H, T, S]`
/// (aligned from the right: each of its dimensions 1 or the scores'; fewer dimensions
/// allowed, PyTorch's broadcasting).
pub(super) fn infer_masked_attention(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (q, k, mask) = (inputs[0], inputs[1], inputs[3]);
    let forward = infer_attention(&inputs[..3], attrs)?;
    if mask.dtype != q.dtype {
        return Err(format!("the bias must have q's dtype {} (a bool mask is where(mask, 0, -inf) first), found {mask}", q.dtype));
    }
    let rank = q.rank();
    let mut scores = q.dims()[..rank - 1].to_vec();
    scores.push(k.dims()[rank - 2]);
    let fits = mask.rank() <= scores.len()
        && mask.dims().iter().rev().zip(scores.iter().rev()).all(|(&m, &s)| m == s || m == 1);
    if !fits {
        let scores = TensorType::new(mask.dtype, scores);
        return Err(format!("the bias {mask} does not broadcast to the scores {scores} ([..., H, T, S])"));
    }
    done(forward)
}

/// `masked_attention_backward(dout, q, k, v, bias, out, lse)`: q, k, v and bias as for
/// `masked_attention`, dout, out and lse of its outputs' types. Gives dq, dk, dv.
pub(super) fn infer_masked_attention_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (q, k, v, mask) = (inputs[1], inputs[2], inputs[3], inputs[4]);
    let forward = infer_masked_attention(&[q, k, v, mask], attrs)?;
    let saved = [(inputs[0], "dout", &forward[0]), (inputs[5], "out", &forward[0]), (inputs[6], "lse", &forward[1])];
    for (t, name, want) in saved {
        if t != want {
            return Err(format!("{name} must be {want} for q {q}, k {k} and v {v}, found {t}"));
        }
    }
    done(vec![q.clone(), k.clone(), v.clone()])
}

/// `dropout_attention(q, k, v, bias, seed)`: `masked_attention`'s rule for q, k, v and
/// bias (a bias of shape `[]`, 0, where PyTorch gave no mask), `seed` an `i64[]` scalar,
/// `p` a probability in [0, 1), `stream` at least 0 (as for `dropout`).
pub(super) fn infer_dropout_attention(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    seed_and_stream(inputs[4], attrs)?;
    drop_probability(attrs)?;
    infer_masked_attention(&inputs[..4], attrs)
}

/// `dropout_attention_backward(dout, q, k, v, bias, seed, out, lse)`: q, k, v, bias and
/// seed as for `dropout_attention`, dout, out and lse of its outputs' types. Gives dq, dk,
/// dv.
pub(super) fn infer_dropout_attention_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (q, k, v) = (inputs[1], inputs[2], inputs[3]);
    let forward = infer_dropout_attention(&inputs[1..6], attrs)?;
    let saved = [(inputs[0], "dout", &forward[0]), (inputs[6], "out", &forward[0]), (inputs[7], "lse", &forward[1])];
    for (t, name, want) in saved {
        if t != want {
            return Err(format!("{name} must be {want} for q {q}, k {k} and v {v}, found {t}"));
        }
    }
    done(vec![q.clone(), k.clone(), v.clone()])
}

/// `dropout_attention_bias_backward(...)`: the inputs of `dropout_attention_backward`.
/// Gives `dbias` of the bias's type.
pub(super) fn infer_dropout_attention_bias_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    infer_dropout_attention_backward(inputs, attrs)?;
    done(vec![inputs[4].clone()])
}

/// `attention_bias_backward(...)`: the inputs of `masked_attention_backward`. Gives
/// `dbias` of the bias's type.
pub(super) fn infer_attention_bias_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    infer_masked_attention_backward(inputs, attrs)?;
    done(vec![inputs[4].clone()])
}

/// The scores again (2·E per pair), dout·vᵀ (2·Ev), and the sum into dbias.
pub(super) fn flops_attention_bias_backward(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    let [q, k, v] = [1, 2, 3].map(|i| inputs.get(i).copied());
    let (Some(q), Some(k), Some(v)) = (q, k, v) else { return 0 };
    let (pairs, e, ev) = attention_pairs(q, k, v, attrs);
    pairs.saturating_mul(2).saturating_mul(e.saturating_add(ev)).saturating_add(pairs)
}

/// The (query, key) pairs one attention call scores, with `(E, Ev)`: B·H query heads times
/// the pairs of one head, T·S, or with `causal` only the unmasked ones, Σ_i min(i + 1, S).
/// Saturating; 0 for shapes no rule accepts.
pub(super) fn attention_pairs(q: &TensorType, k: &TensorType, v: &TensorType, attrs: &Attrs) -> (u64, u64, u64) {
    let rank = q.rank();
    if rank < 3 {
        return (0, 0, 0);
    }
    let heads = q.dims()[..rank - 2].iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let (t, s) = (u128::from(dim(q, rank - 2)), u128::from(dim(k, rank - 2)));
    let per_head = match attrs.get("causal") {
        // Rows i < min(T, S) see i + 1 keys; the rows after them see all S.
        Some(Attr::Bool(true)) => {
            let full = t.min(s);
            full * (full + 1) / 2 + (t - full) * s
        }
        _ => t * s,
    };
    let pairs = u64::try_from(per_head).unwrap_or(u64::MAX).saturating_mul(heads);
    (pairs, dim(q, rank - 1), dim(v, rank - 1))
}

/// The two products: scores q·kᵀ (2·E per pair) and probabilities · v (2·Ev per pair).
/// The softmax's exponentials and the online rescaling are not counted.
pub(super) fn flops_attention(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    let [q, k, v] = [0, 1, 2].map(|i| inputs.get(i).copied());
    let (Some(q), Some(k), Some(v)) = (q, k, v) else { return 0 };
    let (pairs, e, ev) = attention_pairs(q, k, v, attrs);
    pairs.saturating_mul(2).saturating_mul(e.saturating_add(ev))
}

/// Five products per pair: the scores again (2·E), dout·vᵀ (2·Ev), dv += p·dout (2·Ev),
/// dq += ds·k (2·E) and dk += ds·q (2·E): 2·(3E + 2Ev), 2.5 times the forward when E = Ev.
/// The row sums D = Σ dout·out and the elementwise work on p are not counted.
pub(super) fn flops_attention_backward(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    let [q, k, v] = [1, 2, 3].map(|i| inputs.get(i).copied());
    let (Some(q), Some(k), Some(v)) = (q, k, v) else { return 0 };
    let (pairs, e, ev) = attention_pairs(q, k, v, attrs);
    let per_pair = e.saturating_mul(3).saturating_add(ev.saturating_mul(2));
    pairs.saturating_mul(2).saturating_mul(per_pair)
}

/// attention's attributes (and its backward op's), decoded once for every layer that reads
/// them: how scores are formed, and `out`'s layout.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct AttentionAttrs {
    /// Query row i sees keys 0..=i only.
    pub causal: bool,
    /// Scores are q·kᵀ times this.
    pub scale: f64,
    /// `out` (and so `dout`) is laid out `[..., T, H, Ev]`, rows before heads.
    pub transpose_out: bool,
    /// dropout_attention's dropout: `(p, stream)`; `None` for the other attention ops.
    pub dropout: Option<(f64, i64)>,
}

impl AttentionAttrs {
    /// The attributes of an op that passed its type rule.
    pub fn of(attrs: &Attrs) -> AttentionAttrs {
        let dropout = match (attrs.get("p"), attrs.get("stream")) {
            (Some(Attr::Float(p)), Some(Attr::Int(stream))) => Some((*p, *stream)),
            _ => None,
        };
        AttentionAttrs {
            causal: attrs.bool("causal"),
            scale: attrs.float("scale"),
            transpose_out: attrs.bool("transpose_out"),
            dropout,
        }
    }
}
