//! Resampling images `x [N,C,H,W]` to `y [N,C,OH,OW]` with PyTorch's index rules, plane by
//! plane (one plane per (n, c)):
//!
//! - `adaptive_avg_pool2d`: y(i, j) is the mean of the bin rows ⌊i·H/OH⌋..⌈(i+1)·H/OH⌉ ×
//!   columns ⌊j·W/OW⌋..⌈(j+1)·W/OW⌉ of x (aten's `start_index`/`end_index`); bins overlap
//!   where OH does not divide H;
//! - `upsample_nearest2d`: y(i, j) = x(src(i), src(j)) with aten's float32 source index
//!   ([`nearest_source`]);
//!
//! - `upsample_bilinear2d`: y(i, j) the weighted sum of x at its four linear sources
//!   ([`linear_sources`], aten's float32 scale, source index and weights);
//!
//! and their backward ops, which add each dy element into the x pixels it came from:
//! dy(i, j) / (bin area) into every pixel of its bin, or dy(i, j) into its source pixel.
//! They run over dy in row-major order, so each dx element receives its terms in
//! row-major order of the output pixels: the order the CUDA kernels
//! (`cuda/kernels/resample.cu`, one thread per dx element, no atomics) add them in.

use crate::exec::Dense;
use crate::ir::ops::GridSampleAttrs;

/// `(N·C, H, W)` of an NCHW shape: planes, rows, columns.
fn planes(shape: &[usize]) -> (usize, usize, usize) {
    (shape[0] * shape[1], shape[2], shape[3])
}

/// PyTorch's adaptive bin `i` of `out` bins over `size` elements: ⌊i·size/out⌋..⌈(i+1)·size/out⌉.
fn bin(i: usize, size: usize, out: usize) -> std::ops::Range<usize> {
    i * size / out..((i + 1) * size).div_ceil(out)
}

/// PyTorch's nearest source of output index `dst` of `out` over `size` inputs
/// (`nearest_neighbor_compute_source_index`): min(⌊dst·s⌋, size − 1), the scale
/// s = size/out and the product both in float32, as aten computes them. So it is not
/// always ⌊dst·size/out⌋: 2 → 82 maps dst 41 to 0 (41 · f32(2/82) rounds below 1). With an
/// integer factor (out = k·size, or size = k·out) it is dst / k, or dst·k.
pub(crate) fn nearest_source(dst: usize, size: usize, out: usize) -> usize {
    let scale = size as f32 / out as f32;
    ((dst as f32 * scale).floor() as usize).min(size - 1)
}

/// PyTorch's linear sources of output index `dst` of `out` over `size` inputs, and their
/// weights (`area_pixel_compute_scale`, `area_pixel_compute_source_index`, in float32 as
/// aten computes them): with `align_corners` the source is dst·(size−1)/(out−1) (0 when
/// out is 1), else (dst + 0.5)·size/out − 0.5 clamped at 0; it lies between i0 = ⌊src⌋ and
/// i1 = i0 + 1 (i0 itself at the last input), weighted 1 − λ and λ = src − i0.
pub(crate) fn linear_sources(dst: usize, size: usize, out: usize, align_corners: bool) -> (usize, usize, f64, f64) {
    let src = if align_corners {
        let scale = if out > 1 { (size - 1) as f32 / (out - 1) as f32 } else { 0.0 };
        scale * dst as f32
    } else {
        let scale = size as f32 / out as f32;
        (scale * (dst as f32 + 0.5) - 0.5).max(0.0)
    };
    let i0 = (src as usize).min(size - 1);
    let i1 = if i0 < size - 1 { i0 + 1 } else { i0 };
    let lambda = (src - i0 as f32).clamp(0.0, 1.0);
    (i0, i1, f64::from(1.0 - lambda), f64::from(lambda))
}

