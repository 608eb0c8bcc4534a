//! The fusion pass (`passes/fuse.rs`) on the corpus and through the CLI: every step of the
//! corpus fused wherever the pass can, planned, checked, and run on the CPU for two training
//! steps inside its arena, gives the bits of the step as written run unplanned (seeded
//! alike, fused or not); fusing only
//! where it lowers the arena (the default) never raises it; `--print-ir-after fuse` shows
//! the fused ops, `--no-fuse` keeps every op, and `run --compare-unplanned` holds a fused
//! plan to the step as written.

#[path = "support/bin.rs"]
mod bin;
#[path = "support/steps.rs"]
mod steps;

use memplan::exec::cpu::{Placement, advance, run_step};
use memplan::exec::data::init_args;
use memplan::ir::ops::OpKind;
use memplan::passes::fuse::fuse;
use memplan::passes::{Fusion, PlanOptions, plan_step};
use memplan::{check, expand, parse, plan, print, verify};
use bin::{memplan, text};
use steps::step_files;

/// Steps whose CPU runs take long (full-size GPT-2, ResNet-18, VGG-16) are left to the
/// random and tiny steps.
const SMALL: u64 = 16 << 20;

#[test]
fn every_corpus_step_fused_runs_as_written() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut fused_steps, mut fused_ops) = (0, 0);
    for file in step_files(root) {
        let src = std::fs::read_to_string(root.join(&file)).unwrap();
        let graph = expand(&parse(&src).unwrap()).unwrap();
        let Some(fused) = fuse(&graph) else { continue };
        verify(&fused).unwrap_or_else(|e| panic!("{file}: the fused step does not verify: {e:?}"));
        assert_eq!(parse(&print(&fused)).unwrap(), fused, "{file}: the fused step round-trips");
        assert!(fused.ops.len() < graph.ops.len(), "{file}");
        let plan = plan(&fused, &PlanOptions::default()).unwrap();
        check(&fused, &plan).unwrap_or_else(|v| panic!("{file}: {v}"));
        if plan.arena_bytes > SMALL {
            continue;
        }
        let mut args = init_args(&graph, 3).unwrap();
        // `memplan run` seeds the step it planned: fused, its params take the same values
        // (a norm's gamma inside a fused_norm is still ones).
        assert!(init_args(&fused, 3).unwrap() == args, "{file}: the fused step seeds its arguments otherwise");
        for step in 1..=2 {
            let planned = run_step(&fused, Placement::Planned(&plan), &args).unwrap_or_else(|e| panic!("{file}: {e}"));
            let written = run_step(&graph, Placement::Unplanned, &args).unwrap_or_else(|e| panic!("{file}: {e}"));
            let differences = planned.differences(&written);
            assert!(differences.is_empty(), "{file}, step {step}: the fused plan differs from the step as written:\n{}", differences.join("\n"));
            args = advance(&args, &planned);
        }
        fused_steps += 1;
        fused_ops += fused.ops.iter().filter(|op| op.kind == OpKind::Fused).count();
    }
    assert!(fused_steps >= 15 && fused_ops >= 40, "only {fused_steps} corpus steps ({fused_ops} fused ops) ran fused");
}

#[test]
fn fusing_where_it_lowers_the_arena_never_raises_it() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut lowered = Vec::new();
    for file in step_files(root) {
        let src = std::fs::read_to_string(root.join(&file)).unwrap();
        let graph = expand(&parse(&src).unwrap()).unwrap();
        let planned = |fuse: Fusion| {
            let (step, plan) = plan_step(&graph, &PlanOptions { fuse, ..PlanOptions::default() }).unwrap();
            check(&step, &plan).unwrap_or_else(|v| panic!("{file}: {v}"));
            (step, plan.arena_bytes)
        };
        let ((step, lower), (_, off)) = (planned(Fusion::Lower), planned(Fusion::Off));
        assert!(lower <= off, "{file}: fused {lower} B > unfused {off} B");
        if lower < off {
            assert!(step.ops.iter().any(|op| op.kind == OpKind::Fused), "{file}");
            lowered.push(file);
        }
    }
    assert!(lowered.iter().any(|f| f == "ir/features/fusion.step"), "fusion lowers fusion.step's arena: {lowered:?}");
}

#[test]
fn the_cli_shows_fused_ops_and_turns_fusion_off() {
    let file = "ir/features/fusion.step";
    let fused = memplan(&["plan", file, "--print-ir-after", "fuse"]);
    assert!(fused.status.success(), "{}", text(&fused.stderr));
    let dump = text(&fused.stderr);
    assert!(dump.contains("// -----// IR Dump After fuse //----- //"), "{dump}");
    assert!(dump.contains(r#"fused(%h, %bias, body="t0: f32 = cast(x0, to=f32); t1: f32 = add(t0, x1)")"#), "{dump}");
    let report = text(&fused.stdout);
    assert!(report.contains("fusion       4 fused op(s) run 9 inner ops"), "{report}");

    let off = memplan(&["plan", file, "--no-fuse", "--print-ir-after", "fuse"]);
    assert!(off.status.success(), "{}", text(&off.stderr));
    assert!(!text(&off.stderr).contains("fused("), "{}", text(&off.stderr));
    assert!(!text(&off.stdout).contains("fusion "), "{}", text(&off.stdout));
    let arena = |out: &std::process::Output| -> u64 {
        let report = text(&out.stdout);
        let line = report.lines().find(|l| l.starts_with("arena ")).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    assert!(arena(&fused) < arena(&off), "fused {} vs unfused {}", arena(&fused), arena(&off));

    // `--fuse always` fuses even where that does not lower the arena; `off` = `--no-fuse`.
    let always = memplan(&["plan", "ir/models/mlp.step", "--fuse", "always", "--print-ir-after", "fuse"]);
    assert!(always.status.success() && text(&always.stderr).contains("fused("), "{}", text(&always.stderr));
    let both = memplan(&["plan", file, "--fuse", "always", "--no-fuse"]);
    assert_eq!(both.status.code(), Some(1), "{}", text(&both.stderr));
}

#[test]
fn run_holds_a_fused_plan_to_the_step_as_written() {
    for file in ["ir/features/fusion.step", "ir/models/gpt2_tiny.step", "ir/features/activations.step"] {
        let out = memplan(&["run", file, "--fuse", "always", "--steps", "2", "--compare-unplanned"]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{file}: {}{}", stdout, text(&out.stderr));
        assert!(stdout.contains("planned and unplanned runs agree bit for bit"), "{file}: {stdout}");
    }
}
