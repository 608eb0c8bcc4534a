//! The plan as Chrome trace events (JSON object format), for Perfetto (ui.perfetto.dev)
//! and chrome://tracing.
//!
//! Time is the schedule: `ts` is the step (the viewers show it as microseconds). Process
//! 1, "schedule", has the ops on one track (one complete `X` event per op), the counter
//! "live bytes" (`C` events: the aligned bytes of live buffers at each step, whose
//! maximum is the lower bound), the counter "live bytes by class" (the same bytes split by
//! the class of the value holding each buffer, one series per class: a stacked memory
//! timeline, like a profiler's) and an instant `i` event at the peak. Processes 2 to 7 hold
//! the buffers of each class (param, input, state, grad, activation, temp): one `X` event
//! per buffer, from its first step for `last - first + 1` steps, on lanes (threads) packed
//! so that events on one lane never overlap, which both viewers need. `args` carry the
//! buffer's offset, bytes, values and source line. `otherData` names the step and its
//! figures. docs/REPORTS.md lists every field.
//!
//! Output is deterministic: one event per line, in the order above, keys sorted.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use serde_json::{Value, json};

use crate::analysis::classes::Class;
use crate::analysis::liveness::lifetimes;
use crate::index::{IndexVec, ValueId};
use crate::plan::align_up;
use crate::report::{Report, Subject, live_bytes, value_classes};

/// The pid of the schedule process; class `i` of `Class::ALL` is pid `2 + i`.
pub const SCHEDULE_PID: u32 = 1;

/// The trace of `subject`'s plan (`report` is `Report::new` of it).
pub fn render(subject: &Subject, report: &Report) -> String {
    let (graph, plan) = (&subject.graph, &subject.plan);
    let mut events: Vec<Value> = Vec::new();
    let meta = |pid: u32, tid: Option<u32>, name: &str, args: Value| {
        let mut event = json!({"ph": "M", "pid": pid, "name": name, "args": args});
        if let Some(tid) = tid {
            event["tid"] = json!(tid);
        }
        event
    };
    events.push(meta(SCHEDULE_PID, None, "process_name", json!({"name": format!("schedule of @{}", graph.name)})));
    events.push(meta(SCHEDULE_PID, None, "process_sort_index", json!({"sort_index": 0})));
    events.push(meta(SCHEDULE_PID, Some(1), "thread_name", json!({"name": "ops"})));
    for (t, &op) in plan.schedule.iter().enumerate() {
        let kind = graph.ops[op].kind.name();
        let outputs: Vec<String> = graph.ops[op].outputs.iter().map(|&v| graph.value_name(v)).collect();
        events.push(json!({
            "ph": "X", "pid": SCHEDULE_PID, "tid": 1, "ts": t, "dur": 1, "cat": "op",
            "name": format!("{} = {kind}", outputs.join(", ")),
            "args": {"step": t, "op": graph.describe_op(op), "loc": subject.locs.op(graph, op)},
        }));
    }
    let live = live_bytes(plan);
    for (t, &bytes) in live.iter().enumerate() {
        events.push(json!({"ph": "C", "pid": SCHEDULE_PID, "ts": t, "name": "live bytes", "args": {"bytes": bytes}}));
    }
    events.push(json!({"ph": "C", "pid": SCHEDULE_PID, "ts": live.len(), "name": "live bytes", "args": {"bytes": 0}}));
    let classes = value_classes(graph, plan);
    let by_class = live_bytes_by_class(subject, &classes);
    for (t, bytes) in by_class.iter().chain(std::iter::once(&[0; 6])).enumerate() {
        let args: serde_json::Map<String, Value> = Class::ALL.iter().zip(bytes).map(|(c, &b)| (c.name().to_string(), json!(b))).collect();
        events.push(json!({"ph": "C", "pid": SCHEDULE_PID, "ts": t, "name": "live bytes by class", "args": args}));
    }
    if let Some(t) = report.peak.position {
        events.push(json!({
            "ph": "i", "s": "g", "pid": SCHEDULE_PID, "tid": 1, "ts": t, "name": "peak",
            "args": {"bytes": report.peak.bytes, "op": report.peak.op, "loc": subject.locs.op(graph, plan.schedule[t])},
        }));
    }

    for (i, class) in Class::ALL.iter().enumerate() {
        let pid = class_pid(i);
        let members: Vec<usize> = (0..report.buffers.len()).filter(|&b| report.buffers[b].class == *class).collect();
        events.push(meta(pid, None, "process_name", json!({"name": format!("{class} buffers")})));
        events.push(meta(pid, None, "process_sort_index", json!({"sort_index": pid})));
        let lanes = pack_lanes(members.iter().map(|&b| (plan.buffers.as_slice()[b].first, plan.buffers.as_slice()[b].last)));
        let lane_count = lanes.iter().max().map_or(0, |&l| l + 1);
        for lane in 0..lane_count {
            events.push(meta(pid, Some(lane + 1), "thread_name", json!({"name": format!("{class} lane {}", lane + 1)})));
        }
        for (&b, &lane) in members.iter().zip(&lanes) {
            let (row, buffer) = (&report.buffers[b], &plan.buffers.as_slice()[b]);
            let first_value = buffer.values.first().map(|&v| graph.value_name(v)).unwrap_or_default();
            let name = match buffer.values.len() {
                0 | 1 => first_value,
                n => format!("{first_value} (+{} in place)", n - 1),
            };
            events.push(json!({
                "ph": "X", "pid": pid, "tid": lane + 1, "ts": buffer.first,
                "dur": buffer.last.saturating_sub(buffer.first) + 1, "cat": class.name(), "name": name,
                "args": {
                    "buffer": row.buffer, "offset": buffer.offset, "bytes": buffer.size,
                    "aligned_bytes": align_up(buffer.size, plan.alignment).unwrap_or(u64::MAX),
                    "first": buffer.first, "last": buffer.last, "values": row.values,
                    "loc": buffer.values.first().and_then(|&v| subject.locs.value(v)),
                },
            }));
        }
    }
    let other = json!({
        "generator": "memplan", "step": graph.name, "source": subject.source,
        "arena_bytes": plan.arena_bytes, "lower_bound": plan.lower_bound, "alignment": plan.alignment,
        "time_unit": "1 us on the viewer's axis = 1 schedule step",
    });
    let mut out = String::from("{\"traceEvents\": [\n");
    for (i, event) in events.iter().enumerate() {
        out.push_str(&event.to_string());
        out.push_str(if i + 1 < events.len() { ",\n" } else { "\n" });
    }
    out.push_str("],\n\"otherData\": ");
    out.push_str(&other.to_string());
    out.push_str("\n}\n");
    out
}

