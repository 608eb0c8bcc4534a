// attention.cu — fused attention and its gradients in FlashAttention-2's tiles
// (exec/kernels/attention.rs is the reference). q [..., H, T, E], k [..., Hkv, S, E] and
// v [..., Hkv, S, Ev] are views read by row: query row r = bh·T + i of q, out, dout and lse
// (bh the query head over all batch entries), key row kv·S + j of k and v, where kv = bh /
// group (group = H / Hkv query heads per key/value head: grouped-query attention). With
// `causal`, query row i sees keys j <= i (top-left aligned, also when T != S).
//
// No T×S buffer exists. A block owns a tile of rows of one head and walks the tiles it
// pairs with, staging both in shared memory:
// - `attention`: 64 query rows (ATTN_FWD_ROWS, 256 threads) against tiles of 32 keys
//   (ATTN_KEYS): scores S = scale·q·kᵀ, the online softmax per row (running maximum m and
//   sum l; when a tile raises m, l and the partial output are rescaled by exp(m_old −
//   m_new)), then out += P·v; at the end out /= l and lse = m + log l.
// - `attention_backward_dq`: 32 query rows (ATTN_BWD_ROWS, 128 threads) against tiles of
//   32 keys: first D = rowsum(dout ∘ out) (to `deltas`, floats in the workspace), then per
//   tile P = exp(scale·q·kᵀ − lse), dS = P ∘ (dout·vᵀ − D) and dq += scale·dS·k.
// - `attention_backward_dkv`: 32 keys of one key/value head (128 threads) against tiles of
//   32 query rows of every query head of its group: the same P and dS (D from `deltas`),
//   dv += Pᵀ·dout and dk += scale·dSᵀ·q.
// A thread computes a 4×2 patch of each score tile and a 4×4 patch of its outputs: rows
// ty + i·(threads / 16), columns tx + 16·j (ty = thread / 16, tx = thread % 16), so the 16
// threads sharing a row are one half-warp, which reduces the row's maximum and sum with
// shuffles. The kernels rely on exactly their block sizes (ATTN_FWD_THREADS,
// ATTN_BWD_THREADS), which lower.rs launches (defined ahead of the program from source.rs's SHARED).
//
// Shared memory holds 64-column chunks (ATTN_CHUNK) of the staged rows, each row padded to
// 65 floats so that the rows a warp reads at one column fall in different banks, the 32-key
// tiles of P (and dS) padded to 33, and tables of the staged rows' element offsets (a view's
// offset is computed once per row, not per element). When E (or Ev) is at most 64 the
// block's own rows stay in shared memory for its whole walk; larger head dims are tiled:
// the scores sum over chunks staged one after another, and the output columns are split
// into 64-column chunks over gridDim.y, each block recomputing the scores (and, in the
// backward, dP) for its chunk. Every kernel's static shared memory is under 48 KB (asserted
// below).
//
// Loads and stores convert through the dtype switch of common.cuh (f32, f16, bf16);
// everything is computed in float: scores, exponentials, the softmax's running maximum and
// sum, D, every accumulation. Sums are short where it matters (a score sums E products, a
// tile 32 keys, and tiles combine through the rescaled running sums), so rounding stays
// near float's epsilon, far inside --check's tolerance. No atomics and no two blocks write
// one element: dq is written by the block owning the query rows, dk and dv by the block
// owning the keys, which sums over every query row of its group itself, in a fixed order;
// runs repeat bit for bit. With `causal`, key tiles wholly above the diagonal are never
// visited (a query tile stops at its last row; a key tile starts at its first key) and the
// tiles that cross it are masked.

// ATTN_CHUNK (from source.rs): columns of E or Ev staged at a time
#define ATTN_LD 65           // row stride of a staged chunk (ATTN_CHUNK + 1)
#define ATTN_KEYS 32         // keys per tile (and query rows per tile in dk/dv)
#define ATTN_PLD 33          // row stride of a tile of P or dS (ATTN_KEYS + 1)
// ATTN_FWD_ROWS (from source.rs): query rows per block of `attention`
// ATTN_FWD_THREADS (from source.rs): threads per block of `attention`
// ATTN_BWD_ROWS (from source.rs): query rows per block of `attention_backward_dq`, keys per block of dk/dv
// ATTN_BWD_THREADS (from source.rs): threads per block of both backward kernels

static_assert(ATTN_FWD_ROWS == 4 * (ATTN_FWD_THREADS / 16) && ATTN_BWD_ROWS == 4 * (ATTN_BWD_THREADS / 16),
              "a thread owns 4 rows");
static_assert(ATTN_KEYS == 2 * 16 && ATTN_BWD_ROWS == ATTN_KEYS, "a thread owns 2 columns of a score tile");
// Static shared memory per block (floats, offsets and per-row values), within 48 KB.
static_assert(4 * (ATTN_FWD_ROWS * ATTN_LD + ATTN_KEYS * ATTN_LD + ATTN_FWD_ROWS * ATTN_PLD) +
                      8 * (2 * ATTN_FWD_ROWS + 2 * ATTN_KEYS) <= 48 * 1024,
              "attention: shared memory");
static_assert(4 * (4 * ATTN_BWD_ROWS * ATTN_LD + ATTN_BWD_ROWS * ATTN_PLD + 2 * ATTN_BWD_ROWS) +
                      8 * (6 * ATTN_BWD_ROWS) <= 48 * 1024,
              "attention_backward_dq: shared memory");
static_assert(4 * (4 * ATTN_BWD_ROWS * ATTN_LD + 2 * ATTN_KEYS * ATTN_PLD + 2 * ATTN_BWD_ROWS) +
                      8 * (6 * ATTN_BWD_ROWS) <= 48 * 1024,
              "attention_backward_dkv: shared memory");

// The stride between a row's elements: 1 in a dense tensor, else the last dimension's.
__device__ __forceinline__ i64 attn_col_stride(const Tensor& t) { return t.dense ? 1 : t.stride[t.rank - 1]; }

// table[r] = the element offset of row first + r of t (rows of n elements) for r < count,
// −1 (read as zeros) for the rest of its `slots`. Element c of row r is then at table[r] +
// c·attn_col_stride(t).
__device__ __forceinline__ void attn_rows_at(i64* table, const Tensor& t, i64 first, i64 count, i64 n, int slots) {
    for (int r = threadIdx.x; r < slots; r += blockDim.x) table[r] = r < count ? offset_of(t, (first + r) * n) : -1;
}

// buf[r·ATTN_LD + c] = element c0 + c of staged row r (r < rows, c < ATTN_CHUNK): 0 past
// the row's n elements and for rows marked −1. Consecutive threads read consecutive
// elements of a row.
__device__ __forceinline__ void attn_stage(float* buf, int rows, const Tensor& t, const i64* table, i64 c0, i64 n) {
    const i64 cs = attn_col_stride(t);
    for (int x = threadIdx.x; x < rows * ATTN_CHUNK; x += blockDim.x) {
        const int r = x / ATTN_CHUNK, c = x % ATTN_CHUNK;
        const i64 at = table[r], col = c0 + c;
        buf[r * ATTN_LD + c] = at >= 0 && col < n ? load_at_f(t, at + col * cs) : 0.0f;
    }
}

// acc[i][j] += Σ_{d < depth} a[r0 + i·rs][d]·b[c0 + 16·j][d]: rows of a against rows of b,
// both staged chunks.
template <int R, int C>
__device__ __forceinline__ void attn_dot_rows(float (&acc)[R][C], const float* a, int r0, int rs, const float* b, int c0,
                                              int depth) {
    for (int d = 0; d < depth; ++d) {
        float x[R], y[C];
#pragma unroll
        for (int i = 0; i < R; ++i) x[i] = a[(r0 + i * rs) * ATTN_LD + d];
#pragma unroll
        for (int j = 0; j < C; ++j) y[j] = b[(c0 + 16 * j) * ATTN_LD + d];
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int j = 0; j < C; ++j) acc[i][j] += x[i] * y[j];
    }
}

