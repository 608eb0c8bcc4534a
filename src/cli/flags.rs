//! The flags several commands take: the passes' switches ([`PassFlags`]), the offset
//! solver, seconds. A flag's spelling and help text are the interface users are told about
//! (docs/CLI.md): change them only with the docs.

use std::time::Duration;

use clap::ValueEnum;
use memplan::ExpandOptions;
use memplan::passes::{Budget, Fusion, PlanOptions, Recompute, ScheduleKind};
use memplan::solve::offsets::Solver;
use memplan::solve::remat::Strategy;

use super::Failure;

/// The flags that switch passes.
#[derive(clap::Args, Clone)]
pub struct PassFlags {
    /// The op order: as written, or memory-aware (never worse than as written).
    #[arg(long, value_enum, default_value_t = ScheduleArg::Memory)]
    schedule: ScheduleArg,
    /// Skip in-place reuse (ops writing their output over an input that dies there).
    #[arg(long)]
    no_inplace: bool,
    /// Offset solver (see `memplan alloc --help`).
    #[arg(long, value_enum, default_value_t = SolverArg::Auto)]
    solver: SolverArg,
    /// Seconds the offset solver may search (auto, exact): a safety net; --search-nodes decides.
    #[arg(long = "time-limit", value_name = "SECS", default_value = "2", value_parser = parse_seconds)]
    time_limit: Duration,
    /// Nodes the exact offset search may visit (auto, exact); within it the plan is the same on every machine.
    #[arg(long = "search-nodes", value_name = "N", default_value_t = memplan::passes::DEFAULT_SEARCH_NODES)]
    search_nodes: u64,
    /// Fit the arena in this budget by recomputing forward values: bytes (12GiB, 800MB, 1048576) or a fraction of the arena without recomputation (0.8x, or 0.8).
    #[arg(long, value_name = "SIZE|FRACTION")]
    budget: Option<String>,
    /// How to choose what to recompute under --budget (`none` recomputes nothing; an unknown name lists the strategies).
    #[arg(long, value_name = "STRATEGY")]
    checkpoint: Option<String>,
    /// Without --budget: `cheap` (the default) recomputes values that are cheap functions of others (casts, activations, masks, elementwise ops) in the backward where that lowers the arena, at most 1% more FLOPs and 10% more bytes moved (`cheap:20%` allows 20%); `none` recomputes nothing. With --budget, the budget decides what is recomputed.
    #[arg(long, value_name = "none|cheap[:P%]", default_value = "cheap", value_parser = parse_recompute)]
    recompute: Recompute,
    /// Recompute nothing without --budget: the same as --recompute none.
    #[arg(long, conflicts_with = "recompute")]
    no_recompute: bool,
    /// Keep the loss as written: without it, a cross-entropy of a projection's logits (`matmul(x, weight^T)`) is computed with its gradients a chunk of rows at a time (`linear_cross_entropy`), where the logits are at least twice what that holds.
    #[arg(long)]
    no_fuse_loss: bool,
    /// Fuse chains and trees of elementwise ops (casts, activations, arithmetic, masks) into `fused` ops whose inner values need no memory (and a layer or RMS norm of their value into `fused_norm`, one pass): `lower` (the default) where that lowers the arena, `always` wherever the pass can (`--print-ir-after fuse` shows them).
    #[arg(long, value_enum, default_value_t = FuseArg::Lower)]
    fuse: FuseArg,
    /// Keep every elementwise op as written (no `fused` ops): the same as --fuse off.
    #[arg(long, conflicts_with = "fuse")]
    no_fuse: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum FuseArg {
    /// Fuse where that lowers the arena (planned both ways; never higher than unfused).
    Lower,
    /// Fuse wherever the pass can, whatever the arena.
    Always,
    /// Fuse nothing.
    Off,
}

/// `--recompute`: `none`, `cheap`, or `cheap:P%` (the most extra bytes moved, in percent of
/// the step's).
fn parse_recompute(text: &str) -> Result<Recompute, String> {
    match text {
        "none" => Ok(Recompute::None),
        "cheap" => Ok(Recompute::Cheap { max_traffic_percent: memplan::passes::CHEAP_MAX_TRAFFIC_PERCENT }),
        _ => match text.strip_prefix("cheap:").map(|p| p.trim_end_matches('%').parse::<u32>()) {
            Some(Ok(percent)) => Ok(Recompute::Cheap { max_traffic_percent: percent }),
            _ => Err(format!("`{text}`: expected none, cheap or cheap:P% (the most extra bytes moved, in percent of the step's, e.g. cheap:20%)")),
        },
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ScheduleArg {
    /// Program order: the ops as the step lists them.
    Program,
    /// A topological order chosen to lower the peak of live bytes.
    Memory,
}

/// One side's own pass flags in `memplan diff` (`--a-budget`, `--b-schedule`, ...): each
/// one given replaces the shared flag for that side. `prefix` spells them (`--a-`).
#[derive(Clone, Default)]
pub struct SideFlags {
    pub prefix: &'static str,
    pub budget: Option<String>,
    pub checkpoint: Option<String>,
    pub schedule: Option<ScheduleArg>,
}

impl SideFlags {
    /// The flags given, as the command line spelled them (`--b-budget 0.7x`).
    pub fn given(&self) -> Vec<String> {
        let schedule = self.schedule.map(|s| s.to_possible_value().expect("no skipped values").get_name().to_string());
        [("budget", &self.budget), ("checkpoint", &self.checkpoint), ("schedule", &schedule)]
            .into_iter()
            .filter_map(|(flag, value)| value.as_ref().map(|v| format!("{}{flag} {v}", self.prefix)))
            .collect()
    }
}

impl PassFlags {
    /// How these flags expand a step's `backward`.
    pub fn expand_options(&self) -> ExpandOptions {
        ExpandOptions { fuse_loss: !self.no_fuse_loss }
    }

    /// The plan options these flags ask for, with offsets aligned to `alignment`.
    pub fn options(&self, alignment: u64) -> Result<PlanOptions, Failure> {
        self.options_for(alignment, &SideFlags::default())
    }

    /// [`PassFlags::options`] with one side's own flags in place of the shared ones.
    pub fn options_for(&self, alignment: u64, side: &SideFlags) -> Result<PlanOptions, Failure> {
        let schedule = match side.schedule.unwrap_or(self.schedule) {
            ScheduleArg::Program => ScheduleKind::Program,
            ScheduleArg::Memory => ScheduleKind::Memory,
        };
        let (budget_flag, checkpoint_flag) = (format!("{}budget", side.prefix), format!("{}checkpoint", side.prefix));
        let budget = side.budget.as_deref().map(|b| (budget_flag.as_str(), b)).or(self.budget.as_deref().map(|b| ("--budget", b)));
        let checkpoint = (side.checkpoint.as_deref().map(|c| (checkpoint_flag.as_str(), c)))
            .or(self.checkpoint.as_deref().map(|c| ("--checkpoint", c)));
        let (budget, checkpoint) = budget_flags(budget, checkpoint).map_err(Failure::bad_input)?;
        let defaults = PlanOptions::default();
        let checkpoint = checkpoint.unwrap_or(defaults.checkpoint);
        Ok(PlanOptions {
            alignment,
            schedule,
            inplace: !self.no_inplace,
            solver: self.solver.solver(),
            time_limit: self.time_limit,
            search_nodes: self.search_nodes,
            budget,
            checkpoint,
            recompute: if self.no_recompute { Recompute::None } else { self.recompute },
            fuse: match (self.no_fuse, self.fuse) {
                (true, _) | (_, FuseArg::Off) => Fusion::Off,
                (false, FuseArg::Lower) => Fusion::Lower,
                (false, FuseArg::Always) => Fusion::On,
            },
            ..defaults
        })
    }
}

/// The budget and checkpoint flags as the command line gives them, each with the flag it
/// came from (`--budget`, `--a-budget`, ...); `Err` is the message to print after `error: `
/// (what is wrong, and a hint).
fn budget_flags(
    budget: Option<(&str, &str)>,
    checkpoint: Option<(&str, &str)>,
) -> Result<(Option<Budget>, Option<Strategy>), String> {
    let budget = budget
        .map(|(flag, text)| text.parse::<Budget>().map_err(|e| format!("{flag} {e}\n  hint: {}", e.hint())))
        .transpose()?;
    let strategy = checkpoint
        .map(|(flag, name)| {
            Strategy::from_name(name).ok_or_else(|| {
                let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
                format!("{flag}: unknown strategy `{name}`\n  hint: one of {}", names.join(", "))
            })
        })
        .transpose()?;
    if let (Some((flag, _)), None) = (checkpoint, budget) {
        return Err(format!(
            "{flag} chooses what to recompute under a budget, but no budget was given\n  hint: add --budget, e.g. --budget 0.8x"
        ));
    }
    Ok((budget, strategy))
}

/// The offset solvers, as the command line names them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum SolverArg {
    /// Greedy by size, first fit (TVM/TFLite's family).
    Greedy,
    /// Best-fit in XLA's spatial and temporal orders, the better of the two.
    #[value(name = "bestfit")]
    BestFit,
    /// Branch and bound from best-fit's placement: within --capacity, or the smallest arena it can prove, in the time limit.
    Exact,
    /// Every heuristic, keeping the best; then the exact solver around the peak (lists of 1000+ buffers) and on the whole list for the rest of the time limit.
    Auto,
}

impl SolverArg {
    pub fn solver(self) -> Solver {
        match self {
            SolverArg::Greedy => Solver::Greedy,
            SolverArg::BestFit => Solver::BestFit,
            SolverArg::Exact => Solver::Exact,
            SolverArg::Auto => Solver::Auto,
        }
    }
}

/// A number of seconds (`0.5`, `10`), not negative.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{text}` is not a non-negative number of seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_flags_say_what_is_wrong() {
        let budget = |text| Some(("--budget", text));
        let checkpoint = |name| Some(("--checkpoint", name));
        assert_eq!(budget_flags(None, None), Ok((None, None)));
        assert_eq!(budget_flags(budget("1KiB"), checkpoint("none")), Ok((Some(Budget::Bytes(1024)), Some(Strategy::None))));
        let bad = budget_flags(budget("12XB"), None).unwrap_err();
        assert!(bad.starts_with("--budget `12XB`: unknown unit `XB`") && bad.contains("hint:"), "{bad}");
        let bad = budget_flags(budget("1x"), checkpoint("magic")).unwrap_err();
        assert!(bad.contains("unknown strategy `magic`") && bad.contains("none"), "{bad}");
        // Both spellings of a fraction, as `remat --budget` takes them.
        assert_eq!(budget_flags(budget("0.8"), None), Ok((Some(Budget::Fraction(0.8)), None)));
        assert_eq!(budget_flags(budget("0.8x"), None), Ok((Some(Budget::Fraction(0.8)), None)));
        assert!(budget_flags(None, checkpoint("none")).unwrap_err().contains("no budget was given"));
        // A side's flag is named as given.
        let bad = budget_flags(Some(("--b-budget", "lots")), None).unwrap_err();
        assert!(bad.starts_with("--b-budget `lots`"), "{bad}");
    }
}
