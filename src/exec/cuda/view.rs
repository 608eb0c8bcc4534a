//! What a launch plan is made of: addresses as byte offsets into the arena or the
//! workspace, scratch regions in the workspace ([`Scratch`]), tensor views (a dtype, a shape
//! and element strides from an address), kernel arguments, launches, cuBLAS calls
//! ([`GemmCall`]) and commands, and the `#[repr(C)]` structs kernels receive.
//!
//! This is the vocabulary the other layers of the CUDA executor share (`gemm`, `lower`,
//! `program`, the executors), so it imports none of them: every layer builds on it without
//! an import cycle.
//!
//! Everything here is plain data without a device: a [`Command`] names its memory by
//! [`Addr`] (arena or workspace + byte offset) and an executor turns those into device
//! addresses with [`Bases`] right before a launch. The structs [`DeviceTensor`] and [`Geom`]
//! have exactly the layout of `struct Tensor` and `struct Geom` in `kernels/common.cuh`
//! (sizes are asserted on both sides).

use crate::ir::types::DType;

/// The most dimensions a kernel's tensor may have (`MAX_RANK` in common.cuh).
pub const MAX_RANK: usize = 8;

/// Threads per block of the elementwise (grid-stride) kernels.
pub const THREADS: u32 = 256;

/// The most blocks a grid-stride launch uses along x; kernels loop over the rest.
pub const MAX_BLOCKS: u64 = 1 << 16;

/// The largest grid extent along y and z.
pub const MAX_GRID_YZ: u64 = 65_535;

/// Which device allocation an address points into.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Space {
    /// The step's one arena of `arena_bytes`.
    Arena,
    /// The executor's workspace: cuBLAS's workspace, and scratch for multi-kernel ops.
    Workspace,
}

/// A byte offset into the arena or the workspace.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Addr {
    pub space: Space,
    pub offset: u64,
}

impl Addr {
    pub fn arena(offset: u64) -> Addr {
        Addr { space: Space::Arena, offset }
    }

    pub fn workspace(offset: u64) -> Addr {
        Addr { space: Space::Workspace, offset }
    }

    /// The device address, given where the arena and the workspace start.
    pub fn resolve(self, bases: Bases) -> u64 {
        match self.space {
            Space::Arena => bases.arena + self.offset,
            Space::Workspace => bases.workspace + self.offset,
        }
    }
}

/// Device addresses of the arena and the workspace.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Bases {
    pub arena: u64,
    pub workspace: u64,
}

/// Alignment of scratch regions in the workspace.
pub const SCRATCH_ALIGN: u64 = 256;

/// Scratch regions of one op in the workspace (a bump allocator; the workspace is as large
/// as the largest op's scratch, and ops run one after another on one stream).
#[derive(Default, Debug)]
pub struct Scratch {
    used: u64,
}

impl Scratch {
    /// A fresh region of `bytes`.
    pub fn alloc(&mut self, bytes: u64) -> Addr {
        let at = self.used.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN;
        self.used = at + bytes;
        Addr::workspace(at)
    }

    /// Bytes of workspace this op needs.
    pub fn used(&self) -> u64 {
        self.used
    }
}

/// A tensor as kernels see it: element `[i0, i1, ...]` lies `Σ ik · strides[k]` elements
/// of `dtype` after `addr`. Views of the IR (reshape, transpose, expand) and broadcasting
/// are strides; nothing is copied.
#[derive(Clone, PartialEq, Debug)]
pub struct View {
    pub addr: Addr,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
}

/// Row-major strides of `shape`.
pub fn dense_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

