//! `memplan run FILE --device cuda [--steps N] [--check]` (feature `cuda`): trains on the GPU
//! inside the one planned arena and reports device memory and step times.
//!
//! Printed: the device; the planned arena beside what its one allocation took (free device
//! memory before minus after), the workspace (cuBLAS's, also the ops' scratch) and what the
//! kernels and the cuBLAS handle took; then each step's loss and GPU time (CUDA events
//! around the step's launches; arguments are uploaded before, outside the time). With
//! `--check` every step is also run on the CPU reference from the same arguments and every
//! returned and updated tensor is compared (`compare::check_step`); a tensor outside its
//! tolerance fails the run.

use thiserror::Error;

use crate::bytes::format_bytes;
use crate::exec::compare::{check_step, worst_by_dtype};
use crate::exec::cpu::advance;
use crate::exec::cuda::CudaError;
use crate::exec::cuda::device::CudaBackend;
use crate::exec::cuda::executor::{Backend, Executor, Upload};
use crate::exec::cuda::lower::LowerOptions;
use crate::exec::cuda::program::Program;
use crate::exec::cuda::view::Command;
use crate::exec::data::Tensors;
use crate::ir::graph::Graph;
use crate::plan::Plan;

/// Why a GPU run failed.
#[derive(Debug, Error)]
pub enum RunError {
    /// The GPU could not run the step (no driver, a CUDA error, a bad argument).
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// `--check`: a tensor differs from the CPU reference beyond its tolerance.
    #[error(
        "step {step}: the CUDA run differs from the CPU reference beyond tolerance (a memplan bug):\n  {}",
        failures.join("\n  ")
    )]
    CheckFailed { step: u32, failures: Vec<String> },
}

/// `run --profile`: one more step with an event recorded between every two ops, so each
/// op's GPU time is the time between the events around it (the events add a little time
/// of their own, and the step's params and state move on by one step). Prints the time by
/// op kind and the slowest ops.
fn profile_step(graph: &Graph, exec: &mut Executor<CudaBackend>, out: &mut dyn FnMut(String)) -> Result<(), RunError> {
    let elapsed = |a: &cudarc::driver::CudaEvent, b: &cudarc::driver::CudaEvent| {
        a.elapsed_ms(b)
            .map(f64::from)
            .map_err(|e| CudaError::Driver { what: "cuEventElapsedTime".into(), message: e.to_string() })
    };
    let mut events = vec![exec.backend.record()?];
    for index in 0..exec.program.ops.len() {
        exec.run_op(index)?;
        events.push(exec.backend.record()?);
    }
    exec.backend.synchronize()?;
    let mut per_op = Vec::new();
    for (index, pair) in events.windows(2).enumerate() {
        per_op.push((index, elapsed(&pair[0], &pair[1])?));
    }
    let total: f64 = per_op.iter().map(|&(_, ms)| ms).sum();
    // By kind, largest first (ties by name): ops, launches, cuBLAS calls, ms.
    let mut kinds: indexmap::IndexMap<String, (usize, usize, usize, f64)> = indexmap::IndexMap::new();
    for &(index, ms) in &per_op {
        let op = &exec.program.ops[index];
        let entry = kinds.entry(op.kind.to_string()).or_default();
        entry.0 += 1;
        for command in &op.commands {
            match command {
                Command::Launch(_) => entry.1 += 1,
                Command::Gemm(_) => entry.2 += 1,
            }
        }
        entry.3 += ms;
    }
    kinds.sort_by(|a, ak, b, bk| bk.3.total_cmp(&ak.3).then(a.cmp(b)));
    out(format!("profile: one more step, an event between every two ops: {total:.3} ms"));
    out(format!("  {:<28} {:>5} {:>8} {:>6} {:>10} {:>6}", "op kind", "ops", "launches", "cuBLAS", "ms", "%"));
    for (kind, (ops, launches, gemms, ms)) in &kinds {
        let share = if total > 0.0 { 100.0 * ms / total } else { 0.0 };
        out(format!("  {kind:<28} {ops:>5} {launches:>8} {gemms:>6} {ms:>10.3} {share:>6.1}"));
    }
    per_op.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out("  slowest ops:".to_string());
    for &(index, ms) in per_op.iter().take(15) {
        let op = exec.program.ops[index].op;
        out(format!("  {ms:>10.3} ms  {}", graph.describe_op(op)));
    }
    Ok(())
}