// acc[i][j] += Σ_{x < depth} p[r0 + i·rs][x]·b[x][c0 + 16·j]: a tile of P or dS (row stride
// ATTN_PLD) times a staged chunk.
template <int R, int C>
__device__ __forceinline__ void attn_times(float (&acc)[R][C], const float* p, int r0, int rs, const float* b, int c0,
                                           int depth) {
    for (int x = 0; x < depth; ++x) {
        float w[R], y[C];
#pragma unroll
        for (int i = 0; i < R; ++i) w[i] = p[(r0 + i * rs) * ATTN_PLD + x];
#pragma unroll
        for (int j = 0; j < C; ++j) y[j] = b[x * ATTN_LD + c0 + 16 * j];
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int j = 0; j < C; ++j) acc[i][j] += w[i] * y[j];
    }
}

// The maximum and the sum over the 16 threads of a half-warp (one row's threads). Every
// thread gets the same bits (each butterfly step adds the same two values on both sides).
__device__ __forceinline__ float attn_row_max(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float attn_row_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Whether query i sees key j (query i < t and key j < s already known).
__device__ __forceinline__ bool attn_sees(i64 i, i64 j, int causal) { return !causal || j <= i; }

// masked_attention's bias of the score of query row `row` (bh·T + i) and key j: the bias
// viewed broadcast to the scores [..., H, T, S] (zero strides where it broadcasts), read
// at row·S + j; 0 without one.
__device__ __forceinline__ float attn_bias(const Tensor& bias, int has_bias, i64 row, i64 s, i64 j) {
    return has_bias ? load_f(bias, row * s + j) : 0.0f;
}

// dropout_attention's mask (exec/kernels/attention.rs draws the same): the key of
// (seed, stream) as elementwise.cu's dropout makes it, and the factor of the probability
// of query row `row` (bh·T + i) and key j, 1 / (1 − p) where dropout_uniform(key, row·S + j)
// >= p, else 0; 1 without dropout (p = 0, the other attention ops: seed is then any tensor
// and never read).
__device__ __forceinline__ u64 attn_drop_key(const Tensor& seed, i64 stream, double p) {
    return p > 0.0 ? splitmix64(splitmix64((u64)load_index(seed, 0), 0ULL), (u64)stream) : 0ULL;
}

__device__ __forceinline__ float attn_keep(u64 key, double p, i64 row, i64 s, i64 j) {
    if (p == 0.0) return 1.0f;
    return dropout_uniform(key, (u64)(row * s + j)) >= p ? (float)(1.0 / (1.0 - p)) : 0.0f;
}

// p = exp(x − lse) for a score x (scale·q·k plus the bias), 0 where x = −inf (a masked
// key, also in a row with every key masked, whose lse is −inf too).
__device__ __forceinline__ float attn_p(float x, float row_lse) { return x == -f_inf() ? 0.0f : expf(x - row_lse); }

// out[r] = Σ_j p_j·z_j·v[j] / Σ_j p_j (z_j the dropout factor, attn_keep) and lse[r] =
// m + log Σ_j p_j over the keys j row r sees, p_j = exp(scale·q[r]·k[j] − m), m the row's
// largest score. Block (x, y): tiles x, x +
// gridDim.x, ... of ATTN_FWD_ROWS query rows (ceil(T / 64) per head) and the 64 columns of
// out from y·64; block y = 0 writes lse. A row that sees no key gives 0 and −inf.
extern "C" __global__ void attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, i64 rows, i64 group,
                                     i64 t, i64 s, i64 e, i64 ev, int causal, double scale, Tensor bias,
                                     int has_bias, Tensor seed, i64 stream, double drop_p) {
    __shared__ float qs[ATTN_FWD_ROWS * ATTN_LD];
    __shared__ float kvs[ATTN_KEYS * ATTN_LD];  // a chunk of k, then of v
    __shared__ float ps[ATTN_FWD_ROWS * ATTN_PLD];
    __shared__ i64 q_at[ATTN_FWD_ROWS], out_at[ATTN_FWD_ROWS], k_at[ATTN_KEYS], v_at[ATTN_KEYS];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, rs = ATTN_FWD_THREADS / 16;
    const float sc = (float)scale, inf = f_inf();
    const u64 drop_key = attn_drop_key(seed, stream, drop_p);
    const i64 c0 = (i64)blockIdx.y * ATTN_CHUNK;
    const i64 per_head = (t + ATTN_FWD_ROWS - 1) / ATTN_FWD_ROWS, tiles = rows / t * per_head;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 bh = tile / per_head, i0 = tile % per_head * ATTN_FWD_ROWS, kv = bh / group;
        const i64 count = imin(ATTN_FWD_ROWS, t - i0), first = bh * t + i0;
        __syncthreads();  // the previous tile's stores are done with the tables
        attn_rows_at(q_at, q, first, count, e, ATTN_FWD_ROWS);
        attn_rows_at(out_at, out, first, count, ev, ATTN_FWD_ROWS);
        __syncthreads();
        if (e <= ATTN_CHUNK) attn_stage(qs, ATTN_FWD_ROWS, q, q_at, 0, e);  // for every key tile
        float acc[4][4] = {}, m[4], l[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) m[i] = -inf, l[i] = 0.0f;
        // Keys past the tile's last row are above the diagonal for all its rows.
        const i64 keys = causal ? imin(s, i0 + count) : s;
        for (i64 j0 = 0; j0 < keys; j0 += ATTN_KEYS) {
            const i64 kcount = imin(ATTN_KEYS, s - j0);
            attn_rows_at(k_at, k, kv * s + j0, kcount, e, ATTN_KEYS);
            attn_rows_at(v_at, v, kv * s + j0, kcount, ev, ATTN_KEYS);
            __syncthreads();  // also: the previous tile's readers of kvs and ps are done
            float score[4][2] = {};
            for (i64 d0 = 0; d0 < e; d0 += ATTN_CHUNK) {
                if (e > ATTN_CHUNK) attn_stage(qs, ATTN_FWD_ROWS, q, q_at, d0, e);
                attn_stage(kvs, ATTN_KEYS, k, k_at, d0, e);
                __syncthreads();
                attn_dot_rows(score, qs, ty, rs, kvs, tx, (int)imin(ATTN_CHUNK, e - d0));
                __syncthreads();
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = ty + i * rs;
                float top = -inf;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const i64 key = j0 + tx + 16 * j;
                    const bool seen = r < count && key < s && attn_sees(i0 + r, key, causal);
                    score[i][j] = seen ? sc * score[i][j] + attn_bias(bias, has_bias, first + r, s, key) : -inf;
                    top = fmaxf(top, score[i][j]);
                }
                const float m_new = fmaxf(m[i], attn_row_max(top));
                // Nothing seen yet (m_new = −inf): nothing to rescale, every weight 0.
                const float rescale = m_new == -inf ? 1.0f : expf(m[i] - m_new);
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const float p = m_new == -inf ? 0.0f : expf(score[i][j] - m_new);
                    // The sum is of the probabilities before dropout; out weighs the kept.
                    const float kept = p > 0.0f ? p * attn_keep(drop_key, drop_p, first + r, s, j0 + tx + 16 * j) : 0.0f;
                    ps[r * ATTN_PLD + tx + 16 * j] = kept;
                    sum += p;
                }
                l[i] = l[i] * rescale + attn_row_sum(sum);
                m[i] = m_new;
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] *= rescale;
            }
            attn_stage(kvs, ATTN_KEYS, v, v_at, c0, ev);
            __syncthreads();
            attn_times(acc, ps, ty, rs, kvs, tx, (int)kcount);
        }
        const i64 cs = attn_col_stride(out);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = ty + i * rs;
            if (r >= count) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const i64 col = c0 + tx + 16 * j;
                if (col < ev) store_at_f(out, out_at[r] + col * cs, l[i] > 0.0f ? acc[i][j] / l[i] : 0.0f);
            }
            if (blockIdx.y == 0 && tx == 0) store_f(lse, first + r, l[i] > 0.0f ? m[i] + logf(l[i]) : -inf);
        }
    }
}

