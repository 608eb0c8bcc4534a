//! The independent plan checker on hand-made graphs and plans: valid plans (with in-place
//! reuse and byte reuse across buffers) are accepted; each planted fault is reported as its
//! own violation kind, with a message naming the op and the values; hostile plans (ids out
//! of range, offsets near `u64::MAX`, wrong lengths, JSON edited by hand) never panic.
//!
//! Ops are `add` only, so every lifetime can be worked out by hand in the comments.
//! `tests/checker_planted.rs` plants faults in plans the planner made for the corpus.

use memplan::checker::{Need, Violation, Violations, check};
use memplan::index::{BufferId, IndexVec, OpId, ValueId};
use memplan::ir::graph::{Graph, Return, Role, Span, Update};
use memplan::ir::ops::{Attrs, OpKind};
use memplan::ir::types::{DType, TensorType};
use memplan::plan::{Buffer, Plan, SCHEMA_VERSION, Savings};

/// f32[64]: 256 bytes, one alignment unit.
fn vec64() -> TensorType {
    TensorType::new(DType::F32, vec![64])
}

fn add(g: &mut Graph, a: ValueId, b: ValueId, out: &str) -> (OpId, ValueId) {
    let op = g.add_op(OpKind::Add, vec![a, b], Attrs::defaults(OpKind::Add).unwrap(), vec![(out.into(), vec64())]);
    (op, g.ops[op].outputs[0])
}

fn buffer(offset: u64, first: usize, last: usize, values: &[ValueId]) -> Buffer {
    Buffer { offset, size: 256, first, last, values: values.to_vec() }
}

fn plan(
    name: &str,
    schedule: &[OpId],
    buffers: Vec<Buffer>,
    value_buffer: &[u32],
    arena_bytes: u64,
    lower_bound: u64,
) -> Plan {
    Plan {
        schema_version: SCHEMA_VERSION,
        step: name.into(),
        alignment: 256,
        schedule: schedule.to_vec(),
        buffers: IndexVec::from_raw(buffers),
        value_buffer: value_buffer.iter().map(|&b| BufferId(b)).collect(),
        arena_bytes,
        lower_bound,
        savings: Savings { program_order: lower_bound, after_schedule: lower_bound, after_inplace: lower_bound, arena: arena_bytes },
        remat: None,
    }
}

/// ```text
/// step @step(%x: f32[64] input, %w: f32[64] param) {
///   %a = add(%x, %w)          // op0, position 0
///   %b = add(%a, %a)          // op1, position 1
///   %w_new = add(%w, %b)      // op2, position 2
///   update %w <- %w_new
///   return %b
/// }
/// ```
/// Lifetimes: %x [0,0], %w [0,2], %a [0,1], %b [1,2], %w_new [2,2].
struct Step {
    g: Graph,
    x: ValueId,
    w: ValueId,
    a: ValueId,
    b: ValueId,
    w_new: ValueId,
    ops: [OpId; 3],
}

fn step() -> Step {
    let mut g = Graph::new("step");
    let x = g.add_arg("x", vec64(), Role::Input);
    let w = g.add_arg("w", vec64(), Role::Param);
    let (op0, a) = add(&mut g, x, w, "a");
    let (op1, b) = add(&mut g, a, a, "b");
    let (op2, w_new) = add(&mut g, w, b, "w_new");
    g.updates.push(Update { target: w, value: w_new, span: Span::NONE });
    g.returns.push(Return { value: b, span: Span::NONE });
    Step { g, x, w, a, b, w_new, ops: [op0, op1, op2] }
}

/// In place all the way: %x → %a → %b share buf0 (each written over the previous by the
/// op reading it as input 0), %w → %w_new share buf1. Arena 512 = lower bound.
fn inplace_plan(s: &Step) -> Plan {
    plan(
        "step",
        &s.ops,
        vec![buffer(0, 0, 2, &[s.x, s.a, s.b]), buffer(256, 0, 2, &[s.w, s.w_new])],
        &[0, 1, 0, 0, 1],
        512,
        512,
    )
}

