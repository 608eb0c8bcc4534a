// resample.cu — images x [N, C, H, W] resampled to y [N, C, OH, OW] with PyTorch's index rules
// (exec/kernels/resample.rs is the reference): adaptive average pooling, whose bin i spans
// ⌊i·H/OH⌋ .. ⌈(i+1)·H/OH⌉, and nearest-neighbour resizing, whose output index i copies
// source min(⌊i·(H/OH)⌋, H − 1) with the scale and the product in float, as aten computes
// them. The planes (n, c) are independent.
//
// One thread per output element. The backward ops gather: the thread of dx element e adds
// the dy of every output pixel that came from e, in row-major order of those pixels (the
// order in which the CPU reference scatters them), so no two threads write one element and
// nothing needs atomics. Sums in double.

// PyTorch's adaptive bin i of `out` bins over `size` elements: bin_start ≤ r < bin_end.
__device__ __forceinline__ i64 bin_start(i64 i, i64 size, i64 out) { return i * size / out; }
__device__ __forceinline__ i64 bin_end(i64 i, i64 size, i64 out) { return ((i + 1) * size + out - 1) / out; }

// y[plane, i, j] = the mean of bin (i, j) of x's plane, summed in row-major order.
extern "C" __global__ void adaptive_avg_pool2d(Tensor y, Tensor x, i64 h, i64 w, i64 oh, i64 ow) {
    GRID_STRIDE(e, y.numel) {
        const i64 j = e % ow, i = (e / ow) % oh, plane = e / (oh * ow);
        const i64 r0 = bin_start(i, h, oh), r1 = bin_end(i, h, oh);
        const i64 c0 = bin_start(j, w, ow), c1 = bin_end(j, w, ow);
        double total = 0.0;
        for (i64 r = r0; r < r1; ++r) {
            for (i64 c = c0; c < c1; ++c) total += load_d(x, (plane * h + r) * w + c);
        }
        store_d(y, e, total / (double)((r1 - r0) * (c1 - c0)));
    }
}

// dx[plane, r, c] = Σ dy[plane, i, j] / (area of bin (i, j)) over the bins holding (r, c):
// the bins holding element r of `size` are ⌊r·out/size⌋ .. ⌈(r+1)·out/size⌉ − 1 (bin i
// holds r when i·size/out < r + 1 and (i+1)·size/out > r).
extern "C" __global__ void adaptive_avg_pool2d_backward(Tensor dx, Tensor dy, i64 h, i64 w, i64 oh, i64 ow) {
    GRID_STRIDE(e, dx.numel) {
        const i64 c = e % w, r = (e / w) % h, plane = e / (h * w);
        const i64 i0 = r * oh / h, i1 = ((r + 1) * oh + h - 1) / h;
        const i64 j0 = c * ow / w, j1 = ((c + 1) * ow + w - 1) / w;
        double total = 0.0;
        for (i64 i = i0; i < i1; ++i) {
            const i64 rows = bin_end(i, h, oh) - bin_start(i, h, oh);
            for (i64 j = j0; j < j1; ++j) {
                const i64 area = rows * (bin_end(j, w, ow) - bin_start(j, w, ow));
                total += load_d(dy, (plane * oh + i) * ow + j) / (double)area;
            }
        }
        store_d(dx, e, total);
    }
}

// PyTorch's nearest source of output index dst (aten's nearest_neighbor_compute_source_index):
// min(⌊dst · s⌋, size − 1) with s = size / out, both in float.
__device__ __forceinline__ i64 nearest_source(i64 dst, i64 size, i64 out) {
    const float scale = (float)size / (float)out;
    return imin((i64)floorf((float)dst * scale), size - 1);
}

// The first output index whose source is at least `src` (out if none). Sources never
// decrease along the output, so the outputs copying source s are nearest_first(s) ..
// nearest_first(s + 1). From the exact ⌈src·out/size⌉, a step or two reach the float
// mapping's boundary.
__device__ i64 nearest_first(i64 src, i64 size, i64 out) {
    i64 i = imin((src * out + size - 1) / size, out);
    while (i > 0 && nearest_source(i - 1, size, out) >= src) --i;
    while (i < out && nearest_source(i, size, out) < src) ++i;
    return i;
}

