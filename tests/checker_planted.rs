//! Faults planted in real plans: the planner's plan of a corpus step passes the checker;
//! each planted fault (overlap of live buffers, a read of overwritten bytes, misalignment,
//! an arena too small, an update off its param, a schedule out of order, a view off its
//! base's buffer, a wrong lower bound) is reported as its own kind, naming the op and value.

use memplan::checker::{Violation, Violations, check};
use memplan::index::{BufferId, ValueId};
use memplan::ir::graph::Graph;
use memplan::passes::{PlanOptions, ScheduleKind};
use memplan::{Plan, parse, plan};

/// The plan of a corpus step in program order (the faults below name schedule positions).
fn planned(file: &str) -> (Graph, Plan) {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    let graph = parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let options = PlanOptions { schedule: ScheduleKind::Program, ..PlanOptions::default() };
    let plan = plan(&graph, &options).unwrap();
    check(&graph, &plan).expect("the unplanted plan is valid");
    (graph, plan)
}

fn value(graph: &Graph, name: &str) -> ValueId {
    graph.values.indices().find(|&v| graph.values[v].name == name).unwrap_or_else(|| panic!("no %{name}"))
}

fn violations(graph: &Graph, plan: &Plan) -> Vec<Violation> {
    match check(graph, plan) {
        Ok(()) => panic!("the checker accepted a planted fault"),
        Err(Violations(v)) => v,
    }
}

/// The violations of `kind` (matched by the pattern) and their texts.
macro_rules! reported {
    ($v:expr, $pattern:pat) => {
        $v.iter().filter(|v| matches!(v, $pattern)).map(|v| v.to_string()).collect::<Vec<_>>()
    };
}

#[test]
fn overlapping_live_buffers_and_clobbered_reads() {
    let (g, mut p) = planned("ir/models/mlp.step");
    // %x (input, read by the last backward matmul) onto %w1 (a param live all step).
    let (x, w1) = (p.value_buffer[value(&g, "x")], p.value_buffer[value(&g, "w1")]);
    p.buffers[x].offset = p.buffers[w1].offset;
    let v = violations(&g, &p);
    let overlaps = reported!(v, Violation::OverlappingBuffers { .. });
    assert!(!overlaps.is_empty(), "{}", Violations(v.clone()));
    let clobbers = reported!(v, Violation::ClobberedRead { .. });
    assert!(clobbers.iter().any(|t| t.contains("%x") && t.contains("%w1")), "{clobbers:?}");
}

#[test]
fn a_read_after_the_bytes_were_reused() {
    let (g, mut p) = planned("ir/models/mlp.step");
    // Move %da (written at step 10) onto %a (read by relu_backward at step 11): the
    // backward op then reads bytes %da overwrote.
    let (da, a) = (value(&g, "da"), value(&g, "a"));
    p.buffers[p.value_buffer[da]].offset = p.buffers[p.value_buffer[a]].offset;
    let v = violations(&g, &p);
    let clobbers = reported!(v, Violation::ClobberedRead { .. });
    assert!(
        clobbers.iter().any(|t| t.contains("%da") && t.contains("%a") && t.contains("relu_backward")),
        "{clobbers:?}"
    );
}

#[test]
fn misaligned_offset() {
    let (g, mut p) = planned("ir/models/mlp.step");
    let b = p.value_buffer[value(&g, "h")];
    p.buffers[b].offset += 8;
    let v = violations(&g, &p);
    assert!(!reported!(v, Violation::Misaligned { .. }).is_empty(), "{}", Violations(v.clone()));
}

#[test]
fn arena_too_small() {
    let (g, mut p) = planned("ir/models/mlp.step");
    p.arena_bytes -= 256;
    let v = violations(&g, &p);
    assert!(!reported!(v, Violation::PastArenaEnd { .. }).is_empty(), "{}", Violations(v.clone()));
}