/// y(i, j) = Σ of x at the four sources of (i, j), each times its row and column weights:
/// `wr0·(wc0·x(r0, c0) + wc1·x(r0, c1)) + wr1·(wc0·x(r1, c0) + wc1·x(r1, c1))`.
pub(super) fn upsample_bilinear2d(x: &Dense, out_shape: &[usize], align_corners: bool) -> Dense {
    let (n, h, w) = planes(&x.shape);
    let (oh, ow) = (out_shape[2], out_shape[3]);
    let columns: Vec<_> = (0..ow).map(|j| linear_sources(j, w, ow, align_corners)).collect();
    let mut y = Vec::with_capacity(n * oh * ow);
    for plane in x.data.chunks_exact(h * w).take(n) {
        for i in 0..oh {
            let (r0, r1, wr0, wr1) = linear_sources(i, h, oh, align_corners);
            for &(c0, c1, wc0, wc1) in &columns {
                let near = wc0 * plane[r0 * w + c0] + wc1 * plane[r0 * w + c1];
                let far = wc0 * plane[r1 * w + c0] + wc1 * plane[r1 * w + c1];
                y.push(wr0 * near + wr1 * far);
            }
        }
    }
    Dense::new(out_shape.to_vec(), y)
}

/// dx of `x_shape`: dy(i, j) times each source's weight added into the four sources of
/// (i, j) (a source counted twice at the last row or column gets both its shares).
pub(super) fn upsample_bilinear2d_backward(dy: &Dense, x_shape: &[usize], align_corners: bool) -> Dense {
    let (n, h, w) = planes(x_shape);
    let (oh, ow) = (dy.shape[2], dy.shape[3]);
    let columns: Vec<_> = (0..ow).map(|j| linear_sources(j, w, ow, align_corners)).collect();
    let mut dx = Dense::zeros(x_shape.to_vec());
    for p in 0..n {
        let plane = &mut dx.data[p * h * w..(p + 1) * h * w];
        for i in 0..oh {
            let (r0, r1, wr0, wr1) = linear_sources(i, h, oh, align_corners);
            for (j, &(c0, c1, wc0, wc1)) in columns.iter().enumerate() {
                let g = dy.data[(p * oh + i) * ow + j];
                plane[r0 * w + c0] += wr0 * wc0 * g;
                plane[r0 * w + c1] += wr0 * wc1 * g;
                plane[r1 * w + c0] += wr1 * wc0 * g;
                plane[r1 * w + c1] += wr1 * wc1 * g;
            }
        }
    }
    dx
}

/// y(i, j) = the mean of bin (i, j) of x, summed in row-major order, then divided by the
/// bin's area.
pub(super) fn adaptive_avg_pool2d(x: &Dense, out_shape: &[usize]) -> Dense {
    let (n, h, w) = planes(&x.shape);
    let (oh, ow) = (out_shape[2], out_shape[3]);
    let mut y = Vec::with_capacity(n * oh * ow);
    for plane in x.data.chunks_exact(h * w).take(n) {
        for i in 0..oh {
            for j in 0..ow {
                let (rows, cols) = (bin(i, h, oh), bin(j, w, ow));
                let area = (rows.len() * cols.len()) as f64;
                let total = rows.flat_map(|r| plane[r * w..(r + 1) * w][cols.clone()].iter()).fold(0.0, |a, &v| a + v);
                y.push(total / area);
            }
        }
    }
    Dense::new(out_shape.to_vec(), y)
}

/// dx of `x_shape`: dy(i, j) / (area of bin (i, j)) added into every pixel of the bin.
pub(super) fn adaptive_avg_pool2d_backward(dy: &Dense, x_shape: &[usize]) -> Dense {
    let (n, h, w) = planes(x_shape);
    let (oh, ow) = (dy.shape[2], dy.shape[3]);
    let mut dx = Dense::zeros(x_shape.to_vec());
    for p in 0..n {
        let plane = &mut dx.data[p * h * w..(p + 1) * h * w];
        for i in 0..oh {
            for j in 0..ow {
                let (rows, cols) = (bin(i, h, oh), bin(j, w, ow));
                let share = dy.data[(p * oh + i) * ow + j] / (rows.len() * cols.len()) as f64;
                for r in rows {
                    for v in &mut plane[r * w..(r + 1) * w][cols.clone()] {
                        *v += share;
                    }
                }
            }
        }
    }
    dx
}

