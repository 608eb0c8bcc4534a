//! Linear algebra: matmul over the last two dimensions, each operand optionally transposed,
//! batch dimensions broadcast (numpy rules).

use super::{broadcast_strides, walk};
use crate::exec::Dense;
use crate::ir::ops::MatmulAttrs;

/// `a[..., m, k] @ b[..., k, n]` (`transpose_a`: a is stored `[..., k, m]`; `transpose_b`: b
/// is stored `[..., n, k]`), giving `out_shape = batch + [m, n]`. Each output element is
/// Σ_p a[i, p] · b[p, j] added in order p = 0, 1, ..., k-1.
pub(super) fn matmul(a: &Dense, b: &Dense, MatmulAttrs { transpose_a, transpose_b }: MatmulAttrs, out_shape: &[usize]) -> Dense {
    let (ra, ca) = last2(&a.shape);
    let (rb, cb) = last2(&b.shape);
    let (m, k) = if transpose_a { (ca, ra) } else { (ra, ca) };
    let n = if transpose_b { rb } else { cb };
    let batch = &out_shape[..out_shape.len() - 2];
    // Offsets of each batch's matrix, in matrices; scaled to elements below.
    let sa = broadcast_strides(&a.shape[..a.shape.len() - 2], batch);
    let sb = broadcast_strides(&b.shape[..b.shape.len() - 2], batch);

    let mut out = Vec::with_capacity(out_shape.iter().product());
    // Per batch, a as rows [m][k] and b as columns [n][k], so the inner loop runs over
    // contiguous memory.
    let mut a_rows = vec![0.0; m * k];
    let mut b_cols = vec![0.0; n * k];
    walk(batch, [&sa, &sb], |[ia, ib]| {
        let a_mat = &a.data[ia * m * k..(ia + 1) * m * k];
        let b_mat = &b.data[ib * k * n..(ib + 1) * k * n];
        for i in 0..m {
            for p in 0..k {
                a_rows[i * k + p] = if transpose_a { a_mat[p * m + i] } else { a_mat[i * k + p] };
            }
        }
        for j in 0..n {
            for p in 0..k {
                b_cols[j * k + p] = if transpose_b { b_mat[j * k + p] } else { b_mat[p * n + j] };
            }
        }
        for i in 0..m {
            let row = &a_rows[i * k..(i + 1) * k];
            for j in 0..n {
                let col = &b_cols[j * k..(j + 1) * k];
                let mut acc = 0.0;
                for p in 0..k {
                    acc += row[p] * col[p];
                }
                out.push(acc);
            }
        }
    });
    Dense::new(out_shape.to_vec(), out)
}

/// The last two dimensions (the type rule guarantees rank >= 2).
fn last2(shape: &[usize]) -> (usize, usize) {
    (shape[shape.len() - 2], shape[shape.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use crate::ir::ops::{Attr, OpKind};

    fn tr(ta: bool, tb: bool) -> [(&'static str, Attr); 2] {
        [("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))]
    }

    #[test]
    fn two_by_three_at_three_by_two() {
        let a = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        let out = run(OpKind::Matmul, &[], &[a.clone(), b.clone()]).remove(0);
        assert_eq!(out, t(&[2, 2], &[58.0, 64.0, 139.0, 154.0]));
        // The same product from stored transposes.
        let at = t(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let bt = t(&[2, 3], &[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]);
        assert_eq!(run(OpKind::Matmul, &tr(true, false), &[at.clone(), b])[0], out);
        assert_eq!(run(OpKind::Matmul, &tr(false, true), &[a, bt.clone()])[0], out);
        assert_eq!(run(OpKind::Matmul, &tr(true, true), &[at, bt])[0], out);
    }

    #[test]
    fn batch_dimensions_broadcast() {
        // [2,1,2,2] @ [3,2,1] -> [2,3,2,1]
        let a = rand(&[2, 1, 2, 2], 1);
        let b = rand(&[3, 2, 1], 2);
        let out = run(OpKind::Matmul, &[], &[a.clone(), b.clone()]).remove(0);
        assert_eq!(out.shape, [2, 3, 2, 1]);
        for x in 0..2 {
            for y in 0..3 {
                for i in 0..2 {
                    let want = a.data[x * 4 + i * 2] * b.data[y * 2] + a.data[x * 4 + i * 2 + 1] * b.data[y * 2 + 1];
                    assert_eq!(out.data[x * 6 + y * 2 + i], want, "batch ({x},{y}) row {i}");
                }
            }
        }
        // A batched matrix times a shared one equals each batch's product.
        let a = rand(&[3, 2, 4], 3);
        let w = rand(&[4, 5], 4);
        let out = run(OpKind::Matmul, &[], &[a.clone(), w.clone()]).remove(0);
        for batch in 0..3 {
            let one = t(&[2, 4], &a.data[batch * 8..(batch + 1) * 8]);
            let want = run(OpKind::Matmul, &[], &[one, w.clone()]).remove(0);
            assert_eq!(&out.data[batch * 10..(batch + 1) * 10], &want.data[..]);
        }
    }

    #[test]
    fn empty_inner_dimension_gives_zeros() {
        let out = run(OpKind::Matmul, &[], &[t(&[2, 0], &[]), t(&[0, 3], &[])]).remove(0);
        assert_eq!(out, t(&[2, 3], &[0.0; 6]));
    }
}
