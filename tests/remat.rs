//! Rematerialisation in a step (the remat pass, `src/passes/remat/`): the step's problem,
//! hand-made sequences applied to small steps, budgets met on the tiny models with a
//! test-only strategy, the infeasible error, faults planted in plans that recompute, and
//! recomputed dropouts drawing their masks again.
//!
//! Every plan made here passes the independent checker; every rewritten step prints and
//! parses back to itself; every step small enough runs on the CPU executor bit-identical to
//! the original step run unplanned.

#[path = "support/bin.rs"]
mod bin;
use bin::*;

use std::collections::HashSet;
use std::path::Path;

use memplan::checker::{Violation, Violations, check};
use memplan::exec::cpu::{Placement, advance, run_step};
use memplan::exec::data::{HostTensor, init_args};
use memplan::ir::graph::Graph;
use memplan::ir::ops::{Attr, OpKind};
use memplan::ir::types::{DType, TensorType};
use memplan::passes::remat::{ApplyError, Budget, StepProblem, step_problem};
use memplan::passes::{Pass, PlanError, PlanOptions, plan_sequence, plan_step, plan_with_strategy, run};
use memplan::solve::Node;
use memplan::solve::remat::{Problem, Recomputation, Strategy, evaluate};
use memplan::{Plan, parse, print};

#[path = "support/drop_and_recompute.rs"]
mod support;
use support::drop_and_recompute;

fn load(file: &str) -> Graph {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let graph = memplan::expand(&parse(&src).unwrap()).unwrap();
    memplan::verify(&graph).unwrap();
    graph
}

/// The schedule the remat pass sees, and the step's problem for it.
fn problem_of(graph: &Graph, options: &PlanOptions) -> StepProblem {
    let options = PlanOptions { stop_after: Some(Pass::Inplace), ..options.clone() };
    let schedule = run(graph, &options).unwrap().input_schedule;
    step_problem(graph, &schedule, options.alignment, options.inplace).unwrap()
}

fn value_named(graph: &Graph, name: &str) -> memplan::ValueId {
    graph.values.indices().find(|&v| graph.values[v].name == name).unwrap_or_else(|| panic!("no %{name}"))
}

/// The node running the op that writes `name`.
fn node_writing(graph: &Graph, step: &StepProblem, name: &str) -> Node {
    let op = graph.def_op(value_named(graph, name)).unwrap();
    step.ops.iter().position(|&o| o == op).unwrap() as Node
}

/// What every plan here must satisfy: the checker accepts it; the rewritten step prints and
/// parses back to itself (clone names are valid IR); each clone is listed with its original.
fn assert_sound(original: &Graph, graph: &Graph, plan: &Plan) {
    if let Err(v) = check(graph, plan) {
        panic!("the checker rejects the plan of @{}:\n{v}", graph.name);
    }
    let printed = print(graph);
    let reparsed = parse(&printed).unwrap_or_else(|e| panic!("the rewritten step does not parse: {e:?}\n{printed}"));
    assert_eq!(print(&reparsed), printed);
    assert_eq!(reparsed, graph.canonical_ids(), "parse(print(g)) == g for the rewritten step");
    let remat = plan.remat.as_ref().expect("planned with recomputation");
    assert_eq!(graph.ops.len(), original.ops.len() + remat.recomputes.len(), "every extra op is a listed clone");
    assert_eq!(graph.args.len(), original.args.len());
}

/// Runs the planned rewritten step and the ORIGINAL step unplanned for two training steps:
/// bit-identical returns and updates.
fn assert_runs_identically(original: &Graph, graph: &Graph, plan: &Plan) {
    let mut args = init_args(original, 3).unwrap();
    for step in 0..2 {
        let planned = run_step(graph, Placement::Planned(plan), &args).unwrap();
        let reference = run_step(original, Placement::Unplanned, &args).unwrap();
        let differences = planned.differences(&reference);
        assert!(differences.is_empty(), "@{} step {step}:\n{}", graph.name, differences.join("\n"));
        assert!(!planned.updated.is_empty() || !planned.returns.is_empty());
        args = advance(&args, &planned);
    }
}

/// The problem's model of memory is the planner's: without in-place reuse the identity
/// sequence peaks at the lower bound; with it (the problem's shares), at the lower bound
/// after in-place reuse.
#[test]
fn the_identity_sequence_peaks_at_the_lower_bound() {
    let files = ["ir/models/mlp.step", "ir/models/gpt2_tiny.step", "ir/models/resnet18_tiny.step", "ir/features/views.step", "ir/features/adam.step"];
    for (file, inplace) in files.iter().flat_map(|f| [(*f, false), (*f, true)]) {
        let graph = load(file);
        let options = PlanOptions { inplace, ..PlanOptions::default() };
        let step = problem_of(&graph, &options);
        assert!(inplace || step.problem.shares.is_empty(), "{file}");
        let identity: Vec<Node> = (0..step.ops.len() as Node).collect();
        let plan = memplan::plan(&graph, &options).unwrap();
        check(&graph, &plan).unwrap();
        assert_eq!(evaluate(&step.problem, &identity).unwrap().peak, plan.lower_bound, "{file}, in-place {inplace}");
        // Backward and optimizer ops, views and the loss are never recomputed.
        let recomputable: Vec<bool> = step.problem.nodes.iter().map(|n| n.recomputable).collect();
        for (node, &op) in step.ops.iter().enumerate() {
            let o = &graph.ops[op];
            let row = o.kind.def();
            if row.class != memplan::ir::ops::OpClass::Forward || row.view_of().is_some() || graph.returns.iter().any(|r| o.outputs.contains(&r.value)) {
                assert!(!recomputable[node], "{file}: {} must not be recomputable", graph.describe_op(op));
            }
        }
        assert!(recomputable.iter().any(|&r| r), "{file}: some forward op can be recomputed");
    }
}

