//! The CUDA executor end to end without a GPU: the launch plan of every small step runs on
//! the host emulation of the kernels (`cuda_emu`: the exact program NVRTC compiles, built
//! as host C++) and must match the CPU reference within the `--check` tolerances, step after
//! step, with the arena poisoned first (a read of bytes nothing wrote shows up as NaN).
//! Fused attention also runs in every configuration its tiled kernels tell apart (causal,
//! grouped heads, T ≠ S, sizes that cross the tiles and column chunks, its gradients
//! returned directly and repeating bit for bit), and so do convolutions (grouped,
//! dilated, transposed), resampling (bins that tile or overlap, integer and other ratios),
//! masks and binary cross-entropy; dropout's masks must equal the CPU reference's exactly.
//!
//! Without a C++ compiler the tests print why they skip and pass.

mod cuda_emu;
#[path = "support/steps.rs"]
mod steps;

use cuda_emu::{EmuBackend, emulator};
use half::{bf16, f16};
use memplan::exec::compare::check_step;
use memplan::exec::cpu::{Placement, advance, run_step};
use memplan::exec::cuda::executor::{Backend, Executor, Upload};
use memplan::exec::cuda::lower::LowerOptions;
use memplan::exec::cuda::program::Program;
use memplan::exec::cuda::source::{
    ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_BACKWARD, ATTENTION, ATTENTION_BACKWARD_DKV, ATTENTION_BACKWARD_DKV_TC,
    ATTENTION_BACKWARD_DQ, ATTENTION_BACKWARD_DQ_TC, ATTENTION_BIAS_BACKWARD, ATTENTION_TC,
    BCE_BACKWARD, BCE_MEAN, BCE_PARTIAL, FUSED, CONV3D, CONV3D_BACKWARD_DATA, CONV3D_BACKWARD_WEIGHT, DROPOUT, EMBEDDING_BAG, EMBEDDING_BAG_BACKWARD, GRID_SAMPLE,
    GRID_SAMPLE_BACKWARD_DATA, GRID_SAMPLE_BACKWARD_GRID, MASKED_FILL, OP_COPY, UNARY, UPSAMPLE_NEAREST2D,
    UPSAMPLE_NEAREST2D_BACKWARD, WHERE_SELECT,
};
use memplan::exec::cuda::view::{Addr, Arg, Launch, View, grid_1d};
use memplan::exec::data::{HostTensor, Tensors, init_args};
use memplan::exec::kernels::dropout_uniform;
use memplan::ir::ops::{OPS, OpKind};
use memplan::ir::types::{DType, TensorType};
use memplan::passes::PlanOptions;
use memplan::testing::random_step::random_step;
use memplan::{Graph, Plan};

/// Steps whose CPU reference takes longer than this many arena bytes suggest are left to
/// the GPU tests (full-size GPT-2, ResNet-18, VGG-16).
const SMALL: u64 = 16 << 20;

fn load(file: &str) -> (Graph, Plan) {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
    let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    (graph, plan)
}

/// What one emulated run left out as rounding noise (`check_step`).
#[derive(Default)]
struct Noise {
    /// One line per tensor with noise.
    lines: Vec<String>,
    /// Noise elements outside GPT-2's key biases (whose gradient is 0 in theory: softmax
    /// ignores what a key bias adds to a whole row of scores).
    elements: usize,
    /// Elements compared in all.
    total: usize,
}

/// Runs `steps` training steps on the emulated GPU and holds each to the CPU reference
/// (`check_step`, from the same arguments); the emulated results feed the next step.
/// Returns the kernels launched and the rounding noise left out.
fn emulated_matches_reference(
    graph: &Graph,
    plan: &Plan,
    steps: u32,
    seed: u64,
) -> Result<(Vec<&'static str>, Noise), String> {
    emulated_with(graph, plan, steps, seed, LowerOptions::default())
}

/// [`emulated_matches_reference`] with lowering `options`.
fn emulated_with(
    graph: &Graph,
    plan: &Plan,
    steps: u32,
    seed: u64,
    options: LowerOptions,
) -> Result<(Vec<&'static str>, Noise), String> {
    emulated_from(graph, plan, steps, init_args(graph, seed).unwrap(), options)
}

/// [`emulated_with`] from the arguments `args`.
fn emulated_from(
    graph: &Graph,
    plan: &Plan,
    steps: u32,
    mut args: Tensors,
    options: LowerOptions,
) -> Result<(Vec<&'static str>, Noise), String> {
    let emu = emulator().expect("checked by the caller");
    let program = Program::with_options(graph, plan, options).map_err(|e| format!("lowering: {e}"))?;
    let backend = EmuBackend::new(emu, program.arena_bytes, program.scratch_bytes.max(1), &program.generated);
    let mut exec = Executor::new(backend, program);
    exec.poison().map_err(|e| e.to_string())?;
    let mut noise = Noise::default();
    for step in 0..steps {
        exec.upload(&args, if step == 0 { Upload::All } else { Upload::Inputs })
            .map_err(|e| format!("step {step}: upload: {e}"))?;
        exec.run().map_err(|e| format!("step {step}: {e}"))?;
        let got = exec.result().map_err(|e| e.to_string())?;
        let check = check_step(graph, plan, &args, &got).map_err(|e| format!("step {step}: CPU reference: {e}"))?;
        if !check.failures.is_empty() {
            return Err(format!("step {step}:\n  {}", check.failures.join("\n  ")));
        }
        for c in &check.checks {
            let n = got
                .returns
                .get(&c.name)
                .or(got.updated.get(&c.name))
                .map_or(0, |t| t.ty.shape.numel().unwrap_or(0) as usize);
            noise.total += n;
            if !c.name.contains(".attn.k.bias") {
                noise.elements += c.noise;
            }
        }
        noise.lines.extend(check.noise.into_iter().map(|u| format!("step {step}: {u}")));
        args = advance(&args, &got);
    }
    Ok((std::mem::take(&mut exec.backend.launches), noise))
}

fn step_files() -> Vec<String> {
    steps::step_files(std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
}

#[test]
fn small_models_and_features_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    let mut ran = Vec::new();
    for file in step_files() {
        let (graph, plan) = load(&file);
        if plan.arena_bytes > SMALL {
            continue;
        }
        let (launches, noise) =
            emulated_matches_reference(&graph, &plan, 2, 7).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(!launches.is_empty() || graph.ops.iter().all(|op| op.kind.def().view_of().is_some()), "{file}");
        // In the real models rounding noise is rare (Adam steps on gradients that cancel to
        // about its eps) apart from GPT-2's key biases. Focused steps may have more
        // (embedding.step returns the mean of a layer norm: 0 up to rounding).
        if file.starts_with("ir/models") {
            assert!(
                noise.elements * 1000 <= noise.total,
                "{file}: {} of {} elements are noise: {:?}",
                noise.elements,
                noise.total,
                noise.lines
            );
        }
        ran.push(file);
    }
    for must in ["ir/models/gpt2_tiny.step", "ir/models/resnet18_tiny.step", "ir/models/mlp_adam.step"] {
        assert!(ran.iter().any(|f| f == must), "{must} did not run");
    }
}

