//! Property tests on seeded random training steps (`memplan::testing::random_step`).
//!
//! For every seed in `0..SEEDS` the generated step is verified, round-tripped through the
//! printer and the parser, planned, checked by the independent checker, and run on the CPU
//! for two training steps (updated params and state feed the second), once inside the
//! planned arena and once unplanned: the results must agree bit for bit. A failure names
//! the seed and prints the step's text, so it can be saved to a file and reproduced with
//! `memplan run FILE --steps 2 --seed SEED --compare-unplanned`.
//!
//! Seeds are spread over the machine's threads; failures are reported in seed order.

use std::collections::BTreeMap;

use memplan::exec::cpu::{Placement, advance, run_step, run_step_in_chunks};
use memplan::exec::data::init_args;
use memplan::ir::ops::{Attr, OPS, OpKind};
use memplan::passes::fuse::fuse;
use memplan::passes::{Fusion, PlanOptions, ScheduleKind, plan_step};
use memplan::testing::random_step::{MAX_OPS, MIN_OPS, random_step};
use memplan::{Graph, check, parse, plan, print, verify};

const SEEDS: u64 = 400;
/// Training steps run per seed.
const STEPS: u32 = 2;

/// Everything the property asks of one seed; `Err` says what failed.
fn check_seed(seed: u64) -> Result<(), String> {
    let graph = random_step(seed);
    verify(&graph).map_err(|e| format!("does not verify: {e:?}"))?;
    if !(MIN_OPS..=MAX_OPS).contains(&graph.ops.len()) {
        return Err(format!("has {} ops, not {MIN_OPS}..={MAX_OPS}", graph.ops.len()));
    }
    let text = print(&graph);
    let reparsed = parse(&text).map_err(|e| format!("the printed step does not parse: {e:?}"))?;
    if reparsed != graph {
        return Err("parse(print(g)) != g".into());
    }
    if print(&reparsed) != text {
        return Err("printing is not idempotent".into());
    }
    // The memory-aware schedule: the checker proves it a topological order whose updates land
    // in place, the runs below prove it changes nothing, and it is never worse than program order.
    let options = PlanOptions { schedule: ScheduleKind::Memory, ..PlanOptions::default() };
    let plan = plan(&graph, &options).map_err(|e| format!("planning fails: {e}"))?;
    check(&graph, &plan).map_err(|v| format!("the checker rejects the plan:\n{v}"))?;
    if plan.savings.after_schedule > plan.savings.program_order {
        return Err(format!("the schedule raises the lower bound: {:?}", plan.savings));
    }
    if plan.arena_bytes < plan.lower_bound {
        return Err(format!("arena {} is below the lower bound {}", plan.arena_bytes, plan.lower_bound));
    }

    let mut args = init_args(&graph, seed).unwrap();
    for step in 1..=STEPS {
        let planned = run_step(&graph, Placement::Planned(&plan), &args)
            .map_err(|e| format!("step {step}: the planned run fails: {e}"))?;
        let unplanned = run_step(&graph, Placement::Unplanned, &args)
            .map_err(|e| format!("step {step}: the unplanned run fails: {e}"))?;
        let differences = planned.differences(&unplanned);
        if !differences.is_empty() {
            return Err(format!("step {step}: planned and unplanned runs differ:\n  {}", differences.join("\n  ")));
        }
        // Pointwise ops in chunks of a few elements: the same bits (in-place ops included).
        let chunked = run_step_in_chunks(&graph, Placement::Planned(&plan), &args, 3 + seed as usize % 5)
            .map_err(|e| format!("step {step}: the planned run in chunks fails: {e}"))?;
        let differences = planned.differences(&chunked);
        if !differences.is_empty() {
            return Err(format!("step {step}: the planned run in chunks differs:\n  {}", differences.join("\n  ")));
        }
        args = advance(&args, &planned);
    }
    Ok(())
}

