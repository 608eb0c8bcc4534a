//! The `memplan` binary: exit statuses, located errors, no panics, both report formats.

use std::path::Path;
use std::process::{Command, Output};

fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the memplan binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

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
    assert_eq!(json["schema_version"], 1);
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
