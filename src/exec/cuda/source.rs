//! The CUDA C++ program of the executor: its source files, the kernels it defines, the op
//! codes shared with it, and which kernels run each op of the op table.
//!
//! The program is the constants it shares with the Rust side, generated from [`SHARED`]
//! (op codes, modes, dtype codes, tile sizes that fix launch shapes: one definition, so
//! the two sides cannot drift apart), then the files under `kernels/` concatenated
//! ([`program`]): `common.cuh` first (descriptor, conversions, loads and stores,
//! reductions), `element.cuh` (the elementwise ops' element functions), `norm.cuh` (a row of
//! layer_norm and of rms_norm), then one file per concern. NVRTC compiles it once per process (`device.rs`); the tests compile the same
//! text as host C++ and run it (`tests/cuda_emu`).
//!
//! A step with fused ops also has a program of its own ([`generated_program`]): the
//! constants, `common.cuh`, `element.cuh` and `norm.cuh`, then one kernel per distinct fused body
//! (`generate.rs`), compiled when the step's backend is made.

use crate::exec::cuda::view::{self, dtype_code};
use crate::ir::ops::OpKind;
use crate::ir::types::DType;

/// The kernel files, in program order.
pub const FILES: [(&str, &str); 9] = [
    ("common.cuh", include_str!("kernels/common.cuh")),
    ("element.cuh", include_str!("kernels/element.cuh")),
    ("norm.cuh", include_str!("kernels/norm.cuh")),
    ("elementwise.cu", include_str!("kernels/elementwise.cu")),
    ("rows.cu", include_str!("kernels/rows.cu")),
    ("reduce.cu", include_str!("kernels/reduce.cu")),
    ("conv.cu", include_str!("kernels/conv.cu")),
    ("attention.cu", include_str!("kernels/attention.cu")),
    ("resample.cu", include_str!("kernels/resample.cu")),
];

/// The whole program: the shared constants ([`constants`]), then the files, with a `#line`
/// before each part so compiler messages name it.
pub fn program() -> String {
    with_constants(&FILES)
}

/// The program of a step's generated kernels (`kernels`, whole definitions): the shared
/// constants and the three headers every kernel may call (`common.cuh`, `element.cuh`,
/// `norm.cuh`), then the kernels.
pub fn generated_program(kernels: &[String]) -> String {
    let mut text = with_constants(&FILES[..3]);
    text.push_str("#line 1 \"fused kernels (generated)\"\n");
    for kernel in kernels {
        text.push_str(kernel);
        text.push('\n');
    }
    text
}

/// [`constants`], then `files`, each after a `#line`.
fn with_constants(files: &[(&str, &str)]) -> String {
    let mut text = String::from("#line 1 \"constants (generated)\"\n");
    text.push_str(&constants());
    for (name, body) in files {
        text.push_str(&format!("#line 1 \"{name}\"\n"));
        text.push_str(body);
        text.push('\n');
    }
    text
}