#[test]
fn update_not_landing_in_its_param() {
    let (g, mut p) = planned("ir/models/mlp.step");
    let (w1, w1_new) = (value(&g, "w1"), value(&g, "w1_new"));
    let spare = BufferId(p.buffers.len() as u32);
    let home = p.value_buffer[w1];
    let mut moved = p.buffers[home].clone();
    moved.values = vec![w1_new];
    moved.offset = p.arena_bytes;
    p.arena_bytes += 802816;
    p.buffers[home].values.retain(|&v| v != w1_new);
    p.buffers.push(moved);
    p.value_buffer[w1_new] = spare;
    let v = violations(&g, &p);
    let texts = reported!(v, Violation::UpdateNotInPlace { .. });
    assert!(texts.iter().any(|t| t.contains("%w1") && t.contains("%w1_new")), "{}", Violations(v.clone()));
}

#[test]
fn schedule_out_of_order() {
    let (g, mut p) = planned("ir/models/mlp.step");
    p.schedule.swap(0, 1); // add(%h, %b1) before matmul computes %h
    let v = violations(&g, &p);
    let texts = reported!(v, Violation::NotTopological { .. });
    assert!(texts.iter().any(|t| t.contains("%h")), "{}", Violations(v.clone()));
}

#[test]
fn a_view_off_its_base_buffer() {
    let (g, mut p) = planned("ir/features/views.step");
    let view = g
        .ops
        .iter()
        .find(|op| op.kind.def().view_of().is_some())
        .map(|op| op.outputs[0])
        .expect("views.step has a view");
    let other = (0..p.buffers.len() as u32).map(BufferId).find(|&b| b != p.value_buffer[view]).unwrap();
    p.value_buffer[view] = other;
    let v = violations(&g, &p);
    let texts = reported!(v, Violation::ViewNotInRootBuffer { .. });
    assert!(texts.iter().any(|t| t.contains(&g.value_name(view))), "{}", Violations(v.clone()));
}

#[test]
fn a_wrong_lower_bound() {
    let (g, mut p) = planned("ir/features/attention.step");
    p.lower_bound -= 256;
    let v = violations(&g, &p);
    assert_eq!(reported!(v, Violation::LowerBound { .. }).len(), 1, "{}", Violations(v.clone()));
}

/// Writing over a value through a view: allowed through a reshape (the same bytes in the
/// same order), reported through a transpose (the kernel would read elements it already
/// overwrote). Both plans are the reshape step's, with the output moved onto the input.
#[test]
fn in_place_through_a_reshape_only() {
    let step = |view: &str| {
        let text = format!(
            "step @s(%x: f32[4,4] input) {{
  %h = relu(%x)
  %v = {view}
  %o = add_scalar(%v, value=1.0)
  return %o
}}"
        );
        let graph = parse(&text).unwrap();
        let options = PlanOptions { inplace: false, ..PlanOptions::default() };
        let mut plan = plan(&graph, &options).unwrap();
        check(&graph, &plan).expect("the unplanted plan is valid");
        // %o written over %h's bytes.
        let (o, h) = (plan.value_buffer[value(&graph, "o")], plan.value_buffer[value(&graph, "h")]);
        plan.buffers[o].offset = plan.buffers[h].offset;
        (graph, plan)
    };
    let (g, p) = step("reshape(%h, shape=[16])");
    let overlaps: Vec<Violation> = match check(&g, &p) {
        Ok(()) => vec![],
        Err(Violations(v)) => v.into_iter().filter(|v| matches!(v, Violation::ClobberedRead { .. })).collect(),
    };
    assert!(overlaps.is_empty(), "{}", Violations(overlaps.clone()));
    let (g, p) = step("transpose(%h, perm=[1, 0])");
    let v = violations(&g, &p);
    let clobbers = reported!(v, Violation::ClobberedRead { .. });
    assert!(clobbers.iter().any(|t| t.contains("%o") && t.contains("%h")), "{clobbers:?}");
}
