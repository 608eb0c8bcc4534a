// common.cuh — shared by every kernel file of memplan's CUDA executor (the program is the
// files concatenated in the order exec/cuda/source.rs gives, compiled once per process by
// NVRTC). It holds the tensor descriptor, the dtype conversions, loads and stores through
// strides, and block reductions.
//
// Plain CUDA C++ with no include directive: NVRTC provides the math functions; the same text also
// compiles as host C++ under tests/cuda_emu/shim.h, which runs every kernel on the CPU in
// the tests (so no inline PTX, no CUDA headers, no math-library macros).
//
// Dtypes: a tensor carries its dtype code and every load/store switches on it (a branch
// that is uniform across a launch). Float dtypes compute in float, as f16/bf16 arithmetic
// would lose too much; integer results compute in double and convert like Rust's `as`
// (truncate, saturate, NaN to 0), exactly as the CPU reference does.

typedef long long i64;
typedef unsigned long long u64;

// MAX_RANK, the dtype codes (DT_*), the op codes of `binary` and `unary` (OP_*) and the
// modes of `igemm` and the batch-norm kernels are defined ahead of this file, generated
// from exec/cuda/source.rs (SHARED).

// A tensor view: element [i0, i1, ...] of `shape` is Σ ik·stride[k] elements after ptr.
// `dense` = 1 when element i (row-major) is simply at ptr + i. Layout = exec/cuda/view.rs
// DeviceTensor (160 bytes).
struct Tensor {
    u64 ptr;
    int dtype;
    int rank;
    i64 numel;
    int dense;
    int pad;
    i64 shape[MAX_RANK];
    i64 stride[MAX_RANK];
};

// The sizes of a convolution's index space (in conv2d's terms) or of a pooling op, NCHW:
// input side n,h,w with c channels per group; k output channels per group; r,s window; p,q
// output height and width; sh,sw strides; ph,pw padding; dh,dw dilation. Pooling is one
// group with dilation 1. Layout = view.rs Geom.
struct Geom {
    int n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw, pad;
};

static_assert(sizeof(Tensor) == 160, "struct Tensor must match DeviceTensor");
static_assert(sizeof(Geom) == 64, "struct Geom must match view.rs Geom");

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ float f_inf() { return __uint_as_float(0x7f800000u); }
__device__ __forceinline__ float f_nan() { return __uint_as_float(0x7fc00000u); }
__device__ __forceinline__ bool is_float_dtype(int dtype) { return dtype <= DT_BF16; }

// The element offset of row-major index i. A view of fewer than 2^32 elements (every
// shape and index then fits 32 bits) divides in 32 bits: a 64-bit division is a long
// software sequence on the GPU, and broadcast and transposed views pay one per dimension
// per element (it made GPT-2's bias additions several times slower than their bytes).
__device__ __forceinline__ i64 offset_of(const Tensor& t, i64 i) {
    if (t.dense) return i;
    i64 off = 0;
    if (t.numel <= 0xffffffffLL) {
        unsigned j = (unsigned)i;
#pragma unroll
        for (int d = MAX_RANK - 1; d >= 0; --d) {
            if (d < t.rank) {
                const unsigned n = (unsigned)t.shape[d];
                off += (i64)(j % n) * t.stride[d];
                j /= n;
            }
        }
        return off;
    }
#pragma unroll
    for (int d = MAX_RANK - 1; d >= 0; --d) {
        if (d < t.rank) {
            const i64 n = t.shape[d];
            off += (i % n) * t.stride[d];
            i /= n;
        }
    }
    return off;
}

// ---------------------------------------------------------------------------------------
// f16 and bf16 conversions, round to nearest even (as the `half` crate does).

__device__ __forceinline__ float f16_to_float(unsigned short h) {
    const unsigned sign = (unsigned)(h & 0x8000u) << 16;
    const unsigned exp = (h >> 10) & 0x1fu;
    const unsigned mant = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    if (exp != 0) return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
    // Zero or subnormal: mant · 2^-24, exact in float.
    const float v = (float)mant * 5.9604644775390625e-08f;
    return sign ? -v : v;
}

