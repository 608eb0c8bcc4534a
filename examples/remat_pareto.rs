//! The Pareto table of rematerialisation: for each step and each `--checkpoint` strategy,
//! budgets from 1.0x down to 0.3x of the arena without recomputation, and what the planner
//! reaches: the arena, the ops recomputed, the extra compute (the op table's FLOPs, in % of
//! one step) — or, where a budget cannot be met, the smallest arena it reached. Every plan
//! is checked by the independent checker. Default steps: ir/models gpt2, resnet18, vgg16.
//! Beside the shipped strategies, `drop-and-recompute` is the crude baseline of the tests
//! (tests/support/drop_and_recompute.rs; it ignores cost): a figure to beat.
//!
//! ```sh
//! cargo run --release --example remat_pareto [FILE.step ...]
//! ```
//!
//! Prints one Markdown table per step (results go to benches/BENCHMARKS.md, with the
//! command). Planning times are wall-clock and vary with the machine.

use std::path::PathBuf;
use std::time::Instant;

use memplan::passes::{Budget, PlanError, PlanOptions, plan_step, plan_with_strategy};
use memplan::solve::remat::Strategy;

#[path = "../tests/support/drop_and_recompute.rs"]
mod baseline;

const FRACTIONS: [f64; 8] = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3];

fn main() {
    let mut files: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/ir/models"));
        files = ["gpt2.step", "resnet18.step", "vgg16.step"].iter().map(|f| dir.join(f)).collect();
    }
    for file in files {
        if let Err(e) = table(&file) {
            eprintln!("{}: {e}", file.display());
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

fn table(file: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let graph = memplan::parse(&text).map_err(|e| format!("{e:?}"))?;
    memplan::verify(&graph).map_err(|e| format!("{e:?}"))?;
    let graph = memplan::expand(&graph).map_err(|e| format!("{e:?}"))?;
    let plain = memplan::plan(&graph, &PlanOptions::default()).map_err(|e| e.to_string())?;
    memplan::check(&graph, &plain).map_err(|v| v.to_string())?;
    println!("### @{} ({} ops): arena without recomputation {} MiB ({} B)\n", graph.name, graph.ops.len(), mib(plain.arena_bytes), plain.arena_bytes);
    println!("| strategy | budget | budget MiB | arena MiB | arena / without | recomputed ops | extra compute | time |");
    println!("|---|---|---|---|---|---|---|---|");
    let strategies = Strategy::ALL.iter().map(|s| Some(*s)).chain([None]);
    for strategy in strategies {
        let name = strategy.map_or("drop-and-recompute", |s| s.name());
        for fraction in FRACTIONS {
            let budget = Budget::Fraction(fraction).bytes(plain.arena_bytes).map_err(|e| e.to_string())?;
            let options = PlanOptions { budget: Some(Budget::Fraction(fraction)), ..PlanOptions::default() };
            let started = Instant::now();
            let result = match strategy {
                Some(checkpoint) => plan_step(&graph, &PlanOptions { checkpoint, ..options }),
                None => plan_with_strategy(&graph, &options, name, &baseline::drop_and_recompute),
            };
            let seconds = started.elapsed().as_secs_f64();
            let row = match result {
                Ok((rewritten, plan)) => {
                    memplan::check(&rewritten, &plan).map_err(|v| format!("{}x: the checker rejects the plan: {v}", fraction))?;
                    let remat = plan.remat.as_ref().expect("planned under a budget");
                    format!(
                        "{} | {:.4} | {} | {}",
                        mib(plan.arena_bytes),
                        plan.arena_bytes as f64 / plain.arena_bytes as f64,
                        remat.recomputes.len(),
                        remat.overhead_percent().map_or_else(|| "too large to count".into(), |p| format!("{p:+.2}%"))
                    )
                }
                Err(PlanError::BudgetUnmet { smallest, .. }) => {
                    format!("unmet: smallest {} | {:.4} | - | -", mib(smallest), smallest as f64 / plain.arena_bytes as f64)
                }
                Err(e) => return Err(format!("{fraction}x: {e}")),
            };
            println!("| {name} | {fraction}x | {} | {row} | {seconds:.2} s |", mib(budget));
        }
    }
    println!();
    Ok(())
}
