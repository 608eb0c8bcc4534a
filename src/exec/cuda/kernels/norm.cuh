// norm.cuh — one row of layer_norm and of rms_norm, for the norm kernels of rows.cu and
// the generated kernels of fused_norm ops (the same code, so a fused norm gives the unfused
// kernels' bits).
//
// A row is one block's: the threads stride over its D elements (thread t takes t, t +
// blockDim.x, ...), every pass in the same order, so a thread reads back only elements it
// wrote itself (a fused_norm writes its body's value, then normalises it). The statistics
// are block reductions in double (rows.cu says why).

// Mean and 1/√(biased variance + eps) of row `row` (D elements) of x, two passes.
__device__ __forceinline__ void row_moments(const Tensor& x, i64 row, i64 d, double eps, double* mean, double* rstd) {
    const i64 base = row * d;
    double s = 0.0;
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) s += load_d(x, base + i);
    const double mu = block_sum_d(s) / (double)d;
    double v = 0.0;
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
        const double c = load_d(x, base + i) - mu;
        v += c * c;
    }
    const double var = block_sum_d(v) / (double)d;
    *mean = mu;
    *rstd = 1.0 / sqrt(var + eps);
}

// Row `row` of y = (x − mean)·rstd·gamma + beta.
__device__ __forceinline__ void layer_norm_row(const Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                               i64 row, i64 d, double eps) {
    double mean, rstd;
    row_moments(x, row, d, eps, &mean, &rstd);
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
        const i64 k = row * d + i;
        store_d(y, k, (load_d(x, k) - mean) * rstd * load_d(gamma, i) + load_d(beta, i));
    }
}

// 1/√(mean(x²) + eps) of row `row` (D elements) of x.
__device__ __forceinline__ double row_rstd(const Tensor& x, i64 row, i64 d, double eps) {
    const i64 base = row * d;
    double s = 0.0;
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
        const double v = load_d(x, base + i);
        s += v * v;
    }
    return 1.0 / sqrt(block_sum_d(s) / (double)d + eps);
}

// Row `row` of y = x·rstd·gamma.
__device__ __forceinline__ void rms_norm_row(const Tensor& y, const Tensor& x, const Tensor& gamma, i64 row, i64 d,
                                             double eps) {
    const double rstd = row_rstd(x, row, d, eps);
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
        const i64 k = row * d + i;
        store_d(y, k, load_d(x, k) * rstd * load_d(gamma, i));
    }
}
