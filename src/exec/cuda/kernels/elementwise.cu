// elementwise.cu — one thread per output element (grid-stride loops): binary arithmetic
// with broadcasting (inputs arrive as views broadcast to the output's shape: stride 0 on
// broadcast dimensions), activations and their gradients, copies and casts, fill,
// causal_mask, where and masked_fill (selection by a bool tensor), dropout, and the optimizer
// updates.
//
// Outputs are dense. An output may lie over an input's bytes (in-place, as the plan allows
// only for an input read directly at the same element): each thread reads its element's
// inputs before writing it, so that is safe.
//
// Plain arithmetic (+ − × ÷, scalar ops, sgd, sgd_momentum, adam) and the math functions
// (neg, pow_scalar, exp, log, sqrt, rsqrt) run in double: the result rounded to f32 is then
// (nearly always) exactly the CPU reference's. Activations run in float, with PyTorch's
// formulas (see exec/kernels/elementwise.rs).

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_CUBIC 0.044715f
#define SQRT_HALF 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

__device__ __forceinline__ float gelu_f(float x) {
    return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)));
}

// gelu'(x) = 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²).
__device__ __forceinline__ float gelu_grad_f(float x) {
    const float t = tanhf(SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x));
    const float inner = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * inner;
}

// Exact GELU: 0.5·x·(1 + erf(x/√2)).
__device__ __forceinline__ float gelu_exact_f(float x) { return x * 0.5f * (1.0f + erff(x * SQRT_HALF)); }

// Its derivative Φ(x) + x·φ(x): the normal CDF plus x times the normal density.
__device__ __forceinline__ float gelu_exact_grad_f(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * SQRT_HALF));
    const float pdf = expf(-0.5f * x * x) * INV_SQRT_2PI;
    return cdf + x * pdf;
}

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float hardswish_f(float x) { return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f; }

__device__ __forceinline__ float hardsigmoid_f(float x) { return fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f; }

// Whether a op b holds for the relation `how` (Comparison::code: 0 lt, 1 le, 2 gt, 3 ge,
// 4 eq, 5 ne); NaN is unequal to everything, as in IEEE and PyTorch.
__device__ __forceinline__ bool compare_d(int how, double a, double b) {
    switch (how) {
        case 0: return a < b;
        case 1: return a <= b;
        case 2: return a > b;
        case 3: return a >= b;
        case 4: return a == b;
        default: return a != b;
    }
}

// PyTorch's hardsigmoid′: 1/6 strictly between −3 and 3, 0 elsewhere.
__device__ __forceinline__ float hardsigmoid_grad(float dy, float x) { return x > -3.0f && x < 3.0f ? dy / 6.0f : 0.0f; }

// PyTorch's hardswish′: 0 below −3, x/3 + 1/2 on [−3, 3], 1 above.
__device__ __forceinline__ float hardswish_grad(float dy, float x) {
    if (x < -3.0f) return 0.0f;
    if (x <= 3.0f) return dy * (x / 3.0f + 0.5f);
    return dy;
}

// a op b. OP_ADD/SUB/MUL/DIV on any numeric dtype; the activations' gradients with
// a = dy and b = the forward's output y (OP_RELU_BACKWARD, OP_SIGMOID_BACKWARD,
// OP_TANH_BACKWARD) or input x (OP_GELU_BACKWARD, OP_GELU_EXACT_BACKWARD, OP_SILU_BACKWARD,
// OP_HARDSWISH_BACKWARD, OP_HARDSIGMOID_BACKWARD); OP_SGD (a = p, b = g, s = lr). The
// activations' gradients compute in float (their operands as float, exact for float
// tensors), the rest in double.
__device__ __forceinline__ double binary_op(int op, double a, double b, double s) {
    switch (op) {
        case OP_RELU_BACKWARD: return (float)b > 0.0f ? (double)(float)a : 0.0;
        case OP_GELU_BACKWARD: return (double)((float)a * gelu_grad_f((float)b));
        case OP_GELU_EXACT_BACKWARD: return (double)((float)a * gelu_exact_grad_f((float)b));
        case OP_SILU_BACKWARD: {
            const float x = (float)b, sg = sigmoid_f(x);
            return (double)((float)a * sg * (1.0f + x * (1.0f - sg)));
        }
        case OP_SIGMOID_BACKWARD: {
            const float y = (float)b;
            return (double)((float)a * (1.0f - y) * y);
        }
        case OP_TANH_BACKWARD: {
            const float y = (float)b;
            return (double)((float)a * (1.0f - y * y));
        }
        case OP_HARDSWISH_BACKWARD: return (double)hardswish_grad((float)a, (float)b);
        case OP_HARDSIGMOID_BACKWARD: return (double)hardsigmoid_grad((float)a, (float)b);
        case OP_COMPARE: return compare_d((int)s, a, b) ? 1.0 : 0.0;
        case OP_SGD: return a - s * b;
        case OP_ADD: return a + b;
        case OP_SUB: return a - b;
        case OP_MUL: return a * b;
        default: return a / b;
    }
}

