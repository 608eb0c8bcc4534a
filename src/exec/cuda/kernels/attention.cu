// attention.cu — fused attention and its gradients (exec/kernels/attention.rs is the
// reference). q [..., H, T, E], k [..., Hkv, S, E] and v [..., Hkv, S, Ev] are views read
// by row: query row r = bh·T + i of q, out, dout and lse (bh the query head over all batch
// entries), key row kv·S + j of k and v, where kv = bh / group (group = H / Hkv query heads
// per key/value head: grouped-query attention). With `causal`, query row i sees keys j <= i.
//
// No T×S buffer exists. One block owns one row (a query row in `attention` and
// `attention_backward_dq`, a key row in `attention_backward_dkv`) and visits the rows it
// pairs with in tiles of blockDim.x: each thread scores one pair, and the tile's weights pass
// through shared memory to the threads that own the output columns (column c is thread
// c mod blockDim.x's, in pass c / blockDim.x; a later pass recomputes the same scores the
// same way, so every pass sees the same numbers).
//
// Everything is computed in double (scores, exponentials, every sum) and rounded once when
// stored: rows of many keys sum many terms, and float sums would drift from the reference
// past --check's tolerance. No atomics and no two blocks write one element: dk and dv are
// written by the block owning the key row, which sums over every query row of its group
// itself, in the reference's order; dq by the block owning the query row.

// The most threads a block has (view.rs THREADS): the size of a tile.
#define ATTN_TILE 256

// The keys query row i sees: all s, or with causal the first min(i + 1, s).
__device__ __forceinline__ i64 attn_keys(i64 i, i64 s, int causal) { return causal ? imin(s, i + 1) : s; }

// Σ_c a[ra·n + c]·b[rb·n + c]: the dot product of row ra of a and row rb of b (n columns).
__device__ __forceinline__ double row_dot(const Tensor& a, i64 ra, const Tensor& b, i64 rb, i64 n) {
    double acc = 0.0;
    for (i64 c = 0; c < n; ++c) acc += load_d(a, ra * n + c) * load_d(b, rb * n + c);
    return acc;
}

// out[r] = Σ_j p_j·v[j] / Σ_j p_j and lse[r] = m + log Σ_j p_j, p_j = exp(scale·q[r]·k[j] − m),
// by the online softmax: one sweep over the keys in tiles with a running maximum m and sum
// l; when a tile raises the maximum, l and the partial output are rescaled by exp(m_old −
// m_new). A row that sees no key gives 0 and −inf.
extern "C" __global__ void attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, i64 rows, i64 group,
                                     i64 t, i64 s, i64 e, i64 ev, int causal, double scale) {
    __shared__ double tile[ATTN_TILE];
    const i64 width = blockDim.x;
    const i64 passes = imax(1, (ev + width - 1) / width);  // one at least: lse
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 kv = r / t / group, n = attn_keys(r % t, s, causal);
        for (i64 pass = 0; pass < passes; ++pass) {
            const i64 col = pass * width + threadIdx.x;
            double m = -(double)f_inf(), l = 0.0, acc = 0.0;
            for (i64 j0 = 0; j0 < n; j0 += width) {
                const i64 j = j0 + threadIdx.x;
                const double score = j < n ? scale * row_dot(q, r, k, kv * s + j, e) : -(double)f_inf();
                const double m_new = fmax(m, block_max_d(score));
                const double p = j < n ? exp(score - m_new) : 0.0;
                const double rescale = exp(m - m_new);
                l = l * rescale + block_sum_d(p);
                __syncthreads();  // the previous tile's readers are done
                tile[threadIdx.x] = p;
                __syncthreads();
                if (col < ev) {
                    acc *= rescale;
                    const i64 count = imin(width, n - j0);
                    for (i64 x = 0; x < count; ++x) acc += tile[x] * load_d(v, (kv * s + j0 + x) * ev + col);
                }
                m = m_new;
            }
            if (col < ev) store_d(out, r * ev + col, n > 0 ? acc / l : 0.0);
            if (pass == 0 && threadIdx.x == 0) store_d(lse, r, n > 0 ? m + log(l) : -(double)f_inf());
        }
    }
}

