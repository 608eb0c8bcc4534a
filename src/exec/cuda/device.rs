//! The GPU backend (feature `cuda`): one CUDA context and one stream on device 0, ONE device
//! allocation of the plan's `arena_bytes`, one workspace (cuBLAS's, also the ops' scratch),
//! the kernel program compiled by NVRTC once per process, the step's generated kernels (its
//! fused and elementwise ops') compiled once per distinct text, and cuBLAS for matmuls.
//! Compiled PTX is kept on disk (`$MEMPLAN_CACHE_DIR`, else `~/.cache/memplan`), so only
//! the first run of a build pays NVRTC (18 s for the program on 2 cores, 0.03 s read back).
//!
//! cudarc loads libcuda, NVRTC and cuBLAS at run time (`dynamic-loading`), so a machine
//! without them still runs memplan: [`CudaBackend::new`] first asks cudarc whether each
//! library can be loaded and answers [`CudaError::NoDriver`] or
//! [`CudaError::MissingLibrary`]; cudarc panics when a library or symbol is missing, so the
//! first driver call also runs under `catch_unwind` with the panic message silenced.
//!
//! Memory is measured, not assumed: free device memory is read before and after each
//! allocation (the arena, the workspace) and around creating the cuBLAS handle and loading
//! the kernels ([`MemoryReport`]).
//!
//! Set `MEMPLAN_CUDA_SYNC=1` to wait for every launch, so an asynchronous kernel error names
//! the op that caused it.

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use cudarc::cublas::{CudaBlas, result as blas_result, sys as blas};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaModule, CudaStream, DeviceRepr, DriverError, LaunchConfig, PushKernelArg,
    result, sys,
};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};

use crate::exec::cuda::CudaError;
use crate::exec::cuda::executor::Backend;
use crate::exec::cuda::source::{KERNELS, program};
use crate::exec::cuda::generate::Generated;
use crate::exec::cuda::view::{Bases, DeviceTensor, GemmCall, Geom, Kernel, Launch, ResolvedArg};
use crate::ir::types::DType;

// SAFETY: both are #[repr(C)] plain data whose layouts equal the program's `struct Tensor`
// and `struct Geom` (sizes asserted in view.rs and common.cuh); kernels take them by value.
unsafe impl DeviceRepr for DeviceTensor {}
// SAFETY: see above.
unsafe impl DeviceRepr for Geom {}

/// What the GPU is.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    /// The driver's CUDA version, e.g. (13, 0).
    pub driver: (i32, i32),
    pub total_bytes: u64,
}

/// Device memory: what the plan asked for and what the allocations took (free memory
/// before minus after each).
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryReport {
    pub arena_planned: u64,
    pub arena_measured: u64,
    /// The workspace's size: the larger of cuBLAS's recommended workspace and the ops' scratch.
    pub workspace_bytes: u64,
    pub workspace_measured: u64,
    /// The ops' largest scratch (inside the workspace).
    pub scratch_bytes: u64,
    /// Loading the kernel modules (the program and the step's generated kernels) and creating the cuBLAS handle.
    pub other_measured: u64,
    /// Free device memory once everything is allocated.
    pub free_after: u64,
}

/// cuBLAS's recommended workspace: 32 MiB on Hopper (compute capability 9) and later,
/// 4 MiB before.
fn cublas_workspace(cc: (i32, i32)) -> u64 {
    if cc.0 >= 9 { 32 << 20 } else { 4 << 20 }
}

/// Runs `f`, turning a panic (cudarc panics when a library or symbol is missing) into
/// `None` without printing it. The panic hook is process-wide: while `f` runs, panics of
/// other threads still reach the previous hook, and callers take turns.
fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    static TURN: Mutex<()> = Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let me = std::thread::current().id();
    let previous: Arc<dyn Fn(&std::panic::PanicHookInfo<'_>) + Send + Sync> = Arc::from(std::panic::take_hook());
    let others = previous.clone();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() != me {
            others(info)
        }
    }));
    let result = catch_unwind(AssertUnwindSafe(f));
    drop(std::panic::take_hook());
    std::panic::set_hook(Box::new(move |info| previous(info)));
    result.ok()
}

fn driver(what: &str) -> impl Fn(DriverError) -> CudaError + '_ {
    move |e| CudaError::Driver { what: what.to_string(), message: e.to_string() }
}

