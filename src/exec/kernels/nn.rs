//! Neural-network kernels and their gradients: softmax, layer_norm, rms_norm, batch_norm
//! (training mode, batch statistics), max_pool2d (NCHW), embedding, cross_entropy (with
//! PyTorch's ignore_index and label smoothing) and bce_with_logits. The convolutions are
//! in `conv.rs`.
//!
//! Backward kernels compute the exact gradients of their forward kernels (checked against
//! finite differences in `kernels/mod.rs`); norms recompute their statistics (mean and
//! biased variance, or the mean square) from x. Index inputs (ids, labels) are validated
//! before anything is computed: a value outside its range (that is not cross_entropy's
//! ignore_index) is an [`ExecError::IndexOutOfRange`].

use super::elementwise::sigmoid;
use super::conv::source;
use super::resolve_axis;
use crate::exec::data::stored;
use crate::exec::{Dense, ExecError};
use crate::ir::ops::{CrossEntropyAttrs, PoolAttrs};
use crate::ir::types::DType;

// ---------------------------------------------------------------------------------------
// softmax

/// `shape` seen as `[outer, n, inner]` around dimension `axis`.
fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// exp(x − max) / Σ exp(x − max) along `axis`.
pub(super) fn softmax(x: &Dense, axis: i64) -> Dense {
    let (outer, n, inner) = split_at_axis(&x.shape, resolve_axis(axis, x.shape.len()));
    let mut y = Dense::zeros(x.shape.clone());
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| (o * n + i) * inner + j;
            let max = (0..n).fold(f64::NEG_INFINITY, |m, i| m.max(x.data[at(i)]));
            let mut total = 0.0;
            for i in 0..n {
                let e = (x.data[at(i)] - max).exp();
                y.data[at(i)] = e;
                total += e;
            }
            for i in 0..n {
                y.data[at(i)] /= total;
            }
        }
    }
    y
}

/// Running sums along `axis`, from its first element (or its last, `reverse`), in f64:
/// exact for the integers of i32 and i64 positions and counts.
pub(super) fn cumsum(x: &Dense, axis: i64, reverse: bool) -> Dense {
    let (outer, n, inner) = split_at_axis(&x.shape, resolve_axis(axis, x.shape.len()));
    let mut y = Dense::zeros(x.shape.clone());
    for o in 0..outer {
        for j in 0..inner {
            let mut total = 0.0;
            for step in 0..n {
                let i = if reverse { n - 1 - step } else { step };
                let at = (o * n + i) * inner + j;
                total += x.data[at];
                y.data[at] = total;
            }
        }
    }
    y
}

/// dx = y · (dy − Σ(dy · y) along axis), y being softmax's output.
pub(super) fn softmax_backward(dy: &Dense, y: &Dense, axis: i64) -> Dense {
    let (outer, n, inner) = split_at_axis(&y.shape, resolve_axis(axis, y.shape.len()));
    let mut dx = Dense::zeros(y.shape.clone());
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| (o * n + i) * inner + j;
            let dot = (0..n).fold(0.0, |acc, i| acc + dy.data[at(i)] * y.data[at(i)]);
            for i in 0..n {
                dx.data[at(i)] = y.data[at(i)] * (dy.data[at(i)] - dot);
            }
        }
    }
    dx
}

// ---------------------------------------------------------------------------------------
// Normalisation

/// Mean and 1/√(biased variance + eps) of `values`.
fn moments(values: impl Iterator<Item = f64> + Clone, count: usize, eps: f64) -> (f64, f64) {
    let mean = values.clone().fold(0.0, |acc, v| acc + v) / count as f64;
    let var = values.fold(0.0, |acc, v| acc + (v - mean) * (v - mean)) / count as f64;
    (mean, 1.0 / (var + eps).sqrt())
}

/// The last dimension D of `x`, and the number of rows of D elements.
fn rows_of(x: &Dense) -> (usize, usize) {
    let d = x.shape[x.shape.len() - 1];
    (x.numel().checked_div(d).unwrap_or(0), d)
}

/// y = (x − mean) / √(var + eps) · gamma + beta over the last dimension.
pub(super) fn layer_norm(x: &Dense, gamma: &Dense, beta: &Dense, eps: f64) -> Dense {
    let (rows, d) = rows_of(x);
    let mut y = Dense::zeros(x.shape.clone());
    for r in 0..rows {
        let row = &x.data[r * d..(r + 1) * d];
        let (mean, rstd) = moments(row.iter().copied(), d, eps);
        let out = &mut y.data[r * d..(r + 1) * d];
        for (i, (o, &v)) in out.iter_mut().zip(row).enumerate() {
            *o = (v - mean) * rstd * gamma.data[i] + beta.data[i];
        }
    }
    y
}

/// (dx, dgamma, dbeta) of layer_norm. With x̂ = (x − mean)·rstd and g = dy·gamma:
/// dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) per row; dgamma = Σ_rows dy·x̂; dbeta = Σ_rows dy.
pub(super) fn layer_norm_backward(dy: &Dense, x: &Dense, gamma: &Dense, eps: f64) -> Vec<Dense> {
    let (rows, d) = rows_of(x);
    let mut dx = Dense::zeros(x.shape.clone());
    let mut dgamma = Dense::zeros(vec![d]);
    let mut dbeta = Dense::zeros(vec![d]);
    let mut xhat = vec![0.0; d];
    for r in 0..rows {
        let (row, dy_row) = (&x.data[r * d..(r + 1) * d], &dy.data[r * d..(r + 1) * d]);
        let (mean, rstd) = moments(row.iter().copied(), d, eps);
        let (mut sum_g, mut sum_gx) = (0.0, 0.0);
        for i in 0..d {
            xhat[i] = (row[i] - mean) * rstd;
            let g = dy_row[i] * gamma.data[i];
            sum_g += g;
            sum_gx += g * xhat[i];
            dgamma.data[i] += dy_row[i] * xhat[i];
            dbeta.data[i] += dy_row[i];
        }
        let (mean_g, mean_gx) = (sum_g / d as f64, sum_gx / d as f64);
        for i in 0..d {
            let g = dy_row[i] * gamma.data[i];
            dx.data[r * d + i] = rstd * (g - mean_g - xhat[i] * mean_gx);
        }
    }
    vec![dx, dgamma, dbeta]
}

/// 1/√(mean(row²) + eps).
fn rms_rstd(row: &[f64], eps: f64) -> f64 {
    let mean_square = row.iter().fold(0.0, |acc, v| acc + v * v) / row.len() as f64;
    1.0 / (mean_square + eps).sqrt()
}