/// What [`run_steps`] does besides training.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Training steps to run.
    pub steps: u32,
    /// Hold every step to the CPU reference (`--check`).
    pub check: bool,
    /// Return the final params and state (to save them).
    pub keep: bool,
    /// Time one more step op by op (`--profile`).
    pub profile: bool,
}

/// Runs `options.steps` training steps of `graph` under `plan` from `args` on GPU 0,
/// printing through `out`; with `check`, holds every step to the CPU reference. Returns the
/// final params and state when `keep` asks for them (to save them). `MEMPLAN_CUDA_CONV=f32`
/// in the environment makes convolutions accumulate in float (faster, less exact).
pub fn run_steps(
    graph: &Graph,
    plan: &Plan,
    args: Tensors,
    options: RunOptions,
    out: &mut dyn FnMut(String),
) -> Result<Option<Tensors>, RunError> {
    let RunOptions { steps, check, keep, profile } = options;
    let mut lowering = LowerOptions {
        conv_f32: std::env::var("MEMPLAN_CUDA_CONV").is_ok_and(|v| v == "f32"),
        float_attention: false,
    };
    let mut program = Program::with_options(graph, plan, lowering)?;
    let (launches, gemms) = program.commands().fold((0, 0), |(l, g), (_, c)| match c {
        Command::Launch(_) => (l + 1, g),
        Command::Gemm(_) => (l, g + 1),
    });
    let backend = CudaBackend::new(program.arena_bytes, program.scratch_bytes, &program.generated)?;
    let info = backend.info.clone();
    if info.compute_capability.0 < 8 {
        // No mma.sync for f16/bf16 before compute capability 8.0: attention on the float
        // kernels (the same scratch, so the workspace allocated above still serves).
        lowering.float_attention = true;
        program = Program::with_options(graph, plan, lowering)?;
    }
    let memory = backend.memory;
    out(format!(
        "@{}: {} ops in one arena of {}; {steps} step(s) on {} (sm_{}{}, {} SMs, {} memory), CUDA driver {}.{}",
        graph.name,
        graph.ops.len(),
        format_bytes(plan.arena_bytes),
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.multiprocessors,
        format_bytes(info.total_bytes),
        info.driver.0,
        info.driver.1
    ));
    let conv = if lowering.conv_f32 { "float (MEMPLAN_CUDA_CONV=f32)" } else { "double" };
    out(format!("  {launches} kernel launches and {gemms} cuBLAS calls per step; convolutions accumulate in {conv}"));
    out("device memory:".to_string());
    out(format!("  arena      planned  {}", format_bytes(memory.arena_planned)));
    // The driver reports free memory in whole 2 MiB pages, and a small allocation can land
    // in pages the context already holds: then less (even 0 B) is measured than planned.
    let pages = if memory.arena_measured < memory.arena_planned { "; the driver counts whole 2 MiB pages" } else { "" };
    out(format!(
        "  arena      measured {} (free memory before/after its one allocation{pages})",
        format_bytes(memory.arena_measured)
    ));
    out(format!(
        "  workspace  measured {} for {} (cuBLAS's workspace, also the ops' scratch: {})",
        format_bytes(memory.workspace_measured),
        format_bytes(memory.workspace_bytes),
        format_bytes(memory.scratch_bytes)
    ));
    out(format!("  other      measured {} (kernel module and cuBLAS handle)", format_bytes(memory.other_measured)));

    let mut exec = Executor::new(backend, program);
    exec.poison()?;
    // The whole step as one CUDA graph, captured once and replayed every step: one launch
    // from the host instead of one per kernel (MEMPLAN_CUDA_GRAPH=0, or MEMPLAN_CUDA_SYNC=1,
    // launches op by op instead).
    let use_graph = !std::env::var("MEMPLAN_CUDA_GRAPH").is_ok_and(|v| v == "0")
        && !std::env::var("MEMPLAN_CUDA_SYNC").is_ok_and(|v| v == "1");
    let mut how = "op by op (MEMPLAN_CUDA_GRAPH=0)".to_string();
    let cuda_graph = if use_graph {
        exec.backend.begin_capture()?;
        let captured = exec.run();
        let graph = exec.backend.end_capture();
        match (captured, graph) {
            (Ok(()), Ok(Some(graph))) => {
                how = "as one CUDA graph per step".into();
                Some(graph)
            }
            // A driver that cannot capture some call: the same commands, launched one by one.
            (Err(e), _) | (Ok(()), Err(e)) => {
                how = format!("op by op (the step could not be captured as a CUDA graph: {e})");
                None
            }
            (Ok(()), Ok(None)) => None,
        }
    } else {
        None
    };
    out(format!("  launched {how}"));
    let mut args = args;
    let mut times = Vec::new();
    for step in 1..=steps {
        exec.upload(&args, if step == 1 { Upload::All } else { Upload::Inputs })?;
        let start = exec.backend.record()?;
        match &cuda_graph {
            Some(graph) => exec.backend.launch_graph(graph)?,
            None => exec.run()?,
        }
        let end = exec.backend.record()?;
        end.synchronize().map_err(|e| CudaError::Driver { what: format!("step {step}"), message: e.to_string() })?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| CudaError::Driver { what: "cuEventElapsedTime".into(), message: e.to_string() })?;
        times.push(f64::from(ms));
        let loss = |returns: &Tensors| {
            returns.values().find(|t| t.ty.rank() == 0 && t.ty.dtype.is_float()).map(|t| t.to_f64()[0])
        };
        if check {
            let got = exec.result()?;
            let checked = check_step(graph, plan, &args, &got).map_err(CudaError::Exec)?;
            match loss(&got.returns) {
                Some(l) => out(format!("step {step}: loss {} in {ms:.3} ms", l as f32)),
                None => out(format!("step {step}: done in {ms:.3} ms")),
            }
            if !checked.failures.is_empty() {
                return Err(RunError::CheckFailed { step, failures: checked.failures });
            }
            let worst: Vec<String> =
                worst_by_dtype(&checked.checks).iter().map(|(d, e)| format!("{d} {e:.1e}")).collect();
            out(format!(
                "  check: {} returned and {} updated tensor(s) match the CPU reference (largest error: {})",
                got.returns.len(),
                got.updated.len(),
                if worst.is_empty() { "none".to_string() } else { worst.join(", ") }
            ));
            for line in &checked.noise {
                out(format!("  check: {line}"));
            }
            args = advance(&args, &got);
        } else {
            match loss(&exec.returns()?) {
                Some(l) => out(format!("step {step}: loss {} in {ms:.3} ms", l as f32)),
                None => out(format!("step {step}: done in {ms:.3} ms")),
            }
        }
    }
    if times.len() > 1 {
        let steady = &times[1..];
        let mean = steady.iter().sum::<f64>() / steady.len() as f64;
        let best = steady.iter().cloned().fold(f64::INFINITY, f64::min);
        out(format!("step time over steps 2..={steps}: mean {mean:.3} ms, best {best:.3} ms"));
    }
    if check {
        out(format!("the CUDA run matches the CPU reference in all {steps} step(s)"));
    }
    let kept = if keep { Some(exec.persistent_args()?) } else { None };
    if profile {
        exec.upload(&args, Upload::Inputs)?;
        profile_step(graph, &mut exec, out)?;
    }
    Ok(kept)
}
