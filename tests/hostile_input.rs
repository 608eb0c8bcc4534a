//! Hostile input (issue 21): the binary on inputs built to break it gives a clear error and
//! a non-zero exit, never a panic, an abort, a hang or a wrong number.

#[path = "support/bin.rs"]
mod bin;
use bin::*;

use std::path::Path;

/// Runs `memplan ARGS` and returns (exit status, stderr with its whitespace collapsed).
fn run(args: &[&str]) -> (Option<i32>, String, usize) {
    let out = memplan(args);
    let stderr = text(&out.stderr);
    (out.status.code(), stderr.split_whitespace().collect::<Vec<_>>().join(" "), stderr.len())
}

fn write(dir: &Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.to_str().unwrap().to_string()
}

/// An error past column 65,535 (miette's formatter panicked on the padding) in a .step, a
/// CSV and a plan JSON's `ir`: located in the file, with its label and hint, and the
/// snippet clipped to a window around the error (it printed the whole line).
#[test]
fn errors_far_along_long_lines() {
    let dir = scratch_dir("hostile", "long-lines");
    let pad = " ".repeat(100_000);
    let step = write(&dir, "long.step", &format!("step @s(%x: f32[4] input) {{\n  %y = relu(%x){pad} %z = bogus(%x)\n  return %y\n}}\n"));
    let (code, stderr, bytes) = run(&["check", &step]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("long.step:2:100022]") && stderr.contains("unknown op `bogus`"), "{stderr}");
    assert!(stderr.contains("no op has this name") && stderr.contains("help: docs/IR.md lists every op"), "{stderr}");
    assert!(bytes < 2000, "{bytes} bytes of stderr: {stderr}");

    let digits = "9".repeat(100_000);
    let csv = write(&dir, "long.csv", &format!("id,lower,upper,size\n0,0,1,8\n1,0,1,{digits}\n"));
    let (code, stderr, bytes) = run(&["alloc", &csv]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("long.csv:3:7]") && stderr.contains("is not a valid size"), "{stderr}");
    assert!(bytes < 2000, "{bytes} bytes of stderr: {stderr}");
    let wide = write(&dir, "wide.csv", &format!("id,lower,upper,size\n0,0,1,8,{digits},5\n"));
    let (code, stderr, bytes) = run(&["alloc", &wide]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("wide.csv:2:1]") && stderr.contains("expected 4 comma-separated fields, found 6"), "{stderr}");
    assert!(bytes < 2000, "{bytes} bytes of stderr: {stderr}");

    let out = memplan(&["plan", "ir/models/mlp.step", "--format", "json"]);
    assert!(out.status.success());
    let mut json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ir = json["ir"].as_str().unwrap().replacen("\n  %b1", &format!("\n{pad}%q = bogus(%x)\n  %b1"), 1);
    json["ir"] = ir.into();
    let plan = write(&dir, "long.json", &json.to_string());
    let (code, stderr, bytes) = run(&["report", &plan]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("(ir):3:100004]") && stderr.contains("its `ir` is not a valid step"), "{stderr}");
    assert!(bytes < 2000, "{bytes} bytes of stderr: {stderr}");
}

fn load(file: &str) -> memplan::ir::graph::Graph {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    memplan::expand(&memplan::parse(&src).unwrap()).unwrap()
}

