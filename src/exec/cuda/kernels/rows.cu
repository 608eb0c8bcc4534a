// rows.cu — ops that work line by line: softmax (along any axis), layer_norm, rms_norm,
// cross_entropy and their gradients, and embeddings.
//
// A line is one block (the host picks blockDim.x, a multiple of 32, to cover it; blocks loop
// over lines). Its reductions are block reductions, so the whole block has read
// the line before any thread writes: an output over its input's bytes (softmax,
// softmax_backward, layer_norm_backward's and rms_norm_backward's dx,
// cross_entropy_backward) is safe, every element being read and then written by the same
// thread.
//
// Cross-row sums (layer_norm's dgamma/dbeta, the mean of cross-entropy) go through scratch
// in the workspace: per-row statistics, then partial sums per group of rows, then a final
// pass adding the partials in a fixed order (deterministic, with no atomic operations).
//
// Softmax and cross-entropy compute in float. Layer norm computes in double: its gradient
// subtracts nearly equal terms (dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) cancels almost
// entirely when a row's variance is small against eps), so float statistics would leave
// errors of float's epsilon times var/eps there. RMS norm, whose gradient subtracts alike,
// computes in double too.

// The maximum of the n elements base + i·stride of x and Σ exp(element − maximum), for the
// whole block (softmax and cross-entropy).
__device__ __forceinline__ void line_max_and_sum(const Tensor& x, i64 base, i64 n, i64 stride, float* mx,
                                                 float* total) {
    float m = -f_inf();
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, load_f(x, base + i * stride));
    m = block_max(m);
    float t = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) t += expf(load_f(x, base + i * stride) - m);
    *mx = m;
    *total = block_sum(t);
}

// Softmax of x viewed as [lines / inner, n, inner] along the middle axis: line l covers
// elements (l / inner)·n·inner + l % inner + i·inner, i < n.
extern "C" __global__ void softmax(Tensor y, Tensor x, i64 lines, i64 n, i64 inner) {
    for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
        const i64 base = (line / inner) * n * inner + line % inner;
        float mx, total;
        line_max_and_sum(x, base, n, inner, &mx, &total);
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const i64 k = base + i * inner;
            store_f(y, k, expf(load_f(x, k) - mx) / total);
        }
    }
}

// Running sums of x viewed as [lines / inner, n, inner] along the middle axis, from the
// line's first element (its last with `reverse`), in double (exact for i32 and i64
// positions). Thread 0 walks the line in order, reading each element before writing it:
// safe over x's own bytes.
extern "C" __global__ void cumsum(Tensor y, Tensor x, i64 lines, i64 n, i64 inner, int reverse) {
    for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
        if (threadIdx.x != 0) continue;
        const i64 base = (line / inner) * n * inner + line % inner;
        double total = 0.0;
        for (i64 step = 0; step < n; ++step) {
            const i64 k = base + (reverse ? n - 1 - step : step) * inner;
            total += load_d(x, k);
            store_d(y, k, total);
        }
    }
}

// argmax: y[line] = the position of the largest element of x's line along the axis (x is
// [outer, n, inner] around it, a line each (o, j)), the first on ties, a NaN counting as
// larger than every number, as PyTorch's argmax. One thread a line.
extern "C" __global__ void argmax(Tensor y, Tensor x, i64 lines, i64 n, i64 inner) {
    GRID_STRIDE(line, lines) {
        const i64 base = (line / inner) * n * inner + line % inner;
        i64 best = 0;
        double top = load_d(x, base);
        for (i64 i = 1; i < n; ++i) {
            const double value = load_d(x, base + i * inner);
            if (top == top && (value != value || value > top)) {
                best = i;
                top = value;
            }
        }
        store_d(y, line, (double)best);
    }
}

// Whether element (u, p) comes before (v, q) in topk's order: larger first (smaller first
// without `largest`), a NaN larger than every number, equal values by position.
__device__ __forceinline__ bool topk_before(double u, i64 p, double v, i64 q, int largest) {
    const bool un = u != u, vn = v != v;
    if (un != vn) return largest ? un : vn;
    if (!un && u != v) return largest ? u > v : u < v;
    return p < q;
}

