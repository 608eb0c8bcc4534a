//! The CUDA executor: a planned step on an NVIDIA GPU in ONE device allocation of the plan's
//! `arena_bytes`, every value a byte-offset view into it. See docs/CUDA.md.
//!
//! Layers, each testable without a GPU except the last; each imports only layers listed
//! before it (and this file's [`CudaError`]), so there is no cycle among them:
//! - `view.rs`: the plain-data vocabulary: addresses (arena or workspace + byte offset),
//!   scratch regions, tensor views (dtype, shape, element strides), kernel arguments,
//!   launches, cuBLAS calls and commands;
//! - `source.rs` and `kernels/`: the CUDA C++ program, one NVRTC compile per process;
//! - `generate.rs`: the kernels generated per step, one per distinct fused body (compiled
//!   once for the step, next to the program);
//! - `gemm.rs`, then `lower.rs`: each op as launches of the program's kernels and cuBLAS
//!   calls (row-major products mapped to column-major cuBLAS, batches folded);
//! - `program.rs`: the whole step lowered and validated (every access inside the arena or
//!   the workspace, every launch within CUDA's limits);
//! - `executor.rs`: runs a program on any [`Backend`](executor::Backend): uploads
//!   arguments, launches, reads results back;
//! - `device.rs` (feature `cuda`): the real backend through cudarc (driver, NVRTC and cuBLAS
//!   loaded at run time), and `run.rs` (feature `cuda`): `memplan run --device cuda`.
//!
//! The tests also run every kernel on the CPU: `tests/cuda_emu` compiles the same program
//! as host C++ and plays the GPU (blocks, threads, barriers and warp shuffles), and
//! `tests/cuda_emulated.rs` holds the whole executor to the CPU reference through it.

pub mod executor;
pub mod gemm;
pub mod generate;
pub mod lower;
pub mod program;
pub mod source;
pub mod view;

#[cfg(feature = "cuda")]
pub mod device;
#[cfg(feature = "cuda")]
pub mod run;

use thiserror::Error;

use crate::exec::ExecError;

/// Why the CUDA executor could not run a step.
#[derive(Debug, Error)]
pub enum CudaError {
    /// The NVIDIA driver library (libcuda) could not be loaded: no GPU driver here.
    #[error("no CUDA driver found (libcuda could not be loaded); `--device cuda` needs an NVIDIA GPU and its driver")]
    NoDriver,

    /// The driver loaded but found no usable GPU.
    #[error("no CUDA device found: {0}")]
    NoDevice(String),

    /// A CUDA library the executor needs (NVRTC, cuBLAS) could not be loaded.
    #[error(
        "the CUDA library {library} could not be loaded; install the CUDA toolkit (or its pip wheels) and add its lib directory to LD_LIBRARY_PATH"
    )]
    MissingLibrary { library: &'static str },

    /// A CUDA driver call failed.
    #[error("CUDA error in {what}: {message}")]
    Driver { what: String, message: String },

    /// NVRTC rejected the kernels (a memplan bug, or an NVRTC too old for this GPU).
    #[error("NVRTC could not compile memplan's kernels for {arch}:\n{log}")]
    Compile { arch: String, log: String },

    /// A cuBLAS call failed.
    #[error("cuBLAS error in {what}: {message}")]
    Cublas { what: String, message: String },

    /// The arena (or the workspace) does not fit in the GPU's free memory.
    #[error("the GPU has {free} bytes free but the {what} needs {needed} bytes")]
    OutOfMemory { what: &'static str, needed: u64, free: u64 },

    /// The step uses something the kernels cannot take (a rank above 8, sizes past 32 bits
    /// where a kernel needs them).
    #[error("the CUDA executor cannot run this step: {0}")]
    Unsupported(String),

    /// A step-level error, as the CPU executor reports it (a missing or mistyped
    /// argument, an index out of range, a plan that does not fit the step).
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl CudaError {
    /// The error with `op` named as where it happened (for driver and cuBLAS errors).
    pub fn in_op(self, op: &str) -> CudaError {
        match self {
            CudaError::Driver { what, message } => CudaError::Driver { what: format!("{op}: {what}"), message },
            CudaError::Cublas { what, message } => CudaError::Cublas { what: format!("{op}: {what}"), message },
            other => other,
        }
    }
}
