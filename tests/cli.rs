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

/// `plan` prints its summary and the largest buffers (as many as `--top`, largest first,
/// ties in buffer order), saying how many more there are and how to list them;
/// `--buffers N` lists N, `--buffers all` every buffer in buffer order (as `--emit text`'s
/// report.txt, and the JSON, have them).
#[test]
fn plan_lists_the_largest_buffers_unless_asked_for_all() {
    let plan = |args: &[&str]| {
        let out = memplan(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let file = "ir/models/gpt2_tiny.step";
    let json: serde_json::Value = serde_json::from_str(&plan(&["plan", file, "--format", "json"])).unwrap();
    let buffers: Vec<(String, u64)> = json["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["buffer"].as_str().unwrap().to_string(), b["bytes"].as_u64().unwrap()))
        .collect();
    let n = buffers.len();
    assert!(n > 40, "a step with more buffers than the table shows: {n}");
    let mut largest = buffers.clone();
    largest.sort_by_key(|&(_, bytes)| std::cmp::Reverse(bytes)); // stable: ties in buffer order
    let names = |rows: &[(String, u64)], k: usize| rows.iter().take(k).map(|(name, _)| name.clone()).collect::<Vec<_>>();
    // The table's rows: (buffer, bytes), after the column header.
    let rows = |report: &str| -> Vec<(String, u64)> {
        let table = report.split_once("  buffer ").unwrap_or_else(|| panic!("no buffer table in\n{report}")).1;
        table
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  buf"))
            .map(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                (cells[0].to_string(), cells[2].parse().unwrap())
            })
            .collect()
    };

    let short = plan(&["plan", file]);
    assert_eq!(names(&rows(&short), n), names(&largest, 20), "{short}");
    assert!(short.contains(&format!("\nbuffers: the 20 largest of {n}, largest first (`--buffers all` lists every buffer, in buffer order)\n")), "{short}");
    assert!(short.ends_with(&format!("\n  ... and {} more buffers\n", n - 20)), "{short}");
    assert!(short.lines().count() < 120, "the summary is not buried: {} lines", short.lines().count());
    assert_eq!(names(&rows(&plan(&["plan", file, "--top", "5"])), n), names(&largest, 5));
    assert_eq!(names(&rows(&plan(&["plan", file, "--top", "5", "--buffers", "7"])), n), names(&largest, 7));

    let all = plan(&["plan", file, "--buffers", "all"]);
    assert_eq!(rows(&all), buffers, "every buffer, in buffer order");
    assert!(all.contains("\nbuffers:\n") && !all.contains("more buffers"), "{all}");
    let summary = |report: &str| report.split_once("\nbuffers").unwrap().0.to_string();
    assert_eq!(summary(&short), summary(&all), "the same summary above the table");
    // A table that holds every buffer says so.
    let everything = plan(&["plan", file, "--buffers", &n.to_string()]);
    assert!(everything.contains(&format!("\nbuffers: all {n}, largest first (`--buffers all` lists them in buffer order)\n")), "{everything}");
    assert_eq!(rows(&everything), largest);

    // Misused: --buffers with the JSON or with --emit; not a number.
    for args in [vec!["--buffers", "3", "--format", "json"], vec!["--buffers", "3", "--emit", "text"], vec!["--buffers", "many"]] {
        let out = memplan(&[&["plan", file][..], &args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("--buffers"), "{args:?}: {}", text(&out.stderr));
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
    // Every buffer: output well past a pipe's buffer, so the write fails once it closes.
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["plan", "ir/models/gpt2.step", "--buffers", "all"])
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
    let out = memplan(&["plan", "ir/models/resnet18_tiny.step", "--format", "json", "--schedule", "program", "--no-inplace", "--no-recompute"]);
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

/// A file under the tests' scratch directory that does not exist yet (one directory for
/// every run, so runs leave no directory behind; each test names its own files).
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-schedule");
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

/// A write that fails midway (here: a file-size limit, as a full disk would) leaves nothing
/// behind: no truncated output, no temporary file; `plan --emit` leaves the directory as it
/// was, a user's own `.report.txt.tmp` included.
#[test]
fn a_failed_write_leaves_nothing_behind() {
    let dir = bin::scratch_dir("cli", "write-errors");
    let d = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let refused = |out: &std::process::Output, name: &str| {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&format!("cannot write {}", d(name))), "{stderr}");
    };
    std::fs::write(dir.join("list.csv"), "id,lower,upper,size\na,0,2,4\nb,1,3,4\n").unwrap();
    std::fs::write(dir.join("g.json"), r#"{"nodes": [{"id": 0, "cost_ram": 1}, {"id": 1, "cost_ram": 1}], "links": [{"source": 0, "target": 1}]}"#).unwrap();
    let before = file_names(&dir);
    refused(&memplan_with_file_limit(0, &["run", "ir/models/mlp.step", "--save", &d("w.safetensors")]), "w.safetensors");
    refused(&memplan_with_file_limit(0, &["alloc", &d("list.csv"), "-o", &d("out.csv")]), "out.csv");
    refused(&memplan_with_file_limit(0, &["schedule", &d("g.json"), "-o", &d("order.json")]), "order.json");
    assert_eq!(file_names(&dir), before, "no output and no temporary file left");

    // --emit: report.txt fits under the limit, plan.json does not; neither is replaced.
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::write(out_dir.join("report.txt"), "an earlier run's report").unwrap();
    std::fs::write(out_dir.join(".report.txt.tmp"), "a user's own file").unwrap();
    let out = memplan_with_file_limit(10, &["plan", "ir/models/mlp.step", "--emit", "text,json", "-o", &d("out")]);
    refused(&out, "out/plan.json");
    assert_eq!(file_names(&out_dir), [".report.txt.tmp", "report.txt"]);
    assert_eq!(std::fs::read_to_string(out_dir.join("report.txt")).unwrap(), "an earlier run's report");
    assert_eq!(std::fs::read_to_string(out_dir.join(".report.txt.tmp")).unwrap(), "a user's own file");
    // Without the limit the same command replaces our files and still leaves the user's.
    let out = memplan(&["plan", "ir/models/mlp.step", "--emit", "text,json", "-o", &d("out")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(file_names(&out_dir), [".report.txt.tmp", "plan.json", "report.txt"]);
    assert_eq!(std::fs::read_to_string(out_dir.join(".report.txt.tmp")).unwrap(), "a user's own file");

    // A path whose parent is a file: refused, nothing created.
    let out = memplan(&["alloc", &d("list.csv"), "-o", &d("list.csv/out.csv")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(file_names(&dir), ["g.json", "list.csv", "out"]);
}

/// `run --save` onto an existing file is refused before the first step runs.
#[test]
fn run_refuses_an_existing_save_file_before_running() {
    let dir = bin::scratch_dir("cli", "save-exists");
    let path = dir.join("w.safetensors");
    std::fs::write(&path, "keep").unwrap();
    let out = memplan(&["run", "ir/models/mlp.step", "--steps", "3", "--save", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("exists; memplan never overwrites a file"), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "no step ran");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep");
    // A new file is written once the steps have run.
    let new = dir.join("new.safetensors");
    let out = memplan(&["run", "ir/models/mlp.step", "--save", new.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(memplan::formats::safetensors::from_bytes(&std::fs::read(&new).unwrap()).unwrap().contains_key("w1"));
    assert_eq!(file_names(&dir), ["new.safetensors", "w.safetensors"]);
}

/// A fraction budget takes both spellings in `plan` (`0.8x`, `0.8`) as in `remat`.
#[test]
fn a_fraction_budget_takes_both_spellings() {
    let with_x = memplan(&["plan", "ir/models/gpt2_tiny.step", "--budget", "0.8x", "--format", "json"]);
    assert!(with_x.status.success(), "{}", text(&with_x.stderr));
    let bare = memplan(&["plan", "ir/models/gpt2_tiny.step", "--budget", "0.8", "--format", "json"]);
    assert!(bare.status.success(), "{}", text(&bare.stderr));
    assert_eq!(text(&bare.stdout), text(&with_x.stdout));
    let json: serde_json::Value = serde_json::from_slice(&bare.stdout).unwrap();
    assert!(json["remat"]["count"].as_u64().unwrap() > 0, "0.8 is a fraction, not 0 bytes");
    let out = memplan(&["plan", "ir/models/gpt2_tiny.step", "--budget", "0.8B"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("a number of bytes must be whole"), "{}", text(&out.stderr));
}

/// The report says when the optimizer's updates run, and which flag plans
/// `loss.backward(); opt.step()`; the JSON has the same counts.
#[test]
fn the_report_says_when_updates_run() {
    let out = memplan(&["plan", "ir/models/mlp_adam.step"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("optimizer    3 of 4 updates run inside backward"), "{stdout}");
    assert!(stdout.contains("`--schedule program` gives the arena of\n             `loss.backward(); opt.step()`"), "{stdout}");
    let out = memplan(&["plan", "ir/models/mlp_adam.step", "--schedule", "program", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["updates"], serde_json::json!({"optimizer_ops": 4, "inside_backward": 0, "inside_backward_as_written": 0}));
    let out = memplan(&["plan", "ir/models/mlp_adam.step", "--schedule", "program"]);
    assert!(text(&out.stdout).contains("optimizer    all 4 updates run after backward, as `loss.backward(); opt.step()` runs them"));
    // A step without an optimizer says nothing of one.
    let out = memplan(&["plan", "ir/features/attention.step", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["updates"].is_null());
}

/// A step that plans but most likely not as meant warns on stderr and exits 0: a param the
/// loss never reaches (it silently gets no gradient), a step that returns and updates
/// nothing (every op is dead).
#[test]
fn suspicious_steps_warn_and_still_plan() {
    let dir = bin::scratch_dir("cli", "warnings");
    let untrained = dir.join("untrained.step");
    std::fs::write(
        &untrained,
        "step @s(\n  %w: f32[4,4] param,\n  %unused: f32[4] param,\n  %x: f32[2,4] input,\n) {\n  %h = matmul(%x, %w)\n  %loss = sum(%h, axes=[0, 1])\n  backward %loss with sgd(lr=0.1)\n}\n",
    )
    .unwrap();
    let dead = dir.join("dead.step");
    std::fs::write(&dead, "step @dead(%x: f32[2] input) {\n  %y = relu(%x)\n}\n").unwrap();
    for command in ["check", "plan"] {
        let out = memplan(&[command, untrained.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("⚠ param %unused does not reach the loss %loss: it gets no gradient and no optimizer update"), "{stderr}");
        assert!(stderr.contains("untrained.step:3:3"), "located at the declaration: {stderr}");
        let out = memplan(&[command, dead.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("⚠ step @dead returns nothing, updates nothing and has no `backward`"), "{stderr}");
    }
    // No model warns.
    for file in ["ir/models/mlp.step", "ir/models/gpt2_tiny.step", "ir/torch/gpt2_small.step"] {
        let out = memplan(&["check", file]);
        assert!(out.status.success() && out.stderr.is_empty(), "{file}: {}", text(&out.stderr));
    }
}

#[test]
fn recompute_cheap_says_what_it_recomputed_and_its_cost_in_flops_and_bytes() {
    let out = memplan(&["plan", "ir/models/gpt2_tiny.step", "--recompute", "cheap", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let remat = &json["remat"];
    assert_eq!(remat["strategy"], "cheap");
    assert!(json["arena_bytes"].as_u64().unwrap() < remat["arena_without"].as_u64().unwrap(), "{remat}");
    let (base, extra) = (remat["base_bytes_moved"].as_u64().unwrap(), remat["extra_bytes_moved"].as_u64().unwrap());
    assert!(extra > 0 && extra * 10 <= base, "{extra} of {base}");
    assert!(remat["overhead_percent"].as_f64().unwrap() <= 1.0);
    let out = memplan(&["plan", "ir/models/gpt2_tiny.step", "--recompute", "cheap:0%"]);
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("recomputation ("), "0% more bytes moved allows no recomputation:\n{stdout}");
    let out = memplan(&["plan", "ir/models/gpt2_tiny.step", "--recompute", "cheap"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("recomputation (strategy cheap)") && stdout.contains("memory traffic  +"), "{stdout}");
    let out = memplan(&["plan", "ir/models/gpt2_tiny.step", "--recompute", "lots"]);
    assert_eq!(out.status.code(), Some(1));
}
