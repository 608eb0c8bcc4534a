//! Plans a step from the library API and prints its headline figures.
//!
//! `cargo run --example plan_a_step -- ir/models/mlp.step`

use memplan::bytes::format_bytes;
use memplan::passes::PlanOptions;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "ir/models/mlp.step".into());
    let src = std::fs::read_to_string(&path)?;
    let graph = match memplan::parse(&src) {
        Ok(graph) => graph,
        Err(e) => {
            eprint!("{}", memplan::diagnostics::render(&e, &path, &src, false));
            std::process::exit(1);
        }
    };
    memplan::verify(&graph)?;
    let plan = memplan::plan(&graph, &PlanOptions::default())?;
    memplan::check(&graph, &plan)?;
    println!("{path}: arena {}, lower bound {}, ratio {:.4}", format_bytes(plan.arena_bytes), format_bytes(plan.lower_bound), plan.ratio());
    Ok(())
}
