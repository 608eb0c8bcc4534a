// conv.cu — convolution (grouped, dilated, transposed) as implicit GEMM, the matmul kernel
// for operands cuBLAS cannot read, and max pooling.
//
// `igemm` computes out(m, n) = Σ_k A(m, k)·B(k, n) in 64×64 tiles (256 threads, 4×4 outputs
// each, 16-deep slices of k staged in shared memory, float accumulators), reading A and B
// straight from the tensors (no im2col buffer). The conv modes work in a convolution's index
// space in conv2d's terms (Geom): an input side x[N, G·C, H, W], a weight w[G·K, C, R, S] and
// an output side y[N, G·K, P, Q], G groups of C input and K output channels, output (p, q) at
// tap (r, s) meeting input (p·sh + r·dh − ph, q·sw + s·dw − pw). Per group:
//   MODE_CONV_FWD:        A = w[k, (c, r, s)], B = x[(c, r, s), (b, p, q)]   → y[b, k, p, q]
//   MODE_CONV_BWD_DATA:   A = w[(k, r, s)]ᵀ,   B = dy[(k, r, s), (b, h, w)]  → dx[b, c, h, w]
//   MODE_CONV_BWD_WEIGHT: A = dy[k, (b, p, q)], B = x[(b, p, q), (c, r, s)]  → dw[k, c, r, s]
//   MODE_MATMUL:          A[z.., m, k], B[z.., k, n] (any strides)           → out[z.., m, n]
// conv_transpose2d runs the same modes with its y as the input side and its x as the output
// side (lower.rs says which mode computes what). Padding reads as 0. blockIdx.z runs over
// `batches × splits`: batches of a matmul or groups of a conv (each group's channels are
// found by offsets, conv_group), or slices of k (split-K, one batch only) whose partial tiles
// (doubles) go to the workspace and igemm_finish adds them in split order.
//
// Two instances: `igemm` keeps tiles and sums in double, `igemm_f32` in float. A float sum
// of a conv's C·R·S products loses about 1e-5 of the result where the products cancel, and
// batch normalisation over few elements amplifies that past any float tolerance in the
// backward pass (resnet18_tiny, batch 2, differs from the CPU reference by percents with
// float sums, not at all with double); FP64 runs at half the FP32 rate on H100-class GPUs.
// The executor uses `igemm` unless asked for speed (MEMPLAN_CUDA_CONV=f32).

#define TILE_M 64
#define TILE_N 64
#define TILE_K 16

// The offset of the element of tensor t at its batch index z (over all but the last two
// dimensions, row-major).
__device__ __forceinline__ i64 batch_offset(const Tensor& t, i64 z) {
    i64 off = 0;
    for (int d = t.rank - 3; d >= 0; --d) {
        off += (z % t.shape[d]) * t.stride[d];
        z /= t.shape[d];
    }
    return off;
}

__device__ __forceinline__ i64 at4(const Tensor& t, i64 a, i64 b, i64 c, i64 d) {
    return a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3];
}

// Row and column strides of the last two dimensions (matmul operands).
struct Mat {
    i64 base, rs, cs;
};

// The element offsets of group z's channels in a conv mode's operands a and b and its
// output (the weight's channels are its dimension 0, an activation's its dimension 1).
__device__ __forceinline__ void conv_group(int mode, const Tensor& out, const Tensor& a, const Tensor& b, const Geom& g,
                                           i64 z, i64* a0, i64* b0, i64* out0) {
    switch (mode) {
        case MODE_CONV_FWD:  // a = w, b = x, out = y
            *a0 = z * g.k * a.stride[0];
            *b0 = z * g.c * b.stride[1];
            *out0 = z * g.k * out.stride[1];
            break;
        case MODE_CONV_BWD_DATA:  // a = w, b = dy, out = dx
            *a0 = z * g.k * a.stride[0];
            *b0 = z * g.k * b.stride[1];
            *out0 = z * g.c * out.stride[1];
            break;
        default:  // MODE_CONV_BWD_WEIGHT: a = dy, b = x, out = dw
            *a0 = z * g.k * a.stride[1];
            *b0 = z * g.c * b.stride[1];
            *out0 = z * g.k * out.stride[0];
            break;
    }
}