/// The fusion pass on one seed's step (`Ok(false)`: nothing to fuse): the fused step
/// verifies and round-trips, its plan checks, its planned run gives the bits of the step as
/// written run unplanned, and fusing where it lowers the arena never raises it.
fn check_fused(seed: u64) -> Result<bool, String> {
    let graph = random_step(seed);
    let Some(fused) = fuse(&graph) else { return Ok(false) };
    verify(&fused).map_err(|e| format!("the fused step does not verify: {e:?}"))?;
    let reparsed = parse(&print(&fused)).map_err(|e| format!("the fused step does not parse back: {e:?}"))?;
    if reparsed != fused {
        return Err("parse(print(fused)) != fused".into());
    }
    let plan = plan(&fused, &PlanOptions::default()).map_err(|e| format!("planning the fused step fails: {e}"))?;
    check(&fused, &plan).map_err(|v| format!("the checker rejects the fused plan:\n{v}"))?;
    let args = init_args(&graph, seed).unwrap();
    let planned = run_step(&fused, Placement::Planned(&plan), &args).map_err(|e| format!("the fused run fails: {e}"))?;
    let written = run_step(&graph, Placement::Unplanned, &args).map_err(|e| format!("the unplanned run fails: {e}"))?;
    let differences = planned.differences(&written);
    if !differences.is_empty() {
        return Err(format!("the fused step differs from the step as written:\n  {}", differences.join("\n  ")));
    }
    // Fused ops whose inputs all have the output's shape run a few elements at a time.
    let chunked = run_step_in_chunks(&fused, Placement::Planned(&plan), &args, 3 + seed as usize % 5)
        .map_err(|e| format!("the fused run in chunks fails: {e}"))?;
    let differences = chunked.differences(&written);
    if !differences.is_empty() {
        return Err(format!("the fused step run in chunks differs from the step as written:\n  {}", differences.join("\n  ")));
    }
    let arena = |fuse: Fusion| {
        plan_step(&graph, &PlanOptions { fuse, ..PlanOptions::default() }).map(|(_, p)| p.arena_bytes).map_err(|e| e.to_string())
    };
    let (lower, off) = (arena(Fusion::Lower)?, arena(Fusion::Off)?);
    if lower > off {
        return Err(format!("fusing where it lowers the arena raised it: {lower} > {off}"));
    }
    Ok(true)
}

#[test]
fn random_steps_fused_run_as_written() {
    let results = for_all_seeds(|seed| {
        std::panic::catch_unwind(|| check_fused(seed)).unwrap_or_else(|_| Err("panicked".to_string()))
    });
    let failures: Vec<String> =
        results.iter().filter_map(|(seed, r)| r.as_ref().err().map(|e| format!("seed {seed}: {e}"))).collect();
    assert!(failures.is_empty(), "{} seeds fail:\n{}", failures.len(), failures.join("\n"));
    // The property is not vacuous: many random steps have something to fuse.
    let fused = results.iter().filter(|(_, r)| matches!(r, Ok(true))).count();
    assert!(fused as u64 >= SEEDS / 4, "only {fused} of {SEEDS} random steps have ops to fuse");
}

/// Runs `f` on every seed, on all threads; the results in seed order.
fn for_all_seeds<T: Send>(f: impl Fn(u64) -> T + Sync) -> Vec<(u64, T)> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8) as u64;
    let mut results: Vec<(u64, T)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                scope.spawn(move || (t..SEEDS).step_by(threads as usize).map(|seed| (seed, f(seed))).collect::<Vec<_>>())
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a seed's check panicked")).collect()
    });
    results.sort_by_key(|&(seed, _)| seed);
    results
}

#[test]
fn random_steps_plan_check_and_run_planned_as_unplanned() {
    let failures: Vec<(u64, String)> = for_all_seeds(|seed| {
        // A panic anywhere (generator, planner, checker, executor) is a failure of this seed.
        match std::panic::catch_unwind(|| check_seed(seed)) {
            Ok(result) => result,
            Err(panic) => Err(format!(
                "panicked: {}",
                panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied()).unwrap_or("?")
            )),
        }
    })
    .into_iter()
    .filter_map(|(seed, r)| r.err().map(|e| (seed, e)))
    .collect();
    if failures.is_empty() {
        return;
    }
    let mut message = format!(
        "{} of {SEEDS} random steps fail (seeds {:?}). Reproduce one: save its text as FILE, then \
         `memplan run FILE --steps {STEPS} --seed SEED --compare-unplanned`.\n",
        failures.len(),
        failures.iter().map(|(s, _)| *s).collect::<Vec<_>>()
    );
    for (seed, error) in failures.iter().take(3) {
        let text = std::panic::catch_unwind(|| print(&random_step(*seed))).unwrap_or_else(|_| "(cannot print)".into());
        message.push_str(&format!("\n--- seed {seed}: {error}\n{text}"));
    }
    panic!("{message}");
}