/// y(i, j) = x(src(i), src(j)).
pub(super) fn upsample_nearest2d(x: &Dense, out_shape: &[usize]) -> Dense {
    let (n, h, w) = planes(&x.shape);
    let (oh, ow) = (out_shape[2], out_shape[3]);
    let mut y = Vec::with_capacity(n * oh * ow);
    for plane in x.data.chunks_exact(h * w).take(n) {
        for i in 0..oh {
            let row = nearest_source(i, h, oh) * w;
            y.extend((0..ow).map(|j| plane[row + nearest_source(j, w, ow)]));
        }
    }
    Dense::new(out_shape.to_vec(), y)
}

/// dx of `x_shape`: dy(i, j) added into x(src(i), src(j)); pixels no output copied get 0.
pub(super) fn upsample_nearest2d_backward(dy: &Dense, x_shape: &[usize]) -> Dense {
    let (n, h, w) = planes(x_shape);
    let (oh, ow) = (dy.shape[2], dy.shape[3]);
    let mut dx = Dense::zeros(x_shape.to_vec());
    for p in 0..n {
        for i in 0..oh {
            let row = (p * h + nearest_source(i, h, oh)) * w;
            for j in 0..ow {
                dx.data[row + nearest_source(j, w, ow)] += dy.data[(p * oh + i) * ow + j];
            }
        }
    }
    dx
}

/// Where grid_sample reads along one dimension of `size` pixels for the grid coordinate
/// `g`, and the derivative of that position by `g`: aten's `grid_sampler_compute_source_index`
/// in float32 (its arithmetic, in its order): unnormalized, ((g + 1) / 2)·(size − 1) with
/// align_corners, else ((g + 1)·size − 1) / 2; under border padding clipped to
/// [0, size − 1] (derivative 0 where clipped, also at exactly 0); a position that is not
/// finite or beyond i32 reads as −100 (outside), as aten makes it.
fn grid_source(g: f64, size: usize, attrs: &GridSampleAttrs) -> (f32, f32) {
    let (g, size_f) = (g as f32, size as f32);
    let (mut at, mut slope) = if attrs.align_corners {
        ((g + 1.0) / 2.0 * (size_f - 1.0), (size_f - 1.0) / 2.0)
    } else {
        (((g + 1.0) * size_f - 1.0) / 2.0, size_f / 2.0)
    };
    if attrs.border {
        if at <= 0.0 {
            (at, slope) = (0.0, 0.0);
        } else if at >= size_f - 1.0 {
            (at, slope) = (size_f - 1.0, 0.0);
        }
    }
    if !at.is_finite() || at > (i32::MAX - 1) as f32 || at < i32::MIN as f32 {
        at = -100.0;
    }
    (at, slope)
}

/// The pixels one grid_sample position reads and their weights: bilinear, the four around
/// (ix, iy) with aten's float32 weights (north-west, north-east, south-west, south-east);
/// nearest, the one at (ix, iy) rounded half to even, weight 1. Pixels outside the image
/// read 0 and are left out.
struct Taps {
    /// (row, column, weight) of each pixel inside the image.
    taps: Vec<(usize, usize, f64)>,
}

fn inside(row: f32, col: f32, h: usize, w: usize) -> Option<(usize, usize)> {
    (row >= 0.0 && col >= 0.0 && (row as usize) < h && (col as usize) < w).then_some((row as usize, col as usize))
}

