//! `--print-ir-after=PASS`: the step as IR after a pass, each line annotated with what
//! the pipeline has decided so far.
//!
//! The ops are printed in schedule order (a topological order, so the text parses), each
//! with a trailing comment: its position `t=N`; once buffers exist, each output's buffer
//! (and its offset once offsets exist), bytes and live steps; once in-place reuse ran, the
//! input an output is written over; and its kill points, the values whose bytes are dead
//! after this op (last read here, or never read), leaving out those that must survive the
//! step. Argument lines carry their buffer. Before the schedule pass (the fusion pass's
//! dump) the ops are in program order. A header comment names the pass. Comments are
//! ignored by the parser, so the dump round-trips: `parse(dump)` is the step with its ops
//! in schedule order.
//!
//! Annotations follow what the [`Context`] holds, not which pass made it, so a new pass in
//! [`Pass`] gets a dump without a change here. The step dumped is the context's step as
//! planned: after the remat pass recomputes values, the rewritten step with its clones.

use std::fmt::Write;

use crate::analysis::liveness::lifetimes;
use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::ValueDef;
use crate::ir::print::{Line, print_annotated};
use crate::passes::{Context, Pass};

/// The header comment of a dump.
pub fn header(pass: Pass) -> String {
    format!("// -----// IR Dump After {pass} //----- //")
}

/// The step after `pass`, as `cx` (the pipeline run up to that pass) has it.
pub fn dump(pass: Pass, cx: &Context<'_>) -> String {
    let graph = cx.graph();
    // Before the schedule pass (after fusion), in program order.
    let program: Vec<OpId>;
    let schedule = if cx.schedule().len() == graph.ops.len() {
        cx.schedule()
    } else {
        program = graph.ops.indices().collect();
        &program
    };
    let life = lifetimes(graph, schedule);
    let mut survives: IndexVec<ValueId, bool> =
        graph.values.iter().map(|v| matches!(v.def, ValueDef::Arg(role) if role.persists())).collect();
    for &target in graph.updates.iter().map(|u| &u.target) {
        survives[target] = false; // its new value takes its place
    }
    for v in graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().map(|u| u.value)) {
        survives[life.root[v]] = true;
    }
    let mut kills: Vec<Vec<ValueId>> = vec![Vec::new(); schedule.len()];
    for v in graph.values.indices().filter(|&v| life.is_root(v) && !survives[v]) {
        if let Some(list) = kills.get_mut(life.last[v]) {
            list.push(v);
        }
    }
    let placement = |v: ValueId| -> Option<String> {
        if !life.is_root(v) {
            return Some(format!("{} views {}", graph.value_name(v), graph.value_name(life.root[v])));
        }
        let (buffer, size, first, last, offset) = if let Some(plan) = &cx.plan {
            let id = plan.value_buffer[v];
            let b = &plan.buffers[id];
            (id, b.size, b.first, b.last, Some(b.offset))
        } else {
            let buffers = cx.buffers.as_ref()?;
            let id = buffers.value_buffer[v];
            let b = &buffers.buffers[id];
            (id, b.size, b.first, b.last, None)
        };
        let at = offset.map(|o| format!(" @{o}")).unwrap_or_default();
        Some(format!("{} -> {buffer}{at} ({size} B, steps {first}..={last})", graph.value_name(v)))
    };
    let note = |line: Line| -> Option<String> {
        match line {
            Line::Arg(v) => placement(v),
            Line::Op(op) => {
                let t = life.position[op];
                let mut parts = vec![format!("t={t}")];
                for &v in &graph.ops[op].outputs {
                    parts.extend(placement(v));
                    if let Some(x) = cx.reuse().and_then(|r| r[v]) {
                        parts.push(format!("{} in place over {}", graph.value_name(v), graph.value_name(x)));
                    }
                }
                if let Some(dead) = kills.get(t).filter(|k| !k.is_empty()) {
                    let names: Vec<String> = dead.iter().map(|&v| graph.value_name(v)).collect();
                    parts.push(format!("kills {}", names.join(", ")));
                }
                Some(parts.join(" | "))
            }
        }
    };
    let mut out = header(pass);
    out.push('\n');
    let _ = write!(out, "{}", print_annotated(graph, schedule, &note));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::{PlanOptions, run};

    const STEP: &str = "step @s(\n  %w: f32[4,4] param,\n  %x: f32[2,4] input,\n) {\n  %h = matmul(%x, %w)\n  %a = relu(%h)\n  %w_new = add(%w, %w)\n  update %w <- %w_new\n  return %a\n}\n";

    #[test]
    fn every_pass_dumps_a_step_that_parses_back() {
        let graph = crate::parse(STEP).unwrap();
        for pass in Pass::ALL {
            let options = PlanOptions { stop_after: Some(pass), ..PlanOptions::default() };
            let cx = run(&graph, &options).unwrap();
            let text = dump(pass, &cx);
            assert!(text.starts_with(&header(pass)), "{text}");
            let again = crate::parse(&text).unwrap_or_else(|e| panic!("{pass}: {e:?}\n{text}"));
            assert_eq!(again.ops.len(), graph.ops.len());
            crate::verify(&again).unwrap();
            let relu = text.lines().find(|l| l.contains("= relu(")).unwrap();
            assert!(relu.contains("t=") && relu.contains("kills %h"), "{pass}: {relu}");
            assert_eq!(relu.contains("in place over %h"), pass >= Pass::Inplace, "{pass}: {relu}");
            assert_eq!(relu.contains("-> buf"), pass >= Pass::Buffers, "{pass}: {relu}");
            assert_eq!(relu.contains(" @"), pass >= Pass::Offsets, "{pass}: {relu}");
        }
    }
}
