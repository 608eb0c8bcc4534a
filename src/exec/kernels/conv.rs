//! Convolution kernels and their gradients (NCHW, NCDHW): conv2d, conv3d and
//! conv_transpose2d, with stride, padding, dilation and groups, all walking one index space
//! (`ConvIndex`, 3-d; a 2-d op has depth 1), conv_transpose2d in the opposite direction, so
//! it is conv2d's adjoint by construction.
//!
//! Backward kernels compute the exact gradients of their forward kernels (checked against
//! finite differences in `kernels/mod.rs`, against direct loops and the adjoint identity
//! below).

use crate::exec::Dense;
use crate::ir::ops::{Conv3dAttrs, ConvAttrs};


/// The input position read by output position `out` at kernel tap offset `tap` (the tap's
/// index times the dilation), if it lies inside the input (extent `size`) rather than in
/// the padding.
pub(super) fn source(out: usize, tap: usize, stride: usize, pad: usize, size: usize) -> Option<usize> {
    (out * stride + tap).checked_sub(pad).filter(|&i| i < size)
}

/// The index space of a convolution in conv3d's terms: an input side `[N, C, D, H, W]`, an
/// output side `[N, K, O, P, Q]` and a weight `[K, C/groups, T, R, S]` (conv2d's and
/// conv_transpose2d's with depth 1: D = O = T = 1). Output channel k belongs to group
/// k / (K/groups) and meets that group's C/groups input channels; output (o, p, q) at tap
/// (t, r, s) meets input (o·sd + t·dd − pd, p·sh + r·dh − ph, q·sw + s·dw − pw). conv2d and
/// conv3d read the input side and write the output side; conv_transpose2d is the same space
/// the other way round (its x is the output side, its y the input side), which makes it
/// conv2d's transpose.
struct ConvIndex {
    /// The input side's N, C, D, H, W.
    input: [usize; 5],
    /// The output side's K, O, P, Q.
    output: [usize; 4],
    /// T, R, S.
    kernel: [usize; 3],
    stride: [usize; 3],
    padding: [usize; 3],
    dilation: [usize; 3],
    groups: usize,
}

impl ConvIndex {
    /// The space of a 2-d op with attributes `attrs` whose input side has shape `input`,
    /// weight `w` and output side `output` (all rank 4 by the type rule): depth 1.
    fn new(attrs: &ConvAttrs, input: &[usize], w: &[usize], output: &[usize]) -> ConvIndex {
        let with_depth = |p: [u64; 2], depth: usize| [depth, p[0] as usize, p[1] as usize];
        ConvIndex {
            input: [input[0], input[1], 1, input[2], input[3]],
            output: [output[1], 1, output[2], output[3]],
            kernel: [1, w[2], w[3]],
            stride: with_depth(attrs.stride, 1),
            padding: with_depth(attrs.padding, 0),
            dilation: with_depth(attrs.dilation, 1),
            groups: attrs.groups as usize,
        }
    }

    /// The space of conv3d (all rank 5 by the type rule).
    fn new3d(attrs: &Conv3dAttrs, input: &[usize], w: &[usize], output: &[usize]) -> ConvIndex {
        let each = |p: [u64; 3]| p.map(|x| x as usize);
        ConvIndex {
            input: [input[0], input[1], input[2], input[3], input[4]],
            output: [output[1], output[2], output[3], output[4]],
            kernel: [w[2], w[3], w[4]],
            stride: each(attrs.stride),
            padding: each(attrs.padding),
            dilation: each(attrs.dilation),
            groups: attrs.groups as usize,
        }
    }