__device__ __forceinline__ unsigned short float_to_f16(float f) {
    const unsigned x = __float_as_uint(f);
    const unsigned sign = (x >> 16) & 0x8000u;
    const unsigned ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x47800000u) return (unsigned short)(sign | 0x7c00u);  // >= 65536: infinity
    const unsigned e = ax >> 23;
    if (e >= 113u) {
        // Normal in f16 (>= 2^-14); rounding may carry into the exponent, up to infinity.
        unsigned h = ((e - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
        const unsigned rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
        return (unsigned short)(sign | h);
    }
    if (e < 102u) return (unsigned short)sign;  // below 2^-25: rounds to zero
    // Subnormal in f16: the value in units of 2^-24, rounded to nearest even.
    const unsigned m = (ax & 0x7fffffu) | 0x800000u;
    const unsigned shift = 126u - e;  // 14 ..= 24
    unsigned h = m >> shift;
    const unsigned rem = m & ((1u << shift) - 1u);
    const unsigned half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h += 1u;
    return (unsigned short)(sign | h);
}

__device__ __forceinline__ float bf16_to_float(unsigned short h) { return __uint_as_float((unsigned)h << 16); }

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
    unsigned x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}

// Rust's `as` from f64: truncate toward zero, saturate, NaN to 0.
__device__ __forceinline__ int rust_as_i32(double v) {
    if (v != v) return 0;
    if (v >= 2147483647.0) return 2147483647;
    if (v <= -2147483648.0) return (int)(-2147483647 - 1);
    return (int)v;
}

__device__ __forceinline__ i64 rust_as_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return 9223372036854775807LL;
    if (v <= -9223372036854775808.0) return -9223372036854775807LL - 1;
    return (i64)v;
}

// ---------------------------------------------------------------------------------------
// Loads and stores. `_at` take an element offset; the others a row-major index.

__device__ __forceinline__ float load_at_f(const Tensor& t, i64 o) {
    switch (t.dtype) {
        case DT_F32: return ((const float*)t.ptr)[o];
        case DT_F16: return f16_to_float(((const unsigned short*)t.ptr)[o]);
        case DT_BF16: return bf16_to_float(((const unsigned short*)t.ptr)[o]);
        case DT_I32: return (float)((const int*)t.ptr)[o];
        case DT_I64: return (float)((const i64*)t.ptr)[o];
        default: return ((const unsigned char*)t.ptr)[o] != 0 ? 1.0f : 0.0f;
    }
}

__device__ __forceinline__ double load_at_d(const Tensor& t, i64 o) {
    switch (t.dtype) {
        case DT_I32: return (double)((const int*)t.ptr)[o];
        case DT_I64: return (double)((const i64*)t.ptr)[o];
        case DT_BOOL: return ((const unsigned char*)t.ptr)[o] != 0 ? 1.0 : 0.0;
        default: return (double)load_at_f(t, o);
    }
}

// An index (ids, labels: i32 or i64).
__device__ __forceinline__ i64 load_index(const Tensor& t, i64 i) {
    const i64 o = offset_of(t, i);
    return t.dtype == DT_I32 ? (i64)((const int*)t.ptr)[o] : ((const i64*)t.ptr)[o];
}

__device__ __forceinline__ void store_at_d(const Tensor& t, i64 o, double v) {
    switch (t.dtype) {
        case DT_F32: ((float*)t.ptr)[o] = (float)v; break;
        case DT_F16: ((unsigned short*)t.ptr)[o] = float_to_f16((float)v); break;
        case DT_BF16: ((unsigned short*)t.ptr)[o] = float_to_bf16((float)v); break;
        case DT_I32: ((int*)t.ptr)[o] = rust_as_i32(v); break;
        case DT_I64: ((i64*)t.ptr)[o] = rust_as_i64(v); break;
        default: ((unsigned char*)t.ptr)[o] = v != 0.0 ? 1 : 0; break;
    }
}