// y[plane, i, j] = x[plane, source(i), source(j)].
extern "C" __global__ void upsample_nearest2d(Tensor y, Tensor x, i64 h, i64 w, i64 oh, i64 ow) {
    GRID_STRIDE(e, y.numel) {
        const i64 j = e % ow, i = (e / ow) % oh, plane = e / (oh * ow);
        store_d(y, e, load_d(x, (plane * h + nearest_source(i, h, oh)) * w + nearest_source(j, w, ow)));
    }
}

// dx[plane, r, c] = Σ dy[plane, i, j] over the outputs (i, j) copied from (r, c); 0 for a
// pixel no output copies (downsampling).
extern "C" __global__ void upsample_nearest2d_backward(Tensor dx, Tensor dy, i64 h, i64 w, i64 oh, i64 ow) {
    GRID_STRIDE(e, dx.numel) {
        const i64 c = e % w, r = (e / w) % h, plane = e / (h * w);
        const i64 i0 = nearest_first(r, h, oh), i1 = nearest_first(r + 1, h, oh);
        const i64 j0 = nearest_first(c, w, ow), j1 = nearest_first(c + 1, w, ow);
        double total = 0.0;
        for (i64 i = i0; i < i1; ++i) {
            for (i64 j = j0; j < j1; ++j) total += load_d(dy, (plane * oh + i) * ow + j);
        }
        store_d(dx, e, total);
    }
}

// Bilinear resampling's linear sources of output index `dst` (aten's float32 scale and
// source index, as exec/kernels/resample.rs's linear_sources): between i0 = floor(src) and
// i1 = i0 + 1 (i0 at the last input), weighted 1 - lambda and lambda.
struct Linear {
    i64 i0, i1;
    double w0, w1;
};

__device__ Linear linear_sources(i64 dst, i64 size, i64 out, int align_corners) {
    float src;
    if (align_corners) {
        const float scale = out > 1 ? (float)(size - 1) / (float)(out - 1) : 0.0f;
        src = scale * (float)dst;
    } else {
        const float scale = (float)size / (float)out;
        src = fmaxf(scale * ((float)dst + 0.5f) - 0.5f, 0.0f);
    }
    Linear s;
    s.i0 = imin((i64)src, size - 1);
    s.i1 = s.i0 < size - 1 ? s.i0 + 1 : s.i0;
    const float lambda = fminf(fmaxf(src - (float)s.i0, 0.0f), 1.0f);
    s.w0 = (double)(1.0f - lambda);
    s.w1 = (double)lambda;
    return s;
}

// y[plane, i, j] = wr0 (wc0 x[r0, c0] + wc1 x[r0, c1]) + wr1 (wc0 x[r1, c0] + wc1 x[r1, c1]).
extern "C" __global__ void upsample_bilinear2d(Tensor y, Tensor x, i64 h, i64 w, i64 oh, i64 ow, int align_corners) {
    GRID_STRIDE(e, y.numel) {
        const i64 j = e % ow, i = (e / ow) % oh, plane = e / (oh * ow);
        const Linear r = linear_sources(i, h, oh, align_corners), c = linear_sources(j, w, ow, align_corners);
        const i64 base = plane * h * w;
        const double near = c.w0 * load_d(x, base + r.i0 * w + c.i0) + c.w1 * load_d(x, base + r.i0 * w + c.i1);
        const double far = c.w0 * load_d(x, base + r.i1 * w + c.i0) + c.w1 * load_d(x, base + r.i1 * w + c.i1);
        store_d(y, e, r.w0 * near + r.w1 * far);
    }
}

// The weight with which output index `dst`'s sources reach input `src` (both shares where
// i0 = i1 = src).
__device__ double linear_weight(i64 dst, i64 src, i64 size, i64 out, int align_corners) {
    const Linear s = linear_sources(dst, size, out, align_corners);
    return (s.i0 == src ? s.w0 : 0.0) + (s.i1 == src ? s.w1 : 0.0);
}

// The first output index whose sources reach `src` or beyond (i1 >= src; out if none).
// Sources never decrease along the output, so a binary search finds it.
__device__ i64 linear_first(i64 src, i64 size, i64 out, int align_corners) {
    i64 lo = 0, hi = out;
    while (lo < hi) {
        const i64 mid = (lo + hi) / 2;
        if (linear_sources(mid, size, out, align_corners).i1 >= src) hi = mid; else lo = mid + 1;
    }
    return lo;
}