#[test]
fn float_convolutions_match_on_well_conditioned_steps() {
    if emulator().is_none() {
        return;
    }
    // igemm_f32 (MEMPLAN_CUDA_CONV=f32): the conv steps whose batch statistics are not
    // degenerate (resnet18_tiny normalises channels of 2 elements: only double sums hold
    // it to the reference; see kernels/conv.cu).
    let options = LowerOptions { conv_f32: true, ..LowerOptions::default() };
    let file = "ir/features/conv_block.step";
    let (graph, plan) = load(file);
    let (launches, _) = emulated_with(&graph, &plan, 2, 7, options).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert!(launches.contains(&"igemm_f32") && !launches.contains(&"igemm"), "{file}: {launches:?}");
}

#[test]
fn out_of_range_labels_are_rejected_like_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // Labels of bool_i64.step past its 8 classes (seeded labels never are): both name the op.
    let (graph, plan) = load("ir/features/bool_i64.step");
    let mut args = init_args(&graph, 3).unwrap();
    args.insert("ids".into(), HostTensor::from_f64(args["ids"].ty.clone(), &[0.0, 8.0, 1.0, 2.0]));
    let cpu = run_step(&graph, Placement::Planned(&plan), &args).unwrap_err();
    assert!(cpu.to_string().starts_with("`%loss = cross_entropy(%logits, %ids)`: cross_entropy: index 8"), "{cpu}");
    let program = Program::new(&graph, &plan).unwrap();
    let mut exec = Executor::new(EmuBackend::new(emulator().unwrap(), program.arena_bytes, 1, &program.generated), program);
    let gpu = exec.upload(&args, Upload::All).unwrap_err();
    assert_eq!(gpu.to_string(), cpu.to_string());
    assert!(exec.backend.launches.is_empty());
}

#[test]
fn ignored_labels_and_label_smoothing_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // Labels no seeded initialisation makes: PyTorch's default ignore_index -100 on some
    // rows (accepted on upload), and a step where every row is ignored (a NaN loss on both
    // executors, and no gradient).
    let text = "step @s(
  %w: f32[6,5] param,
  %x: f32[4,6] input,
  %y: i64[4] input,
) {
  %o = matmul(%x, %w)
  %l1 = cross_entropy(%o, %y, label_smoothing=0.2)
  %l2 = cross_entropy(%o, %y)
  %loss = add(%l1, %l2)
  backward %loss with sgd(lr=0.5)
  return %loss, %l1
}";
    let graph = memplan::expand(&memplan::parse(text).unwrap()).unwrap();
    let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    let labels = |values: &[f64]| HostTensor::from_f64(TensorType::new(DType::I64, vec![4]), values);
    for rows in [[3.0, -100.0, 0.0, -100.0], [-100.0; 4]] {
        let mut args = init_args(&graph, 5).unwrap();
        args.insert("y".into(), labels(&rows));
        let (launches, _) = emulated_from(&graph, &plan, 2, args.clone(), LowerOptions::default())
            .unwrap_or_else(|e| panic!("labels {rows:?}: {e}"));
        assert!(launches.contains(&"ce_count"), "{launches:?}");
        let cpu = run_step(&graph, Placement::Planned(&plan), &args).unwrap();
        let loss = cpu.returns["loss"].to_f64()[0];
        assert_eq!(loss.is_nan(), rows == [-100.0; 4], "labels {rows:?}: loss {loss}");
    }
}

/// The random seeds [`random_steps_match_the_cpu_reference`] runs.
const RANDOM_SEEDS: u64 = 60;

/// The emulated steps run every op of the table (and gelu's and cross_entropy's options,
/// f32_loss included, and attention's transpose_out): the small corpus steps and the random
/// seeds together hold each one.
#[test]
fn the_emulated_steps_cover_every_op() {
    let mut graphs: Vec<Graph> = step_files()
        .iter()
        .map(|file| load(file))
        .filter(|(_, plan)| plan.arena_bytes <= SMALL)
        .map(|(graph, _)| graph)
        .collect();
    graphs.extend((0..RANDOM_SEEDS).map(random_step));
    // `fused_steps_match_the_cpu_reference` runs these steps fused.
    let fused: Vec<Graph> = graphs.iter().filter_map(memplan::passes::fuse::fuse).collect();
    graphs.extend(fused);
    let ops = || graphs.iter().flat_map(|g| &g.ops);
    // Extern ops are never run: `extern_steps_are_refused` covers them.
    let runnable = OPS.iter().filter(|row| !row.kind.is_extern());
    let missing: Vec<&str> = runnable.filter(|row| ops().all(|op| op.kind != row.kind)).map(|row| row.name).collect();
    assert!(missing.is_empty(), "ops the emulated tests never run: {missing:?}");
    let has = |kind: OpKind, test: &dyn Fn(&memplan::ir::ops::Attrs) -> bool| {
        ops().any(|op| op.kind == kind && test(&op.attrs))
    };
    assert!(has(OpKind::Gelu, &|a| !a.bool("approximate")) && has(OpKind::GeluBackward, &|a| !a.bool("approximate")));
    for kind in [OpKind::CrossEntropy, OpKind::CrossEntropyBackward] {
        assert!(has(kind, &|a| a.int("ignore_index") >= 0), "{kind} ignoring a class");
        assert!(has(kind, &|a| a.float("label_smoothing") > 0.0), "{kind} with label smoothing");
        assert!(has(kind, &|a| a.bool("f32_loss")), "{kind} with an f32 loss of half logits");
    }
    for kind in [OpKind::Attention, OpKind::AttentionBackward] {
        assert!(has(kind, &|a| a.bool("transpose_out")), "{kind} with out rows before heads");
    }
}

#[test]
fn random_steps_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    let (mut failed, mut left_out, mut tensors) = (Vec::new(), 0, 0);
    for seed in 0..RANDOM_SEEDS {
        let graph = random_step(seed);
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        tensors += 2 * (graph.returns.len() + graph.updates.len());
        match emulated_matches_reference(&graph, &plan, 2, seed) {
            Ok((_, noise)) => left_out += noise.lines.len(),
            Err(e) => failed.push(format!("seed {seed}: {e}\n{}", memplan::print(&graph))),
        }
    }
    assert!(failed.is_empty(), "{} seeds differ:\n{}", failed.len(), failed.join("\n"));
    // Ill-conditioned results are the exception, not the rule.
    assert!(left_out * 10 < tensors, "{left_out} of {tensors} tensors hold rounding noise");
}