// Kernel names (`extern "C" __global__ void NAME(...)` in the program).
pub const BINARY: &str = "binary";
pub const UNARY: &str = "unary";
pub const FILL: &str = "fill";
pub const SLICE_BACKWARD: &str = "slice_backward";
pub const CAUSAL_MASK: &str = "causal_mask";
pub const SGD_MOMENTUM: &str = "sgd_momentum";
pub const ADAM: &str = "adam";
pub const SOFTMAX: &str = "softmax";
pub const SOFTMAX_BACKWARD: &str = "softmax_backward";
pub const LAYER_NORM: &str = "layer_norm";
pub const LN_STATS: &str = "ln_stats";
pub const LN_GRAD_PARAMS: &str = "ln_grad_params";
pub const LN_GRAD_PARAMS_FINISH: &str = "ln_grad_params_finish";
pub const LAYER_NORM_BACKWARD_DX: &str = "layer_norm_backward_dx";
pub const RMS_NORM: &str = "rms_norm";
pub const RMS_STATS: &str = "rms_stats";
pub const RMS_GRAD_GAMMA_FINISH: &str = "rms_grad_gamma_finish";
pub const RMS_NORM_BACKWARD_DX: &str = "rms_norm_backward_dx";
pub const CE_ROWS: &str = "ce_rows";
pub const CE_COUNT: &str = "ce_count";
pub const CE_MEAN: &str = "ce_mean";
pub const CE_BACKWARD: &str = "ce_backward";
pub const EMBEDDING: &str = "embedding";
pub const EMBEDDING_BACKWARD: &str = "embedding_backward";
pub const REDUCE_PARTIAL: &str = "reduce_partial";
pub const REDUCE_FINISH: &str = "reduce_finish";
pub const BN_PARTIAL: &str = "bn_partial";
pub const BN_FINISH: &str = "bn_finish";
pub const BN_APPLY: &str = "bn_apply";
pub const BN_BACKWARD_DX: &str = "bn_backward_dx";
pub const BN_STATS: &str = "bn_stats";
pub const IGEMM: &str = "igemm";
pub const IGEMM_F32: &str = "igemm_f32";
pub const IGEMM_FINISH: &str = "igemm_finish";
pub const MAX_POOL2D: &str = "max_pool2d";
pub const MAX_POOL2D_BACKWARD: &str = "max_pool2d_backward";
pub const ATTENTION: &str = "attention";
pub const ATTENTION_BACKWARD_DQ: &str = "attention_backward_dq";
pub const ATTENTION_BACKWARD_DKV: &str = "attention_backward_dkv";
pub const ATTENTION_TC: &str = "attention_tc";
pub const ATTENTION_BACKWARD_DQ_TC: &str = "attention_backward_dq_tc";
pub const ATTENTION_BACKWARD_DKV_TC: &str = "attention_backward_dkv_tc";
pub const ATTENTION_BIAS_BACKWARD: &str = "attention_bias_backward";
pub const CUMSUM: &str = "cumsum";
pub const ARGMAX: &str = "argmax";
pub const TOPK: &str = "topk";
pub const SCATTER_ADD: &str = "scatter_add";
pub const GATHER: &str = "gather";
pub const GATHER_BACKWARD: &str = "gather_backward";
pub const DROPOUT: &str = "dropout";
pub const RANDOM_FILL: &str = "random_fill";
pub const CONV3D: &str = "conv3d";
pub const GRID_SAMPLE: &str = "grid_sample";
pub const EMBEDDING_BAG: &str = "embedding_bag";
pub const EMBEDDING_BAG_BACKWARD: &str = "embedding_bag_backward";
pub const GRID_SAMPLE_BACKWARD_DATA: &str = "grid_sample_backward_data";
pub const GRID_SAMPLE_BACKWARD_GRID: &str = "grid_sample_backward_grid";
pub const CONV3D_BACKWARD_DATA: &str = "conv3d_backward_data";
pub const CONV3D_BACKWARD_WEIGHT: &str = "conv3d_backward_weight";
pub const ADAPTIVE_AVG_POOL2D: &str = "adaptive_avg_pool2d";
pub const ADAPTIVE_AVG_POOL2D_BACKWARD: &str = "adaptive_avg_pool2d_backward";
pub const UPSAMPLE_NEAREST2D: &str = "upsample_nearest2d";
pub const UPSAMPLE_NEAREST2D_BACKWARD: &str = "upsample_nearest2d_backward";
pub const UPSAMPLE_BILINEAR2D: &str = "upsample_bilinear2d";
pub const UPSAMPLE_BILINEAR2D_BACKWARD: &str = "upsample_bilinear2d_backward";
pub const BCE_PARTIAL: &str = "bce_partial";
pub const BCE_MEAN: &str = "bce_mean";
pub const BCE_BACKWARD: &str = "bce_backward";
pub const WHERE_SELECT: &str = "where_select";
pub const MASKED_FILL: &str = "masked_fill";