impl View {
    /// A dense row-major tensor at `addr`.
    pub fn dense(addr: Addr, dtype: DType, shape: &[u64]) -> View {
        View { addr, dtype, shape: shape.to_vec(), strides: dense_strides(shape) }
    }

    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Whether the element at row-major index `i` lies `i` elements after `addr` (dimensions
    /// of extent 1 may have any stride).
    pub fn is_dense(&self) -> bool {
        let dense = dense_strides(&self.shape);
        self.shape.iter().zip(&self.strides).zip(&dense).all(|((&n, &s), &d)| n <= 1 || s == d)
    }

    /// This view read as if broadcast to `shape` (numpy rules, aligned at the right; the
    /// type rules have checked that it broadcasts): stride 0 where it has no such
    /// dimension or extent 1 there.
    pub fn broadcast_to(&self, shape: &[u64]) -> View {
        let offset = shape.len() - self.rank();
        let strides = (0..shape.len())
            .map(|i| match i.checked_sub(offset) {
                Some(j) if self.shape[j] == shape[i] => self.strides[j],
                _ => 0,
            })
            .collect();
        View { addr: self.addr, dtype: self.dtype, shape: shape.to_vec(), strides }
    }

    /// Dimensions reordered: new dimension `i` is old dimension `perm[i]`.
    pub fn permuted(&self, perm: &[usize]) -> View {
        View {
            addr: self.addr,
            dtype: self.dtype,
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
        }
    }

    /// Bytes from `addr` to the end of the last element (0 for an empty view): reads and
    /// writes through this view stay in `addr.offset .. addr.offset + span_bytes()`.
    pub fn span_bytes(&self) -> u64 {
        if self.numel() == 0 {
            return 0;
        }
        let last: u64 = self.shape.iter().zip(&self.strides).map(|(&n, &s)| (n - 1) * s).sum();
        (last + 1) * self.dtype.size()
    }

    /// The struct a kernel receives. `None` when the rank exceeds [`MAX_RANK`] or a stride
    /// or extent exceeds `i64`.
    pub fn device(&self, bases: Bases) -> Option<DeviceTensor> {
        if self.rank() > MAX_RANK {
            return None;
        }
        let mut shape = [1i64; MAX_RANK];
        let mut stride = [0i64; MAX_RANK];
        for (i, (&n, &s)) in self.shape.iter().zip(&self.strides).enumerate() {
            shape[i] = i64::try_from(n).ok()?;
            stride[i] = i64::try_from(s).ok()?;
        }
        Some(DeviceTensor {
            ptr: self.addr.resolve(bases),
            dtype: dtype_code(self.dtype),
            rank: self.rank() as i32,
            numel: i64::try_from(self.numel()).ok()?,
            dense: self.is_dense() as i32,
            pad: 0,
            shape,
            stride,
        })
    }
}

/// The dtype codes of common.cuh (`DT_F32` ...).
pub const fn dtype_code(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
        DType::I32 => 3,
        DType::I64 => 4,
        DType::Bool => 5,
    }
}

/// `struct Tensor` of common.cuh: a view with device address, passed to kernels by value.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DeviceTensor {
    pub ptr: u64,
    pub dtype: i32,
    pub rank: i32,
    pub numel: i64,
    /// 1 when element `i` is at `ptr + i` elements (kernels skip the stride arithmetic).
    pub dense: i32,
    pub pad: i32,
    pub shape: [i64; MAX_RANK],
    pub stride: [i64; MAX_RANK],
}

const _: () = assert!(std::mem::size_of::<DeviceTensor>() == 160);

/// `struct Geom` of common.cuh: the sizes of a convolution's index space (in conv2d's
/// terms) or of a pooling window op, NCHW. `n, h, w`: the input side; `c`: its channels per
/// group; `k`: the output side's channels per group; `r, s`: the window; `p, q`: the output
/// side's height and width; `sh, sw`: strides; `ph, pw`: padding; `dh, dw`: dilation. A
/// pooling op is one group of `c = k` channels with dilation 1.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Geom {
    pub n: i32,
    pub c: i32,
    pub h: i32,
    pub w: i32,
    pub k: i32,
    pub r: i32,
    pub s: i32,
    pub p: i32,
    pub q: i32,
    pub sh: i32,
    pub sw: i32,
    pub ph: i32,
    pub pw: i32,
    pub dh: i32,
    pub dw: i32,
    /// Unused: keeps the size a multiple of 8.
    pub pad: i32,
}

const _: () = assert!(std::mem::size_of::<Geom>() == 64);

