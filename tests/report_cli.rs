//! The report commands through the `memplan` binary: `plan --emit -o` (the fixed file
//! names, the overwrite rule), `report` and `diff` (snapshots of their text, the same
//! answer from a .step file and from its plan JSON, located errors), `--print-ir-after`
//! (the dump parses back), and quiet progress when stderr is not a terminal.

#[path = "support/bin.rs"]
mod bin;
use bin::*;

use std::path::PathBuf;
use std::process::Output;

use memplan::formats::emit::Emit;

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    scratch_dir("report_cli", name)
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "exit {:?}\n{}", out.status.code(), text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn emit_writes_its_fixed_names_and_nothing_else() {
    let dir = scratch("emit");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::write(out_dir.join("notes.txt"), "mine").unwrap();
    let out_str = out_dir.to_str().unwrap();
    let stdout = ok(&memplan(&["plan", "ir/models/mlp.step", "--emit", "text,json,svg,trace,csv", "-o", out_str]));
    let mut names: Vec<String> =
        std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut expected: Vec<String> = Emit::ALL.iter().map(|e| e.file_name().to_string()).chain(["notes.txt".into()]).collect();
    expected.sort();
    assert_eq!(names, expected, "only our names, no temporary files left");
    assert_eq!(std::fs::read_to_string(out_dir.join("notes.txt")).unwrap(), "mine", "a user's file is untouched");
    for emit in Emit::ALL {
        assert!(stdout.contains(&format!("wrote {}", out_dir.join(emit.file_name()).display())), "{stdout}");
    }
    // The text file is the text report with every buffer; --format json's stdout is the
    // JSON file.
    let report = ok(&memplan(&["plan", "ir/models/mlp.step", "--buffers", "all"]));
    assert_eq!(std::fs::read_to_string(out_dir.join("report.txt")).unwrap(), report);
    let json = ok(&memplan(&["plan", "ir/models/mlp.step", "--format", "json"]));
    assert_eq!(std::fs::read_to_string(out_dir.join("plan.json")).unwrap(), json);

    // A second run replaces our files (a smaller set leaves the others as they were).
    std::fs::write(out_dir.join("arena.svg"), "old").unwrap();
    ok(&memplan(&["plan", "ir/models/mlp.step", "--emit", "svg", "-o", out_str]));
    assert!(std::fs::read_to_string(out_dir.join("arena.svg")).unwrap().starts_with("<svg"));

    // -o naming a file, or one of our names being a directory: refused, nothing written.
    let file = dir.join("a_file");
    std::fs::write(&file, "keep").unwrap();
    let out = memplan(&["plan", "ir/models/mlp.step", "--emit", "svg", "-o", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is not a directory"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    let blocked = dir.join("blocked");
    std::fs::create_dir_all(blocked.join("trace.json")).unwrap();
    let out = memplan(&["plan", "ir/models/mlp.step", "--emit", "svg,trace", "-o", blocked.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is not a regular file"), "{}", text(&out.stderr));
    assert!(!blocked.join("arena.svg").exists(), "a refusal writes nothing");

    // -o without --emit, and --emit with --format, are usage errors.
    assert!(!memplan(&["plan", "ir/models/mlp.step", "-o", out_str]).status.success());
    assert!(!memplan(&["plan", "ir/models/mlp.step", "--emit", "svg", "--format", "json"]).status.success());
    let out = memplan(&["plan", "ir/models/mlp.step", "--emit", "png"]);
    assert!(text(&out.stderr).contains("the formats are text, json, svg, trace, csv"), "{}", text(&out.stderr));
}

#[test]
fn report_reads_a_step_or_its_plan_json_alike() {
    let dir = scratch("roundtrip");
    let out_dir = dir.to_str().unwrap();
    for (file, extra) in [("ir/models/gpt2_tiny.step", None), ("ir/features/attention.step", Some("--no-inplace"))] {
        let mut args = vec!["plan", file, "--emit", "json", "-o", out_dir];
        args.extend(extra);
        ok(&memplan(&args));
        let json = dir.join("plan.json");
        for by in ["class", "op", "loc"] {
            let mut from_step = vec!["report", file, "--by", by, "--top", "5"];
            from_step.extend(extra);
            let a = ok(&memplan(&from_step));
            let b = ok(&memplan(&["report", json.to_str().unwrap(), "--by", by, "--top", "5"]));
            let body = |s: &str| s.split_once('\n').unwrap().1.to_string();
            assert_eq!(body(&a), body(&b), "{file} --by {by}");
            assert!(b.starts_with(&format!("{} (@", json.display())) && b.contains(&format!("planned from {file}")), "{b}");
        }
        let diff = ok(&memplan(&["diff", file, json.to_str().unwrap()]));
        if extra.is_none() {
            assert!(diff.contains("values whose size changed most (0 changed)"), "{diff}");
            assert!(diff.contains("values whose lifetime changed most (0 changed"), "{diff}");
        }
    }
}

#[test]
fn report_snapshots() {
    let cases: [(&str, &[&str]); 9] = [
        // What `plan` prints by default: the summary, then the largest buffers.
        ("plan_gpt2_tiny", &["plan", "ir/models/gpt2_tiny.step"]),
        ("mlp_peak_by_class", &["report", "ir/models/mlp.step"]),
        ("mlp_step_3_by_op", &["report", "ir/models/mlp.step", "--at", "3", "--by", "op"]),
        ("gpt2_tiny_by_loc", &["report", "ir/models/gpt2_tiny.step", "--by", "loc", "--top", "8"]),
        ("resnet18_tiny_by_op", &["report", "ir/models/resnet18_tiny.step", "--by", "op", "--top", "6"]),
        ("diff_mlp_mlp_adam", &["diff", "ir/models/mlp.step", "ir/models/mlp_adam.step"]),
        // An export of a PyTorch model carries module paths: bytes per module and class.
        ("resnet_small_by_module", &["report", "ir/torch/resnet_small.step", "--by", "module", "--depth", "2", "--top", "6"]),
        ("mlp_torch_by_module", &["report", "ir/torch/mlp.step", "--by", "module"]),
        // A bf16 autocast export: what is kept in which precision at the peak.
        ("gpt2_small_bf16_by_dtype", &["report", "ir/torch/gpt2_small_bf16.step", "--by", "dtype", "--top", "4"]),
    ];
    for (name, args) in cases {
        insta::assert_snapshot!(name, ok(&memplan(args)));
    }
    // What the passes change: the plan without them (a JSON) against the default one.
    let dir = scratch("snapshots");
    let dir_str = dir.to_str().unwrap();
    ok(&memplan(&["plan", "ir/models/gpt2_tiny.step", "--schedule", "program", "--no-inplace", "--no-recompute", "--emit", "json", "-o", dir_str]));
    let json = dir.join("plan.json");
    let diff = ok(&memplan(&["diff", json.to_str().unwrap(), "ir/models/gpt2_tiny.step", "--top", "6"]));
    insta::assert_snapshot!("diff_without_passes", diff.replace(dir_str, "<tmp>"));
}

#[test]
fn report_errors_are_clear() {
    let out = memplan(&["report", "ir/models/mlp.step", "--at", "999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("step 999 is not in the schedule: it has steps 0..=17"), "{}", text(&out.stderr));
    let out = memplan(&["report", "ir/models/mlp.step", "--at", "top"]);
    assert!(text(&out.stderr).contains("neither `peak` nor a schedule step"), "{}", text(&out.stderr));
    let out = memplan(&["report", "ir/models/mlp.step", "--depth", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("use it with --by module"), "{}", text(&out.stderr));
    // A step without modules groups everything as unknown rather than failing.
    let out = ok(&memplan(&["report", "ir/models/mlp.step", "--by", "module"]));
    assert!(out.contains("(unknown)"), "{out}");

    let dir = scratch("errors");
    ok(&memplan(&["plan", "ir/models/mlp.step", "--emit", "json", "-o", dir.to_str().unwrap()]));
    let json_path = dir.join("plan.json");
    let good = std::fs::read_to_string(&json_path).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&good).unwrap();
    value["plan"]["buffers"][2]["offset"] = value["plan"]["buffers"][0]["offset"].clone();
    let bad = dir.join("overlap.json");
    std::fs::write(&bad, value.to_string()).unwrap();
    let out = memplan(&["report", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("does not pass the checker"), "{}", text(&out.stderr));
    let broken = dir.join("broken.json");
    std::fs::write(&broken, &good[..good.len() / 2]).unwrap();
    let out = memplan(&["diff", "ir/models/mlp.step", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("{}: ", broken.display())) && stderr.contains("line "), "{stderr}");
    assert!(!stderr.contains("panicked"));
}

#[test]
fn print_ir_after_dumps_steps_that_parse() {
    let out = memplan(&["plan", "ir/models/mlp_adam.step", "--print-ir-after-all"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let dumps: Vec<&str> = stderr.split("// -----// IR Dump After ").skip(1).collect();
    assert_eq!(dumps.len(), memplan::passes::Pass::ALL.len(), "{stderr}");
    for (dump, pass) in dumps.iter().zip(memplan::passes::Pass::ALL) {
        assert!(dump.starts_with(&format!("{pass} //")), "{dump}");
        let body = dump.split_once('\n').unwrap().1;
        let graph = memplan::parse(body).unwrap_or_else(|e| panic!("after {pass}: {e:?}\n{body}"));
        memplan::verify(&graph).unwrap();
        assert!(body.contains("// t=0"), "{body}");
    }
    let offsets = dumps.last().unwrap();
    assert!(offsets.lines().any(|l| l.contains(" -> buf") && l.contains(" @") && l.contains("kills ")), "{offsets}");
    // The report still goes to stdout.
    assert!(text(&out.stdout).starts_with("step @mlp"));

    let out = memplan(&["plan", "ir/models/mlp.step", "--print-ir-after", "inplace"]);
    assert_eq!(text(&out.stderr).matches("IR Dump After").count(), 1);
    let out = memplan(&["plan", "ir/models/mlp.step", "--print-ir-after=bogus"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("the passes are fuse, schedule, inplace"), "{}", text(&out.stderr));
}

/// Under a budget that recomputes, the dumps after remat show the rewritten step (its
/// clones included) and parse; a budget no plan meets exits 2 with dumps asked for as
/// without them.
#[test]
fn print_ir_after_shows_the_step_remat_rewrote() {
    let out = memplan(&["plan", "ir/models/gpt2_tiny.step", "--budget", "0.8x", "--print-ir-after-all"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let dumps: Vec<&str> = stderr.split("// -----// IR Dump After ").skip(1).collect();
    assert_eq!(dumps.len(), memplan::passes::Pass::ALL.len(), "{stderr}");
    for (dump, pass) in dumps.iter().zip(memplan::passes::Pass::ALL) {
        let body = dump.split_once('\n').unwrap().1;
        let graph = memplan::parse(body).unwrap_or_else(|e| panic!("after {pass}: {e:?}\n{body}"));
        memplan::verify(&graph).unwrap();
        let clones = body.lines().filter(|l| l.contains(".remat1")).count();
        assert_eq!(clones > 0, pass >= memplan::passes::Pass::Remat, "after {pass}: {clones} lines name a clone");
    }
    let unmet = memplan(&["plan", "ir/models/mlp.step", "--budget", "0.5x", "--print-ir-after", "schedule"]);
    assert_eq!(unmet.status.code(), Some(2), "{}", text(&unmet.stderr));
    assert_eq!(text(&unmet.stderr).matches("IR Dump After schedule").count(), 1);
}

#[test]
fn progress_stays_off_stderr_when_it_is_not_a_terminal() {
    let out = memplan(&["run", "ir/models/mlp.step", "--steps", "3"]);
    assert_eq!(ok(&out).lines().filter(|l| l.starts_with("step ")).count(), 3);
    assert_eq!(text(&out.stderr), "", "no progress bar in a pipe");
}

/// Classes follow what values are: under a budget, what recomputations write and the
/// checkpoints they read are activations (a diff against the plan without the budget moves
/// bytes out of activations, not into temps); Adam's `%step.new` is state at the peak, as
/// its buffer is; mlp's buffer of `%o`, `%logits` and then `%dlogits` is an activation's.
#[test]
fn classes_follow_what_values_are() {
    let dir = scratch("classes");
    ok(&memplan(&["plan", "ir/models/gpt2_tiny.step", "--budget", "0.7x", "--emit", "json", "-o", dir.to_str().unwrap()]));
    let json_path = dir.join("plan.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let recomputed: Vec<&serde_json::Value> =
        json["buffers"].as_array().unwrap().iter().filter(|b| b["values"].to_string().contains(".remat")).collect();
    assert!(!recomputed.is_empty());
    for b in recomputed {
        assert_eq!(b["class"], "activation", "{b}");
    }
    let diff = ok(&memplan(&["diff", "ir/models/gpt2_tiny.step", json_path.to_str().unwrap()]));
    let temp = diff.lines().find(|l| l.trim_start().starts_with("temp at peak")).unwrap();
    assert!(temp.ends_with("+0 B"), "{temp}");

    let plan = |file: &str| -> serde_json::Value {
        serde_json::from_str(&ok(&memplan(&["plan", file, "--format", "json"]))).unwrap()
    };
    let adam = plan("ir/models/mlp_adam.step");
    let live = adam["peak"]["live"].as_array().unwrap();
    assert_eq!(live.iter().find(|v| v["value"] == "%step.new").unwrap()["class"], "state");
    let buffer_of = |json: &serde_json::Value, value: &str| {
        json["buffers"].as_array().unwrap().iter().find(|b| b["values"].to_string().contains(value)).unwrap().clone()
    };
    assert_eq!(buffer_of(&adam, "%step.new:")["class"], "state");
    assert_eq!(buffer_of(&plan("ir/models/mlp.step"), "%logits:")["class"], "activation");
}

/// `diff` plans each side with the shared pass flags and its own (`--a-...`, `--b-...`):
/// one step against itself under a budget, or in program order; a side's own flags on a
/// plan JSON are refused; `plan` given a plan JSON points to `report` and `diff`.
#[test]
fn diff_takes_flags_per_side() {
    let dir = scratch("sides");
    let dir_str = dir.to_str().unwrap();
    let diff = ok(&memplan(&["diff", "ir/models/gpt2_tiny.step", "ir/models/gpt2_tiny.step", "--b-budget", "0.7x", "--top", "2"]));
    assert!(diff.contains("B  ir/models/gpt2_tiny.step (@gpt2_tiny) with --b-budget 0.7x: 293 ops"), "{diff}");
    let arena = diff.lines().find(|l| l.trim_start().starts_with("arena")).unwrap();
    assert!(arena.contains("2865408 B") && arena.contains("2283776 B"), "{arena}");
    // The same as a diff against the plan JSON made with that budget.
    ok(&memplan(&["plan", "ir/models/gpt2_tiny.step", "--budget", "0.7x", "--emit", "json", "-o", dir_str]));
    let json = dir.join("plan.json");
    let via_json = ok(&memplan(&["diff", "ir/models/gpt2_tiny.step", json.to_str().unwrap(), "--top", "2"]));
    let body = |s: &str| s.split_once("\n\n").unwrap().1.to_string();
    assert_eq!(body(&diff), body(&via_json));
    // --a-schedule program: the arena of `loss.backward(); opt.step()` beside the default.
    let diff = ok(&memplan(&["diff", "ir/models/mlp_adam.step", "ir/models/mlp_adam.step", "--a-schedule", "program"]));
    assert!(diff.contains("A  ir/models/mlp_adam.step (@mlp_adam) with --a-schedule program"), "{diff}");
    assert!(diff.lines().any(|l| l.trim_start().starts_with("arena") && l.ends_with("-11520 B (-0.33%)")), "{diff}");
    // Shared flags still apply to both sides; a side's own flag replaces one.
    let out = memplan(&["diff", "ir/models/mlp.step", "ir/models/mlp.step", "--budget", "0.5x", "--b-budget", "1x"]);
    assert_eq!(out.status.code(), Some(2), "A cannot fit half its arena: {}", text(&out.stderr));
    let out = memplan(&["diff", json.to_str().unwrap(), "ir/models/gpt2_tiny.step", "--a-budget", "0.5x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is a plan JSON, read as it was planned: --a-budget 0.5x plans a .step file"), "{}", text(&out.stderr));
    let out = memplan(&["diff", "ir/models/mlp.step", "ir/models/mlp.step", "--b-checkpoint", "none"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--b-checkpoint chooses what to recompute under a budget"), "{}", text(&out.stderr));

    let out = memplan(&["plan", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("is a plan JSON") && stderr.contains(&format!("`memplan report {}`", json.display())), "{stderr}");
    assert!(stderr.contains("`memplan diff "), "{stderr}");
}

/// `report --format json` and `diff --format json`: the same answer as the text (every group
/// and value, no `--top`), the same bytes on every run; snapshots pin the schema.
#[test]
fn report_and_diff_write_json() {
    let json_of = |args: &[&str]| -> serde_json::Value {
        let first = ok(&memplan(args));
        assert_eq!(first, ok(&memplan(args)), "deterministic: {args:?}");
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{args:?}: {e}\n{first}"))
    };
    let report = json_of(&["report", "ir/models/gpt2_tiny.step", "--by", "loc", "--format", "json", "--top", "3"]);
    assert_eq!((report["kind"].as_str(), report["schema_version"].as_u64()), (Some("live set"), Some(1)));
    let text = ok(&memplan(&["report", "ir/models/gpt2_tiny.step", "--by", "loc"]));
    let values = report["values"].as_array().unwrap();
    assert!(text.contains(&format!("values live: {} holding {} B", values.len(), report["values_bytes"])), "{text}");
    assert!(values.len() > 3, "the JSON lists every value, not --top");
    let groups = report["groups"].as_array().unwrap();
    let total: u64 = groups.iter().map(|g| g["bytes"].as_u64().unwrap()).sum();
    assert_eq!(Some(total), report["values_bytes"].as_u64());
    for g in groups {
        let by_class: u64 = g["by_class"].as_object().unwrap().values().map(|b| b.as_u64().unwrap()).sum();
        assert_eq!(Some(by_class), g["bytes"].as_u64(), "{g}");
    }
    assert_eq!(report["live_bytes"], report["lower_bound"], "the peak");

    let diff = json_of(&["diff", "ir/models/gpt2_tiny.step", "ir/models/gpt2_tiny.step", "--b-budget", "0.7x", "--format", "json"]);
    let text = ok(&memplan(&["diff", "ir/models/gpt2_tiny.step", "ir/models/gpt2_tiny.step", "--b-budget", "0.7x"]));
    let moved = diff["moved"].as_array().unwrap().len();
    assert!(text.contains(&format!("values whose lifetime changed most ({moved} changed")), "{text}");
    let only_b = diff["only_b"].as_array().unwrap().len();
    assert!(text.contains(&format!("only in B: {only_b} values")), "{text}");
    assert_eq!(diff["b"]["name"], "ir/models/gpt2_tiny.step (@gpt2_tiny) with --b-budget 0.7x");
    assert_eq!((diff["a"]["arena_bytes"].as_u64(), diff["b"]["arena_bytes"].as_u64()), (Some(2865408), Some(2283776)));

    insta::assert_snapshot!("mlp_peak_by_class_json", ok(&memplan(&["report", "ir/models/mlp.step", "--format", "json"])));
    insta::assert_snapshot!("diff_mlp_mlp_adam_json", ok(&memplan(&["diff", "ir/models/mlp.step", "ir/models/mlp_adam.step", "--format", "json"])));
}

/// Every pass `--print-ir-after` takes is named where users read about it: `plan --help`,
/// docs/CLI.md and docs/REPORTS.md.
#[test]
fn print_ir_after_docs_name_every_pass() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let help = ok(&memplan(&["plan", "--help"]));
    let help_line = help.lines().skip_while(|l| !l.contains("--print-ir-after <PASS>")).nth(1).unwrap_or_default().to_string();
    let docs = |file: &str| std::fs::read_to_string(root.join(file)).unwrap();
    let cli_md = docs("docs/CLI.md");
    let cli_line = cli_md.lines().skip_while(|l| !l.contains("`--print-ir-after PASS`")).take(2).collect::<Vec<_>>().join(" ");
    let reports_md = docs("docs/REPORTS.md");
    let reports_line = reports_md.lines().skip_while(|l| !l.contains("prints the step after the named pass")).take(2).collect::<Vec<_>>().join(" ");
    for pass in memplan::passes::Pass::ALL {
        assert!(help_line.contains(pass.name()), "plan --help omits {pass}: {help_line}");
        assert!(cli_line.contains(&format!("`{pass}`")), "docs/CLI.md omits {pass}: {cli_line}");
        assert!(reports_line.contains(&format!("`{pass}`")), "docs/REPORTS.md omits {pass}: {reports_line}");
    }
}