#[test]
fn the_generator_is_deterministic() {
    for seed in (0..SEEDS).step_by(7).chain([u64::MAX, 1 << 40]) {
        let (a, b) = (random_step(seed), random_step(seed));
        assert_eq!(print(&a), print(&b), "seed {seed}");
        assert_eq!(a, b, "seed {seed}");
    }
    // Different seeds give different steps.
    let distinct: std::collections::BTreeSet<String> = (0..50).map(|s| print(&random_step(s))).collect();
    assert!(distinct.len() >= 45, "only {} distinct steps among 50 seeds", distinct.len());
}

/// Counts of op kinds, updates, returns and argument roles over all seeds.
fn census(graphs: &[Graph]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let mut bump = |key: String| *counts.entry(key).or_insert(0) += 1;
    for g in graphs {
        for op in &g.ops {
            bump(op.kind.name().to_string());
        }
        for &arg in &g.args {
            bump(format!("arg:{}", g.role(arg).unwrap().name()));
        }
        for v in &g.values {
            bump(format!("dtype:{}", v.ty.dtype));
        }
        let users = g.users();
        for op in &g.ops {
            if op.outputs.iter().all(|&o| users[o].is_empty() && !g.returns.iter().any(|r| r.value == o)) {
                bump("op whose outputs are never read".into());
            }
            if op.kind == OpKind::Matmul {
                let a = &g.values[op.inputs[0]].ty;
                if a.rank() > 2 {
                    bump("matmul with batch dims".into());
                }
                if op.attrs.0.iter().any(|(_, v)| *v == Attr::Bool(true)) {
                    bump("matmul with a transpose".into());
                }
            }
            if op.kind == OpKind::Fill && op.attrs.float("step") != 0.0 {
                bump("fill with a step (arange)".into());
            }
            if op.kind == OpKind::Gelu && op.attrs.get("approximate") == Some(&Attr::Bool(false)) {
                bump("exact gelu".into());
            }
            if op.kind == OpKind::CrossEntropy && op.attrs.int("ignore_index") >= 0 {
                bump("cross_entropy ignoring a class".into());
            }
            if op.kind == OpKind::CrossEntropy && op.attrs.float("label_smoothing") > 0.0 {
                bump("cross_entropy with label smoothing".into());
            }
            if op.kind == OpKind::Attention {
                let (q, k) = (&g.values[op.inputs[0]].ty, &g.values[op.inputs[1]].ty);
                let r = q.rank();
                if op.attrs.bool("causal") {
                    bump("causal attention".into());
                }
                if q.dims()[r - 3] != k.dims()[r - 3] {
                    bump("grouped-query attention".into());
                }
                if q.dims()[r - 2] != k.dims()[r - 2] {
                    bump("attention with T != S".into());
                }
                if g.def_op(op.inputs[0]).is_some_and(|d| g.ops[d].kind == OpKind::Transpose) {
                    bump("attention on heads split by a transpose".into());
                }
            }
            if matches!(op.kind, OpKind::Conv2d | OpKind::ConvTranspose2d) {
                let groups = op.attrs.int("groups") as u64;
                let (x, y) = (&g.values[op.inputs[0]].ty, &g.values[op.outputs[0]].ty);
                if groups > 1 {
                    bump("grouped conv".into());
                }
                if groups > 1 && x.dims()[1] == groups && y.dims()[1] == groups {
                    bump("depthwise conv".into());
                }
                if op.attrs.ints("dilation") != [1, 1] {
                    bump("dilated conv".into());
                }
                if op.kind == OpKind::ConvTranspose2d && op.attrs.ints("output_padding") != [0, 0] {
                    bump("conv_transpose2d with output_padding".into());
                }
            }
            let dims = |k: usize| g.values[op.inputs[k]].ty.dims().to_vec();
            let out_dims = g.values[op.outputs[0]].ty.dims().to_vec();
            let divides = |k: usize| dims(0)[k].is_multiple_of(out_dims[k]);
            if op.kind == OpKind::AdaptiveAvgPool2d && !(divides(2) && divides(3)) {
                bump("adaptive_avg_pool2d with overlapping bins".into());
            }
            let no_integer_ratio = |a: u64, b: u64| !a.is_multiple_of(b) && !b.is_multiple_of(a);
            if op.kind == OpKind::UpsampleNearest2d
                && (no_integer_ratio(dims(0)[2], out_dims[2]) || no_integer_ratio(dims(0)[3], out_dims[3]))
            {
                bump("upsample_nearest2d by a ratio that is no integer".into());
            }
            if op.kind == OpKind::MaskedFill && dims(1) != out_dims {
                bump("masked_fill with a broadcast mask".into());
            }
            if op.kind == OpKind::Where && (0..3).any(|k| dims(k) != out_dims) {
                bump("where with broadcasting".into());
            }
            if op.kind == OpKind::Reshape
                && g.def_op(op.inputs[0]).is_some_and(|d| g.ops[d].kind == OpKind::Contiguous)
            {
                bump("reshape of a contiguous copy".into());
            }
        }
        if users.iter().any(|u| u.len() >= 3) {
            bump("value with 3+ users".into());
        }
        if g.updates.len() >= 3 {
            bump("step with 3+ updates".into());
        }
        if g.returns.len() >= 2 {
            bump("step with 2+ returns".into());
        }
        // An update in the middle: an op after the one writing the new value.
        if g.updates.iter().any(|u| g.def_op(u.value).is_some_and(|op| op.0 as usize + 3 < g.ops.len())) {
            bump("update in the middle of the step".into());
        }
    }
    counts
}