/// The context of device 0, or why there is none.
fn context() -> Result<Arc<CudaContext>, CudaError> {
    // SAFETY: only tries to dlopen the driver library; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::NoDriver);
    }
    match quietly(|| CudaContext::new(0)) {
        None => Err(CudaError::NoDriver),
        Some(Ok(ctx)) => Ok(ctx),
        Some(Err(e)) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(CudaError::NoDevice(e.to_string())),
        Some(Err(e)) => Err(CudaError::NoDevice(format!("the driver could not open device 0: {e}"))),
    }
}

/// The PTX of `source` (the program, or a step's generated kernels; `name` names it in
/// compiler messages) for `arch` (`compute_90`): compiled once per process, and kept on disk
/// ([`cache_dir`]) so that later runs of the same program skip NVRTC (tens of seconds for
/// the whole program; the driver then finds its own compiled code in its cache too).
fn ptx(arch: &str, source: String, name: &str) -> Result<Ptx, CudaError> {
    static CACHE: Mutex<Option<HashMap<(String, String), Ptx>>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = (arch.to_string(), source);
    if let Some(ptx) = cache.as_ref().and_then(|c| c.get(&key)) {
        return Ok(ptx.clone());
    }
    let options = vec![format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
    let disk_key = format!("{}\n{}\n{}", nvrtc_version(), options.join(" "), key.1);
    let text = cached_on_disk(cache_dir().as_deref(), &disk_key, || -> Result<String, CudaError> {
        let options = CompileOptions { options, name: Some(name.to_string()), ..CompileOptions::default() };
        let compiled = quietly(|| compile_ptx_with_opts(&key.1, options))
            .ok_or(CudaError::MissingLibrary { library: "NVRTC (libnvrtc)" })?;
        let ptx = compiled.map_err(|e| CudaError::Compile {
            arch: arch.to_string(),
            log: match e {
                CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                other => format!("{other:?}"),
            },
        })?;
        Ok(ptx.to_src())
    })?;
    let ptx = Ptx::from_src(text);
    cache.get_or_insert_with(HashMap::new).insert(key, ptx.clone());
    Ok(ptx)
}

/// NVRTC's version as `major.minor` (part of the disk cache's key: another NVRTC may
/// compile the same text to other PTX), or `unknown`.
fn nvrtc_version() -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through valid pointers; cudarc loads NVRTC on
    // first use (and panics without it: the panic is caught, the version is unknown).
    let got = quietly(|| unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) });
    match got {
        Some(cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS) => format!("{major}.{minor}"),
        _ => "unknown".to_string(),
    }
}

/// Where compiled PTX is kept between runs: `$MEMPLAN_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/memplan`, else `~/.cache/memplan` (its `ptx/` directory); `None`
/// without any (no cache, every run compiles).
fn cache_dir() -> Option<std::path::PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let base = var("MEMPLAN_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("memplan")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("memplan")))?;
    Some(base.join("ptx"))
}

/// The text `compile` makes for `key`, read from `dir` when an earlier call wrote it there,
/// else compiled and written (best effort: a cache that cannot be read or written only
/// costs the compilation). Files are named by two 64-bit hashes of the key and begin with
/// the key's length, checked on reading; each is written whole under a temporary name, then
/// renamed, so a reader never sees half of one.
fn cached_on_disk<E>(
    dir: Option<&std::path::Path>,
    key: &str,
    compile: impl FnOnce() -> Result<String, E>,
) -> Result<String, E> {
    let header = format!("// memplan PTX cache: key of {} bytes\n", key.len());
    let file = dir.map(|dir| dir.join(format!("{:016x}{:016x}.ptx", fnv1a(key, 0xcbf2_9ce4_8422_2325), fnv1a(key, 0x8422_2325_cbf2_9ce4))));
    if let Some(text) = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok())
        && let Some(ptx) = text.strip_prefix(&header)
    {
        return Ok(ptx.to_string());
    }
    let ptx = compile()?;
    if let (Some(dir), Some(file)) = (dir, file) {
        let temporary = file.with_extension(format!("tmp{}", std::process::id()));
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&temporary, format!("{header}{ptx}")))
            .and_then(|()| std::fs::rename(&temporary, &file));
        if written.is_err() {
            std::fs::remove_file(&temporary).ok();
        }
    }
    Ok(ptx)
}

