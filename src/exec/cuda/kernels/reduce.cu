// reduce.cu — sums over axes (sum, mean), batch_norm's per-channel statistics, and the mean
// binary cross-entropy of logits (bce_with_logits) with its gradient.
//
// batch_norm computes in double, for the reason layer_norm does (rows.cu): its gradient
// cancels almost entirely when a channel's variance is small against eps (always so for
// a channel of two elements).
//
// A reduction is out[o] = Σ_r x[o·R + r] over a view of x whose kept dimensions come first
// and reduced ones last (the host permutes the strides): common.cuh's reduce_partial_over,
// which the kernels generated for fused reductions share. With several groups along y,
// each writes partial sums to the workspace and reduce_finish adds them in group order.
// Float inputs accumulate in float, integers in double (exact, converted like Rust's `as`
// at the end).

extern "C" __global__ void reduce_partial(Tensor out, Tensor x, i64 outs, i64 reduced, i64 chunk, double divisor,
                                          u64 partials) {
    reduce_partial_over(out, outs, reduced, chunk, divisor, partials, is_float_dtype(x.dtype),
                        [&](i64 i) { return load_d(x, i); });
}

extern "C" __global__ void reduce_finish(Tensor out, u64 partials, i64 outs, i64 groups, double divisor) {
    const double* p = (const double*)partials;
    GRID_STRIDE(o, outs) {
        double total = 0.0;
        for (i64 g = 0; g < groups; ++g) total += p[g * outs + o];
        store_d(out, o, total / divisor);
    }
}

// batch_norm over x [N, C, inner...]: channel c's M = N·inner elements are j = 0..M at
// row-major index ((j / inner)·C + c)·inner + j % inner.
__device__ __forceinline__ i64 channel_index(i64 j, i64 c, i64 channels, i64 inner) {
    return ((j / inner) * channels + c) * inner + j % inner;
}

// Partial sums per (channel = blockIdx.x, chunk = blockIdx.y), 1-D blocks, in double:
//   BN_MEAN:  s0 = Σ a
//   BN_VAR:   s0 = Σ (a − mean)²               (stats from BN_MEAN)
//   BN_GRADS: s0 = Σ a, s1 = Σ a·(b − mean)·rstd (a = dy, b = x)
// partials[(c·groups + g)·2 + {0, 1}].
extern "C" __global__ void bn_partial(int mode, u64 partials, Tensor a, Tensor b, u64 stats, i64 channels,
                                      i64 inner, i64 m, i64 chunk) {
    const i64 c = blockIdx.x;
    const i64 j0 = (i64)blockIdx.y * chunk, j1 = imin(m, j0 + chunk);
    const double* st = (const double*)stats;
    const double mean = mode == BN_MEAN ? 0.0 : st[2 * c];
    const double rstd = mode == BN_GRADS ? st[2 * c + 1] : 0.0;
    double s0 = 0.0, s1 = 0.0;
    for (i64 j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        const i64 k = channel_index(j, c, channels, inner);
        const double v = load_d(a, k);
        if (mode == BN_VAR) {
            s0 += (v - mean) * (v - mean);
        } else {
            s0 += v;
            if (mode == BN_GRADS) s1 += v * (load_d(b, k) - mean) * rstd;
        }
    }
    s0 = block_sum_d(s0);
    s1 = block_sum_d(s1);
    if (threadIdx.x == 0) {
        double* out = (double*)partials;
        out[(c * gridDim.y + blockIdx.y) * 2] = s0;
        out[(c * gridDim.y + blockIdx.y) * 2 + 1] = s1;
    }
}

// One thread per channel adds the partials in chunk order (doubles throughout):
//   BN_MEAN:  stats[2c] = s0 / M
//   BN_VAR:   stats[2c + 1] = 1 / √(s0 / M + eps)
//   BN_GRADS: sums[2c] = dbeta = s0, sums[2c + 1] = dgamma = s1 (also stored in o0, o1)
extern "C" __global__ void bn_finish(int mode, u64 stats, u64 partials, Tensor o0, Tensor o1, i64 channels,
                                     i64 groups, i64 m, double eps) {
    const double* p = (const double*)partials;
    double* st = (double*)stats;
    GRID_STRIDE(c, channels) {
        double s0 = 0.0, s1 = 0.0;
        for (i64 g = 0; g < groups; ++g) {
            s0 += p[(c * groups + g) * 2];
            s1 += p[(c * groups + g) * 2 + 1];
        }
        if (mode == BN_MEAN) {
            st[2 * c] = s0 / (double)m;
        } else if (mode == BN_VAR) {
            st[2 * c + 1] = 1.0 / sqrt(s0 / (double)m + eps);
        } else {
            st[2 * c] = s0;
            st[2 * c + 1] = s1;
            store_d(o0, c, s0);
            store_d(o1, c, s1);
        }
    }
}

