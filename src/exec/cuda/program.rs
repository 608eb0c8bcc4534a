//! A whole planned step as a program for the GPU: where every argument, returned and
//! updated value lies in the arena, the commands of every op in schedule order, and the
//! workspace they need.
//!
//! Built once per step from the graph and its (checked) plan, with no device. Building it
//! also validates it: every tensor a kernel or cuBLAS touches lies inside the arena or the
//! workspace, fits a kernel's descriptor, and every launch fits CUDA's grid and block limits.
//! Executors rely on that for the memory safety of their launches.

use crate::exec::ExecError;
use crate::exec::cpu::planned_offsets;
use crate::exec::cuda::CudaError;
use crate::exec::cuda::generate::Generated;
use crate::exec::cuda::lower::{LowerOptions, lower_op};
use crate::exec::cuda::view::{Addr, Arg, Bases, Command, MAX_GRID_YZ, MAX_RANK, Scratch, Space, View};
use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Role, ValueDef};
use crate::ir::layout::layouts;
use crate::ir::ops::{Below, OpKind};
use crate::ir::types::TensorType;
use crate::plan::Plan;

/// A step argument and where its bytes lie (arguments own their bytes: they are dense).
#[derive(Clone, PartialEq, Debug)]
pub struct ArgSlot {
    pub name: String,
    pub ty: TensorType,
    pub role: Role,
    /// Byte offset in the arena.
    pub offset: u64,
}

/// An index argument (ids, labels) an op reads: its values must lie in `0..bound` or equal
/// `ignored` (cross-entropy's ignore_index). Kernels cannot report errors, so the executor
/// checks these on the host when it uploads them.
#[derive(Clone, PartialEq, Debug)]
pub struct IndexCheck {
    pub arg: String,
    /// The op's kind, and the op: its id, IR text and place in the step's file.
    pub op: &'static str,
    pub at: OpId,
    pub text: String,
    pub span: Option<miette::SourceSpan>,
    pub bound: u64,
    pub ignored: Option<i64>,
}

impl IndexCheck {
    /// Whether `value` is an index this check accepts.
    pub fn accepts(&self, value: f64) -> bool {
        (value >= 0.0 && value < self.bound as f64) || self.ignored.is_some_and(|i| value == i as f64)
    }

    /// The error for `value`, an index this check refuses, naming the op as the CPU
    /// reference does.
    pub fn error(&self, value: f64) -> ExecError {
        let error = ExecError::IndexOutOfRange { op: self.op.to_string(), index: value as i64, bound: self.bound as usize };
        ExecError::AtOp { op: self.at, text: self.text.clone(), error: Box::new(error), span: self.span }
    }
}

/// The commands of one op.
#[derive(Clone, PartialEq, Debug)]
pub struct OpCommands {
    pub op: OpId,
    pub kind: OpKind,
    pub commands: Vec<Command>,
}

/// A planned step, lowered.
#[derive(Clone, PartialEq, Debug)]
pub struct Program {
    pub step: String,
    pub arena_bytes: u64,
    /// Scratch the ops need in the workspace (the largest op's).
    pub scratch_bytes: u64,
    pub args: Vec<ArgSlot>,
    pub ops: Vec<OpCommands>,
    /// Returned values, by name, in `return` order.
    pub returns: Vec<(String, View)>,
    /// New values of updates, by the target's name: where the target's bytes are.
    pub updates: Vec<(String, View)>,
    pub index_checks: Vec<IndexCheck>,
    /// The kernels generated for the step's fused ops, which its backend compiles.
    pub generated: Generated,
}

impl Program {
    /// Lowers `graph` (verified) under `plan` (checked), with the default options.
    pub fn new(graph: &Graph, plan: &Plan) -> Result<Program, CudaError> {
        Program::with_options(graph, plan, LowerOptions::default())
    }