// In the conv modes every index (k < depth, n < cols), every product of sizes and every
// position (p·sh + r·dh, h + ph, ...) fits an int (the host checks), so they decode with
// 32-bit division, several times cheaper than 64-bit; element offsets stay 64-bit. ma.base
// and mb.base are the group's offsets (conv_group) in the conv modes.
template <typename acc_t>
__device__ __forceinline__ acc_t igemm_a(int mode, const Tensor& a, const Geom& g, const Mat& ma, i64 m, i64 k) {
    const int kk = (int)k, rs = g.r * g.s;
    switch (mode) {
        case MODE_CONV_FWD: {  // w[m, c, r, s], k = (c, r, s)
            const int rem = kk % rs;
            return load_at_f(a, ma.base + at4(a, m, kk / rs, rem / g.s, rem % g.s));
        }
        case MODE_CONV_BWD_DATA: {  // w[kk, m, r, s], k = (kk, r, s)
            const int rem = kk % rs;
            return load_at_f(a, ma.base + at4(a, kk / rs, m, rem / g.s, rem % g.s));
        }
        case MODE_CONV_BWD_WEIGHT: {  // dy[b, m, p, q], k = (b, p, q)
            const int pq = g.p * g.q, rem = kk % pq;
            return load_at_f(a, ma.base + at4(a, kk / pq, m, rem / g.q, rem % g.q));
        }
        default: return load_at_f(a, ma.base + m * ma.rs + k * ma.cs);
    }
}

// The part of a B element's position that depends on its column n alone. A thread loads
// the same column of B in every k slice (see igemm_tiles), so this is decoded once, out of
// the k loop, and only k's part is decoded per element.
struct Col {
    int bb;      // CONV_FWD, CONV_BWD_DATA: the image; CONV_BWD_WEIGHT: the input channel c
    int h0, w0;  // CONV_FWD: p·sh − ph, q·sw − pw; CONV_BWD_DATA: h + ph, w + pw; CONV_BWD_WEIGHT: r·dh − ph, s·dw − pw
};

__device__ __forceinline__ Col igemm_col(int mode, const Geom& g, i64 n) {
    const int nn = (int)n;
    Col col = {0, 0, 0};
    switch (mode) {
        case MODE_CONV_FWD: {  // n = (bb, p, q)
            const int pq = g.p * g.q, nrem = nn % pq;
            col.bb = nn / pq;
            col.h0 = (nrem / g.q) * g.sh - g.ph;
            col.w0 = (nrem % g.q) * g.sw - g.pw;
            break;
        }
        case MODE_CONV_BWD_DATA: {  // n = (bb, h, w)
            const int hw = g.h * g.w, nrem = nn % hw;
            col.bb = nn / hw;
            col.h0 = nrem / g.w + g.ph;
            col.w0 = nrem % g.w + g.pw;
            break;
        }
        case MODE_CONV_BWD_WEIGHT: {  // n = (c, r, s)
            const int rs = g.r * g.s, nrem = nn % rs;
            col.bb = nn / rs;
            col.h0 = (nrem / g.s) * g.dh - g.ph;
            col.w0 = (nrem % g.s) * g.dw - g.pw;
            break;
        }
        default: break;
    }
    return col;
}