#[test]
fn a_hand_made_recompute_in_the_mlp() {
    let graph = load("ir/models/mlp.step");
    let options = PlanOptions::default();
    let step = problem_of(&graph, &options);
    // Recompute %h, %h2 and %a right before relu_backward (the last reader of %a), so the
    // forward %a dies after dw2.
    let (h, h2, a) = (node_writing(&graph, &step, "h"), node_writing(&graph, &step, "h2"), node_writing(&graph, &step, "a"));
    let dh2 = node_writing(&graph, &step, "dh2");
    let mut sequence: Vec<Node> = Vec::new();
    for node in 0..step.ops.len() as Node {
        if node == dh2 {
            sequence.extend([h, h2, a]);
        }
        sequence.push(node);
    }
    let (rewritten, plan) = plan_sequence(&graph, &options, &sequence).unwrap();
    assert_sound(&graph, &rewritten, &plan);
    let printed = print(&rewritten);
    for line in [
        "%h.remat1: f32[64,256] = matmul(%x, %w1)",
        "%h2.remat1: f32[64,256] = add(%h.remat1, %b1)",
        "%a.remat1: f32[64,256] = relu(%h2.remat1)",
        "relu_backward(%da, %a.remat1)",
    ] {
        assert!(printed.contains(line), "missing `{line}` in\n{printed}");
    }
    let remat = plan.remat.as_ref().unwrap();
    assert_eq!((remat.recomputes.len(), remat.budget, remat.strategy.as_str()), (3, None, "given"));
    for r in &remat.recomputes {
        assert_eq!(rewritten.ops[r.clone].kind, rewritten.ops[r.of].kind);
    }
    assert!(remat.flops > remat.base_flops && remat.overhead_percent().unwrap() > 0.0);
    let plain = memplan::plan(&graph, &options).unwrap();
    assert_eq!(remat.base_flops, plain_flops(&graph));
    assert_eq!(remat.arena_without, plain.arena_bytes);
    assert_runs_identically(&graph, &rewritten, &plan);
}

fn plain_flops(graph: &Graph) -> u64 {
    graph.ops.indices().map(|op| graph.op_flops(op)).sum()
}

#[test]
fn a_recomputed_base_gets_its_views_recreated() {
    // %r is a view of %m; its reader in "backward" (%o2) reads a view of the RECOMPUTED %m.
    let src = "step @v(%x: f32[4,6] input, %w: f32[6] param) {
  %m = mul(%x, %x)
  %r = reshape(%m, shape=[24])
  %big = mul_scalar(%x, value=3.0)
  %s = sum(%big, axes=[0, 1])
  %o = add(%s, %s)
  %o2 = mul(%r, %r)
  %g = sum(%o2, axes=[0])
  %w_new = sgd(%w, %w, lr=0.5)
  update %w <- %w_new
  return %o, %g
}";
    let graph = parse(src).unwrap();
    memplan::verify(&graph).unwrap();
    let options = PlanOptions { schedule: memplan::passes::ScheduleKind::Program, ..PlanOptions::default() };
    let step = problem_of(&graph, &options);
    let (m, o2) = (node_writing(&graph, &step, "m"), node_writing(&graph, &step, "o2"));
    let mut sequence: Vec<Node> = (0..step.ops.len() as Node).collect();
    sequence.insert(o2 as usize, m);
    let (rewritten, plan) = plan_sequence(&graph, &options, &sequence).unwrap();
    assert_sound(&graph, &rewritten, &plan);
    let printed = print(&rewritten);
    for line in ["%m.remat1: f32[4,6] = mul(%x, %x)", "%r.remat1: f32[24] = reshape(%m.remat1, shape=[24])", "= mul(%r.remat1, %r.remat1)"] {
        assert!(printed.contains(line), "missing `{line}` in\n{printed}");
    }
    assert_eq!(plan.remat.as_ref().unwrap().recomputes.len(), 2, "the recompute of %m and the view re-created on it");
    assert_runs_identically(&graph, &rewritten, &plan);
}

#[test]
fn a_clone_may_not_read_a_param_after_its_update() {
    let graph = load("ir/models/mlp.step");
    let options = PlanOptions::default();
    let step = problem_of(&graph, &options);
    let h = node_writing(&graph, &step, "h");
    let w1_new = node_writing(&graph, &step, "w1_new");
    // %h = matmul(%x, %w1) again after w1's sgd has written %w1_new over %w1.
    let mut sequence: Vec<Node> = (0..step.ops.len() as Node).collect();
    let after = sequence.iter().position(|&n| n == w1_new).unwrap() + 1;
    sequence.insert(after, h);
    match plan_sequence(&graph, &options, &sequence) {
        Err(PlanError::BadSequence(ApplyError::ReadsUpdated(nodes))) => assert_eq!(nodes, vec![h]),
        other => panic!("expected ReadsUpdated, got {other:?}"),
    }
}