    /// Lowers `graph` (verified) under `plan` (checked).
    pub fn with_options(graph: &Graph, plan: &Plan, options: LowerOptions) -> Result<Program, CudaError> {
        crate::exec::refuse_extern(graph)?;
        let views = views(graph, plan)?;
        let mut ops = Vec::new();
        let mut scratch_bytes = 0;
        let mut generated = Generated::default();
        for &op_id in &plan.schedule {
            let op = graph.ops.get(op_id).ok_or_else(|| ExecError::BadPlan(format!("the schedule names {op_id}")))?;
            let mut scratch = Scratch::default();
            let commands = lower_op(op, &views, options, &mut scratch, &mut generated)?;
            scratch_bytes = scratch_bytes.max(scratch.used());
            ops.push(OpCommands { op: op_id, kind: op.kind, commands });
        }
        let args = graph
            .args
            .iter()
            .map(|&a| {
                let value = &graph.values[a];
                let ValueDef::Arg(role) = value.def else { unreachable!("args are arguments") };
                ArgSlot { name: value.name.clone(), ty: value.ty.clone(), role, offset: views[a].addr.offset }
            })
            .collect();
        let named = |v: ValueId| (graph.values[v].name.clone(), views[v].clone());
        let program = Program {
            step: graph.name.clone(),
            arena_bytes: plan.arena_bytes,
            scratch_bytes,
            args,
            ops,
            returns: graph.returns.iter().map(|r| named(r.value)).collect(),
            updates: graph
                .updates
                .iter()
                .map(|u| (graph.values[u.target].name.clone(), views[u.value].clone()))
                .collect(),
            index_checks: index_checks(graph, &views),
            generated,
        };
        program.validate()?;
        Ok(program)
    }

    /// Every command of every op, in order.
    pub fn commands(&self) -> impl Iterator<Item = (&OpCommands, &Command)> {
        self.ops.iter().flat_map(|op| op.commands.iter().map(move |c| (op, c)))
    }

    /// Checks the invariants executors rely on (see the module docs).
    fn validate(&self) -> Result<(), CudaError> {
        let limit = |space: Space| match space {
            Space::Arena => self.arena_bytes,
            Space::Workspace => self.scratch_bytes,
        };
        let inside = |addr: Addr, span: u64, what: &str| {
            if addr.offset.checked_add(span).is_some_and(|end| end <= limit(addr.space)) {
                Ok(())
            } else {
                Err(CudaError::Exec(ExecError::BadPlan(format!(
                    "{what} reaches past the {:?} ({} + {span} bytes)",
                    addr.space, addr.offset
                ))))
            }
        };
        let fits = |view: &View, what: &str| -> Result<(), CudaError> {
            if view.rank() > MAX_RANK || view.device(Bases { arena: 0, workspace: 0 }).is_none() {
                return Err(CudaError::Unsupported(format!(
                    "{what}: a tensor of rank {} (the kernels take at most {MAX_RANK} dimensions)",
                    view.rank()
                )));
            }
            inside(view.addr, view.span_bytes(), what)
        };
        for (op, command) in self.commands() {
            let what = format!("{} ({})", op.kind, op.op);
            match command {
                Command::Launch(launch) => {
                    let [gx, gy, gz] = launch.grid;
                    let [bx, by, bz] = launch.block;
                    let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
                    let grid_ok = gx >= 1
                        && (1..=MAX_GRID_YZ).contains(&u64::from(gy))
                        && (1..=MAX_GRID_YZ).contains(&u64::from(gz));
                    if !grid_ok || threads == 0 || threads > 1024 || bz > 64 {
                        return Err(CudaError::Unsupported(format!(
                            "{what}: {} launch grid {:?} block {:?} is outside CUDA's limits",
                            launch.kernel, launch.grid, launch.block
                        )));
                    }
                    for arg in &launch.args {
                        match arg {
                            Arg::Tensor(view) => fits(view, &what)?,
                            Arg::Ptr(addr) => inside(*addr, 0, &what)?,
                            _ => {}
                        }
                    }
                }
                Command::Gemm(call) => {
                    let (a, b, c) = call.spans();
                    inside(call.a, a, &what)?;
                    inside(call.b, b, &what)?;
                    inside(call.c, c, &what)?;
                }
            }
        }
        for (name, view) in self.returns.iter().chain(&self.updates) {
            fits(view, &format!("%{name}"))?;
        }
        Ok(())
    }
}

