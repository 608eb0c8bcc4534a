//! Shape kernels: transpose, expand, slice and select as dense row-major copies (the IR
//! treats them as views; kernels materialise them), slice's gradient, writes into a slice
//! (`slice_scatter`), concatenation, and
//! the reductions sum and mean, and argmax. `reshape` is a copy of the data under the new shape, done
//! in `eval`.

use super::{broadcast_strides, resolve_axis, strides, walk};
use crate::exec::Dense;

/// out dim i = x dim perm[i] (perm is a permutation, checked by the type rule).
pub(super) fn transpose(x: &Dense, perm: &[i64]) -> Dense {
    let own = strides(&x.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p as usize]).collect();
    let read: Vec<usize> = perm.iter().map(|&p| own[p as usize]).collect();
    let mut data = Vec::with_capacity(x.numel());
    walk(&shape, [&read], |[i]| data.push(x.data[i]));
    Dense::new(shape, data)
}

/// x broadcast to `shape` (numpy rules).
pub(super) fn expand(x: &Dense, shape: &[usize]) -> Dense {
    let read = broadcast_strides(&x.shape, shape);
    let mut data = Vec::with_capacity(shape.iter().product());
    walk(shape, [&read], |[i]| data.push(x.data[i]));
    Dense::new(shape.to_vec(), data)
}

/// x[start:end:step] along `axis` (resolved), shaped `shape`.
pub(super) fn slice(x: &Dense, axis: usize, start: usize, step: usize, shape: &[usize]) -> Dense {
    let own = strides(&x.shape);
    let mut read = own.clone();
    read[axis] *= step;
    let base = start * own[axis];
    let mut data = Vec::with_capacity(shape.iter().product());
    walk(shape, [&read], |[i]| data.push(x.data[base + i]));
    Dense::new(shape.to_vec(), data)
}

/// x[index] along `axis` (resolved), the axis dropped.
pub(super) fn select(x: &Dense, axis: usize, index: usize) -> Dense {
    let own = strides(&x.shape);
    let (mut shape, mut read) = (x.shape.clone(), own.clone());
    shape.remove(axis);
    read.remove(axis);
    let base = index * own[axis];
    let mut data = Vec::with_capacity(shape.iter().product());
    walk(&shape, [&read], |[i]| data.push(x.data[base + i]));
    Dense::new(shape, data)
}

/// Zeros of `shape` with `dy` written at `[start:end:step]` along `axis` (resolved).
pub(super) fn slice_backward(dy: &Dense, shape: &[usize], axis: usize, start: usize, step: usize) -> Dense {
    write_slice(Dense::zeros(shape.to_vec()), dy, axis, start, step)
}

/// `x` with `src` written at `[start:end:step]` along `axis` (resolved).
pub(super) fn slice_scatter(x: &Dense, src: &Dense, axis: usize, start: usize, step: usize) -> Dense {
    write_slice(x.clone(), src, axis, start, step)
}

/// `out` with `src` written over its elements `[start:end:step]` along `axis`.
fn write_slice(mut out: Dense, src: &Dense, axis: usize, start: usize, step: usize) -> Dense {
    let own = strides(&out.shape);
    let mut write = own.clone();
    write[axis] *= step;
    let base = start * own[axis];
    let mut k = 0;
    walk(&src.shape, [&write], |[o]| {
        out.data[base + o] = src.data[k];
        k += 1;
    });
    out
}

/// The inputs one after the other along `axis` (resolved), shaped `shape`.
pub(super) fn cat(xs: &[Dense], axis: usize, shape: &[usize]) -> Dense {
    let mut out = Dense::zeros(shape.to_vec());
    let write = strides(shape);
    let mut at = 0;
    for x in xs {
        let base = at * write[axis];
        let mut k = 0;
        walk(&x.shape, [&write], |[o]| {
            out.data[base + o] = x.data[k];
            k += 1;
        });
        at += x.shape[axis];
    }
    out
}

/// The sum over `axes` (resolved, distinct: checked by the type rule), shaped `out_shape`
/// (which has or lacks the reduced dimensions as `keepdim` said: the offsets are the same).
/// Each output element adds its terms in row-major order of x.
pub(super) fn sum(x: &Dense, axes: &[i64], out_shape: &[usize]) -> Dense {
    let rank = x.shape.len();
    let reduced: Vec<bool> = (0..rank).map(|i| axes.iter().any(|&a| resolve_axis(a, rank) == i)).collect();
    // Strides of the output, seen from x's dimensions: 0 along reduced ones.
    let kept: Vec<usize> = (0..rank).map(|i| if reduced[i] { 1 } else { x.shape[i] }).collect();
    let kept_strides = strides(&kept);
    let write: Vec<usize> = (0..rank).map(|i| if reduced[i] { 0 } else { kept_strides[i] }).collect();
    let mut out = Dense::zeros(out_shape.to_vec());
    let mut k = 0;
    walk(&x.shape, [&write], |[o]| {
        out.data[o] += x.data[k];
        k += 1;
    });
    out
}

