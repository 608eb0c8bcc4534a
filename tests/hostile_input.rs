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
