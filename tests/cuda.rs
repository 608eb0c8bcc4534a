//! The CUDA executor on a real GPU (feature `cuda`; `cargo test --features cuda --release
//! --test cuda`). Each test first opens the GPU; without a driver or a device it prints
//! why it skips and passes.
//!
//! On a GPU: every small step of the corpus and a few hundred random steps (as written, and
//! with their elementwise ops fused into generated kernels) match the CPU reference as
//! `run --check` demands; the full-size models run in their one arena; stores round to
//! f16/bf16 exactly like the `half` crate.
#![cfg(feature = "cuda")]

#[path = "support/steps.rs"]
mod steps;

use half::{bf16, f16};
use memplan::exec::compare::check_step;
use memplan::exec::cpu::advance;
use memplan::exec::cuda::CudaError;
use memplan::exec::cuda::generate::Generated;
use memplan::exec::cuda::device::CudaBackend;
use memplan::exec::cuda::executor::{Backend, Executor, Upload};
use memplan::exec::cuda::program::Program;
use memplan::exec::cuda::source::{OP_COPY, UNARY};
use memplan::exec::cuda::view::{Addr, Arg, Launch, View, grid_1d};
use memplan::exec::data::init_args;
use memplan::ir::types::DType;
use memplan::passes::PlanOptions;
use memplan::testing::random_step::random_step;
use memplan::{Graph, Plan};

/// One test at a time on the GPU: the memory each one measures (free memory before and
/// after an allocation) would include the other tests' allocations made meanwhile.
static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn gpu_turn() -> std::sync::MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The GPU with room for `arena` and `scratch` bytes and the `generated` kernels loaded,
/// or `None` (printing why) when this machine has no CUDA driver, device or libraries.
fn gpu(arena: u64, scratch: u64, generated: &Generated) -> Option<CudaBackend> {
    match CudaBackend::new(arena, scratch, generated) {
        Ok(backend) => Some(backend),
        Err(e @ (CudaError::NoDriver | CudaError::NoDevice(_) | CudaError::MissingLibrary { .. })) => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("the GPU is there but the backend fails: {e}"),
    }
}