/// y = x / √(mean(x²) + eps) · gamma over the last dimension.
pub(super) fn rms_norm(x: &Dense, gamma: &Dense, eps: f64) -> Dense {
    let (rows, d) = rows_of(x);
    let mut y = Dense::zeros(x.shape.clone());
    for r in 0..rows {
        let row = &x.data[r * d..(r + 1) * d];
        let rstd = rms_rstd(row, eps);
        let out = &mut y.data[r * d..(r + 1) * d];
        for (i, (o, &v)) in out.iter_mut().zip(row).enumerate() {
            *o = v * rstd * gamma.data[i];
        }
    }
    y
}

/// (dx, dgamma) of rms_norm. With rstd = 1/√(mean(x²) + eps), x̂ = x·rstd and g = dy·gamma:
/// dx = rstd · (g − x̂ · mean(g · x̂)) per row (∂rstd/∂x_j = −rstd³·x_j/D); dgamma = Σ_rows dy·x̂.
pub(super) fn rms_norm_backward(dy: &Dense, x: &Dense, gamma: &Dense, eps: f64) -> Vec<Dense> {
    let (rows, d) = rows_of(x);
    let mut dx = Dense::zeros(x.shape.clone());
    let mut dgamma = Dense::zeros(vec![d]);
    for r in 0..rows {
        let (row, dy_row) = (&x.data[r * d..(r + 1) * d], &dy.data[r * d..(r + 1) * d]);
        let rstd = rms_rstd(row, eps);
        let mut sum_gx = 0.0;
        for i in 0..d {
            let xhat = row[i] * rstd;
            sum_gx += dy_row[i] * gamma.data[i] * xhat;
            dgamma.data[i] += dy_row[i] * xhat;
        }
        let mean_gx = sum_gx / d as f64;
        for i in 0..d {
            let g = dy_row[i] * gamma.data[i];
            dx.data[r * d + i] = rstd * (g - row[i] * rstd * mean_gx);
        }
    }
    vec![dx, dgamma]
}

/// x `[N, C, ...]` as (N, C, inner = product of the trailing dims); element (b, c, s) is at
/// `(b * C + c) * inner + s`.
fn nc_inner(x: &Dense) -> (usize, usize, usize) {
    (x.shape[0], x.shape[1], x.shape[2..].iter().product())
}

/// The offsets of channel `c`'s elements, in row-major order.
fn channel(n: usize, c: usize, inner: usize, ch: usize) -> impl Iterator<Item = usize> + Clone {
    (0..n).flat_map(move |b| (0..inner).map(move |s| (b * c + ch) * inner + s))
}

/// Training-mode batch norm: per channel (dim 1), statistics over every other dimension.
pub(super) fn batch_norm(x: &Dense, gamma: &Dense, beta: &Dense, eps: f64) -> Dense {
    let (n, c, inner) = nc_inner(x);
    let mut y = Dense::zeros(x.shape.clone());
    for ch in 0..c {
        let (mean, rstd) = moments(channel(n, c, inner, ch).map(|i| x.data[i]), n * inner, eps);
        for i in channel(n, c, inner, ch) {
            y.data[i] = (x.data[i] - mean) * rstd * gamma.data[ch] + beta.data[ch];
        }
    }
    y
}

/// Each channel's mean and variance (divided by M − correction) over its M elements.
pub(super) fn batch_norm_stats(x: &Dense, correction: usize) -> Vec<Dense> {
    let (n, c, inner) = nc_inner(x);
    let m = n * inner;
    let (mut mean, mut var) = (Dense::zeros(vec![c]), Dense::zeros(vec![c]));
    for ch in 0..c {
        let mu = channel(n, c, inner, ch).map(|i| x.data[i]).sum::<f64>() / m as f64;
        let squares: f64 = channel(n, c, inner, ch).map(|i| (x.data[i] - mu) * (x.data[i] - mu)).sum();
        mean.data[ch] = mu;
        var.data[ch] = squares / (m - correction) as f64;
    }
    vec![mean, var]
}

/// (dx, dgamma, dbeta) of batch_norm. Per channel, with x̂ = (x − mean)·rstd and M elements:
/// dbeta = Σ dy; dgamma = Σ dy·x̂; dx = gamma · rstd · (dy − dbeta/M − x̂ · dgamma/M).
pub(super) fn batch_norm_backward(dy: &Dense, x: &Dense, gamma: &Dense, eps: f64) -> Vec<Dense> {
    let (n, c, inner) = nc_inner(x);
    let m = (n * inner) as f64;
    let mut dx = Dense::zeros(x.shape.clone());
    let mut dgamma = Dense::zeros(vec![c]);
    let mut dbeta = Dense::zeros(vec![c]);
    for ch in 0..c {
        let (mean, rstd) = moments(channel(n, c, inner, ch).map(|i| x.data[i]), n * inner, eps);
        let (mut sum_dy, mut sum_dy_xhat) = (0.0, 0.0);
        for i in channel(n, c, inner, ch) {
            sum_dy += dy.data[i];
            sum_dy_xhat += dy.data[i] * (x.data[i] - mean) * rstd;
        }
        dbeta.data[ch] = sum_dy;
        dgamma.data[ch] = sum_dy_xhat;
        for i in channel(n, c, inner, ch) {
            let xhat = (x.data[i] - mean) * rstd;
            dx.data[i] = gamma.data[ch] * rstd * (dy.data[i] - sum_dy / m - xhat * sum_dy_xhat / m);
        }
    }
    vec![dx, dgamma, dbeta]
}

// ---------------------------------------------------------------------------------------
// Pooling (NCHW)

/// The offset (within one `h`×`w` plane) of the maximum of output (p, q)'s window, scanning
/// the window row-major: the first maximum wins ties, and a NaN counts as the maximum (the
/// first NaN wins). `None` when the window holds only padding (possible only for an empty x).
fn window_argmax(plane: &[f64], h: usize, w: usize, p: usize, q: usize, win: &PoolAttrs) -> Option<usize> {
    let [kernel, stride, padding] = [win.kernel, win.stride, win.padding].map(|pair| pair.map(|x| x as usize));
    let mut best: Option<usize> = None;
    for r in 0..kernel[0] {
        let Some(hh) = source(p, r, stride[0], padding[0], h) else { continue };
        for s in 0..kernel[1] {
            let Some(ww) = source(q, s, stride[1], padding[1], w) else { continue };
            let i = hh * w + ww;
            let better = match best {
                None => true,
                Some(b) => plane[i] > plane[b] || (plane[i].is_nan() && !plane[b].is_nan()),
            };
            if better {
                best = Some(i);
            }
        }
    }
    best
}

/// The maximum over each window of x[N,C,H,W]; padding counts as −inf.
pub(super) fn max_pool2d(x: &Dense, win: &PoolAttrs, out_shape: &[usize]) -> Dense {
    let (h, w) = (x.shape[2], x.shape[3]);
    let planes = x.shape[0] * x.shape[1];
    let (p, q) = (out_shape[2], out_shape[3]);
    let mut y = Vec::with_capacity(planes * p * q);
    for plane in 0..planes {
        let xs = &x.data[plane * h * w..(plane + 1) * h * w];
        for pp in 0..p {
            for qq in 0..q {
                y.push(window_argmax(xs, h, w, pp, qq, win).map_or(f64::NEG_INFINITY, |i| xs[i]));
            }
        }
    }
    Dense::new(out_shape.to_vec(), y)
}