template <typename acc_t>
__device__ __forceinline__ acc_t igemm_b(int mode, const Tensor& b, const Geom& g, const Mat& mb, i64 k, i64 n,
                                         const Col& col) {
    const int kk = (int)k, rs = g.r * g.s;
    switch (mode) {
        case MODE_CONV_FWD: {  // x[bb, c, p·sh + r·dh − ph, q·sw + s·dw − pw], k = (c, r, s)
            const int krem = kk % rs;
            const int h = col.h0 + (krem / g.s) * g.dh, w = col.w0 + (krem % g.s) * g.dw;
            if (h < 0 || h >= g.h || w < 0 || w >= g.w) return 0.0f;
            return load_at_f(b, mb.base + at4(b, col.bb, kk / rs, h, w));
        }
        case MODE_CONV_BWD_DATA: {  // dy[bb, kk, p, q] with p·sh + r·dh − ph = h, k = (kk, r, s)
            const int krem = kk % rs;
            const int hp = col.h0 - (krem / g.s) * g.dh, wp = col.w0 - (krem % g.s) * g.dw;
            if (hp < 0 || wp < 0 || hp % g.sh != 0 || wp % g.sw != 0) return 0.0f;
            const int p = hp / g.sh, q = wp / g.sw;
            if (p >= g.p || q >= g.q) return 0.0f;
            return load_at_f(b, mb.base + at4(b, col.bb, kk / rs, p, q));
        }
        case MODE_CONV_BWD_WEIGHT: {  // x[bb, c, p·sh + r·dh − ph, q·sw + s·dw − pw], k = (bb, p, q)
            const int pq = g.p * g.q, krem = kk % pq;
            const int h = (krem / g.q) * g.sh + col.h0, w = (krem % g.q) * g.sw + col.w0;
            if (h < 0 || h >= g.h || w < 0 || w >= g.w) return 0.0f;
            return load_at_f(b, mb.base + at4(b, kk / pq, col.bb, h, w));
        }
        default: return load_at_f(b, mb.base + k * mb.rs + n * mb.cs);
    }
}

// Stores out(m, n) of batch z; `base` is the offset of a conv group's channels (conv_group).
__device__ __forceinline__ void igemm_store(int mode, const Tensor& out, const Geom& g, i64 z, i64 base, i64 rows,
                                            i64 cols, i64 m, i64 n, double v) {
    const int nn = (int)n;
    switch (mode) {
        case MODE_CONV_FWD: {  // n = (bb, p, q)
            const int pq = g.p * g.q, rem = nn % pq;
            store_at_d(out, base + at4(out, nn / pq, m, rem / g.q, rem % g.q), v);
            break;
        }
        case MODE_CONV_BWD_DATA: {  // n = (bb, h, w)
            const int hw = g.h * g.w, rem = nn % hw;
            store_at_d(out, base + at4(out, nn / hw, m, rem / g.w, rem % g.w), v);
            break;
        }
        case MODE_CONV_BWD_WEIGHT: {  // n = (c, r, s)
            const int rs = g.r * g.s, rem = nn % rs;
            store_at_d(out, base + at4(out, m, nn / rs, rem / g.s, rem % g.s), v);
            break;
        }
        default: store_d(out, (z * rows + m) * cols + n, v); break;
    }
}

