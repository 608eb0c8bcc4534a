// clang_prelude.h — what CUDA's headers would declare, for compiling memplan's kernel
// program as CUDA device code with clang alone (no CUDA installation): the execution-space
// attributes, the built-in variables (clang's own header), and the intrinsics and math
// functions the program calls (declarations suffice to emit PTX).
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#include "__clang_cuda_builtin_vars.h"
__device__ inline float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
__device__ inline unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
__device__ float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
__device__ double __shfl_xor_sync(unsigned mask, double v, int lane_mask);
__device__ unsigned long __cvta_generic_to_shared(const void*);
__device__ float expf(float);
__device__ float exp2f(float);
__device__ float logf(float);
__device__ float sqrtf(float);
__device__ float tanhf(float);
__device__ float fmaxf(float, float);
__device__ float fminf(float, float);
__device__ float erff(float);
__device__ double exp(double);
__device__ double log(double);
__device__ double sqrt(double);
__device__ double pow(double, double);
__device__ double fmax(double, double);
__device__ float floorf(float);
__device__ double log1p(double);