/// Not a kernel of the program: the family of the kernels generated per step for fused ops
/// and for elementwise ops alone (`fused_0`, `fused_1`, ...: [`generated_program`]).
pub const FUSED: &str = view::GENERATED;

/// Not a kernel of the program: a matmul step that cuBLAS runs (a [`GemmCall`]).
///
/// [`GemmCall`]: crate::exec::cuda::view::GemmCall
pub const CUBLAS_GEMM: &str = "cublasGemmStridedBatchedEx";

/// Every kernel the program defines.
pub const KERNELS: [&str; 70] = [
    BINARY,
    UNARY,
    FILL,
    SLICE_BACKWARD,
    CAUSAL_MASK,
    SGD_MOMENTUM,
    ADAM,
    SOFTMAX,
    SOFTMAX_BACKWARD,
    LAYER_NORM,
    LN_STATS,
    LN_GRAD_PARAMS,
    LN_GRAD_PARAMS_FINISH,
    LAYER_NORM_BACKWARD_DX,
    RMS_NORM,
    RMS_STATS,
    RMS_GRAD_GAMMA_FINISH,
    RMS_NORM_BACKWARD_DX,
    CE_ROWS,
    CE_COUNT,
    CE_MEAN,
    CE_BACKWARD,
    EMBEDDING,
    EMBEDDING_BACKWARD,
    REDUCE_PARTIAL,
    REDUCE_FINISH,
    BN_PARTIAL,
    BN_FINISH,
    BN_APPLY,
    BN_BACKWARD_DX,
    BN_STATS,
    IGEMM,
    IGEMM_F32,
    IGEMM_FINISH,
    MAX_POOL2D,
    MAX_POOL2D_BACKWARD,
    ATTENTION,
    ATTENTION_BACKWARD_DQ,
    ATTENTION_BACKWARD_DKV,
    ATTENTION_TC,
    ATTENTION_BACKWARD_DQ_TC,
    ATTENTION_BACKWARD_DKV_TC,
    ATTENTION_BIAS_BACKWARD,
    CUMSUM,
    ARGMAX,
    TOPK,
    SCATTER_ADD,
    GATHER,
    GATHER_BACKWARD,
    DROPOUT,
    RANDOM_FILL,
    CONV3D,
    CONV3D_BACKWARD_DATA,
    CONV3D_BACKWARD_WEIGHT,
    GRID_SAMPLE,
    GRID_SAMPLE_BACKWARD_DATA,
    GRID_SAMPLE_BACKWARD_GRID,
    EMBEDDING_BAG,
    EMBEDDING_BAG_BACKWARD,
    ADAPTIVE_AVG_POOL2D,
    ADAPTIVE_AVG_POOL2D_BACKWARD,
    UPSAMPLE_NEAREST2D,
    UPSAMPLE_NEAREST2D_BACKWARD,
    UPSAMPLE_BILINEAR2D,
    UPSAMPLE_BILINEAR2D_BACKWARD,
    BCE_PARTIAL,
    BCE_MEAN,
    BCE_BACKWARD,
    WHERE_SELECT,
    MASKED_FILL,
];