/// The mean over `axes`: the sum divided by the number of reduced elements (an empty
/// reduction gives NaN, 0/0, as in numpy and PyTorch).
pub(super) fn mean(x: &Dense, axes: &[i64], out_shape: &[usize]) -> Dense {
    let mut out = sum(x, axes, out_shape);
    let rank = x.shape.len();
    let count: usize =
        (0..rank).filter(|&i| axes.iter().any(|&a| resolve_axis(a, rank) == i)).map(|i| x.shape[i]).product();
    for v in &mut out.data {
        *v /= count as f64;
    }
    out
}

/// The position of x's largest element along `axis`, the first on ties, a NaN counting as
/// larger than every number (PyTorch's argmax); `shape` is the output's (keepdim or not,
/// the same row-major order).
pub(super) fn argmax(x: &Dense, axis: i64, shape: &[usize]) -> Dense {
    let axis = resolve_axis(axis, x.shape.len());
    let outer: usize = x.shape[..axis].iter().product();
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut data = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| x.data[(o * n + i) * inner + j];
            let mut best = 0;
            for i in 1..n {
                let (value, top) = (at(i), at(best));
                if !top.is_nan() && (value.is_nan() || value > top) {
                    best = i;
                }
            }
            data.push(best as f64);
        }
    }
    Dense::new(shape.to_vec(), data)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use crate::ir::ops::{Attr, OpKind};

    #[test]
    fn reshape_keeps_row_major_order() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let out = run(OpKind::Reshape, &[("shape", ints(&[3, 2]))], &[x]).remove(0);
        assert_eq!(out, t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let out = run(OpKind::Reshape, &[("shape", ints(&[1, 1]))], &[t(&[], &[7.0])]).remove(0);
        assert_eq!(out, t(&[1, 1], &[7.0]));
    }

    #[test]
    fn transpose_permutes() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let out = run(OpKind::Transpose, &[("perm", ints(&[1, 0]))], &[x]).remove(0);
        assert_eq!(out, t(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
        // [2,3,4] with [0, 2, 1]: out[a, c, b] = x[a, b, c].
        let x = rand(&[2, 3, 4], 1);
        let out = run(OpKind::Transpose, &[("perm", ints(&[0, 2, 1]))], std::slice::from_ref(&x)).remove(0);
        assert_eq!(out.shape, [2, 4, 3]);
        for a in 0..2 {
            for b in 0..3 {
                for c in 0..4 {
                    assert_eq!(out.data[a * 12 + c * 3 + b], x.data[a * 12 + b * 4 + c]);
                }
            }
        }
        // [2,3,4] with [2, 0, 1]: out[c, a, b] = x[a, b, c].
        let out = run(OpKind::Transpose, &[("perm", ints(&[2, 0, 1]))], std::slice::from_ref(&x)).remove(0);
        assert_eq!(out.shape, [4, 2, 3]);
        assert_eq!(out.data[3 * 6 + 3 + 2], x.data[12 + 2 * 4 + 3]);
    }

    #[test]
    fn expand_broadcasts() {
        let x = t(&[3, 1], &[1.0, 2.0, 3.0]);
        let out = run(OpKind::Expand, &[("shape", ints(&[2, 3, 2]))], &[x]).remove(0);
        assert_eq!(out.shape, [2, 3, 2]);
        assert_eq!(out.data, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
        let out = run(OpKind::Expand, &[("shape", ints(&[2]))], &[t(&[], &[4.0])]).remove(0);
        assert_eq!(out.data, [4.0, 4.0]);
    }

    #[test]
    fn sum_and_mean() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let axes = |a: &[i64], keep: bool| [("axes", ints(a)), ("keepdim", Attr::Bool(keep))];
        assert_eq!(run(OpKind::Sum, &axes(&[0], false), std::slice::from_ref(&x))[0], t(&[3], &[5.0, 7.0, 9.0]));
        assert_eq!(run(OpKind::Sum, &axes(&[1], true), std::slice::from_ref(&x))[0], t(&[2, 1], &[6.0, 15.0]));
        assert_eq!(run(OpKind::Sum, &axes(&[-1, 0], false), std::slice::from_ref(&x))[0], t(&[], &[21.0]));
        assert_eq!(run(OpKind::Mean, &axes(&[1], false), std::slice::from_ref(&x))[0], t(&[2], &[2.0, 5.0]));
        assert_eq!(run(OpKind::Mean, &axes(&[0, 1], true), &[x])[0], t(&[1, 1], &[3.5]));
        // The middle axis of a rank-3 tensor.
        let x = rand(&[2, 3, 4], 2);
        let out = run(OpKind::Sum, &axes(&[1], false), std::slice::from_ref(&x)).remove(0);
        assert_eq!(out.shape, [2, 4]);
        for a in 0..2 {
            for c in 0..4 {
                let want = x.data[a * 12 + c] + x.data[a * 12 + 4 + c] + x.data[a * 12 + 8 + c];
                assert_eq!(out.data[a * 4 + c], want);
            }
        }
        // An empty reduction: the sum is 0, the mean NaN.
        let empty = t(&[0, 2], &[]);
        assert_eq!(run(OpKind::Sum, &axes(&[0], false), std::slice::from_ref(&empty))[0].data, [0.0, 0.0]);
        assert!(run(OpKind::Mean, &axes(&[0], false), &[empty])[0].data.iter().all(|v| v.is_nan()));
    }
}