/// FNV-1a over `text` from `basis`: stable across builds and runs, as a file name must be.
fn fnv1a(text: &str, basis: u64) -> u64 {
    text.bytes().fold(basis, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// One raw device allocation, freed on drop.
struct Allocation {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    bytes: u64,
}

impl Allocation {
    /// `bytes` of device memory (none for 0 bytes: address 0, never dereferenced) and the
    /// free memory it took.
    fn new(ctx: &Arc<CudaContext>, bytes: u64, what: &'static str) -> Result<(Allocation, u64), CudaError> {
        let (free_before, _) = ctx.mem_get_info().map_err(driver("cuMemGetInfo"))?;
        if bytes > free_before as u64 {
            return Err(CudaError::OutOfMemory { what, needed: bytes, free: free_before as u64 });
        }
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: the context is current (mem_get_info bound it); the memory is
            // uninitialised, which is fine: executors poison or write it before reading.
            unsafe { result::malloc_sync(bytes as usize) }.map_err(driver(what))?
        };
        let (free_after, _) = ctx.mem_get_info().map_err(driver("cuMemGetInfo"))?;
        // Free memory can also grow meanwhile (another process frees some): then 0 is measured.
        Ok((Allocation { ctx: ctx.clone(), ptr, bytes }, free_before.saturating_sub(free_after) as u64))
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.ptr != 0 && self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from malloc_sync and is freed once; the stream is
            // synchronised by the backend's drop before (no kernel still uses it).
            unsafe { result::free_sync(self.ptr) }.ok();
        }
    }
}

/// The GPU as an executor [`Backend`].
pub struct CudaBackend {
    // Field order is drop order: cuBLAS, then the allocations, before the stream and context.
    blas: CudaBlas,
    arena: Allocation,
    workspace: Allocation,
    functions: HashMap<&'static str, CudaFunction>,
    /// The step's generated kernels: `fused_{n}` at `n`.
    generated: Vec<CudaFunction>,
    _modules: Vec<Arc<CudaModule>>,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    sync_each: bool,
    pub info: DeviceInfo,
    pub memory: MemoryReport,
}

impl CudaBackend {
    /// Opens device 0, compiles (or reuses) the kernels and the step's `generated` ones,
    /// creates the cuBLAS handle, and allocates the arena (`arena_bytes`) and the workspace
    /// (at least `scratch_bytes`).
    pub fn new(arena_bytes: u64, scratch_bytes: u64, generated: &Generated) -> Result<CudaBackend, CudaError> {
        let ctx = context()?;
        // SAFETY: each call only dlopens a library; no symbol is called.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::MissingLibrary { library: "NVRTC (libnvrtc)" });
        }
        // SAFETY: see above.
        if !unsafe { blas::is_culib_present() } {
            return Err(CudaError::MissingLibrary { library: "cuBLAS (libcublas)" });
        }
        let attribute = |a| ctx.attribute(a).map_err(driver("cuDeviceGetAttribute"));
        let cc = ctx.compute_capability().map_err(driver("compute capability"))?;
        let mut version = 0;
        // SAFETY: cuDriverGetVersion writes one int.
        unsafe { sys::cuDriverGetVersion(&mut version) }.result().map_err(driver("cuDriverGetVersion"))?;
        let info = DeviceInfo {
            name: ctx.name().map_err(driver("cuDeviceGetName"))?,
            compute_capability: cc,
            multiprocessors: attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            driver: (version / 1000, version % 1000 / 10),
            total_bytes: ctx.total_mem().map_err(driver("cuDeviceTotalMem"))? as u64,
        };
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;