// dq[r] = scale·Σ_j ds_j·k[j], ds_j = p_j·(z_j·dout[r]·v[j] − D), p_j = exp(scale·q[r]·k[j] −
// lse[r]), D = dout[r]·out[r]; D also goes to deltas[r] (floats in the workspace) for
// attention_backward_dkv, which runs after this kernel. Block (x, y): tiles of ATTN_BWD_ROWS
// query rows and the 64 columns of dq from y·64; block y = 0 writes D.
extern "C" __global__ void attention_backward_dq(Tensor dq, u64 deltas, Tensor dout, Tensor q, Tensor k, Tensor v,
                                                 Tensor out, Tensor lse, i64 rows, i64 group, i64 t, i64 s, i64 e,
                                                 i64 ev, int causal, double scale, Tensor bias, int has_bias,
                                                 Tensor seed, i64 stream, double drop_p) {
    __shared__ float qs[ATTN_BWD_ROWS * ATTN_LD], dos[ATTN_BWD_ROWS * ATTN_LD];
    __shared__ float ks[ATTN_KEYS * ATTN_LD], vs[ATTN_KEYS * ATTN_LD];
    __shared__ float dss[ATTN_BWD_ROWS * ATTN_PLD];
    __shared__ i64 q_at[ATTN_BWD_ROWS], do_at[ATTN_BWD_ROWS], out_at[ATTN_BWD_ROWS], dq_at[ATTN_BWD_ROWS];
    __shared__ i64 k_at[ATTN_KEYS], v_at[ATTN_KEYS];
    __shared__ float row_lse[ATTN_BWD_ROWS], row_d[ATTN_BWD_ROWS];
    float* delta = (float*)deltas;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, rs = ATTN_BWD_THREADS / 16;
    const float sc = (float)scale;
    const u64 drop_key = attn_drop_key(seed, stream, drop_p);
    const i64 c0 = (i64)blockIdx.y * ATTN_CHUNK;
    const i64 per_head = (t + ATTN_BWD_ROWS - 1) / ATTN_BWD_ROWS, tiles = rows / t * per_head;
    const i64 do_cs = attn_col_stride(dout), out_cs = attn_col_stride(out);
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 bh = tile / per_head, i0 = tile % per_head * ATTN_BWD_ROWS, kv = bh / group;
        const i64 count = imin(ATTN_BWD_ROWS, t - i0), first = bh * t + i0;
        __syncthreads();  // the previous tile's stores are done with the tables
        attn_rows_at(q_at, q, first, count, e, ATTN_BWD_ROWS);
        attn_rows_at(do_at, dout, first, count, ev, ATTN_BWD_ROWS);
        attn_rows_at(out_at, out, first, count, ev, ATTN_BWD_ROWS);
        attn_rows_at(dq_at, dq, first, count, e, ATTN_BWD_ROWS);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = ty + i * rs;
            float part = 0.0f;
            if (r < count)
                for (i64 c = tx; c < ev; c += 16)
                    part += load_at_f(dout, do_at[r] + c * do_cs) * load_at_f(out, out_at[r] + c * out_cs);
            const float d = attn_row_sum(part);
            if (tx == 0 && r < count) {
                row_d[r] = d;
                row_lse[r] = load_f(lse, first + r);
                if (blockIdx.y == 0) delta[first + r] = d;
            }
        }
        if (e <= ATTN_CHUNK) attn_stage(qs, ATTN_BWD_ROWS, q, q_at, 0, e);
        if (ev <= ATTN_CHUNK) attn_stage(dos, ATTN_BWD_ROWS, dout, do_at, 0, ev);
        float acc[4][4] = {};
        const i64 keys = causal ? imin(s, i0 + count) : s;
        for (i64 j0 = 0; j0 < keys; j0 += ATTN_KEYS) {
            const i64 kcount = imin(ATTN_KEYS, s - j0);
            attn_rows_at(k_at, k, kv * s + j0, kcount, e, ATTN_KEYS);
            attn_rows_at(v_at, v, kv * s + j0, kcount, ev, ATTN_KEYS);
            __syncthreads();  // also: D, lse and the resident rows are in; the previous tile is done
            float score[4][2] = {}, dp[4][2] = {};
            for (i64 d0 = 0; d0 < e; d0 += ATTN_CHUNK) {
                if (e > ATTN_CHUNK) attn_stage(qs, ATTN_BWD_ROWS, q, q_at, d0, e);
                attn_stage(ks, ATTN_KEYS, k, k_at, d0, e);
                __syncthreads();
                attn_dot_rows(score, qs, ty, rs, ks, tx, (int)imin(ATTN_CHUNK, e - d0));
                __syncthreads();
            }
            for (i64 d0 = 0; d0 < ev; d0 += ATTN_CHUNK) {
                if (ev > ATTN_CHUNK) attn_stage(dos, ATTN_BWD_ROWS, dout, do_at, d0, ev);
                attn_stage(vs, ATTN_KEYS, v, v_at, d0, ev);
                __syncthreads();
                attn_dot_rows(dp, dos, ty, rs, vs, tx, (int)imin(ATTN_CHUNK, ev - d0));
                __syncthreads();
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = ty + i * rs;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const i64 key = j0 + tx + 16 * j;
                    float ds = 0.0f;
                    if (r < count && key < s && attn_sees(i0 + r, key, causal)) {
                        const float x = sc * score[i][j] + attn_bias(bias, has_bias, first + r, s, key);
                        const float z = attn_keep(drop_key, drop_p, first + r, s, key);
                        ds = attn_p(x, row_lse[r]) * (dp[i][j] * z - row_d[r]);
                    }
                    dss[r * ATTN_PLD + tx + 16 * j] = ds;
                }
            }
            // ks holds k's columns 0..64 when E <= 64; else stage this block's columns.
            if (e > ATTN_CHUNK) attn_stage(ks, ATTN_KEYS, k, k_at, c0, e);
            __syncthreads();
            attn_times(acc, dss, ty, rs, ks, tx, (int)kcount);
        }
        const i64 cs = attn_col_stride(dq);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = ty + i * rs;
            if (r >= count) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const i64 col = c0 + tx + 16 * j;
                if (col < e) store_at_f(dq, dq_at[r] + col * cs, sc * acc[i][j]);
            }
        }
    }
}