template <typename acc_t>
__device__ __forceinline__ void igemm_tiles(int mode, const Tensor& out, const Tensor& a, const Tensor& b, const Geom& g,
                                            i64 rows, i64 cols, i64 depth, i64 batches, i64 splits, i64 k_chunk,
                                            u64 partials) {
    __shared__ acc_t as[TILE_K][TILE_M + 1];
    __shared__ acc_t bs[TILE_K][TILE_N + 1];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const i64 n0 = (i64)blockIdx.x * TILE_N;
    // This thread's column of B in every load below (256 is a multiple of TILE_N); one past
    // the last column decodes as the last (its loads are skipped).
    const Col col = igemm_col(mode, g, imin(n0 + tid % TILE_N, cols - 1));
    const i64 row_tiles = (rows + TILE_M - 1) / TILE_M;
    for (i64 z = blockIdx.z; z < batches * splits; z += gridDim.z) {
        const i64 batch = z / splits, split = z % splits;
        const i64 k_begin = split * k_chunk, k_end = imin(depth, k_begin + k_chunk);
        Mat ma = {0, 0, 0}, mb = {0, 0, 0};
        i64 out_base = 0;
        if (mode == MODE_MATMUL) {
            ma.base = batch_offset(a, batch);
            ma.rs = a.stride[a.rank - 2];
            ma.cs = a.stride[a.rank - 1];
            mb.base = batch_offset(b, batch);
            mb.rs = b.stride[b.rank - 2];
            mb.cs = b.stride[b.rank - 1];
        } else {
            conv_group(mode, out, a, b, g, batch, &ma.base, &mb.base, &out_base);
        }
        for (i64 tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
            const i64 m0 = tile * TILE_M;
            acc_t acc[4][4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = 0;
            for (i64 k0 = k_begin; k0 < k_end; k0 += TILE_K) {
#pragma unroll
                for (int l = 0; l < 4; ++l) {
                    const int e = tid + 256 * l;
                    const int am = e / TILE_K, ak = e % TILE_K;
                    const i64 m = m0 + am, ka = k0 + ak;
                    as[ak][am] = (m < rows && ka < k_end) ? igemm_a<acc_t>(mode, a, g, ma, m, ka) : (acc_t)0;
                    const int bk = e / TILE_N, bn = e % TILE_N;
                    const i64 n = n0 + bn, kb = k0 + bk;
                    bs[bk][bn] = (n < cols && kb < k_end) ? igemm_b<acc_t>(mode, b, g, mb, kb, n, col) : (acc_t)0;
                }
                __syncthreads();
#pragma unroll
                for (int kk = 0; kk < TILE_K; ++kk) {
                    acc_t av[4], bv[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) av[i] = as[kk][ty + 16 * i];
#pragma unroll
                    for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx + 16 * j];
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
                }
                __syncthreads();
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const i64 m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
                    if (m >= rows || n >= cols) continue;
                    if (splits > 1) {
                        ((double*)partials)[(split * rows + m) * cols + n] = (double)acc[i][j];
                    } else {
                        igemm_store(mode, out, g, batch, out_base, rows, cols, m, n, (double)acc[i][j]);
                    }
                }
            }
        }
    }
}

// At most 64 registers a thread, so four blocks fit on an SM: unbounded, `igemm` took 152
// and ran one block (8 warps) per SM, stalled on latency; bounded, ResNet-18's step on an
// H100 went from 268 to 167 ms (benches/BENCHMARKS.md, "GPU").
extern "C" __global__ void __launch_bounds__(256, 4) igemm(int mode, Tensor out, Tensor a, Tensor b, Geom g, i64 rows,
                                                           i64 cols, i64 depth, i64 batches, i64 splits, i64 k_chunk,
                                                           u64 partials) {
    igemm_tiles<double>(mode, out, a, b, g, rows, cols, depth, batches, splits, k_chunk, partials);
}

extern "C" __global__ void __launch_bounds__(256, 4) igemm_f32(int mode, Tensor out, Tensor a, Tensor b, Geom g, i64 rows,
                                                               i64 cols, i64 depth, i64 batches, i64 splits, i64 k_chunk,
                                                               u64 partials) {
    igemm_tiles<float>(mode, out, a, b, g, rows, cols, depth, batches, splits, k_chunk, partials);
}

// out(m, n) = Σ over splits of the partial tiles, in split order (split-K, one batch: of a
// conv, one group, at offset 0).
extern "C" __global__ void igemm_finish(int mode, Tensor out, u64 partials, Geom g, i64 rows, i64 cols, i64 splits) {
    const double* p = (const double*)partials;
    GRID_STRIDE(i, rows * cols) {
        double total = 0.0;
        for (i64 s = 0; s < splits; ++s) total += p[s * rows * cols + i];
        igemm_store(mode, out, g, 0, 0, rows, cols, i / cols, i % cols, total);
    }
}

