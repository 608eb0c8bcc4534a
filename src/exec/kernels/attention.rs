//! Fused attention, the reference: `attention` and `attention_backward`.
//!
//! Shapes (checked by the type rule): `q [..., H, T, E]`, `k [..., Hkv, S, E]`,
//! `v [..., Hkv, S, Ev]`, `out [..., H, T, Ev]` (`[..., T, H, Ev]` under `transpose_out`,
//! and `dout` with it: the kernels work in the first layout and swap at the boundary),
//! `lse [..., H, T]`. Query head `h` of a batch
//! reads key/value head `h / (H / Hkv)` (grouped-query attention, PyTorch's
//! `repeat_interleave`); with `causal`, query row `i` sees keys `j <= i` only (the top-left
//! aligned lower triangle, also when T != S).
//!
//! Memory: both kernels work one query row at a time and hold at most one row of S scores,
//! never a T×S matrix. The forward uses the exact softmax with the row's maximum
//! subtracted; the backward recomputes each probability from the saved logsumexp,
//! p = exp(scale·q·k − lse), as FlashAttention-2 does.
//!
//! `masked_attention` adds a float mask to the scaled scores (−inf: not attended),
//! broadcast from the right to `[..., H, T, S]`; its gradient is each score's, summed over
//! the dimensions the mask broadcasts. A row that sees no key (S = 0, or every key masked)
//! gives `out` = 0 (the empty sum) and `lse` = −∞ (the logsumexp of nothing), and passes no
//! gradient.
//!
//! `dropout_attention` drops probabilities after the softmax (PyTorch's SDPA `dropout_p`):
//! the probability of query row r (over all heads, B·H·T rows) and key j is kept, times
//! 1 / (1 − p), iff `dropout_uniform(seed, stream, r·S + j) >= p` (the score's row-major
//! index in `[..., H, T, S]`), else 0; `lse` stays the logsumexp of the scores. The backward
//! draws the same mask: with z that factor, dv += p·z·dout, and ds = p·(z·dp − D) with
//! D = dout·out as before (D = Σ p·z·dp).

use super::dropout::dropout_uniform;
use crate::exec::Dense;
use crate::ir::ops::AttentionAttrs;

/// dropout_attention's mask: the factor of each probability.
#[derive(Clone, Copy)]
struct Dropout {
    p: f64,
    stream: i64,
    seed: i64,
}

impl Dropout {
    /// The dropout of an op with `attrs` and its `seed` input; `None` without one.
    fn of(attrs: &AttentionAttrs, seed: Option<&Dense>) -> Option<Dropout> {
        let ((p, stream), seed) = attrs.dropout.zip(seed)?;
        Some(Dropout { p, stream, seed: seed.data[0] as i64 })
    }

    /// The factor of the probability of query row `r` and key `j` of `s` keys: 1 / (1 − p)
    /// where the mask keeps it, else 0.
    fn factor(this: Option<Dropout>, r: usize, s: usize, j: usize) -> f64 {
        match this {
            None => 1.0,
            Some(d) if dropout_uniform(d.seed, d.stream, (r * s + j) as u64) >= d.p => 1.0 / (1.0 - d.p),
            Some(_) => 0.0,
        }
    }
}

/// `x` with its axes −3 and −2 swapped: `[..., H, T, Ev]` ↔ `[..., T, H, Ev]`.
fn swap_heads_and_rows(x: &Dense) -> Dense {
    let rank = x.shape.len();
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 3, rank - 2);
    super::shape::transpose(x, &perm)
}

/// The sizes of one call; `rows` query rows in all (B·H·T).
struct Dims {
    /// B·H: query heads over all batch entries.
    heads: usize,
    /// H / Hkv: query heads per key/value head.
    group: usize,
    t: usize,
    s: usize,
    e: usize,
    ev: usize,
}

impl Dims {
    fn of(q: &Dense, k: &Dense, v: &Dense) -> Dims {
        let rank = q.shape.len();
        let heads = q.shape[..rank - 2].iter().product();
        let group = q.shape[rank - 3] / k.shape[rank - 3];
        Dims { heads, group, t: q.shape[rank - 2], s: k.shape[rank - 2], e: q.shape[rank - 1], ev: v.shape[rank - 1] }
    }

