//! What the memory-aware schedule gains on each step given on the command line (default:
//! every `ir/models/*.step`), against program order: the lower bound (the most aligned
//! bytes live at once), the bytes of each class live at the peak, and the most bytes of
//! gradients (class `grad`) and of parameter gradients (values an optimizer reads) live at
//! any one position, with how many parameter gradients that is.
//!
//! ```sh
//! cargo run --release --example schedule_gains [FILE.step ...]
//! ```

use std::path::PathBuf;

use memplan::analysis::classes::{Class, classify};
use memplan::analysis::liveness::lifetimes;
use memplan::ir::ops::OpClass;
use memplan::passes::{PlanOptions, ScheduleKind};
use memplan::{Graph, Plan, ValueId};

fn main() {
    let mut files: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/ir/models");
        files = std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
        files.sort();
    }
    for file in files {
        if let Err(e) = report(&file) {
            eprintln!("{}: {e}", file.display());
        }
    }
}

fn report(file: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let graph = memplan::parse(&text).map_err(|e| format!("{e:?}"))?;
    memplan::verify(&graph).map_err(|e| format!("{e:?}"))?;
    let graph = memplan::expand(&graph).map_err(|e| format!("{e:?}"))?;
    // Which of the search's candidates the schedule pass keeps (as `schedule::schedule` does).
    let found = memplan::passes::schedule::step_dag(&graph, memplan::plan::DEFAULT_ALIGNMENT).map(|dag| {
        let program: Vec<u32> = (0..graph.ops.len() as u32).collect();
        dag.best_order(&[&program], memplan::solve::order::Effort::for_nodes(graph.ops.len())).by
    });
    println!(
        "{} (@{}, {} ops; the memory order is {})",
        file.display(),
        graph.name,
        graph.ops.len(),
        found.map_or("program order".into(), |by| by.replace("baseline 0", "program order"))
    );
    for kind in [ScheduleKind::Program, ScheduleKind::Memory] {
        let started = std::time::Instant::now();
        let options = PlanOptions { schedule: kind, ..PlanOptions::default() };
        let plan = memplan::plan(&graph, &options).map_err(|e| e.to_string())?;
        let seconds = started.elapsed().as_secs_f64();
        memplan::check(&graph, &plan).map_err(|v| v.to_string())?;
        let g = gradients(&graph, &plan);
        println!(
            "  {:7}  lower bound {:>12}  plan {:6.3} s  at peak: {}  most grad live {:>12}  most param grads live {:>12} ({} of {})",
            kind.name(),
            plan.lower_bound,
            seconds,
            g.at_peak.iter().map(|(c, b)| format!("{}={b}", c.name())).collect::<Vec<_>>().join(" "),
            g.most_grad,
            g.most_param_grad,
            g.most_param_grads,
            g.param_grads
        );
    }
    Ok(())
}

struct Gradients {
    /// Bytes of each class live at the peak position.
    at_peak: Vec<(Class, u64)>,
    most_grad: u64,
    most_param_grad: u64,
    /// How many parameter gradients are live at the position of `most_param_grad`.
    most_param_grads: usize,
    param_grads: usize,
}

fn gradients(graph: &Graph, plan: &Plan) -> Gradients {
    let classes = classify(graph);
    let life = lifetimes(graph, &plan.schedule);
    let bytes = |v: ValueId| graph.values[v].ty.bytes().unwrap_or(0);
    // Parameter gradients: the `g` input (index 1) of every optimizer op.
    let mut param_grads: Vec<ValueId> = graph
        .ops
        .iter()
        .filter(|op| op.kind.def().class == OpClass::Optimizer)
        .filter_map(|op| op.inputs.get(1).map(|&g| life.root[g]))
        .collect();
    param_grads.sort();
    param_grads.dedup();
    let n = plan.schedule.len();
    let live_at = |v: ValueId, t: usize| life.is_root(v) && life.def[v] <= t && t <= life.last[v];
    let (mut most_grad, mut most_param_grad, mut most_param_grads) = (0, 0, 0);
    for t in 0..n {
        let grad: u64 = graph.values.indices().filter(|&v| classes[v] == Class::Grad && live_at(v, t)).map(bytes).sum();
        most_grad = most_grad.max(grad);
        let live: Vec<ValueId> = param_grads.iter().copied().filter(|&v| live_at(v, t)).collect();
        let total: u64 = live.iter().map(|&v| bytes(v)).sum();
        if total > most_param_grad {
            (most_param_grad, most_param_grads) = (total, live.len());
        }
    }
    let peak = memplan::report::Report::new(graph, plan).peak.position.unwrap_or(0);
    let at_peak = Class::ALL
        .iter()
        .map(|&c| (c, graph.values.indices().filter(|&v| classes[v] == c && live_at(v, peak)).map(bytes).sum()))
        .collect();
    Gradients { at_peak, most_grad, most_param_grad, most_param_grads, param_grads: param_grads.len() }
}