// The maximum of pooling window (p, q) over plane (bb, c) of x: scanning the window
// row-major, the first maximum wins ties and a NaN counts as the maximum (the first NaN
// wins), as in the CPU reference. False when the window holds only padding.
__device__ bool window_argmax(const Tensor& x, const Geom& g, i64 bb, i64 c, i64 p, i64 q, i64* bh, i64* bw,
                              float* best) {
    bool found = false;
    for (int r = 0; r < g.r; ++r) {
        const i64 h = p * g.sh + r - g.ph;
        if (h < 0 || h >= g.h) continue;
        for (int s = 0; s < g.s; ++s) {
            const i64 w = q * g.sw + s - g.pw;
            if (w < 0 || w >= g.w) continue;
            const float v = load_at_f(x, at4(x, bb, c, h, w));
            if (!found || v > *best || (v != v && *best == *best)) {
                found = true;
                *best = v;
                *bh = h;
                *bw = w;
            }
        }
    }
    return found;
}

// y[bb, c, p, q] = the maximum of its window of x (padding counts as −inf).
extern "C" __global__ void max_pool2d(Tensor y, Tensor x, Geom g) {
    GRID_STRIDE(i, y.numel) {
        const i64 q = i % g.q, p = (i / g.q) % g.p, c = (i / ((i64)g.p * g.q)) % g.c;
        const i64 bb = i / ((i64)g.p * g.q * g.c);
        i64 bh = 0, bw = 0;
        float best = 0.0f;
        store_f(y, i, window_argmax(x, g, bb, c, p, q, &bh, &bw, &best) ? best : -f_inf());
    }
}

// dx[bb, c, h, w] = Σ dy[bb, c, p, q] over the windows (p, q) whose maximum is at (h, w),
// in (p, q) order. One thread per element of x: no two threads write one element.
extern "C" __global__ void max_pool2d_backward(Tensor dx, Tensor dy, Tensor x, Geom g) {
    GRID_STRIDE(i, dx.numel) {
        const i64 w = i % g.w, h = (i / g.w) % g.h, c = (i / ((i64)g.h * g.w)) % g.c;
        const i64 bb = i / ((i64)g.h * g.w * g.c);
        // Windows p with p·sh − ph ≤ h < p·sh − ph + r, likewise q.
        const i64 hn = h + g.ph - g.r + 1, wn = w + g.pw - g.s + 1;
        const i64 p_lo = hn <= 0 ? 0 : (hn + g.sh - 1) / g.sh, p_hi = imin(g.p - 1, (h + g.ph) / g.sh);
        const i64 q_lo = wn <= 0 ? 0 : (wn + g.sw - 1) / g.sw, q_hi = imin(g.q - 1, (w + g.pw) / g.sw);
        float total = 0.0f;
        for (i64 p = p_lo; p <= p_hi; ++p) {
            for (i64 q = q_lo; q <= q_hi; ++q) {
                i64 bh = 0, bw = 0;
                float best = 0.0f;
                if (window_argmax(x, g, bb, c, p, q, &bh, &bw, &best) && bh == h && bw == w) {
                    total += load_at_f(dy, at4(dy, bb, c, p, q));
                }
            }
        }
        store_f(dx, i, total);
    }
}

// ---------------------------------------------------------------------------------------
// conv3d, direct: exec/kernels/conv.rs's index space in three dimensions. x [N,C,D,H,W],
// w [K,C/groups,T,R,S], y (dy) [N,K,O,P,Q], sizes read from the tensors' shapes; output
// (o, p, q) at tap (t, r, s) meets input (o·sd + t·dd − pd, p·sh + r·dh − ph,
// q·sw + s·dw − pw), taps in the padding skipped. One thread per element written, each
// summing its products in a fixed order in float: no atomics, runs repeat bit for bit.
struct Conv3dArgs {
    i64 groups, stride[3], pad[3], dil[3];
};

