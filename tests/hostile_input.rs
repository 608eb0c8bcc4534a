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
    let huge = write(&dir, "huge.step", &step("1500000000,1500000000"));
    let (code, stderr, _) = run(&["run", &huge]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("running @big on the CPU is too large") && stderr.contains("more than 2^64 - 1 bytes"), "{stderr}");
    // 4 TB of input: more than any machine this runs on has.
    let large = write(&dir, "large.step", &step("1000000,1000000"));
    let (code, stderr, _) = run(&["run", &large, "--compare-unplanned"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("running @big on the CPU needs ") && stderr.contains("with --compare-unplanned, but "), "{stderr}");
    assert!(stderr.contains("is available") && stderr.contains("the arena (4000000000000 B"), "{stderr}");
    // Under a shrinking address space (`ulimit -v`) the run is refused before anything is
    // allocated, saying what limits it, or succeeds; if an allocation still fails, it says
    // which and how many bytes it needed (the arena, 64 MiB). It never aborts.
    let arena = write(&dir, "arena.step", &step("4096,4096"));
    let mut said = Vec::new();
    for kib in [150_000, 250_000, 350_000, 450_000, 490_000] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {kib}; exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_memplan"))
            .args(["run", &arena])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        match out.status.code() {
            Some(0) => said.push("ran"),
            Some(1) if stderr.contains("needs 218103808 B (208.00 MiB), but ") && stderr.contains("is available (the address-space limit (`ulimit -v`)") => {
                said.push("refused")
            }
            Some(1) if stderr.contains("the arena needs 67108864 B (64.00 MiB), which this machine cannot") => said.push("arena"),
            status => panic!("ulimit -v {kib}: exit {status:?}\n{stderr}"),
        }
    }
    assert!(said.contains(&"refused") && said.contains(&"ran"), "{said:?}");
}

/// Issue 27: a relu of 600,000,000 f32 elements needs 6.7 GiB on the CPU (the arena, the
/// argument, the result; its f64 copies a chunk at a time: they were 9.6 GB). Under a
/// 4 GB address-space limit it is refused at once, naming the parts and what is
/// available; it used to spend 45 s filling memory first.
#[test]
fn run_refuses_what_cannot_fit_before_it_starts() {
    let dir = scratch_dir("hostile", "refused-at-once");
    let relu = write(&dir, "relu.step", "step @big(%x: f32[600000000] input) {\n  %y = relu(%x)\n  return %y\n}\n");
    let started = std::time::Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_memplan"))
        .args(["run", &relu])
        .output()
        .unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("running @big on the CPU needs 7216777216 B (6.72 GiB), but "), "{stderr}");
    assert!(stderr.contains(" is available (") && stderr.contains("the arena (2400000000 B") && stderr.contains("f64 numbers (16777216 B"), "{stderr}");
    // Nothing was filled: planning a one-op step takes milliseconds (2 s leaves room for a
    // loaded machine; filling took tens of seconds).
    assert!(seconds < 2.0, "refused after {seconds:.1} s");
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
    // A pointwise op over more than a chunk holds a chunk of its input and of its output:
    // 2 x 2^20 elements, 8 bytes each, whatever its size.
    let graph = memplan::parse("step @big(%x: f32[4096,4096] input) {\n  %y = relu(%x)\n  return %y\n}\n").unwrap();
    let plan = memplan::plan(&graph, &memplan::passes::PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    let footprint = Footprint::of(&graph, Placement::Planned(&plan)).unwrap();
    assert_eq!(footprint.op, 2 * (1 << 20) * 8);
}