/// One kernel argument, in the order of the kernel's parameters.
#[derive(Clone, PartialEq, Debug)]
pub enum Arg {
    /// `Tensor` (by value).
    Tensor(View),
    /// `u64`: a device address (scratch in the workspace).
    Ptr(Addr),
    /// `int`.
    I32(i32),
    /// `i64` (`long long`).
    I64(i64),
    /// `double`.
    F64(f64),
    /// `Geom` (by value).
    Geom(Geom),
    /// `u64` 0: no scratch (a kernel that may write partial sums writes its result).
    Null,
}

/// An argument with its addresses resolved: the bytes a kernel parameter receives.
#[derive(Clone, PartialEq, Debug)]
pub enum ResolvedArg {
    Tensor(DeviceTensor),
    U64(u64),
    I32(i32),
    I64(i64),
    F64(f64),
    Geom(Geom),
}

impl ResolvedArg {
    /// A pointer to the value, as `cuLaunchKernel`'s `kernelParams` holds them. Valid while
    /// `self` is neither moved nor dropped.
    pub fn as_param(&self) -> *mut std::ffi::c_void {
        match self {
            ResolvedArg::Tensor(t) => t as *const DeviceTensor as *mut _,
            ResolvedArg::U64(x) => x as *const u64 as *mut _,
            ResolvedArg::I32(x) => x as *const i32 as *mut _,
            ResolvedArg::I64(x) => x as *const i64 as *mut _,
            ResolvedArg::F64(x) => x as *const f64 as *mut _,
            ResolvedArg::Geom(g) => g as *const Geom as *mut _,
        }
    }
}

/// The family name of the kernels generated per step for fused ops: `fused_0`, `fused_1`, ...
pub const GENERATED: &str = "fused";

/// Which kernel a launch runs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kernel {
    /// A kernel of the program (`source::KERNELS`), by its `extern "C"` name.
    Program(&'static str),
    /// Kernel `fused_{n}` of the step's own generated program (`Program::generated`).
    Generated(u32),
}

impl Kernel {
    /// The program kernel's name, or [`GENERATED`] for every generated kernel.
    pub fn family(self) -> &'static str {
        match self {
            Kernel::Program(name) => name,
            Kernel::Generated(_) => GENERATED,
        }
    }
}

impl std::fmt::Display for Kernel {
    /// The kernel's `extern "C"` name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kernel::Program(name) => f.write_str(name),
            Kernel::Generated(n) => write!(f, "{GENERATED}_{n}"),
        }
    }
}

impl From<&'static str> for Kernel {
    fn from(name: &'static str) -> Kernel {
        Kernel::Program(name)
    }
}

/// One kernel launch.
#[derive(Clone, PartialEq, Debug)]
pub struct Launch {
    pub kernel: Kernel,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<Arg>,
}

impl Launch {
    /// The arguments with device addresses; `None` if a tensor does not fit a kernel's
    /// descriptor (checked when the program is built, so executors never see it).
    pub fn resolve(&self, bases: Bases) -> Option<Vec<ResolvedArg>> {
        self.args
            .iter()
            .map(|arg| {
                Some(match arg {
                    Arg::Tensor(view) => ResolvedArg::Tensor(view.device(bases)?),
                    Arg::Ptr(addr) => ResolvedArg::U64(addr.resolve(bases)),
                    Arg::I32(x) => ResolvedArg::I32(*x),
                    Arg::I64(x) => ResolvedArg::I64(*x),
                    Arg::F64(x) => ResolvedArg::F64(*x),
                    Arg::Geom(g) => ResolvedArg::Geom(*g),
                    Arg::Null => ResolvedArg::U64(0),
                })
            })
            .collect()
    }
}

/// One `cublasGemmStridedBatchedEx` call in cuBLAS's column-major terms: for each batch
/// `z < batch`, `C_z = op(A_z)·op(B_z)` (m×n, inner dimension k) where `X_z` starts
/// `z·stride_x` elements after `x`. Data of `dtype`, f32 accumulation, alpha 1, beta 0.
#[derive(Clone, PartialEq, Debug)]
pub struct GemmCall {
    pub dtype: DType,
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a: Addr,
    pub lda: i32,
    pub stride_a: i64,
    pub b: Addr,
    pub ldb: i32,
    pub stride_b: i64,
    pub c: Addr,
    pub ldc: i32,
    pub stride_c: i64,
    pub batch: i32,
}