__device__ __forceinline__ Conv3dArgs conv3d_args(i64 groups, i64 sd, i64 sh, i64 sw, i64 pd, i64 ph, i64 pw, i64 dd,
                                                  i64 dh, i64 dw) {
    Conv3dArgs a;
    a.groups = groups;
    a.stride[0] = sd, a.stride[1] = sh, a.stride[2] = sw;
    a.pad[0] = pd, a.pad[1] = ph, a.pad[2] = pw;
    a.dil[0] = dd, a.dil[1] = dh, a.dil[2] = dw;
    return a;
}

// The output position along one dimension that reads input position `in` at tap `tap`,
// or −1 (none: between strides, or outside the output's `out` positions).
__device__ __forceinline__ i64 conv3d_out(i64 in, i64 tap, i64 stride, i64 pad, i64 dil, i64 out) {
    const i64 num = in + pad - tap * dil;
    if (num < 0 || num % stride != 0 || num / stride >= out) return -1;
    return num / stride;
}

// y[b,k,o,p,q] = Σ_{c,t,r,s} x[b, g·C/groups + c, ...]·w[k,c,t,r,s], in order c, t, r, s.
extern "C" __global__ void conv3d(Tensor y, Tensor x, Tensor w, i64 groups, i64 sd, i64 sh, i64 sw, i64 pd, i64 ph,
                                  i64 pw, i64 dd, i64 dh, i64 dw) {
    const Conv3dArgs a = conv3d_args(groups, sd, sh, sw, pd, ph, pw, dd, dh, dw);
    const i64 C = x.shape[1], D = x.shape[2], H = x.shape[3], W = x.shape[4];
    const i64 K = w.shape[0], CG = w.shape[1], T = w.shape[2], R = w.shape[3], S = w.shape[4];
    const i64 O = y.shape[2], P = y.shape[3], Q = y.shape[4];
    GRID_STRIDE(i, y.numel) {
        const i64 q = i % Q, p = (i / Q) % P, o = (i / (Q * P)) % O, k = (i / (Q * P * O)) % K;
        const i64 b = i / (Q * P * O * K), first_c = k / (K / a.groups) * CG;
        float acc = 0.0f;
        for (i64 c = 0; c < CG; ++c) {
            for (i64 t = 0; t < T; ++t) {
                const i64 d = o * a.stride[0] + t * a.dil[0] - a.pad[0];
                if (d < 0 || d >= D) continue;
                for (i64 r = 0; r < R; ++r) {
                    const i64 h = p * a.stride[1] + r * a.dil[1] - a.pad[1];
                    if (h < 0 || h >= H) continue;
                    for (i64 s = 0; s < S; ++s) {
                        const i64 ww = q * a.stride[2] + s * a.dil[2] - a.pad[2];
                        if (ww < 0 || ww >= W) continue;
                        const i64 xi = (((b * C + first_c + c) * D + d) * H + h) * W + ww;
                        acc += load_f(x, xi) * load_f(w, (((k * CG + c) * T + t) * R + r) * S + s);
                    }
                }
            }
        }
        store_f(y, i, acc);
    }
}