/// Declares the constants the program shares with the Rust side, and [`SHARED`]: their
/// names and values, which [`constants`] writes as `#define`s ahead of the kernel files.
/// The program has no other definition of them, so the two sides cannot disagree.
macro_rules! shared {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $value:expr;)*) => {
        $($(#[$doc])* pub const $name: $ty = $value;)*
        /// Every constant the program shares with the Rust side, by name.
        pub const SHARED: &[(&str, i64)] = &[$((stringify!($name), $name as i64),)*];
    };
}

shared! {
    // Op codes of `binary` and `unary`.
    OP_ADD: i32 = 0;
    OP_SUB: i32 = 1;
    OP_MUL: i32 = 2;
    OP_DIV: i32 = 3;
    OP_RELU_BACKWARD: i32 = 4;
    OP_GELU_BACKWARD: i32 = 5;
    OP_SGD: i32 = 6;
    OP_ADD_SCALAR: i32 = 10;
    OP_MUL_SCALAR: i32 = 11;
    OP_RELU: i32 = 12;
    OP_GELU: i32 = 13;
    OP_COPY: i32 = 14;
    OP_GELU_EXACT_BACKWARD: i32 = 20;
    OP_SILU_BACKWARD: i32 = 21;
    OP_SIGMOID_BACKWARD: i32 = 22;
    OP_TANH_BACKWARD: i32 = 23;
    OP_HARDSWISH_BACKWARD: i32 = 24;
    OP_HARDSIGMOID_BACKWARD: i32 = 25;
    /// `compare`: s is the relation's code (`Comparison::code`, 0 lt to 5 ne).
    OP_COMPARE: i32 = 26;
    OP_GELU_EXACT: i32 = 30;
    OP_SILU: i32 = 31;
    OP_SIGMOID: i32 = 32;
    OP_TANH: i32 = 33;
    OP_HARDSWISH: i32 = 34;
    OP_POW_SCALAR: i32 = 35;
    OP_NEG: i32 = 36;
    OP_EXP: i32 = 37;
    OP_LOG: i32 = 38;
    OP_SQRT: i32 = 39;
    OP_RSQRT: i32 = 40;
    OP_HARDSIGMOID: i32 = 41;
    OP_SIN: i32 = 42;
    OP_COS: i32 = 43;
    OP_ERF: i32 = 44;
    /// `compare_scalar`: OP_COMPARE_SCALAR + the relation's code (50 lt to 55 ne), s the value.
    OP_COMPARE_SCALAR: i32 = 50;
    /// `element_op`'s three-operand element functions: `where` (a the condition), and
    /// `masked_fill` (a = x, b = the mask, s the value).
    OP_WHERE: i32 = 60;
    OP_MASKED_FILL: i32 = 61;
    // Modes of the implicit-GEMM kernel `igemm` and of the batch-norm kernels.
    MODE_CONV_FWD: i32 = 0;
    MODE_CONV_BWD_DATA: i32 = 1;
    MODE_CONV_BWD_WEIGHT: i32 = 2;
    MODE_MATMUL: i32 = 3;
    BN_MEAN: i32 = 0;
    BN_VAR: i32 = 1;
    BN_GRADS: i32 = 2;
    // Dtype codes of `struct Tensor` (`view::dtype_code`).
    DT_F32: i32 = dtype_code(DType::F32);
    DT_F16: i32 = dtype_code(DType::F16);
    DT_BF16: i32 = dtype_code(DType::Bf16);
    DT_I32: i32 = dtype_code(DType::I32);
    DT_I64: i32 = dtype_code(DType::I64);
    DT_BOOL: i32 = dtype_code(DType::Bool);
    /// The most dimensions of a kernel's tensor.
    MAX_RANK: usize = view::MAX_RANK;
    // Tile sizes of the attention kernels that fix their launches' shapes.
    /// Columns of E or Ev a block stages at a time: blocks split the output columns into
    /// chunks of this many (gridDim.y).
    ATTN_CHUNK: u64 = 64;
    /// Query rows per block of `attention`.
    ATTN_FWD_ROWS: u64 = 64;
    /// Threads per block of `attention`.
    ATTN_FWD_THREADS: u32 = 256;
    /// Query rows per block of `attention_backward_dq`, keys per block of
    /// `attention_backward_dkv`.
    ATTN_BWD_ROWS: u64 = 32;
    /// Threads per block of both backward kernels.
    ATTN_BWD_THREADS: u32 = 128;
    /// Rows a block of the tensor-core attention kernels owns (query rows, or keys in dk/dv).
    TC_ROWS: u64 = 64;
    /// Threads per block of the tensor-core attention kernels (4 warps).
    TC_THREADS: u32 = 128;
    /// The largest head dim (E = Ev, a multiple of 16) of the tensor-core attention kernels.
    TC_E: u64 = 64;
}

/// [`SHARED`] as `#define`s: the first part of the program.
pub fn constants() -> String {
    let mut text = String::from("// Generated from exec/cuda/source.rs (SHARED): the constants the Rust side shares.\n");
    for (name, value) in SHARED {
        text.push_str(&format!("#define {name} {value}\n"));
    }
    text
}

/// The kernels (and cuBLAS) that may run `kind`, in the order an op uses them. Views
/// (reshape, transpose, expand, slice, select) run nothing: they are strides over their
/// input's bytes.
pub fn kernels_for(kind: OpKind) -> &'static [&'static str] {
    use OpKind::*;
    match kind {
        // A kernel generated for the op's element function (generate.rs).
        Add | Sub | Mul | Div | Sgd | Compare => &[FUSED],
        ReluBackward | GeluBackward | SiluBackward | SigmoidBackward | TanhBackward | HardswishBackward | HardsigmoidBackward => {
            &[FUSED]
        }
        AddScalar | MulScalar | PowScalar | Neg | Sin | Cos | Erf | Exp | Log | Sqrt | Rsqrt | Contiguous | Cast | CompareScalar => {
            &[FUSED]
        }
        Relu | Gelu | Silu | Sigmoid | Tanh | Hardswish | Hardsigmoid => &[FUSED],
        Fill => &[FILL],
        CausalMask => &[CAUSAL_MASK],
        Softmax => &[SOFTMAX],
        Cumsum => &[CUMSUM],
        Argmax => &[ARGMAX],
        Topk => &[TOPK],
        ScatterAdd => &[UNARY, SCATTER_ADD],
        SoftmaxBackward => &[SOFTMAX_BACKWARD],
        Matmul => &[CUBLAS_GEMM, IGEMM, IGEMM_F32, FILL],
        Attention => &[ATTENTION, ATTENTION_TC],
        AttentionBackward => &[
            ATTENTION_BACKWARD_DQ,
            ATTENTION_BACKWARD_DKV,
            ATTENTION_BACKWARD_DQ_TC,
            ATTENTION_BACKWARD_DKV_TC,
        ],
        Sum | Mean => &[REDUCE_PARTIAL, REDUCE_FINISH],
        Reshape | Detach | Transpose | Expand | Slice | Select => &[],
        SliceBackward => &[SLICE_BACKWARD],
        SliceScatter => &[UNARY],
        Cat => &[UNARY],
        // Never lowered: a program with extern ops is refused before any launch.
        MaskedAttention | DropoutAttention => &[ATTENTION],
        MaskedAttentionBackward | DropoutAttentionBackward => &[ATTENTION_BACKWARD_DQ, ATTENTION_BACKWARD_DKV],
        AttentionBiasBackward | DropoutAttentionBiasBackward => &[ATTENTION_BIAS_BACKWARD],
        Extern | ExternView | ExternBackward => &[],
        Embedding => &[EMBEDDING],
        Gather => &[GATHER],
        GatherBackward => &[FILL, GATHER_BACKWARD],
        EmbeddingBackward => &[EMBEDDING_BACKWARD],
        LayerNorm => &[LAYER_NORM],
        LayerNormBackward => &[LN_STATS, LN_GRAD_PARAMS, LN_GRAD_PARAMS_FINISH, LAYER_NORM_BACKWARD_DX],
        RmsNorm => &[RMS_NORM],
        RmsNormBackward => &[RMS_STATS, LN_GRAD_PARAMS, RMS_GRAD_GAMMA_FINISH, RMS_NORM_BACKWARD_DX],
        BatchNorm => &[BN_PARTIAL, BN_FINISH, BN_APPLY],
        BatchNormBackward => &[BN_PARTIAL, BN_FINISH, BN_BACKWARD_DX],
        BatchNormStats => &[BN_PARTIAL, BN_FINISH, BN_STATS],
        Conv2d | Conv2dBackward | ConvTranspose2d | ConvTranspose2dBackward => &[IGEMM, IGEMM_F32, IGEMM_FINISH],
        MaxPool2d => &[MAX_POOL2D],
        MaxPool2dBackward => &[MAX_POOL2D_BACKWARD],
        CrossEntropy => &[CE_ROWS, CE_COUNT, CE_MEAN],
        CrossEntropyBackward => &[CE_COUNT, CE_BACKWARD],
        LinearCrossEntropy => {
            &[FILL, CE_COUNT, CUBLAS_GEMM, IGEMM, IGEMM_F32, IGEMM_FINISH, CE_ROWS, CE_BACKWARD, UNARY, BINARY, CE_MEAN]
        }
        SgdMomentum => &[SGD_MOMENTUM],
        Adam | Adamw => &[ADAM],
        Dropout | DropoutBackward => &[DROPOUT],
        Random => &[RANDOM_FILL],
        Conv3d => &[CONV3D],
        Conv3dBackward => &[CONV3D_BACKWARD_DATA, CONV3D_BACKWARD_WEIGHT],
        GridSample => &[GRID_SAMPLE],
        EmbeddingBag => &[EMBEDDING_BAG],
        EmbeddingBagBackward => &[EMBEDDING_BAG_BACKWARD],
        GridSampleBackward => &[GRID_SAMPLE_BACKWARD_DATA, GRID_SAMPLE_BACKWARD_GRID],
        AdaptiveAvgPool2d => &[ADAPTIVE_AVG_POOL2D],
        AdaptiveAvgPool2dBackward => &[ADAPTIVE_AVG_POOL2D_BACKWARD],
        UpsampleNearest2d => &[UPSAMPLE_NEAREST2D],
        UpsampleNearest2dBackward => &[UPSAMPLE_NEAREST2D_BACKWARD],
        UpsampleBilinear2d => &[UPSAMPLE_BILINEAR2D],
        UpsampleBilinear2dBackward => &[UPSAMPLE_BILINEAR2D_BACKWARD],
        BceWithLogits => &[BCE_PARTIAL, BCE_MEAN],
        BceWithLogitsBackward => &[BCE_BACKWARD],
        Where => &[WHERE_SELECT],
        MaskedFill => &[MASKED_FILL],
        Fused => &[FUSED, REDUCE_FINISH],
        FusedNorm => &[FUSED],
    }
}

