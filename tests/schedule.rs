//! The memory-aware schedule on the corpus and on Checkmate's graphs.
//!
//! - On every valid `ir/` step: the schedule's lower bound is never above program order's,
//!   the scheduling DAG's peak of an order is exactly the plan's lower bound for it, the
//!   plan checks, and every op that allocates nothing (optimizer updates, views) runs as
//!   soon as it is ready. On every `ir/models` step the lower bound falls.
//! - On Checkmate's `random_layered_n*.json` (read from `../shared/bench/checkmate`
//!   relative to the crate, or from `$MEMPLAN_CHECKMATE_DIR`; never copied into the
//!   project): our order's peak is below both the file's `graph.order` and ids ascending.
//!   Without the folder these tests print why and pass.

use std::path::{Path, PathBuf};

use memplan::solve::Node;
use memplan::solve::order::Effort;
use memplan::passes::schedule::step_dag;
use memplan::passes::{PlanOptions, ScheduleKind};
use memplan::{Graph, check, expand, parse, plan, verify};

/// Every valid step of the corpus, expanded, with its path relative to the crate.
fn corpus() -> Vec<(String, Graph)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["ir/features", "ir/models"] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries.into_iter().filter(|p| p.extension().is_some_and(|e| e == "step")) {
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            let graph = parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
            verify(&graph).unwrap();
            let graph = expand(&graph).unwrap();
            verify(&graph).unwrap();
            files.push((name, graph));
        }
    }
    assert!(files.len() >= 20, "expected the corpus, found {} steps", files.len());
    files
}

#[test]
fn the_memory_schedule_is_never_worse_and_its_peak_is_exact() {
    let mut table = String::new();
    for (file, graph) in corpus() {
        // The DAG model counts no in-place reuse: compare schedules with the pass off.
        let options = |schedule| PlanOptions { schedule, inplace: false, ..PlanOptions::default() };
        let program = plan(&graph, &options(ScheduleKind::Program)).unwrap();
        let memory = plan(&graph, &options(ScheduleKind::Memory)).unwrap();
        for p in [&program, &memory] {
            check(&graph, p).unwrap_or_else(|v| panic!("{file}: {v}"));
        }
        let s = memory.savings;
        assert_eq!(s.program_order, program.lower_bound, "{file}");
        assert_eq!(s.after_schedule, memory.lower_bound, "{file}");
        assert_eq!(program.savings.after_schedule, program.lower_bound, "{file}");
        assert!(memory.lower_bound <= program.lower_bound, "{file}: {} > {}", memory.lower_bound, program.lower_bound);
        if file.starts_with("ir/models") {
            assert!(memory.lower_bound < program.lower_bound, "{file}: no gain ({})", memory.lower_bound);
        }
        // The whole pipeline: in-place reuse only lowers the bound further, and the savings
        // record each step.
        let full = plan(&graph, &PlanOptions::default()).unwrap();
        check(&graph, &full).unwrap_or_else(|v| panic!("{file}: {v}"));
        assert_eq!(full.savings.program_order, program.lower_bound, "{file}");
        assert_eq!(full.savings.after_inplace, full.lower_bound, "{file}");
        assert!(full.lower_bound <= memory.lower_bound, "{file}: in-place raised the bound");
        let program_inplace = plan(&graph, &PlanOptions { schedule: ScheduleKind::Program, ..PlanOptions::default() }).unwrap();
        assert!(full.lower_bound <= program_inplace.lower_bound, "{file}: worse than program order with in-place");
        if file.starts_with("ir/models") {
            assert!(full.lower_bound < program.lower_bound, "{file}: schedule + in-place gained nothing");
        }
        let dag = step_dag(&graph, options(ScheduleKind::Memory).alignment).unwrap();
        for p in [&program, &memory] {
            let order: Vec<Node> = p.schedule.iter().map(|op| op.0).collect();
            assert_eq!(dag.peak(&order), Ok(p.lower_bound), "{file}: the DAG's peak is not the plan's lower bound");
        }
        if memory.schedule != program.schedule {
            assert_free_ops_run_when_ready(&file, &graph, &memory.schedule);
        }
        table.push_str(&format!("{file:40} {:>14} {:>14}\n", program.lower_bound, memory.lower_bound));
    }
    println!("{:40} {:>14} {:>14}\n{table}", "step", "program order", "memory");
}