// topk: the k first elements of x's line (x is [outer, n, inner] around the axis, a line
// each (o, j)) in topk_before's order, and their positions: values and indices are
// [outer, k, inner]. One thread a line; each pick is the first element after the last.
extern "C" __global__ void topk(Tensor values, Tensor indices, Tensor x, i64 lines, i64 n, i64 inner, i64 k, int largest) {
    GRID_STRIDE(line, lines) {
        const i64 o = line / inner, j = line % inner, base = o * n * inner + j;
        double last = 0.0;
        i64 last_at = -1;
        for (i64 r = 0; r < k; ++r) {
            i64 best = -1;
            double top = 0.0;
            for (i64 i = 0; i < n; ++i) {
                const double value = load_d(x, base + i * inner);
                if (last_at >= 0 && !topk_before(last, last_at, value, i, largest)) continue;
                if (best < 0 || topk_before(value, i, top, best, largest)) {
                    best = i;
                    top = value;
                }
            }
            store_d(values, (o * k + r) * inner + j, top);
            store_d(indices, (o * k + r) * inner + j, (double)best);
            last = top;
            last_at = best;
        }
    }
}

// gather: out[p] = x[p with p[axis] = index[p]]. out (index's shape) is [outer, n, inner]
// around the axis, x (narrowed to index's shape but along the axis) [outer, m, inner].
extern "C" __global__ void gather(Tensor out, Tensor x, Tensor index, i64 n, i64 inner, i64 m) {
    GRID_STRIDE(i, out.numel) {
        const i64 o = i / (n * inner), j = i % inner;
        const i64 at = load_index(index, i);
        store_d(out, i, load_d(x, (o * m + at) * inner + j));
    }
}

// gather_backward: element (o, k, j) of dx (narrowed like gather's x, [outer, m, inner])
// sums dy[(o, q, j)] over the q < n whose index picks k, in order: no atomics, runs repeat
// bit for bit.
extern "C" __global__ void gather_backward(Tensor dx, Tensor dy, Tensor index, i64 n, i64 inner, i64 m) {
    GRID_STRIDE(i, dx.numel) {
        const i64 o = i / (m * inner), k = (i / inner) % m, j = i % inner;
        double total = 0.0;
        for (i64 q = 0; q < n; ++q) {
            const i64 at = (o * n + q) * inner + j;
            if (load_index(index, at) == k) total += load_d(dy, at);
        }
        store_d(dx, i, total);
    }
}

// scatter_add: element (o, k, j) of y (narrowed like gather's x, [outer, m, inner]; y holds
// x already) adds src[(o, q, j)] over the q < n whose index picks k, in order.
extern "C" __global__ void scatter_add(Tensor y, Tensor src, Tensor index, i64 n, i64 inner, i64 m) {
    GRID_STRIDE(i, y.numel) {
        const i64 o = i / (m * inner), k = (i / inner) % m, j = i % inner;
        double total = load_d(y, i);
        for (i64 q = 0; q < n; ++q) {
            const i64 at = (o * n + q) * inner + j;
            if (load_index(index, at) == k) total += load_d(src, at);
        }
        store_d(y, i, total);
    }
}

// dx = y·(dy − Σ dy·y) along the line.
extern "C" __global__ void softmax_backward(Tensor dx, Tensor dy, Tensor y, i64 lines, i64 n, i64 inner) {
    for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
        const i64 base = (line / inner) * n * inner + line % inner;
        float dot = 0.0f;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const i64 k = base + i * inner;
            dot += load_f(dy, k) * load_f(y, k);
        }
        dot = block_sum(dot);
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const i64 k = base + i * inner;
            store_f(dx, k, load_f(y, k) * (load_f(dy, k) - dot));
        }
    }
}

// y = (x − mean)·rstd·gamma + beta over the last dimension D (norm.cuh).
extern "C" __global__ void layer_norm(Tensor y, Tensor x, Tensor gamma, Tensor beta, i64 rows, i64 d, double eps) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) layer_norm_row(y, x, gamma, beta, row, d, eps);
}

// stats[2·row] = mean, stats[2·row + 1] = rstd (doubles) of every row of x.
extern "C" __global__ void ln_stats(u64 stats, Tensor x, i64 rows, i64 d, double eps) {
    double* out = (double*)stats;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        double mean, rstd;
        row_moments(x, row, d, eps, &mean, &rstd);
        if (threadIdx.x == 0) {
            out[2 * row] = mean;
            out[2 * row + 1] = rstd;
        }
    }
}

