//! `memplan schedule GRAPH.json`: a low-peak order of a Checkmate/Moccasin graph (node-link
//! JSON), beside the file's reference order and ids ascending; `-o` writes the order.

use std::path::PathBuf;
use std::time::Instant;

use memplan::bytes::format_bytes;
use memplan::formats::checkmate;
use memplan::solve::order::Effort;

use super::files::{read_text, refuse_existing, write_new};
use super::{Failure, outln};

#[derive(clap::Args)]
pub struct Args {
    /// The graph (.json, as in ../shared/bench/checkmate).
    file: PathBuf,
    /// Write the order (a JSON array of node ids) to this new file (never overwritten).
    #[arg(short = 'o', long = "output", value_name = "ORDER.json")]
    output: Option<PathBuf>,
}

pub fn run(Args { file: path, output }: Args) -> Result<(), Failure> {
    let file = path.display().to_string();
    if let Some(out) = &output {
        refuse_existing(out)?;
    }
    let graph = checkmate::parse(&read_text(&path)?).map_err(|e| Failure::bad_input(format_args!("{file}: {e}")))?;
    let dag = &graph.dag;
    let ids_ascending = dag.smallest_first();
    let reference = graph.reference.as_ref().map(|order| (order, dag.peak(order)));
    let mut baselines: Vec<&[u32]> = Vec::new();
    if let Some((order, Ok(_))) = &reference {
        baselines.push(order);
    }
    baselines.push(&ids_ascending);
    let started = Instant::now();
    let found = dag.best_order(&baselines, Effort::for_nodes(dag.nodes()));
    let seconds = started.elapsed().as_secs_f64();
    let name = graph.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
    outln!("{file}{name}: {} nodes, {} links", dag.nodes(), graph.links);
    let names: Vec<&str> = if baselines.len() == 2 { vec!["graph.order", "ids ascending"] } else { vec!["ids ascending"] };
    let method = names
        .iter()
        .enumerate()
        .find_map(|(i, name)| found.by.strip_prefix(&format!("baseline {i}")).map(|rest| format!("{name}{rest}")))
        .unwrap_or_else(|| found.by.clone());
    outln!("  {:15} {:>30}   (found by {method})", "ours", format_bytes(found.peak));
    let row = |label: &str, peak: u64| {
        let ratio = if peak == 0 { 1.0 } else { found.peak as f64 / peak as f64 };
        outln!("  {label:15} {:>30}   ours / this {ratio:.4}", format_bytes(peak));
    };
    match &reference {
        Some((_, Ok(peak))) => row("graph.order", *peak),
        Some((_, Err(why))) => outln!("  {:15} not a topological order: {why}", "graph.order"),
        None => outln!("  {:15} (the file has none)", "graph.order"),
    }
    row("ids ascending", dag.peak(&ids_ascending).unwrap_or(u64::MAX));
    outln!("  time {seconds:.3} s");
    if let Some(out) = &output {
        let ids: Vec<u64> = found.order.iter().map(|&n| graph.ids[n as usize]).collect();
        let json = serde_json::to_string(&ids).expect("a list of numbers serialises");
        write_new(out, format!("{json}\n").as_bytes())?;
        outln!("wrote {} ({} node ids in execution order)", out.display(), ids.len());
    }
    Ok(())
}