/// One buffer per value except the update; %b reuses %x's bytes (dead at position 0).
/// Live bytes: 768 at positions 0 and 1.
fn separate_plan(s: &Step) -> Plan {
    plan(
        "step",
        &s.ops,
        vec![
            buffer(0, 0, 0, &[s.x]),
            buffer(256, 0, 2, &[s.w, s.w_new]),
            buffer(512, 0, 1, &[s.a]),
            buffer(0, 1, 2, &[s.b]),
        ],
        &[0, 1, 2, 3, 1],
        768,
        768,
    )
}

fn violations(g: &Graph, p: &Plan) -> Vec<Violation> {
    match check(g, p) {
        Ok(()) => panic!("the checker accepted a faulty plan"),
        Err(Violations(v)) => v,
    }
}

/// The only violation, after checking its message names everything in `words`.
fn only(g: &Graph, p: &Plan, words: &[&str]) -> Violation {
    let v = violations(g, p);
    assert_eq!(v.len(), 1, "expected one violation, got:\n{}", Violations(v.clone()));
    let text = v[0].to_string();
    for w in words {
        assert!(text.contains(w), "message {text:?} lacks {w:?}");
    }
    v.into_iter().next().unwrap()
}

#[test]
fn accepts_inplace_plan() {
    let s = step();
    assert_eq!(check(&s.g, &inplace_plan(&s)), Ok(()));
}

#[test]
fn accepts_plan_reusing_dead_bytes_across_buffers() {
    let s = step();
    assert_eq!(check(&s.g, &separate_plan(&s)), Ok(()));
}

#[test]
fn accepts_long_inplace_chain_quickly() {
    // 20 000 adds, each in place over the previous value: one buffer of 20 001 values.
    let mut g = Graph::new("chain");
    let mut v = g.add_arg("v0", vec64(), Role::Input);
    let mut values = vec![v];
    for i in 1..=20_000 {
        v = add(&mut g, v, v, &format!("v{i}")).1;
        values.push(v);
    }
    g.returns.push(Return { value: v, span: Span::NONE });
    let schedule: Vec<OpId> = g.ops.indices().collect();
    let n = schedule.len();
    let p = plan("chain", &schedule, vec![buffer(0, 0, n - 1, &values)], &vec![0; values.len()], 256, 256);
    assert_eq!(check(&g, &p), Ok(()));
}

#[test]
fn overlapping_live_buffers() {
    // %b's own buffer moved onto %a's bytes. Value by value it is a legal in-place write,
    // but two buffers live at position 1 share bytes: in-place reuse must stay in one buffer.
    let s = step();
    let mut p = separate_plan(&s);
    p.buffers[BufferId(3)].offset = 512;
    match only(&s.g, &p, &["buf2", "buf3", "%a", "%b", "[512, 768)"]) {
        Violation::OverlappingBuffers { a, b, start, end, .. } => {
            assert_eq!((a, b, start, end), (BufferId(2), BufferId(3), 512, 768));
        }
        other => panic!("wrong violation: {other}"),
    }
}

/// ```text
/// step @clobber(%x: f32[64] input, %p: f32[64] param) {
///   %a = add(%x, %p)     // op0
///   %b = add(%a, %a)     // op1
///   %c = add(%a, %b)     // op2: reads %a after %b
///   return %c
/// }
/// ```
fn clobber() -> (Graph, [ValueId; 5], [OpId; 3]) {
    let mut g = Graph::new("clobber");
    let x = g.add_arg("x", vec64(), Role::Input);
    let p = g.add_arg("p", vec64(), Role::Param);
    let (op0, a) = add(&mut g, x, p, "a");
    let (op1, b) = add(&mut g, a, a, "b");
    let (op2, c) = add(&mut g, a, b, "c");
    g.returns.push(Return { value: c, span: Span::NONE });
    (g, [x, p, a, b, c], [op0, op1, op2])
}