// Partial dgamma and dbeta: block (32, 8) covers 32 columns; blockIdx.y picks a chunk of
// rows, shared by the 8 threads of a column. partials[(g·D + col)·2 + {0, 1}] =
// (Σ dy·x̂, Σ dy) over chunk g.
extern "C" __global__ void ln_grad_params(u64 partials, Tensor dy, Tensor x, u64 stats, i64 rows, i64 d, i64 chunk) {
    __shared__ double part[2][8][33];
    const double* st = (const double*)stats;
    const i64 col = (i64)blockIdx.x * 32 + threadIdx.x;
    const i64 r0 = (i64)blockIdx.y * chunk, r1 = imin(rows, r0 + chunk);
    double sg = 0.0, sb = 0.0;
    if (col < d) {
        for (i64 r = r0 + threadIdx.y; r < r1; r += 8) {
            const i64 k = r * d + col;
            const double g = load_d(dy, k);
            sg += g * (load_d(x, k) - st[2 * r]) * st[2 * r + 1];
            sb += g;
        }
    }
    part[0][threadIdx.y][threadIdx.x] = sg;
    part[1][threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && col < d) {
        double tg = 0.0, tb = 0.0;
        for (int j = 0; j < 8; ++j) {
            tg += part[0][j][threadIdx.x];
            tb += part[1][j][threadIdx.x];
        }
        double* out = (double*)partials;
        out[((i64)blockIdx.y * d + col) * 2] = tg;
        out[((i64)blockIdx.y * d + col) * 2 + 1] = tb;
    }
}

// dgamma, dbeta = the partials of `groups` chunks added in order.
extern "C" __global__ void ln_grad_params_finish(Tensor dgamma, Tensor dbeta, u64 partials, i64 d, i64 groups) {
    const double* p = (const double*)partials;
    GRID_STRIDE(col, d) {
        double tg = 0.0, tb = 0.0;
        for (i64 g = 0; g < groups; ++g) {
            tg += p[(g * d + col) * 2];
            tb += p[(g * d + col) * 2 + 1];
        }
        store_d(dgamma, col, tg);
        store_d(dbeta, col, tb);
    }
}

// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) per row, g = dy·gamma (stats from ln_stats).
extern "C" __global__ void layer_norm_backward_dx(Tensor dx, Tensor dy, Tensor x, Tensor gamma, u64 stats, i64 rows,
                                                  i64 d) {
    const double* st = (const double*)stats;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const double mean = st[2 * row], rstd = st[2 * row + 1];
        double sg = 0.0, sgx = 0.0;
        for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
            const i64 k = row * d + i;
            const double g = load_d(dy, k) * load_d(gamma, i);
            sg += g;
            sgx += g * (load_d(x, k) - mean) * rstd;
        }
        const double mean_g = block_sum_d(sg) / (double)d;
        const double mean_gx = block_sum_d(sgx) / (double)d;
        for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
            const i64 k = row * d + i;
            const double g = load_d(dy, k) * load_d(gamma, i);
            const double xhat = (load_d(x, k) - mean) * rstd;
            store_d(dx, k, rstd * (g - mean_g - xhat * mean_gx));
        }
    }
}

// y = x·rstd·gamma over the last dimension D (norm.cuh).
extern "C" __global__ void rms_norm(Tensor y, Tensor x, Tensor gamma, i64 rows, i64 d, double eps) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) rms_norm_row(y, x, gamma, row, d, eps);
}

// stats[2·row] = 0, stats[2·row + 1] = rstd: ln_stats's layout with a zero mean, so that
// ln_grad_params, reading x̂ = (x − 0)·rstd, gives rms_norm's Σ dy·x̂.
extern "C" __global__ void rms_stats(u64 stats, Tensor x, i64 rows, i64 d, double eps) {
    double* out = (double*)stats;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const double rstd = row_rstd(x, row, d, eps);
        if (threadIdx.x == 0) {
            out[2 * row] = 0.0;
            out[2 * row + 1] = rstd;
        }
    }
}

// dgamma = the Σ dy·x̂ halves of ln_grad_params's partials of `groups` chunks, added in
// order (rms_norm has no beta: the Σ dy halves go unused).
extern "C" __global__ void rms_grad_gamma_finish(Tensor dgamma, u64 partials, i64 d, i64 groups) {
    const double* p = (const double*)partials;
    GRID_STRIDE(col, d) {
        double tg = 0.0;
        for (i64 g = 0; g < groups; ++g) tg += p[(g * d + col) * 2];
        store_d(dgamma, col, tg);
    }
}

