// elementwise.cu — one thread per output element (grid-stride loops): `binary` and `unary`
// (an element function of element.cuh chosen by an op code argument; inputs arrive as views
// broadcast to the output's shape: stride 0 on broadcast dimensions) for the copies and
// sums other ops' lowerings make (the elementwise ops themselves run kernels generated for
// their element function, exec/cuda/generate.rs), fill, slice_backward, causal_mask, where and masked_fill
// (selection by a bool tensor), dropout, and the optimizer updates.
//
// Outputs are dense. An output may lie over an input's bytes (in-place, as the plan allows
// only for an input read directly at the same element): each thread reads its element's
// inputs before writing it, so that is safe.
//
// sgd_momentum and adam run in double, like the plain arithmetic of element.cuh.

// out = a op b (binary_op), inputs broadcast to out's shape.
extern "C" __global__ void binary(int op, Tensor out, Tensor a, Tensor b, double s) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, binary_op(op, load_d(a, i), load_d(b, i), s)); }
}

// out = f(x) (unary_op).
extern "C" __global__ void unary(int op, Tensor out, Tensor x, double s) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, unary_op(op, load_d(x, i), s)); }
}

// Element i is value + i·step (step 0: a constant; otherwise arange), computed in double
// as the CPU reference does.
extern "C" __global__ void fill(Tensor out, double value, double step) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, value + (double)i * step); }
}

// slice's gradient in one pass: dx seen as [outer, n, inner] around the sliced axis is dy
// ([outer, len, inner]) at positions start + k·step of the axis (k < len), zero elsewhere.
extern "C" __global__ void slice_backward(Tensor dx, Tensor dy, i64 n, i64 inner, i64 start, i64 step, i64 len) {
    GRID_STRIDE(i, dx.numel) {
        const i64 at = (i / inner) % n - start;
        const i64 k = at / step;
        double v = 0.0;
        if (at >= 0 && at % step == 0 && k < len) v = load_d(dy, ((i / (inner * n)) * len + k) * inner + i % inner);
        store_d(dx, i, v);
    }
}

// x is [..., T, T]; entries [..., i, j] with j > i become `value`.
extern "C" __global__ void causal_mask(Tensor out, Tensor x, i64 t, double value) {
    GRID_STRIDE(i, out.numel) {
        const i64 col = i % t, row = (i / t) % t;
        store_d(out, i, col > row ? value : load_d(x, i));
    }
}

// Dropout's mask: exec/kernels/dropout.rs defines it (and pins values of it); these are the
// same integer steps, so both executors draw the same mask bit for bit. splitmix64(s, n) is
// SplitMix64's output n from state s; the key mixes the seed, then the stream; element i is
// kept iff the top 53 bits of splitmix64(key, i), as a fraction of 2^53 (exact in double),
// are >= p.
__device__ __forceinline__ u64 splitmix64(u64 state, u64 n) {
    u64 z = state + (n + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double dropout_uniform(u64 key, u64 i) {
    return (double)(splitmix64(key, i) >> 11) * (1.0 / 9007199254740992.0);
}

// dropout (a = x) and dropout_backward (a = dy): out_i = a_i / (1 − p) in double where
// element i is kept, else 0; `seed` is the i64[] seed tensor. In place (out over a): each
// thread reads a_i before writing out_i, and the seed is never written.
extern "C" __global__ void dropout(Tensor out, Tensor a, Tensor seed, i64 stream, double p) {
    const u64 key = splitmix64(splitmix64((u64)load_index(seed, 0), 0ULL), (u64)stream);
    GRID_STRIDE(i, out.numel) {
        const double v = load_d(a, i);
        store_d(out, i, dropout_uniform(key, (u64)i) >= p ? v / (1.0 - p) : 0.0);
    }
}

// random: a new tensor of draws from (seed, stream), exec/kernels/dropout.rs's `random`
// step for step: uniform, the top `bits` bits of splitmix64(key, i) over 2^bits (exact in
// out's dtype, below 1); normal (normal = 1), Box-Muller of the 53-bit uniforms of 2i and
// 2i + 1 in double, rounded where stored.
extern "C" __global__ void random_fill(Tensor out, Tensor seed, i64 stream, int normal, int bits) {
    const u64 key = splitmix64(splitmix64((u64)load_index(seed, 0), 0ULL), (u64)stream);
    GRID_STRIDE(i, out.numel) {
        double x;
        if (normal) {
            const double u1 = dropout_uniform(key, 2ULL * (u64)i), u2 = dropout_uniform(key, 2ULL * (u64)i + 1ULL);
            x = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
        } else {
            x = (double)(splitmix64(key, (u64)i) >> (64 - bits)) / (double)(1ULL << bits);
        }
        store_d(out, i, x);
    }
}

// out = a where cond else b; cond, a and b arrive as views broadcast to out's shape.
// Copies: a float element goes through double unchanged.
extern "C" __global__ void where_select(Tensor out, Tensor cond, Tensor a, Tensor b) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, load_d(cond, i) != 0.0 ? load_d(a, i) : load_d(b, i)); }
}

// out = value where mask else x; mask arrives as a view broadcast to x's shape.
extern "C" __global__ void masked_fill(Tensor out, Tensor x, Tensor mask, double value) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, load_d(mask, i) != 0.0 ? value : load_d(x, i)); }
}

// buf_new = momentum·buf + g; p_new = p − lr·buf_new.
extern "C" __global__ void sgd_momentum(Tensor p_new, Tensor buf_new, Tensor p, Tensor g, Tensor buf, double lr,
                                        double momentum) {
    GRID_STRIDE(i, p_new.numel) {
        const double b = momentum * load_d(buf, i) + load_d(g, i);
        const double pn = load_d(p, i) - lr * b;
        store_d(buf_new, i, b);
        store_d(p_new, i, pn);
    }
}

// Adam with bias correction by the step count t (a scalar tensor); weight_decay > 0 is
// adamw's decoupled decay: p_new = p − lr·(m̂ / (√v̂ + eps) + weight_decay·p).
extern "C" __global__ void adam(Tensor p_new, Tensor m_new, Tensor v_new, Tensor p, Tensor g, Tensor m, Tensor v,
                                Tensor t, double lr, double beta1, double beta2, double eps, double weight_decay) {
    const double step = load_d(t, 0);
    const double correction1 = 1.0 - pow(beta1, step);
    const double correction2 = 1.0 - pow(beta2, step);
    GRID_STRIDE(i, p_new.numel) {
        const double pi = load_d(p, i), gi = load_d(g, i);
        const double mi = beta1 * load_d(m, i) + (1.0 - beta1) * gi;
        const double vi = beta2 * load_d(v, i) + (1.0 - beta2) * gi * gi;
        const double m_hat = mi / correction1;
        const double v_hat = vi / correction2;
        double update = m_hat / (sqrt(v_hat) + eps);
        if (weight_decay != 0.0) update = update + weight_decay * pi;
        store_d(p_new, i, pi - lr * update);
        store_d(m_new, i, mi);
        store_d(v_new, i, vi);
    }
}