#[test]
fn the_generator_covers_every_op_and_feature() {
    let mut graphs: Vec<Graph> = (0..SEEDS).map(random_step).collect();
    // `fused` ops are the fusion pass's (`random_steps_fused_run_as_written` runs it on
    // every seed): counted in the fused steps.
    let fused: Vec<Graph> = graphs.iter().filter_map(fuse).collect();
    graphs.extend(fused);
    let counts = census(&graphs);
    // Extern ops cannot run on the CPU reference, which every random step does; the
    // ir/torch corpus plans and checks them (tests/corpus.rs) and tests/cli.rs runs one.
    let generated = OPS.iter().filter(|row| !row.kind.is_extern());
    let missing: Vec<&str> = generated.map(|row| row.name).filter(|name| !counts.contains_key(*name)).collect();
    assert!(missing.is_empty(), "ops never generated in {SEEDS} seeds: {missing:?}\ncounts: {counts:#?}");
    let features = [
        "arg:param",
        "arg:input",
        "arg:state",
        "dtype:f32",
        "dtype:f16",
        "dtype:bf16",
        "dtype:i32",
        "dtype:i64",
        "dtype:bool",
        "op whose outputs are never read",
        "matmul with batch dims",
        "matmul with a transpose",
        "reshape of a contiguous copy",
        "value with 3+ users",
        "step with 3+ updates",
        "step with 2+ returns",
        "update in the middle of the step",
        "fill with a step (arange)",
        "exact gelu",
        "cross_entropy ignoring a class",
        "cross_entropy with label smoothing",
        "causal attention",
        "grouped-query attention",
        "attention with T != S",
        "attention on heads split by a transpose",
        "grouped conv",
        "depthwise conv",
        "dilated conv",
        "conv_transpose2d with output_padding",
        "adaptive_avg_pool2d with overlapping bins",
        "upsample_nearest2d by a ratio that is no integer",
        "masked_fill with a broadcast mask",
        "where with broadcasting",
    ];
    for feature in features {
        assert!(counts.get(feature).is_some_and(|&n| n >= 3), "{feature}: {:?} in {SEEDS} seeds", counts.get(feature));
    }
    // Sizes: small enough for fast CPU runs.
    for (seed, g) in graphs.iter().enumerate() {
        let largest = g.values.iter().map(|v| v.ty.shape.numel().unwrap()).max().unwrap_or(0);
        assert!(largest <= memplan::testing::random_step::MAX_OUT, "seed {seed}: a value has {largest} elements");
    }
}

/// The property above exercises real reordering: the memory-aware schedule differs from
/// program order (and lowers the lower bound) on most seeds.
#[test]
fn the_memory_schedule_reorders_most_random_steps() {
    let reordered = for_all_seeds(|seed| {
        let graph = random_step(seed);
        let options = PlanOptions { schedule: ScheduleKind::Memory, ..PlanOptions::default() };
        plan(&graph, &options).is_ok_and(|p| p.savings.after_schedule < p.savings.program_order)
    })
    .into_iter()
    .filter(|&(_, lower)| lower)
    .count();
    assert!(reordered as u64 >= SEEDS / 2, "only {reordered} of {SEEDS} random steps gain from the schedule");
}