#[test]
fn clones_after_an_update_are_forbidden_and_the_strategy_asked_again() {
    // In gpt2_tiny each optimizer update runs as soon as its gradient is final, so some
    // forward op recomputed right before a late reader of its output would read a weight
    // already updated: find such a sequence; the pass must refuse it.
    let graph = load("ir/models/gpt2_tiny.step");
    let options = PlanOptions::default();
    let step = problem_of(&graph, &options);
    let plain = memplan::plan(&graph, &options).unwrap();
    let budget = plain.arena_bytes * 95 / 100;
    let n = step.ops.len();
    let identity: Vec<Node> = (0..n as Node).collect();
    let (first, forbidden) = (0..n)
        .filter(|&d| step.problem.nodes[d].recomputable)
        .flat_map(|d| step.problem.values.iter().filter(move |v| v.def == Some(d as Node)).flat_map(move |v| v.readers.iter().map(move |&r| (d, r as usize))))
        .find_map(|(d, r)| {
            let mut sequence = identity.clone();
            sequence.insert(r, d as Node);
            match memplan::passes::remat::apply::apply(&graph, &step, &sequence) {
                Err(ApplyError::ReadsUpdated(nodes)) => Some((sequence, nodes)),
                _ => None,
            }
        })
        .expect("some recompute lands after an update");
    let bound = memplan::solve::remat::bound::lower_bound(&step.problem, u64::MAX);
    let first = Recomputation { eval: evaluate(&step.problem, &first).unwrap(), sequence: first, strategy: Strategy::None, bound };
    assert!(matches!(plan_sequence(&graph, &options, &first.sequence), Err(PlanError::BadSequence(ApplyError::ReadsUpdated(_)))));
    let forbidden_ops: Vec<String> = forbidden.iter().map(|&n| graph.describe_op(step.ops[n as usize])).collect();
    assert!(forbidden_ops.iter().all(|op| op.contains("layer_norm")), "{forbidden_ops:?}");
    let calls = std::cell::Cell::new(0);
    // The first answer is that sequence; later ones the test strategy's.
    let counting = |problem: &Problem, budget: u64, time_limit| {
        calls.set(calls.get() + 1);
        if forbidden.iter().all(|&n| problem.nodes[n as usize].recomputable) {
            return Ok(first.clone());
        }
        drop_and_recompute(problem, budget, time_limit)
    };
    let options = PlanOptions { budget: Some(Budget::Bytes(budget)), ..options };
    let (rewritten, plan) = plan_with_strategy(&graph, &options, "test", &counting).unwrap();
    assert!(calls.get() >= 2, "asked again after the first sequence was refused");
    assert!(plan.arena_bytes <= budget);
    assert_sound(&graph, &rewritten, &plan);
    for r in &plan.remat.as_ref().unwrap().recomputes {
        let of = rewritten.describe_op(r.of);
        assert!(!forbidden_ops.contains(&of), "{of} is recomputed");
    }
    assert_runs_identically(&graph, &rewritten, &plan);
}

/// Budgets of 0.98x ... 0.7x of the arena without recomputation on the tiny models, with the
/// test strategy: where it reports a plan, the arena fits the budget (checked, printed and
/// run bit-identically); where it does not, the error's smallest arena is above the budget
/// and at most the arena without recomputation. The budget loop must meet `must_meet` (the
/// mlp's peak is params and gradients at its last matmul: no recomputation lowers it).
#[test]
fn budgets_on_the_tiny_models() {
    for (file, must_meet) in [("ir/models/mlp.step", None), ("ir/models/gpt2_tiny.step", Some(0.7)), ("ir/models/resnet18_tiny.step", Some(0.98))] {
        let graph = load(file);
        let plain = memplan::plan(&graph, &PlanOptions::default()).unwrap();
        let mut met = Vec::new();
        for fraction in [0.98, 0.95, 0.9, 0.8, 0.7] {
            let options = PlanOptions { budget: Some(Budget::Fraction(fraction)), ..PlanOptions::default() };
            let budget = (fraction * plain.arena_bytes as f64).floor() as u64;
            match plan_with_strategy(&graph, &options, "drop-and-recompute", &drop_and_recompute) {
                Ok((rewritten, plan)) => {
                    assert!(plan.arena_bytes <= budget, "{file} {fraction}x: arena {} > budget {budget}", plan.arena_bytes);
                    let remat = plan.remat.as_ref().unwrap();
                    assert_eq!((remat.budget, remat.arena_without), (Some(budget), plain.arena_bytes));
                    assert!(!remat.recomputes.is_empty());
                    assert_sound(&graph, &rewritten, &plan);
                    assert_runs_identically(&graph, &rewritten, &plan);
                    eprintln!("{file} {fraction}x: arena {} overhead {:.3}%", plan.arena_bytes, remat.overhead_percent().unwrap());
                    met.push(fraction);
                }
                Err(PlanError::BudgetUnmet { budget: b, smallest, strategy, .. }) => {
                    assert_eq!((b, strategy.as_str()), (budget, "drop-and-recompute"));
                    assert!(smallest > budget && smallest <= plain.arena_bytes, "{file} {fraction}x: smallest {smallest}");
                    eprintln!("{file} {fraction}x: unmet, smallest {smallest} ({:.3}x)", smallest as f64 / plain.arena_bytes as f64);
                }
                Err(e) => panic!("{file} {fraction}x: {e}"),
            }
        }
        match must_meet {
            Some(fraction) => assert!(met.contains(&fraction), "{file}: met only {met:?}"),
            None => assert!(met.is_empty(), "{file}: met {met:?}"),
        }
    }
}