/// The repository root: the working directory when it holds `ir/` (a test binary carried to
/// a GPU machine runs from its own checkout), else where the tests were built.
fn root() -> std::path::PathBuf {
    let here = std::env::current_dir().unwrap();
    if here.join("ir/models").is_dir() { here } else { std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")) }
}

fn load(file: &str) -> (Graph, Plan) {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
    let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    (graph, plan)
}

/// Rounding noise left out by the checks of a run: noise elements outside GPT-2's key
/// biases (whose gradient is 0 in theory), and all elements compared.
#[derive(Default, Debug)]
struct Noise {
    elements: usize,
    total: usize,
    lines: Vec<String>,
}

/// `steps` steps on the GPU, each held to the CPU reference; `None` without a GPU.
fn gpu_matches_reference(graph: &Graph, plan: &Plan, steps: u32, seed: u64) -> Option<Result<Noise, String>> {
    let program = Program::new(graph, plan).unwrap();
    let backend = gpu(program.arena_bytes, program.scratch_bytes, &program.generated)?;
    let mut exec = Executor::new(backend, program);
    let mut run = || -> Result<Noise, String> {
        exec.poison().map_err(|e| e.to_string())?;
        let mut args = init_args(graph, seed).unwrap();
        let mut noise = Noise::default();
        for step in 0..steps {
            let which = if step == 0 { Upload::All } else { Upload::Inputs };
            exec.upload(&args, which).map_err(|e| e.to_string())?;
            exec.run().map_err(|e| format!("step {step}: {e}"))?;
            let got = exec.result().map_err(|e| e.to_string())?;
            let check = check_step(graph, plan, &args, &got).map_err(|e| e.to_string())?;
            if !check.failures.is_empty() {
                return Err(format!("step {step}:\n  {}", check.failures.join("\n  ")));
            }
            for c in &check.checks {
                let tensor = got.returns.get(&c.name).or(got.updated.get(&c.name));
                noise.total += tensor.map_or(0, |t| t.ty.shape.numel().unwrap_or(0) as usize);
                if !c.name.contains(".attn.k.bias") {
                    noise.elements += c.noise;
                }
            }
            noise.lines.extend(check.noise);
            args = advance(&args, &got);
        }
        Ok(noise)
    };
    Some(run())
}

fn step_files() -> Vec<String> {
    steps::step_files(&root())
}

#[test]
fn small_steps_match_the_cpu_reference_on_the_gpu() {
    let _turn = gpu_turn();
    for file in step_files() {
        let (graph, plan) = load(&file);
        // The CPU reference of the full-size models takes minutes to hours.
        if plan.arena_bytes > 64 << 20 {
            continue;
        }
        let Some(result) = gpu_matches_reference(&graph, &plan, 3, 7) else { return };
        let noise = result.unwrap_or_else(|e| panic!("{file}: {e}"));
        // As in the emulated test: noise is rare in the real models, apart from GPT-2's key
        // biases.
        if file.starts_with("ir/models") {
            assert!(noise.elements * 1000 <= noise.total, "{file}: {noise:?}");
        }
    }
}

#[test]
fn random_steps_match_the_cpu_reference_on_the_gpu() {
    let _turn = gpu_turn();
    let mut failed = Vec::new();
    for seed in 0..300 {
        let graph = random_step(seed);
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        let Some(result) = gpu_matches_reference(&graph, &plan, 2, seed) else { return };
        if let Err(e) = result {
            failed.push(format!("seed {seed}: {e}\n{}", memplan::print(&graph)));
        }
    }
    assert!(failed.is_empty(), "{} seeds differ:\n{}", failed.len(), failed.join("\n"));
}

/// The random steps with their elementwise ops fused: each fused op runs the kernel NVRTC
/// compiled for its body, held to the CPU reference of the fused step.
#[test]
fn fused_random_steps_match_the_cpu_reference_on_the_gpu() {
    let _turn = gpu_turn();
    let (mut failed, mut ran) = (Vec::new(), 0);
    for seed in 0..300 {
        let Some(fused) = memplan::passes::fuse::fuse(&random_step(seed)) else { continue };
        let plan = memplan::plan(&fused, &PlanOptions::default()).unwrap();
        memplan::check(&fused, &plan).unwrap();
        let Some(result) = gpu_matches_reference(&fused, &plan, 2, seed) else { return };
        if let Err(e) = result {
            failed.push(format!("seed {seed}: {e}\n{}", memplan::print(&fused)));
        }
        ran += 1;
    }
    assert!(failed.is_empty(), "{} fused seeds differ:\n{}", failed.len(), failed.join("\n"));
    assert!(ran >= 30, "only {ran} random steps had fused ops");
}

#[test]
fn full_size_models_train_in_their_one_arena() {
    let _turn = gpu_turn();
    for file in ["ir/models/gpt2.step", "ir/models/resnet18.step", "ir/models/vgg16.step"] {
        let (graph, plan) = load(file);
        let program = Program::new(&graph, &plan).unwrap();
        let Some(backend) = gpu(program.arena_bytes, program.scratch_bytes, &program.generated) else { return };
        // The one allocation took at least the plan's bytes (the driver rounds up to its
        // page size) and not much more.
        let memory = backend.memory;
        assert!(memory.arena_measured >= plan.arena_bytes, "{file}: {memory:?}");
        assert!(memory.arena_measured <= plan.arena_bytes + (64 << 20), "{file}: {memory:?}");
        let mut exec = Executor::new(backend, program);
        let args = init_args(&graph, 1).unwrap();
        let mut losses = Vec::new();
        for step in 0..2 {
            exec.upload(&args, if step == 0 { Upload::All } else { Upload::Inputs }).unwrap();
            exec.run().unwrap_or_else(|e| panic!("{file}: {e}"));
            let returns = exec.returns().unwrap();
            losses.push(returns.values().next().unwrap().to_f64()[0]);
        }
        eprintln!("{file}: losses {losses:?}, memory {memory:?}");
        assert!(losses.iter().all(|l| l.is_finite()), "{file}: {losses:?}");
    }
}

#[test]
fn stores_round_to_f16_and_bf16_like_half_on_the_gpu() {
    let _turn = gpu_turn();
    let mut values: Vec<f32> =
        vec![0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 6.1035156e-5, 5.9604645e-8, 2.9802322e-8];
    values.extend([f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE, f32::MAX, 1e-10, 0.1, 1.0 / 3.0]);
    let mut x = 0x1234_5678u32;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if !f32::from_bits(x).is_nan() {
            values.push(f32::from_bits(x));
        }
    }
    let n = values.len() as u64;
    for dtype in [DType::F16, DType::Bf16] {
        let input = View::dense(Addr::arena(0), DType::F32, &[n]);
        let output = View::dense(Addr::arena((n * 4).div_ceil(256) * 256), dtype, &[n]);
        let Some(mut backend) = gpu(output.addr.offset + n * 2, 0, &Generated::default()) else { return };
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        backend.upload(0, &bytes).unwrap();
        let (grid, block) = grid_1d(n);
        let args = vec![Arg::I32(OP_COPY), Arg::Tensor(output.clone()), Arg::Tensor(input), Arg::F64(0.0)];
        let launch = Launch { kernel: UNARY.into(), grid, block, args };
        let resolved = launch.resolve(backend.bases()).unwrap();
        backend.launch(&launch, &resolved).unwrap();
        backend.synchronize().unwrap();
        let mut out = vec![0u8; (n * 2) as usize];
        backend.download(output.addr.offset, &mut out).unwrap();
        for (i, &v) in values.iter().enumerate() {
            let got = u16::from_le_bytes([out[2 * i], out[2 * i + 1]]);
            let want = if dtype == DType::F16 { f16::from_f32(v).to_bits() } else { bf16::from_f32(v).to_bits() };
            assert_eq!(got, want, "{dtype} of {v:e}");
        }
    }
}