__device__ __forceinline__ void store_at_f(const Tensor& t, i64 o, float v) {
    switch (t.dtype) {
        case DT_F32: ((float*)t.ptr)[o] = v; break;
        case DT_F16: ((unsigned short*)t.ptr)[o] = float_to_f16(v); break;
        case DT_BF16: ((unsigned short*)t.ptr)[o] = float_to_bf16(v); break;
        default: store_at_d(t, o, (double)v); break;
    }
}

// v as a tensor of dtype code `dtype` would hold it: store_at_d, then load_at_d.
__device__ __forceinline__ double round_to(int dtype, double v) {
    switch (dtype) {
        case DT_F32: return (double)(float)v;
        case DT_F16: return (double)f16_to_float(float_to_f16((float)v));
        case DT_BF16: return (double)bf16_to_float(float_to_bf16((float)v));
        case DT_I32: return (double)rust_as_i32(v);
        case DT_I64: return (double)rust_as_i64(v);
        default: return v != 0.0 ? 1.0 : 0.0;
    }
}

__device__ __forceinline__ float load_f(const Tensor& t, i64 i) { return load_at_f(t, offset_of(t, i)); }
__device__ __forceinline__ double load_d(const Tensor& t, i64 i) { return load_at_d(t, offset_of(t, i)); }
__device__ __forceinline__ void store_f(const Tensor& t, i64 i, float v) { store_at_f(t, offset_of(t, i), v); }
__device__ __forceinline__ void store_d(const Tensor& t, i64 i, double v) { store_at_d(t, offset_of(t, i), v); }

// ---------------------------------------------------------------------------------------
// Lanes: V consecutive elements of one tensor in registers, for the kernels generated for
// fused ops (exec/cuda/generate.rs), whose dtypes are constants there. A dense run of
// elements whose first byte is aligned to its vector moves in 16-byte loads and stores (8-
// or 4-byte for vectors under 16 bytes) instead of one access per element; each lane is
// decoded as load_at_d and encoded as store_at_d would, so the values are exactly the
// per-element path's. Words are little-endian, on the GPU and on the emulator's hosts.

#define DT_BYTES(dt) ((dt) == DT_I64 ? 8 : ((dt) == DT_F32 || (dt) == DT_I32) ? 4 : (dt) == DT_BOOL ? 1 : 2)
// The alignment a vector of `bytes` bytes needs.
#define VECTOR_ALIGN(bytes) ((bytes) < 16 ? (bytes) : 16)

struct __align__(16) Words16 {
    unsigned w[4];
};
struct __align__(8) Words8 {
    unsigned w[2];
};

// P when element i (row-major) of t is element i % P of a dense run at t.ptr: a dense
// tensor (P = numel), or a dense tail repeated along broadcast leading dimensions (a bias:
// the tail's size; a broadcast scalar: 1); 0 otherwise.
__device__ __forceinline__ i64 period_of(const Tensor& t) {
    if (t.dense) return t.numel;
    i64 period = 1;
    bool tail = true;
    for (int d = t.rank - 1; d >= 0; --d) {
        const i64 n = t.shape[d];
        if (n == 1) continue;
        if (tail && t.stride[d] == period) {
            period *= n;
            continue;
        }
        tail = false;
        if (t.stride[d] != 0) return 0;
    }
    return period;
}

// Whether lanes of t (period `period`, V lanes of `bytes` bytes each) load as one vector:
// every run of V lanes starting at a multiple of V lies inside one period, aligned.
__device__ __forceinline__ bool lanes_vectorize(const Tensor& t, i64 period, int lanes, int bytes) {
    return period > 0 && period % lanes == 0 && t.ptr % (u64)VECTOR_ALIGN(lanes * bytes) == 0;
}