/// A kernel parameter's type, as the program declares it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Param {
    Tensor,
    Geom,
    /// `u64`: a device address.
    Ptr,
    /// `int`.
    I32,
    /// `i64`.
    I64,
    /// `double`.
    F64,
}

/// How every kernel definition of the program begins; `__launch_bounds__(...)` may follow
/// before the name.
const KERNEL_HEAD: &str = "extern \"C\" __global__ void ";

/// The parameter lists (the text between the parentheses) of the definitions of kernel
/// `name` in `program`.
fn definitions<'a>(program: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    program.match_indices(KERNEL_HEAD).filter_map(move |(at, _)| {
        let rest = &program[at + KERNEL_HEAD.len()..];
        let rest = match rest.strip_prefix("__launch_bounds__(") {
            Some(bounds) => bounds[bounds.find(')')? + 1..].trim_start(),
            None => rest,
        };
        let params = rest.strip_prefix(name)?.strip_prefix('(')?;
        Some(&params[..params.find(')')?])
    })
}

/// The parameter types of kernel `name`, read from the program's text; `None` if the
/// program has no such kernel or declares a parameter of another type.
pub fn signature(name: &str) -> Option<Vec<Param>> {
    signature_in(&program(), name)
}

/// [`signature`] in `program` (a step's [`generated_program`], say).
pub fn signature_in(program: &str, name: &str) -> Option<Vec<Param>> {
    definitions(program, name)
        .next()?
        .split(',')
        .map(|param| {
            let ty = param.split_whitespace().next()?;
            Some(match ty {
                "Tensor" => Param::Tensor,
                "Geom" => Param::Geom,
                "u64" => Param::Ptr,
                "int" => Param::I32,
                "i64" => Param::I64,
                "double" => Param::F64,
                _ => return None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ops::OPS;

    #[test]
    fn every_op_of_the_table_has_a_kernel_mapping() {
        for row in OPS {
            let kernels = kernels_for(row.kind);
            if row.view_of().is_some() || row.kind.is_extern() {
                // Views run nothing; extern ops are refused before lowering.
                assert!(kernels.is_empty(), "{}: runs no kernel", row.name);
            } else {
                assert!(!kernels.is_empty(), "{}: no kernel", row.name);
            }
            for k in kernels.iter().filter(|&&k| k != CUBLAS_GEMM && k != FUSED) {
                assert!(KERNELS.contains(k), "{}: {k} is not a kernel of the program", row.name);
            }
        }
    }

    #[test]
    fn every_kernel_is_defined_once_with_known_parameter_types() {
        let program = program();
        for name in KERNELS {
            assert_eq!(definitions(&program, name).count(), 1, "{name} defined once");
            let params = signature(name).unwrap_or_else(|| panic!("{name}: unreadable signature"));
            assert!(!params.is_empty(), "{name}");
        }
        // And the program defines no kernel the list lacks.
        assert_eq!(program.matches(KERNEL_HEAD).count(), KERNELS.len());
        // Launch bounds are read past (the convolutions have them).
        assert!(program.contains(&format!("{KERNEL_HEAD}__launch_bounds__(256, 4) {IGEMM}(")));
        assert_eq!(signature(IGEMM).map(|p| p.len()), Some(12));
        assert_eq!(signature("no_such_kernel"), None);
        assert_eq!(signature(BINARY), Some(vec![Param::I32, Param::Tensor, Param::Tensor, Param::Tensor, Param::F64]));
    }

    #[test]
    fn the_shared_constants_are_defined_once_ahead_of_the_files() {
        let program = program();
        for (name, value) in SHARED {
            assert_eq!(program.matches(&format!("#define {name} ")).count(), 1, "{name}");
            assert!(program.contains(&format!("#define {name} {value}\n")), "{name}");
        }
        let first_file = program.find("#line 1 \"common.cuh\"").unwrap();
        assert!(program[..first_file].contains("#define OP_ADD 0\n"));
        assert_eq!(SHARED.iter().filter(|(name, _)| name.starts_with("DT_")).count(), DType::ALL.len());
    }

    #[test]
    fn the_program_is_plain_cuda() {
        // No headers (NVRTC has none by default) and no macros the host emulation lacks:
        // the same text compiles as CUDA and as host C++. Inline PTX only on the device
        // side of `#ifdef __CUDA_ARCH__`, whose `#else` is the host emulation's.
        let program = program();
        for banned in ["#include", "asm(", "INFINITY", "NAN", "atomicAdd", "__ldg"] {
            assert!(!program.contains(banned), "the program uses {banned}");
        }
        let (mut device_side, mut has_else, mut region_asm, mut asm) = (false, false, false, 0);
        for line in program.lines().map(str::trim) {
            match line {
                "#ifdef __CUDA_ARCH__" => (device_side, has_else, region_asm) = (true, false, false),
                "#else" if device_side => (device_side, has_else) = (false, true),
                "#endif" => {
                    assert!(!region_asm || has_else, "inline PTX under #ifdef __CUDA_ARCH__ without a host side");
                    device_side = false;
                }
                _ if line.contains("asm volatile") => {
                    assert!(device_side, "inline PTX outside #ifdef __CUDA_ARCH__: {line}");
                    (region_asm, asm) = (true, asm + 1);
                }
                _ => {}
            }
        }
        assert_eq!(asm, 5, "the two mma.sync forms (bf16, f16) and cp.async's copy, commit and wait");
        // Balanced braces and parentheses in every file.
        for (name, body) in FILES {
            for (open, close) in [('{', '}'), ('(', ')'), ('[', ']')] {
                assert_eq!(body.matches(open).count(), body.matches(close).count(), "{name}: {open}{close}");
            }
        }
        assert!(program.starts_with("#line 1 \"constants (generated)\"\n"));
    }
}