/// The view of every value: layouts as the CPU executor builds them, at the plan's offsets.
fn views(graph: &Graph, plan: &Plan) -> Result<IndexVec<ValueId, View>, CudaError> {
    let layouts = layouts(graph);
    let base = planned_offsets(graph, &layouts, plan)?;
    Ok(graph
        .values
        .iter_enumerated()
        .map(|(v, value)| {
            let layout = &layouts[v];
            View {
                addr: Addr::arena(base[layout.root] + layout.offset * value.ty.dtype.size()),
                dtype: value.ty.dtype,
                shape: layout.shape.clone(),
                strides: layout.strides.clone(),
            }
        })
        .collect())
}

/// The index arguments (the inputs the op rows list as `indices`: embedding ids, labels)
/// read by the step's ops, directly or through views.
fn index_checks(graph: &Graph, views: &IndexVec<ValueId, View>) -> Vec<IndexCheck> {
    let layouts = layouts(graph);
    let mut checks = Vec::new();
    for (at, op) in graph.ops.iter_enumerated() {
        for indices in op.kind.def().indices {
            let index = op.inputs[indices.input];
            let bound = match indices.below {
                Below::Dim { input, axis } => views[op.inputs[input]].shape[axis],
                Below::Attr(name) => op.attrs.int(name) as u64,
                Below::DimAt { input, axis } => {
                    let view = if input == usize::MAX { &views[op.outputs[0]] } else { &views[op.inputs[input]] };
                    let a = op.attrs.int(axis);
                    view.shape[(if a < 0 { a + view.rank() as i64 } else { a }) as usize]
                }
                // The order of offsets is not checked here (the kernels clamp each bag).
                Below::Offsets { input } => views[op.inputs[input]].numel() + 1,
            };
            let ignored = indices.ignored.map(|name| op.attrs.int(name));
            let root = layouts[index].root;
            if matches!(graph.values[root].def, ValueDef::Arg(_)) {
                let (arg, text, span) = (graph.values[root].name.clone(), graph.describe_op(at), op.span.into());
                checks.push(IndexCheck { arg, op: op.kind.name(), at, text, span, bound, ignored });
            }
        }
    }
    checks
}