/// Sums past 2^64 - 1 are "too large", never a clamped or wrapped number: `schedule`
/// printed a peak of 18446744073709551615 B for two nodes of 2^63 bytes, `remat` wrapped
/// the topological peak to 0 (and searched forever), `plan --budget` printed `+0 FLOPs`
/// for a recomputed matmul of 2^64 FLOPs. Checkmate errors name fields as the file spells
/// them, and a graph of zero-byte values is not `NaN` of its peak.
#[test]
fn sums_past_64_bits_are_too_large() {
    let dir = scratch_dir("hostile", "too-large-sums");
    let graph = |ram: u64, cpu: i128| {
        format!(
            r#"{{"nodes": [{{"id": 0, "cost_ram": {ram}, "cost_cpu": {cpu}}}, {{"id": 1, "cost_ram": {ram}, "cost_cpu": {cpu}, "backward": true}}],
               "links": [{{"source": 0, "target": 1}}]}}"#
        )
    };
    let ram = write(&dir, "ram.json", &graph(1 << 63, 1));
    for command in ["schedule", "remat"] {
        let (code, stderr, _) = run(&[command, &ram, "--budget", "0.5"][..if command == "remat" { 4 } else { 2 }]);
        assert_eq!(code, Some(1), "{command}: {stderr}");
        assert!(stderr.contains("ram.json: the nodes' `cost_ram` add up to more than 2^64 - 1 bytes: too large"), "{stderr}");
    }
    let cpu = write(&dir, "cpu.json", &graph(8, 1 << 63));
    let (code, stderr, _) = run(&["remat", &cpu, "--budget", "0.5"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cpu.json: the nodes' `cost_cpu` add up to more than 2^64 - 1: too large"), "{stderr}");
    let negative = write(&dir, "negative.json", &graph(8, -1));
    let (code, stderr, _) = run(&["remat", &negative, "--budget", "0.5"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("nodes[0]: `cost_cpu` is -1, not a non-negative integer"), "{stderr}");
    let zero = write(&dir, "zero.json", &graph(0, 1));
    let out = memplan(&["remat", &zero, "--budget", "0.5"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("peak reached      0 bytes (1.0000 of the topological peak)") && !stdout.contains("NaN"), "{stdout}");

    // Matmuls of 2^21 x 2^21 x 2^21: 2^64 FLOPs each, so a step's FLOPs are too large.
    let step = write(
        &dir,
        "flops.step",
        "step @f(%w: f32[2097152,2097152] param, %x: f32[2097152,2097152] input) {
           %h = matmul(%x, %w)
           %a = tanh(%h)
           %b = tanh(%a)
           %c = tanh(%b)
           %s = sum(%c, axes=[0, 1])
           backward %s with sgd(lr=0.1)
           return %s
         }",
    );
    let out = memplan(&["plan", &step, "--budget", "0.9x"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("op(s), FLOPs too large to count (2^64 - 1 or more in one step)") && !stdout.contains("+0 FLOPs"), "{stdout}");
    let out = memplan(&["plan", &step, "--budget", "0.9x", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["base_flops", "extra_flops", "overhead_percent"] {
        assert!(json["remat"][key].is_null(), "{key}: {}", json["remat"]);
    }
    let graph = memplan::expand(&memplan::parse(&std::fs::read_to_string(&step).unwrap()).unwrap()).unwrap();
    let options = memplan::passes::PlanOptions { budget: Some(memplan::passes::remat::Budget::Fraction(0.9)), ..Default::default() };
    let (g, plan) = memplan::passes::plan_step(&graph, &options).unwrap();
    memplan::check(&g, &plan).unwrap();
    let remat = plan.remat.as_ref().unwrap();
    assert!(!remat.recomputes.is_empty() && remat.flops == u64::MAX);
    assert_eq!((remat.extra_flops(), remat.overhead_percent()), (None, None));
}

/// Input errors say where: a file that is not UTF-8 gives the byte offset (and its line
/// and column); a buffer list whose live sizes overflow gives the row.
#[test]
fn errors_say_where() {
    let dir = scratch_dir("hostile", "where");
    let path = dir.join("latin1.step");
    std::fs::write(&path, b"step @s(%x: f32[4] input) {\n  return %x \xff\xfe\n}\n").unwrap();
    let (code, stderr, _) = run(&["check", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("latin1.step:2:13: not UTF-8 text: no valid UTF-8 character starts at byte offset 40 (0xff)"), "{stderr}");
    let csv = write(&dir, "overflow.csv", &format!("id,lower,upper,size\na,0,5,{0}\n\nb,5,9,{0}\nc,7,8,1\n", u64::MAX));
    let (code, stderr, _) = run(&["alloc", &csv]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("overflow.csv:5: buffer c: the buffers live at step 7 add up to more than 2^64 - 1 bytes"), "{stderr}");
}

/// Control characters in `loc("...")` (an escape sequence for the terminal) are escaped
/// wherever memplan prints them: the IR, reports, errors.
#[test]
fn control_characters_are_escaped() {
    let dir = scratch_dir("hostile", "controls");
    let step = write(&dir, "c.step", "step @s(%x: f32[4] input) {\n  %y = relu(%x) loc(\"a\u{1b}[31m.py\":3, \"m\u{7}\")\n  return %y\n}\n");
    for args in [vec!["print", &step], vec!["report", &step, "--by", "loc"], vec!["report", &step, "--by", "module"], vec!["plan", &step]] {
        let out = memplan(&args);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(!stdout.contains(['\u{1b}', '\u{7}']), "{args:?}: {stdout:?}");
        assert!(stdout.contains(r"a\u{1b}[31m.py") || stdout.contains(r"m\u{7}"), "{args:?}: {stdout}");
    }
    let bad = write(&dir, "bad.step", "step @s(%x: f32[4] input) {\n  %y = bogus(%x) loc(\"a\u{1b}[31m.py\":3)\n}\n");
    let out = memplan(&["check", &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!text(&out.stderr).contains('\u{1b}'), "{:?}", text(&out.stderr));
}

/// A class's buffers added up over the whole step can pass 2^64 - 1 bytes though the
/// arena fits (they are not live at once): "too large" (JSON null), not a clamped number.
#[test]
fn class_totals_past_64_bits_are_too_large() {
    let dir = scratch_dir("hostile", "class-totals");
    // Two 2^63-byte activations, one after the other, and a scalar.
    let step = write(
        &dir,
        "totals.step",
        "step @t(%x: f32[] input) {
           %a = fill(shape=[2305843009213693952], dtype=f32, value=1.0)
           %s = sum(%a, axes=[0])
           %b = fill(shape=[2305843009213693952], dtype=f32, value=2.0)
           %t = sum(%b, axes=[0])
           %u = add(%s, %t)
           return %u
         }",
    );
    let out = memplan(&["plan", &step]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("too large (2^64 B or more)") && !stdout.contains("18446744073709551615"), "{stdout}");
    let out = memplan(&["plan", &step, "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let temps = json["classes"].as_array().unwrap().iter().find(|c| c["buffers"].is_null());
    assert!(temps.is_some(), "{}", json["classes"]);
}

/// Pickles given to `memplan snapshot` that would run code, claim lengths past the file,
/// nest deeper than any stack, or open too many MARKs: each exits 1 with the byte offset,
/// quickly, and nothing runs (the payload would create the marker file).
#[test]
fn hostile_pickles_are_refused_at_their_byte_offset() {
    let dir = scratch_dir("hostile", "pickles");
    let marker = dir.join("payload-ran");
    let bytes = |name: &str, contents: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().unwrap().to_string()
    };
    let mut payload = b"\x80\x02cposix\nsystem\n(X".to_vec();
    let command = format!("touch {}", marker.display());
    payload.extend((command.len() as u32).to_le_bytes());
    payload.extend(command.as_bytes());
    payload.extend(b"tR.");
    let mut huge = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8d".to_vec();
    huge.extend(u64::MAX.to_le_bytes());
    let mut nested = b"\x80\x02".to_vec();
    nested.extend(std::iter::repeat_n(b']', 500_000));
    nested.extend(std::iter::repeat_n(b'a', 499_999));
    nested.push(b'.');
    let mut marks = b"\x80\x02".to_vec();
    marks.extend(std::iter::repeat_n(b'(', 5000));
    let cases = [
        (bytes("payload.pickle", &payload), "opcode GLOBAL (0x63) at byte offset 2 builds a Python object: this pickle holds Python objects"),
        (bytes("huge.pickle", &huge), "the pickle is truncated: it ends at byte 20 inside BINUNICODE8 starting at byte offset 11"),
        (bytes("nested.pickle", &nested), "`segments[0]`: expected a dict, found a list"),
        (bytes("marks.pickle", &marks), "byte offset 1002: the pickle nests more than 1000 MARKs deep"),
        (bytes("empty.pickle", b""), "the file is empty"),
    ];
    for (file, needle) in cases {
        let (code, stderr, _) = run(&["snapshot", &file]);
        assert_eq!(code, Some(1), "{file}: {stderr}");
        assert!(stderr.contains(needle), "{file}: missing {needle:?} in {stderr}");
    }
    assert!(!marker.exists(), "nothing ran");
}