impl Taps {
    fn of(ix: f32, iy: f32, h: usize, w: usize, nearest: bool) -> Taps {
        if nearest {
            let taps = inside(iy.round_ties_even(), ix.round_ties_even(), h, w).map(|(r, c)| (r, c, 1.0));
            return Taps { taps: taps.into_iter().collect() };
        }
        let (x0, y0) = (ix.floor(), iy.floor());
        let (x1, y1) = (x0 + 1.0, y0 + 1.0);
        let corners = [
            (y0, x0, (x1 - ix) * (y1 - iy)),
            (y0, x1, (ix - x0) * (y1 - iy)),
            (y1, x0, (x1 - ix) * (iy - y0)),
            (y1, x1, (ix - x0) * (iy - y0)),
        ];
        let taps = corners.into_iter().filter_map(|(r, c, weight)| inside(r, c, h, w).map(|(r, c)| (r, c, f64::from(weight))));
        Taps { taps: taps.collect() }
    }
}

/// `grid_sample`: y[n, c, p, q] = Σ over the taps of position grid[n, p, q] of x[n, c, row,
/// col] · weight (see [`grid_source`] and [`Taps`]; grid[.., 0] is the column, grid[.., 1]
/// the row, both in [−1, 1] across the image).
pub(super) fn grid_sample(x: &Dense, grid: &Dense, attrs: &GridSampleAttrs) -> Dense {
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let (p, q) = (grid.shape[1], grid.shape[2]);
    let mut y = Dense::zeros(vec![n, c, p, q]);
    for b in 0..n {
        for at in 0..p * q {
            let g = (b * p * q + at) * 2;
            let (ix, _) = grid_source(grid.data[g], w, attrs);
            let (iy, _) = grid_source(grid.data[g + 1], h, attrs);
            let taps = Taps::of(ix, iy, h, w, attrs.nearest);
            for ch in 0..c {
                let plane = (b * c + ch) * h * w;
                y.data[(b * c + ch) * p * q + at] = taps.taps.iter().map(|&(r, col, wt)| x.data[plane + r * w + col] * wt).sum();
            }
        }
    }
    y
}