        let (free_before, _) = ctx.mem_get_info().map_err(driver("cuMemGetInfo"))?;
        let arch = format!("compute_{}{}", cc.0, cc.1);
        let module =
            ctx.load_module(ptx(&arch, program(), "memplan_kernels.cu")?).map_err(driver("cuModuleLoadData"))?;
        let mut functions = HashMap::new();
        for name in KERNELS {
            functions.insert(name, module.load_function(name).map_err(driver(name))?);
        }
        let mut modules = vec![module];
        let mut generated_functions = Vec::new();
        if let Some(source) = generated.source() {
            let module =
                ctx.load_module(ptx(&arch, source, "memplan_fused_kernels.cu")?).map_err(driver("cuModuleLoadData"))?;
            for name in generated.names() {
                generated_functions.push(module.load_function(&name).map_err(driver(&name))?);
            }
            modules.push(module);
        }
        let blas = quietly(|| CudaBlas::new(stream.clone()))
            .ok_or(CudaError::MissingLibrary { library: "cuBLAS (libcublas)" })?
            .map_err(|e| CudaError::Cublas { what: "cublasCreate".into(), message: e.to_string() })?;
        let (free_after, _) = ctx.mem_get_info().map_err(driver("cuMemGetInfo"))?;

        let (arena, arena_measured) = Allocation::new(&ctx, arena_bytes, "arena")?;
        let workspace_bytes = cublas_workspace(cc).max(scratch_bytes);
        let (workspace, workspace_measured) = Allocation::new(&ctx, workspace_bytes, "workspace")?;
        // SAFETY: the handle is live and is destroyed before the workspace is freed (field
        // order of CudaBackend). cuBLAS uses the workspace only during calls on our stream,
        // and our kernels use it only between those calls on the same stream.
        unsafe { blas::cublasSetWorkspace_v2(*blas.handle(), workspace.ptr as *mut c_void, workspace_bytes as usize) }
            .result()
            .map_err(|e| CudaError::Cublas { what: "cublasSetWorkspace".into(), message: e.to_string() })?;
        let (free, _) = ctx.mem_get_info().map_err(driver("cuMemGetInfo"))?;
        let memory = MemoryReport {
            arena_planned: arena_bytes,
            arena_measured,
            workspace_bytes,
            workspace_measured,
            scratch_bytes,
            other_measured: free_before.saturating_sub(free_after) as u64,
            free_after: free as u64,
        };
        let sync_each = std::env::var("MEMPLAN_CUDA_SYNC").is_ok_and(|v| v == "1");
        Ok(CudaBackend {
            blas,
            arena,
            workspace,
            functions,
            generated: generated_functions,
            _modules: modules,
            stream,
            ctx,
            sync_each,
            info,
            memory,
        })
    }

    /// An event recorded on the stream now, for timing (cudarc's default flags would
    /// disable timing).
    pub fn record(&self) -> Result<CudaEvent, CudaError> {
        let event = self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver("cuEventCreate"))?;
        event.record(&self.stream).map_err(driver("cuEventRecord"))?;
        Ok(event)
    }

    /// Starts recording the stream's work into a CUDA graph instead of running it: the
    /// launches and cuBLAS calls queued until [`CudaBackend::end_capture`] become the
    /// graph's nodes, with the arguments they had (the arena and workspace addresses never
    /// change, so the graph replays the same step).
    pub fn begin_capture(&mut self) -> Result<(), CudaError> {
        // A synchronisation is not allowed while capturing.
        self.sync_each = false;
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("cuStreamBeginCapture"))
    }

    /// Ends the capture begun by [`CudaBackend::begin_capture`] and instantiates the graph
    /// (`None` when nothing was captured).
    pub fn end_capture(&mut self) -> Result<Option<CudaGraph>, CudaError> {
        self.sync_each = std::env::var("MEMPLAN_CUDA_SYNC").is_ok_and(|v| v == "1");
        self.stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(driver("cuStreamEndCapture"))
    }

    /// Queues one replay of `graph` on the stream.
    pub fn launch_graph(&mut self, graph: &CudaGraph) -> Result<(), CudaError> {
        graph.launch().map_err(driver("cuGraphLaunch"))?;
        self.after_launch("cuGraphLaunch")
    }

    fn after_launch(&self, what: &str) -> Result<(), CudaError> {
        if self.sync_each { self.stream.synchronize().map_err(driver(what)) } else { Ok(()) }
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Nothing may still run on the allocations when they are freed.
        self.stream.synchronize().ok();
    }
}

impl Backend for CudaBackend {
    fn bases(&self) -> Bases {
        Bases { arena: self.arena.ptr, workspace: self.workspace.ptr }
    }