/// The aligned bytes of the buffers live at each schedule position, by the class of the
/// value holding each there (the value written last, as in `live_at`; a buffer passes from
/// one value to the next in place at the next one's position), in `Class::ALL` order. Each
/// step's sum is [`live_bytes`]'s.
pub fn live_bytes_by_class(subject: &Subject, classes: &IndexVec<ValueId, Class>) -> Vec<[u64; 6]> {
    let (graph, plan) = (&subject.graph, &subject.plan);
    let life = lifetimes(graph, &plan.schedule);
    let n = plan.schedule.len();
    let mut delta = vec![[0i128; 6]; n + 1];
    for b in &plan.buffers {
        let size = i128::from(align_up(b.size, plan.alignment).unwrap_or(u64::MAX));
        for (i, &v) in b.values.iter().enumerate() {
            let start = if i == 0 { b.first } else { life.def[v] };
            let end = b.values.get(i + 1).map_or(b.last.saturating_add(1), |&next| life.def[next]);
            if start < end {
                let class = Class::ALL.iter().position(|&c| c == classes[v]).expect("every class is in ALL");
                delta[start.min(n)][class] += size;
                delta[end.min(n)][class] -= size;
            }
        }
    }
    let mut live = [0i128; 6];
    delta[..n]
        .iter()
        .map(|d| {
            for (x, dx) in live.iter_mut().zip(d) {
                *x += dx;
            }
            live.map(|x| u64::try_from(x).unwrap_or(u64::MAX))
        })
        .collect()
}

/// The pid of the `i`-th class of `Class::ALL`.
pub fn class_pid(i: usize) -> u32 {
    SCHEDULE_PID + 1 + i as u32
}

/// A lane for each inclusive interval, the lowest free one, so that intervals sharing a
/// lane never overlap; as few lanes as the most intervals live at once.
pub fn pack_lanes(intervals: impl Iterator<Item = (usize, usize)>) -> Vec<u32> {
    let intervals: Vec<(usize, usize)> = intervals.collect();
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| (intervals[i].0, i));
    let mut lanes = vec![0u32; intervals.len()];
    let mut busy: BinaryHeap<Reverse<(usize, u32)>> = BinaryHeap::new(); // (last, lane)
    let mut free: BTreeSet<u32> = BTreeSet::new();
    let mut next = 0u32;
    for i in order {
        let (first, last) = intervals[i];
        while let Some(&Reverse((end, lane))) = busy.peek()
            && end < first
        {
            busy.pop();
            free.insert(lane);
        }
        let lane = free.pop_first().unwrap_or_else(|| {
            next += 1;
            next - 1
        });
        lanes[i] = lane;
        busy.push(Reverse((last, lane)));
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::pack_lanes;

    #[test]
    fn lanes_never_hold_overlapping_intervals() {
        let intervals = [(0, 4), (1, 2), (3, 5), (5, 6), (0, 0), (1, 1)];
        let lanes = pack_lanes(intervals.iter().copied());
        assert_eq!(lanes, vec![0, 1, 1, 0, 1, 2]);
        for i in 0..intervals.len() {
            for j in 0..i {
                let overlap = intervals[i].0 <= intervals[j].1 && intervals[j].0 <= intervals[i].1;
                assert!(!(overlap && lanes[i] == lanes[j]), "{i} and {j} share lane {}", lanes[i]);
            }
        }
    }
}