#[test]
fn strategy_none_meets_only_budgets_at_or_above_the_arena() {
    let graph = load("ir/models/gpt2_tiny.step");
    let plain = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    let with = |budget| PlanOptions { budget: Some(budget), checkpoint: Strategy::None, ..PlanOptions::default() };
    // Exactly the arena: met, nothing recomputed, the same plan plus the record.
    let (g, plan) = plan_step(&graph, &with(Budget::Bytes(plain.arena_bytes))).unwrap();
    check(&g, &plan).unwrap();
    assert_eq!(g, graph);
    assert_eq!((plan.arena_bytes, &plan.schedule), (plain.arena_bytes, &plain.schedule));
    let remat = plan.remat.as_ref().unwrap();
    assert!(remat.recomputes.is_empty() && remat.flops == remat.base_flops && remat.overhead_percent() == Some(0.0));
    // One byte less: infeasible, and the error names the smallest budget that works.
    let err = plan_step(&graph, &with(Budget::Bytes(plain.arena_bytes - 1))).unwrap_err();
    match &err {
        PlanError::BudgetUnmet { budget, smallest, strategy, .. } => {
            assert_eq!((*budget, *smallest, strategy.as_str()), (plain.arena_bytes - 1, plain.arena_bytes, "none"))
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&format!("the smallest arena memplan reached is {} bytes", plain.arena_bytes)), "{text}");
    let help = miette::Diagnostic::help(&err).unwrap().to_string();
    assert!(help.contains(&format!("--budget {}", plain.arena_bytes)), "{help}");
    // A bad fraction is refused.
    assert!(matches!(plan_step(&graph, &with(Budget::Fraction(-0.5))), Err(PlanError::BadBudget(_))));
    // `plan` (without the graph) refuses a plan that recomputes, and accepts one that does not.
    assert!(memplan::plan(&graph, &with(Budget::Fraction(1.0))).is_ok());
    let options = PlanOptions { budget: Some(Budget::Fraction(0.95)), ..PlanOptions::default() };
    let (rewritten, _) = plan_with_strategy(&graph, &options, "t", &drop_and_recompute).unwrap();
    assert_ne!(rewritten, graph);
    let none = PlanOptions { checkpoint: Strategy::None, ..options.clone() };
    assert!(matches!(memplan::plan(&graph, &none), Err(PlanError::BudgetUnmet { .. })), "strategy none cannot");
    // The default strategy (auto) recomputes: `plan` refuses, since the plan is of a
    // rewritten step the caller does not have (plan_step returns both).
    assert!(matches!(memplan::plan(&graph, &options), Err(PlanError::Rewritten)), "auto recomputes");
    assert!(plan_step(&graph, &options).is_ok());
}

#[test]
fn stop_after_remat_stops_there() {
    let graph = load("ir/models/mlp.step");
    let options = PlanOptions { stop_after: Some(Pass::Remat), budget: Some(Budget::Fraction(2.0)), ..PlanOptions::default() };
    let cx = run(&graph, &options).unwrap();
    assert!(cx.recomputed.is_none() && cx.buffers.is_none() && cx.plan.is_none(), "a budget met as is rewrites nothing");
    assert_eq!(cx.schedule().len(), graph.ops.len());
    let without = run(&graph, &PlanOptions { stop_after: Some(Pass::Remat), ..PlanOptions::default() }).unwrap();
    assert!(without.reuse().is_some() && without.buffers.is_none(), "no budget: the pipeline still stops after remat");
    assert_eq!(Pass::ALL.iter().map(|p| p.name()).collect::<Vec<_>>(), ["fuse", "schedule", "inplace", "remat", "buffers", "offsets"]);
}

/// A plan that recomputes %h, %h2, %a in the mlp (as in the hand-made test).
fn recomputing_mlp() -> (Graph, Plan) {
    let graph = load("ir/models/mlp.step");
    let options = PlanOptions::default();
    let step = problem_of(&graph, &options);
    let (h, h2, a) = (node_writing(&graph, &step, "h"), node_writing(&graph, &step, "h2"), node_writing(&graph, &step, "a"));
    let dh2 = node_writing(&graph, &step, "dh2");
    let mut sequence: Vec<Node> = (0..step.ops.len() as Node).collect();
    let at = sequence.iter().position(|&n| n == dh2).unwrap();
    sequence.splice(at..at, [h, h2, a]);
    let (rewritten, plan) = plan_sequence(&graph, &options, &sequence).unwrap();
    check(&rewritten, &plan).unwrap();
    (rewritten, plan)
}

fn violations(graph: &Graph, plan: &Plan) -> Vec<Violation> {
    match check(graph, plan) {
        Ok(()) => panic!("the checker accepted a planted fault"),
        Err(Violations(v)) => v,
    }
}

#[test]
fn planted_a_clone_with_another_attribute() {
    // The relu clone turned into a gelu (same types, no attributes): another kind.
    let (mut g, plan) = recomputing_mlp();
    let a = g.def_op(value_named(&g, "a.remat1")).unwrap();
    g.ops[a].kind = memplan::ir::ops::OpKind::Gelu;
    let v = violations(&g, &plan);
    assert!(v.iter().any(|x| matches!(x, Violation::RecomputeDiffers { clone, what, .. } if *clone == a && what.contains("gelu"))), "{}", Violations(v.clone()));
    // A matmul clone with transpose_a set differs in its attributes.
    let (mut g, plan) = recomputing_mlp();
    let h = g.def_op(value_named(&g, "h.remat1")).unwrap();
    g.ops[h].attrs = g.ops[h].attrs.clone().with("transpose_a", Attr::Bool(true));
    let v = violations(&g, &plan);
    let texts: Vec<String> = v.iter().filter(|x| matches!(x, Violation::RecomputeDiffers { .. })).map(|x| x.to_string()).collect();
    assert!(texts.iter().any(|t| t.contains("%h.remat1") && t.contains("transpose_a=true")), "{texts:?}");
}

