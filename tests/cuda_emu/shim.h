// shim.h — CUDA's device dialect as host C++, so memplan's kernel program (the same text
// NVRTC compiles) builds with a host compiler and runs on the CPU in the tests.
//
// Each block runs alone; its threads are fibers switched at barriers (emu.cpp), so
// `__shared__` variables can simply be statics: one block at a time owns them.
// `threadIdx` etc. are globals the scheduler sets before it resumes a fiber.
#pragma once
#include <math.h>
#include <string.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
};

extern dim3 threadIdx, blockIdx, blockDim, gridDim;

void __syncthreads();
double emu_shfl_xor(double v, int lane_mask);
// One warp-wide mma.sync m16n8k16 (f16 or bf16 operands, float accumulators): every lane
// of the warp passes its fragments and gets its part of d (emu.cpp).
void emu_mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], bool bf16);

inline float __shfl_xor_sync(unsigned, float v, int lane_mask) { return (float)emu_shfl_xor(v, lane_mask); }
inline double __shfl_xor_sync(unsigned, double v, int lane_mask) { return emu_shfl_xor(v, lane_mask); }

inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