impl GemmCall {
    /// The span of bytes each operand touches from its address (for bounds checks):
    /// `(a, b, c)`.
    pub fn spans(&self) -> (u64, u64, u64) {
        let size = self.dtype.size();
        // A stored (rows × cols) column-major with leading dimension ld, in `batch` copies.
        let span = |rows: i32, cols: i32, ld: i32, stride: i64| -> u64 {
            if rows == 0 || cols == 0 || self.batch == 0 {
                return 0;
            }
            let last = (rows as u64 - 1) + (cols as u64 - 1) * ld as u64 + (self.batch as u64 - 1) * stride as u64;
            (last + 1) * size
        };
        let (ar, ac) = if self.trans_a { (self.k, self.m) } else { (self.m, self.k) };
        let (br, bc) = if self.trans_b { (self.n, self.k) } else { (self.k, self.n) };
        (
            span(ar, ac, self.lda, self.stride_a),
            span(br, bc, self.ldb, self.stride_b),
            span(self.m, self.n, self.ldc, self.stride_c),
        )
    }

    /// Runs the call on host memory: cuBLAS's semantics, the specification the tests hold
    /// the mapping to. `read(addr)` gives the element at a byte address, `write` stores one;
    /// sums are taken in f32, as cuBLAS's compute type is.
    pub fn run_on_host(&self, read: &dyn Fn(Addr) -> f64, write: &mut dyn FnMut(Addr, f64)) {
        let size = self.dtype.size();
        let at = |base: Addr, element: i64| Addr { space: base.space, offset: base.offset + element as u64 * size };
        for z in 0..self.batch as i64 {
            for i in 0..self.m as i64 {
                for j in 0..self.n as i64 {
                    let mut acc = 0f32;
                    for p in 0..self.k as i64 {
                        let a = if self.trans_a { p + i * self.lda as i64 } else { i + p * self.lda as i64 };
                        let b = if self.trans_b { j + p * self.ldb as i64 } else { p + j * self.ldb as i64 };
                        let x = read(at(self.a, z * self.stride_a + a)) as f32;
                        let y = read(at(self.b, z * self.stride_b + b)) as f32;
                        acc += x * y;
                    }
                    write(at(self.c, z * self.stride_c + i + j * self.ldc as i64), acc as f64);
                }
            }
        }
    }
}

/// One step of an op's work on the device.
#[derive(Clone, PartialEq, Debug)]
pub enum Command {
    Launch(Launch),
    /// A cuBLAS `cublasGemmStridedBatchedEx` call.
    Gemm(GemmCall),
}

/// A one-dimensional grid-stride launch over `n` elements: `THREADS` threads per block,
/// enough blocks for one element per thread up to [`MAX_BLOCKS`].
pub fn grid_1d(n: u64) -> ([u32; 3], [u32; 3]) {
    let blocks = n.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS);
    ([blocks as u32, 1, 1], [THREADS, 1, 1])
}

/// Threads for a kernel that gives one block to each line of `n` elements (softmax, norms,
/// cross-entropy rows): a multiple of 32 covering the line, from 32 to [`THREADS`]; longer
/// lines take several elements per thread. (Blocks of up to 1024 threads, one element
/// each, spent GPT-2's softmax in block synchronisation: 10 times slower than its bytes.)
pub fn line_threads(n: u64) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, u64::from(THREADS)) as u32
}