/// Fused reductions: squares summed as they are made, over enough rows that the partial
/// sums come in groups (`reduce_finish` adds them), in float and, for integers, in double;
/// a mean of a product of two inputs broadcast both ways; a sum over middle axes (its
/// view permuted).
#[test]
fn fused_reductions_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    let text = "step @r(\n  %a: f32[4096,1] input,\n  %b: f32[40] input,\n  %i: i32[300,5] input,\n  %c: bf16[6,7,8,9] input,\n) {\n  %p = mul(%a, %b)\n  %m = mean(%p, axes=[0])\n  %ii = mul(%i, %i)\n  %s = sum(%ii, axes=[0, 1])\n  %c2 = mul(%c, %c)\n  %cs = sum(%c2, axes=[1, 2], keepdim=true)\n  return %m, %s, %cs\n}\n";
    let graph = memplan::passes::fuse::fuse(&memplan::parse(text).unwrap()).unwrap();
    let bodies: Vec<&str> = graph.ops.iter().filter(|op| op.kind == OpKind::Fused).map(|op| op.attrs.str("body")).collect();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    assert!(bodies.iter().all(|b| b.contains("= sum(") || b.contains("= mean(")), "{bodies:?}");
    let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    let (launches, _) = emulated_matches_reference(&graph, &plan, 1, 3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(launches.iter().filter(|&&k| k == FUSED).count(), 3, "{launches:?}");
    assert!(launches.contains(&memplan::exec::cuda::source::REDUCE_FINISH), "the long mean sums in groups: {launches:?}");
}

/// Fused norms: a residual stream (a bf16 value cast up, a bias and a residual added) and
/// its layer norm, then a bf16 sum and its RMS norm, over rows longer than a block (each
/// thread takes several elements of a row); the values and the norms are returned, so each
/// is compared itself. The residual `%x` is read again later: the value is not written over
/// it (it may be over `%p`).
#[test]
fn fused_norms_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    let text = "step @n(\n  %m: bf16[70,300] input,\n  %bias: f32[300] input,\n  %x: f32[70,300] input,\n  %g: f32[300] input,\n  %b: f32[300] input,\n  %o: bf16[70,300] input,\n  %gh: bf16[300] input,\n) {\n  %m32 = cast(%m, to=f32)\n  %p = add(%m32, %bias)\n  %h = add(%x, %p)\n  %y = layer_norm(%h, %g, %b)\n  %hb = cast(%h, to=bf16)\n  %h2 = add(%hb, %o)\n  %y2 = rms_norm(%h2, %gh, eps=0.001)\n  %z = mul(%x, %y)\n  return %h, %y, %h2, %y2, %z\n}\n";
    let graph = memplan::passes::fuse::fuse(&memplan::parse(text).unwrap()).unwrap();
    let norms: Vec<&str> = graph.ops.iter().filter(|op| op.kind == OpKind::FusedNorm).map(|op| op.attrs.str("norm")).collect();
    assert_eq!(norms, ["layer", "rms"]);
    let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    let (launches, noise) = emulated_matches_reference(&graph, &plan, 1, 5).unwrap_or_else(|e| panic!("{e}"));
    assert!(noise.lines.is_empty(), "{:?}", noise.lines);
    // The fused cast and bias, the two fused norms (the second's body casts `%h` down) and
    // the product: each one generated kernel.
    assert_eq!(launches.iter().filter(|&&k| k == FUSED).count(), 4, "{launches:?}");
}

/// The corpus's small steps and the random seeds with their elementwise ops fused: each
/// fused op is one launch of the kernel generated for its body (compiled into a library of
/// the step's own), identical bodies share one kernel, and the results hold to the CPU
/// reference of the fused step (which `random_steps.rs` holds to the unfused step bit for
/// bit).
#[test]
fn fused_steps_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    let mut graphs: Vec<(String, Graph)> = step_files().into_iter().map(|file| (file.clone(), load(&file).0)).collect();
    graphs.extend((0..RANDOM_SEEDS).map(|seed| (format!("seed {seed}"), random_step(seed))));
    let (mut failed, mut ran) = (Vec::new(), 0);
    for (name, graph) in graphs {
        let Some(fused) = memplan::passes::fuse::fuse(&graph) else { continue };
        let plan = memplan::plan(&fused, &PlanOptions::default()).unwrap();
        memplan::check(&fused, &plan).unwrap();
        if plan.arena_bytes > SMALL {
            continue;
        }
        match emulated_matches_reference(&fused, &plan, 2, 7) {
            Ok((launches, _)) => {
                let nonempty = |op: &&memplan::ir::graph::Op| fused.values[op.outputs[0]].ty.shape.numel() != Some(0);
                // Elementwise ops left alone run generated kernels too.
                let generated = |op: &&memplan::ir::graph::Op| {
                    op.kind == OpKind::Fused || memplan::exec::cuda::source::kernels_for(op.kind) == [FUSED]
                };
                let fused_ops = fused.ops.iter().filter(generated).filter(nonempty).count();
                let fused_launches = launches.iter().filter(|&&k| k == FUSED).count();
                assert_eq!(fused_launches, 2 * fused_ops, "{name}: one launch per fused or elementwise op and step");
                let program = Program::new(&fused, &plan).unwrap();
                let bodies: std::collections::HashSet<&str> = fused
                    .ops
                    .iter()
                    .filter(|op| op.kind == OpKind::Fused)
                    .filter(nonempty)
                    .map(|op| op.attrs.str("body"))
                    .collect();
                let alone = fused.ops.iter().filter(|op| op.kind != OpKind::Fused).filter(generated).filter(nonempty).count();
                assert!(program.generated.len() <= bodies.len() + alone, "{name}: a kernel per distinct body at most");
                ran += 1;
            }
            Err(e) => failed.push(format!("{name}: {e}\n{}", memplan::print(&fused))),
        }
    }
    assert!(failed.is_empty(), "{} fused steps differ:\n{}", failed.len(), failed.join("\n"));
    assert!(ran >= 30, "only {ran} fused steps ran");
}

/// Every value of the corpus's fused steps, not only what a training step returns and
/// updates: each step returns all its ops' outputs and its inputs too (so nothing is
/// written over another value, and an error in a value the loss barely feels, after an
/// Adam step's sign-like update, still shows), and one step on the emulated GPU holds each
/// to the CPU reference.
#[test]
fn every_value_of_the_fused_corpus_matches_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    let (mut failed, mut ran) = (Vec::new(), 0);
    for file in step_files() {
        let Some(mut fused) = memplan::passes::fuse::fuse(&load(&file).0) else { continue };
        let returned: std::collections::HashSet<_> = fused.returns.iter().map(|r| r.value).collect();
        let inputs = fused.args.iter().copied().filter(|&v| fused.role(v) == Some(memplan::ir::graph::Role::Input));
        let made = fused.ops.iter().flat_map(|op| op.outputs.iter().copied());
        let every: Vec<_> = inputs.chain(made).filter(|v| !returned.contains(v)).collect();
        fused.returns.extend(every.into_iter().map(|value| memplan::ir::graph::Return { value, span: Default::default() }));
        let plan = memplan::plan(&fused, &PlanOptions::default()).unwrap();
        memplan::check(&fused, &plan).unwrap();
        if plan.arena_bytes > SMALL {
            continue;
        }
        match emulated_matches_reference(&fused, &plan, 1, 11) {
            Ok(_) => ran += 1,
            Err(e) => failed.push(format!("{file}: {e}")),
        }
    }
    assert!(failed.is_empty(), "{} fused steps differ:\n{}", failed.len(), failed.join("\n"));
    assert!(ran >= 20, "only {ran} fused steps ran");
}