/// The corpus's step list, shared with the integration tests.
#[cfg(test)]
#[path = "../../../tests/support/steps.rs"]
mod steps;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cuda::source::{CUBLAS_GEMM, Param, kernels_for, signature, signature_in};
    use crate::exec::cuda::view::{Kernel, Launch};
    use crate::passes::PlanOptions;
    use crate::testing::random_step::random_step;

    fn load(file: &str) -> (Graph, Plan) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let graph = crate::expand(&crate::parse(&text).unwrap()).unwrap();
        let plan = crate::plan(&graph, &PlanOptions::default()).unwrap();
        crate::check(&graph, &plan).unwrap();
        (graph, plan)
    }

    fn step_files() -> Vec<String> {
        super::steps::step_files(std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    /// The launch plan's own consistency: every launch passes what its kernel declares, and
    /// each op uses only the kernels its mapping lists.
    fn assert_consistent(p: &Program, what: &str) {
        for (op, command) in p.commands() {
            let allowed = kernels_for(op.kind);
            match command {
                Command::Gemm(_) => assert!(allowed.contains(&CUBLAS_GEMM), "{what}: {} calls cuBLAS", op.kind),
                Command::Launch(launch) => {
                    let family = launch.kernel.family();
                    assert!(allowed.contains(&family), "{what}: {} launches {}", op.kind, launch.kernel);
                    let params = match launch.kernel {
                        Kernel::Program(name) => signature(name),
                        Kernel::Generated(_) => signature_in(&p.generated.source().unwrap(), &launch.kernel.to_string()),
                    }
                    .unwrap_or_else(|| panic!("{what}: no kernel {}", launch.kernel));
                    let kinds: Vec<Param> = launch
                        .args
                        .iter()
                        .map(|a| match a {
                            Arg::Tensor(_) => Param::Tensor,
                            Arg::Geom(_) => Param::Geom,
                            Arg::Ptr(_) | Arg::Null => Param::Ptr,
                            Arg::I32(_) => Param::I32,
                            Arg::I64(_) => Param::I64,
                            Arg::F64(_) => Param::F64,
                        })
                        .collect();
                    assert_eq!(kinds, params, "{what}: {} passes the wrong arguments to {}", op.kind, launch.kernel);
                }
            }
        }
    }

    #[test]
    fn every_step_of_the_corpus_lowers_and_validates() {
        for file in step_files() {
            let (graph, plan) = load(&file);
            let p = Program::new(&graph, &plan).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(p.ops.len(), plan.schedule.len(), "{file}");
            assert_eq!(p.args.len(), graph.args.len(), "{file}");
            assert_consistent(&p, &file);
        }
    }

    #[test]
    fn random_steps_lower_consistently() {
        for seed in 0..150 {
            let graph = random_step(seed);
            let plan = crate::plan(&graph, &PlanOptions::default()).unwrap();
            crate::check(&graph, &plan).unwrap();
            let p = Program::new(&graph, &plan).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_consistent(&p, &format!("seed {seed}"));
        }
    }

    /// A slice_scatter written in place over its x copies only src into the slice (x is
    /// already there); written elsewhere, x is copied first.
    #[test]
    fn slice_scatter_in_place_copies_only_the_slice() {
        let text = "step @w(\n  %x: f32[4,16] input,\n  %a: f32[4,8] input,\n) {\n  %y = relu(%x)\n  %out = slice_scatter(%y, %a, axis=1, start=0, end=8)\n  %keep = slice_scatter(%x, %a, axis=1, start=8, end=16)\n  %z = add(%x, %keep)\n  return %out, %z\n}\n";
        let graph = crate::parse(text).unwrap();
        let plan = crate::plan(&graph, &PlanOptions::default()).unwrap();
        crate::check(&graph, &plan).unwrap();
        let p = Program::new(&graph, &plan).unwrap();
        assert_consistent(&p, "slice_scatter");
        let launches: Vec<usize> = p.ops.iter().filter(|o| o.kind == OpKind::SliceScatter).map(|o| o.commands.len()).collect();
        // %out over %y (which dies there): one copy; %keep beside %x (read after): two.
        assert_eq!(launches, [1, 2]);
    }

    /// Fused steps: every fused op (and fused_norm) launches a generated kernel that takes
    /// what it passes, and the repeated layers of GPT-2 share their kernels.
    #[test]
    fn fused_ops_launch_their_generated_kernels() {
        let mut fused_steps = 0;
        for seed in 0..150 {
            let Some(graph) = crate::passes::fuse::fuse(&random_step(seed)) else { continue };
            let plan = crate::plan(&graph, &PlanOptions::default()).unwrap();
            crate::check(&graph, &plan).unwrap();
            let p = Program::new(&graph, &plan).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_consistent(&p, &format!("seed {seed} fused"));
            assert!(!p.generated.is_empty(), "seed {seed}");
            fused_steps += 1;
        }
        assert!(fused_steps >= 30, "{fused_steps}");
        let (graph, _) = load("ir/models/gpt2.step");
        let graph = crate::passes::fuse::fuse(&graph).unwrap();
        let plan = crate::plan(&graph, &PlanOptions::default()).unwrap();
        let p = Program::new(&graph, &plan).unwrap();
        assert_consistent(&p, "gpt2 fused");
        let is_fused = |kind: OpKind| kind == OpKind::Fused || kind == OpKind::FusedNorm;
        let fused_ops = graph.ops.iter().filter(|op| is_fused(op.kind)).count();
        let kernels: std::collections::HashSet<Kernel> = (p.ops.iter().filter(|o| is_fused(o.kind)))
            .flat_map(|o| &o.commands)
            .filter_map(|c| match c {
                Command::Launch(launch) => Some(launch.kernel),
                _ => None,
            })
            .collect();
        assert!(fused_ops >= 12 && kernels.len() * 4 <= fused_ops, "{fused_ops} fused ops, {} kernels", kernels.len());
        // Elementwise ops left alone launch generated kernels too.
        assert!(p.generated.len() > kernels.len());
    }

    #[test]
    fn gpt2_uses_cublas_for_every_matmul_and_little_scratch() {
        let (graph, plan) = load("ir/models/gpt2.step");
        let p = Program::new(&graph, &plan).unwrap();
        let mut gemms = 0;
        for op in p.ops.iter().filter(|o| o.kind == OpKind::Matmul) {
            assert!(op.commands.iter().all(|c| matches!(c, Command::Gemm(_))), "{} runs a kernel", op.op);
            gemms += 1;
        }
        assert!(gemms > 100);
        // Scratch: partial sums of reductions and norms, far below the arena.
        assert!(p.scratch_bytes < 64 << 20, "{}", p.scratch_bytes);
        assert!(p.scratch_bytes * 100 < p.arena_bytes);
        // Index arguments are checked on upload: token ids, positions, targets (through a
        // reshape view).
        let args: Vec<&str> = p.index_checks.iter().map(|c| c.arg.as_str()).collect();
        for name in ["idx", "pos", "targets"] {
            assert!(args.contains(&name), "{name} in {args:?}");
        }
        let wte = p.index_checks.iter().find(|c| c.op == "embedding" && c.arg == "idx").unwrap();
        assert_eq!(wte.bound, 50257);
    }

    #[test]
    fn resnet_convs_run_as_implicit_gemm() {
        let (graph, plan) = load("ir/models/resnet18.step");
        let p = Program::new(&graph, &plan).unwrap();
        let convs = p.ops.iter().filter(|o| o.kind == OpKind::Conv2dBackward).count();
        assert_eq!(convs, 20);
        assert!(p.scratch_bytes <= 2 * crate::exec::cuda::gemm::SPLIT_BUDGET + (1 << 20), "{}", p.scratch_bytes);
    }

    /// A step of `attention(q, k, v)` (q through a transposed view) and its backward, with
    /// q `[B, T, H, E]`, k `[B, Hkv, S, E]`, v `[B, Hkv, S, Ev]`.
    fn attention_step(b: u64, h: u64, hkv: u64, t: u64, s: u64, e: u64, ev: u64) -> (Graph, Plan) {
        let text = format!(
            "step @attention(
  %q: bf16[{b},{t},{h},{e}] param,
  %k: bf16[{b},{hkv},{s},{e}] param,
  %v: bf16[{b},{hkv},{s},{ev}] param,
) {{
  %qh = transpose(%q, perm=[0, 2, 1, 3])
  %o, %lse = attention(%qh, %k, %v, causal=true, scale=0.125)
  %loss = sum(%o, axes=[0, 1, 2, 3])
  backward %loss with sgd(lr=0.1)
  return %loss
}}"
        );
        let graph = crate::expand(&crate::parse(&text).unwrap()).unwrap();
        let plan = crate::plan(&graph, &PlanOptions::default()).unwrap();
        crate::check(&graph, &plan).unwrap();
        (graph, plan)
    }

    #[test]
    fn attention_launches_fit_cuda_at_long_sequences() {
        // Llama-like heads (32 query heads over 8, E = 128) at 8192 tokens, batch 16: 65536
        // forward tiles and 131072 dq tiles, so the grids stop at 65536 blocks and the
        // kernels loop over the rest; E = 128 gives gridDim.y = 2.
        let (graph, plan) = attention_step(16, 32, 8, 8192, 8192, 128, 128);
        let p = Program::new(&graph, &plan).unwrap();
        assert_consistent(&p, "long attention");
        let launches: Vec<&Launch> = p
            .commands()
            .filter_map(|(_, c)| match c {
                Command::Launch(l) if l.kernel.family().starts_with("attention") => Some(l),
                _ => None,
            })
            .collect();
        let grids: Vec<(&str, [u32; 3])> = launches.iter().map(|l| (l.kernel.family(), l.grid)).collect();
        assert_eq!(
            grids,
            [
                ("attention", [65536, 2, 1]),
                ("attention_backward_dq", [65536, 2, 1]),
                ("attention_backward_dkv", [16 * 8 * 256, 2, 1])
            ]
        );
        // A head dim gridDim.y cannot split is refused before any launch, not run wrong.
        let (graph, plan) = attention_step(1, 1, 1, 2, 2, 1, 64 * 65536);
        let err = Program::new(&graph, &plan).unwrap_err();
        assert!(matches!(err, CudaError::Unsupported(_)) && err.to_string().contains("CUDA's limits"), "{err}");
    }

    #[test]
    fn a_view_past_the_arena_is_rejected() {
        let (graph, mut plan) = load("ir/models/mlp.step");
        plan.arena_bytes -= 256;
        let err = Program::new(&graph, &plan).unwrap_err();
        assert!(matches!(err, CudaError::Exec(ExecError::BadPlan(_))), "{err}");
    }
}
