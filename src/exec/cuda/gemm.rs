//! Matmul on the GPU: row-major products mapped onto cuBLAS's column-major
//! `cublasGemmStridedBatchedEx`, and the implicit-GEMM kernel (`igemm`) for what cuBLAS cannot
//! read and for convolutions.
//!
//! # The cuBLAS mapping
//!
//! The IR's `out[z, i, j] = Σ_p A[z, i, p]·B[z, p, j]` is row-major; cuBLAS is column-major.
//! A row-major M×N matrix with row stride N is the column-major N×M matrix `outᵀ`, and
//! `outᵀ = Bᵀ·Aᵀ`. So cuBLAS computes `C = op(X)·op(Y)` with m = N, n = M, k = K, X read from
//! B's memory and Y from A's, C = out with ldc = N. [`transposed_operand`] finds for a
//! logical matrix L (rows × cols, element (i, j) at `i·rs + j·cs`) how cuBLAS reads Lᵀ from
//! L's memory: with `cs = 1` (rows contiguous, as stored row-major) Lᵀ IS a column-major
//! matrix with leading dimension `rs` (op N); with `rs = 1` (a transposed view), L is
//! column-major with leading dimension `cs` and op T gives Lᵀ. The IR's `transpose_a/b`
//! attributes and transposed views are both just swapped strides, so every
//! combination lands on one of the two cases without a copy.
//!
//! Batch dimensions (broadcast: stride 0) are folded: the longest run of trailing batch
//! dimensions that are evenly strided in all three operands becomes one strided batch; the
//! dimensions before it become separate calls (GPT-2's heads, `[B, H, T, D]` views of a
//! `[B·T, H·D]` matrix, give B calls of H matrices each).
//!
//! Operands cuBLAS cannot read (a stride-0 matrix dimension from `expand`, sizes past
//! `i32`) run on `igemm`, which reads any strides. A product with k = 0 is a `fill` of zeros.

use crate::exec::cuda::source::{FILL, IGEMM, IGEMM_F32, IGEMM_FINISH, MODE_MATMUL};
use crate::exec::cuda::view::{Addr, Arg, Command, GemmCall, Geom, Launch, MAX_GRID_YZ, Scratch, View, grid_1d};