// dx = rstd·(g − x̂·mean(g·x̂)) per row, g = dy·gamma, x̂ = x·rstd (stats from rms_stats).
extern "C" __global__ void rms_norm_backward_dx(Tensor dx, Tensor dy, Tensor x, Tensor gamma, u64 stats, i64 rows,
                                                i64 d) {
    const double* st = (const double*)stats;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const double rstd = st[2 * row + 1];
        double sgx = 0.0;
        for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
            const i64 k = row * d + i;
            sgx += load_d(dy, k) * load_d(gamma, i) * load_d(x, k) * rstd;
        }
        const double mean_gx = block_sum_d(sgx) / (double)d;
        for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
            const i64 k = row * d + i;
            const double g = load_d(dy, k) * load_d(gamma, i);
            store_d(dx, k, rstd * (g - load_d(x, k) * rstd * mean_gx));
        }
    }
}

// Cross-entropy follows PyTorch (exec/kernels/nn.rs): rows labelled ignore_index count for
// nothing, in the sum and in the mean's divisor; label smoothing ε mixes −log p[label] with
// the mean over the classes of −log p_c.

// losses[row] = (1 − ε)·(lse − x[label]) + ε·(lse − mean_c x_c), lse = max + log Σ exp(x − max),
// for each row of logits [N, C] (the ε term only for ε > 0); 0 for a row labelled
// ignore_index; NaN for another label outside 0..C (the executor checks labels that are
// step inputs beforehand).
extern "C" __global__ void ce_rows(u64 losses, Tensor logits, Tensor labels, i64 rows, i64 c, i64 ignore_index,
                                   double smoothing) {
    float* out = (float*)losses;
    const float eps = (float)smoothing;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const i64 base = row * c;
        float mx, total;
        line_max_and_sum(logits, base, c, 1, &mx, &total);
        float sum_x = 0.0f;
        if (eps > 0.0f) {
            for (i64 j = threadIdx.x; j < c; j += blockDim.x) sum_x += load_f(logits, base + j);
            sum_x = block_sum(sum_x);
        }
        if (threadIdx.x == 0) {
            const i64 label = load_index(labels, row);
            const float lse = mx + logf(total);
            float loss = f_nan();
            if (label == ignore_index) {
                loss = 0.0f;
            } else if (label >= 0 && label < c) {
                loss = lse - load_f(logits, base + label);
                if (eps > 0.0f) loss = (1.0f - eps) * loss + eps * (lse - sum_x / (float)c);
            }
            out[row] = loss;
        }
    }
}

// count = the number of rows whose label is not ignore_index, as a double (one block).
extern "C" __global__ void ce_count(u64 count, Tensor labels, i64 rows, i64 ignore_index) {
    double n = 0.0;
    for (i64 r = threadIdx.x; r < rows; r += blockDim.x) n += load_index(labels, r) != ignore_index ? 1.0 : 0.0;
    n = block_sum_d(n);
    if (threadIdx.x == 0) *(double*)count = n;
}

// loss = Σ losses / count (one block; NaN for count 0: no rows, or every row ignored).
extern "C" __global__ void ce_mean(Tensor loss, u64 losses, u64 count, i64 rows) {
    const float* in = (const float*)losses;
    float s = 0.0f;
    for (i64 r = threadIdx.x; r < rows; r += blockDim.x) s += in[r];
    s = block_sum(s);
    if (threadIdx.x == 0) store_f(loss, 0, s / (float)*(const double*)count);
}

// dlogits = dloss·(softmax(logits) − (1 − ε)·onehot(labels) − ε/C) / count; 0 on rows
// labelled ignore_index.
extern "C" __global__ void ce_backward(Tensor dlogits, Tensor dloss, Tensor logits, Tensor labels, u64 count,
                                       i64 rows, i64 c, i64 ignore_index, double smoothing) {
    const float dl = load_f(dloss, 0);
    const float counted = (float)*(const double*)count;
    const float eps = (float)smoothing;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const i64 base = row * c;
        const i64 label = load_index(labels, row);
        const bool ignored = label == ignore_index;
        const bool valid = label >= 0 && label < c;
        float mx, total;
        line_max_and_sum(logits, base, c, 1, &mx, &total);
        for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
            const float p = expf(load_f(logits, base + j) - mx) / total;
            const float onehot = j == label ? 1.0f : 0.0f;
            const float d = dl * (p - (1.0f - eps) * onehot - eps / (float)c) / counted;
            store_f(dlogits, base + j, ignored ? 0.0f : valid ? d : f_nan());
        }
    }
}