// dk[key] = scale·Σ ds·q[r] and dv[key] = Σ p·z·dout[r] over the query rows r that see key j
// of key/value head kv (key = kv·S + j): rows i >= j with causal, else all T, of each of
// the group's query heads, head by head, in tiles of 32 rows. p and ds as in
// attention_backward_dq, with D from deltas. Block (x, y): tiles of ATTN_BWD_ROWS keys
// (ceil(S / 32) per key/value head) and the 64 columns of dk and dv from y·64.
extern "C" __global__ void attention_backward_dkv(Tensor dk, Tensor dv, u64 deltas, Tensor dout, Tensor q, Tensor k,
                                                  Tensor v, Tensor lse, i64 keys, i64 group, i64 t, i64 s, i64 e,
                                                  i64 ev, int causal, double scale, Tensor bias, int has_bias,
                                                  Tensor seed, i64 stream, double drop_p) {
    __shared__ float ks[ATTN_BWD_ROWS * ATTN_LD], vs[ATTN_BWD_ROWS * ATTN_LD];
    __shared__ float qs[ATTN_KEYS * ATTN_LD], dos[ATTN_KEYS * ATTN_LD];
    __shared__ float pt[ATTN_BWD_ROWS * ATTN_PLD], dst[ATTN_BWD_ROWS * ATTN_PLD];  // P and dS, key-major
    __shared__ i64 k_at[ATTN_BWD_ROWS], v_at[ATTN_BWD_ROWS], dk_at[ATTN_BWD_ROWS], dv_at[ATTN_BWD_ROWS];
    __shared__ i64 q_at[ATTN_KEYS], do_at[ATTN_KEYS];
    __shared__ float row_lse[ATTN_KEYS], row_d[ATTN_KEYS];
    const float* delta = (const float*)deltas;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, rs = ATTN_BWD_THREADS / 16;
    const float sc = (float)scale;
    const u64 drop_key = attn_drop_key(seed, stream, drop_p);
    const i64 c0 = (i64)blockIdx.y * ATTN_CHUNK;
    const i64 per_head = (s + ATTN_BWD_ROWS - 1) / ATTN_BWD_ROWS, tiles = keys / s * per_head;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 kv = tile / per_head, j0 = tile % per_head * ATTN_BWD_ROWS;
        const i64 kcount = imin(ATTN_BWD_ROWS, s - j0), first_key = kv * s + j0;
        __syncthreads();  // the previous tile's stores are done with the tables
        attn_rows_at(k_at, k, first_key, kcount, e, ATTN_BWD_ROWS);
        attn_rows_at(v_at, v, first_key, kcount, ev, ATTN_BWD_ROWS);
        attn_rows_at(dk_at, dk, first_key, kcount, e, ATTN_BWD_ROWS);
        attn_rows_at(dv_at, dv, first_key, kcount, ev, ATTN_BWD_ROWS);
        __syncthreads();
        if (e <= ATTN_CHUNK) attn_stage(ks, ATTN_BWD_ROWS, k, k_at, 0, e);
        if (ev <= ATTN_CHUNK) attn_stage(vs, ATTN_BWD_ROWS, v, v_at, 0, ev);
        float gk[4][4] = {}, gv[4][4] = {};
        // Query rows before the tile's first key see none of its keys.
        const i64 from = causal ? j0 : 0;
        for (i64 g = 0; g < group; ++g) {
            const i64 bh = kv * group + g;
            for (i64 i0 = from; i0 < t; i0 += ATTN_KEYS) {
                const i64 count = imin(ATTN_KEYS, t - i0), first = bh * t + i0;
                attn_rows_at(q_at, q, first, count, e, ATTN_KEYS);
                attn_rows_at(do_at, dout, first, count, ev, ATTN_KEYS);
                for (int x = threadIdx.x; x < count; x += blockDim.x) {
                    row_lse[x] = load_f(lse, first + x);
                    row_d[x] = delta[first + x];
                }
                __syncthreads();  // also: the resident rows are in; the previous query tile is done
                float score[4][2] = {}, dp[4][2] = {};
                for (i64 d0 = 0; d0 < e; d0 += ATTN_CHUNK) {
                    if (e > ATTN_CHUNK) attn_stage(ks, ATTN_BWD_ROWS, k, k_at, d0, e);
                    attn_stage(qs, ATTN_KEYS, q, q_at, d0, e);
                    __syncthreads();
                    attn_dot_rows(score, ks, ty, rs, qs, tx, (int)imin(ATTN_CHUNK, e - d0));
                    __syncthreads();
                }
                for (i64 d0 = 0; d0 < ev; d0 += ATTN_CHUNK) {
                    if (ev > ATTN_CHUNK) attn_stage(vs, ATTN_BWD_ROWS, v, v_at, d0, ev);
                    attn_stage(dos, ATTN_KEYS, dout, do_at, d0, ev);
                    __syncthreads();
                    attn_dot_rows(dp, vs, ty, rs, dos, tx, (int)imin(ATTN_CHUNK, ev - d0));
                    __syncthreads();
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = ty + i * rs;
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int x = tx + 16 * j;
                        float p = 0.0f, ds = 0.0f;
                        if (r < kcount && x < count && attn_sees(i0 + x, j0 + r, causal)) {
                            const float y = sc * score[i][j] + attn_bias(bias, has_bias, first + x, s, j0 + r);
                            const float z = attn_keep(drop_key, drop_p, first + x, s, j0 + r);
                            p = attn_p(y, row_lse[x]);
                            ds = p * (dp[i][j] * z - row_d[x]);
                            p *= z;
                        }
                        pt[r * ATTN_PLD + x] = p;
                        dst[r * ATTN_PLD + x] = ds;
                    }
                }
                // qs and dos hold columns 0..64 when E (Ev) <= 64; else stage this block's.
                if (e > ATTN_CHUNK && c0 < e) attn_stage(qs, ATTN_KEYS, q, q_at, c0, e);
                if (ev > ATTN_CHUNK && c0 < ev) attn_stage(dos, ATTN_KEYS, dout, do_at, c0, ev);
                __syncthreads();
                if (c0 < ev) attn_times(gv, pt, ty, rs, dos, tx, (int)count);
                if (c0 < e) attn_times(gk, dst, ty, rs, qs, tx, (int)count);
            }
        }
        const i64 k_cs = attn_col_stride(dk), v_cs = attn_col_stride(dv);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = ty + i * rs;
            if (r >= kcount) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const i64 col = c0 + tx + 16 * j;
                if (col < e) store_at_f(dk, dk_at[r] + col * k_cs, sc * gk[i][j]);
                if (col < ev) store_at_f(dv, dv_at[r] + col * v_cs, gv[i][j]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tensor-core attention: f16 and bf16 operands through mma.sync (m16n8k16, float
// accumulators), FlashAttention-2's algorithm and tiles. Used when q, k and v are all f16
// or all bf16 and E = Ev is a multiple of 16 up to TC_E (lower.rs decides); the kernels
// above take every other case and are the reference these follow line for line.
//
// A block is TC_THREADS = 4 warps; each warp owns 16 rows of the block's 64 (query rows in
// `attention_tc` and `attention_backward_dq_tc`, keys in `attention_backward_dkv_tc`) and
// walks tiles of 64 partners (keys, or query rows), staged in shared memory as the raw
// 16-bit values, rows padded to TC_LD halves so that every fragment load below is free of
// bank conflicts. A warp's products are mma tiles: scores S (16 × 64) as 8 accumulator
// tiles of 16 × 8; the softmax runs on the accumulators in registers (a row's 64 scores
// are spread over the 4 threads of a quad: 16 each, reduced with two shuffles); P (and dS)
// go straight from the accumulator layout into the operand layout of the next product
// (the accumulator of keys 16·kk .. 16·kk + 15 is the A operand of step kk), rounded to
// the operand dtype as FlashAttention does; nothing of S or P touches shared memory.
// Everything else is float: the online softmax, D, l, lse, every accumulator.
//
// Fragments (PTX ISA, mma.m16n8k16 with .f16/.bf16): lane = 4·g + q (g = lane / 4, q =
// lane % 4). A (16 × 16, row-major): a0 = (g, 2q..2q+1), a1 = (g + 8, 2q..), a2 = (g, 2q +
// 8..), a3 = (g + 8, 2q + 8..), two 16-bit values per register, the lower column in the
// low half. B (16 × 8): b0 = (k = 2q..2q+1, n = g), b1 = (k = 2q + 8.., n = g). C/D (16 × 8,
// float): c0, c1 = (g, 2q), (g, 2q + 1); c2, c3 = (g + 8, 2q), (g + 8, 2q + 1).

// TC_ROWS (from source.rs): rows a block owns (16 per warp): query rows, or keys in dk/dv
#define TC_TILE 64      // partners per tile: keys, or query rows in dk/dv
// TC_THREADS (from source.rs): 4 warps
// TC_E (from source.rs): the largest E (= Ev) of this path, a multiple of 16
#define TC_LD 72        // row stride of a staged tile, in 16-bit values (TC_E + 8)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static_assert(TC_ROWS == 16 * (TC_THREADS / 32), "a warp owns 16 rows");
static_assert(TC_LD * 2 % 16 == 0 && TC_E % 8 == 0, "staged rows move in 16-byte pieces");
static_assert(2 * 5 * TC_TILE * TC_LD + 8 * (2 * TC_ROWS + 4 * TC_TILE) <= 48 * 1024, "attention_tc: shared memory");
static_assert(2 * 4 * TC_TILE * TC_LD + 8 * 6 * TC_ROWS + 4 * 2 * TC_TILE <= 48 * 1024,
              "tensor-core attention: shared memory");

// d += a·b, one m16n8k16 product of the warp (every lane calls it; dtype is DT_F16 or
// DT_BF16, uniform).
__device__ __forceinline__ void tc_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], int dtype) {
#ifdef __CUDA_ARCH__
    if (dtype == DT_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    emu_mma16816(d, a, b, dtype == DT_BF16);
#endif
}

// Two floats as the operand dtype's pair (lo in the low half), rounded to nearest even.
__device__ __forceinline__ unsigned tc_pack(float lo, float hi, int dtype) {
    if (dtype == DT_BF16) return (unsigned)float_to_bf16(lo) | ((unsigned)float_to_bf16(hi) << 16);
    return (unsigned)float_to_f16(lo) | ((unsigned)float_to_f16(hi) << 16);
}

// The raw 16-bit pair at (r, c) of a staged tile (c even, so 4-byte aligned: tiles are
// declared __align__(16) and rows are 144 bytes), the lower column in the low half.
__device__ __forceinline__ unsigned tc_pair(const unsigned short* buf, int r, int c) {
#ifdef __CUDA_ARCH__
    return *(const unsigned*)(buf + r * TC_LD + c);
#else
    const unsigned short* p = buf + r * TC_LD + c;
    return (unsigned)p[0] | ((unsigned)p[1] << 16);
#endif
}

// The A operand rows r0.., columns c0.. of a staged tile.
__device__ __forceinline__ void tc_frag_a(unsigned (&a)[4], const unsigned short* buf, int r0, int c0) {
    const int g = (threadIdx.x % 32) / 4, q = threadIdx.x % 4;
    a[0] = tc_pair(buf, r0 + g, c0 + 2 * q);
    a[1] = tc_pair(buf, r0 + g + 8, c0 + 2 * q);
    a[2] = tc_pair(buf, r0 + g, c0 + 2 * q + 8);
    a[3] = tc_pair(buf, r0 + g + 8, c0 + 2 * q + 8);
}

// The B operand B[k][n] = buf[n0 + n][k0 + k]: a tile's rows are B's columns (Kᵀ from K).
__device__ __forceinline__ void tc_frag_bt(unsigned (&b)[2], const unsigned short* buf, int n0, int k0) {
    const int g = (threadIdx.x % 32) / 4, q = threadIdx.x % 4;
    b[0] = tc_pair(buf, n0 + g, k0 + 2 * q);
    b[1] = tc_pair(buf, n0 + g, k0 + 2 * q + 8);
}

// The B operand B[k][n] = buf[k0 + k][n0 + n]: a tile as it is (V in P·V).
__device__ __forceinline__ void tc_frag_b(unsigned (&b)[2], const unsigned short* buf, int k0, int n0) {
    const int g = (threadIdx.x % 32) / 4, q = threadIdx.x % 4;
    const unsigned short* p = buf + (k0 + 2 * q) * TC_LD + n0 + g;
    b[0] = (unsigned)p[0] | ((unsigned)p[TC_LD] << 16);
    b[1] = (unsigned)p[8 * TC_LD] | ((unsigned)p[9 * TC_LD] << 16);
}

// Copies of 16 bytes from global to shared memory that complete in the background
// (cp.async, sm_80 and later): `tc_copy_commit` closes a group of them, `tc_copy_wait<N>`
// waits until at most N of this thread's groups are still in flight (a barrier after it
// makes every thread's copies visible). The emulator copies at once.
__device__ __forceinline__ void tc_copy16_async(void* to_shared, const void* from_global) {
#ifdef __CUDA_ARCH__
    const unsigned to = (unsigned)__cvta_generic_to_shared(to_shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(from_global) : "memory");
#else
    *(Words16*)to_shared = *(const Words16*)from_global;
#endif
}

__device__ __forceinline__ void tc_copy_commit() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;" ::: "memory");
#else
    // The emulator's copies are done at once: no group to close.
#endif
}

