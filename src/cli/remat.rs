//! `memplan remat GRAPH.json --budget FRACTION`: rematerialisation of a Checkmate/Moccasin
//! graph (docs/CLI.md).
//!
//! The budget is a fraction of the peak of the graph's plain order (ids ascending; see
//! `checkmate::parse_remat`), in bytes rounded down. The report names the graph, the
//! topological peak, the budget, the peak reached, the overhead (extra compute over one
//! plain step, by the file's costs) beside the lower bound no plan can beat, the strategy
//! and the time. `-o OUT.json` writes the execution sequence as the file's node ids (a
//! repeated id is a recompute) so that anyone can re-check it with the README's rule; it
//! never overwrites a file. The solver has re-checked everything with [`evaluate`].

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use memplan::formats::checkmate::parse_remat;
use memplan::solve::Node;
use memplan::solve::remat::{RematError, SequenceError, Strategy, evaluate, solve_with};

use super::files::{read_text, refuse_existing, write_new};
use super::{Exit, Failure, out};

#[derive(clap::Args)]
pub struct Args {
    /// The graph (.json, as in ../shared/bench/checkmate).
    file: PathBuf,
    /// The budget, as a fraction of the peak of the graph's plain topological order (0.8, or 0.8x as `plan --budget` writes it).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    budget: f64,
    /// How to choose what to recompute.
    #[arg(long, value_enum, default_value_t = StrategyArg::Auto, value_name = "STRATEGY")]
    checkpoint: StrategyArg,
    /// Time limit in seconds, reading the graph included; the best plan found by then is returned.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    time_limit: f64,
    /// Write the execution sequence (node ids, repeats are recomputes) to this new file (never overwritten).
    #[arg(short = 'o', long = "output", value_name = "OUT.json")]
    output: Option<PathBuf>,
}

/// The strategies, as the command line names them (`Strategy::name`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum StrategyArg {
    /// Recompute nothing: the problem's own order.
    None,
    /// Chen et al.'s sqrt(n): every ⌊√k⌋-th of the k articulation points is a checkpoint.
    ChenSqrt,
    /// Chen et al.'s greedy segment-budget sweep: its cheapest point that fits.
    ChenGreedy,
    /// The greedy on bytes over budget per unit of compute, then a ruin-and-recreate search.
    NearOptimal,
    /// The cheapest of the strategies above that fits.
    Auto,
}

impl StrategyArg {
    fn strategy(self) -> Strategy {
        match self {
            StrategyArg::None => Strategy::None,
            StrategyArg::ChenSqrt => Strategy::ChenSqrt,
            StrategyArg::ChenGreedy => Strategy::ChenGreedy,
            StrategyArg::NearOptimal => Strategy::NearOptimal,
            StrategyArg::Auto => Strategy::Auto,
        }
    }
}

/// A fraction as `--budget` takes it: a number, with or without the `x` of `plan --budget
/// 0.8x` (whether it is above 0 is checked with the graph's name at hand).
fn parse_fraction(text: &str) -> Result<f64, String> {
    let number = text.trim().strip_suffix('x').unwrap_or(text.trim());
    number.trim().parse().map_err(|_| {
        format!("`{text}` is not a fraction; remat budgets are fractions of the topological peak: 0.8 or 0.8x")
    })
}