/// Each dy element added to the position of its window's (first) maximum in x.
pub(super) fn max_pool2d_backward(dy: &Dense, x: &Dense, win: &PoolAttrs) -> Dense {
    let (h, w) = (x.shape[2], x.shape[3]);
    let planes = x.shape[0] * x.shape[1];
    let (p, q) = (dy.shape[2], dy.shape[3]);
    let mut dx = Dense::zeros(x.shape.clone());
    for plane in 0..planes {
        let xs = &x.data[plane * h * w..(plane + 1) * h * w];
        for pp in 0..p {
            for qq in 0..q {
                if let Some(i) = window_argmax(xs, h, w, pp, qq, win) {
                    dx.data[plane * h * w + i] += dy.data[(plane * p + pp) * q + qq];
                }
            }
        }
    }
    dx
}

// ---------------------------------------------------------------------------------------
// Embeddings and the loss

/// An index value checked against 0..bound.
fn index(op: &str, value: f64, bound: usize) -> Result<usize, ExecError> {
    if value >= 0.0 && value < bound as f64 && value.fract() == 0.0 {
        Ok(value as usize)
    } else {
        Err(ExecError::IndexOutOfRange { op: op.to_string(), index: value as i64, bound })
    }
}

/// Every index of `ids`, checked against 0..bound.
fn indices(op: &str, ids: &Dense, bound: usize) -> Result<Vec<usize>, ExecError> {
    ids.data.iter().map(|&v| index(op, v, bound)).collect()
}

/// out[..., :] = table[ids[...], :].
pub(super) fn embedding(table: &Dense, ids: &Dense) -> Result<Dense, ExecError> {
    let (v, d) = (table.shape[0], table.shape[1]);
    let rows = indices("embedding", ids, v)?;
    let mut out = Vec::with_capacity(rows.len() * d);
    for row in rows {
        out.extend_from_slice(&table.data[row * d..(row + 1) * d]);
    }
    let mut shape = ids.shape.clone();
    shape.push(d);
    Ok(Dense::new(shape, out))
}

/// The bags of embedding_bag: bag b is ids offsets[b] .. offsets[b+1] (the last to n);
/// offsets must start at 0 (with any ids), not decrease, and stay within n.
fn bags(op: &str, offsets: &Dense, n: usize) -> Result<Vec<std::ops::Range<usize>>, ExecError> {
    let starts = indices(op, offsets, n + 1)?;
    let bad = |detail: String| ExecError::BadOffsets { op: op.to_string(), detail };
    if n > 0 && starts.first().is_some_and(|&s| s != 0) {
        return Err(bad(format!("the first offset is {}, not 0", starts[0])));
    }
    if let Some(b) = starts.windows(2).position(|w| w[1] < w[0]) {
        return Err(bad(format!("offsets[{}] = {} is below offsets[{b}] = {}", b + 1, starts[b + 1], starts[b])));
    }
    let ends = starts.iter().skip(1).copied().chain(std::iter::once(n));
    Ok(starts.iter().zip(ends).map(|(&s, e)| s..e).collect())
}

/// out[b, :] = Σ table[ids[k], :] over bag b's ids k (in order), over its length for mean;
/// an empty bag gives 0.
pub(super) fn embedding_bag(table: &Dense, ids: &Dense, offsets: &Dense, mean: bool) -> Result<Dense, ExecError> {
    let (v, d) = (table.shape[0], table.shape[1]);
    let rows = indices("embedding_bag", ids, v)?;
    let bags = bags("embedding_bag", offsets, rows.len())?;
    let mut out = Dense::zeros(vec![bags.len(), d]);
    for (b, bag) in bags.iter().enumerate() {
        let o = &mut out.data[b * d..(b + 1) * d];
        for &row in &rows[bag.clone()] {
            for (acc, &x) in o.iter_mut().zip(&table.data[row * d..(row + 1) * d]) {
                *acc += x;
            }
        }
        if mean && !bag.is_empty() {
            o.iter_mut().for_each(|x| *x /= bag.len() as f64);
        }
    }
    Ok(out)
}

/// dtable[vocab, D]: zero, plus for each id k (in order) its bag's dy row (divided by the
/// bag's length for mean) added into row ids[k].
pub(super) fn embedding_bag_backward(
    dy: &Dense,
    ids: &Dense,
    offsets: &Dense,
    out_shape: &[usize],
    mean: bool,
) -> Result<Dense, ExecError> {
    let (vocab, d) = (out_shape[0], out_shape[1]);
    let rows = indices("embedding_bag_backward", ids, vocab)?;
    let bags = bags("embedding_bag_backward", offsets, rows.len())?;
    let mut dtable = Dense::zeros(out_shape.to_vec());
    for (b, bag) in bags.iter().enumerate() {
        let scale = if mean { 1.0 / bag.len() as f64 } else { 1.0 };
        for &row in &rows[bag.clone()] {
            for i in 0..d {
                dtable.data[row * d + i] += dy.data[b * d + i] * scale;
            }
        }
    }
    Ok(dtable)
}

/// dtable[vocab, D]: zero, plus each dy[..., :] added into row ids[...] (in ids' order).
pub(super) fn embedding_backward(dy: &Dense, ids: &Dense, out_shape: &[usize]) -> Result<Dense, ExecError> {
    let (vocab, d) = (out_shape[0], out_shape[1]);
    let rows = indices("embedding_backward", ids, vocab)?;
    let mut dtable = Dense::zeros(out_shape.to_vec());
    for (k, row) in rows.into_iter().enumerate() {
        for i in 0..d {
            dtable.data[row * d + i] += dy.data[k * d + i];
        }
    }
    Ok(dtable)
}

/// The position in a tensor of `shape` of element `p` of a tensor of `within`, whose every
/// dimension is at most `shape`'s but along `axis` (gather's index), with `p[axis]` = `at`.
fn gathered(shape: &[usize], within: &[usize], p: usize, axis: usize, at: usize) -> usize {
    let (mut rest, mut flat, mut stride) = (p, 0, 1);
    for d in (0..within.len()).rev() {
        let coordinate = if d == axis { at } else { rest % within[d] };
        rest /= within[d];
        flat += coordinate * stride;
        stride *= shape[d];
    }
    flat
}

