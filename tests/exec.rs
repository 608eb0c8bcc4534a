//! The CPU reference executor on the corpus: planned runs are bit-identical to unplanned
//! ones on every valid step; a planted wrong offset breaks both the checker and that
//! identity; the MLP trains; weights go in and out through safetensors.

use std::path::Path;
use std::process::Command;

use memplan::exec::cpu::{Placement, StepResult, advance, run_step, run_step_in_chunks};
use memplan::exec::data::{Tensors, init_args};
use memplan::ir::graph::Graph;
use memplan::passes::PlanOptions;
use memplan::{Plan, check, parse, plan};

fn load(file: &str) -> (Graph, Plan) {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let graph = memplan::expand(&parse(&src).unwrap()).unwrap();
    let plan = plan(&graph, &PlanOptions::default()).unwrap();
    check(&graph, &plan).unwrap();
    (graph, plan)
}

fn both(graph: &Graph, plan: &Plan, args: &Tensors) -> (StepResult, StepResult) {
    let planned = run_step(graph, Placement::Planned(plan), args).unwrap();
    let unplanned = run_step(graph, Placement::Unplanned, args).unwrap();
    (planned, unplanned)
}

#[test]
fn every_valid_step_runs_bit_identical_planned_and_unplanned() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<String> = ["ir/models", "ir/features"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(root.join(dir)).unwrap().map(move |e| format!("{dir}/{}", e.unwrap().file_name().to_string_lossy())))
        .filter(|f| f.ends_with(".step"))
        .collect();
    files.sort();
    assert!(files.len() >= 13);
    let mut ran = 0;
    for file in &files {
        let (graph, plan) = load(file);
        // Full-size models (GPT-2 small, VGG-16 at batch 256) are planned by the corpus test
        // but too big to run in a unit test on a CPU; their tiny variants run here.
        if plan.arena_bytes > SMALL_ENOUGH_TO_RUN {
            continue;
        }
        ran += 1;
        let mut args = init_args(&graph, 7).unwrap();
        for step in 0..2 {
            let (planned, unplanned) = both(&graph, &plan, &args);
            let differences = planned.differences(&unplanned);
            assert!(differences.is_empty(), "{file} step {step}:\n{}", differences.join("\n"));
            // Pointwise ops (optimizers, activations, in-place ones too) run 7 elements at a
            // time: the same bits.
            let chunked = run_step_in_chunks(&graph, Placement::Planned(&plan), &args, 7).unwrap();
            let differences = planned.differences(&chunked);
            assert!(differences.is_empty(), "{file} step {step}, in chunks:\n{}", differences.join("\n"));
            for (name, t) in planned.returns.iter().chain(&planned.updated) {
                assert!(t.to_f64().iter().all(|x| !x.is_nan()), "{file}: %{name} holds NaN (a read of poisoned bytes?)");
            }
            args = advance(&args, &planned);
        }
    }
    assert!(ran * 4 >= files.len() * 3, "only {ran} of {} steps are small enough to run", files.len());
}

/// Steps whose arena is larger are only planned, not run, in tests.
const SMALL_ENOUGH_TO_RUN: u64 = 64 << 20;

#[test]
fn a_planted_wrong_offset_fails_the_checker_and_the_comparison() {
    let (graph, mut plan) = load("ir/models/mlp.step");
    // Move %da (written at step 10) onto %a, which relu_backward still reads at step 11.
    let find = |name: &str| graph.values.indices().find(|&v| graph.values[v].name == name).unwrap();
    let (da, a) = (plan.value_buffer[find("da")], plan.value_buffer[find("a")]);
    plan.buffers[da].offset = plan.buffers[a].offset;
    assert!(check(&graph, &plan).is_err(), "the checker must reject the planted offset");
    let args = init_args(&graph, 1).unwrap();
    let (planned, unplanned) = both(&graph, &plan, &args);
    let differences = planned.differences(&unplanned);
    assert!(!differences.is_empty(), "the planted offset must change the results");
    assert!(differences.iter().any(|d| d.contains("w1")), "{differences:?}");
}

#[test]
fn the_mlp_trains() {
    let (graph, plan) = load("ir/models/mlp.step");
    let mut args = init_args(&graph, 0).unwrap();
    let mut losses = Vec::new();
    for _ in 0..15 {
        let result = run_step(&graph, Placement::Planned(&plan), &args).unwrap();
        losses.push(result.loss().expect("mlp returns its loss"));
        args = advance(&args, &result);
    }
    let (first, last) = (losses[0], *losses.last().unwrap());
    assert!((first - (10f64).ln()).abs() < 0.5, "an untrained 10-class classifier starts near ln 10: {first}");
    assert!(last < 0.7 * first, "15 SGD steps on one batch must lower the loss clearly: {losses:?}");
}