// dx[plane, r, c] = sum of dy[plane, i, j] times (i's weight for r) times (j's weight for c)
// over the outputs whose sources reach (r, c): the rows from the first whose i1 reaches r
// to the last whose i0 does not pass it, the columns alike. One thread a dx element.
extern "C" __global__ void upsample_bilinear2d_backward(Tensor dx, Tensor dy, i64 h, i64 w, i64 oh, i64 ow, int align_corners) {
    GRID_STRIDE(e, dx.numel) {
        const i64 c = e % w, r = (e / w) % h, plane = e / (h * w);
        const i64 i0 = linear_first(r, h, oh, align_corners), j0 = linear_first(c, w, ow, align_corners);
        double total = 0.0;
        for (i64 i = i0; i < oh && linear_sources(i, h, oh, align_corners).i0 <= r; ++i) {
            const double wr = linear_weight(i, r, h, oh, align_corners);
            if (wr == 0.0) continue;
            for (i64 j = j0; j < ow && linear_sources(j, w, ow, align_corners).i0 <= c; ++j) {
                total += wr * linear_weight(j, c, w, ow, align_corners) * load_d(dy, (plane * oh + i) * ow + j);
            }
        }
        store_d(dx, e, total);
    }
}

// grid_sample: where a grid coordinate g reads along a dimension of `size` pixels, and the
// derivative of that position by g (exec/kernels/resample.rs's grid_source, in float as
// there): ((g + 1) / 2)·(size − 1) with align_corners, else ((g + 1)·size − 1) / 2; under
// border padding clipped to [0, size − 1] (derivative 0 where clipped); not finite or
// beyond int, −100 (outside).
struct GridSource {
    float at, slope;
};

__device__ GridSource grid_source(float g, i64 size, int align_corners, int border) {
    const float sf = (float)size;
    GridSource s;
    if (align_corners) {
        s.at = (g + 1.0f) / 2.0f * (sf - 1.0f);
        s.slope = (sf - 1.0f) / 2.0f;
    } else {
        s.at = ((g + 1.0f) * sf - 1.0f) / 2.0f;
        s.slope = sf / 2.0f;
    }
    if (border) {
        if (s.at <= 0.0f) {
            s.at = 0.0f;
            s.slope = 0.0f;
        } else if (s.at >= sf - 1.0f) {
            s.at = sf - 1.0f;
            s.slope = 0.0f;
        }
    }
    if (!isfinite(s.at) || s.at > 2147483646.0f || s.at < -2147483648.0f) s.at = -100.0f;
    return s;
}

// The pixels a sample at (ix, iy) reads, in the CPU reference's order and with its float
// weights: bilinear, those of north-west, north-east, south-west, south-east inside the
// image; nearest, the pixel at (ix, iy) rounded half to even, if inside.
struct GridTaps {
    i64 row[4], col[4];
    float weight[4];
    int n;
};

__device__ __forceinline__ void grid_tap(GridTaps& t, float row, float col, float weight, i64 h, i64 w) {
    if (row >= 0.0f && col >= 0.0f && (i64)row < h && (i64)col < w) {
        t.row[t.n] = (i64)row;
        t.col[t.n] = (i64)col;
        t.weight[t.n] = weight;
        ++t.n;
    }
}

__device__ GridTaps grid_taps(float ix, float iy, i64 h, i64 w, int nearest) {
    GridTaps t;
    t.n = 0;
    if (nearest) {
        grid_tap(t, rintf(iy), rintf(ix), 1.0f, h, w);
        return t;
    }
    const float x0 = floorf(ix), y0 = floorf(iy), x1 = x0 + 1.0f, y1 = y0 + 1.0f;
    grid_tap(t, y0, x0, (x1 - ix) * (y1 - iy), h, w);
    grid_tap(t, y0, x1, (ix - x0) * (y1 - iy), h, w);
    grid_tap(t, y1, x0, (x1 - ix) * (iy - y0), h, w);
    grid_tap(t, y1, x1, (ix - x0) * (iy - y0), h, w);
    return t;
}