/// How cuBLAS reads Lᵀ from the memory of the logical matrix L (`rows × cols`, element
/// (i, j) at `i·rs + j·cs`): `Some((op_t, ld))` where op_t says op = T. Dimensions of
/// extent 1 take any stride. `None` when neither dimension is contiguous.
pub fn transposed_operand(rows: u64, cols: u64, rs: u64, cs: u64) -> Option<(bool, u64)> {
    if cs == 1 || cols == 1 {
        // Lᵀ (cols × rows) is column-major with leading dimension rs.
        let ld = if rows == 1 { cols.max(1) } else { rs };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if rs == 1 || rows == 1 {
        // L (rows × cols) is column-major with leading dimension cs; op T gives Lᵀ.
        let ld = if cols == 1 { rows.max(1) } else { cs };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// Batch dimensions of the three operands: extents and each operand's element strides.
struct Batch {
    shape: Vec<u64>,
    strides: [Vec<u64>; 3],
}

impl Batch {
    /// Splits the batch into `(outer dims, inner count, inner strides)`: the inner group is
    /// the longest run of trailing dimensions evenly strided in all operands.
    fn fold(&self) -> (Vec<usize>, u64, [u64; 3]) {
        let dims: Vec<usize> = (0..self.shape.len()).filter(|&d| self.shape[d] > 1).collect();
        let Some(&last) = dims.last() else { return (Vec::new(), 1, [0; 3]) };
        let mut group = vec![last];
        for &d in dims.iter().rev().skip(1) {
            let inner = group[0];
            let even = self.strides.iter().all(|s| s[d] == s[inner] * self.shape[inner]);
            if !even {
                break;
            }
            group.insert(0, d);
        }
        let count = group.iter().map(|&d| self.shape[d]).product();
        let outer = dims[..dims.len() - group.len()].to_vec();
        (outer, count, [self.strides[0][last], self.strides[1][last], self.strides[2][last]])
    }
}

/// The most cuBLAS calls one matmul is split into before the kernel takes over.
const MAX_CALLS: u64 = 4096;

/// The commands of `out = a @ b` (`a`, `b` stored transposed when the flags say so);
/// `f32`: a product cuBLAS cannot take accumulates in float.
pub fn matmul(
    a: &View,
    b: &View,
    transpose_a: bool,
    transpose_b: bool,
    out: &View,
    f32: bool,
    scratch: &mut Scratch,
) -> Vec<Command> {
    let rank = out.rank();
    let batch_shape = &out.shape[..rank - 2];
    let (m, n) = (out.shape[rank - 2], out.shape[rank - 1]);
    // Logical [batch.., M, K] and [batch.., K, N]: transposes swap the last two strides.
    let logical = |v: &View, transposed: bool| {
        let r = v.rank();
        let mut perm: Vec<usize> = (0..r).collect();
        if transposed {
            perm.swap(r - 2, r - 1);
        }
        v.permuted(&perm)
    };
    let (la, lb) = (logical(a, transpose_a), logical(b, transpose_b));
    let k = la.shape[la.rank() - 1];
    let a_full = la.broadcast_to(&[batch_shape, &[m, k]].concat());
    let b_full = lb.broadcast_to(&[batch_shape, &[k, n]].concat());
    if out.numel() == 0 {
        return Vec::new();
    }
    if k == 0 {
        let (grid, block) = grid_1d(out.numel());
        return vec![Command::Launch(Launch {
            kernel: FILL.into(),
            grid,
            block,
            args: vec![Arg::Tensor(out.clone()), Arg::F64(0.0), Arg::F64(0.0)],
        })];
    }
    match cublas_calls(&a_full, &b_full, out) {
        Some(calls) => calls.into_iter().map(Command::Gemm).collect(),
        None => {
            let batches = batch_shape.iter().product();
            let what = Igemm { mode: MODE_MATMUL, geom: Geom::default(), size: [m, n, k], batches, f32 };
            igemm(what, out, &a_full, &b_full, scratch)
        }
    }
}

/// cuBLAS calls for logical `a [batch.., M, K]`, `b [batch.., K, N]` and dense `out`, or
/// `None` if cuBLAS cannot read an operand.
fn cublas_calls(a: &View, b: &View, out: &View) -> Option<Vec<GemmCall>> {
    let rank = out.rank();
    let (m, n, k) = (out.shape[rank - 2], out.shape[rank - 1], a.shape[rank - 1]);
    let (x_t, ldx) = transposed_operand(k, n, b.strides[rank - 2], b.strides[rank - 1])?;
    let (y_t, ldy) = transposed_operand(m, k, a.strides[rank - 2], a.strides[rank - 1])?;
    if !out.is_dense() || !out.dtype.is_float() {
        return None;
    }
    let int = |x: u64| i32::try_from(x).ok();
    let (mi, ni, ki, ldxi, ldyi) = (int(m)?, int(n)?, int(k)?, int(ldx)?, int(ldy)?);
    let batch = Batch {
        shape: out.shape[..rank - 2].to_vec(),
        strides: [b.strides[..rank - 2].to_vec(), a.strides[..rank - 2].to_vec(), out.strides[..rank - 2].to_vec()],
    };
    let (outer, count, [sx, sy, sc]) = batch.fold();
    let outer_calls: u64 = outer.iter().map(|&d| batch.shape[d]).product();
    if outer_calls > MAX_CALLS {
        return None;
    }
    let (count, sx, sy, sc) = (int(count)?, i64::try_from(sx).ok()?, i64::try_from(sy).ok()?, i64::try_from(sc).ok()?);
    let size = out.dtype.size();
    let shift = |base: Addr, elements: u64| Addr { space: base.space, offset: base.offset + elements * size };
    let mut calls = Vec::new();
    for index in 0..outer_calls {
        // Element offsets of this outer index (row-major over the outer dims).
        let mut rest = index;
        let mut offsets = [0u64; 3];
        for &d in outer.iter().rev() {
            let i = rest % batch.shape[d];
            rest /= batch.shape[d];
            for (o, s) in offsets.iter_mut().zip(&batch.strides) {
                *o += i * s[d];
            }
        }
        calls.push(GemmCall {
            dtype: out.dtype,
            trans_a: x_t,
            trans_b: y_t,
            m: ni,
            n: mi,
            k: ki,
            a: shift(b.addr, offsets[0]),
            lda: ldxi,
            stride_a: sx,
            b: shift(a.addr, offsets[1]),
            ldb: ldyi,
            stride_b: sy,
            c: shift(out.addr, offsets[2]),
            ldc: ni.max(1),
            stride_c: sc,
            batch: count,
        });
    }
    Some(calls)
}

/// Rows, columns and depth of an `igemm` tile grid.
pub const TILE: u64 = 64;
pub const TILE_K: u64 = 16;

/// Partial tiles of split-K may use at most this many workspace bytes.
pub const SPLIT_BUDGET: u64 = 64 << 20;

/// How many slices of the depth `k` one (unbatched) `igemm` of `m × n` should take, so that
/// a small output still fills the GPU: `(splits, depth per split)`. One split when the
/// tiles alone are enough, for batched products, or when the partial tiles would not fit
/// [`SPLIT_BUDGET`].
pub fn split_k(m: u64, n: u64, k: u64, batches: u64) -> (u64, u64) {
    let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
    if batches > 1 || tiles >= 256 || k == 0 {
        return (1, k.max(1));
    }
    let want = 512u64.div_ceil(tiles.max(1));
    let by_depth = (k / (TILE_K * 8)).max(1);
    let by_budget = (SPLIT_BUDGET / (m * n * 8).max(1)).max(1);
    let splits = want.min(by_depth).min(by_budget).clamp(1, MAX_GRID_YZ);
    if splits == 1 {
        return (1, k);
    }
    let chunk = k.div_ceil(splits).div_ceil(TILE_K) * TILE_K;
    (k.div_ceil(chunk), chunk)
}

/// What one implicit GEMM computes: `mode` (conv forward, backward data or weight, or a
/// matmul of `batches` batches), the conv's geometry, and `m × n` outputs of depth `k`;
/// `f32` picks the kernel that accumulates in float (`igemm_f32`) over double (`igemm`).
#[derive(Clone, Copy, Debug)]
pub struct Igemm {
    pub mode: i32,
    pub geom: Geom,
    pub size: [u64; 3],
    pub batches: u64,
    pub f32: bool,
}

/// The launches of one implicit GEMM `what` into `out` from operands `a` and `b`, with
/// split-K partials in the workspace when [`split_k`] asks for them.
pub fn igemm(what: Igemm, out: &View, a: &View, b: &View, scratch: &mut Scratch) -> Vec<Command> {
    let Igemm { mode, geom, size: [m, n, k], batches, f32 } = what;
    if m == 0 || n == 0 || batches == 0 {
        return Vec::new();
    }
    let (splits, chunk) = split_k(m, n, k, batches);
    let partials = if splits > 1 { Arg::Ptr(scratch.alloc(splits * m * n * 8)) } else { Arg::Null };
    let grid =
        [n.div_ceil(TILE) as u32, m.div_ceil(TILE).min(MAX_GRID_YZ) as u32, (batches * splits).min(MAX_GRID_YZ) as u32];
    let to_i64 = |x: u64| x as i64;
    let mut commands = vec![Command::Launch(Launch {
        kernel: (if f32 { IGEMM_F32 } else { IGEMM }).into(),
        grid,
        block: [256, 1, 1],
        args: vec![
            Arg::I32(mode),
            Arg::Tensor(out.clone()),
            Arg::Tensor(a.clone()),
            Arg::Tensor(b.clone()),
            Arg::Geom(geom),
            Arg::I64(to_i64(m)),
            Arg::I64(to_i64(n)),
            Arg::I64(to_i64(k)),
            Arg::I64(to_i64(batches)),
            Arg::I64(to_i64(splits)),
            Arg::I64(to_i64(chunk)),
            partials.clone(),
        ],
    })];
    if splits > 1 {
        let (grid, block) = grid_1d(m * n);
        commands.push(Command::Launch(Launch {
            kernel: IGEMM_FINISH.into(),
            grid,
            block,
            args: vec![
                Arg::I32(mode),
                Arg::Tensor(out.clone()),
                partials,
                Arg::Geom(geom),
                Arg::I64(to_i64(m)),
                Arg::I64(to_i64(n)),
                Arg::I64(to_i64(splits)),
            ],
        }));
    }
    commands
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Dense;
    use crate::exec::cuda::view::Space;
    use crate::exec::kernels::eval;
    use crate::ir::ops::{Attr, Attrs, OpKind};
    use crate::ir::types::{DType, TensorType};

    #[test]
    fn operands_by_layout() {
        // Row-major 3×4 (rs 4, cs 1): Lᵀ is column-major 4×3 with ld 4, op N.
        assert_eq!(transposed_operand(3, 4, 4, 1), Some((false, 4)));
        // Its transposed view 4×3 (rs 1, cs 4): L is column-major with ld 4, op T.
        assert_eq!(transposed_operand(4, 3, 1, 4), Some((true, 4)));
        // A padded leading dimension (a view of a wider matrix).
        assert_eq!(transposed_operand(3, 4, 64, 1), Some((false, 64)));
        // Extent-1 dimensions take any stride.
        assert_eq!(transposed_operand(1, 5, 0, 1), Some((false, 5)));
        assert_eq!(transposed_operand(5, 1, 1, 0), Some((false, 1)));
        // Broadcast rows (expand: stride 0) or no unit stride: the kernel's job.
        assert_eq!(transposed_operand(3, 4, 0, 1), None);
        assert_eq!(transposed_operand(3, 4, 8, 2), None);
    }

    #[test]
    fn batch_folding() {
        // out [2, 3] batches dense, b broadcast (0, 0), a dense.
        let batch = Batch { shape: vec![2, 3], strides: [vec![0, 0], vec![60, 20], vec![90, 30]] };
        assert_eq!(batch.fold(), (vec![], 6, [0, 20, 30]));
        // GPT-2 heads: q [B, H, T, D] over [B·T, H·D]: stride (T·H·D, D) does not fold.
        let batch = Batch { shape: vec![4, 4], strides: [vec![2048, 16], vec![2048, 16], vec![4096, 1024]] };
        assert_eq!(batch.fold(), (vec![0], 4, [16, 16, 1024]));
        // Extent-1 dimensions are ignored; no batch at all is one matrix.
        let batch = Batch { shape: vec![1, 5], strides: [vec![7, 1], vec![9, 2], vec![99, 3]] };
        assert_eq!(batch.fold(), (vec![], 5, [1, 2, 3]));
        let none = Batch { shape: vec![], strides: [vec![], vec![], vec![]] };
        assert_eq!(none.fold(), (vec![], 1, [0, 0, 0]));
    }

    #[test]
    fn split_k_fills_small_outputs() {
        // Plenty of tiles: no split.
        assert_eq!(split_k(4096, 4096, 4096, 1), (1, 4096));
        // ResNet's first conv weight gradient: 64 × 147 outputs over 401408 terms.
        let (splits, chunk) = split_k(64, 147, 401_408, 1);
        assert!(splits > 64 && splits <= 512, "{splits}");
        assert_eq!(chunk % TILE_K, 0);
        assert!(splits * chunk >= 401_408 && (splits - 1) * chunk < 401_408);
        // Shallow products and batches are not split.
        assert_eq!(split_k(64, 64, 100, 1), (1, 100));
        assert_eq!(split_k(64, 64, 1 << 20, 2), (1, 1 << 20));
        assert_eq!(split_k(8, 8, 0, 1), (1, 1));
    }

    /// A dense f32 tensor of values 0.1·(i % 17) − 0.5, in a little arena at `offset`.
    struct Arena {
        bytes: Vec<f64>,
    }

    impl Arena {
        fn store(&mut self, view: &View, dense: &Dense) {
            // Only dense roots are stored; views are strides over them.
            for (i, &x) in dense.data.iter().enumerate() {
                self.bytes[view.addr.offset as usize / 4 + i] = x;
            }
        }

        fn read_view(&self, view: &View) -> Dense {
            let shape: Vec<usize> = view.shape.iter().map(|&d| d as usize).collect();
            let mut data = Vec::new();
            let n: usize = shape.iter().product();
            for i in 0..n {
                let mut rest = i;
                let mut off = 0u64;
                for d in (0..shape.len()).rev() {
                    off += (rest % shape[d]) as u64 * view.strides[d];
                    rest /= shape[d];
                }
                data.push(self.bytes[(view.addr.offset / 4 + off) as usize]);
            }
            Dense::new(shape, data)
        }
    }

    fn values(n: usize, seed: usize) -> Vec<f64> {
        (0..n).map(|i| 0.1 * ((i * 7 + seed) % 17) as f64 - 0.5).collect()
    }

    /// Runs `a @ b` through the planned commands on host memory and through the CPU
    /// kernel, and compares. `a` and `b` are views over roots of shapes `ra`, `rb`.
    fn check(ra: &[u64], a_of: &dyn Fn(View) -> View, rb: &[u64], b_of: &dyn Fn(View) -> View, ta: bool, tb: bool) {
        let root_a = View::dense(Addr::arena(0), DType::F32, ra);
        let root_b = View::dense(Addr::arena(4096 * 4), DType::F32, rb);
        let (a, b) = (a_of(root_a.clone()), b_of(root_b.clone()));
        let mut arena = Arena { bytes: vec![f64::NAN; 3 * 4096] };
        let na: usize = ra.iter().product::<u64>() as usize;
        let nb: usize = rb.iter().product::<u64>() as usize;
        arena.store(&root_a, &Dense::new(ra.iter().map(|&d| d as usize).collect(), values(na, 1)));
        arena.store(&root_b, &Dense::new(rb.iter().map(|&d| d as usize).collect(), values(nb, 5)));
        let (da, db) = (arena.read_view(&a), arena.read_view(&b));
        let attrs =
            Attrs::for_op(OpKind::Matmul, &[("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))]).unwrap();
        let types = [&a, &b].map(|v| TensorType::new(DType::F32, v.shape.clone()));
        let out_ty = (OpKind::Matmul.def().infer)(&[&types[0], &types[1]], &attrs).unwrap().remove(0);
        let want = eval(OpKind::Matmul, &attrs, &[da, db], std::slice::from_ref(&out_ty)).unwrap().remove(0);
        let out = View::dense(Addr::arena(2 * 4096 * 4), DType::F32, out_ty.dims());
        let commands = matmul(&a, &b, ta, tb, &out, false, &mut Scratch::default());
        assert!(!commands.is_empty());
        for command in &commands {
            let Command::Gemm(call) = command else { panic!("expected cuBLAS calls, got {command:?}") };
            let (sa, sb, sc) = call.spans();
            assert!(
                call.a.offset + sa <= 3 * 4096 * 4
                    && call.b.offset + sb <= 3 * 4096 * 4
                    && call.c.offset + sc <= 3 * 4096 * 4
            );
            let snapshot = arena.bytes.clone();
            let read = |addr: Addr| {
                assert_eq!(addr.space, Space::Arena);
                snapshot[addr.offset as usize / 4]
            };
            call.run_on_host(&read, &mut |addr, x| arena.bytes[addr.offset as usize / 4] = x);
        }
        let got = arena.read_view(&out);
        assert_eq!(got.shape, want.shape);
        for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            assert!((g - w).abs() < 1e-5, "element {i}: got {g}, want {w}");
        }
    }

    #[test]
    fn cublas_mapping_matches_the_cpu_kernel() {
        let id = |v: View| v;
        // Plain, transposed attributes, all four combinations.
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let ra: &[u64] = if ta { &[5, 3] } else { &[3, 5] };
            let rb: &[u64] = if tb { &[4, 5] } else { &[5, 4] };
            check(ra, &id, rb, &id, ta, tb);
        }
        // Transposed views instead of attributes.
        check(&[5, 3], &|v: View| v.permuted(&[1, 0]), &[4, 5], &|v: View| v.permuted(&[1, 0]), false, false);
        // A transposed view AND the attribute: back to plain storage.
        check(&[3, 5], &|v: View| v.permuted(&[1, 0]), &[5, 4], &id, true, false);
        // Batched with a broadcast weight, and batch dims broadcast on both sides.
        check(&[2, 3, 5], &id, &[5, 4], &id, false, false);
        check(&[2, 1, 3, 5], &id, &[3, 5, 4], &id, false, false);
        // Vectors (M = 1, N = 1).
        check(&[1, 5], &id, &[5, 1], &id, false, false);
    }

    #[test]
    fn attention_heads_from_transposed_views() {
        // q, k as [B, H, T, D] views of [B·T, H·D] (reshape then transpose [0, 2, 1, 3]),
        // scores = q @ kᵀ: B = 2 calls of H = 3 batched matrices.
        let heads = |v: View| {
            let reshaped = View { shape: vec![2, 4, 3, 5], strides: vec![60, 15, 5, 1], ..v };
            reshaped.permuted(&[0, 2, 1, 3])
        };
        check(&[8, 15], &heads, &[8, 15], &heads, false, true);
        let q = heads(View::dense(Addr::arena(0), DType::F32, &[8, 15]));
        let out = View::dense(Addr::arena(8192), DType::F32, &[2, 3, 4, 4]);
        let commands = matmul(&q, &q, false, true, &out, false, &mut Scratch::default());
        assert_eq!(commands.len(), 2);
        let Command::Gemm(call) = &commands[1] else { panic!() };
        assert_eq!((call.batch, call.stride_a, call.stride_c), (3, 5, 16));
        assert_eq!(call.c.offset, 8192 + 48 * 4);
    }

    #[test]
    fn unreadable_operands_and_empty_depth_use_kernels() {
        // b broadcast along its rows (expand of a row vector to [5, 4]): the kernel.
        let a = View::dense(Addr::arena(0), DType::F32, &[3, 5]);
        let b = View { addr: Addr::arena(1024), dtype: DType::F32, shape: vec![5, 4], strides: vec![0, 1] };
        let out = View::dense(Addr::arena(2048), DType::F32, &[3, 4]);
        let commands = matmul(&a, &b, false, false, &out, false, &mut Scratch::default());
        let [Command::Launch(launch)] = &commands[..] else { panic!("{commands:?}") };
        assert_eq!(launch.kernel, IGEMM.into());
        assert_eq!(launch.args[0], Arg::I32(MODE_MATMUL));
        // k = 0: zeros.
        let a = View::dense(Addr::arena(0), DType::F32, &[3, 0]);
        let b = View::dense(Addr::arena(0), DType::F32, &[0, 4]);
        let commands = matmul(&a, &b, false, false, &out, false, &mut Scratch::default());
        let [Command::Launch(launch)] = &commands[..] else { panic!("{commands:?}") };
        assert_eq!(launch.kernel, FILL.into());
    }

    #[test]
    fn split_k_uses_the_workspace_and_a_finish_pass() {
        let v = |shape: &[u64]| View::dense(Addr::arena(0), DType::F32, shape);
        let mut scratch = Scratch::default();
        let what = Igemm { mode: 0, geom: Geom::default(), size: [64, 147, 401_408], batches: 1, f32: false };
        let commands = igemm(what, &v(&[64, 3, 7, 7]), &v(&[64, 3, 7, 7]), &v(&[32, 3, 224, 224]), &mut scratch);
        assert_eq!(commands.len(), 2);
        let Command::Launch(first) = &commands[0] else { panic!() };
        let Arg::I64(splits) = first.args[9] else { panic!() };
        assert_eq!(scratch.used(), splits as u64 * 64 * 147 * 8);
        assert_eq!(first.grid[2] as i64, splits);
        let Command::Launch(finish) = &commands[1] else { panic!() };
        assert_eq!(finish.kernel, IGEMM_FINISH.into());
    }
}