    /// The keys query row `i` sees: all S, or with `causal` the first min(i + 1, S).
    fn keys(&self, i: usize, causal: bool) -> usize {
        if causal { (i + 1).min(self.s) } else { self.s }
    }
}

/// Row `r` of `x` viewed as rows of `n` numbers.
fn row(x: &Dense, r: usize, n: usize) -> &[f64] {
    &x.data[r * n..(r + 1) * n]
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y += a · x`.
fn axpy(y: &mut [f64], a: f64, x: &[f64]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// Where the mask's value of a score is: the mask's dimensions aligned from the right with
/// the scores' `[..., H, T, S]`, a dimension of 1 read at index 0 (broadcast).
struct MaskIndex {
    /// The element of score (head, 0, 0) per query head over all batch entries.
    head_base: Vec<usize>,
    /// Strides of the score's row (T) and key (S) dimensions in the mask (0: broadcast).
    t: usize,
    s: usize,
}

impl MaskIndex {
    fn of(mask: &Dense, q: &Dense, s_len: usize) -> MaskIndex {
        let rank = q.shape.len();
        let mut scores = q.shape[..rank - 1].to_vec();
        scores.push(s_len);
        let offset = scores.len() - mask.shape.len();
        // Row-major strides of the mask, 0 where it broadcasts; score dims it lacks read 0.
        let mut strides = vec![0usize; scores.len()];
        let mut stride = 1;
        for (d, &n) in mask.shape.iter().enumerate().rev() {
            strides[offset + d] = if n == 1 { 0 } else { stride };
            stride *= n;
        }
        let lead = &scores[..scores.len() - 2];
        let heads: usize = lead.iter().product();
        let head_base = (0..heads)
            .map(|head| {
                let (mut rest, mut base) = (head, 0);
                for (d, &n) in lead.iter().enumerate().rev() {
                    base += (rest % n) * strides[d];
                    rest /= n;
                }
                base
            })
            .collect();
        MaskIndex { head_base, t: strides[scores.len() - 2], s: strides[scores.len() - 1] }
    }

    fn at(&self, mask: &Dense, head: usize, i: usize, j: usize) -> f64 {
        mask.data[self.head_base[head] + i * self.t + j * self.s]
    }
}

/// The score of query row `i` of query head `head` against key `j`: scale·q·kⱼ, plus the
/// mask's value there.
fn score(q_row: &[f64], k_row: &[f64], scale: f64, mask: Option<(&Dense, &MaskIndex)>, head: usize, i: usize, j: usize) -> f64 {
    let s = scale * dot(q_row, k_row);
    match mask {
        Some((m, index)) => s + index.at(m, head, i, j),
        None => s,
    }
}

/// `(out, lse)`: per query row, scores = scale·q·kⱼ (+ the mask's value) over the keys it
/// sees, max-subtracted exponentials p, out = Σ p·vⱼ / Σ p, lse = max + ln Σ p. A row
/// whose every score is −∞ (no key, or every key masked) gives out = 0 and lse = −∞.
pub(super) fn attention(
    q: &Dense,
    k: &Dense,
    v: &Dense,
    mask: Option<&Dense>,
    seed: Option<&Dense>,
    attrs: &AttentionAttrs,
) -> Vec<Dense> {
    let (d, scale) = (Dims::of(q, k, v), attrs.scale);
    let dropout = Dropout::of(attrs, seed);
    let index = mask.map(|m| MaskIndex::of(m, q, d.s));
    let mask = mask.zip(index.as_ref());
    let rank = q.shape.len();
    let mut out = Dense::zeros([&q.shape[..rank - 1], &[d.ev]].concat());
    let mut lse = Dense::zeros(q.shape[..rank - 1].to_vec());
    let mut scores = vec![0.0; d.s];
    for head in 0..d.heads {
        let kv = head / d.group;
        for i in 0..d.t {
            let r = head * d.t + i;
            let (qi, n) = (row(q, r, d.e), d.keys(i, attrs.causal));
            for (j, x) in scores[..n].iter_mut().enumerate() {
                *x = score(qi, row(k, kv * d.s + j, d.e), scale, mask, head, i, j);
            }
            let max = scores[..n].iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
            if max == f64::NEG_INFINITY {
                lse.data[r] = f64::NEG_INFINITY;
                continue;
            }
            let mut total = 0.0;
            for x in &mut scores[..n] {
                *x = (*x - max).exp();
                total += *x;
            }
            let o = &mut out.data[r * d.ev..(r + 1) * d.ev];
            for (j, &p) in scores[..n].iter().enumerate() {
                axpy(o, p / total * Dropout::factor(dropout, r, d.s, j), row(v, kv * d.s + j, d.ev));
            }
            lse.data[r] = max + total.ln();
        }
    }
    vec![if attrs.transpose_out { swap_heads_and_rows(&out) } else { out }, lse]
}

/// The saved values the backward reads, by their op input names.
pub(super) struct Saved<'a> {
    pub dout: &'a Dense,
    pub q: &'a Dense,
    pub k: &'a Dense,
    pub v: &'a Dense,
    pub mask: Option<&'a Dense>,
    /// dropout_attention's seed.
    pub seed: Option<&'a Dense>,
    pub out: &'a Dense,
    pub lse: &'a Dense,
}

/// Calls `each(head, i, key, pz, ds)` for every (query row, key) pair a row sees, in order:
/// FlashAttention-2's backward, per query row i, D = Σ dout·out, then for each key j,
/// p = exp(score − lse), z its dropout factor (1 without dropout), pz = p·z,
/// dp = dout·vⱼ, ds = p·(z·dp − D), the gradient of the score. A row with lse = −∞ saw
/// nothing and passes no gradient.
fn each_pair(saved: &Saved, attrs: &AttentionAttrs, mut each: impl FnMut(usize, usize, usize, usize, f64, f64)) {
    let Saved { dout, q, k, v, mask, seed, out, lse } = *saved;
    let (d, scale) = (Dims::of(q, k, v), attrs.scale);
    let dropout = Dropout::of(attrs, seed);
    let index = mask.map(|m| MaskIndex::of(m, q, d.s));
    let mask = mask.zip(index.as_ref());
    let swapped = attrs.transpose_out.then(|| (swap_heads_and_rows(dout), swap_heads_and_rows(out)));
    let (dout, out) = swapped.as_ref().map_or((dout, out), |(dout, out)| (dout, out));
    for head in 0..d.heads {
        let kv = head / d.group;
        for i in 0..d.t {
            let r = head * d.t + i;
            if lse.data[r] == f64::NEG_INFINITY {
                continue;
            }
            let (qi, doi) = (row(q, r, d.e), row(dout, r, d.ev));
            let delta = dot(doi, row(out, r, d.ev));
            for j in 0..d.keys(i, attrs.causal) {
                let key = kv * d.s + j;
                let p = (score(qi, row(k, key, d.e), scale, mask, head, i, j) - lse.data[r]).exp();
                let z = Dropout::factor(dropout, r, d.s, j);
                let ds = p * (z * dot(doi, row(v, key, d.ev)) - delta);
                each(head, i, j, key, p * z, ds);
            }
        }
    }
}

/// `(dq, dk, dv)` of attention (masked or not, dropped or not): dvⱼ += p·z·dout, dq += scale·ds·kⱼ,
/// dkⱼ += scale·ds·q. dk and dv sum over the query heads of a group and their rows, in
/// order.
pub(super) fn attention_backward(saved: &Saved, attrs: &AttentionAttrs) -> Vec<Dense> {
    let (q, k, v) = (saved.q, saved.k, saved.v);
    let (d, scale) = (Dims::of(q, k, v), attrs.scale);
    let dout = if attrs.transpose_out { swap_heads_and_rows(saved.dout) } else { saved.dout.clone() };
    let mut dq = Dense::zeros(q.shape.clone());
    let mut dk = Dense::zeros(k.shape.clone());
    let mut dv = Dense::zeros(v.shape.clone());
    each_pair(saved, attrs, |head, i, _, key, p, ds| {
        let r = head * d.t + i;
        axpy(&mut dv.data[key * d.ev..(key + 1) * d.ev], p, row(&dout, r, d.ev));
        axpy(&mut dq.data[r * d.e..(r + 1) * d.e], scale * ds, row(k, key, d.e));
        axpy(&mut dk.data[key * d.e..(key + 1) * d.e], scale * ds, row(q, r, d.e));
    });
    vec![dq, dk, dv]
}

/// The gradient of masked_attention's mask: each score's gradient ds (the mask is added
/// to the scores) summed into the mask element it read, over the broadcast dimensions.
pub(super) fn attention_bias_backward(saved: &Saved, attrs: &AttentionAttrs) -> Dense {
    let mask = saved.mask.expect("attention_bias_backward reads a mask");
    let index = MaskIndex::of(mask, saved.q, Dims::of(saved.q, saved.k, saved.v).s);
    let mut dmask = Dense::zeros(mask.shape.clone());
    each_pair(saved, attrs, |head, i, j, _, _, ds| {
        dmask.data[index.head_base[head] + i * index.t + j * index.s] += ds;
    });
    dmask
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;
    use crate::ir::ops::{Attr, OpKind};

    type Matrix = Vec<Vec<f64>>;

    /// One head's textbook attention with every T×S matrix materialised: scores S, the
    /// mask as −∞, P = softmax(S) row by row, out = P·V, lse = ln Σ exp(S) per row; and
    /// the backward through P: dP = dout·Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)),
    /// dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dout. Returns (out, lse, dq, dk, dv).
    fn naive_head(
        q: &[Vec<f64>],
        k: &[Vec<f64>],
        v: &[Vec<f64>],
        dout: &[Vec<f64>],
        causal: bool,
        scale: f64,
    ) -> (Matrix, Vec<f64>, Matrix, Matrix, Matrix) {
        let s = k.len();
        let (e, ev) = (q.first().map_or(0, Vec::len), v.first().map_or(0, Vec::len));
        let matmul = |a: &[Vec<f64>], b: &[Vec<f64>], n: usize| -> Matrix {
            a.iter().map(|ra| (0..n).map(|c| ra.iter().zip(b).map(|(x, rb)| x * rb[c]).sum()).collect()).collect()
        };
        let transpose = |a: &[Vec<f64>], cols: usize| -> Matrix {
            (0..cols).map(|c| a.iter().map(|r| r[c]).collect()).collect()
        };
        let mut scores = matmul(q, &transpose(k, e), s);
        for (i, row) in scores.iter_mut().enumerate() {
            for (j, x) in row.iter_mut().enumerate() {
                *x = if causal && j > i { f64::NEG_INFINITY } else { scale * *x };
            }
        }
        let mut lse = Vec::new();
        let p: Matrix = scores
            .iter()
            .map(|row| {
                let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                let total: f64 = row.iter().map(|x| (x - max).exp()).sum();
                lse.push(max + total.ln());
                row.iter().map(|x| (x - max).exp() / total).collect()
            })
            .collect();
        let out = matmul(&p, v, ev);
        let dp = matmul(dout, &transpose(v, ev), s);
        let ds: Matrix = p
            .iter()
            .zip(&dp)
            .map(|(pr, dr)| {
                let sum: f64 = pr.iter().zip(dr).map(|(a, b)| a * b).sum();
                pr.iter().zip(dr).map(|(a, b)| a * (b - sum)).collect()
            })
            .collect();
        let scaled = |m: Matrix| m.into_iter().map(|r| r.into_iter().map(|x| scale * x).collect()).collect();
        let dq = scaled(matmul(&ds, k, e));
        let dk = scaled(matmul(&transpose(&ds, s), q, e));
        let dv = matmul(&transpose(&p, s), dout, ev);
        (out, lse, dq, dk, dv)
    }

    /// Rows `[at, at + n)` of width `w` of `x`, as a matrix.
    fn rows(x: &Dense, at: usize, n: usize, w: usize) -> Matrix {
        (at..at + n).map(|r| x.data[r * w..(r + 1) * w].to_vec()).collect()
    }

    /// The whole call the naive way: k and v repeated over each group of query heads as
    /// PyTorch's `repeat_interleave(H / Hkv, dim=-3)` does, every head materialised, dk and
    /// dv summed back over the repeats. Returns (out, lse, dq, dk, dv) as flat data.
    fn naive(q: &Dense, k: &Dense, v: &Dense, dout: &Dense, causal: bool, scale: f64) -> [Vec<f64>; 5] {
        let rank = q.shape.len();
        let (h, t, e) = (q.shape[rank - 3], q.shape[rank - 2], q.shape[rank - 1]);
        let (hkv, s, ev) = (k.shape[rank - 3], k.shape[rank - 2], v.shape[rank - 1]);
        let batch: usize = q.shape[..rank - 3].iter().product();
        let repeats = h / hkv;
        let mut results: [Vec<f64>; 5] = Default::default();
        let (mut dk, mut dv) = (vec![0.0; k.data.len()], vec![0.0; v.data.len()]);
        for b in 0..batch {
            for head in 0..h {
                // repeat_interleave: repeated head r·repeats + c is head r of k and v.
                let source = b * hkv + head / repeats;
                let at = (b * h + head) * t;
                let (o, l, dqh, dkh, dvh) = naive_head(
                    &rows(q, at, t, e),
                    &rows(k, source * s, s, e),
                    &rows(v, source * s, s, ev),
                    &rows(dout, at, t, ev),
                    causal,
                    scale,
                );
                results[0].extend(o.concat());
                results[1].extend(l);
                results[2].extend(dqh.concat());
                for (x, g) in dk[source * s * e..].iter_mut().zip(dkh.concat()) {
                    *x += g;
                }
                for (x, g) in dv[source * s * ev..].iter_mut().zip(dvh.concat()) {
                    *x += g;
                }
            }
        }
        results[3] = dk;
        results[4] = dv;
        results
    }

    /// Both kernels against the naive computation, on q, k, v of the given shapes.
    #[track_caller]
    fn matches_naive(q: &[usize], k: &[usize], v: &[usize], causal: bool, seed: u64) {
        let scale = 1.0 / (q[q.len() - 1] as f64).sqrt().max(1.0);
        let given = [("causal", Attr::Bool(causal)), ("scale", Attr::Float(scale))];
        let (q, k, v) = (rand(q, seed), rand(k, seed + 1), rand(v, seed + 2));
        let forward = run(OpKind::Attention, &given, &[q.clone(), k.clone(), v.clone()]);
        let dout = rand(&forward[0].shape, seed + 3);
        let inputs = [dout.clone(), q.clone(), k.clone(), v.clone(), forward[0].clone(), forward[1].clone()];
        let backward = run(OpKind::AttentionBackward, &given, &inputs);
        let want = naive(&q, &k, &v, &dout, causal, scale);
        let got = [&forward[0], &forward[1], &backward[0], &backward[1], &backward[2]];
        for (name, (got, want)) in ["out", "lse", "dq", "dk", "dv"].iter().zip(got.iter().zip(&want)) {
            assert_eq!(got.data.len(), want.len(), "{name}");
            for (i, (a, b)) in got.data.iter().zip(want).enumerate() {
                assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{name}[{i}]: got {a}, want {b} (causal {causal})");
            }
        }
    }

    #[test]
    fn kernels_match_materialised_attention() {
        for causal in [false, true] {
            // Multi-head, T = S.
            matches_naive(&[2, 2, 5, 4], &[2, 2, 5, 4], &[2, 2, 5, 4], causal, 1);
            // T < S and T > S (causal: the top-left triangle; late rows see every key).
            matches_naive(&[1, 2, 3, 4], &[1, 2, 6, 4], &[1, 2, 6, 4], causal, 2);
            matches_naive(&[1, 2, 6, 4], &[1, 2, 3, 4], &[1, 2, 3, 4], causal, 3);
            // Grouped-query heads: 2 and 4 query heads per key/value head, E != Ev.
            matches_naive(&[2, 4, 4, 3], &[2, 2, 4, 3], &[2, 2, 4, 5], causal, 4);
            matches_naive(&[2, 1, 4, 5, 2], &[2, 1, 1, 7, 2], &[2, 1, 1, 7, 6], causal, 5);
            // No batch dimensions; one key.
            matches_naive(&[3, 4, 8], &[3, 4, 8], &[3, 4, 2], causal, 6);
            matches_naive(&[2, 3, 4], &[1, 1, 4], &[1, 1, 4], causal, 7);
        }
    }

    #[test]
    fn transpose_out_lays_out_rows_before_heads() {
        // The same numbers: out and dout [B, T, H, Ev] are the usual ones with the heads and
        // the rows swapped; lse, dq, dk and dv do not change.
        let plain = [("causal", Attr::Bool(true)), ("scale", Attr::Float(0.5))];
        let swapped = [plain[0].clone(), plain[1].clone(), ("transpose_out", Attr::Bool(true))];
        let (q, k, v) = (rand(&[2, 4, 3, 5], 11), rand(&[2, 2, 6, 5], 12), rand(&[2, 2, 6, 2], 13));
        let swap = |x: &Dense| crate::exec::kernels::shape::transpose(x, &[0, 2, 1, 3]);
        let forward = run(OpKind::Attention, &plain, &[q.clone(), k.clone(), v.clone()]);
        let rows_first = run(OpKind::Attention, &swapped, &[q.clone(), k.clone(), v.clone()]);
        assert_eq!(rows_first[0].shape, [2, 3, 4, 2]);
        assert_eq!(rows_first[0], swap(&forward[0]));
        assert_eq!(rows_first[1], forward[1]);
        let dout = rand(&[2, 4, 3, 2], 14);
        let backward = run(
            OpKind::AttentionBackward,
            &plain,
            &[dout.clone(), q.clone(), k.clone(), v.clone(), forward[0].clone(), forward[1].clone()],
        );
        let inputs = [swap(&dout), q, k, v, rows_first[0].clone(), rows_first[1].clone()];
        assert_eq!(run(OpKind::AttentionBackward, &swapped, &inputs), backward);
    }

    #[test]
    fn large_scores_stay_finite() {
        // Scores near ±800: exp would overflow without subtracting the row's maximum.
        let given = [("causal", Attr::Bool(false)), ("scale", Attr::Float(100.0))];
        let q = t(&[1, 2, 2], &[3.0, 1.0, -2.0, 2.0]);
        let k = t(&[1, 3, 2], &[2.0, 2.0, -2.0, 1.0, 1.0, 0.0]);
        let v = t(&[1, 3, 1], &[1.0, 2.0, 3.0]);
        let out = run(OpKind::Attention, &given, &[q, k, v]);
        // Row 0 scores 800, -500, 300: all weight on key 0. Row 1 scores 0, 600, -200: key 1.
        assert_close(&out[0], &[1.0, 2.0], 1e-12);
        assert_close(&out[1], &[800.0, 600.0], 1e-12);
    }

    #[test]
    fn no_keys_give_zeros_and_minus_infinity() {
        let given = [("causal", Attr::Bool(true)), ("scale", Attr::Float(0.5))];
        let (q, k, v) = (rand(&[2, 3, 4], 8), Dense::zeros(vec![1, 0, 4]), Dense::zeros(vec![1, 0, 5]));
        let out = run(OpKind::Attention, &given, &[q.clone(), k.clone(), v.clone()]);
        assert_eq!(out[0].data, vec![0.0; 2 * 3 * 5]);
        assert_eq!(out[1].data, vec![f64::NEG_INFINITY; 2 * 3]);
        let inputs = [rand(&[2, 3, 5], 9), q, k, v, out[0].clone(), out[1].clone()];
        let grads = run(OpKind::AttentionBackward, &given, &inputs);
        assert_eq!(grads[0].data, vec![0.0; 2 * 3 * 4]);
        assert!(grads[1].data.is_empty() && grads[2].data.is_empty());
    }
}