// y[n, c, p, q] = Σ over the taps of grid[n, p, q] of x[n, c, row, col]·weight (double).
extern "C" __global__ void grid_sample(Tensor y, Tensor x, Tensor grid, int nearest, int border, int align_corners) {
    const i64 c = x.shape[1], h = x.shape[2], w = x.shape[3], p = y.shape[2], q = y.shape[3];
    GRID_STRIDE(e, y.numel) {
        const i64 at = e % (p * q), b = e / (p * q * c), plane = e / (p * q);
        const i64 g = (b * p * q + at) * 2;
        const GridSource sx = grid_source(load_f(grid, g), w, align_corners, border);
        const GridSource sy = grid_source(load_f(grid, g + 1), h, align_corners, border);
        const GridTaps t = grid_taps(sx.at, sy.at, h, w, nearest);
        double acc = 0.0;
        for (int k = 0; k < t.n; ++k) acc += load_d(x, (plane * h + t.row[k]) * w + t.col[k]) * (double)t.weight[k];
        store_d(y, e, acc);
    }
}

// dx of grid_sample: one thread per (n, c) plane of dx, which it zeroes, then adds dy times
// each tap's weight into, positions in row-major order (no atomics: runs repeat bit for
// bit; each addition rounds to dx's dtype, as PyTorch's atomic adds do).
extern "C" __global__ void grid_sample_backward_data(Tensor dx, Tensor dy, Tensor grid, int nearest, int border,
                                                     int align_corners) {
    const i64 c = dx.shape[1], h = dx.shape[2], w = dx.shape[3], p = dy.shape[2], q = dy.shape[3];
    GRID_STRIDE(plane, dx.shape[0] * c) {
        const i64 b = plane / c;
        for (i64 i = 0; i < h * w; ++i) store_d(dx, plane * h * w + i, 0.0);
        for (i64 at = 0; at < p * q; ++at) {
            const i64 g = (b * p * q + at) * 2;
            const GridSource sx = grid_source(load_f(grid, g), w, align_corners, border);
            const GridSource sy = grid_source(load_f(grid, g + 1), h, align_corners, border);
            const GridTaps t = grid_taps(sx.at, sy.at, h, w, nearest);
            const double d = load_d(dy, plane * p * q + at);
            for (int k = 0; k < t.n; ++k) {
                const i64 o = (plane * h + t.row[k]) * w + t.col[k];
                store_d(dx, o, load_d(dx, o) + d * (double)t.weight[k]);
            }
        }
    }
}

// dgrid of grid_sample: one thread per grid position, summing over channels dy times each
// tap's value times its weight's derivative (± its row factor along x, ± its column factor
// along y), times the position's derivative by the grid coordinate; 0 under nearest.
extern "C" __global__ void grid_sample_backward_grid(Tensor dgrid, Tensor dy, Tensor x, Tensor grid, int nearest,
                                                     int border, int align_corners) {
    const i64 c = x.shape[1], h = x.shape[2], w = x.shape[3], p = dy.shape[2], q = dy.shape[3];
    GRID_STRIDE(pos, x.shape[0] * p * q) {
        const i64 b = pos / (p * q), at = pos % (p * q), g = pos * 2;
        const GridSource sx = grid_source(load_f(grid, g), w, align_corners, border);
        const GridSource sy = grid_source(load_f(grid, g + 1), h, align_corners, border);
        double gx = 0.0, gy = 0.0;
        if (!nearest) {
            const GridTaps t = grid_taps(sx.at, sy.at, h, w, 0);
            const double x0 = (double)floorf(sx.at), y0 = (double)floorf(sy.at);
            const double fx = (double)sx.at - x0, fy = (double)sy.at - y0;
            for (i64 ch = 0; ch < c; ++ch) {
                const i64 plane = b * c + ch;
                const double d = load_d(dy, plane * p * q + at);
                for (int k = 0; k < t.n; ++k) {
                    const double v = load_d(x, (plane * h + t.row[k]) * w + t.col[k]) * d;
                    const bool east = (double)t.col[k] > x0, south = (double)t.row[k] > y0;
                    const double row_factor = south ? fy : 1.0 - fy, col_factor = east ? fx : 1.0 - fx;
                    gx += east ? v * row_factor : -v * row_factor;
                    gy += south ? v * col_factor : -v * col_factor;
                }
            }
        }
        store_d(dgrid, g, (double)sx.slope * gx);
        store_d(dgrid, g + 1, (double)sy.slope * gy);
    }
}