#[test]
fn read_of_overwritten_value() {
    let (g, [x, p, a, b, c], ops) = clobber();
    // %b written over %a at position 1, but op2 still reads %a at position 2.
    let plan = plan(
        "clobber",
        &ops,
        vec![buffer(0, 0, 0, &[x]), buffer(256, 0, 2, &[a, b]), buffer(0, 2, 2, &[c]), buffer(512, 0, 2, &[p])],
        &[0, 3, 1, 1, 2],
        768,
        768,
    );
    let v = only(&g, &plan, &["%b", "%a", "op1", "`%b = add(%a, %a)`", "op2", "`%c = add(%a, %b)`", "[256, 512)"]);
    match v {
        Violation::ClobberedRead { writer, written, overwritten, position, start, end, need, .. } => {
            assert_eq!((writer, written, overwritten, position, start, end), (Some(ops[1]), b, a, 1, 256, 512));
            assert!(matches!(need, Need::Read { op, position: 2, .. } if op == ops[2]));
        }
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn overwritten_param_must_survive_the_step() {
    let (g, [x, p, a, b, c], ops) = clobber();
    // %c written over %p, a param that is not updated: it must survive the step.
    let plan = plan(
        "clobber",
        &ops,
        vec![buffer(0, 0, 0, &[x]), buffer(256, 0, 2, &[a]), buffer(0, 1, 2, &[b]), buffer(512, 0, 2, &[p, c])],
        &[0, 3, 1, 2, 3],
        768,
        768,
    );
    let v = only(&g, &plan, &["%c", "%p", "op2", "must survive the step"]);
    match v {
        Violation::ClobberedRead { written, overwritten, need: Need::Survives(_), .. } => {
            assert_eq!((written, overwritten), (c, p));
        }
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn misaligned_offset() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.buffers[BufferId(1)].offset = 300;
    p.arena_bytes = 1024;
    match only(&s.g, &p, &["buf1", "%w", "300", "256"]) {
        Violation::Misaligned { buffer, offset, alignment, .. } => {
            assert_eq!((buffer, offset, alignment), (BufferId(1), 300, 256));
        }
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn arena_too_small() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.arena_bytes = 500;
    match only(&s.g, &p, &["buf1", "%w", "%w_new", "[256, 512)", "500"]) {
        Violation::PastArenaEnd { buffer, end, arena_bytes, .. } => {
            assert_eq!((buffer, end, arena_bytes), (BufferId(1), 512, 500));
        }
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn update_not_landing_in_place() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.buffers[BufferId(1)].values = vec![s.w];
    p.buffers.push(buffer(512, 2, 2, &[s.w_new]));
    p.value_buffer[s.w_new] = BufferId(2);
    p.arena_bytes = 768;
    p.lower_bound = 768;
    match only(&s.g, &p, &["update %w <- %w_new", "buf2", "buf1"]) {
        Violation::UpdateNotInPlace { target, value, target_buffer, value_buffer, .. } => {
            assert_eq!((target, value, target_buffer, value_buffer), (s.w, s.w_new, BufferId(1), BufferId(2)));
        }
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn schedule_not_topological() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.schedule = vec![s.ops[1], s.ops[0], s.ops[2]];
    match only(&s.g, &p, &["op1", "`%b = add(%a, %a)`", "%a", "op0", "`%a = add(%x, %w)`"]) {
        Violation::NotTopological { op, position, input, def_op, def_position, .. } => {
            assert_eq!((op, position, input, def_op, def_position), (s.ops[1], 0, s.a, s.ops[0], 1));
        }
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn op_missing_from_schedule() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.schedule.pop();
    match only(&s.g, &p, &["op2", "`%w_new = add(%w, %b)`", "not in the schedule"]) {
        Violation::OpNotScheduled { op, .. } => assert_eq!(op, s.ops[2]),
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn op_scheduled_twice() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.schedule.insert(2, s.ops[1]);
    match only(&s.g, &p, &["op1", "`%b = add(%a, %a)`", "twice"]) {
        Violation::OpScheduledTwice { op, first, second, .. } => assert_eq!((op, first, second), (s.ops[1], 1, 2)),
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn value_bigger_than_its_buffer() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.buffers[BufferId(1)].size = 128;
    let v = violations(&s.g, &p);
    let too_big: Vec<ValueId> = v
        .iter()
        .filter_map(|v| match v {
            Violation::ValueLargerThanBuffer { value, bytes: 256, size: 128, buffer: BufferId(1), .. } => Some(*value),
            _ => None,
        })
        .collect();
    assert_eq!(too_big, vec![s.w, s.w_new], "{}", Violations(v.clone()));
    assert_eq!(v.len(), 2, "{}", Violations(v.clone()));
    assert!(v[0].to_string().contains("%w needs 256 bytes"));
}

#[test]
fn buffer_range_missing_a_value() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.buffers[BufferId(0)].last = 1;
    match only(&s.g, &p, &["buf0", "%b", "[1, 2]"]) {
        Violation::BufferRangeMissesValue { buffer, value, def, value_last, .. } => {
            assert_eq!((buffer, value, def, value_last), (BufferId(0), s.b, 1, 2));
        }
        other => panic!("wrong violation: {other}"),
    }
}

#[test]
fn buffer_values_list_disagrees() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.buffers[BufferId(0)].values = vec![s.x, s.a, s.a, s.w];
    let v = violations(&s.g, &p);
    assert!(v.contains(&Violation::BufferListsValueTwice { buffer: BufferId(0), value: s.a, value_name: "%a".into() }));
    assert!(v.contains(&Violation::BufferListsUnmapped {
        buffer: BufferId(0),
        value: s.w,
        value_name: "%w".into(),
        mapped_to: BufferId(1),
    }));
    assert!(v.contains(&Violation::BufferOmitsValue { buffer: BufferId(0), value: s.b, value_name: "%b".into() }));
    assert_eq!(v.len(), 3, "{}", Violations(v.clone()));
}

#[test]
fn wrong_lower_bound() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.lower_bound = 1024;
    assert_eq!(only(&s.g, &p, &["1024", "512"]), Violation::LowerBound { claimed: 1024, recomputed: 512 });
}

#[test]
fn ids_out_of_range_do_not_panic() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.schedule.insert(1, OpId(99));
    p.value_buffer[s.a] = BufferId(77);
    p.buffers[BufferId(0)].values.push(ValueId(1000));
    p.buffers[BufferId(1)].offset = u64::MAX - 255; // a multiple of 256; the end overflows u64
    let v = violations(&s.g, &p);
    let has = |f: &dyn Fn(&Violation) -> bool| v.iter().any(f);
    assert!(has(&|v| matches!(v, Violation::OpIdOutOfRange { position: 1, op: OpId(99), ops: 3 })));
    assert!(has(&|v| matches!(v, Violation::BufferIdOutOfRange { buffer: BufferId(77), buffers: 2, .. })));
    assert!(has(&|v| matches!(v, Violation::ListedValueOutOfRange { value: ValueId(1000), .. })));
    assert!(has(&|v| matches!(v, Violation::PastArenaEnd { buffer: BufferId(1), end, .. } if *end == 1u128 << 64)));
    assert!(v.iter().any(|v| v.to_string().contains("%a maps to buf77")));
}

#[test]
fn wrong_lengths_and_alignments_do_not_panic() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.value_buffer = IndexVec::from_raw(vec![BufferId(0); 2]);
    p.alignment = 0;
    let v = violations(&s.g, &p);
    assert!(v.contains(&Violation::ValueBufferLength { found: 2, expected: 5 }));
    assert!(v.contains(&Violation::AlignmentNotPowerOfTwo { alignment: 0 }));
    p.alignment = 3;
    p.schedule.clear();
    p.buffers = IndexVec::new();
    let v = violations(&s.g, &p);
    assert!(v.contains(&Violation::AlignmentNotPowerOfTwo { alignment: 3 }));
    assert_eq!(v.iter().filter(|v| matches!(v, Violation::OpNotScheduled { .. })).count(), 3);
}

#[test]
fn hostile_json_does_not_panic() {
    let s = step();
    let mut json = serde_json::to_value(inplace_plan(&s)).unwrap();
    json["schedule"] = serde_json::json!([4294967295u32, 0, 0]);
    json["value_buffer"] = serde_json::json!([4294967295u32, 1, 0, 0, 1, 0, 0]);
    json["buffers"][0]["offset"] = serde_json::json!(u64::MAX);
    json["buffers"][0]["size"] = serde_json::json!(u64::MAX);
    json["buffers"][1]["first"] = serde_json::json!(usize::MAX);
    json["buffers"][1]["values"] = serde_json::json!([4294967295u32, 1, 1]);
    json["arena_bytes"] = serde_json::json!(0);
    let p: Plan = serde_json::from_value(json).unwrap();
    let v = violations(&s.g, &p);
    assert!(v.len() >= 5, "{}", Violations(v.clone()));
    assert!(v.iter().any(|v| matches!(v, Violation::ValueBufferLength { found: 7, expected: 5 })));
}

#[test]
fn several_faults_reported_together() {
    let s = step();
    let mut p = inplace_plan(&s);
    p.schema_version = 99;
    p.buffers[BufferId(1)].offset = 300; // misaligned, and past the 500-byte arena
    p.arena_bytes = 500;
    p.lower_bound = 7;
    p.value_buffer[s.w_new] = BufferId(0); // not in %w's buffer; over the returned %b
    let v = violations(&s.g, &p);
    let text = Violations(v.clone()).to_string();
    assert_eq!(text.lines().count(), v.len());
    let kinds = [
        v.iter().any(|v| matches!(v, Violation::SchemaVersion { found: 99, .. })),
        v.iter().any(|v| matches!(v, Violation::Misaligned { offset: 300, .. })),
        v.iter().any(|v| matches!(v, Violation::PastArenaEnd { end: 556, .. })),
        v.iter().any(|v| matches!(v, Violation::LowerBound { claimed: 7, recomputed: 512 })),
        v.iter().any(|v| matches!(v, Violation::UpdateNotInPlace { .. })),
        v.iter().any(|v| matches!(v, Violation::BufferOmitsValue { .. })),
        v.iter().any(|v| matches!(v, Violation::BufferListsUnmapped { .. })),
        v.iter().any(|v| {
            matches!(v,
            Violation::ClobberedRead { written, overwritten, need: Need::Survives(_), .. }
                if *written == s.w_new && *overwritten == s.b)
        }),
    ];
    assert_eq!(kinds, [true; 8], "{text}");
    assert!(
        text.contains("%w_new, written by op2 `%w_new = add(%w, %b)` at position 2, clobbers bytes [0, 256) of %b")
    );
}

#[test]
fn inplace_write_over_a_returned_value_is_a_clobber() {
    // op2 reads %b as input 1 and `add` may write over input 1, at %b's last read; but %b
    // is returned, so it must survive the step and the in-place exception does not apply.
    let s = step();
    let mut p = inplace_plan(&s);
    p.buffers[BufferId(0)].values.push(s.w_new);
    p.buffers[BufferId(1)].values.pop();
    p.value_buffer[s.w_new] = BufferId(0);
    let v = violations(&s.g, &p);
    assert!(
        v.iter().any(|v| matches!(v,
            Violation::ClobberedRead { written, overwritten, need: Need::Survives("it is returned"), .. }
                if *written == s.w_new && *overwritten == s.b)),
        "{}",
        Violations(v.clone())
    );
    assert!(v.iter().any(|v| matches!(v, Violation::UpdateNotInPlace { .. })));
    assert_eq!(v.len(), 2, "{}", Violations(v.clone()));
}