/// Blocks for `lines` lines, one block each, up to [`MAX_BLOCKS`] (kernels loop over the rest).
pub fn line_blocks(lines: u64) -> u32 {
    lines.clamp(1, MAX_BLOCKS) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[u64], strides: &[u64]) -> View {
        View { addr: Addr::arena(512), dtype: DType::F32, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn dense_views_and_spans() {
        let v = View::dense(Addr::arena(256), DType::F16, &[2, 3, 4]);
        assert_eq!(v.strides, [12, 4, 1]);
        assert!(v.is_dense());
        assert_eq!(v.span_bytes(), 48);
        // A transpose is not dense; its span is the root's.
        let t = v.permuted(&[0, 2, 1]);
        assert_eq!((t.shape.clone(), t.strides.clone()), (vec![2, 4, 3], vec![12, 1, 4]));
        assert!(!t.is_dense());
        assert_eq!(t.span_bytes(), 48);
        // Extent-1 dimensions may carry any stride.
        assert!(view(&[1, 3], &[99, 1]).is_dense());
        assert_eq!(View::dense(Addr::arena(0), DType::F32, &[0, 5]).span_bytes(), 0);
        assert_eq!(View::dense(Addr::arena(0), DType::F32, &[]).span_bytes(), 4);
    }

    #[test]
    fn broadcasting_puts_zero_strides() {
        // A bias [4] read as [2, 3, 4].
        let b = View::dense(Addr::arena(0), DType::F32, &[4]).broadcast_to(&[2, 3, 4]);
        assert_eq!(b.strides, [0, 0, 1]);
        assert_eq!(b.span_bytes(), 16);
        // [3, 1] read as [2, 3, 5].
        let c = View::dense(Addr::arena(0), DType::F32, &[3, 1]).broadcast_to(&[2, 3, 5]);
        assert_eq!(c.strides, [0, 1, 0]);
        // A view keeps its own strides where it is not broadcast.
        let t = view(&[3, 2], &[1, 3]).broadcast_to(&[4, 3, 2]);
        assert_eq!(t.strides, [0, 1, 3]);
    }

    #[test]
    fn device_tensors_carry_the_view() {
        let bases = Bases { arena: 0x1000, workspace: 0x9000 };
        let t = view(&[2, 3], &[1, 2]).device(bases).unwrap();
        assert_eq!(t.ptr, 0x1000 + 512);
        assert_eq!((t.rank, t.numel, t.dense), (2, 6, 0));
        assert_eq!(&t.shape[..3], &[2, 3, 1]);
        assert_eq!(&t.stride[..3], &[1, 2, 0]);
        let w = View::dense(Addr::workspace(64), DType::Bf16, &[5]).device(bases).unwrap();
        assert_eq!((w.ptr, w.dtype, w.dense), (0x9000 + 64, 2, 1));
        let nine = View::dense(Addr::arena(0), DType::F32, &[1; 9]);
        assert_eq!(nine.device(bases), None);
    }

    #[test]
    fn resolved_arguments_point_at_their_values() {
        let launch = Launch {
            kernel: Kernel::Program("k"),
            grid: [1, 1, 1],
            block: [32, 1, 1],
            args: vec![Arg::I32(7), Arg::Ptr(Addr::workspace(8)), Arg::F64(0.5)],
        };
        let args = launch.resolve(Bases { arena: 0, workspace: 100 }).unwrap();
        assert_eq!(args, [ResolvedArg::I32(7), ResolvedArg::U64(108), ResolvedArg::F64(0.5)]);
        // SAFETY: each pointer points at the matching variant's payload, alive in `args`.
        let read = unsafe { (*(args[0].as_param() as *const i32), *(args[1].as_param() as *const u64)) };
        assert_eq!(read, (7, 108));
    }

    #[test]
    fn grids() {
        assert_eq!(grid_1d(0).0, [1, 1, 1]);
        assert_eq!(grid_1d(257).0, [2, 1, 1]);
        assert_eq!(grid_1d(u64::MAX).0, [MAX_BLOCKS as u32, 1, 1]);
        assert_eq!(line_threads(1), 32);
        assert_eq!(line_threads(100), 128);
        assert_eq!(line_threads(768), 256);
        assert_eq!(line_threads(50257), 256);
        assert_eq!(line_blocks(0), 1);
        assert_eq!(line_blocks(1 << 40), MAX_BLOCKS as u32);
    }

    #[test]
    fn scratch_regions_are_aligned_and_disjoint() {
        let mut s = Scratch::default();
        assert_eq!(s.alloc(10), Addr::workspace(0));
        assert_eq!(s.alloc(1), Addr::workspace(256));
        assert_eq!(s.alloc(0), Addr::workspace(512));
        assert_eq!(s.used(), 512);
    }
}