    fn upload(&mut self, offset: u64, bytes: &[u8]) -> Result<(), CudaError> {
        assert!(offset + bytes.len() as u64 <= self.arena.bytes, "uploads stay inside the arena");
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: the destination range lies inside the arena (asserted); `bytes` stays
        // alive until the stream is synchronised below.
        unsafe { result::memcpy_htod_async(self.arena.ptr + offset, bytes, self.stream.cu_stream()) }
            .map_err(driver("upload"))?;
        self.stream.synchronize().map_err(driver("upload"))
    }

    fn download(&mut self, offset: u64, out: &mut [u8]) -> Result<(), CudaError> {
        assert!(offset + out.len() as u64 <= self.arena.bytes, "downloads stay inside the arena");
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: the source range lies inside the arena (asserted); `out` stays alive
        // until the stream is synchronised below.
        unsafe { result::memcpy_dtoh_async(out, self.arena.ptr + offset, self.stream.cu_stream()) }
            .map_err(driver("download"))?;
        self.stream.synchronize().map_err(driver("download"))
    }

    fn fill_arena(&mut self, word: u32) -> Result<(), CudaError> {
        let (words, tail) = (self.arena.bytes / 4, self.arena.bytes % 4);
        // SAFETY: both memsets cover exactly the arena's bytes, on our stream.
        unsafe {
            if words > 0 {
                sys::cuMemsetD32Async(self.arena.ptr, word, words as usize, self.stream.cu_stream())
                    .result()
                    .map_err(driver("poison"))?;
            }
            if tail > 0 {
                sys::cuMemsetD8Async(
                    self.arena.ptr + words * 4,
                    word.to_le_bytes()[0],
                    tail as usize,
                    self.stream.cu_stream(),
                )
                .result()
                .map_err(driver("poison"))?;
            }
        }
        self.stream.synchronize().map_err(driver("poison"))
    }

    fn launch(&mut self, launch: &Launch, args: &[ResolvedArg]) -> Result<(), CudaError> {
        let function = match launch.kernel {
            Kernel::Program(name) => self.functions.get(name),
            Kernel::Generated(n) => self.generated.get(n as usize),
        };
        let function = function.ok_or_else(|| CudaError::Driver {
            what: launch.kernel.to_string(),
            message: "no such kernel in the program".into(),
        })?;
        let mut builder = self.stream.launch_builder(function);
        for arg in args {
            match arg {
                ResolvedArg::Tensor(t) => builder.arg(t),
                ResolvedArg::U64(x) => builder.arg(x),
                ResolvedArg::I32(x) => builder.arg(x),
                ResolvedArg::I64(x) => builder.arg(x),
                ResolvedArg::F64(x) => builder.arg(x),
                ResolvedArg::Geom(g) => builder.arg(g),
            };
        }
        let [gx, gy, gz] = launch.grid;
        let [bx, by, bz] = launch.block;
        let config = LaunchConfig { grid_dim: (gx, gy, gz), block_dim: (bx, by, bz), shared_mem_bytes: 0 };
        let failed = |e: DriverError| CudaError::Driver { what: launch.kernel.to_string(), message: e.to_string() };
        // SAFETY: the arguments are, in order, of the kernel's parameter types (the program
        // tests check every launch of the corpus, and of its generated kernels, against the
        // kernels' signatures); every tensor and scratch address lies inside the arena or the
        // workspace, which outlive the launch (Program::new validated the spans,
        // Executor::run resolved them with these bases); the grid and block fit CUDA's
        // limits (validated too).
        unsafe { builder.launch(config) }.map_err(failed)?;
        if self.sync_each { self.stream.synchronize().map_err(failed) } else { Ok(()) }
    }