/// The smallest fraction, rounded up to 4 decimals, whose budget (as `run` computes it
/// from the printed fraction) is at least `bytes`. Found in integers, then checked with the
/// same floating-point product as `run` (a step or two up where rounding falls short), so
/// it ends whatever the numbers: a loop of 1e-4 steps from a rounded start never ended
/// for a peak above 2^64 read as a few bytes.
fn fraction_for(bytes: u64, peak: u64) -> String {
    if peak == 0 {
        return "1".into(); // every budget of a zero peak is 0
    }
    let mut tenths_of_thousandths = (u128::from(bytes) * 10_000).div_ceil(u128::from(peak.max(1)));
    let budget = |k: u128| (peak as f64 * (k as f64 / 1e4)).floor() as u64;
    for _ in 0..4 {
        if budget(tenths_of_thousandths) >= bytes {
            break;
        }
        tenths_of_thousandths += 1;
    }
    format!("{}.{:04}", tenths_of_thousandths / 10_000, tenths_of_thousandths % 10_000)
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

/// Solves, re-checks and reports; writes the sequence if asked.
pub fn run(Args { file: path, budget: fraction, checkpoint, time_limit, output }: Args) -> Result<(), Failure> {
    // The limit counts from here, reading the graph included (as `alloc`'s).
    let command_started = Instant::now();
    let strategy = checkpoint.strategy();
    let time_limit = std::time::Duration::try_from_secs_f64(time_limit)
        .map_err(|_| Failure::bad_input(format_args!("--time-limit {time_limit}: expected seconds, a number ≥ 0")))?;
    let file = path.display().to_string();
    let internal = |e: RematError| Failure::error(Exit::Bug, format_args!("internal error (a memplan bug; please report it): {e}"));
    if !(fraction.is_finite() && fraction > 0.0) {
        return Err(Failure::bad_input(format_args!(
            "--budget {fraction}: expected a fraction of the topological peak, a number above 0 (e.g. 0.8 or 0.8x)"
        )));
    }
    if let Some(out) = &output {
        refuse_existing(out)?;
    }
    let graph = parse_remat(&read_text(&path)?).map_err(|error| {
        let at = error.location().map(|(line, column)| format!(":{line}:{column}")).unwrap_or_default();
        Failure::bad_input(format_args!("{file}{at}: {error}"))
    })?;
    let problem = &graph.problem;
    let plain: Vec<Node> = (0..problem.nodes.len() as Node).collect();
    let evaluated = Instant::now();
    let topological = match evaluate(problem, &plain) {
        Ok(eval) => eval.peak,
        Err(SequenceError::TooLarge { peak }) => return Err(too_large(&file, peak)),
        Err(e) => return Err(internal(RematError::BadProblem(e))),
    };
    let budget = (topological as f64 * fraction).floor() as u64;
    // What is left of the limit goes to the solver, less what the report and `-o` take
    // after it: about an evaluation of the plain order (measured just now, with the rest
    // of the reading) for writing a sequence up to twice as long.
    let started = Instant::now();
    let reserve = if output.is_some() { started.duration_since(evaluated) * 2 } else { Duration::ZERO };
    let solution = solve_with(problem, budget, strategy, time_limit.saturating_sub(command_started.elapsed() + reserve)).map_err(|error| match error {
        RematError::Infeasible { budget, smallest, timed_out } => Failure::error(
            Exit::Unmet,
            format_args!(
                "{file}: no schedule fits the budget of {budget} bytes ({fraction} of the topological peak); \
                 the smallest peak found is {smallest} bytes: try --budget {}{}",
                fraction_for(smallest, topological),
                if timed_out {
                    format!(" (the search stopped at the time limit of {} s: a longer --time-limit may find more)", time_limit.as_secs_f64())
                } else {
                    String::new()
                }
            ),
        ),
        RematError::TooLarge { peak } => too_large(&file, peak),
        RematError::StrategyCannot { .. } => Failure::error(Exit::Unmet, format_args!("{file}: {error}")),
        RematError::SizesTooLarge => Failure::bad_input(format_args!("{file}: {error}")),
        _ => internal(error),
    })?;
    let seconds = started.elapsed().as_secs_f64();
    // The solver has checked the sequence with the file's README rule (`evaluate`) and
    // that it fits; the bound came with it.
    let (eval, bound) = (solution.eval, solution.bound);
    let percent = |x: f64| format!("{:.3}%", x * 100.0);
    let mut report = String::new();
    let name = graph.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
    let recomputes = solution.sequence.len() - problem.nodes.len();
    let _ = writeln!(report, "{file}{name}: {} nodes, {} links", problem.nodes.len(), graph.links);
    let _ = writeln!(report, "  topological peak  {topological} bytes");
    let _ = writeln!(report, "  budget            {budget} bytes ({fraction} of the topological peak)");
    // A graph of zero-byte values has a zero peak, reached exactly (not 0/0).
    let ratio = if topological == 0 { 1.0 } else { eval.peak as f64 / topological as f64 };
    let _ = writeln!(report, "  peak reached      {} bytes ({ratio:.4} of the topological peak)", eval.peak);
    let lower = bound.extra.map(|e| percent(e as f64 / eval.base_cost.max(1) as f64)).unwrap_or_else(|| "-".into());
    let lower = if bound.cut { format!("{lower}, a weaker bound: its search stopped at the time limit") } else { lower };
    let _ =
        writeln!(report, "  overhead          {} ({recomputes} recomputes; no plan can do better than {lower})", percent(eval.overhead()));
    let _ = writeln!(report, "  strategy          {} (asked: {})", solution.strategy.name(), strategy.name());
    let _ = writeln!(report, "  time              {seconds:.3} s");
    if let Some(out) = &output {
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
        write_new(out, format!("{json}\n").as_bytes())?;
        let _ = writeln!(report, "wrote {} ({} node ids in execution order; a repeated id is a recompute)", out.display(), count);
    }
    out!("{report}");
    Ok(())
}

/// A graph whose topological peak does not fit in 64 bits (exit 1: bad input).
fn too_large(file: &str, peak: u128) -> Failure {
    Failure::bad_input(format_args!("{file}: too large: its topological peak is {peak} bytes, above 2^64 - 1 (check the sizes)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fraction_that_works_is_found_for_any_numbers() {
        for (bytes, peak) in [(80, 100), (81, 100), (1, 3), (u64::MAX, 5), (u64::MAX, u64::MAX), (0, 0), (12345678901234567, 98765432109876543)] {
            let text = fraction_for(bytes, peak);
            let f: f64 = text.parse().unwrap();
            assert!((peak as f64 * f).floor() as u64 >= bytes || peak == 0, "{bytes} of {peak}: {text}");
        }
        assert_eq!(fraction_for(80, 100), "0.8000");
        assert_eq!(fraction_for(81, 100), "0.8100");
        assert_eq!(fraction_for(1, 3), "0.3334");
    }

    #[test]
    fn fractions_take_both_spellings() {
        assert_eq!(parse_fraction("0.8"), Ok(0.8));
        assert_eq!(parse_fraction("0.7x"), Ok(0.7));
        assert_eq!(parse_fraction("1"), Ok(1.0));
        assert!(parse_fraction("12GiB").unwrap_err().contains("0.8 or 0.8x"));
    }

    #[test]
    fn strategies_have_their_library_names() {
        for arg in StrategyArg::value_variants() {
            assert_eq!(arg.to_possible_value().unwrap().get_name(), arg.strategy().name());
        }
        assert_eq!(StrategyArg::value_variants().len(), Strategy::ALL.len());
    }
}