/// Synthetic labels and ids fit every op reading them, directly or through a view: the
/// smallest range (they took it from the first reader: bool_i64's `%ids`, read first by an
/// `add`, drew labels up to 9 for 8 classes and `run` failed at the default seed).
#[test]
fn synthetic_labels_fit_every_reader() {
    use memplan::exec::cpu::{Placement, run_step};
    use memplan::exec::data::init_args;
    let graph = load("ir/features/bool_i64.step");
    for seed in 0..20 {
        let args = init_args(&graph, seed).unwrap();
        assert!(args["ids"].to_f64().iter().all(|&id| (0.0..8.0).contains(&id)), "seed {seed}: {:?}", args["ids"].to_f64());
        run_step(&graph, Placement::Unplanned, &args).unwrap();
    }
    // Through a view, with a smaller bound on a later reader.
    let src = "step @s(%table: f32[3,4] param, %big: f32[50,4] param, %ids: i64[2,2] input) {
      %f = reshape(%ids, shape=[4])
      %a = embedding(%big, %f)
      %b = embedding(%table, %f)
      %s = add(%a, %b)
      %loss = mean(%s, axes=[0, 1])
      return %loss
    }";
    let graph = memplan::parse(src).unwrap();
    memplan::verify(&graph).unwrap();
    for seed in 0..20 {
        let ids = init_args(&graph, seed).unwrap()["ids"].to_f64();
        assert!(ids.iter().all(|&id| (0.0..3.0).contains(&id)), "seed {seed}: {ids:?}");
    }
    let out = memplan(&["run", "ir/features/bool_i64.step", "--compare-unplanned"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A runtime error names the op as the IR prints it and its line, like a verify error
/// (labels given through `--weights` out of range: it said `cross_entropy: index 9 is out
/// of range 0..8`, no op, no line).
#[test]
fn runtime_errors_name_the_op_and_its_line() {
    use memplan::exec::data::{HostTensor, Tensors};
    use memplan::ir::types::{DType, TensorType};
    let dir = scratch_dir("hostile", "runtime-errors");
    let mut weights = Tensors::new();
    weights.insert("ids".into(), HostTensor::from_f64(TensorType::new(DType::I64, vec![4]), &[0.0, 9.0, 1.0, 2.0]));
    let path = dir.join("ids.safetensors");
    std::fs::write(&path, memplan::formats::safetensors::to_bytes(&weights)).unwrap();
    let (code, stderr, _) = run(&["run", "ir/features/bool_i64.step", "--weights", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("`%loss = cross_entropy(%logits, %ids)`: cross_entropy: index 9 is out of range 0..8"), "{stderr}");
    assert!(stderr.contains("[ir/features/bool_i64.step:19:11]") && stderr.contains("this op"), "{stderr}");
}

/// `run` on steps too large for the machine: sizes checked before anything is allocated,
/// saying what is needed and what is available, exit 1 (it aborted, exit 134); an arena
/// that cannot be allocated is an error too (fallible allocation), never an abort.
#[test]
fn run_refuses_steps_larger_than_memory() {
    let dir = scratch_dir("hostile", "too-large");
    let step = |dims: &str| format!("step @big(%x: f32[{dims}] input) {{\n  %y = relu(%x)\n  %z = relu(%y)\n  return %z\n}}\n");
    let huge = write(&dir, "huge.step", &step("1000000000,1000000000"));
    let (code, stderr, _) = run(&["run", &huge]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("running @big on the CPU is too large") && stderr.contains("more than 2^64 - 1 bytes"), "{stderr}");
    // 4 TB of input: more than any machine this runs on has.
    let large = write(&dir, "large.step", &step("1000000,1000000"));
    let (code, stderr, _) = run(&["run", &large, "--compare-unplanned"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("running @big on the CPU needs ") && stderr.contains("with --compare-unplanned, but "), "{stderr}");
    assert!(stderr.contains("is available") && stderr.contains("the arena (4000000000000 B"), "{stderr}");
    // 128 MiB of f64 numbers for one op under a 150 MB address space: the allocation
    // fails, and says so.
    let arena = write(&dir, "arena.step", &step("4096,4096"));
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 150000; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_memplan"))
        .args(["run", &arena])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("needs 134217728 B (128.00 MiB), which this machine cannot"), "{stderr}");
}

/// `run` states the CPU executor's memory: the arena, the arguments, the largest op's
/// inputs and outputs as f64 numbers, the results.
#[test]
fn run_states_its_memory() {
    use memplan::exec::cpu::{Footprint, Placement};
    let graph = load("ir/models/mlp.step");
    let plan = memplan::plan(&graph, &memplan::passes::PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    let footprint = Footprint::of(&graph, Placement::Planned(&plan)).unwrap();
    // sgd(%w1, %dw1): two inputs and an output of 784*256 elements, 8 bytes each.
    let op = 8 * 3 * 784 * 256;
    let params = 4 * (784 * 256 + 256 + 256 * 10 + 10);
    let args = params + 4 * 64 * 784 + 4 * 64;
    assert_eq!(footprint, Footprint { memory: plan.arena_bytes, args, op, results: params + 4 });
    let out = memplan(&["run", "ir/models/mlp.step"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let total = footprint.total().unwrap();
    assert!(stdout.contains(&format!("CPU memory: {total} B")) && stdout.contains(&format!("as f64 numbers ({op} B")), "{stdout}");
}