#[test]
fn run_saves_weights_that_load_back_and_never_overwrites() {
    let dir = std::env::temp_dir().join(format!("memplan-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (first, second) = (dir.join("after1.safetensors"), dir.join("after2.safetensors"));
    let _ = std::fs::remove_file(&first);
    let _ = std::fs::remove_file(&second);
    let memplan = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_memplan")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
    };
    let file = "ir/features/sgd_momentum.step";
    let out = memplan(&["run", file, "--steps", "2", "--save", first.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Two steps from scratch == one step, save, one more step from the saved weights.
    let out = memplan(&["run", file, "--steps", "1", "--save", second.to_str().unwrap()]);
    assert!(out.status.success());
    let resumed = dir.join("resumed.safetensors");
    let _ = std::fs::remove_file(&resumed);
    let out = memplan(&["run", file, "--steps", "1", "--weights", second.to_str().unwrap(), "--save", resumed.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (a, b) = (std::fs::read(&first).unwrap(), std::fs::read(&resumed).unwrap());
    assert_eq!(a, b, "resuming from saved weights continues the same training");
    // Saving over an existing file is refused and leaves it intact.
    let out = memplan(&["run", file, "--save", first.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("never overwrites"));
    assert_eq!(std::fs::read(&first).unwrap(), a);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_compare_unplanned_reports_agreement() {
    let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["run", "ir/models/mlp.step", "--steps", "3", "--compare-unplanned"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("step 3: loss"), "{stdout}");
    assert!(stdout.contains("agree bit for bit"), "{stdout}");
}

/// Trains `file` for `steps` steps in its planned arena and returns the losses.
fn train(file: &str, steps: usize) -> Vec<f64> {
    let (graph, plan) = load(file);
    let mut args = init_args(&graph, 0).unwrap();
    let mut losses = Vec::new();
    for _ in 0..steps {
        let result = run_step(&graph, Placement::Planned(&plan), &args).unwrap();
        losses.push(result.loss().expect("the models return their loss"));
        args = advance(&args, &result);
    }
    losses
}

#[test]
fn the_tiny_models_written_forward_only_train() {
    // Adam and AdamW fall from the first step.
    for file in ["ir/models/mlp_adam.step", "ir/models/gpt2_tiny.step"] {
        let losses = train(file, 3);
        assert!(losses[2] < losses[1] && losses[1] < losses[0], "{file}: the loss must fall: {losses:?}");
    }
    // SGD with momentum 0.9 on a batch of 2 oscillates for a few steps, then fits the batch.
    let losses = train("ir/models/resnet18_tiny.step", 8);
    assert!(losses[7] < 0.1 * losses[0], "resnet18_tiny must fit its batch: {losses:?}");
}

/// `cross_entropy(logits, y, f32_loss=true)` is `cross_entropy(cast(logits, to=f32), y)` with
/// the cast fused. The loss is the same bit for bit (the f64 kernel reads the same values).
/// The logits' gradient is rounded once to bf16, where the pair rounds it to f32 and the
/// cast's gradient then to bf16: the same, except where the f32 value falls exactly halfway
/// between two bf16 values (then the fused one is the nearer to the exact gradient; here 1
/// element of 32768). And the plan of the training step holds no f32 copy of the logits.
#[test]
fn f32_loss_is_the_cast_and_the_loss_fused() {
    let args = "%w: f32[16,512] param,\n  %x: f32[64,16] input,\n  %y: i64[64] input,";
    let head = "%wb = cast(%w, to=bf16)\n  %xb = cast(%x, to=bf16)\n  %logits = matmul(%xb, %wb)";
    let by_hand =
        |body: &str, returns: &str| format!("step @s(\n  {args}\n) {{\n  {head}\n  {body}\n  return {returns}\n}}");
    let fused = by_hand(
        "%loss = cross_entropy(%logits, %y, label_smoothing=0.1, f32_loss=true)
  %one = fill(shape=[], dtype=f32, value=1.0)
  %dlogits = cross_entropy_backward(%one, %logits, %y, label_smoothing=0.1, f32_loss=true)",
        "%loss, %dlogits",
    );
    let unfused = by_hand(
        "%l32 = cast(%logits, to=f32)
  %loss = cross_entropy(%l32, %y, label_smoothing=0.1)
  %one = fill(shape=[], dtype=f32, value=1.0)
  %d32 = cross_entropy_backward(%one, %l32, %y, label_smoothing=0.1)
  %dlogits = cast(%d32, to=bf16)",
        "%loss, %dlogits, %d32",
    );
    let run = |text: &str| {
        let graph = parse(text).unwrap();
        let plan = plan(&graph, &PlanOptions::default()).unwrap();
        check(&graph, &plan).unwrap();
        run_step(&graph, Placement::Planned(&plan), &init_args(&graph, 3).unwrap()).unwrap().returns
    };
    let (a, b) = (run(&fused), run(&unfused));
    assert_eq!(a["loss"].ty.to_string(), "f32[]");
    assert_eq!(a["loss"], b["loss"]);
    let (da, db, d32) = (a["dlogits"].to_f64(), b["dlogits"].to_f64(), b["d32"].to_f64());
    let mut ties = 0;
    for ((fused, pair), f32_value) in da.iter().zip(&db).zip(&d32) {
        if fused != pair {
            assert_eq!((*f32_value as f32).to_bits() & 0xffff, 0x8000, "{fused} and {pair} differ, not at a tie");
            ties += 1;
        }
    }
    assert!(ties * 1000 < da.len(), "{ties} of {} elements differ", da.len());

    let step = |loss: &str| by_hand(loss, "%loss").replace("  return", "  backward %loss with adamw()\n  return");
    let peak = |text: &str| {
        let graph = memplan::expand(&parse(text).unwrap()).unwrap();
        let plan = plan(&graph, &PlanOptions::default()).unwrap();
        check(&graph, &plan).unwrap();
        plan.lower_bound
    };
    let fused = peak(&step("%loss = cross_entropy(%logits, %y, label_smoothing=0.1, f32_loss=true)"));
    let unfused = peak(&step("%l32 = cast(%logits, to=f32)\n  %loss = cross_entropy(%l32, %y, label_smoothing=0.1)"));
    // The peak falls by more than the bf16 logits' bytes (64·512·2; measured: 112 KiB of the
    // f32 copy's 128 KiB).
    assert!(fused + 64 * 512 * 2 < unfused, "{fused} vs {unfused}");
}