/// out[p] = x[p with p[axis] = index[p]]; out has index's shape.
pub(super) fn gather(x: &Dense, index: &Dense, axis: i64) -> Result<Dense, ExecError> {
    let a = resolve_axis(axis, x.shape.len());
    let at = indices("gather", index, x.shape[a])?;
    let data = at.iter().enumerate().map(|(p, &i)| x.data[gathered(&x.shape, &index.shape, p, a, i)]).collect();
    Ok(Dense::new(index.shape.clone(), data))
}

/// dx of `shape`: zero, plus dy[p] added at p with p[axis] = index[p] (in index's order).
pub(super) fn gather_backward(dy: &Dense, index: &Dense, shape: &[usize], axis: i64) -> Result<Dense, ExecError> {
    let a = resolve_axis(axis, shape.len());
    let at = indices("gather_backward", index, shape[a])?;
    let mut dx = Dense::zeros(shape.to_vec());
    for (p, &i) in at.iter().enumerate() {
        dx.data[gathered(shape, &index.shape, p, a, i)] += dy.data[p];
    }
    Ok(dx)
}

/// y = x, plus each src[p] added at p with p[axis] = index[p] (in index order).
pub(super) fn scatter_add(x: &Dense, index: &Dense, src: &Dense, axis: i64) -> Result<Dense, ExecError> {
    let a = resolve_axis(axis, x.shape.len());
    let at = indices("scatter_add", index, x.shape[a])?;
    let mut y = x.clone();
    for (p, &i) in at.iter().enumerate() {
        y.data[gathered(&x.shape, &index.shape, p, a, i)] += src.data[p];
    }
    Ok(y)
}

/// softmax of one row of logits, max-subtracted.
fn softmax_row(row: &[f64]) -> Vec<f64> {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    let exps: Vec<f64> = row.iter().map(|&v| (v - max).exp()).collect();
    let total = exps.iter().fold(0.0, |acc, e| acc + e);
    exps.into_iter().map(|e| e / total).collect()
}

/// The class of each row: `None` for a row labelled `ignore_index`; any other label must
/// lie in 0..classes (PyTorch checks ignore_index first, so it may be a valid class too).
fn row_labels(op: &str, labels: &Dense, classes: usize, ignore_index: i64) -> Result<Vec<Option<usize>>, ExecError> {
    let ignored = ignore_index as f64;
    labels.data.iter().map(|&v| if v == ignored { Ok(None) } else { index(op, v, classes).map(Some) }).collect()
}

/// PyTorch's mean cross-entropy: over the rows not ignored, of
/// (1 − ε)·(−log p[label]) + ε·mean_c(−log p_c), with −log p_c = lse − x_c and
/// lse = max + log Σ exp(x − max) (aten's `cross_entropy_loss_label_smoothing` divides both
/// terms by the count of rows not ignored). No row counted (N = 0, or every row ignored)
/// gives NaN, PyTorch's 0/0. With ε = 0 the smoothing term is not computed at all (as in
/// PyTorch, where it would turn a −inf logit's 0·∞ into NaN).
pub(super) fn cross_entropy(logits: &Dense, labels: &Dense, ce: &CrossEntropyAttrs) -> Result<Dense, ExecError> {
    let c = logits.shape[1];
    let labels = row_labels("cross_entropy", labels, c, ce.ignore_index)?;
    let (mut total, mut counted) = (0.0, 0usize);
    for (b, label) in labels.iter().enumerate() {
        let Some(label) = *label else { continue };
        total += row_loss(&logits.data[b * c..(b + 1) * c], label, ce.label_smoothing);
        counted += 1;
    }
    Ok(Dense::new(vec![], vec![total / counted as f64]))
}

/// One counted row's term of the mean cross-entropy (see [`cross_entropy`]).
fn row_loss(row: &[f64], label: usize, eps: f64) -> f64 {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    let sum_exp = row.iter().fold(0.0, |acc, &v| acc + (v - max).exp());
    let lse = max + sum_exp.ln();
    let nll = lse - row[label];
    if eps > 0.0 {
        let smooth = row.iter().fold(0.0, |acc, &v| acc + (lse - v)) / row.len() as f64;
        (1.0 - eps) * nll + eps * smooth
    } else {
        nll
    }
}

/// One row of dlogits (see [`cross_entropy_backward`]), appended to `out`.
fn row_grad(row: &[f64], label: Option<usize>, eps: f64, dloss: f64, counted: f64, out: &mut Vec<f64>) {
    let c = row.len();
    let Some(label) = label else {
        out.extend(std::iter::repeat_n(0.0, c));
        return;
    };
    for (j, p) in softmax_row(row).into_iter().enumerate() {
        let onehot = if j == label { 1.0 } else { 0.0 };
        out.push(dloss * (p - (1.0 - eps) * onehot - eps / c as f64) / counted);
    }
}

/// dlogits = dloss · (softmax(logits) − (1 − ε)·onehot(labels) − ε/C) / (rows not ignored);
/// 0 on ignored rows (so every row ignored gives 0, as PyTorch's nll_loss_backward writes
/// nothing there).
pub(super) fn cross_entropy_backward(
    dloss: &Dense,
    logits: &Dense,
    labels: &Dense,
    ce: &CrossEntropyAttrs,
) -> Result<Dense, ExecError> {
    let (n, c) = (logits.shape[0], logits.shape[1]);
    let labels = row_labels("cross_entropy_backward", labels, c, ce.ignore_index)?;
    let counted = labels.iter().filter(|l| l.is_some()).count() as f64;
    let (dloss, eps) = (dloss.data[0], ce.label_smoothing);
    let mut out = Vec::with_capacity(n * c);
    for (b, label) in labels.iter().enumerate() {
        row_grad(&logits.data[b * c..(b + 1) * c], *label, eps, dloss, counted, &mut out);
    }
    Ok(Dense::new(logits.shape.clone(), out))
}