// out[..., :] = table[ids[...], :] (D columns, V rows; NaN rows for ids outside 0..V).
extern "C" __global__ void embedding(Tensor out, Tensor table, Tensor ids, i64 d, i64 v) {
    GRID_STRIDE(i, out.numel) {
        const i64 id = load_index(ids, i / d);
        store_f(out, i, (id >= 0 && id < v) ? load_f(table, id * d + i % d) : f_nan());
    }
}

// dtable[V, D] = Σ over tokens k of dy[k, :] into row ids[k], in token order (as the CPU
// reference adds them). Thread (column, blockIdx.y) owns the R rows from y·R on, in its column:
// it zeroes them, then scans every id, so no two threads ever write one element.
extern "C" __global__ void embedding_backward(Tensor dtable, Tensor dy, Tensor ids, i64 n_ids, i64 d, i64 v,
                                              i64 rows_per_block) {
    const i64 col = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= d) return;
    const i64 r0 = (i64)blockIdx.y * rows_per_block, r1 = imin(v, r0 + rows_per_block);
    for (i64 r = r0; r < r1; ++r) store_f(dtable, r * d + col, 0.0f);
    for (i64 k = 0; k < n_ids; ++k) {
        const i64 id = load_index(ids, k);
        if (id >= r0 && id < r1) {
            const i64 at = id * d + col;
            store_f(dtable, at, load_f(dtable, at) + load_f(dy, k * d + col));
        }
    }
}

// embedding_bag: bag b of `bags` holds ids offsets[b] .. offsets[b+1] (the last to n), the
// offsets clamped into 0..n so that no read leaves ids (the CPU reference refuses offsets
// that do not start at 0 or decrease; so does `run --check`'s comparison).
__device__ __forceinline__ i64 bag_start(const Tensor& offsets, i64 b, i64 bags, i64 n) {
    return b < bags ? imin(n, load_index(offsets, b) < 0 ? 0 : load_index(offsets, b)) : n;
}

// out[b, :] = Σ table[ids[k], :] over bag b's ids k in order (over its length for mean; an
// empty bag gives 0; NaN for ids outside 0..V). One thread per element of out.
extern "C" __global__ void embedding_bag(Tensor out, Tensor table, Tensor ids, Tensor offsets, i64 n, i64 d, i64 v,
                                         int mean) {
    const i64 bags = offsets.numel;
    GRID_STRIDE(i, out.numel) {
        const i64 b = i / d, col = i % d;
        const i64 start = bag_start(offsets, b, bags, n), end = imax(start, bag_start(offsets, b + 1, bags, n));
        float acc = 0.0f;
        for (i64 k = start; k < end; ++k) {
            const i64 id = load_index(ids, k);
            acc += (id >= 0 && id < v) ? load_f(table, id * d + col) : f_nan();
        }
        store_f(out, i, mean && end > start ? acc / (float)(end - start) : acc);
    }
}

// dtable[V, D] = Σ over ids k (in order) of their bag's dy row (over the bag's length for
// mean) into row ids[k]: embedding_backward's threads (a column and a block of rows each,
// zeroed, then every id scanned), the bag of id k followed along the offsets.
extern "C" __global__ void embedding_bag_backward(Tensor dtable, Tensor dy, Tensor ids, Tensor offsets, i64 n, i64 d,
                                                  i64 v, i64 rows_per_block, int mean) {
    const i64 col = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= d) return;
    const i64 bags = offsets.numel;
    const i64 r0 = (i64)blockIdx.y * rows_per_block, r1 = imin(v, r0 + rows_per_block);
    for (i64 r = r0; r < r1; ++r) store_f(dtable, r * d + col, 0.0f);
    i64 b = 0;
    for (i64 k = bag_start(offsets, 0, bags, n); k < n && bags > 0; ++k) {
        while (b + 1 < bags && bag_start(offsets, b + 1, bags, n) <= k) ++b;
        const i64 id = load_index(ids, k);
        if (id >= r0 && id < r1) {
            const i64 start = bag_start(offsets, b, bags, n), end = imax(start, bag_start(offsets, b + 1, bags, n));
            const float g = load_f(dy, b * d + col);
            const i64 at = id * d + col;
            store_f(dtable, at, load_f(dtable, at) + (mean ? g / (float)(end - start) : g));
        }
    }
}