#[test]
fn planted_a_clone_reading_other_bits() {
    let (mut g, plan) = recomputing_mlp();
    // %h2.remat1 = add(%h.remat1, %b1) reads %b2 instead: not the bits of %b1.
    let h2 = g.def_op(value_named(&g, "h2.remat1")).unwrap();
    let b2 = value_named(&g, "b2");
    g.ops[h2].inputs[1] = b2;
    let v = violations(&g, &plan);
    let texts: Vec<String> = v.iter().filter(|x| matches!(x, Violation::RecomputeInputDiffers { .. })).map(|x| x.to_string()).collect();
    assert!(texts.iter().any(|t| t.contains("input 1 is %b2") && t.contains("bits of %b1")), "{texts:?}");
    // Reading the ORIGINAL %h (same bits) is accepted by the recompute check; whether %h is
    // still intact is the lifetime check's business (next test).
    let (mut g, plan) = recomputing_mlp();
    let h2 = g.def_op(value_named(&g, "h2.remat1")).unwrap();
    g.ops[h2].inputs[0] = value_named(&g, "h");
    let v = check(&g, &plan).err().map(|v| v.0).unwrap_or_default();
    assert!(!v.iter().any(|x| matches!(x, Violation::RecomputeInputDiffers { .. })), "{}", Violations(v.clone()));
}

#[test]
fn planted_a_recompute_reading_an_overwritten_value() {
    let (mut g, plan) = recomputing_mlp();
    // The clone of %h2 now reads the forward %h, whose bytes the plan reused after %h2
    // (in place: %h2 over %h, %a over %h2) and which are long overwritten when it runs.
    let h2 = g.def_op(value_named(&g, "h2.remat1")).unwrap();
    let h = value_named(&g, "h");
    g.ops[h2].inputs[0] = h;
    let v = violations(&g, &plan);
    let clobbers: Vec<String> = v.iter().filter(|x| matches!(x, Violation::ClobberedRead { .. })).map(|x| x.to_string()).collect();
    assert!(clobbers.iter().any(|t| t.contains("of %h,") && t.contains("%h2.remat1")), "{}", Violations(v.clone()));
}

#[test]
fn planted_bad_records() {
    let (g, plan) = recomputing_mlp();
    let remat = plan.remat.clone().unwrap();
    // Listed twice; the original itself a clone; out of range.
    let mut p = plan.clone();
    let first = remat.recomputes[0];
    p.remat.as_mut().unwrap().recomputes.push(first);
    assert!(violations(&g, &p).iter().any(|x| matches!(x, Violation::RecomputeListedTwice { .. })));
    let mut p = plan.clone();
    let second = remat.recomputes[1];
    p.remat.as_mut().unwrap().recomputes[1].of = first.clone;
    let v = violations(&g, &p);
    assert!(v.iter().any(|x| matches!(x, Violation::RecomputeOfClone { clone, .. } if *clone == second.clone)), "{}", Violations(v.clone()));
    let mut p = plan.clone();
    p.remat.as_mut().unwrap().recomputes[0].of = memplan::OpId(999);
    assert!(violations(&g, &p).iter().any(|x| matches!(x, Violation::RecomputeIdOutOfRange { ops, .. } if *ops == g.ops.len())));
    // An unlisted clone changes the FLOPs; a wrong claim is caught.
    let mut p = plan.clone();
    p.remat.as_mut().unwrap().recomputes.pop();
    assert!(violations(&g, &p).iter().any(|x| matches!(x, Violation::RematFlops { .. })));
    let mut p = plan.clone();
    p.remat.as_mut().unwrap().flops += 1;
    assert!(violations(&g, &p).iter().any(|x| matches!(x, Violation::RematFlops { .. })));
    // A budget the arena does not meet.
    let mut p = plan.clone();
    p.remat.as_mut().unwrap().budget = Some(plan.arena_bytes - 1);
    let v = violations(&g, &p);
    assert_eq!(v, vec![Violation::OverBudget { arena_bytes: plan.arena_bytes, budget: plan.arena_bytes - 1 }]);
}

/// ir/features/dropout.step with a second seed input `%seed2` (returned, so it lives through
/// the step: a planted read of it is then the only fault), expanded and planned with both
/// dropouts recomputed right before the weight gradients that read their outputs (`%d2`
/// before `%w3.grad`, `%d1` before `%w2.grad`).
fn recomputing_dropouts() -> (Graph, Graph, Plan) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ir/features/dropout.step");
    let src = std::fs::read_to_string(path)
        .unwrap()
        .replace("%seed: i64[] input,", "%seed: i64[] input,\n  %seed2: i64[] input,")
        .replace("return %loss", "return %loss, %seed2");
    let graph = memplan::expand(&parse(&src).unwrap()).unwrap();
    let options = PlanOptions::default();
    let step = problem_of(&graph, &options);
    let mut sequence: Vec<Node> = (0..step.ops.len() as Node).collect();
    for (again, before) in [("d2", "w3.grad"), ("d1", "w2.grad")] {
        let (again, before) = (node_writing(&graph, &step, again), node_writing(&graph, &step, before));
        let at = sequence.iter().position(|&n| n == before).unwrap();
        sequence.insert(at, again);
    }
    let (rewritten, plan) = plan_sequence(&graph, &options, &sequence).unwrap();
    assert_sound(&graph, &rewritten, &plan);
    (graph, rewritten, plan)
}