/// `linear_cross_entropy(x, weight, labels)` as the unfused ops compute it: each row's
/// logits `x_row · weightᵀ` (stored as `logits`, the matmul's output dtype), its loss term
/// (summed in row order, as [`cross_entropy`] does, then divided by the rows counted), its
/// dlogits for dloss = 1 (stored as `logits`), then its row of dx and its share of
/// dweight's sums, added in row order. Rows are independent but for those sums, so the
/// chunks the op's `rows` makes change none of this arithmetic and the reference takes the
/// rows one at a time. `[loss, dx, dweight, workspace]`; the workspace output is zeros (its
/// contents after the op are not a result).
pub(super) fn linear_cross_entropy(
    x: &Dense,
    weight: &Dense,
    labels: &Dense,
    ce: &CrossEntropyAttrs,
    logits: DType,
    workspace: &[usize],
) -> Result<Vec<Dense>, ExecError> {
    let (classes, hidden) = (weight.shape[0], weight.shape[1]);
    let n = labels.data.len();
    let labels = row_labels("linear_cross_entropy", labels, classes, ce.ignore_index)?;
    let counted = labels.iter().filter(|l| l.is_some()).count();
    let store = |v: f64| stored(logits, v);
    let (mut total, mut dx, mut dweight) = (0.0, vec![0.0; n * hidden], vec![0.0; classes * hidden]);
    for (r, label) in labels.iter().enumerate() {
        let xr = &x.data[r * hidden..(r + 1) * hidden];
        let row: Vec<f64> = (0..classes)
            .map(|v| store(xr.iter().zip(&weight.data[v * hidden..(v + 1) * hidden]).fold(0.0, |acc, (a, b)| acc + a * b)))
            .collect();
        if let Some(label) = *label {
            total += row_loss(&row, label, ce.label_smoothing);
        }
        let mut grad = Vec::with_capacity(classes);
        row_grad(&row, *label, ce.label_smoothing, 1.0, counted as f64, &mut grad);
        let grad: Vec<f64> = grad.into_iter().map(store).collect();
        for (h, out) in dx[r * hidden..(r + 1) * hidden].iter_mut().enumerate() {
            *out = grad.iter().enumerate().fold(0.0, |acc, (v, g)| acc + g * weight.data[v * hidden + h]);
        }
        for (v, g) in grad.iter().enumerate() {
            for (h, out) in dweight[v * hidden..(v + 1) * hidden].iter_mut().enumerate() {
                *out += g * xr[h];
            }
        }
    }
    Ok(vec![
        Dense::new(vec![], vec![total / counted as f64]),
        Dense::new(x.shape.clone(), dx),
        Dense::new(weight.shape.clone(), dweight),
        Dense::new(workspace.to_vec(), vec![0.0; workspace.iter().product()]),
    ])
}

// ---------------------------------------------------------------------------------------
// bce_with_logits

/// PyTorch's `F.binary_cross_entropy_with_logits(x, t)` (mean reduction, no weights): the
/// mean over all elements of max(x, 0) − x·t + log(1 + e^−|x|), the stable form of
/// −t·log σ(x) − (1 − t)·log(1 − σ(x)) that aten computes (as (1 − t)·x − log σ(x)). No
/// elements give NaN, PyTorch's mean of nothing.
pub(super) fn bce_with_logits(logits: &Dense, targets: &Dense) -> Dense {
    let total = logits
        .data
        .iter()
        .zip(&targets.data)
        .fold(0.0, |acc, (&x, &t)| acc + (x.max(0.0) - x * t + (-x.abs()).exp().ln_1p()));
    Dense::new(vec![], vec![total / logits.data.len() as f64])
}

/// dlogits = dloss · (σ(x) − t) / numel(x), PyTorch's `binary_cross_entropy_with_logits`
/// backward (the derivative of each term is σ(x) − t on both sides of x = 0).
pub(super) fn bce_with_logits_backward(dloss: &Dense, logits: &Dense, targets: &Dense) -> Dense {
    let (dloss, n) = (dloss.data[0], logits.data.len() as f64);
    let data = logits.data.iter().zip(&targets.data).map(|(&x, &t)| dloss * (sigmoid(x) - t) / n).collect();
    Dense::new(logits.shape.clone(), data)
}

