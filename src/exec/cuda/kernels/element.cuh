// element.cuh — the element functions of the elementwise ops: per element, a value from
// one to three operands and a scalar, chosen by an op code (`binary_op`, `unary_op`,
// `element_op`). The `binary` and `unary` kernels (elementwise.cu) call them with the op code
// as an argument; the kernels generated for fused ops and elementwise ops
// (exec/cuda/generate.rs) call them with constant op codes, so the compiler keeps only the
// one case each inner op needs.
//
// Plain arithmetic (+ − × ÷, scalar ops, sgd) and the math functions (neg, pow_scalar, exp,
// log, sqrt, rsqrt, sin, cos, erf) run in double: the result rounded to f32 is then (nearly
// always) exactly the CPU reference's. Activations run in float, with PyTorch's formulas
// (see exec/kernels/elementwise.rs).

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

// Any elementwise op's function: where (a the condition), masked_fill (a = x, b the mask, s
// the value), binary_op's codes, else unary_op's (a = x). What a fused op's kernel calls.
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
