//! `memplan remat GRAPH.json --budget FRACTION`: rematerialisation of a Checkmate/Moccasin
//! graph (docs/CLI.md).
//!
//! The budget is a fraction of the peak of the graph's plain order (ids ascending; see
//! `checkmate::parse_remat`), in bytes rounded down. The report names the graph, the
//! topological peak, the budget, the peak reached, the overhead (extra compute over one
//! plain step, by the file's costs) beside the lower bound no plan can beat, the strategy
//! and the time. `-o OUT.json` writes the execution sequence as the file's node ids (a
//! repeated id is a recompute) so that anyone can re-check it with the README's rule; it
//! never overwrites a file. Everything is re-checked with [`evaluate`] first.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use thiserror::Error;

use memplan::checkmate::{ReadError, parse_remat};
use memplan::solve::Node;
use memplan::solve::remat::bound::lower_bound;
use memplan::solve::remat::{RematError, Strategy, evaluate, solve_with};

/// Why `memplan remat` failed; [`CliError::exit_code`] is the command's exit status.
#[derive(Debug, Error)]
pub enum CliError {
    /// The graph file cannot be read.
    #[error("cannot read {file}: {source}")]
    Read { file: String, source: std::io::Error },
    /// The graph file is not a node-link graph; `at` is `:line:col` for JSON syntax errors.
    #[error("{file}{at}: {error}")]
    Parse { file: String, at: String, error: ReadError },
    /// The budget fraction is not a positive finite number.
    #[error("--budget {0}: expected a fraction of the topological peak, a number above 0 (e.g. 0.8)")]
    Budget(f64),
    /// The output file already exists.
    #[error("{0} exists; memplan never overwrites a file")]
    Exists(String),
    /// The output file cannot be written.
    #[error("cannot write {file}: {source}")]
    Write { file: String, source: std::io::Error },
    /// No strategy fits the budget (exit 2); the message gives the smallest budget found.
    #[error(
        "{file}: no schedule fits the budget of {budget} bytes ({fraction} of the topological peak); \
         the smallest peak found is {smallest} bytes: try --budget {suggestion}"
    )]
    Infeasible { file: String, budget: u64, fraction: f64, smallest: u64, suggestion: String },
    /// The chosen strategy does not fit, another does (exit 2).
    #[error("{file}: {error}")]
    Strategy { file: String, error: RematError },
    /// A memplan bug: a strategy's sequence failed the evaluation rule.
    #[error("internal error (a memplan bug; please report it): {0}")]
    Internal(RematError),
}

impl CliError {
    /// 1 bad input, 2 the budget cannot be met, 3 internal error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Infeasible { .. } | CliError::Strategy { .. } => 2,
            CliError::Internal(_) => 3,
            _ => 1,
        }
    }
}

/// The smallest fraction, rounded up to 4 decimals, whose budget is at least `bytes`.
fn fraction_for(bytes: u64, peak: u64) -> String {
    let mut f = (bytes as f64 / peak as f64 * 1e4).ceil() / 1e4;
    while ((peak as f64 * f).floor() as u64) < bytes {
        f += 1e-4;
    }
    format!("{f:.4}")
}

/// What `-o` writes.
#[derive(serde::Serialize)]
struct OutFile {
    /// The graph's file name.
    graph: String,
    budget_fraction: f64,
    budget_bytes: u64,
    peak: u64,
    /// Extra compute over one plain step (0.02 = 2%).
    overhead: f64,
    strategy: &'static str,
    /// Node ids as in the file, in execution order; a repeat is a recompute.
    sequence: Vec<u64>,
}

/// Runs the command; returns the report to print.
pub fn run(path: &Path, fraction: f64, strategy: Strategy, time_limit: Duration, output: Option<&Path>) -> Result<String, CliError> {
    let file = path.display().to_string();
    if !(fraction.is_finite() && fraction > 0.0) {
        return Err(CliError::Budget(fraction));
    }
    if let Some(out) = output
        && out.exists()
    {
        return Err(CliError::Exists(out.display().to_string()));
    }
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Read { file: file.clone(), source })?;
    let graph = parse_remat(&text).map_err(|error| {
        let at = error.location().map(|(line, column)| format!(":{line}:{column}")).unwrap_or_default();
        CliError::Parse { file: file.clone(), at, error }
    })?;
    let problem = &graph.problem;
    let plain: Vec<Node> = (0..problem.nodes.len() as Node).collect();
    let topological = evaluate(problem, &plain).map_err(|e| CliError::Internal(RematError::BadProblem(e)))?.peak;
    let budget = (topological as f64 * fraction).floor() as u64;
    let started = Instant::now();
    let solution = solve_with(problem, budget, strategy, time_limit).map_err(|error| match error {
        RematError::Infeasible { budget, smallest } => {
            CliError::Infeasible { file: file.clone(), budget, fraction, smallest, suggestion: fraction_for(smallest, topological) }
        }
        RematError::StrategyCannot { .. } => CliError::Strategy { file: file.clone(), error },
        _ => CliError::Internal(error),
    })?;
    let seconds = started.elapsed().as_secs_f64();
    // Re-check the sequence exactly as the file's README says, from the ids.
    let eval = evaluate(problem, &solution.sequence).map_err(|e| CliError::Internal(RematError::BadProblem(e)))?;
    if eval.peak > budget {
        return Err(CliError::Internal(RematError::OverBudget { strategy: solution.strategy, peak: eval.peak, budget }));
    }
    let bound = lower_bound(problem, budget);
    let percent = |x: f64| format!("{:.3}%", x * 100.0);
    let mut report = String::new();
    let name = graph.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
    let recomputes = solution.sequence.len() - problem.nodes.len();
    let _ = writeln!(report, "{file}{name}: {} nodes, {} links", problem.nodes.len(), graph.links);
    let _ = writeln!(report, "  topological peak  {topological} bytes");
    let _ = writeln!(report, "  budget            {budget} bytes ({fraction} of the topological peak)");
    let _ =
        writeln!(report, "  peak reached      {} bytes ({:.4} of the topological peak)", eval.peak, eval.peak as f64 / topological as f64);
    let lower = bound.extra.map(|e| percent(e as f64 / eval.base_cost.max(1) as f64)).unwrap_or_else(|| "-".into());
    let _ =
        writeln!(report, "  overhead          {} ({recomputes} recomputes; no plan can do better than {lower})", percent(eval.overhead()));
    let _ = writeln!(report, "  strategy          {} (asked: {})", solution.strategy.name(), strategy.name());
    let _ = writeln!(report, "  time              {seconds:.3} s");
    if let Some(out) = output {
        let ids: Vec<u64> = solution.sequence.iter().map(|&k| graph.ids[k as usize]).collect();
        let count = ids.len();
        let graph_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| file.clone());
        let json = serde_json::to_string(&OutFile {
            graph: graph_name,
            budget_fraction: fraction,
            budget_bytes: budget,
            peak: eval.peak,
            overhead: eval.overhead(),
            strategy: solution.strategy.name(),
            sequence: ids,
        })
        .expect("plain data serialises");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{json}\n").as_bytes()));
        written.map_err(|source| CliError::Write { file: out.display().to_string(), source })?;
        let _ = writeln!(report, "wrote {} ({} node ids in execution order; a repeated id is a recompute)", out.display(), count);
    }
    Ok(report)
}