template <int BYTES>
__device__ __forceinline__ void load_words(u64 p, unsigned* w) {
    if (BYTES >= 16) {
#pragma unroll
        for (int k = 0; k < BYTES / 16; ++k) {
            const Words16 v = ((const Words16*)p)[k];
            w[4 * k] = v.w[0];
            w[4 * k + 1] = v.w[1];
            w[4 * k + 2] = v.w[2];
            w[4 * k + 3] = v.w[3];
        }
    } else if (BYTES == 8) {
        const Words8 v = *(const Words8*)p;
        w[0] = v.w[0];
        w[1] = v.w[1];
    } else {
        w[0] = *(const unsigned*)p;
    }
}

template <int BYTES>
__device__ __forceinline__ void store_words(u64 p, const unsigned* w) {
    if (BYTES >= 16) {
#pragma unroll
        for (int k = 0; k < BYTES / 16; ++k) {
            Words16 v;
            v.w[0] = w[4 * k];
            v.w[1] = w[4 * k + 1];
            v.w[2] = w[4 * k + 2];
            v.w[3] = w[4 * k + 3];
            ((Words16*)p)[k] = v;
        }
    } else if (BYTES == 8) {
        Words8 v;
        v.w[0] = w[0];
        v.w[1] = w[1];
        *(Words8*)p = v;
    } else {
        *(unsigned*)p = w[0];
    }
}

// Lane j of words w holding elements of dtype DT, as load_at_d reads it.
template <int DT>
__device__ __forceinline__ double lane_d(const unsigned* w, int j) {
    switch (DT) {
        case DT_F32: return (double)__uint_as_float(w[j]);
        case DT_F16: return (double)f16_to_float((unsigned short)(w[j >> 1] >> ((j & 1) * 16)));
        case DT_BF16: return (double)bf16_to_float((unsigned short)(w[j >> 1] >> ((j & 1) * 16)));
        case DT_I32: return (double)(int)w[j];
        case DT_I64: return (double)(i64)((u64)w[2 * j] | ((u64)w[2 * j + 1] << 32));
        default: return ((w[j >> 2] >> ((j & 3) * 8)) & 0xffu) != 0 ? 1.0 : 0.0;
    }
}

// v into lane j of zeroed words w of dtype DT, as store_at_d writes it.
template <int DT>
__device__ __forceinline__ void set_lane(unsigned* w, int j, double v) {
    switch (DT) {
        case DT_F32: w[j] = __float_as_uint((float)v); break;
        case DT_F16: w[j >> 1] |= (unsigned)float_to_f16((float)v) << ((j & 1) * 16); break;
        case DT_BF16: w[j >> 1] |= (unsigned)float_to_bf16((float)v) << ((j & 1) * 16); break;
        case DT_I32: w[j] = (unsigned)rust_as_i32(v); break;
        case DT_I64: {
            const u64 bits = (u64)rust_as_i64(v);
            w[2 * j] = (unsigned)bits;
            w[2 * j + 1] = (unsigned)(bits >> 32);
            break;
        }
        default: w[j >> 2] |= (v != 0.0 ? 1u : 0u) << ((j & 3) * 8); break;
    }
}

// Lanes i0 .. i0 + V of t (dtype DT, broadcast to the output's shape; `period` its
// period_of, `vector` its lanes_vectorize): one vector load, one load of a broadcast
// scalar, or element by element.
template <int DT, int V>
__device__ __forceinline__ void load_lanes(const Tensor& t, i64 i0, i64 period, bool vector, double (&a)[V]) {
    if (vector) {
        const i64 o = i0 < period ? i0 : i0 <= 0xffffffffLL ? (i64)((unsigned)i0 % (unsigned)period) : i0 % period;
        unsigned w[(V * DT_BYTES(DT) + 3) / 4];
        load_words<V * DT_BYTES(DT)>(t.ptr + (u64)o * DT_BYTES(DT), w);
#pragma unroll
        for (int j = 0; j < V; ++j) a[j] = lane_d<DT>(w, j);
    } else if (period == 1) {
        const double s = load_at_d(t, 0);
#pragma unroll
        for (int j = 0; j < V; ++j) a[j] = s;
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) a[j] = load_d(t, i0 + j);
    }
}