// batch_norm_stats: mean[c] from BN_MEAN's finish pass, var[c] = Σ (x − mean)² / (M − correction)
// from BN_VAR's partials, added in chunk order (doubles throughout).
extern "C" __global__ void bn_stats(Tensor mean, Tensor var, u64 stats, u64 partials, i64 channels, i64 groups, i64 m,
                                    i64 correction) {
    const double* p = (const double*)partials;
    const double* st = (const double*)stats;
    GRID_STRIDE(c, channels) {
        double s0 = 0.0;
        for (i64 g = 0; g < groups; ++g) s0 += p[(c * groups + g) * 2];
        store_d(mean, c, st[2 * c]);
        store_d(var, c, s0 / (double)(m - correction));
    }
}

// y = (x − mean)·rstd·gamma + beta, per channel.
extern "C" __global__ void bn_apply(Tensor y, Tensor x, Tensor gamma, Tensor beta, u64 stats, i64 channels, i64 inner) {
    const double* st = (const double*)stats;
    GRID_STRIDE(i, y.numel) {
        const i64 c = (i / inner) % channels;
        store_d(y, i, (load_d(x, i) - st[2 * c]) * st[2 * c + 1] * load_d(gamma, c) + load_d(beta, c));
    }
}

// dx = gamma·rstd·(dy − Σdy/M − x̂·Σ(dy·x̂)/M), per channel (sums from BN_GRADS).
extern "C" __global__ void bn_backward_dx(Tensor dx, Tensor dy, Tensor x, Tensor gamma, u64 stats, u64 sums,
                                          i64 channels, i64 inner, i64 m) {
    const double* st = (const double*)stats;
    const double* su = (const double*)sums;
    GRID_STRIDE(i, dx.numel) {
        const i64 c = (i / inner) % channels;
        const double mean = st[2 * c], rstd = st[2 * c + 1];
        const double xhat = (load_d(x, i) - mean) * rstd;
        const double sum_dy = su[2 * c], sum_dy_xhat = su[2 * c + 1];
        store_d(dx, i, load_d(gamma, c) * rstd * (load_d(dy, i) - sum_dy / (double)m - xhat * sum_dy_xhat / (double)m));
    }
}

// bce_with_logits: PyTorch's mean binary cross-entropy of logits x and targets t
// (exec/kernels/nn.rs), in double. Block b sums max(x, 0) − x·t + log(1 + e^−|x|) over the
// elements b·chunk .. (b+1)·chunk into partials[b]; bce_mean adds the partials in block
// order and divides by n (0/0 = NaN for no elements, as PyTorch's mean of nothing).
extern "C" __global__ void bce_partial(u64 partials, Tensor logits, Tensor targets, i64 n, i64 chunk) {
    const i64 e0 = (i64)blockIdx.x * chunk, e1 = imin(n, e0 + chunk);
    double s = 0.0;
    for (i64 e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
        const double x = load_d(logits, e);
        s += (x > 0.0 ? x : 0.0) - x * load_d(targets, e) + log1p(exp(x < 0.0 ? x : -x));
    }
    s = block_sum_d(s);
    if (threadIdx.x == 0) ((double*)partials)[blockIdx.x] = s;
}

extern "C" __global__ void bce_mean(Tensor loss, u64 partials, i64 blocks, i64 n) {
    const double* p = (const double*)partials;
    double s = 0.0;
    for (i64 b = threadIdx.x; b < blocks; b += blockDim.x) s += p[b];
    s = block_sum_d(s);
    if (threadIdx.x == 0) store_d(loss, 0, s / (double)n);
}

// dlogits = dloss·(σ(x) − t)/n, elementwise: each thread reads its element of logits and
// targets before writing dlogits, which may lie over either (in place).
extern "C" __global__ void bce_backward(Tensor dlogits, Tensor dloss, Tensor logits, Tensor targets) {
    const double dl = load_d(dloss, 0), n = (double)dlogits.numel;
    GRID_STRIDE(i, dlogits.numel) {
        const double x = load_d(logits, i);
        store_d(dlogits, i, dl * (1.0 / (1.0 + exp(-x)) - load_d(targets, i)) / n);
    }
}