/// The k first elements of each line of x along `axis` in the order "larger first" (with
/// `largest`; else "smaller first"), a NaN counting as larger than every number and equal
/// values in the order of their positions; their values and positions.
pub(super) fn topk(x: &Dense, k: usize, axis: i64, largest: bool) -> [Dense; 2] {
    let a = resolve_axis(axis, x.shape.len());
    let (outer, n, inner) = split_at_axis(&x.shape, a);
    let mut shape = x.shape.clone();
    shape[a] = k;
    let (mut values, mut indices) = (Dense::zeros(shape.clone()), Dense::zeros(shape));
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| x.data[(o * n + i) * inner + j];
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&p, &q| {
                let (u, v) = (at(p), at(q));
                let rank = |w: f64| if w.is_nan() { f64::INFINITY } else if largest { -w } else { w };
                let nan_first = |w: f64| if largest { !w.is_nan() } else { w.is_nan() };
                nan_first(u).cmp(&nan_first(v)).then(rank(u).total_cmp(&rank(v))).then(p.cmp(&q))
            });
            for (r, &i) in order.iter().take(k).enumerate() {
                values.data[(o * k + r) * inner + j] = at(i);
                indices.data[(o * k + r) * inner + j] = i as f64;
            }
        }
    }
    [values, indices]
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use crate::exec::ExecError;
    use crate::ir::ops::{Attr, OpKind};

    #[test]
    fn softmax_rows_sum_to_one() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 1000.0, 1000.0, 1000.0]);
        let y = run(OpKind::Softmax, &[], &[x]).remove(0);
        let e = [1.0f64.exp(), 2.0f64.exp(), 3.0f64.exp()];
        let s = e[0] + e[1] + e[2];
        assert_close(&y, &[e[0] / s, e[1] / s, e[2] / s, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0], 1e-15);
        // Along axis 0 of a [3,2,2]: each (j, k) column over i sums to 1.
        let y = run(OpKind::Softmax, &[("axis", Attr::Int(0))], &[rand(&[3, 2, 2], 1)]).remove(0);
        for jk in 0..4 {
            let total: f64 = (0..3).map(|i| y.data[i * 4 + jk]).sum();
            assert!((total - 1.0).abs() < 1e-15, "column {jk} sums to {total}");
        }
        // Masked entries (-inf) get probability 0.
        let y = run(OpKind::Softmax, &[], &[t(&[3], &[0.0, f64::NEG_INFINITY, 0.0])]).remove(0);
        assert_eq!(y.data, [0.5, 0.0, 0.5]);
    }

    #[test]
    fn softmax_backward_values() {
        // y = [0.5, 0.5], dy = [1, 0]: Σ dy·y = 0.5, dx = y·(dy − 0.5) = [0.25, −0.25].
        let dx = run(OpKind::SoftmaxBackward, &[], &[t(&[2], &[1.0, 0.0]), t(&[2], &[0.5, 0.5])]).remove(0);
        assert_eq!(dx.data, [0.25, -0.25]);
    }

    #[test]
    fn layer_norm_normalises_rows() {
        let x = rand(&[3, 8], 2);
        let ones = t(&[8], &[1.0; 8]);
        let zeros = t(&[8], &[0.0; 8]);
        let y = run(OpKind::LayerNorm, &[("eps", Attr::Float(1e-12))], &[x, ones, zeros]).remove(0);
        for r in 0..3 {
            let row = &y.data[r * 8..(r + 1) * 8];
            let mean = row.iter().sum::<f64>() / 8.0;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 8.0;
            assert!(mean.abs() < 1e-12, "row {r} mean {mean}");
            assert!((var - 1.0).abs() < 1e-9, "row {r} variance {var}");
        }
        // Hand-computed: x = [1, 3], mean 2, var 1; gamma [2, 1], beta [0, 10].
        let y = run(
            OpKind::LayerNorm,
            &[("eps", Attr::Float(1e-300))],
            &[t(&[1, 2], &[1.0, 3.0]), t(&[2], &[2.0, 1.0]), t(&[2], &[0.0, 10.0])],
        );
        assert_close(&y[0], &[-2.0, 11.0], 1e-12);
    }

    #[test]
    fn rms_norm_values() {
        // x = [3, 4]: mean square 12.5; gamma [1, 2].
        let tiny = [("eps", Attr::Float(1e-300))];
        let y = run(OpKind::RmsNorm, &tiny, &[t(&[1, 2], &[3.0, 4.0]), t(&[2], &[1.0, 2.0])]);
        assert_close(&y[0], &[0.848_528_137_423_857, 2.262_741_699_796_952], 1e-15);
        // Rows are normalised apart, to a mean square of 1 (gamma 1, eps tiny).
        let y = run(OpKind::RmsNorm, &tiny, &[rand(&[3, 8], 5), t(&[8], &[1.0; 8])]).remove(0);
        for r in 0..3 {
            let mean_square = y.data[r * 8..(r + 1) * 8].iter().map(|v| v * v).sum::<f64>() / 8.0;
            assert!((mean_square - 1.0).abs() < 1e-12, "row {r}: {mean_square}");
        }
        // eps counts: x = 0 stays 0, x = [1, 1] with eps 3 gives 1/2.
        let y = run(OpKind::RmsNorm, &[("eps", Attr::Float(3.0))], &[t(&[2, 2], &[0.0, 0.0, 1.0, 1.0]), t(&[2], &[1.0; 2])]);
        assert_eq!(y[0].data, [0.0, 0.0, 0.5, 0.5]);
    }

    #[test]
    fn rms_norm_backward_values() {
        // Scaling a row does not change y (eps tiny): dy along x gives dx = 0; dgamma = Σ dy·x̂.
        let x = t(&[2, 3], &[1.0, -2.0, 2.0, 0.5, 0.5, -1.0]);
        let tiny = [("eps", Attr::Float(1e-300))];
        let out = run(OpKind::RmsNormBackward, &tiny, &[x.clone(), x.clone(), t(&[3], &[1.0; 3])]);
        assert_eq!(out.len(), 2);
        assert_close(&out[0], &[0.0; 6], 1e-15);
        // x̂ rows: [1, -2, 2]/√3 and [0.5, 0.5, -1]/√0.5; dy = x, so dgamma_i = Σ_rows x_i·x̂_i.
        let (a, b) = (1.0 / 3f64.sqrt(), 1.0 / 0.5f64.sqrt());
        assert_close(&out[1], &[a + 0.25 * b, 4.0 * a + 0.25 * b, 4.0 * a + b], 1e-14);
    }

    #[test]
    fn batch_norm_normalises_channels() {
        let x = rand(&[4, 2, 3, 3], 3);
        let y =
            run(OpKind::BatchNorm, &[("eps", Attr::Float(1e-12))], &[x, t(&[2], &[1.0, 2.0]), t(&[2], &[0.0, 5.0])])
                .remove(0);
        for ch in 0..2 {
            let vals: Vec<f64> =
                (0..4).flat_map(|b| (0..9).map(move |s| (b * 2 + ch) * 9 + s)).map(|i| y.data[i]).collect();
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / vals.len() as f64;
            let (want_mean, want_var) = if ch == 0 { (0.0, 1.0) } else { (5.0, 4.0) };
            assert!((mean - want_mean).abs() < 1e-12, "channel {ch} mean {mean}");
            assert!((var - want_var).abs() < 1e-9, "channel {ch} variance {var}");
        }
        // [N,C] = [2,1]: x = [1, 3] → [-1, 1].
        let y = run(
            OpKind::BatchNorm,
            &[("eps", Attr::Float(1e-300))],
            &[t(&[2, 1], &[1.0, 3.0]), t(&[1], &[1.0]), t(&[1], &[0.0])],
        );
        assert_close(&y[0], &[-1.0, 1.0], 1e-12);
    }

    #[test]
    fn batch_norm_stats_are_each_channels_moments() {
        // x [2, 2, 2]: channel 0 holds 1, 2, 5, 6 (mean 3.5, Σ(x − mean)² = 17), channel 1
        // holds 3, 4, 7, 8 (mean 5.5, the same squares).
        let x = t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let biased = run(OpKind::BatchNormStats, &[], std::slice::from_ref(&x));
        assert_close(&biased[0], &[3.5, 5.5], 1e-12);
        assert_close(&biased[1], &[17.0 / 4.0, 17.0 / 4.0], 1e-12);
        // PyTorch's running_var is the unbiased variance: Σ(x − mean)² / (M − 1).
        let unbiased = run(OpKind::BatchNormStats, &[("correction", Attr::Int(1))], &[x]);
        assert_close(&unbiased[1], &[17.0 / 3.0, 17.0 / 3.0], 1e-12);
    }

    #[test]
    fn norm_backward_of_constant_upstream() {
        // dy = 1 everywhere: dbeta counts the elements, dx is 0 (a shift of x changes nothing).
        let x = rand(&[2, 3, 2], 4);
        let out =
            run(OpKind::BatchNormBackward, &[], &[t(&[2, 3, 2], &[1.0; 12]), x.clone(), t(&[3], &[1.0, 2.0, 3.0])]);
        assert_close(&out[2], &[4.0, 4.0, 4.0], 0.0);
        assert_close(&out[0], &[0.0; 12], 1e-12);
        let out = run(OpKind::LayerNormBackward, &[], &[t(&[2, 3, 2], &[1.0; 12]), x, t(&[2], &[1.0, 1.0])]);
        assert_close(&out[2], &[6.0, 6.0], 0.0);
        assert_close(&out[0], &[0.0; 12], 1e-12);
    }

    fn pool(k: i64, s: i64, p: i64) -> [(&'static str, Attr); 3] {
        [("kernel", ints(&[k, k])), ("stride", ints(&[s, s])), ("padding", ints(&[p, p]))]
    }

    #[test]
    fn max_pool2d_values() {
        #[rustfmt::skip]
        let x = t(&[1, 1, 4, 4], &[
            1.0, 2.0, 5.0, 0.0,
            3.0, 4.0, 1.0, 1.0,
            0.0, 0.0, -1.0, -2.0,
            9.0, 0.0, -3.0, -4.0,
        ]);
        let y = run(OpKind::MaxPool2d, &pool(2, 2, 0), std::slice::from_ref(&x)).remove(0);
        assert_eq!(y, t(&[1, 1, 2, 2], &[4.0, 5.0, 9.0, -1.0]));
        // Padding counts as -inf: an all-negative corner stays negative.
        let y = run(OpKind::MaxPool2d, &pool(2, 2, 1), std::slice::from_ref(&x)).remove(0);
        assert_eq!(y.shape, [1, 1, 3, 3]);
        assert_eq!(y.data, [1.0, 5.0, 0.0, 3.0, 4.0, 1.0, 9.0, 0.0, -4.0]);
        let dx =
            run(OpKind::MaxPool2dBackward, &pool(2, 2, 0), &[t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]), x]).remove(0);
        #[rustfmt::skip]
        let want = [
            0.0, 0.0, 2.0, 0.0,
            0.0, 1.0, 0.0, 0.0,
            0.0, 0.0, 4.0, 0.0,
            3.0, 0.0, 0.0, 0.0,
        ];
        assert_eq!(dx.data, want);
    }

    #[test]
    fn max_pool2d_backward_ties_and_overlaps() {
        // All equal: every window's first element (row-major) takes the gradient.
        let x = t(&[1, 1, 3, 3], &[1.0; 9]);
        let dy = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let dx = run(OpKind::MaxPool2dBackward, &pool(2, 1, 0), &[dy, x]).remove(0);
        assert_eq!(dx.data, [1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0]);
        // One global maximum shared by four overlapping windows collects all of dy.
        let x = t(&[1, 1, 3, 3], &[0.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0]);
        let dy = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let dx = run(OpKind::MaxPool2dBackward, &pool(2, 1, 0), &[dy, x]).remove(0);
        assert_eq!(dx.data, [0.0, 0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn embedding_gathers_and_scatters() {
        let table = t(&[3, 2], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
        let ids = t(&[2, 2], &[2.0, 0.0, 2.0, 1.0]);
        let out = run(OpKind::Embedding, &[], &[table, ids.clone()]).remove(0);
        assert_eq!(out, t(&[2, 2, 2], &[20.0, 21.0, 0.0, 1.0, 20.0, 21.0, 10.0, 11.0]));
        let dy = t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let dtable = run(OpKind::EmbeddingBackward, &[("vocab", Attr::Int(4))], &[dy, ids]).remove(0);
        assert_eq!(dtable, t(&[4, 2], &[3.0, 4.0, 7.0, 8.0, 6.0, 8.0, 0.0, 0.0]));
        // A scalar id gives one row.
        let out = run(OpKind::Embedding, &[], &[t(&[3, 2], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]), t(&[], &[1.0])]);
        assert_eq!(out[0], t(&[2], &[10.0, 11.0]));
    }

    #[test]
    fn index_out_of_range_is_an_error() {
        let table = t(&[3, 2], &[0.0; 6]);
        let err = try_run(OpKind::Embedding, &[], &[table, t(&[2], &[1.0, 3.0])]).unwrap_err();
        assert_eq!(err, ExecError::IndexOutOfRange { op: "embedding".into(), index: 3, bound: 3 });
        let err =
            try_run(OpKind::EmbeddingBackward, &[("vocab", Attr::Int(3))], &[t(&[1, 2], &[0.0; 2]), t(&[1], &[-1.0])])
                .unwrap_err();
        assert_eq!(err, ExecError::IndexOutOfRange { op: "embedding_backward".into(), index: -1, bound: 3 });
        let logits = t(&[2, 3], &[0.0; 6]);
        let err = try_run(OpKind::CrossEntropy, &[], &[logits.clone(), t(&[2], &[0.0, 5.0])]).unwrap_err();
        assert_eq!(err, ExecError::IndexOutOfRange { op: "cross_entropy".into(), index: 5, bound: 3 });
        let err =
            try_run(OpKind::CrossEntropyBackward, &[], &[t(&[], &[1.0]), logits, t(&[2], &[-2.0, 0.0])]).unwrap_err();
        assert_eq!(err, ExecError::IndexOutOfRange { op: "cross_entropy_backward".into(), index: -2, bound: 3 });
    }

    fn ce(ignore_index: i64, smoothing: f64) -> [(&'static str, Attr); 2] {
        [("ignore_index", Attr::Int(ignore_index)), ("label_smoothing", Attr::Float(smoothing))]
    }

    #[test]
    fn cross_entropy_ignores_rows_and_smooths_labels() {
        // Row 0: p = [1/4, 3/4], label 0; row 1 ignored (-100, the default); row 2: logits
        // [1, 2], label 1. With ε = 0.2: row 0 gives 0.8·ln 4 + 0.2·(ln 4 + ln 4 − ln 3)/2 =
        // ln 4 − 0.1·ln 3; row 2, with L = ln(1 + 1/e) = −log p[1], gives 0.8·L + 0.2·(L + 1/2)
        // = L + 0.1; the mean is over the 2 rows counted.
        let logits = t(&[3, 2], &[0.0, 3f64.ln(), 5.0, 5.0, 1.0, 2.0]);
        let labels = t(&[3], &[0.0, -100.0, 1.0]);
        let loss = run(OpKind::CrossEntropy, &ce(-100, 0.2), &[logits.clone(), labels.clone()]).remove(0);
        let l = (1.0 + (-1f64).exp()).ln();
        assert_close(&loss, &[(4f64.ln() - 0.1 * 3f64.ln() + l + 0.1) / 2.0], 1e-15);
        // Without smoothing: the plain mean of −log p[label] over the rows counted.
        let loss = run(OpKind::CrossEntropy, &[], &[logits.clone(), labels.clone()]).remove(0);
        assert_close(&loss, &[(4f64.ln() + l) / 2.0], 1e-15);
        // ignore_index may be a class: only row 1 ([5, 5], label 0) counts.
        let loss = run(OpKind::CrossEntropy, &ce(1, 0.0), &[logits.clone(), t(&[3], &[1.0, 0.0, 1.0])]).remove(0);
        assert_close(&loss, &[2f64.ln()], 1e-15);
        // Every row ignored: PyTorch's 0/0, NaN; and with full smoothing the label no longer
        // matters: the mean over classes of −log p_c.
        let all_ignored = t(&[3], &[-100.0; 3]);
        let loss = run(OpKind::CrossEntropy, &ce(-100, 0.5), &[logits.clone(), all_ignored.clone()]).remove(0);
        assert!(loss.data[0].is_nan());
        let loss = run(OpKind::CrossEntropy, &ce(-100, 1.0), &[t(&[1, 2], &[0.0, 3f64.ln()]), t(&[1], &[1.0])]);
        assert_close(&loss[0], &[4f64.ln() - 3f64.ln() / 2.0], 1e-15);

        // Backward, dloss 2 over 2 rows counted: dloss·(p − 0.8·onehot − 0.1)/2, 0 on row 1.
        let d = run(OpKind::CrossEntropyBackward, &ce(-100, 0.2), &[t(&[], &[2.0]), logits.clone(), labels]).remove(0);
        let (p0, p1) = (1.0 / (1.0 + std::f64::consts::E), std::f64::consts::E / (1.0 + std::f64::consts::E));
        assert_close(&d, &[-0.65, 0.65, 0.0, 0.0, p0 - 0.1, p1 - 0.9], 1e-15);
        // Every row ignored: no gradient at all (PyTorch writes none).
        let d = run(OpKind::CrossEntropyBackward, &ce(-100, 0.5), &[t(&[], &[1.0]), logits, all_ignored]).remove(0);
        assert_eq!(d.data, [0.0; 6]);
    }

    #[test]
    fn f32_loss_takes_half_logits_and_computes_the_same() {
        // f32_loss changes the types (bf16 logits, an f32 loss and dloss, a bf16 gradient),
        // not the arithmetic: the kernels compute in f64 from the logits' values, which a
        // bf16 tensor holds exactly; the executors round each result to its dtype.
        use crate::exec::kernels::eval;
        use crate::ir::types::{DType, TensorType};
        let logits = t(&[3, 2], &[0.0, 1.5, 5.0, 5.0, 1.0, 2.0]);
        let labels = t(&[3], &[0.0, -100.0, 1.0]);
        let given = [("label_smoothing", Attr::Float(0.2)), ("f32_loss", Attr::Bool(true))];
        let half = TensorType::new(DType::Bf16, vec![3, 2]);
        let index = TensorType::new(DType::I64, vec![3]);
        let scalar = TensorType::new(DType::F32, vec![]);
        let forward = attrs(OpKind::CrossEntropy, &given);
        let types = (OpKind::CrossEntropy.def().infer)(&[&half, &index], &forward).unwrap();
        assert_eq!(types, std::slice::from_ref(&scalar));
        let loss = eval(OpKind::CrossEntropy, &forward, &[logits.clone(), labels.clone()], &types).unwrap();
        assert_eq!(loss, run(OpKind::CrossEntropy, &ce(-100, 0.2), &[logits.clone(), labels.clone()]));
        let backward = attrs(OpKind::CrossEntropyBackward, &given);
        let types = (OpKind::CrossEntropyBackward.def().infer)(&[&scalar, &half, &index], &backward).unwrap();
        assert_eq!(types, [half]);
        let dloss = t(&[], &[2.0]);
        let d = eval(OpKind::CrossEntropyBackward, &backward, &[dloss.clone(), logits.clone(), labels.clone()], &types);
        assert_eq!(d.unwrap(), run(OpKind::CrossEntropyBackward, &ce(-100, 0.2), &[dloss, logits, labels]));
    }

    #[test]
    fn labels_that_are_not_ignored_must_be_classes() {
        // -100 is fine while it is the ignore_index, out of range once it is not.
        let logits = t(&[2, 3], &[0.0; 6]);
        let labels = t(&[2], &[-100.0, 2.0]);
        assert!(try_run(OpKind::CrossEntropy, &[], &[logits.clone(), labels.clone()]).is_ok());
        let err = try_run(OpKind::CrossEntropy, &ce(0, 0.0), &[logits.clone(), labels.clone()]).unwrap_err();
        assert_eq!(err, ExecError::IndexOutOfRange { op: "cross_entropy".into(), index: -100, bound: 3 });
        let err = try_run(OpKind::CrossEntropyBackward, &ce(2, 0.1), &[t(&[], &[1.0]), logits, labels]).unwrap_err();
        assert_eq!(err, ExecError::IndexOutOfRange { op: "cross_entropy_backward".into(), index: -100, bound: 3 });
    }

    #[test]
    fn cross_entropy_values() {
        // Uniform logits: the loss is ln C whatever the labels.
        let loss = run(OpKind::CrossEntropy, &[], &[t(&[4, 5], &[0.3; 20]), t(&[4], &[0.0, 1.0, 4.0, 2.0])]).remove(0);
        assert_eq!(loss.shape, Vec::<usize>::new());
        assert!((loss.data[0] - 5f64.ln()).abs() < 1e-15, "{}", loss.data[0]);
        // Huge logits stay finite (max-subtracted): the right class dominates.
        let loss = run(OpKind::CrossEntropy, &[], &[t(&[1, 2], &[1000.0, 0.0]), t(&[1], &[0.0])]).remove(0);
        assert!(loss.data[0] >= 0.0 && loss.data[0] < 1e-300);
        let loss = run(OpKind::CrossEntropy, &[], &[t(&[1, 2], &[1000.0, 0.0]), t(&[1], &[1.0])]).remove(0);
        assert_eq!(loss.data[0], 1000.0);
        // Backward: uniform logits, dloss 2, N = 2, C = 2: (0.5 − onehot)·2/2.
        let d = run(OpKind::CrossEntropyBackward, &[], &[t(&[], &[2.0]), t(&[2, 2], &[0.0; 4]), t(&[2], &[1.0, 0.0])]);
        assert_eq!(d[0], t(&[2, 2], &[0.5, -0.5, -0.5, 0.5]));
    }

    /// Values PyTorch gives: BCEWithLogitsLoss of logits [0, 2, −3] and targets [1, 0, 0.5]
    /// is mean(log 2, 2 + log(1 + e⁻²), 1.5 + log(1 + e⁻³)); huge logits stay finite.
    #[test]
    fn bce_with_logits_values() {
        let logits = t(&[3], &[0.0, 2.0, -3.0]);
        let targets = t(&[3], &[1.0, 0.0, 0.5]);
        let loss = run(OpKind::BceWithLogits, &[], &[logits.clone(), targets.clone()]).remove(0);
        let want = (2f64.ln() + 2.0 + (-2f64).exp().ln_1p() + 1.5 + (-3f64).exp().ln_1p()) / 3.0;
        assert_eq!(loss.shape, Vec::<usize>::new());
        assert_close(&loss, &[want], 1e-15);
        // The naive −t·log σ(x) − (1 − t)·log(1 − σ(x)) is the same number.
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let naive: f64 =
            logits.data.iter().zip(&targets.data).map(|(&x, &t)| -t * sig(x).ln() - (1.0 - t) * (1.0 - sig(x)).ln()).sum();
        assert_close(&loss, &[naive / 3.0], 1e-12);
        let loss = run(OpKind::BceWithLogits, &[], &[t(&[2], &[1000.0, -1000.0]), t(&[2], &[0.0, 1.0])]).remove(0);
        assert_close(&loss, &[1000.0], 1e-9);
        let empty = run(OpKind::BceWithLogits, &[], &[t(&[0], &[]), t(&[0], &[])]).remove(0);
        assert!(empty.data[0].is_nan());
        let dlogits = run(OpKind::BceWithLogitsBackward, &[], &[t(&[], &[3.0]), logits, targets]).remove(0);
        assert_close(&dlogits, &[3.0 * (0.5 - 1.0) / 3.0, sig(2.0), (sig(-3.0) - 0.5)], 1e-15);
    }
}