#[test]
fn a_recomputed_dropout_draws_the_same_mask() {
    let (graph, rewritten, plan) = recomputing_dropouts();
    let printed = print(&rewritten);
    for line in [
        "%d2.remat1: f32[256,64] = dropout(%a2, %seed, p=0.1, stream=1)",
        "%d1.remat1: f32[256,64] = dropout(%a1, %seed, p=0.1, stream=0)",
        "= matmul(%d2.remat1, %h3.grad, transpose_a=true)",
        "= matmul(%d1.remat1, %h2.grad, transpose_a=true)",
    ] {
        assert!(printed.contains(line), "missing `{line}` in\n{printed}");
    }
    // The clones share their originals' streams: one computation, which the verifier accepts.
    memplan::verify(&rewritten).unwrap();
    let remat = plan.remat.as_ref().unwrap();
    assert_eq!(remat.recomputes.len(), 2);
    assert!(remat.recomputes.iter().all(|r| rewritten.ops[r.clone].kind == OpKind::Dropout));
    assert_runs_identically(&graph, &rewritten, &plan);
}

#[test]
fn planted_a_dropout_clone_with_another_stream() {
    let (_, mut g, plan) = recomputing_dropouts();
    let d2 = g.def_op(value_named(&g, "d2.remat1")).unwrap();
    g.ops[d2].attrs = g.ops[d2].attrs.clone().with("stream", Attr::Int(5));
    let v = violations(&g, &plan);
    assert_eq!(v.len(), 1, "{}", Violations(v.clone()));
    let text = v[0].to_string();
    assert!(matches!(v[0], Violation::RecomputeDiffers { clone, .. } if clone == d2), "{text}");
    assert!(text.contains("%d2.remat1") && text.contains("stream=5") && text.contains("stream=1"), "{text}");
}

#[test]
fn planted_a_dropout_clone_reading_another_seed() {
    let (_, mut g, plan) = recomputing_dropouts();
    // %d1.remat1 = dropout(%a1, %seed2, ...): another seed value, so another mask.
    let d1 = g.def_op(value_named(&g, "d1.remat1")).unwrap();
    g.ops[d1].inputs[1] = value_named(&g, "seed2");
    let v = violations(&g, &plan);
    assert_eq!(v.len(), 1, "{}", Violations(v.clone()));
    let text = v[0].to_string();
    assert!(matches!(v[0], Violation::RecomputeInputDiffers { clone, input: 1, .. } if clone == d1), "{text}");
    assert!(text.contains("%d1.remat1") && text.contains("input 1 is %seed2") && text.contains("bits of %seed"), "{text}");
    // The verifier sees it too: another seed with the original's stream is another site
    // drawing that stream.
    let errors = memplan::verify(&g).unwrap_err().errors;
    assert!(matches!(errors[..], [memplan::VerifyError::DropoutStreamReused { stream: 0, .. }]), "{errors:?}");
}

/// What recomputation must preserve, measured: under budgets the auto strategy meets by
/// recomputing dropouts of ir/features/dropout.step, the planned run (each clone drawing
/// its mask again from the seed) is bit-identical to the step run without a plan, for
/// several seed values; and the seed matters (another seed, another loss).
#[test]
fn dropouts_recomputed_under_a_budget_run_bit_identically() {
    let graph = load("ir/features/dropout.step");
    let plain = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    for fraction in [0.9, 0.7] {
        let options = PlanOptions { budget: Some(Budget::Fraction(fraction)), ..PlanOptions::default() };
        let (rewritten, plan) = plan_step(&graph, &options).unwrap_or_else(|e| panic!("{fraction}x: {e}"));
        assert!(plan.arena_bytes as f64 <= fraction * plain.arena_bytes as f64, "{fraction}x: arena {}", plan.arena_bytes);
        assert_sound(&graph, &rewritten, &plan);
        let remat = plan.remat.as_ref().unwrap();
        let dropouts: Vec<String> = remat
            .recomputes
            .iter()
            .filter(|r| rewritten.ops[r.clone].kind == OpKind::Dropout)
            .map(|r| rewritten.describe_op(r.clone))
            .collect();
        assert!(!dropouts.is_empty(), "{fraction}x: no dropout recomputed\n{}", print(&rewritten));
        eprintln!("{fraction}x: arena {} of {}, recomputes {dropouts:?}", plan.arena_bytes, plain.arena_bytes);
        assert_runs_identically(&graph, &rewritten, &plan);
        let mut losses = Vec::new();
        for seed in [-5_i64, 1 << 40] {
            let mut args = init_args(&graph, 3).unwrap();
            args.insert("seed".into(), HostTensor::from_f64(TensorType::new(DType::I64, vec![]), &[seed as f64]));
            let planned = run_step(&rewritten, Placement::Planned(&plan), &args).unwrap();
            let reference = run_step(&graph, Placement::Unplanned, &args).unwrap();
            let differences = planned.differences(&reference);
            assert!(differences.is_empty(), "{fraction}x, seed {seed}: {differences:?}");
            losses.push(planned.loss().unwrap());
        }
        assert_ne!(losses[0], losses[1], "the seed draws the masks");
    }
}