// f(x). OP_ADD_SCALAR / OP_MUL_SCALAR (s = value), OP_POW_SCALAR (s = exponent),
// OP_COMPARE_SCALAR + relation (s = value), OP_NEG, OP_SIN, OP_COS, OP_ERF, OP_EXP, OP_LOG,
// OP_SQRT, OP_RSQRT in double; the activations OP_RELU, OP_GELU, OP_GELU_EXACT, OP_SILU,
// OP_SIGMOID, OP_TANH, OP_HARDSWISH, OP_HARDSIGMOID in float; OP_COPY (contiguous, and cast:
// the caller stores or rounds to the new dtype, like the CPU reference).
__device__ __forceinline__ double unary_op(int op, double x, double s) {
    switch (op) {
        case OP_ADD_SCALAR: return x + s;
        case OP_COMPARE_SCALAR + 0:
        case OP_COMPARE_SCALAR + 1:
        case OP_COMPARE_SCALAR + 2:
        case OP_COMPARE_SCALAR + 3:
        case OP_COMPARE_SCALAR + 4:
        case OP_COMPARE_SCALAR + 5: return compare_d(op - OP_COMPARE_SCALAR, x, s) ? 1.0 : 0.0;
        case OP_MUL_SCALAR: return x * s;
        case OP_POW_SCALAR: return pow(x, s);
        case OP_NEG: return -x;
        case OP_EXP: return exp(x);
        case OP_SIN: return sin(x);
        case OP_COS: return cos(x);
        case OP_ERF: return erf(x);
        case OP_LOG: return log(x);
        case OP_SQRT: return sqrt(x);
        case OP_RSQRT: return 1.0 / sqrt(x);
        case OP_GELU_EXACT: return (double)gelu_exact_f((float)x);
        case OP_SILU: {
            const float v = (float)x;
            return (double)(v / (1.0f + expf(-v)));
        }
        case OP_SIGMOID: return (double)sigmoid_f((float)x);
        case OP_TANH: return (double)tanhf((float)x);
        case OP_HARDSWISH: return (double)hardswish_f((float)x);
        case OP_HARDSIGMOID: return (double)hardsigmoid_f((float)x);
        case OP_RELU: {
            const float v = (float)x;
            return v < 0.0f ? 0.0 : (double)v;
        }
        case OP_GELU: return (double)gelu_f((float)x);
        default: return x;
    }
}

// out = a op b (binary_op), inputs broadcast to out's shape.
extern "C" __global__ void binary(int op, Tensor out, Tensor a, Tensor b, double s) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, binary_op(op, load_d(a, i), load_d(b, i), s)); }
}

// out = f(x) (unary_op).
extern "C" __global__ void unary(int op, Tensor out, Tensor x, double s) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, unary_op(op, load_d(x, i), s)); }
}

// One element function of a fused op: where (a the condition), masked_fill (a = x, b the
// mask, s the value), binary_op's codes, else unary_op's.
__device__ __forceinline__ double element_op(int op, double a, double b, double c, double s) {
    switch (op) {
        case OP_WHERE: return a != 0.0 ? b : c;
        case OP_MASKED_FILL: return b != 0.0 ? s : a;
        case OP_ADD:
        case OP_SUB:
        case OP_MUL:
        case OP_DIV:
        case OP_SGD:
        case OP_COMPARE:
        case OP_RELU_BACKWARD:
        case OP_GELU_BACKWARD:
        case OP_GELU_EXACT_BACKWARD:
        case OP_SILU_BACKWARD:
        case OP_SIGMOID_BACKWARD:
        case OP_TANH_BACKWARD:
        case OP_HARDSWISH_BACKWARD:
        case OP_HARDSIGMOID_BACKWARD: return binary_op(op, a, b, s);
        default: return unary_op(op, a, s);
    }
}

__device__ __forceinline__ double fused_operand(int which, const double* in, const double* t) {
    if (which < 0) return 0.0;
    return which < FUSED_MAX_INPUTS ? in[which] : t[which - FUSED_MAX_INPUTS];
}

// A fused op: per element, its inputs (views broadcast to out's shape; unused ones are never
// read), then each inner op of `code` in order, each value rounded to its dtype as storing
// it would round it, the last one stored. Inner values live in registers (or local memory),
// never in the arena. In place over an input of out's shape is safe: a thread reads its
// element's inputs before it writes.
extern "C" __global__ void fused(FusedCode code, Tensor out, Tensor x0, Tensor x1, Tensor x2, Tensor x3, Tensor x4,
                                 Tensor x5, Tensor x6, Tensor x7) {
    GRID_STRIDE(i, out.numel) {
        double in[FUSED_MAX_INPUTS];
        in[0] = code.inputs > 0 ? load_d(x0, i) : 0.0;
        in[1] = code.inputs > 1 ? load_d(x1, i) : 0.0;
        in[2] = code.inputs > 2 ? load_d(x2, i) : 0.0;
        in[3] = code.inputs > 3 ? load_d(x3, i) : 0.0;
        in[4] = code.inputs > 4 ? load_d(x4, i) : 0.0;
        in[5] = code.inputs > 5 ? load_d(x5, i) : 0.0;
        in[6] = code.inputs > 6 ? load_d(x6, i) : 0.0;
        in[7] = code.inputs > 7 ? load_d(x7, i) : 0.0;
        double t[FUSED_MAX_OPS];
        for (int j = 0; j < code.count; ++j) {
            const double a = fused_operand(code.a[j], in, t);
            const double b = fused_operand(code.b[j], in, t);
            const double c = fused_operand(code.c[j], in, t);
            t[j] = round_to(code.dtype[j], element_op(code.op[j], a, b, c, code.s[j]));
        }
        store_d(out, i, t[code.count - 1]);
    }
}

// Element i is value + i·step (step 0: a constant; otherwise arange), computed in double
// as the CPU reference does.
extern "C" __global__ void fill(Tensor out, double value, double step) {
    GRID_STRIDE(i, out.numel) { store_d(out, i, value + (double)i * step); }
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