// dq[r] = scale·Σ_j ds_j·k[j], ds_j = p_j·(dout[r]·v[j] − D), p_j = exp(scale·q[r]·k[j] −
// lse[r]), D = dout[r]·out[r]; D also goes to deltas[r] (doubles in the workspace) for
// attention_backward_dkv, which runs after this kernel.
extern "C" __global__ void attention_backward_dq(Tensor dq, u64 deltas, Tensor dout, Tensor q, Tensor k, Tensor v,
                                                 Tensor out, Tensor lse, i64 rows, i64 group, i64 t, i64 s, i64 e,
                                                 i64 ev, int causal, double scale) {
    __shared__ double tile[ATTN_TILE];
    double* delta = (double*)deltas;
    const i64 width = blockDim.x;
    const i64 passes = (e + width - 1) / width;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 kv = r / t / group, n = attn_keys(r % t, s, causal);
        double part = 0.0;
        for (i64 c = threadIdx.x; c < ev; c += width) part += load_d(dout, r * ev + c) * load_d(out, r * ev + c);
        const double d = block_sum_d(part);
        if (threadIdx.x == 0) delta[r] = d;
        const double row_lse = load_d(lse, r);
        for (i64 pass = 0; pass < passes; ++pass) {
            const i64 col = pass * width + threadIdx.x;
            double acc = 0.0;
            for (i64 j0 = 0; j0 < n; j0 += width) {
                const i64 j = j0 + threadIdx.x;
                double ds = 0.0;
                if (j < n) {
                    const i64 key = kv * s + j;
                    const double p = exp(scale * row_dot(q, r, k, key, e) - row_lse);
                    ds = p * (row_dot(dout, r, v, key, ev) - d);
                }
                __syncthreads();
                tile[threadIdx.x] = ds;
                __syncthreads();
                if (col < e) {
                    const i64 count = imin(width, n - j0);
                    for (i64 x = 0; x < count; ++x) acc += tile[x] * load_d(k, (kv * s + j0 + x) * e + col);
                }
            }
            if (col < e) store_d(dq, r * e + col, scale * acc);
        }
    }
}

// Query row x of the rows that see a key of key/value head kv: query head kv·group + x /
// per_head (each of the group's heads contributes per_head rows), row first + x % per_head.
__device__ __forceinline__ i64 attn_query_row(i64 kv, i64 group, i64 t, i64 first, i64 per_head, i64 x) {
    return (kv * group + x / per_head) * t + first + x % per_head;
}

// dk[key] = scale·Σ ds·q[r] and dv[key] = Σ p·dout[r] over the query rows r that see key j of
// key/value head kv (key = kv·S + j): rows i >= j with causal, else all T, of each of the
// group's query heads, head by head and row by row. p and ds as in attention_backward_dq,
// with D from deltas.
extern "C" __global__ void attention_backward_dkv(Tensor dk, Tensor dv, u64 deltas, Tensor dout, Tensor q, Tensor k,
                                                  Tensor v, Tensor lse, i64 keys, i64 group, i64 t, i64 s, i64 e,
                                                  i64 ev, int causal, double scale) {
    __shared__ double p_tile[ATTN_TILE];
    __shared__ double ds_tile[ATTN_TILE];
    const double* delta = (const double*)deltas;
    const i64 width = blockDim.x;
    const i64 passes = (imax(e, ev) + width - 1) / width;
    for (i64 key = blockIdx.x; key < keys; key += gridDim.x) {
        const i64 kv = key / s, j = key % s;
        const i64 first = causal ? j : 0;
        const i64 per_head = imax(0, t - first);
        const i64 n = group * per_head;
        for (i64 pass = 0; pass < passes; ++pass) {
            const i64 col = pass * width + threadIdx.x;
            double gk = 0.0, gv = 0.0;
            for (i64 x0 = 0; x0 < n; x0 += width) {
                const i64 x = x0 + threadIdx.x;
                double p = 0.0, ds = 0.0;
                if (x < n) {
                    const i64 r = attn_query_row(kv, group, t, first, per_head, x);
                    p = exp(scale * row_dot(q, r, k, key, e) - load_d(lse, r));
                    ds = p * (row_dot(dout, r, v, key, ev) - delta[r]);
                }
                __syncthreads();
                p_tile[threadIdx.x] = p;
                ds_tile[threadIdx.x] = ds;
                __syncthreads();
                const i64 count = imin(width, n - x0);
                for (i64 y = 0; y < count; ++y) {
                    const i64 r = attn_query_row(kv, group, t, first, per_head, x0 + y);
                    if (col < ev) gv += p_tile[y] * load_d(dout, r * ev + col);
                    if (col < e) gk += ds_tile[y] * load_d(q, r * e + col);
                }
            }
            if (col < e) store_d(dk, key * e + col, scale * gk);
            if (col < ev) store_d(dv, key * ev + col, gv);
        }
    }
}