template <int N>
__device__ __forceinline__ void tc_copy_wait() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#else
    // Nothing is in flight in the emulator.
#endif
}

// buf[r][c] = the raw 16-bit element c of staged row r (rows from `table`, −1 for none),
// zeros past the row's n elements and for missing rows. Eight columns at a time: one
// 16-byte copy where the row's columns are contiguous and the eight lie in the row at a
// 16-byte aligned address (a head dim that is a multiple of 8 in a dense layout: every
// chunk; rows are 144 bytes and tiles 16-byte aligned, so the store is too), else element
// by element straight into shared memory (no local array: the callers' registers are full).
// ASYNC: the 16-byte pieces go by tc_copy16_async (the caller commits, and waits before
// reading); else they are copied at once.
template <bool ASYNC>
__device__ __forceinline__ void tc_stage(unsigned short* buf, const Tensor& t, const i64* table, i64 n) {
    const i64 cs = attn_col_stride(t);
    const unsigned short* src = (const unsigned short*)t.ptr;
    for (int x = threadIdx.x; x < TC_TILE * (TC_E / 8); x += blockDim.x) {
        const int r = x / (TC_E / 8), c = x % (TC_E / 8) * 8;
        const i64 at = table[r], o = at + c * cs;
        unsigned short* to = buf + r * TC_LD + c;
        if (at >= 0 && cs == 1 && c + 8 <= n && (t.ptr + 2 * (u64)o) % 16 == 0) {
            if (ASYNC) {
                tc_copy16_async(to, src + o);
            } else {
                *(Words16*)to = *(const Words16*)(src + o);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) to[j] = at >= 0 && c + j < n ? src[o + j * cs] : (unsigned short)0;
        }
    }
}

// The A operand of keys 16·kk .. 16·kk + 15 from a 16 × 64 accumulator (P or dS).
__device__ __forceinline__ void tc_acc_as_a(unsigned (&a)[4], const float (&acc)[8][4], int kk, int dtype) {
    a[0] = tc_pack(acc[2 * kk][0], acc[2 * kk][1], dtype);
    a[1] = tc_pack(acc[2 * kk][2], acc[2 * kk][3], dtype);
    a[2] = tc_pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1], dtype);
    a[3] = tc_pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3], dtype);
}