    /// Calls `f(input, output, weight)` with the offsets of the three elements of every
    /// product input·weight that adds into output, in the order (b, k, o, p, q, c, t, r, s);
    /// taps that fall in the padding are skipped.
    fn each_product(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [n, c, d, h, w] = self.input;
        let [k, o, p, q] = self.output;
        let [t, r, s] = self.kernel;
        let (c_group, k_group) = (c / self.groups, k / self.groups);
        for b in 0..n {
            for kk in 0..k {
                let first_c = kk / k_group * c_group;
                for oo in 0..o {
                    for pp in 0..p {
                        for qq in 0..q {
                            let out = (((b * k + kk) * o + oo) * p + pp) * q + qq;
                            for ci in 0..c_group {
                                let volume = (b * c + first_c + ci) * d;
                                for tt in 0..t {
                                    let tap = tt * self.dilation[0];
                                    let Some(dd) = source(oo, tap, self.stride[0], self.padding[0], d) else { continue };
                                    for rr in 0..r {
                                        let tap = rr * self.dilation[1];
                                        let Some(hh) = source(pp, tap, self.stride[1], self.padding[1], h) else { continue };
                                        for ss in 0..s {
                                            let tap = ss * self.dilation[2];
                                            let Some(ww) = source(qq, tap, self.stride[2], self.padding[2], w) else {
                                                continue;
                                            };
                                            let weight = (((kk * c_group + ci) * t + tt) * r + rr) * s + ss;
                                            f(((volume + dd) * h + hh) * w + ww, out, weight);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// y[b,k,p,q] = Σ_{c,r,s} x[b, g·C/groups + c, p·sh + r·dh − ph, q·sw + s·dw − pw] · w[k,c,r,s]
/// with g = k's group (zero padding), added in order c, r, s.
pub(super) fn conv2d(x: &Dense, w: &Dense, attrs: &ConvAttrs, out_shape: &[usize]) -> Dense {
    let mut y = Dense::zeros(out_shape.to_vec());
    ConvIndex::new(attrs, &x.shape, &w.shape, out_shape).each_product(|i, o, k| y.data[o] += x.data[i] * w.data[k]);
    y
}

/// (dx, dw) of conv2d: every product x·w of the forward sends dy·w to dx and dy·x to dw,
/// visited in the forward's order (b, k, p, q, c, r, s).
pub(super) fn conv2d_backward(dy: &Dense, x: &Dense, w: &Dense, attrs: &ConvAttrs) -> Vec<Dense> {
    let mut dx = Dense::zeros(x.shape.clone());
    let mut dw = Dense::zeros(w.shape.clone());
    ConvIndex::new(attrs, &x.shape, &w.shape, &dy.shape).each_product(|i, o, k| {
        dx.data[i] += dy.data[o] * w.data[k];
        dw.data[k] += dy.data[o] * x.data[i];
    });
    vec![dx, dw]
}

/// y[b,k,o,p,q] = Σ_{c,t,r,s} x[b, g·C/groups + c, o·sd + t·dd − pd, p·sh + r·dh − ph,
/// q·sw + s·dw − pw] · w[k,c,t,r,s], added in order c, t, r, s.
pub(super) fn conv3d(x: &Dense, w: &Dense, attrs: &Conv3dAttrs, out_shape: &[usize]) -> Dense {
    let mut y = Dense::zeros(out_shape.to_vec());
    ConvIndex::new3d(attrs, &x.shape, &w.shape, out_shape).each_product(|i, o, k| y.data[o] += x.data[i] * w.data[k]);
    y
}

/// (dx, dw) of conv3d, as conv2d's.
pub(super) fn conv3d_backward(dy: &Dense, x: &Dense, w: &Dense, attrs: &Conv3dAttrs) -> Vec<Dense> {
    let mut dx = Dense::zeros(x.shape.clone());
    let mut dw = Dense::zeros(w.shape.clone());
    ConvIndex::new3d(attrs, &x.shape, &w.shape, &dy.shape).each_product(|i, o, k| {
        dx.data[i] += dy.data[o] * w.data[k];
        dw.data[k] += dy.data[o] * x.data[i];
    });
    vec![dx, dw]
}

/// conv2d's transpose: every x[b,k,p,q] spreads x·w[k,c,r,s] to y[b, g·K'/groups + c,
/// p·sh + r·dh − ph, q·sw + s·dw − pw] (g = k's group, K' = y's channels), positions in the
/// padding dropped: PyTorch's conv_transpose2d, whose weight is `[C_in, C_out/groups, R, S]`.
/// In conv2d's index space y is the input side, x the output side, so
/// ⟨conv2d(a, w), b⟩ = ⟨a, conv_transpose2d(b, w)⟩ holds by construction.
pub(super) fn conv_transpose2d(x: &Dense, w: &Dense, attrs: &ConvAttrs, out_shape: &[usize]) -> Dense {
    let mut y = Dense::zeros(out_shape.to_vec());
    ConvIndex::new(attrs, out_shape, &w.shape, &x.shape).each_product(|i, o, k| y.data[i] += x.data[o] * w.data[k]);
    y
}

/// (dx, dw) of conv_transpose2d: every product x·w of the forward sends dy·w to dx (so dx
/// is conv2d(dy, w) on x's positions) and dy·x to dw.
pub(super) fn conv_transpose2d_backward(dy: &Dense, x: &Dense, w: &Dense, attrs: &ConvAttrs) -> Vec<Dense> {
    let mut dx = Dense::zeros(x.shape.clone());
    let mut dw = Dense::zeros(w.shape.clone());
    ConvIndex::new(attrs, &dy.shape, &w.shape, &x.shape).each_product(|i, o, k| {
        dx.data[o] += dy.data[i] * w.data[k];
        dw.data[k] += dy.data[i] * x.data[o];
    });
    vec![dx, dw]
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use crate::exec::Dense;
    use crate::ir::ops::{Attr, OpKind};

    fn sp(stride: i64, pad: i64) -> [(&'static str, Attr); 2] {
        [("stride", ints(&[stride, stride])), ("padding", ints(&[pad, pad]))]
    }

    #[test]
    fn conv2d_3x3_with_2x2_kernel() {
        let x = t(&[1, 1, 3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        let w = t(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, -1.0]);
        // Padding 0: y[p,q] = x[p,q] − x[p+1,q+1] = −4 everywhere.
        let y = run(OpKind::Conv2d, &sp(1, 0), &[x.clone(), w.clone()]).remove(0);
        assert_eq!(y, t(&[1, 1, 2, 2], &[-4.0; 4]));
        // Padding 1: y[p,q] = x[p−1,q−1] − x[p,q] with zeros outside.
        let y = run(OpKind::Conv2d, &sp(1, 1), &[x.clone(), w.clone()]).remove(0);
        #[rustfmt::skip]
        let want = [
            -1.0, -2.0, -3.0, 0.0,
            -4.0, -4.0, -4.0, 3.0,
            -7.0, -4.0, -4.0, 6.0,
            0.0, 7.0, 8.0, 9.0,
        ];
        assert_eq!(y, t(&[1, 1, 4, 4], &want));
        // Stride 2, padding 1: every other output of the above.
        let y = run(OpKind::Conv2d, &sp(2, 1), &[x, w]).remove(0);
        assert_eq!(y, t(&[1, 1, 2, 2], &[-1.0, -3.0, -7.0, -4.0]));
    }

    #[test]
    fn conv2d_sums_channels_and_keeps_filters_apart() {
        // Two input channels, two 1x1 filters: k0 = c0 + c1, k1 = 2·c0.
        let x = t(&[1, 2, 1, 2], &[1.0, 2.0, 10.0, 20.0]);
        let w = t(&[2, 2, 1, 1], &[1.0, 1.0, 2.0, 0.0]);
        let y = run(OpKind::Conv2d, &[], &[x, w]).remove(0);
        assert_eq!(y, t(&[1, 2, 1, 2], &[11.0, 22.0, 2.0, 4.0]));
    }

    #[test]
    fn conv2d_backward_values() {
        // 1x1x2x2 input, 1x1x1x1 kernel 3: dx = 3·dy, dw = Σ dy·x.
        let x = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let w = t(&[1, 1, 1, 1], &[3.0]);
        let dy = t(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, 2.0]);
        let out = run(OpKind::Conv2dBackward, &[], &[dy, x, w]);
        assert_eq!(out[0].data, [3.0, 0.0, 0.0, 6.0]);
        assert_eq!(out[1].data, [9.0]);
    }

    /// A conv's attributes as the tests write them (output_padding only for the transpose).
    #[derive(Clone, Copy)]
    struct Conv {
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    }

    impl Conv {
        fn given(&self) -> Vec<(&'static str, Attr)> {
            let pair = |v: [usize; 2]| ints(&[v[0] as i64, v[1] as i64]);
            vec![
                ("stride", pair(self.stride)),
                ("padding", pair(self.padding)),
                ("dilation", pair(self.dilation)),
                ("groups", Attr::Int(self.groups as i64)),
            ]
        }

        fn transposed(&self, output_padding: [usize; 2]) -> Vec<(&'static str, Attr)> {
            let mut given = self.given();
            given.push(("output_padding", ints(&[output_padding[0] as i64, output_padding[1] as i64])));
            given
        }
    }

    /// Cases with groups (depthwise among them), dilation, strides and padding that differ
    /// between height and width: (x shape, w shape, attributes).
    fn conv_cases() -> Vec<([usize; 4], [usize; 4], Conv)> {
        let conv = |stride, padding, dilation, groups| Conv { stride, padding, dilation, groups };
        vec![
            ([2, 4, 6, 7], [6, 2, 3, 2], conv([1, 2], [1, 0], [2, 1], 2)),
            ([1, 3, 5, 5], [3, 1, 3, 3], conv([2, 2], [1, 1], [1, 1], 3)),
            ([1, 2, 6, 5], [4, 1, 2, 2], conv([1, 1], [0, 1], [2, 2], 2)),
            ([1, 2, 7, 7], [3, 2, 3, 3], conv([1, 2], [2, 1], [3, 2], 1)),
            ([2, 6, 4, 4], [4, 3, 1, 1], conv([1, 1], [0, 0], [1, 1], 2)),
        ]
    }

    /// conv2d straight from PyTorch's definition, one output element at a time:
    /// y[b,k,p,q] = Σ_{c,r,s} x[b, (k / (K/G))·(C/G) + c, p·sh + r·dh − ph, q·sw + s·dw − pw]·w[k,c,r,s].
    fn direct_conv2d(x: &Dense, w: &Dense, a: Conv) -> Dense {
        let [n, c, h, wd] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
        let [k, cg, r, s] = [w.shape[0], w.shape[1], w.shape[2], w.shape[3]];
        let out = |size: usize, i: usize, taps: usize| (size + 2 * a.padding[i] - a.dilation[i] * (taps - 1) - 1) / a.stride[i] + 1;
        let (p, q) = (out(h, 0, r), out(wd, 1, s));
        let mut y = Dense::zeros(vec![n, k, p, q]);
        for b in 0..n {
            for ko in 0..k {
                for pp in 0..p {
                    for qq in 0..q {
                        let mut acc = 0.0;
                        for ci in 0..cg {
                            let cin = ko / (k / a.groups) * cg + ci;
                            for rr in 0..r {
                                for ss in 0..s {
                                    let hh = (pp * a.stride[0] + rr * a.dilation[0]) as i64 - a.padding[0] as i64;
                                    let ww = (qq * a.stride[1] + ss * a.dilation[1]) as i64 - a.padding[1] as i64;
                                    if (0..h as i64).contains(&hh) && (0..wd as i64).contains(&ww) {
                                        let xi = ((b * c + cin) * h + hh as usize) * wd + ww as usize;
                                        acc += x.data[xi] * w.data[((ko * cg + ci) * r + rr) * s + ss];
                                    }
                                }
                            }
                        }
                        y.data[((b * k + ko) * p + pp) * q + qq] = acc;
                    }
                }
            }
        }
        assert_eq!(c, cg * a.groups, "test case: w's channels");
        y
    }

    #[test]
    fn grouped_and_dilated_conv2d_match_a_direct_loop() {
        for (i, (x_shape, w_shape, a)) in conv_cases().into_iter().enumerate() {
            let (x, w) = (rand(&x_shape, 40 + i as u64), rand(&w_shape, 50 + i as u64));
            let y = run(OpKind::Conv2d, &a.given(), &[x.clone(), w.clone()]).remove(0);
            let want = direct_conv2d(&x, &w, a);
            assert_eq!(y.shape, want.shape, "case {i}");
            assert_close(&y, &want.data, 1e-12);
        }
        // Groups keep channels apart: 2 groups of one 1×1 filter, k0 reads c0 only, k1 c1 only.
        let x = t(&[1, 2, 1, 2], &[1.0, 2.0, 10.0, 20.0]);
        let y = run(OpKind::Conv2d, &[("groups", Attr::Int(2))], &[x, t(&[2, 1, 1, 1], &[3.0, -1.0])]).remove(0);
        assert_eq!(y, t(&[1, 2, 1, 2], &[3.0, 6.0, -10.0, -20.0]));
        // Dilation 2 on a row: taps 2 apart, y[q] = x[q] − x[q + 2].
        let x = t(&[1, 1, 1, 5], &[1.0, 2.0, 4.0, 8.0, 16.0]);
        let y = run(OpKind::Conv2d, &[("dilation", ints(&[1, 2]))], &[x, t(&[1, 1, 1, 2], &[1.0, -1.0])]).remove(0);
        assert_eq!(y, t(&[1, 1, 1, 3], &[-3.0, -6.0, -12.0]));
    }

    /// conv_transpose2d straight from PyTorch's definition, one input element at a time:
    /// x[b,c,h,w]·w[c,k,r,s] goes to y[b, (c / (C/G))·K' + k, h·sh + r·dh − ph, w·sw + s·dw − pw]
    /// (K' = w's K/groups) where that lies inside y.
    fn direct_conv_transpose2d(x: &Dense, w: &Dense, a: Conv, output_padding: [usize; 2]) -> Dense {
        let [n, c, h, wd] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
        let [kg, r, s] = [w.shape[1], w.shape[2], w.shape[3]];
        let out = |size: usize, i: usize, taps: usize| {
            (size - 1) * a.stride[i] + a.dilation[i] * (taps - 1) + output_padding[i] + 1 - 2 * a.padding[i]
        };
        let (k, p, q) = (kg * a.groups, out(h, 0, r), out(wd, 1, s));
        let mut y = Dense::zeros(vec![n, k, p, q]);
        for b in 0..n {
            for ci in 0..c {
                for hh in 0..h {
                    for ww in 0..wd {
                        for ko in 0..kg {
                            let kout = ci / (c / a.groups) * kg + ko;
                            for rr in 0..r {
                                for ss in 0..s {
                                    let pp = (hh * a.stride[0] + rr * a.dilation[0]) as i64 - a.padding[0] as i64;
                                    let qq = (ww * a.stride[1] + ss * a.dilation[1]) as i64 - a.padding[1] as i64;
                                    if (0..p as i64).contains(&pp) && (0..q as i64).contains(&qq) {
                                        let yi = ((b * k + kout) * p + pp as usize) * q + qq as usize;
                                        y.data[yi] += x.data[((b * c + ci) * h + hh) * wd + ww]
                                            * w.data[((ci * kg + ko) * r + rr) * s + ss];
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        y
    }

    #[test]
    fn conv_transpose2d_matches_a_direct_loop() {
        let conv = |stride, padding, dilation, groups| Conv { stride, padding, dilation, groups };
        // (x shape, w shape, attributes, output_padding)
        let cases = [
            ([2, 4, 3, 3], [4, 3, 3, 3], conv([2, 2], [1, 1], [1, 1], 2), [1, 1]),
            ([1, 3, 4, 4], [3, 1, 3, 3], conv([1, 1], [2, 2], [2, 2], 3), [0, 1]),
            ([1, 2, 3, 2], [2, 2, 2, 3], conv([2, 3], [0, 1], [1, 2], 1), [1, 0]),
            ([2, 2, 2, 3], [2, 3, 1, 1], conv([3, 2], [0, 0], [1, 1], 1), [2, 1]),
        ];
        for (i, (x_shape, w_shape, a, output_padding)) in cases.into_iter().enumerate() {
            let (x, w) = (rand(&x_shape, 60 + i as u64), rand(&w_shape, 70 + i as u64));
            let y = run(OpKind::ConvTranspose2d, &a.transposed(output_padding), &[x.clone(), w.clone()]).remove(0);
            let want = direct_conv_transpose2d(&x, &w, a, output_padding);
            assert_eq!(y.shape, want.shape, "case {i}");
            assert_close(&y, &want.data, 1e-12);
        }
        // Stride 2 spreads each input over a 2×2 block: x = [1, 2], w = ones([1,1,2,2]).
        let (x, w) = (t(&[1, 1, 1, 2], &[1.0, 2.0]), t(&[1, 1, 2, 2], &[1.0; 4]));
        let y = run(OpKind::ConvTranspose2d, &[("stride", ints(&[2, 2]))], &[x, w]).remove(0);
        assert_eq!(y, t(&[1, 1, 2, 4], &[1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]));
    }

    /// ⟨conv2d(a, w), b⟩ = ⟨a, conv_transpose2d(b, w)⟩ with the same stride, padding,
    /// dilation and groups (and the output_padding that brings the transpose back to a's
    /// size): conv_transpose2d is conv2d's adjoint.
    #[test]
    fn conv_transpose2d_is_the_adjoint_of_conv2d() {
        for (i, (a_shape, w_shape, attrs)) in conv_cases().into_iter().enumerate() {
            let (a, w) = (rand(&a_shape, 80 + i as u64), rand(&w_shape, 90 + i as u64));
            let y = run(OpKind::Conv2d, &attrs.given(), &[a.clone(), w.clone()]).remove(0);
            let b = rand(&y.shape, 100 + i as u64);
            // conv2d maps sizes H .. H + stride − 1 alike; the output padding picks H again.
            let extent = |d: usize| attrs.dilation[d] * (w_shape[2 + d] - 1) + 1;
            let output_padding = [0, 1].map(|d| (a_shape[2 + d] + 2 * attrs.padding[d] - extent(d)) % attrs.stride[d]);
            let back = run(OpKind::ConvTranspose2d, &attrs.transposed(output_padding), &[b.clone(), w]).remove(0);
            assert_eq!(back.shape, a.shape, "case {i}");
            let dot = |u: &Dense, v: &Dense| u.data.iter().zip(&v.data).map(|(p, q)| p * q).sum::<f64>();
            let (lhs, rhs) = (dot(&y, &b), dot(&a, &back));
            assert!((lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1.0), "case {i}: {lhs} vs {rhs}");
        }
    }
}