    fn gemm(&mut self, call: &GemmCall) -> Result<(), CudaError> {
        let data = match call.dtype {
            DType::F32 => blas::cudaDataType::CUDA_R_32F,
            DType::F16 => blas::cudaDataType::CUDA_R_16F,
            DType::Bf16 => blas::cudaDataType::CUDA_R_16BF,
            other => return Err(CudaError::Unsupported(format!("a cuBLAS matmul of {other}"))),
        };
        let op = |t: bool| if t { blas::cublasOperation_t::CUBLAS_OP_T } else { blas::cublasOperation_t::CUBLAS_OP_N };
        let bases = self.bases();
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: A, B and C lie inside the arena with the spans GemmCall::spans gives
        // (validated by Program::new); leading dimensions and strides are those the mapping
        // derived (unit-tested against the CPU kernel through GemmCall::run_on_host); alpha
        // and beta are host f32 values, as CUBLAS_COMPUTE_32F with the default host pointer
        // mode expects.
        unsafe {
            blas_result::gemm_strided_batched_ex(
                *self.blas.handle(),
                op(call.trans_a),
                op(call.trans_b),
                call.m,
                call.n,
                call.k,
                &alpha as *const f32 as *const c_void,
                call.a.resolve(bases) as *const c_void,
                data,
                call.lda,
                call.stride_a,
                call.b.resolve(bases) as *const c_void,
                data,
                call.ldb,
                call.stride_b,
                &beta as *const f32 as *const c_void,
                call.c.resolve(bases) as *mut c_void,
                data,
                call.ldc,
                call.stride_c,
                call.batch,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| CudaError::Cublas { what: "cublasGemmStridedBatchedEx".into(), message: e.to_string() })?;
        self.after_launch("cublasGemmStridedBatchedEx")
    }

    fn synchronize(&mut self) -> Result<(), CudaError> {
        self.stream.synchronize().map_err(driver("cuStreamSynchronize"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiled text is kept on disk by its key: a second run reads it without compiling,
    /// another key compiles, a damaged file is compiled again and replaced, a failed
    /// compilation writes nothing, and a cache that cannot be written only costs the
    /// compilation.
    #[test]
    fn compiled_ptx_is_kept_on_disk_by_its_key() {
        let dir = std::env::temp_dir().join(format!("memplan-ptx-cache-test-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        let ok = |text: &str| -> Result<String, String> { Ok(text.to_string()) };
        let never = || -> Result<String, String> { panic!("compiled although cached") };
        assert_eq!(cached_on_disk(Some(&dir), "12.8\nsource a", || ok("ptx a")), Ok("ptx a".to_string()));
        assert_eq!(cached_on_disk(Some(&dir), "12.8\nsource a", never), Ok("ptx a".to_string()));
        assert_eq!(cached_on_disk(Some(&dir), "13.0\nsource a", || ok("ptx a13")), Ok("ptx a13".to_string()));
        assert_eq!(cached_on_disk(Some(&dir), "13.0\nsource a", never), Ok("ptx a13".to_string()));
        let files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 2, "{files:?}: no temporary file left");
        for file in &files {
            std::fs::write(file, "truncated").unwrap();
        }
        assert_eq!(cached_on_disk(Some(&dir), "12.8\nsource a", || ok("ptx a again")), Ok("ptx a again".to_string()));
        assert_eq!(cached_on_disk(Some(&dir), "12.8\nsource a", never), Ok("ptx a again".to_string()));
        let failed = cached_on_disk(Some(&dir), "12.8\nsource b", || Err("syntax error".to_string()));
        assert_eq!(failed, Err("syntax error".to_string()));
        assert_eq!(cached_on_disk(Some(&dir), "12.8\nsource b", || ok("ptx b")), Ok("ptx b".to_string()));
        // No cache, or one that cannot be made (a file where the directory would be).
        assert_eq!(cached_on_disk(None, "12.8\nsource a", || ok("fresh")), Ok("fresh".to_string()));
        let blocked = dir.join("blocked");
        std::fs::write(&blocked, "a file").unwrap();
        assert_eq!(cached_on_disk(Some(&blocked.join("ptx")), "k", || ok("fresh")), Ok("fresh".to_string()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn workspace_follows_the_architecture() {
        assert_eq!(cublas_workspace((9, 0)), 32 << 20);
        assert_eq!(cublas_workspace((8, 6)), 4 << 20);
    }

    #[test]
    fn quietly_turns_panics_into_none() {
        assert_eq!(quietly(|| 3), Some(3));
        assert_eq!(quietly(|| -> i32 { panic!("a missing library") }), None);
    }

    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        match CudaBackend::new(1024, 0, &Generated::default()) {
            Ok(backend) => {
                eprintln!("a GPU is present here ({}): the no-driver path is not exercised", backend.info.name)
            }
            Err(e) => {
                eprintln!("skipping the GPU part: {e}");
                assert!(
                    matches!(e, CudaError::NoDriver | CudaError::NoDevice(_) | CudaError::MissingLibrary { .. }),
                    "{e}"
                );
            }
        }
    }
}