// The maximum and the sum over the 4 threads of a quad (one row's threads).
__device__ __forceinline__ float tc_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float tc_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// attention (above) on tensor cores. Block x: tiles x, x + gridDim.x, ... of TC_ROWS query
// rows (ceil(T / 64) per head); warp w its rows 16·w ..; scores in log2 units (scale·log2 e
// folded in, exp2 for exp).
extern "C" __global__ void __launch_bounds__(TC_THREADS) attention_tc(Tensor out, Tensor lse, Tensor q, Tensor k,
                                                                       Tensor v, i64 rows, i64 group, i64 t, i64 s,
                                                                       i64 e, i64 ev, int causal, double scale) {
    // Two buffers of key and value rows: the next tile's arrive while this one is used.
    __shared__ __align__(16) unsigned short qs[TC_ROWS * TC_LD], ks[2][TC_TILE * TC_LD], vs[2][TC_TILE * TC_LD];
    __shared__ i64 q_at[TC_ROWS], out_at[TC_ROWS], k_at[2][TC_TILE], v_at[2][TC_TILE];
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, lq = threadIdx.x % 4;
    const int dtype = q.dtype, steps = (int)(e / 16), vtiles = (int)(ev / 8);
    const float sl2 = (float)scale * LOG2E, inf = f_inf();
    const i64 per_head = (t + TC_ROWS - 1) / TC_ROWS, tiles = rows / t * per_head;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 bh = tile / per_head, i0 = tile % per_head * TC_ROWS, kv = bh / group;
        const i64 count = imin(TC_ROWS, t - i0), first = bh * t + i0;
        __syncthreads();  // the previous tile is done with the tables and the staged rows
        attn_rows_at(q_at, q, first, count, e, TC_ROWS);
        attn_rows_at(out_at, out, first, count, ev, TC_ROWS);
        __syncthreads();
        tc_stage<false>(qs, q, q_at, e);
        __syncthreads();
        unsigned qa[TC_E / 16][4];
#pragma unroll
        for (int kk = 0; kk < TC_E / 16; ++kk)
            if (kk < steps) tc_frag_a(qa[kk], qs, 16 * warp, 16 * kk);
        float o[TC_E / 8][4] = {}, m[2] = {-inf, -inf}, l[2] = {0.0f, 0.0f};
        const i64 keys = causal ? imin(s, i0 + count) : s;
        // Key tile n's rows are sent (cp.async) right after tile n − 1's first barrier, into
        // the buffer tile n − 2 used, and arrive while tile n − 1's math runs.
        // Tables and buffers alternate: a table is written a tile before it is used, after
        // the barrier that ended the reading of the tile two before.
        attn_rows_at(k_at[0], k, kv * s, imin(TC_TILE, s), e, TC_TILE);
        attn_rows_at(v_at[0], v, kv * s, imin(TC_TILE, s), ev, TC_TILE);
        __syncthreads();
        tc_stage<true>(ks[0], k, k_at[0], e);
        tc_stage<true>(vs[0], v, v_at[0], ev);
        tc_copy_commit();
        for (i64 j0 = 0; j0 < keys; j0 += TC_TILE) {
            const int buf = (int)(j0 / TC_TILE % 2);
            const unsigned short *kb = ks[buf], *vb = vs[buf];
            const i64 j1 = j0 + TC_TILE;
            if (j1 < keys) {
                attn_rows_at(k_at[buf ^ 1], k, kv * s + j1, imin(TC_TILE, s - j1), e, TC_TILE);
                attn_rows_at(v_at[buf ^ 1], v, kv * s + j1, imin(TC_TILE, s - j1), ev, TC_TILE);
            }
            tc_copy_wait<0>();  // this tile's rows are in (this thread's pieces)
            __syncthreads();    // everyone's, and the next tile's tables
            if (j1 < keys) {
                tc_stage<true>(ks[buf ^ 1], k, k_at[buf ^ 1], e);
                tc_stage<true>(vs[buf ^ 1], v, v_at[buf ^ 1], ev);
                tc_copy_commit();
            }
            float sc[8][4] = {};
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int kk = 0; kk < TC_E / 16; ++kk)
                    if (kk < steps) {
                        unsigned b[2];
                        tc_frag_bt(b, kb, 8 * nt, 16 * kk);
                        tc_mma(sc[nt], qa[kk], b, dtype);
                    }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = 16 * warp + g + 8 * h;
                float top = -inf;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const i64 key = j0 + 8 * nt + 2 * lq + c;
                        const bool seen = r < count && key < s && attn_sees(i0 + r, key, causal);
                        const float x = seen ? sl2 * sc[nt][2 * h + c] : -inf;
                        sc[nt][2 * h + c] = x;
                        top = fmaxf(top, x);
                    }
                const float m_new = fmaxf(m[h], tc_quad_max(top));
                // Nothing seen yet (m_new = −inf): nothing to rescale, every weight 0.
                const float rescale = m_new == -inf ? 1.0f : exp2f(m[h] - m_new);
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const float p = m_new == -inf ? 0.0f : exp2f(sc[nt][2 * h + c] - m_new);
                        sc[nt][2 * h + c] = p;
                        sum += p;
                    }
                l[h] = l[h] * rescale + tc_quad_sum(sum);
                m[h] = m_new;
#pragma unroll
                for (int nt = 0; nt < TC_E / 8; ++nt) o[nt][2 * h] *= rescale, o[nt][2 * h + 1] *= rescale;
            }
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                unsigned a[4];
                tc_acc_as_a(a, sc, kk, dtype);
#pragma unroll
                for (int nt = 0; nt < TC_E / 8; ++nt)
                    if (nt < vtiles) {
                        unsigned b[2];
                        tc_frag_b(b, vb, 16 * kk, 8 * nt);
                        tc_mma(o[nt], a, b, dtype);
                    }
            }
            __syncthreads();  // every thread is done with this buffer before it is sent again
        }
        const i64 cs = attn_col_stride(out);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = 16 * warp + g + 8 * h;
            if (r >= count) continue;
            const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
#pragma unroll
            for (int nt = 0; nt < TC_E / 8; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c)
                    if (nt < vtiles) store_at_f(out, out_at[r] + (8 * nt + 2 * lq + c) * cs, o[nt][2 * h + c] * inv);
            if (lq == 0) store_f(lse, first + r, l[h] > 0.0f ? m[h] * LN2 + logf(l[h]) : -inf);
        }
    }
}