// dx[b,ch,d,h,w] = Σ dy[b,k,o,p,q]·w[k,c,t,r,s] over the group's output channels k and the
// taps (t, r, s) whose output position (o, p, q) reads it, in order k, t, r, s.
extern "C" __global__ void conv3d_backward_data(Tensor dx, Tensor dy, Tensor w, i64 groups, i64 sd, i64 sh, i64 sw,
                                                i64 pd, i64 ph, i64 pw, i64 dd, i64 dh, i64 dw) {
    const Conv3dArgs a = conv3d_args(groups, sd, sh, sw, pd, ph, pw, dd, dh, dw);
    const i64 C = dx.shape[1], D = dx.shape[2], H = dx.shape[3], W = dx.shape[4];
    const i64 K = w.shape[0], CG = w.shape[1], T = w.shape[2], R = w.shape[3], S = w.shape[4];
    const i64 O = dy.shape[2], P = dy.shape[3], Q = dy.shape[4], KG = K / a.groups;
    GRID_STRIDE(i, dx.numel) {
        const i64 ww = i % W, h = (i / W) % H, d = (i / (W * H)) % D, ch = (i / (W * H * D)) % C;
        const i64 b = i / (W * H * D * C), g = ch / CG, c = ch % CG;
        float acc = 0.0f;
        for (i64 k = g * KG; k < (g + 1) * KG; ++k) {
            for (i64 t = 0; t < T; ++t) {
                const i64 o = conv3d_out(d, t, a.stride[0], a.pad[0], a.dil[0], O);
                if (o < 0) continue;
                for (i64 r = 0; r < R; ++r) {
                    const i64 p = conv3d_out(h, r, a.stride[1], a.pad[1], a.dil[1], P);
                    if (p < 0) continue;
                    for (i64 s = 0; s < S; ++s) {
                        const i64 q = conv3d_out(ww, s, a.stride[2], a.pad[2], a.dil[2], Q);
                        if (q < 0) continue;
                        const i64 yi = (((b * K + k) * O + o) * P + p) * Q + q;
                        acc += load_f(dy, yi) * load_f(w, (((k * CG + c) * T + t) * R + r) * S + s);
                    }
                }
            }
        }
        store_f(dx, i, acc);
    }
}

// dw[k,c,t,r,s] = Σ dy[b,k,o,p,q]·x[b, g·C/groups + c, o·sd + t·dd − pd, ...] over the batch
// and the output positions whose input lies inside x, in order b, o, p, q.
extern "C" __global__ void conv3d_backward_weight(Tensor dw_, Tensor dy, Tensor x, i64 groups, i64 sd, i64 sh, i64 sw,
                                                  i64 pd, i64 ph, i64 pw, i64 dd, i64 dh, i64 dw) {
    const Conv3dArgs a = conv3d_args(groups, sd, sh, sw, pd, ph, pw, dd, dh, dw);
    const i64 N = x.shape[0], C = x.shape[1], D = x.shape[2], H = x.shape[3], W = x.shape[4];
    const i64 K = dw_.shape[0], CG = dw_.shape[1], T = dw_.shape[2], R = dw_.shape[3], S = dw_.shape[4];
    const i64 O = dy.shape[2], P = dy.shape[3], Q = dy.shape[4];
    GRID_STRIDE(i, dw_.numel) {
        const i64 s = i % S, r = (i / S) % R, t = (i / (S * R)) % T, c = (i / (S * R * T)) % CG;
        const i64 k = i / (S * R * T * CG), ch = k / (K / a.groups) * CG + c;
        float acc = 0.0f;
        for (i64 b = 0; b < N; ++b) {
            for (i64 o = 0; o < O; ++o) {
                const i64 d = o * a.stride[0] + t * a.dil[0] - a.pad[0];
                if (d < 0 || d >= D) continue;
                for (i64 p = 0; p < P; ++p) {
                    const i64 h = p * a.stride[1] + r * a.dil[1] - a.pad[1];
                    if (h < 0 || h >= H) continue;
                    for (i64 q = 0; q < Q; ++q) {
                        const i64 ww = q * a.stride[2] + s * a.dil[2] - a.pad[2];
                        if (ww < 0 || ww >= W) continue;
                        const i64 yi = (((b * K + k) * O + o) * P + p) * Q + q;
                        acc += load_f(dy, yi) * load_f(x, (((b * C + ch) * D + d) * H + h) * W + ww);
                    }
                }
            }
        }
        store_f(dw_, i, acc);
    }
}