// Lanes i0 .. i0 + V of the dense, aligned t (dtype DT) as one vector store.
template <int DT, int V>
__device__ __forceinline__ void store_lanes(const Tensor& t, i64 i0, const double (&r)[V]) {
    unsigned w[(V * DT_BYTES(DT) + 3) / 4];
#pragma unroll
    for (int k = 0; k < (V * DT_BYTES(DT) + 3) / 4; ++k) w[k] = 0u;
#pragma unroll
    for (int j = 0; j < V; ++j) set_lane<DT>(w, j, r[j]);
    store_words<V * DT_BYTES(DT)>(t.ptr + (u64)i0 * DT_BYTES(DT), w);
}

// ---------------------------------------------------------------------------------------
// Reductions over a warp and over a 1-D block (blockDim.x a multiple of 32, at most 1024).
// Every thread of the block must call them (they synchronise); every thread gets the
// result. The order of additions is fixed by the launch configuration, so results repeat
// bit for bit.

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ float block_sum(float v) {
    __shared__ float red[32];
    v = warp_sum(v);
    const int warps = blockDim.x >> 5;
    if (warps == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // earlier readers of red are done
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? red[lane] : 0.0f);
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ double block_sum_d(double v) {
    __shared__ double red[32];
    v = warp_sum_d(v);
    const int warps = blockDim.x >> 5;
    if (warps == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum_d(lane < warps ? red[lane] : 0.0);
}

__device__ float block_max(float v) {
    __shared__ float red[32];
    v = warp_max(v);
    const int warps = blockDim.x >> 5;
    if (warps == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? red[lane] : -f_inf());
}

__device__ __forceinline__ double warp_max_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ double block_max_d(double v) {
    __shared__ double red[32];
    v = warp_max_d(v);
    const int warps = blockDim.x >> 5;
    if (warps == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_max_d(lane < warps ? red[lane] : -(double)f_inf());
}

// ---------------------------------------------------------------------------------------
// A reduction's partial sums (reduce.cu's `reduce_partial`, and the kernels generated for
// fused ops that end with a reduction): out[o] = Σ_r value(o·reduced + r) / divisor over
// an index space whose kept dimensions come first and reduced ones last. Block (32, 8):
// threadIdx.x picks the output, the 8 threads of a column and blockIdx.y split the
// reduced elements (`chunk` per group). `in_float`: float values accumulate in float,
// others in double. With `partials`, each group writes its sums there (added in group
// order by `reduce_finish`); without, the one group stores the result.
template <typename Value>
__device__ __forceinline__ void reduce_partial_over(const Tensor& out, i64 outs, i64 reduced, i64 chunk, double divisor,
                                                    u64 partials, bool in_float, Value value) {
    __shared__ double part[8][33];
    const i64 o = (i64)blockIdx.x * 32 + threadIdx.x;
    const i64 r0 = (i64)blockIdx.y * chunk, r1 = imin(reduced, r0 + chunk);
    double acc = 0.0;
    if (o < outs) {
        if (in_float) {
            float s = 0.0f;
            for (i64 r = r0 + threadIdx.y; r < r1; r += 8) s += (float)value(o * reduced + r);
            acc = (double)s;
        } else {
            for (i64 r = r0 + threadIdx.y; r < r1; r += 8) acc += value(o * reduced + r);
        }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < outs) {
        double total = 0.0;
        for (int j = 0; j < 8; ++j) total += part[j][threadIdx.x];
        if (partials) {
            ((double*)partials)[(i64)blockIdx.y * outs + o] = total;
        } else {
            store_d(out, o, total / divisor);
        }
    }
}