// attention_backward_dq (above) on tensor cores: per tile of TC_ROWS query rows, D (into
// deltas too), then over the key tiles S = q·kᵀ, dP = dout·vᵀ, dS = P ∘ (dP − D) and dq +=
// dS·k; dq = scale·dq.
extern "C" __global__ void __launch_bounds__(TC_THREADS)
    attention_backward_dq_tc(Tensor dq, u64 deltas, Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,
                             i64 rows, i64 group, i64 t, i64 s, i64 e, i64 ev, int causal, double scale) {
    // Two buffers of key and value rows (the next tile's arrive while this one is used);
    // q's and dout's rows are staged in the second before the first key tile needs it (their
    // fragments then live in registers).
    __shared__ __align__(16) unsigned short ks[2][TC_TILE * TC_LD], vs[2][TC_TILE * TC_LD];
    unsigned short *qs = ks[1], *dos = vs[1];
    __shared__ i64 q_at[TC_ROWS], do_at[TC_ROWS], out_at[TC_ROWS], dq_at[TC_ROWS], k_at[2][TC_TILE], v_at[2][TC_TILE];
    __shared__ float row_lse[TC_ROWS], row_d[TC_ROWS];
    float* delta = (float*)deltas;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, lq = lane % 4;
    const int dtype = q.dtype, steps = (int)(e / 16), etiles = (int)(e / 8);
    const float sl2 = (float)scale * LOG2E;
    const i64 per_head = (t + TC_ROWS - 1) / TC_ROWS, tiles = rows / t * per_head;
    const i64 do_cs = attn_col_stride(dout), out_cs = attn_col_stride(out);
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 bh = tile / per_head, i0 = tile % per_head * TC_ROWS, kv = bh / group;
        const i64 count = imin(TC_ROWS, t - i0), first = bh * t + i0;
        __syncthreads();  // the previous tile is done with the tables and the staged rows
        attn_rows_at(q_at, q, first, count, e, TC_ROWS);
        attn_rows_at(do_at, dout, first, count, ev, TC_ROWS);
        attn_rows_at(out_at, out, first, count, ev, TC_ROWS);
        attn_rows_at(dq_at, dq, first, count, e, TC_ROWS);
        __syncthreads();
        // D = dout·out of each of the warp's rows: lanes over the columns, then the warp.
        for (int i = 0; i < 16; ++i) {
            const int r = 16 * warp + i;
            float part = 0.0f;
            if (r < count)
                for (i64 c = lane; c < ev; c += 32)
                    part += load_at_f(dout, do_at[r] + c * do_cs) * load_at_f(out, out_at[r] + c * out_cs);
            for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
            if (lane == 0 && r < count) {
                row_d[r] = part;
                row_lse[r] = load_f(lse, first + r) * LOG2E;
                delta[first + r] = part;
            }
        }
        tc_stage<false>(qs, q, q_at, e);
        tc_stage<false>(dos, dout, do_at, ev);
        attn_rows_at(k_at[0], k, kv * s, imin(TC_TILE, s), e, TC_TILE);
        attn_rows_at(v_at[0], v, kv * s, imin(TC_TILE, s), ev, TC_TILE);
        __syncthreads();
        // Key tile 0 goes to the first buffers while the fragments are read from the second.
        tc_stage<true>(ks[0], k, k_at[0], e);
        tc_stage<true>(vs[0], v, v_at[0], ev);
        tc_copy_commit();
        unsigned qa[TC_E / 16][4], da[TC_E / 16][4];
#pragma unroll
        for (int kk = 0; kk < TC_E / 16; ++kk)
            if (kk < steps) {
                tc_frag_a(qa[kk], qs, 16 * warp, 16 * kk);
                tc_frag_a(da[kk], dos, 16 * warp, 16 * kk);
            }
        float acc[TC_E / 8][4] = {};
        const i64 keys = causal ? imin(s, i0 + count) : s;
        // As in attention_tc: tile n + 1 is sent after tile n's first barrier (which also
        // ends the reading of q's and dout's rows out of the second buffers).
        for (i64 j0 = 0; j0 < keys; j0 += TC_TILE) {
            const int buf = (int)(j0 / TC_TILE % 2);
            const unsigned short *kb = ks[buf], *vb = vs[buf];
            const i64 j1 = j0 + TC_TILE;
            if (j1 < keys) {
                attn_rows_at(k_at[buf ^ 1], k, kv * s + j1, imin(TC_TILE, s - j1), e, TC_TILE);
                attn_rows_at(v_at[buf ^ 1], v, kv * s + j1, imin(TC_TILE, s - j1), ev, TC_TILE);
            }
            tc_copy_wait<0>();
            __syncthreads();
            if (j1 < keys) {
                tc_stage<true>(ks[buf ^ 1], k, k_at[buf ^ 1], e);
                tc_stage<true>(vs[buf ^ 1], v, v_at[buf ^ 1], ev);
                tc_copy_commit();
            }
            float sc[8][4] = {}, dp[8][4] = {};
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int kk = 0; kk < TC_E / 16; ++kk)
                    if (kk < steps) {
                        unsigned b[2];
                        tc_frag_bt(b, kb, 8 * nt, 16 * kk);
                        tc_mma(sc[nt], qa[kk], b, dtype);
                        tc_frag_bt(b, vb, 8 * nt, 16 * kk);
                        tc_mma(dp[nt], da[kk], b, dtype);
                    }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = 16 * warp + g + 8 * h;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const i64 key = j0 + 8 * nt + 2 * lq + c;
                        float ds = 0.0f;
                        if (r < count && key < s && attn_sees(i0 + r, key, causal)) {
                            const float p = exp2f(sl2 * sc[nt][2 * h + c] - row_lse[r]);
                            ds = p * (dp[nt][2 * h + c] - row_d[r]);
                        }
                        sc[nt][2 * h + c] = ds;
                    }
            }
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                unsigned a[4];
                tc_acc_as_a(a, sc, kk, dtype);
#pragma unroll
                for (int nt = 0; nt < TC_E / 8; ++nt)
                    if (nt < etiles) {
                        unsigned b[2];
                        tc_frag_b(b, kb, 16 * kk, 8 * nt);
                        tc_mma(acc[nt], a, b, dtype);
                    }
            }
            __syncthreads();  // every thread is done with this buffer before it is sent again
        }
        const float scl = (float)scale;
        const i64 cs = attn_col_stride(dq);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = 16 * warp + g + 8 * h;
            if (r >= count) continue;
#pragma unroll
            for (int nt = 0; nt < TC_E / 8; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c)
                    if (nt < etiles) store_at_f(dq, dq_at[r] + (8 * nt + 2 * lq + c) * cs, scl * acc[nt][2 * h + c]);
        }
    }
}