/// (dx, dgrid) of grid_sample: dy(n, c, p, q) added into each pixel its sample read, times
/// the pixel's weight, positions and channels in row-major order; and the grid's gradient,
/// aten's: Σ over channels of dy times the derivative of the bilinear sum by the position
/// (each pixel's value times its weight's derivative), times the position's derivative by
/// the grid coordinate ([`grid_source`]). Nearest sampling passes the grid none.
pub(super) fn grid_sample_backward(dy: &Dense, x: &Dense, grid: &Dense, attrs: &GridSampleAttrs) -> Vec<Dense> {
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let (p, q) = (grid.shape[1], grid.shape[2]);
    let mut dx = Dense::zeros(x.shape.clone());
    let mut dgrid = Dense::zeros(grid.shape.clone());
    for b in 0..n {
        for at in 0..p * q {
            let g = (b * p * q + at) * 2;
            let (ix, slope_x) = grid_source(grid.data[g], w, attrs);
            let (iy, slope_y) = grid_source(grid.data[g + 1], h, attrs);
            let taps = Taps::of(ix, iy, h, w, attrs.nearest);
            let (mut gx, mut gy) = (0.0, 0.0);
            let (x0, y0) = (f64::from(ix.floor()), f64::from(iy.floor()));
            let (fx, fy) = (f64::from(ix) - x0, f64::from(iy) - y0);
            for ch in 0..c {
                let plane = (b * c + ch) * h * w;
                let d = dy.data[(b * c + ch) * p * q + at];
                for &(r, col, wt) in &taps.taps {
                    dx.data[plane + r * w + col] += d * wt;
                    if !attrs.nearest {
                        // The weight's derivatives: along x, ±(its row factor); along y,
                        // ±(its column factor), by which side of (ix, iy) the pixel lies.
                        let v = x.data[plane + r * w + col] * d;
                        let (east, south) = (col as f64 > x0, r as f64 > y0);
                        let row_factor = if south { fy } else { 1.0 - fy };
                        let col_factor = if east { fx } else { 1.0 - fx };
                        gx += if east { v * row_factor } else { -v * row_factor };
                        gy += if south { v * col_factor } else { -v * col_factor };
                    }
                }
            }
            dgrid.data[g] = f64::from(slope_x) * gx;
            dgrid.data[g + 1] = f64::from(slope_y) * gy;
        }
    }
    vec![dx, dgrid]
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;
    use crate::ir::ops::OpKind;

    fn size(oh: i64, ow: i64) -> [(&'static str, crate::ir::ops::Attr); 1] {
        [("output_size", ints(&[oh, ow]))]
    }

    fn back(shape: &[i64], oh: i64, ow: i64) -> [(&'static str, crate::ir::ops::Attr); 2] {
        [("shape", ints(shape)), ("output_size", ints(&[oh, ow]))]
    }

    /// PyTorch's bins for 5 → 3 are [0, 2), [1, 4), [3, 5) (torch.nn.AdaptiveAvgPool1d(3)
    /// on 0..5 gives 0.5, 2, 3.5); for 3 → 5, [0, 1), [0, 2), [1, 2), [1, 3), [2, 3).
    #[test]
    fn adaptive_bins_are_pytorchs() {
        assert_eq!([0, 1, 2].map(|i| bin(i, 5, 3)), [0..2, 1..4, 3..5]);
        assert_eq!([0, 1, 2, 3, 4].map(|i| bin(i, 3, 5)), [0..1, 0..2, 1..2, 1..3, 2..3]);
        assert_eq!([0, 1].map(|i| bin(i, 6, 2)), [0..3, 3..6]);
        let x = t(&[1, 1, 1, 5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
        let y = run(OpKind::AdaptiveAvgPool2d, &size(1, 3), &[x]).remove(0);
        assert_eq!(y.shape, [1, 1, 1, 3]);
        assert_close(&y, &[0.5, 2.0, 3.5], 0.0);
        let x = t(&[1, 1, 1, 3], &[0.0, 3.0, 6.0]);
        let y = run(OpKind::AdaptiveAvgPool2d, &size(1, 5), &[x]).remove(0);
        assert_close(&y, &[0.0, 1.5, 3.0, 4.5, 6.0], 0.0);
    }

    /// Both axes at once, two planes: 4×5 → 2×3 averages 2×2, 2×3 and 2×2 blocks; 1×1 is
    /// the global mean of each plane (ResNet's head).
    #[test]
    fn adaptive_avg_pool2d_values() {
        let x = Dense::new(vec![1, 2, 4, 5], (0..40).map(f64::from).collect());
        let y = run(OpKind::AdaptiveAvgPool2d, &size(2, 3), std::slice::from_ref(&x)).remove(0);
        // Plane 0, row bins [0, 2) and [2, 4); column bins [0, 2), [1, 4), [3, 5).
        let mean = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, p: usize| {
            let cells: Vec<f64> = rows.flat_map(|r| cols.clone().map(move |c| (p * 20 + r * 5 + c) as f64)).collect();
            cells.iter().sum::<f64>() / cells.len() as f64
        };
        let mut want = Vec::new();
        for p in 0..2 {
            for rows in [0..2, 2..4] {
                for cols in [0..2, 1..4, 3..5] {
                    want.push(mean(rows.clone(), cols, p));
                }
            }
        }
        assert_close(&y, &want, 1e-12);
        let global = run(OpKind::AdaptiveAvgPool2d, &size(1, 1), &[x]).remove(0);
        assert_close(&global, &[9.5, 29.5], 1e-12);
    }

    /// The backward spreads each dy over its bin; where bins overlap (5 → 3: pixels 1 and 3
    /// lie in two bins) the shares add.
    #[test]
    fn adaptive_avg_pool2d_backward_values() {
        let dy = t(&[1, 1, 1, 3], &[2.0, 3.0, 4.0]);
        let dx = run(OpKind::AdaptiveAvgPool2dBackward, &back(&[1, 1, 1, 5], 1, 3), &[dy]).remove(0);
        assert_eq!(dx.shape, [1, 1, 1, 5]);
        assert_close(&dx, &[1.0, 1.0 + 1.0, 1.0, 1.0 + 2.0, 2.0], 1e-12);
        // 1×1: the mean's gradient, dy / (H·W) everywhere.
        let dy = t(&[2, 1, 1, 1], &[6.0, -12.0]);
        let dx = run(OpKind::AdaptiveAvgPool2dBackward, &back(&[2, 1, 2, 3], 1, 1), &[dy]).remove(0);
        assert_close(&dx, &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -2.0, -2.0, -2.0, -2.0, -2.0, -2.0], 0.0);
    }

    /// PyTorch's float32 source index: F.interpolate(torch.arange(2.).view(1, 1, 1, 2),
    /// size=(1, 82))[..., 41] is 0.0, where 41·2/82 = 1 exactly; integer factors are exact
    /// divisions.
    #[test]
    fn nearest_sources_are_pytorchs() {
        assert_eq!(nearest_source(41, 2, 82), 0);
        assert_eq!(41 * 2 / 82, 1);
        assert_eq!((0..6).map(|d| nearest_source(d, 2, 6)).collect::<Vec<_>>(), [0, 0, 0, 1, 1, 1]);
        assert_eq!((0..3).map(|d| nearest_source(d, 7, 3)).collect::<Vec<_>>(), [0, 2, 4]);
        assert_eq!((0..4).map(|d| nearest_source(d, 8, 4)).collect::<Vec<_>>(), [0, 2, 4, 6]);
        for size in 1..=256 {
            for k in 1..=8 {
                for d in 0..size * k {
                    assert_eq!(nearest_source(d, size, size * k), d / k, "{size} -> {}", size * k);
                }
                for d in 0..size {
                    assert_eq!(nearest_source(d, size * k, size), d * k, "{} -> {size}", size * k);
                }
            }
        }
    }

    #[test]
    fn upsample_nearest2d_values() {
        let x = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let y = run(OpKind::UpsampleNearest2d, &size(4, 6), &[x]).remove(0);
        assert_eq!(y.shape, [1, 1, 4, 6]);
        let (a, b) = ([1.0, 1.0, 1.0, 2.0, 2.0, 2.0], [3.0, 3.0, 3.0, 4.0, 4.0, 4.0]);
        assert_close(&y, &[a, a, b, b].concat(), 0.0);
        // Downsampling picks every k-th pixel: 3×4 → 2×2 reads rows 0, 1 and columns 0, 2.
        let x = Dense::new(vec![1, 1, 3, 4], (0..12).map(f64::from).collect());
        let y = run(OpKind::UpsampleNearest2d, &size(2, 2), &[x]).remove(0);
        assert_close(&y, &[0.0, 2.0, 4.0, 6.0], 0.0);
    }

    /// The backward adds every copy's gradient into its source; pixels nothing copied get 0.
    #[test]
    fn upsample_nearest2d_backward_values() {
        let dy = Dense::new(vec![1, 1, 2, 4], (1..=8).map(f64::from).collect());
        let dx = run(OpKind::UpsampleNearest2dBackward, &back(&[1, 1, 1, 2], 2, 4), &[dy]).remove(0);
        assert_close(&dx, &[1.0 + 2.0 + 5.0 + 6.0, 3.0 + 4.0 + 7.0 + 8.0], 0.0);
        let dy = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let dx = run(OpKind::UpsampleNearest2dBackward, &back(&[1, 1, 3, 4], 2, 2), &[dy]).remove(0);
        assert_close(&dx, &[1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.0);
    }
}