/// Fused attention on the emulated GPU, forward and backward (through `backward`), against
/// the CPU reference: causal or not, T = S, T < S and T > S, 2 and 4 query heads per
/// key/value head, E ≠ Ev, f16 and bf16, q read through a transposed view, `out` rows
/// before heads (`transpose_out`), and 270 keys with head dims of 260 and 258 (nine key
/// tiles, five 64-column chunks of out, dq, dk, dv).
#[test]
fn attention_matches_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // (dtype, B, H, Hkv, T, S, E, Ev, causal, transpose_out)
    let cases = [
        ("f32", 2, 4, 2, 5, 5, 8, 8, true, false),
        ("f32", 1, 4, 1, 3, 7, 4, 6, true, false),
        ("f32", 2, 2, 2, 7, 3, 4, 2, true, false),
        ("f32", 1, 2, 1, 4, 4, 3, 5, false, false),
        ("f16", 1, 2, 1, 6, 6, 8, 8, true, false),
        ("bf16", 2, 2, 2, 5, 4, 4, 4, false, false),
        ("f32", 1, 2, 1, 2, 270, 260, 258, false, false),
        ("f32", 2, 4, 2, 5, 7, 8, 6, true, true),
        ("bf16", 2, 3, 3, 6, 6, 4, 4, true, true),
    ];
    for (seed, (dt, b, h, hkv, t, s, e, ev, causal, transpose_out)) in cases.into_iter().enumerate() {
        let scale = 1.0 / (e as f64).sqrt();
        let out = if transpose_out { format!("{b},{t},{h},{ev}") } else { format!("{b},{h},{t},{ev}") };
        let text = format!(
            "step @attention(
  %q: {dt}[{b},{t},{h},{e}] param,
  %k: {dt}[{b},{hkv},{s},{e}] param,
  %v: {dt}[{b},{hkv},{s},{ev}] param,
  %r: {dt}[{out}] input,
) {{
  %qh = transpose(%q, perm=[0, 2, 1, 3])
  %o, %lse = attention(%qh, %k, %v, causal={causal}, scale={scale:?}, transpose_out={transpose_out})
  %w = mul(%o, %r)
  %loss = sum(%w, axes=[0, 1, 2, 3])
  backward %loss with sgd(lr=0.5)
  return %loss, %o, %lse
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let (launches, _) = emulated_matches_reference(&graph, &plan, 2, seed as u64)
            .unwrap_or_else(|err| panic!("case {seed} ({dt}, causal {causal}, transpose_out {transpose_out}): {err}\n{text}"));
        for kernel in [ATTENTION, ATTENTION_BACKWARD_DQ, ATTENTION_BACKWARD_DKV] {
            assert!(launches.contains(&kernel), "case {seed}: {kernel} did not run");
        }
    }
}

/// masked_attention on the emulated GPU against the CPU reference, forward and backward:
/// a learned bias broadcast over the batch (its gradient summed over it: T5's position
/// bias), a padding mask from bool data (`where(mask, 0, -inf)`, broadcast over heads and
/// query rows, some rows wholly masked) over query tiles of 64 rows, a full-shape bias in
/// bf16 with GQA, and f16 with `out` rows before heads.
#[test]
fn masked_attention_matches_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // (dtype, B, H, Hkv, T, S, E, Ev, causal, transpose_out, bias shape, bias from bool data)
    let cases = [
        ("f32", 2, 4, 2, 5, 7, 8, 6, false, false, "4,5,7", false),
        ("f32", 2, 2, 2, 70, 40, 8, 8, true, false, "2,1,1,40", true),
        ("bf16", 1, 4, 2, 6, 6, 8, 8, false, false, "1,4,6,6", false),
        ("f16", 2, 2, 1, 5, 9, 4, 4, false, true, "2,1,5,9", false),
    ];
    for (seed, (dt, b, h, hkv, t, s, e, ev, causal, transpose_out, bias, from_bool)) in cases.into_iter().enumerate() {
        let scale = 1.0 / (e as f64).sqrt();
        let out = if transpose_out { format!("{b},{t},{h},{ev}") } else { format!("{b},{h},{t},{ev}") };
        let (bias_arg, bias_ops) = if from_bool {
            (
                format!("%pad: bool[{bias}] input"),
                format!(
                    "  %zero = fill(shape=[], dtype={dt}, value=0.0)\n  %ninf = fill(shape=[], dtype={dt}, value=-inf)\n  %bias = where(%pad, %zero, %ninf)\n"
                ),
            )
        } else {
            (format!("%bias: {dt}[{bias}] param"), String::new())
        };
        let text = format!(
            "step @masked_attention(
  %q: {dt}[{b},{t},{h},{e}] param,
  %k: {dt}[{b},{hkv},{s},{e}] param,
  %v: {dt}[{b},{hkv},{s},{ev}] param,
  {bias_arg},
  %r: {dt}[{out}] input,
) {{
{bias_ops}  %qh = transpose(%q, perm=[0, 2, 1, 3])
  %o, %lse = masked_attention(%qh, %k, %v, %bias, causal={causal}, scale={scale:?}, transpose_out={transpose_out})
  %w = mul(%o, %r)
  %loss = sum(%w, axes=[0, 1, 2, 3])
  backward %loss with sgd(lr=0.5)
  return %loss, %o, %lse
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let (launches, _) = emulated_matches_reference(&graph, &plan, 2, 40 + seed as u64)
            .unwrap_or_else(|err| panic!("case {seed} ({dt}, bias [{bias}]): {err}\n{text}"));
        let mut kernels = vec![ATTENTION, ATTENTION_BACKWARD_DQ, ATTENTION_BACKWARD_DKV];
        if !from_bool {
            kernels.push(ATTENTION_BIAS_BACKWARD);
        }
        for kernel in kernels {
            assert!(launches.contains(&kernel), "case {seed}: {kernel} did not run");
        }
    }
}

/// dropout_attention (and its two backward ops) against the CPU reference: the same mask,
/// drawn from the seed in each kernel as the CPU draws it, across tiles (70 query rows, 40
/// keys), with and without a learned bias, causal and not, grouped-query heads, f32 and
/// bf16; and never on the tensor-core kernels, which have no dropout.
#[test]
fn dropout_attention_matches_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // (dtype, B, H, Hkv, T, S, E, Ev, causal, bias shape (none: a [] zero), p)
    let cases = [
        ("f32", 2, 4, 2, 5, 7, 8, 6, false, Some("4,5,7"), 0.3),
        ("f32", 1, 2, 2, 70, 40, 8, 8, true, None, 0.5),
        ("bf16", 1, 4, 2, 6, 6, 16, 16, false, Some("1,1,6"), 0.2),
    ];
    for (seed, (dt, b, h, hkv, t, s, e, ev, causal, bias, p)) in cases.into_iter().enumerate() {
        let scale = 1.0 / (e as f64).sqrt();
        let (bias_arg, bias_op) = match bias {
            Some(shape) => (format!("%bias: {dt}[{shape}] param,"), String::new()),
            None => (String::new(), format!("  %bias = fill(shape=[], dtype={dt}, value=0.0)\n")),
        };
        let text = format!(
            "step @dropout_attention(
  %q: {dt}[{b},{h},{t},{e}] param,
  %k: {dt}[{b},{hkv},{s},{e}] param,
  %v: {dt}[{b},{hkv},{s},{ev}] param,
  {bias_arg}
  %seed: i64[] input,
  %r: {dt}[{b},{h},{t},{ev}] input,
) {{
{bias_op}  %o, %lse = dropout_attention(%q, %k, %v, %bias, %seed, causal={causal}, scale={scale:?}, p={p:?}, stream=0)
  %w = mul(%o, %r)
  %loss = sum(%w, axes=[0, 1, 2, 3])
  backward %loss with sgd(lr=0.5)
  return %loss, %o, %lse
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let (launches, _) = emulated_matches_reference(&graph, &plan, 2, 70 + seed as u64)
            .unwrap_or_else(|err| panic!("case {seed} ({dt}): {err}\n{text}"));
        let mut kernels = vec![ATTENTION, ATTENTION_BACKWARD_DQ, ATTENTION_BACKWARD_DKV];
        if bias.is_some() {
            kernels.push(ATTENTION_BIAS_BACKWARD);
        }
        for kernel in kernels {
            assert!(launches.contains(&kernel), "case {seed}: {kernel} did not run");
        }
        assert!(!launches.contains(&ATTENTION_TC), "case {seed}: dropout on the tensor-core kernel");
    }
}

/// The tiled attention kernels' results themselves (out, lse, dq, dk, dv returned, not
/// folded into an update) against the CPU reference, for shapes that cross their tiles (64
/// query rows per forward block, 32 per dq block, 32 keys per tile, 64-column chunks of E
/// and Ev): T and S that are not multiples of them, head dims that are not (24, 48) or
/// exceed a chunk (80: E tiled, out's, dq's, dk's and dv's columns split over blocks),
/// causal with T < S and T > S, 2 and 4 query heads per key/value head, f32, f16 and bf16,
/// q through a transposed view; and the tensor-core kernels (f16/bf16 with E = Ev ≤ 64, a
/// multiple of 16: 64-row tiles, partial and single-row tiles, the diagonal inside a tile),
/// whose mma.sync the emulator computes from the PTX fragment layouts, k's head dim
/// contiguous (staged 16 bytes at a time) or strided (element by element). Rounding noise
/// (elements `--check` would leave out) must stay rare. Two runs of a case give the same
/// bits.
#[test]
fn tiled_attention_and_its_gradients_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // (dtype, B, H, Hkv, T, S, E, Ev, causal, k read through a transpose of its last two dims)
    let cases = [
        ("f32", 1, 2, 1, 70, 45, 24, 24, true, false),
        ("f32", 1, 4, 1, 33, 100, 80, 80, true, false),
        ("f32", 2, 2, 2, 65, 65, 80, 24, false, false),
        ("f32", 1, 2, 2, 130, 97, 16, 8, true, false),
        ("bf16", 1, 4, 2, 40, 70, 80, 48, true, false),
        ("f16", 1, 2, 1, 90, 33, 24, 80, false, false),
        ("f16", 2, 2, 1, 100, 37, 48, 16, true, false),
        // On tensor cores (f16/bf16, E = Ev a multiple of 16 up to 64): tiles of 64 rows and
        // keys, partial ones, grouped heads, a query tile the diagonal crosses, one query row.
        ("bf16", 2, 4, 2, 100, 77, 64, 64, true, false),
        ("bf16", 1, 2, 2, 64, 130, 32, 32, false, false),
        ("f16", 1, 3, 1, 129, 129, 16, 16, true, false),
        ("bf16", 1, 2, 1, 1, 70, 48, 48, false, false),
        ("f16", 1, 2, 2, 70, 70, 64, 64, false, false),
        // k's head dim strided: staged element by element.
        ("bf16", 1, 2, 1, 70, 40, 32, 32, true, true),
    ];
    for (seed, (dt, b, h, hkv, t, s, e, ev, causal, strided_k)) in cases.into_iter().enumerate() {
        let scale = 1.0 / (e as f64).sqrt();
        let (k_shape, k_view) = if strided_k {
            (format!("{b},{hkv},{e},{s}"), "transpose(%k, perm=[0, 1, 3, 2])".to_string())
        } else {
            (format!("{b},{hkv},{s},{e}"), format!("reshape(%k, shape=[{b}, {hkv}, {s}, {e}])"))
        };
        let text = format!(
            "step @attention_grads(
  %q: {dt}[{b},{t},{h},{e}] input,
  %k: {dt}[{k_shape}] input,
  %v: {dt}[{b},{hkv},{s},{ev}] input,
  %dout: {dt}[{b},{h},{t},{ev}] input,
) {{
  %qh = transpose(%q, perm=[0, 2, 1, 3])
  %kh = {k_view}
  %o, %lse = attention(%qh, %kh, %v, causal={causal}, scale={scale:?})
  %dq, %dk, %dv = attention_backward(%dout, %qh, %kh, %v, %o, %lse, causal={causal}, scale={scale:?})
  return %o, %lse, %dq, %dk, %dv
}}"
        );
        let graph = memplan::parse(&text).unwrap();
        memplan::verify(&graph).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let case = format!("case {seed} ({dt}, B {b}, H {h}/{hkv}, T {t}, S {s}, E {e}, Ev {ev}, causal {causal})");
        let (launches, noise) =
            emulated_matches_reference(&graph, &plan, 1, seed as u64).unwrap_or_else(|err| panic!("{case}: {err}"));
        let tensor_cores = dt != "f32" && e == ev && e % 16 == 0 && e <= 64;
        let kernels = if tensor_cores {
            [ATTENTION_TC, ATTENTION_BACKWARD_DQ_TC, ATTENTION_BACKWARD_DKV_TC]
        } else {
            [ATTENTION, ATTENTION_BACKWARD_DQ, ATTENTION_BACKWARD_DKV]
        };
        assert_eq!(launches, kernels, "{case}");
        assert!(noise.elements * 1000 <= noise.total, "{case}: {:?}", noise.lines);
        let program = Program::new(&graph, &plan).unwrap();
        let args = init_args(&graph, seed as u64).unwrap();
        let run = || {
            let backend = EmuBackend::new(emulator().unwrap(), program.arena_bytes, program.scratch_bytes.max(1), &program.generated);
            let mut exec = Executor::new(backend, program.clone());
            exec.poison().unwrap();
            exec.upload(&args, Upload::All).unwrap();
            exec.run().unwrap();
            exec.result().unwrap()
        };
        let (first, second) = (run(), run());
        for name in ["o", "lse", "dq", "dk", "dv"] {
            assert_eq!(first.returns[name].bytes, second.returns[name].bytes, "{case}: %{name} repeats");
        }
    }
}

/// Dropout on the emulated GPU against the CPU reference: the CUDA program's copy of the
/// mask's hash drops exactly the elements `dropout_uniform` (the CPU reference's) says, and
/// the kept ones are bit-identical in f32 (one rounding from the same double in both);
/// dropout_backward draws the forward's mask; p = 0 is the identity. Seeds negative, past
/// 2^32 and at -2^53; p of 0, 0.3 and 0.9; f32, f16 and bf16; an output written in place.
#[test]
fn dropout_masks_match_the_cpu_reference_exactly() {
    if emulator().is_none() {
        return;
    }
    for dt in ["f32", "f16", "bf16"] {
        let text = format!(
            "step @dropout(
  %x: {dt}[37,70] input,
  %seed: i64[] input,
) {{
  %y = dropout(%x, %seed, p=0.3, stream=7)
  %dx = dropout_backward(%x, %seed, p=0.3, stream=7)
  %w = dropout(%x, %seed, p=0.9, stream=9)
  %z = dropout(%x, %seed, p=0.0, stream=8)
  return %y, %dx, %w, %z
}}"
        );
        let graph = memplan::parse(&text).unwrap();
        memplan::verify(&graph).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let x = graph.args[0];
        let over_x = graph.returns.iter().filter(|r| plan.value_buffer[r.value] == plan.value_buffer[x]).count();
        assert_eq!(over_x, 1, "{dt}: the last op reading %x writes its output over it");
        let program = Program::new(&graph, &plan).unwrap();
        for seed in [0_i64, 7, -3, (1 << 40) + 17, -(1 << 53)] {
            let mut args = init_args(&graph, 1).unwrap();
            args.insert("seed".into(), HostTensor::from_f64(TensorType::new(DType::I64, vec![]), &[seed as f64]));
            let backend = EmuBackend::new(emulator().unwrap(), program.arena_bytes, program.scratch_bytes.max(1), &program.generated);
            let mut exec = Executor::new(backend, program.clone());
            exec.poison().unwrap();
            exec.upload(&args, Upload::All).unwrap();
            exec.run().unwrap();
            let gpu = exec.result().unwrap();
            assert!(exec.backend.launches.iter().all(|&k| k == DROPOUT), "{:?}", exec.backend.launches);
            let cpu = run_step(&graph, Placement::Planned(&plan), &args).unwrap();
            let x = args["x"].to_f64();
            for (name, p, stream) in [("y", 0.3, 7), ("dx", 0.3, 7), ("w", 0.9, 9), ("z", 0.0, 8)] {
                let (g, c) = (gpu.returns[name].to_f64(), cpu.returns[name].to_f64());
                let case = format!("{dt}, seed {seed}, %{name}");
                for (i, (&gi, &ci)) in g.iter().zip(&c).enumerate() {
                    let kept = dropout_uniform(seed, stream, i as u64) >= p;
                    assert_eq!(gi == 0.0, !kept || x[i] == 0.0, "{case}: element {i} (x {}, kept {kept})", x[i]);
                    assert_eq!(ci == 0.0, gi == 0.0, "{case}: element {i}");
                    // f16 and bf16 round through f32 on the GPU (once on the CPU): an ulp at most.
                    assert!((gi - ci).abs() <= ci.abs() / 128.0, "{case}: element {i}: {gi} vs {ci}");
                }
                if dt == "f32" {
                    assert_eq!(gpu.returns[name].bytes, cpu.returns[name].bytes, "{case}");
                }
            }
            assert_eq!(gpu.returns["y"], gpu.returns["dx"], "{dt}, seed {seed}: the backward's mask is the forward's");
            assert_eq!(gpu.returns["z"].bytes, args["x"].bytes, "{dt}, seed {seed}: p = 0 is the identity");
            let dropped = g_dropped(&gpu.returns["w"].to_f64());
            assert!((2000..2600).contains(&dropped), "{dt}, seed {seed}: {dropped} of 2590 dropped at p = 0.9");
        }
    }
}