#[test]
fn cli_budget_flags() {
    let plain = memplan::plan(&load("ir/models/mlp.step"), &PlanOptions::default()).unwrap();
    // Unmet: exit 2, the smallest budget that works.
    let out = memplan(&["plan", "ir/models/mlp.step", "--budget", "0.5x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("--budget {}", plain.arena_bytes)), "{}", text(&out.stderr));
    // Bad spellings: exit 1 with a hint.
    for (bad, needle) in [("12XB", "unknown unit `XB`"), ("0x", "positive finite"), ("1.5B", "must be whole")] {
        let out = memplan(&["plan", "ir/models/mlp.step", "--budget", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(needle) && stderr.contains("hint:"), "{bad}: {stderr}");
    }
    let out = memplan(&["check", "ir/models/mlp.step", "--budget", "1x", "--checkpoint", "psychic"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown strategy `psychic`"), "{}", text(&out.stderr));
    // Met: the report says so, in text and JSON.
    let exact = plain.arena_bytes.to_string();
    let out = memplan(&["plan", "ir/models/mlp.step", "--budget", &exact, "--checkpoint", "none"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("recomputation (strategy none)") && stdout.contains(": met, arena") && stdout.contains("0 op(s)"), "{stdout}");
    let out = memplan(&["plan", "ir/models/mlp.step", "--budget", "2MiB", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["remat"]["budget"], 2 << 20);
    assert_eq!(json["remat"]["count"], 0);
    assert_eq!(json["plan"]["remat"]["arena_without"], plain.arena_bytes);
    // check and run take the same flags.
    let out = memplan(&["check", "ir/models/mlp.step", "--budget", "1.0x"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = memplan(&["run", "ir/models/mlp.step", "--budget", "1.0x", "--compare-unplanned"]);
    assert!(out.status.success() && text(&out.stdout).contains("agree bit for bit"), "{}", text(&out.stderr));
    let out = memplan(&["run", "ir/models/mlp.step", "--budget", "0.9x"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_report_lists_the_recomputes() {
    let (g, plan) = recomputing_mlp();
    let report = memplan::report::Report::new(&g, &plan);
    let remat = report.remat.as_ref().unwrap();
    assert_eq!(remat.count, 3);
    assert_eq!(remat.recomputed[0].op, "%h.remat1 = matmul(%x, %w1)");
    assert_eq!(remat.recomputed[0].of, "%h = matmul(%x, %w1)");
    assert_eq!(remat.extra_flops, Some(64 * 784 * 256 * 2 + 64 * 256 * 2));
    let text = memplan::report::text::render(&report, 2, memplan::report::text::BufferRows::All);
    assert!(text.contains("after recomputation"), "{text}");
    assert!(text.contains("budget          none (the recomputation sequence was given)"), "{text}");
    assert!(text.contains("3 op(s), +") && text.contains("... and 1 more"), "{text}");
    // The plan's record survives JSON.
    let json = serde_json::to_string(&plan).unwrap();
    assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plan);
    let names: HashSet<&str> = g.values.iter().map(|v| v.name.as_str()).collect();
    assert!(names.contains("a.remat1"));
}

/// Random training steps (`memplan::testing::random_step`), every recomputable op
/// recomputed before each backward (or optimizer, or loss) op that reads it: every plan is sound, runs
/// bit-identically to the step as generated, and has the lower bound the problem predicts
/// (the evaluation rule with shares is the in-place pass on the rewritten step). (Memory is not the point: random steps are
/// small and mostly params; this covers views, several outputs, in-place reuse and updates
/// meeting recomputation.) Clones that would read an updated param are forbidden as the
/// pass does.
#[test]
fn random_steps_recomputing_everything() {
    let mut recomputes = 0;
    for seed in 0..80 {
        let graph = memplan::testing::random_step::random_step(seed);
        let options = PlanOptions::default();
        let step = problem_of(&graph, &options);
        let mut dropped: Vec<bool> = step.problem.nodes.iter().map(|n| n.recomputable).collect();
        let (sequence, (rewritten, plan)) = loop {
            let sequence = support::recompute_before_readers(&step.problem, &dropped);
            match plan_sequence(&graph, &options, &sequence) {
                Ok(planned) => break (sequence, planned),
                Err(PlanError::BadSequence(ApplyError::ReadsUpdated(nodes))) => {
                    for n in nodes {
                        assert!(dropped[n as usize], "seed {seed}");
                        dropped[n as usize] = false;
                    }
                }
                Err(e) => panic!("seed {seed}: {e}\n{}", print(&graph)),
            }
        };
        assert_sound(&graph, &rewritten, &plan);
        assert_runs_identically(&graph, &rewritten, &plan);
        // The problem (with its shares) predicts the rewritten step's lower bound after
        // in-place reuse exactly.
        assert_eq!(evaluate(&step.problem, &sequence).unwrap().peak, plan.lower_bound, "seed {seed}");
        recomputes += plan.remat.as_ref().unwrap().recomputes.len();
    }
    assert!(recomputes >= 100, "only {recomputes} recomputes over 80 seeds");
    eprintln!("{recomputes} recomputes over 80 seeds");
}

/// A budget below what every plan holds at once (params, optimizer state and the largest
/// gradient an update reads) says what that floor is made of, not that another strategy
/// may go lower; a budget above the floor that is still unmet says the latter.
#[test]
fn a_budget_below_the_floor_says_what_the_floor_is() {
    let graph = load("ir/models/mlp.step");
    let floor = memplan::passes::remat::Floor::of(&graph, 256).unwrap();
    assert_eq!(floor, memplan::passes::remat::Floor { params: 814336, state: 0, gradient: Some(("%dw1".into(), 802816)) });
    assert_eq!(floor.bytes(), 1617152);
    let out = memplan(&["plan", "ir/models/mlp.step", "--budget", "1617151"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(stderr.contains("no plan fits in less than 1617152 bytes: the params (814336 bytes), the optimizer state (0 bytes) and %dw1 (802816 bytes), the largest gradient an update reads"), "{stderr}");
    assert!(!stderr.contains("another --checkpoint"), "{stderr}");
    let out = memplan(&["plan", "ir/models/mlp.step", "--budget", "1617152"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(stderr.contains("another --checkpoint strategy may go lower") && !stderr.contains("no plan fits"), "{stderr}");
    // Adam's moments count as optimizer state.
    let adam = memplan::expand(&load("ir/models/mlp_adam.step")).unwrap();
    let floor = memplan::passes::remat::Floor::of(&adam, 256).unwrap();
    assert_eq!((floor.params, floor.state), (814336, 2 * 814336 + 256));
}

/// The remat pass shares the plan's time limit: with none left it still ends, with a plan
/// the checker accepts within the budget, or the budget unmet (never a hang, never a plan
/// over budget).
#[test]
fn the_remat_pass_stops_at_the_time_limit() {
    let graph = load("ir/models/gpt2_tiny.step");
    for fraction in [0.9, 0.7] {
        let options = PlanOptions { budget: Some(Budget::Fraction(fraction)), time_limit: std::time::Duration::ZERO, ..PlanOptions::default() };
        match plan_step(&graph, &options) {
            Ok((rewritten, plan)) => {
                let remat = plan.remat.as_ref().unwrap();
                assert!(plan.arena_bytes <= remat.budget.unwrap(), "{fraction}x");
                assert_sound(&graph, &rewritten, &plan);
            }
            Err(PlanError::BudgetUnmet { budget, smallest, .. }) => assert!(smallest > budget, "{fraction}x"),
            Err(e) => panic!("{fraction}x: {e}"),
        }
    }
}

/// A step with no ops under a budget (issue 21): met at its arena, unmet below it with exit
/// 2 and the smallest arena that works, under every strategy, never a panic (the remat
/// simulator indexed past its deltas on a problem without nodes).
#[test]
fn a_step_without_ops_under_a_budget() {
    let graph = load("ir/features/empty.step");
    assert!(graph.ops.is_empty());
    let arena = memplan::plan(&graph, &PlanOptions::default()).unwrap().arena_bytes;
    for strategy in Strategy::ALL {
        let with = |budget| PlanOptions { budget: Some(budget), checkpoint: strategy, ..PlanOptions::default() };
        let (g, plan) = plan_step(&graph, &with(Budget::Fraction(1.0))).unwrap();
        check(&g, &plan).unwrap();
        assert_eq!((plan.arena_bytes, plan.remat.as_ref().unwrap().recomputes.len()), (arena, 0));
        match plan_step(&graph, &with(Budget::Fraction(0.5))) {
            Err(PlanError::BudgetUnmet { smallest, .. }) => assert_eq!(smallest, arena, "{}", strategy.name()),
            other => panic!("{}: {other:?}", strategy.name()),
        }
    }
    for command in ["plan", "check", "run"] {
        for strategy in Strategy::ALL {
            let out = memplan(&[command, "ir/features/empty.step", "--budget", "0.5x", "--checkpoint", strategy.name()]);
            let stderr = text(&out.stderr).split_whitespace().collect::<Vec<_>>().join(" ");
            assert_eq!(out.status.code(), Some(2), "{command} {}: {stderr}", strategy.name());
            assert!(stderr.contains(&format!("--budget {arena}")) && stderr.contains("the step has no ops"), "{stderr}");
        }
    }
}

/// `--recompute cheap`: on the tiny models and every committed PyTorch export, the arena is
/// at most the arena without recomputation (lower on most), only cheap ops are cloned (FLOPs
/// at most 4 per byte moved), the extra FLOPs stay within 1% of the step and the extra bytes
/// moved within 10% of the step's, and the plan is
/// sound and runs bit-identical to the original unplanned.
#[test]
fn cheap_recomputation_lowers_the_arena_only_through_cheap_ops() {
    use memplan::passes::Recompute;
    use memplan::passes::remat::cheap;

    let files = [
        "ir/models/gpt2_tiny.step",
        "ir/models/resnet18_tiny.step",
        "ir/models/mlp.step",
        "ir/torch/bert_small.step",
        "ir/torch/gpt2_small.step",
        "ir/torch/gpt2_small_bf16.step",
        "ir/torch/llama_small.step",
        "ir/torch/resnet_small_bf16.step",
        "ir/torch/unet_small.step",
        "ir/torch/vit_small.step",
    ];
    let mut lowered = 0;
    for file in files {
        let original = load(file);
        let (_, plain) = plan_step(&original, &PlanOptions::default()).unwrap();
        let (graph, plan) = plan_step(&original, &PlanOptions { recompute: Recompute::Cheap { max_traffic_percent: 10 }, ..PlanOptions::default() }).unwrap();
        assert!(plan.arena_bytes <= plain.arena_bytes, "{file}: {} > {}", plan.arena_bytes, plain.arena_bytes);
        let Some(remat) = &plan.remat else {
            assert_eq!(plan.arena_bytes, plain.arena_bytes, "{file}: a lower arena without recomputing");
            continue;
        };
        lowered += usize::from(plan.arena_bytes < plain.arena_bytes);
        assert_sound(&original, &graph, &plan);
        for r in &remat.recomputes {
            assert!(cheap(&graph, r.clone), "{file}: {} is not cheap", print_op(&graph, r.clone));
        }
        let overhead = remat.overhead_percent().unwrap();
        assert!(overhead <= 1.0, "{file}: +{overhead}% FLOPs");
        let (base, extra) = memplan::passes::traffic(&graph, &plan);
        assert!(extra * 10 <= base, "{file}: {extra} bytes moved again, of {base}");
        assert_runs_identically(&original, &graph, &plan);
    }
    assert!(lowered >= files.len() / 2, "cheap recomputation lowered only {lowered} of {} arenas", files.len());
}

fn print_op(graph: &Graph, op: memplan::OpId) -> String {
    graph.ops[op].outputs.iter().map(|&v| format!("%{}", graph.values[v].name)).collect::<Vec<_>>().join(", ")
}