/// Every op whose outputs take no new bytes (views, and optimizer updates whose outputs
/// land in their params and state) runs right after the last op it waits for, with only
/// other such ops in between: an optimizer update runs as soon as its gradient is final.
fn assert_free_ops_run_when_ready(file: &str, graph: &Graph, schedule: &[memplan::OpId]) {
    let dag = step_dag(graph, 256).unwrap();
    let alloc = |op: memplan::OpId| -> u64 { dag.values().iter().filter(|v| v.def == Some(op.0)).map(|v| v.size).sum() };
    let mut position = vec![0usize; schedule.len()];
    for (t, op) in schedule.iter().enumerate() {
        position[op.0 as usize] = t;
    }
    let mut waits: Vec<Vec<usize>> = vec![Vec::new(); schedule.len()];
    for (op, o) in graph.ops.iter_enumerated() {
        waits[op.0 as usize].extend(o.inputs.iter().filter_map(|&i| graph.def_op(i)).map(|d| position[d.0 as usize]));
    }
    // The update rule's edges: readers of an updated param before the op writing its new value.
    let life = memplan::analysis::liveness::lifetimes(graph, schedule);
    for update in &graph.updates {
        let writer = graph.def_op(update.value).unwrap();
        for (op, o) in graph.ops.iter_enumerated() {
            if op != writer && o.inputs.iter().any(|&i| life.root[i] == update.target) {
                waits[writer.0 as usize].push(position[op.0 as usize]);
            }
        }
    }
    for (t, &op) in schedule.iter().enumerate() {
        if alloc(op) != 0 {
            continue;
        }
        let ready_at = waits[op.0 as usize].iter().map(|&p| p + 1).max().unwrap_or(0);
        for &between in &schedule[ready_at..t] {
            assert_eq!(
                alloc(between),
                0,
                "{file}: `{}` waits for `{}` although it was ready at position {ready_at}",
                graph.describe_op(op),
                graph.describe_op(between)
            );
        }
    }
}

/// The Checkmate folder, or `None` (with the reason printed) when it is absent.
fn checkmate_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("MEMPLAN_CHECKMATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench/checkmate"));
    if dir.join("random_layered_n100.json").is_file() {
        Some(dir)
    } else {
        println!("skipped: {} has no Checkmate graphs (set MEMPLAN_CHECKMATE_DIR to the folder)", dir.display());
        None
    }
}

#[test]
fn random_layered_graphs_beat_both_reference_orders() {
    let Some(dir) = checkmate_dir() else { return };
    for n in [100, 250, 500, 1000] {
        let path = dir.join(format!("random_layered_n{n}.json"));
        let graph = memplan::formats::checkmate::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let dag = &graph.dag;
        let reference = graph.reference.as_ref().expect("random_layered files have graph.order");
        let ids = dag.smallest_first();
        let (reference_peak, ids_peak) = (dag.peak(reference).unwrap(), dag.peak(&ids).unwrap());
        let started = std::time::Instant::now();
        // No baselines: the search alone must beat both.
        let found = dag.best_order(&[], Effort::for_nodes(dag.nodes()));
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(dag.peak(&found.order), Ok(found.peak));
        println!("n{n}: ours {} ({}), graph.order {reference_peak}, ids ascending {ids_peak}, {seconds:.3} s", found.peak, found.by);
        assert!(found.peak < reference_peak && found.peak < ids_peak, "n{n}: {} vs {reference_peak} / {ids_peak}", found.peak);
        // Deterministic.
        assert_eq!(dag.best_order(&[], Effort::for_nodes(dag.nodes())), found);
    }
}

#[test]
fn checkmate_training_graphs_are_never_worse_than_ids_ascending() {
    let Some(dir) = checkmate_dir() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let training: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains("random_layered"))
        .collect();
    assert!(!training.is_empty());
    for path in training {
        let graph = memplan::formats::checkmate::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
        let ids = graph.dag.smallest_first();
        let found = graph.dag.best_order(&[&ids], Effort::for_nodes(graph.dag.nodes()));
        assert!(found.peak <= graph.dag.peak(&ids).unwrap(), "{}", path.display());
        assert!(graph.dag.positions(&found.order).is_ok());
    }
}