// attention_backward_dkv (above) on tensor cores: per tile of TC_ROWS keys of one
// key/value head, over the tiles of TC_TILE query rows of each query head of its group
// (head by head, in order): Sᵀ = k·qᵀ, dPᵀ = v·doutᵀ, Pᵀ and dSᵀ from lse and D (deltas,
// written by attention_backward_dq_tc, which runs first), dv += Pᵀ·dout, dk += dSᵀ·q; dk =
// scale·dk.
extern "C" __global__ void __launch_bounds__(TC_THREADS)
    attention_backward_dkv_tc(Tensor dk, Tensor dv, u64 deltas, Tensor dout, Tensor q, Tensor k, Tensor v,
                              Tensor lse, i64 keys, i64 group, i64 t, i64 s, i64 e, i64 ev, int causal,
                              double scale) {
    // Two buffers of query and dout rows (the next query tile's arrive while this one is
    // used); the block's key and value rows are staged in the second before the first query
    // tile needs it (their fragments then live in registers).
    static_assert(TC_ROWS == TC_TILE, "key tiles and query tiles share buffers");
    __shared__ __align__(16) unsigned short qs[2][TC_TILE * TC_LD], dos[2][TC_TILE * TC_LD];
    unsigned short *ks = qs[1], *vs = dos[1];
    __shared__ i64 k_at[TC_ROWS], v_at[TC_ROWS], dk_at[TC_ROWS], dv_at[TC_ROWS], q_at[2][TC_TILE], do_at[2][TC_TILE];
    __shared__ float row_lse[2][TC_TILE], row_d[2][TC_TILE];
    const float* delta = (const float*)deltas;
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, lq = threadIdx.x % 4;
    const int dtype = q.dtype, steps = (int)(e / 16), etiles = (int)(e / 8), vtiles = (int)(ev / 8);
    const float sl2 = (float)scale * LOG2E;
    const i64 per_head = (s + TC_ROWS - 1) / TC_ROWS, tiles = keys / s * per_head;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 kv = tile / per_head, j0 = tile % per_head * TC_ROWS;
        const i64 kcount = imin(TC_ROWS, s - j0), first_key = kv * s + j0;
        __syncthreads();  // the previous tile is done with the tables and the staged rows
        attn_rows_at(k_at, k, first_key, kcount, e, TC_ROWS);
        attn_rows_at(v_at, v, first_key, kcount, ev, TC_ROWS);
        attn_rows_at(dk_at, dk, first_key, kcount, e, TC_ROWS);
        attn_rows_at(dv_at, dv, first_key, kcount, ev, TC_ROWS);
        __syncthreads();
        tc_stage<false>(ks, k, k_at, e);
        tc_stage<false>(vs, v, v_at, ev);
        __syncthreads();
        unsigned ka[TC_E / 16][4], va[TC_E / 16][4];
#pragma unroll
        for (int kk = 0; kk < TC_E / 16; ++kk)
            if (kk < steps) {
                tc_frag_a(ka[kk], ks, 16 * warp, 16 * kk);
                tc_frag_a(va[kk], vs, 16 * warp, 16 * kk);
            }
        float gk[TC_E / 8][4] = {}, gv[TC_E / 8][4] = {};
        // Query rows before the tile's first key see none of its keys.
        const i64 from = causal ? j0 : 0;
        // Query tiles in order, head by head of the group: per = tiles per head.
        const i64 per = from < t ? (t - from + TC_TILE - 1) / TC_TILE : 0, qtiles = group * per;
        // Tile n's tables, lse and D into slot `slot` (read after a barrier).
        auto tile_rows = [&](i64 n, int slot) {
            const i64 i0 = from + n % per * TC_TILE, count = imin(TC_TILE, t - i0);
            const i64 first = (kv * group + n / per) * t + i0;
            attn_rows_at(q_at[slot], q, first, count, e, TC_TILE);
            attn_rows_at(do_at[slot], dout, first, count, ev, TC_TILE);
            for (int x = threadIdx.x; x < count; x += blockDim.x) {
                row_lse[slot][x] = load_f(lse, first + x) * LOG2E;
                row_d[slot][x] = delta[first + x];
            }
        };
        // As in attention_tc: tile n + 1 is sent after tile n's first barrier (which also
        // ends the reading of the key and value rows out of the second buffers).
        if (qtiles > 0) tile_rows(0, 0);
        __syncthreads();
        if (qtiles > 0) {
            tc_stage<true>(qs[0], q, q_at[0], e);
            tc_stage<true>(dos[0], dout, do_at[0], ev);
            tc_copy_commit();
        }
        for (i64 n = 0; n < qtiles; ++n) {
            const int slot = (int)(n % 2);
            const i64 i0 = from + n % per * TC_TILE, count = imin(TC_TILE, t - i0);
            const unsigned short *qb = qs[slot], *dob = dos[slot];
            const float *lse_b = row_lse[slot], *d_b = row_d[slot];
            if (n + 1 < qtiles) tile_rows(n + 1, slot ^ 1);
            tc_copy_wait<0>();
            __syncthreads();
            if (n + 1 < qtiles) {
                tc_stage<true>(qs[slot ^ 1], q, q_at[slot ^ 1], e);
                tc_stage<true>(dos[slot ^ 1], dout, do_at[slot ^ 1], ev);
                tc_copy_commit();
            }
            {
                float st[8][4] = {}, dpt[8][4] = {};
#pragma unroll
                for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                    for (int kk = 0; kk < TC_E / 16; ++kk)
                        if (kk < steps) {
                            unsigned b[2];
                            tc_frag_bt(b, qb, 8 * nt, 16 * kk);
                            tc_mma(st[nt], ka[kk], b, dtype);
                            tc_frag_bt(b, dob, 8 * nt, 16 * kk);
                            tc_mma(dpt[nt], va[kk], b, dtype);
                        }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = 16 * warp + g + 8 * h;
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            const int x = 8 * nt + 2 * lq + c;
                            float p = 0.0f, ds = 0.0f;
                            if (r < kcount && x < count && attn_sees(i0 + x, j0 + r, causal)) {
                                p = exp2f(sl2 * st[nt][2 * h + c] - lse_b[x]);
                                ds = p * (dpt[nt][2 * h + c] - d_b[x]);
                            }
                            st[nt][2 * h + c] = p;
                            dpt[nt][2 * h + c] = ds;
                        }
                }
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    unsigned pa[4], sa[4];
                    tc_acc_as_a(pa, st, kk, dtype);
                    tc_acc_as_a(sa, dpt, kk, dtype);
#pragma unroll
                    for (int nt = 0; nt < TC_E / 8; ++nt) {
                        unsigned b[2];
                        if (nt < vtiles) {
                            tc_frag_b(b, dob, 16 * kk, 8 * nt);
                            tc_mma(gv[nt], pa, b, dtype);
                        }
                        if (nt < etiles) {
                            tc_frag_b(b, qb, 16 * kk, 8 * nt);
                            tc_mma(gk[nt], sa, b, dtype);
                        }
                    }
                }
            }
            __syncthreads();  // every thread is done with this slot before it is filled again
        }
        const float scl = (float)scale;
        const i64 k_cs = attn_col_stride(dk), v_cs = attn_col_stride(dv);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = 16 * warp + g + 8 * h;
            if (r >= kcount) continue;
#pragma unroll
            for (int nt = 0; nt < TC_E / 8; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const i64 col = 8 * nt + 2 * lq + c;
                    if (nt < etiles) store_at_f(dk, dk_at[r] + col * k_cs, scl * gk[nt][2 * h + c]);
                    if (nt < vtiles) store_at_f(dv, dv_at[r] + col * v_cs, gv[nt][2 * h + c]);
                }
        }
    }
}

// attention_bias_backward: dbias = the scores' gradient ds = p·(z·dout[r]·v[j] − D[r]) (z
// the dropout factor, 1 without dropout; the
// bias is added to the scores) summed over the dimensions the bias broadcasts. `dbias` is
// viewed broadcast to the scores [..., H, T, S] (zero strides where the bias broadcasts,
// the others its own dense strides, decreasing): thread by thread over its n elements
// (offset o), the score dimensions with a stride are fixed by o, the others summed over,
// in order. Each score recomputes its dot products (E and Ev terms, D Ev more): no T×S
// buffer, no atomics, runs repeat bit for bit. A row with every key masked passes nothing.
extern "C" __global__ void attention_bias_backward(Tensor dbias, Tensor bias, Tensor dout, Tensor q, Tensor k, Tensor v,
                                                   Tensor out, Tensor lse, i64 n, i64 group, i64 t, i64 s, i64 e,
                                                   i64 ev, int causal, double scale, Tensor seed, i64 stream,
                                                   double drop_p) {
    const int rank = dbias.rank;
    const float sc = (float)scale;
    const u64 drop_key = attn_drop_key(seed, stream, drop_p);
    const i64 q_cs = attn_col_stride(q), k_cs = attn_col_stride(k), v_cs = attn_col_stride(v);
    const i64 do_cs = attn_col_stride(dout), out_cs = attn_col_stride(out);
    GRID_STRIDE(o, n) {
        i64 fixed[MAX_RANK], free_n = 1, rest = o;
        for (int d = 0; d < rank; ++d) {
            const i64 st = dbias.stride[d];
            fixed[d] = st != 0 ? rest / st : 0;
            if (st != 0) rest %= st;
            else free_n *= dbias.shape[d];
        }
        float acc = 0.0f;
        for (i64 c = 0; c < free_n; ++c) {
            i64 idx[MAX_RANK], left = c;
            for (int d = rank - 1; d >= 0; --d) {
                if (dbias.stride[d] != 0) {
                    idx[d] = fixed[d];
                } else {
                    idx[d] = left % dbias.shape[d];
                    left /= dbias.shape[d];
                }
            }
            i64 bh = 0;
            for (int d = 0; d < rank - 2; ++d) bh = bh * dbias.shape[d] + idx[d];
            const i64 i = idx[rank - 2], j = idx[rank - 1], row = bh * t + i, key = bh / group * s + j;
            if (!attn_sees(i, j, causal)) continue;
            const i64 q_at = offset_of(q, row * e), k_at = offset_of(k, key * e);
            const i64 v_at = offset_of(v, key * ev), do_at = offset_of(dout, row * ev);
            const i64 out_at = offset_of(out, row * ev);
            float qk = 0.0f, dp = 0.0f, dd = 0.0f;
            for (i64 x = 0; x < e; ++x) qk += load_at_f(q, q_at + x * q_cs) * load_at_f(k, k_at + x * k_cs);
            for (i64 x = 0; x < ev; ++x) {
                const float g = load_at_f(dout, do_at + x * do_cs);
                dp += g * load_at_f(v, v_at + x * v_cs);
                dd += g * load_at_f(out, out_at + x * out_cs);
            }
            const float p = attn_p(sc * qk + load_f(bias, row * s + j), load_f(lse, row));
            acc += p * (dp * attn_keep(drop_key, drop_p, row, s, j) - dd);
        }
        store_at_f(dbias, o, acc);
    }
}
