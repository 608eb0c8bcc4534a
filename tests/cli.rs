//! The `memplan` binary: exit statuses, located errors, no panics, both report formats.

#[path = "support/bin.rs"]
mod bin;
use bin::*;

use std::path::Path;
use std::process::Command;

#[test]
fn plan_prints_the_headline_figures() {
    let out = memplan(&["plan", "ir/models/mlp.step"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for needle in ["arena", "lower bound", "ratio", "peak:", "bytes by class", "buffers:"] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
}

#[test]
fn plan_json_has_a_schema_version_and_the_plan() {
    let out = memplan(&["plan", "ir/models/mlp.step", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(json["schema_version"], 3);
    assert!(json["remat"].is_null(), "no budget, no recomputation section");
    let savings = &json["savings"];
    for key in ["program_order", "after_schedule", "after_inplace", "arena"] {
        assert!(savings[key].is_u64(), "savings.{key} in {savings}");
    }
    assert_eq!(savings["arena"], json["arena_bytes"]);
    assert!(json["arena_bytes"].as_u64().unwrap() >= json["lower_bound"].as_u64().unwrap());
    let plan: memplan::Plan = serde_json::from_value(json["plan"].clone()).expect("the plan deserialises");
    assert_eq!(plan.arena_bytes, json["arena_bytes"].as_u64().unwrap());
}

#[test]
fn alignment_is_configurable_and_checked() {
    let out = memplan(&["plan", "ir/models/mlp.step", "--align", "64", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["alignment"], 64);
    let out = memplan(&["plan", "ir/models/mlp.step", "--align", "100"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not a power of two"));
}

#[test]
fn check_accepts_every_valid_model() {
    let out = memplan(&["check", "ir/models/mlp.step"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("ok: "));
}

#[test]
fn every_invalid_file_exits_1_with_a_located_error() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ir/invalid");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 12, "expected at least 12 invalid steps, found {}", files.len());
    for path in files {
        let rel = format!("ir/invalid/{}", path.file_name().unwrap().to_string_lossy());
        for command in ["check", "plan"] {
            let out = memplan(&[command, &rel]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{command} {rel}: exit status\n{stderr}");
            assert!(!stderr.contains("panicked"), "{command} {rel} panicked:\n{stderr}");
            assert!(stderr.contains(&format!("[{rel}:")), "{command} {rel}: no file:line:col in\n{stderr}");
        }
    }
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = memplan(&["plan", "ir/models/no-such-model.step"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read ir/models/no-such-model.step"));
}

#[test]
fn print_gives_the_canonical_form() {
    let out = memplan(&["print", "ir/models/mlp.step"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let graph = memplan::parse(&printed).expect("the canonical form parses");
    assert_eq!(memplan::print(&graph), printed);
}

#[test]
fn a_reader_closing_the_pipe_early_is_not_a_panic() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["plan", "ir/models/gpt2.step"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap(); // then the pipe closes
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
}

#[test]
fn plan_reports_what_each_pass_saved_and_takes_the_pass_flags() {
    let out = memplan(&["plan", "ir/models/resnet18_tiny.step", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let memory: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &memory["savings"];
    assert!(s["after_schedule"].as_u64() < s["program_order"].as_u64(), "{s}");
    let out = memplan(&["plan", "ir/models/resnet18_tiny.step", "--format", "json", "--schedule", "program", "--no-inplace"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let program: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &program["savings"];
    assert_eq!(p["program_order"], s["program_order"]);
    assert_eq!(p["after_schedule"], p["program_order"]);
    assert_eq!(program["lower_bound"], p["program_order"]);
    let out = memplan(&["plan", "ir/models/mlp.step"]);
    assert!(text(&out.stdout).contains("what each pass saved"));
    for command in ["check", "run"] {
        let out = memplan(&[command, "ir/models/mlp.step", "--schedule", "program", "--no-inplace"]);
        assert!(out.status.success(), "{command}: {}", text(&out.stderr));
    }
}

/// A file under the test's scratch directory that does not exist yet.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-schedule-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn schedule_compares_with_the_reference_orders_and_writes_a_new_file() {
    let graph = scratch("g.json");
    std::fs::write(
        &graph,
        r#"{"graph": {"order": [0, 1, 2, 3]}, "links": [{"0": 0, "1": 2}, {"0": 1, "1": 3}],
            "nodes": [{"name": 0, "out_cost": 100}, {"name": 1, "out_cost": 100}, {"name": 2, "out_cost": 1}, {"name": 3, "out_cost": 1}]}"#,
    )
    .unwrap();
    let order = scratch("order.json");
    let (g, o) = (graph.to_str().unwrap(), order.to_str().unwrap());
    let out = memplan(&["schedule", g, "-o", o]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("4 nodes, 2 links"), "{stdout}");
    for needle in ["ours", "101 B", "graph.order", "201 B", "ids ascending", "time"] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let written: Vec<u64> = serde_json::from_str(&std::fs::read_to_string(&order).unwrap()).unwrap();
    assert_eq!(written, vec![0, 2, 1, 3]);
    // Never overwritten.
    let out = memplan(&["schedule", g, "-o", o]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("exists"), "{}", text(&out.stderr));
}

#[test]
fn schedule_refuses_bad_input_with_exit_1() {
    let bad = scratch("bad.json");
    std::fs::write(&bad, "{\"nodes\": [").unwrap();
    let cycle = scratch("cycle.json");
    std::fs::write(&cycle, r#"{"nodes": [{"id": 0, "cost_ram": 1}, {"id": 1, "cost_ram": 1}], "links": [{"source": 0, "target": 1}, {"source": 1, "target": 0}]}"#).unwrap();
    let cases = [
        (bad.to_str().unwrap().to_string(), "not valid JSON"),
        (cycle.to_str().unwrap().to_string(), "cycle"),
        ("no-such-graph.json".to_string(), "cannot read no-such-graph.json"),
    ];
    for (file, needle) in cases {
        let out = memplan(&["schedule", &file]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(stderr.contains(needle) && !stderr.contains("panicked"), "{file}: {stderr}");
    }
}

#[test]
fn run_on_cuda_without_the_feature_or_a_gpu_is_a_clear_error() {
    let out = memplan(&["run", "ir/models/mlp.step", "--device", "cuda"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stderr.contains("panicked"), "{stderr}");
    if !cfg!(feature = "cuda") {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("memplan was built without the `cuda` feature; rebuild with --features cuda"),
            "{stderr}"
        );
    } else if out.status.success() {
        eprintln!("a GPU is present: `run --device cuda` ran on it");
        assert!(stdout.contains("arena      measured"), "{stdout}");
    } else {
        eprintln!("no GPU here: {stderr}");
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let clear = ["no CUDA driver found", "no CUDA device found", "could not be loaded"];
        assert!(clear.iter().any(|m| stderr.contains(m)), "{stderr}");
    }
    // --check holds a CUDA run to the CPU reference; alone it is a usage error.
    let out = memplan(&["run", "ir/models/mlp.step", "--check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("use it with --device cuda"), "{}", text(&out.stderr));
}

/// Another framework's ops are planned like any op, but no executor runs them: `run` names
/// them (the forward ops, not the backward ops derived from them) and exits 1.
#[test]
fn a_step_with_extern_ops_plans_but_does_not_run() {
    let file = "ir/extern/custom_ops.step";
    let out = memplan(&["plan", file]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for device in ["cpu", "cuda"] {
        let out = memplan(&["run", file, "--device", device]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let listed = r#"cannot execute: aten::cumsum.default (1x), aten::unfold.default (1x), my_lib::odd "name" (1x)"#;
        assert!(stderr.contains(listed) || (device == "cuda" && stderr.contains("without the `cuda` feature")), "{stderr}");
        assert!(!stderr.contains("backward"), "{stderr}");
    }
}