/// How many elements are 0.
fn g_dropped(values: &[f64]) -> usize {
    values.iter().filter(|&&v| v == 0.0).count()
}

/// Grouped, depthwise, dilated and transposed convolutions on the emulated GPU, forward and
/// backward (through `backward`, so conv2d_backward and conv_transpose2d_backward run too),
/// against the CPU reference: groups, depthwise (groups = C_in = C_out), dilation 2, stride 2
/// with output_padding 1, output_padding below the dilation only, a gradient read through a
/// strided view, and sizes that take several tiles and split-K (igemm_finish).
#[test]
fn conv_variants_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // (op, x, w, attributes)
    let cases = [
        ("conv2d", "f32[2,4,6,6]", "f32[6,2,3,3]", "padding=[1, 1], groups=2"),
        ("conv2d", "f32[2,3,7,7]", "f32[3,1,3,3]", "stride=[2, 2], padding=[1, 1], groups=3"),
        ("conv2d", "f32[1,2,9,8]", "f32[3,2,3,3]", "padding=[2, 1], dilation=[2, 2]"),
        ("conv2d", "f16[2,4,8,8]", "f16[4,2,3,3]", "stride=[2, 1], padding=[2, 2], dilation=[2, 2], groups=2"),
        ("conv_transpose2d", "f32[2,3,4,4]", "f32[3,3,3,3]", "stride=[2, 2], padding=[1, 1], output_padding=[1, 1]"),
        ("conv_transpose2d", "f32[1,4,5,5]", "f32[4,3,3,3]", "dilation=[2, 2], groups=2"),
        ("conv_transpose2d", "f32[2,4,3,3]", "f32[4,1,3,3]", "stride=[2, 2], padding=[1, 1], output_padding=[1, 1], groups=4"),
        ("conv_transpose2d", "bf16[1,2,4,3]", "bf16[2,3,2,3]", "stride=[1, 2], padding=[0, 1], output_padding=[1, 0], dilation=[2, 1]"),
        ("conv_transpose2d", "f32[2,2,16,16]", "f32[2,3,2,2]", "stride=[2, 2]"),
        ("conv2d", "f32[2,3,20,20]", "f32[5,3,3,3]", "padding=[1, 1], dilation=[1, 2]"),
    ];
    let mut finished = false;
    for (seed, (op, x, w, attrs)) in cases.into_iter().enumerate() {
        // The loss sums y² over a slice of the channels: the gradient reaches the backward
        // op as a strided view with zeros beside it.
        let text = format!(
            "step @conv(
  %x: {x} param,
  %w: {w} param,
) {{
  %y = {op}(%x, %w, {attrs})
  %sq = mul(%y, %y)
  %part = slice(%sq, axis=1, start=1, end=3)
  %loss = sum(%part, axes=[0, 1, 2, 3])
  backward %loss with sgd(lr=0.01)
  return %loss, %y
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let backward = if op == "conv2d" { OpKind::Conv2dBackward } else { OpKind::ConvTranspose2dBackward };
        assert!(graph.ops.iter().any(|o| o.kind == backward), "case {seed}: no {backward}");
        let (launches, _) = emulated_matches_reference(&graph, &plan, 2, seed as u64)
            .unwrap_or_else(|err| panic!("case {seed} ({op}, {attrs}): {err}\n{text}"));
        assert!(launches.contains(&"igemm"), "case {seed}: {launches:?}");
        finished |= launches.contains(&"igemm_finish");
    }
    assert!(finished, "no case split its depth (igemm_finish)");
}

/// embedding_bag on the emulated GPU, forward and backward, against the CPU reference: sum
/// and mean, bags of different lengths and an empty one (offsets an input), a bf16 table.
#[test]
fn embedding_bag_matches_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    for (seed, (dt, mode)) in [("f32", "sum"), ("f32", "mean"), ("bf16", "mean")].into_iter().enumerate() {
        let text = format!(
            "step @bags(
  %table: {dt}[9,5] param,
  %ids: i64[7] input,
  %offsets: i64[4] input,
) {{
  %out = embedding_bag(%table, %ids, %offsets, mode=\"{mode}\")
  %sq = mul(%out, %out)
  %loss = sum(%sq, axes=[0, 1])
  backward %loss with sgd(lr=0.1)
  return %loss, %out
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let mut args = init_args(&graph, 120 + seed as u64).unwrap();
        let int = |shape: u64, values: &[f64]| HostTensor::from_f64(TensorType::new(DType::I64, vec![shape]), values);
        args.insert("ids".into(), int(7, &[3.0, 8.0, 3.0, 0.0, 5.0, 5.0, 1.0]));
        args.insert("offsets".into(), int(4, &[0.0, 2.0, 2.0, 5.0]));
        let (launches, _) = emulated_from(&graph, &plan, 2, args, LowerOptions::default())
            .unwrap_or_else(|err| panic!("case {seed} ({dt}, {mode}): {err}\n{text}"));
        for kernel in [EMBEDDING_BAG, EMBEDDING_BAG_BACKWARD] {
            assert!(launches.contains(&kernel), "case {seed}: {kernel} did not run: {launches:?}");
        }
    }
}

/// grid_sample on the emulated GPU, forward and backward (dx and dgrid through
/// `backward`, the grid a param), against the CPU reference: bilinear and nearest, zeros and
/// border, both align_corners, positions outside the image (N(0, 1) grids), f32 and bf16.
#[test]
fn grid_sample_matches_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    let cases = [
        ("f32", r#"mode="bilinear", padding_mode="zeros""#),
        ("f32", r#"mode="bilinear", padding_mode="border", align_corners=true"#),
        ("f32", r#"mode="nearest", padding_mode="zeros", align_corners=true"#),
        ("bf16", r#"mode="bilinear", padding_mode="zeros""#),
    ];
    for (seed, (dt, attrs)) in cases.into_iter().enumerate() {
        let text = format!(
            "step @grid(
  %x: {dt}[2,3,5,6] param,
  %grid: {dt}[2,4,3,2] param,
) {{
  %y = grid_sample(%x, %grid, {attrs})
  %sq = mul(%y, %y)
  %loss = sum(%sq, axes=[0, 1, 2, 3])
  backward %loss with sgd(lr=0.01)
  return %loss, %y
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let (launches, _) = emulated_matches_reference(&graph, &plan, 2, 110 + seed as u64)
            .unwrap_or_else(|err| panic!("case {seed} ({attrs}): {err}\n{text}"));
        for kernel in [GRID_SAMPLE, GRID_SAMPLE_BACKWARD_DATA, GRID_SAMPLE_BACKWARD_GRID] {
            assert!(launches.contains(&kernel), "case {seed}: {kernel} did not run: {launches:?}");
        }
    }
}

/// conv3d on the emulated GPU, forward and backward (conv3d_backward through `backward`),
/// against the CPU reference: strides, padding and dilation per dimension, groups, bf16,
/// and the gradient read through a strided view (a slice of the channels).
#[test]
fn conv3d_matches_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // (x, w, attributes)
    let cases = [
        ("f32[2,3,4,5,5]", "f32[4,3,2,3,3]", "padding=[0, 1, 1]"),
        ("f32[1,4,5,6,5]", "f32[4,2,3,2,3]", "stride=[2, 1, 2], padding=[1, 0, 1], dilation=[1, 2, 1], groups=2"),
        ("bf16[2,2,3,4,4]", "bf16[3,2,1,3,3]", "stride=[1, 2, 2], padding=[0, 1, 1]"),
    ];
    for (seed, (x, w, attrs)) in cases.into_iter().enumerate() {
        let text = format!(
            "step @conv3d(
  %x: {x} param,
  %w: {w} param,
) {{
  %y = conv3d(%x, %w, {attrs})
  %sq = mul(%y, %y)
  %part = slice(%sq, axis=1, start=1, end=3)
  %loss = sum(%part, axes=[0, 1, 2, 3, 4])
  backward %loss with sgd(lr=0.01)
  return %loss, %y
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let (launches, _) = emulated_matches_reference(&graph, &plan, 2, 90 + seed as u64)
            .unwrap_or_else(|err| panic!("case {seed} ({attrs}): {err}\n{text}"));
        for kernel in [CONV3D, CONV3D_BACKWARD_DATA, CONV3D_BACKWARD_WEIGHT] {
            assert!(launches.contains(&kernel), "case {seed}: {kernel} did not run: {launches:?}");
        }
    }
}

/// Resampling, masks and binary cross-entropy on the emulated GPU, forward and backward
/// (through `backward`), against the CPU reference: adaptive bins that tile, overlap or
/// outnumber the pixels (global pooling too), nearest resizing by integer factors, by
/// ratios that are not (2 → 82 holds the float32 index that differs from the exact one),
/// and down; x read through a transposed view; masks broadcast; f16 and bf16; a loss over
/// 8192 elements (two blocks of partial sums).
#[test]
fn resampling_masks_and_bce_match_the_cpu_reference() {
    if emulator().is_none() {
        return;
    }
    // (dtype, N, C, H, W, pooled (PH, PW), resized (OH, OW), downsampled (DH, DW))
    let cases = [
        ("f32", 2, 3, 5, 7, (3, 3), (10, 10), (2, 3)),
        ("f32", 1, 2, 4, 4, (1, 1), (8, 8), (4, 4)),
        ("f16", 2, 2, 6, 6, (4, 8), (8, 16), (3, 2)),
        ("bf16", 1, 1, 3, 2, (5, 7), (10, 7), (1, 1)),
        ("f32", 1, 1, 3, 3, (2, 3), (82, 5), (2, 2)),
        ("f32", 2, 1, 64, 64, (8, 8), (64, 64), (32, 32)),
    ];
    for (seed, (dt, n, c, h, w, (ph, pw), (oh, ow), (dh, dw))) in cases.into_iter().enumerate() {
        let text = format!(
            "step @resample(
  %x: {dt}[{n},{c},{w},{h}] param,
  %r: {dt}[{n},{c},{dh},{dw}] input,
  %keep: bool[{oh},1] input,
  %pad: bool[{ow}] input,
  %t: {dt}[{n},{c},{oh},{ow}] input,
) {{
  %xt = transpose(%x, perm=[0, 1, 3, 2])
  %p = adaptive_avg_pool2d(%xt, output_size=[{ph}, {pw}])
  %u = upsample_nearest2d(%p, output_size=[{oh}, {ow}])
  %z = fill(shape=[], dtype={dt}, value=0.5)
  %s = where(%keep, %u, %z)
  %f = masked_fill(%s, %pad, value=-3.0)
  %l1 = bce_with_logits(%f, %t)
  %d = upsample_nearest2d(%xt, output_size=[{dh}, {dw}])
  %e = mul(%d, %r)
  %l2 = mean(%e, axes=[0, 1, 2, 3])
  %loss = add(%l1, %l2)
  backward %loss with sgd(lr=0.5)
  return %loss, %u, %f
}}"
        );
        let graph = memplan::expand(&memplan::parse(&text).unwrap()).unwrap();
        let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        memplan::check(&graph, &plan).unwrap();
        let (launches, _) = emulated_matches_reference(&graph, &plan, 2, seed as u64)
            .unwrap_or_else(|err| panic!("case {seed} ({dt}): {err}\n{text}"));
        for kernel in [
            ADAPTIVE_AVG_POOL2D,
            ADAPTIVE_AVG_POOL2D_BACKWARD,
            UPSAMPLE_NEAREST2D,
            UPSAMPLE_NEAREST2D_BACKWARD,
            BCE_PARTIAL,
            BCE_MEAN,
            BCE_BACKWARD,
            WHERE_SELECT,
            MASKED_FILL,
        ] {
            assert!(launches.contains(&kernel), "case {seed}: {kernel} did not run");
        }
    }
}

/// Runs the `unary` copy kernel on `n` elements stored as `bytes` of dtype `from`, into a
/// tensor of `to`, returning the stored bits.
fn cast(bytes: &[u8], from: DType, to: DType) -> Vec<u8> {
    let emu = emulator().unwrap();
    let n = bytes.len() as u64 / from.size();
    let input = View::dense(Addr::arena(0), from, &[n]);
    let output = View::dense(Addr::arena((n * from.size()).div_ceil(256) * 256), to, &[n]);
    let arena = output.addr.offset + n * to.size();
    let mut backend = EmuBackend::new(emu, arena, 1, &Default::default());
    backend.upload(0, bytes).unwrap();
    let (grid, block) = grid_1d(n);
    let launch = Launch {
        kernel: UNARY.into(),
        grid,
        block,
        args: vec![Arg::I32(OP_COPY), Arg::Tensor(output.clone()), Arg::Tensor(input), Arg::F64(0.0)],
    };
    let args = launch.resolve(backend.bases()).unwrap();
    backend.launch(&launch, &args).unwrap();
    let mut out = vec![0u8; (n * to.size()) as usize];
    backend.download(output.addr.offset, &mut out).unwrap();
    out
}

/// [`cast`] from f32 values.
fn cast_f32(values: &[f32], to: DType) -> Vec<u8> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    cast(&bytes, DType::F32, to)
}

/// Values around every rounding boundary of f16 and bf16: specials, the normal and
/// subnormal ranges, ties, and overflow.
fn edge_values() -> Vec<f32> {
    let mut values =
        vec![0.0, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, f32::MAX, -f32::MAX];
    values.extend([65504.0, 65519.99, 65520.0, 65536.0, 6.1035156e-5, 5.9604645e-8, 2.9802322e-8, 2.9802326e-8, 1e-10]);
    for bits in [
        0x3380_0000u32,
        0x3300_0000,
        0x3300_0001,
        0x387f_e000,
        0x3880_1000,
        0x3f80_1000,
        0x3f80_3000,
        0x3f80_8000,
        0x3f81_8000,
        0x4780_0000,
    ] {
        values.push(f32::from_bits(bits));
        values.push(f32::from_bits(bits + 1));
        values.push(f32::from_bits(bits - 1));
    }
    // A sweep of bit patterns across the whole range.
    let mut x = 0x1234_5678u32;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        values.push(f32::from_bits(x));
    }
    values
}

#[test]
fn stores_round_to_f16_and_bf16_like_half() {
    if emulator().is_none() {
        return;
    }
    let values = edge_values();
    let f16s = cast_f32(&values, DType::F16);
    for (i, &v) in values.iter().enumerate() {
        let got = u16::from_le_bytes([f16s[2 * i], f16s[2 * i + 1]]);
        let want = f16::from_f32(v);
        let ok = if v.is_nan() { f16::from_bits(got).is_nan() } else { got == want.to_bits() };
        assert!(ok, "f16 of {v:e} ({:#010x}): got {got:#06x}, want {:#06x}", v.to_bits(), want.to_bits());
    }
    let bf16s = cast_f32(&values, DType::Bf16);
    for (i, &v) in values.iter().enumerate() {
        let got = u16::from_le_bytes([bf16s[2 * i], bf16s[2 * i + 1]]);
        let want = bf16::from_f32(v);
        let ok = if v.is_nan() { bf16::from_bits(got).is_nan() } else { got == want.to_bits() };
        assert!(ok, "bf16 of {v:e} ({:#010x}): got {got:#06x}, want {:#06x}", v.to_bits(), want.to_bits());
    }
}

#[test]
fn every_f16_and_bf16_loads_exactly() {
    if emulator().is_none() {
        return;
    }
    for dtype in [DType::F16, DType::Bf16] {
        let bits: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        let out = cast(&bits, dtype, DType::F32);
        for b in 0..=u16::MAX {
            let got = f32::from_le_bytes(out[4 * b as usize..4 * b as usize + 4].try_into().unwrap());
            let want = if dtype == DType::F16 { f16::from_bits(b).to_f32() } else { bf16::from_bits(b).to_f32() };
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{dtype} {b:#06x}: got {got:e}, want {want:e}"
            );
        }
    }
}
