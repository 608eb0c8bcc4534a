//! The `memplan` command line. See docs/CLI.md.
//!
//! Every command that needs a full step expands a forward-only one first (parse → verify →
//! autodiff → verify → passes).
//!
//! Exit status: 0 success; 1 bad input (unreadable file, parse or verify errors, a step
//! that cannot be differentiated or planned, a malformed buffer list, an output file that
//! exists); 2 a capacity or budget that cannot be met (`alloc --capacity N` found no
//! placement within N bytes in the time limit; a `--budget` that no recomputation meets:
//! the message says the smallest budget that works); 3 the checker rejected a plan or
//! placement memplan made, or an expanded step does not verify (always a memplan bug:
//! please report it). Errors go to stderr with file:line:col, a label and a hint.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use memplan::bytes::format_bytes;

mod cli;
use memplan::diagnostics;
use memplan::ir::graph::Graph;
use memplan::solve::offsets::{self, Solver};
use memplan::passes::{Context, Observer, Pass, PlanOptions, ScheduleKind};
use memplan::progress::Progress;
use memplan::plan::{DEFAULT_ALIGNMENT, Plan};
use memplan::report::emit::Emit;
use memplan::report::live::{At, GroupBy};
use memplan::report::locs::Locs;
use memplan::report::{self, Report, Subject};
use miette::Diagnostic;

#[derive(Parser)]
#[command(
    name = "memplan",
    version,
    about = "Plan the memory of a deep-learning training step ahead of time",
    long_about = "memplan reads a training step written in its text IR (.step files; see docs/IR.md), \
                  finds every tensor's lifetime, and places every buffer at an offset inside ONE arena. \
                  It reports the arena, the lower bound no placement can beat, and what is live at the peak."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and verify a step (expanding a forward-only one), plan it and run the independent checker on the plan.
    Check {
        /// The .step file.
        file: PathBuf,
        #[command(flatten)]
        passes: PassFlags,
    },
    /// Plan a step and print the report: arena, lower bound, peak, bytes by class, buffers.
    Plan {
        /// The .step file.
        file: PathBuf,
        /// Output format (of stdout; see --emit for files).
        #[arg(long, value_enum, default_value_t = Format::Text, conflicts_with = "emit")]
        format: Format,
        /// Offset alignment in bytes (a power of two).
        #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
        alignment: u64,
        /// How many live values to list at the peak (text format).
        #[arg(long, default_value_t = 20, value_name = "N")]
        top: usize,
        /// Write these report files into DIR (comma-separated: text, json, svg, trace, csv); see docs/REPORTS.md.
        #[arg(long, value_delimiter = ',', value_name = "FORMATS")]
        emit: Vec<Emit>,
        /// The directory --emit writes to (created if missing; only memplan's own file names are written).
        #[arg(short = 'o', long = "output", default_value = "memplan-out", value_name = "DIR", requires = "emit")]
        output: PathBuf,
        /// Print the step as IR after this pass to stderr, annotated (schedule, inplace, buffers, offsets; repeatable).
        #[arg(long, value_name = "PASS")]
        print_ir_after: Vec<Pass>,
        /// Print the step as IR after every pass to stderr.
        #[arg(long)]
        print_ir_after_all: bool,
        #[command(flatten)]
        passes: PassFlags,
    },
    /// What is live at one step (the peak by default), grouped by class, op or source line, with cumulative bytes.
    Report {
        /// A .step file, or a plan JSON written by `plan --emit json`.
        file: PathBuf,
        /// The step to look at: `peak` or a schedule position.
        #[arg(long, default_value = "peak", value_parser = parse_at, value_name = "peak|STEP")]
        at: At,
        /// How many groups and values to list.
        #[arg(long, default_value_t = 20, value_name = "N")]
        top: usize,
        /// How to group the live values.
        #[arg(long, value_enum, default_value_t = ByArg::Class)]
        by: ByArg,
        /// Offset alignment in bytes for a .step file (a power of two).
        #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
        alignment: u64,
        #[command(flatten)]
        passes: PassFlags,
    },
    /// Compare two plans (two .step files, two plan JSONs, or one of each): figures, classes, values that changed most.
    Diff {
        /// The first (A): a .step file or a plan JSON.
        a: PathBuf,
        /// The second (B).
        b: PathBuf,
        /// How many values to list per kind of change.
        #[arg(long, default_value_t = 10, value_name = "N")]
        top: usize,
        /// Offset alignment in bytes for .step files (a power of two).
        #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
        alignment: u64,
        #[command(flatten)]
        passes: PassFlags,
    },
    /// Place a bare buffer list (minimalloc's CSV: `id,lower,upper,size`, live on [lower, upper)) in one arena.
    ///
    /// Solves, checks the placement independently, prints the lower bound, arena, ratio,
    /// time and solver, and writes the list with an `offset` column to a NEW file (-o).
    /// An `offset` column in the input (IREE's lists have one) is ignored for solving and
    /// reported as "file's own placement". Exit 2 when no placement within --capacity was
    /// found in the time limit.
    Alloc {
        /// The CSV file.
        file: PathBuf,
        /// The arena must fit in N bytes (exit 2 if no such placement is found).
        #[arg(long, value_name = "N")]
        capacity: Option<u64>,
        /// Offset solver.
        #[arg(long, value_enum, default_value_t = SolverArg::Auto)]
        solver: SolverArg,
        /// Seconds the search may take (auto, exact; the heuristics take what they need).
        #[arg(long = "time-limit", value_name = "SECS", default_value = "10", value_parser = parse_seconds)]
        time_limit: Duration,
        /// Write the list with an `offset` column to this new file (never overwritten; not the input).
        #[arg(short = 'o', long = "output", value_name = "OUT.csv")]
        output: Option<PathBuf>,
    },
    /// Run a step on real numbers inside its planned arena, for one or more training steps.
    Run {
        /// The .step file.
        file: PathBuf,
        /// Where to run.
        #[arg(long, value_enum, default_value_t = Device::Cpu)]
        device: Device,
        /// Training steps to run (updated params and state feed the next step).
        #[arg(long, default_value_t = 1, value_name = "N")]
        steps: u32,
        /// Seed for the initial params and the synthetic inputs.
        #[arg(long, default_value_t = 0, value_name = "S")]
        seed: u64,
        /// Initial values from a safetensors file (by argument name); the rest are seeded.
        #[arg(long, value_name = "F")]
        weights: Option<PathBuf>,
        /// Write the final params and state to this new safetensors file (never overwritten).
        #[arg(long, value_name = "F")]
        save: Option<PathBuf>,
        /// Also run every step unplanned (each value in its own memory) and require bit-identical results.
        #[arg(long)]
        compare_unplanned: bool,
        /// With --device cuda: also run every step on the CPU reference and compare every output within tolerance.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        passes: PassFlags,
    },
    /// Find a low-peak order of a Checkmate/Moccasin graph (node-link JSON) and compare it with the file's reference order and ids ascending.
    Schedule {
        /// The graph (.json, as in ../shared/bench/checkmate).
        file: PathBuf,
        /// Write the order (a JSON array of node ids) to this new file (never overwritten).
        #[arg(short = 'o', long = "output", value_name = "ORDER.json")]
        output: Option<PathBuf>,
    },
    /// Choose what to recompute in a Checkmate/Moccasin graph so that its peak fits a budget, at the least extra compute.
    Remat {
        /// The graph (.json, as in ../shared/bench/checkmate).
        file: PathBuf,
        /// The budget, as a fraction of the peak of the graph's plain topological order.
        #[arg(long, value_name = "FRACTION")]
        budget: f64,
        /// How to choose what to recompute.
        #[arg(long, value_enum, default_value_t = memplan::solve::remat::Strategy::Auto, value_name = "STRATEGY")]
        checkpoint: memplan::solve::remat::Strategy,
        /// Time limit of the search in seconds.
        #[arg(long, default_value_t = 1.0, value_name = "SECS")]
        time_limit: f64,
        /// Write the execution sequence (node ids, repeats are recomputes) to this new file (never overwritten).
        #[arg(short = 'o', long = "output", value_name = "OUT.json")]
        output: Option<PathBuf>,
    },
    /// Expand a forward-only step (`backward %loss with ...`) and print the full step in canonical form.
    Expand {
        /// The .step file.
        file: PathBuf,
    },
    /// Print a step in canonical form.
    Print {
        /// The .step file.
        file: PathBuf,
    },
}

/// The flags that switch passes.
#[derive(clap::Args, Clone)]
struct PassFlags {
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
    /// Fit the arena in this budget by recomputing forward values: bytes (12GiB, 800MB, 1048576) or a fraction of the arena without recomputation (0.8x).
    #[arg(long, value_name = "SIZE|FRACTIONx")]
    budget: Option<String>,
    /// How to choose what to recompute under --budget (`none` recomputes nothing; an unknown name lists the strategies).
    #[arg(long, value_name = "STRATEGY")]
    checkpoint: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ScheduleArg {
    /// Program order: the ops as the step lists them.
    Program,
    /// A topological order chosen to lower the peak of live bytes.
    Memory,
}

impl PassFlags {
    fn options(&self, alignment: u64) -> Result<PlanOptions, Failure> {
        let schedule = match self.schedule {
            ScheduleArg::Program => ScheduleKind::Program,
            ScheduleArg::Memory => ScheduleKind::Memory,
        };
        let (budget, checkpoint) = memplan::passes::remat::budget::parse_flags(self.budget.as_deref(), self.checkpoint.as_deref())
            .map_err(|message| Failure { message, code: 1 })?;
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
            ..defaults
        })
    }
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Device {
    /// The CPU reference executor.
    Cpu,
    /// An NVIDIA GPU through CUDA.
    Cuda,
}

/// The offset solvers, as the command line names them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum SolverArg {
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
    fn solver(self) -> Solver {
        match self {
            SolverArg::Greedy => Solver::Greedy,
            SolverArg::BestFit => Solver::BestFit,
            SolverArg::Exact => Solver::Exact,
            SolverArg::Auto => Solver::Auto,
        }
    }
}

/// A number of seconds (`0.5`, `10`), not negative.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{text}` is not a non-negative number of seconds"))
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// `memplan report --by`.
#[derive(Clone, Copy, ValueEnum)]
enum ByArg {
    /// param, input, state, grad, activation, temp.
    Class,
    /// The kind of op that writes each value.
    Op,
    /// The source line of each value: its op's loc(...), else its place in the .step file.
    Loc,
}

fn parse_at(s: &str) -> Result<At, String> {
    match s {
        "peak" => Ok(At::Peak),
        _ => s.parse().map(At::Step).map_err(|_| format!("`{s}` is neither `peak` nor a schedule step (0, 1, ...)")),
    }
}

/// Writes to stdout. A reader that went away (`memplan plan big.step | head`) is not an
/// error worth a panic: stop quietly, as other command-line tools do.
fn write_stdout(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(text) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

macro_rules! out {
    ($($arg:tt)*) => { write_stdout(format_args!($($arg)*)) };
}

macro_rules! outln {
    ($($arg:tt)*) => { write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

fn main() -> ExitCode {
    // A usage error is bad input (exit 1): clap's own status 2 means "capacity not met" here.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(1) } else { ExitCode::SUCCESS };
        }
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprint!("{}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// A message for stderr and an exit status.
struct Failure {
    message: String,
    code: u8,
}

/// The text of a step and the path it came from.
struct Source {
    file: String,
    text: String,
}

impl Source {
    fn read(path: &Path) -> Result<Source, Failure> {
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Source { file, text }),
            Err(e) => Err(Failure { message: format!("error: cannot read {file}: {e}\n"), code: 1 }),
        }
    }

    /// A failure showing `diagnostic` against this source.
    fn failure(&self, diagnostic: &dyn Diagnostic, code: u8) -> Failure {
        let color = std::io::stderr().is_terminal();
        Failure { message: diagnostics::render(diagnostic, &self.file, &self.text, color), code }
    }

    /// Parses, verifies, expands (autodiff; a step without `backward` stays as it is) and
    /// verifies the expanded step. An expanded step that does not verify is a memplan bug.
    fn graph(&self) -> Result<Graph, Failure> {
        let graph = memplan::parse(&self.text).map_err(|e| self.failure(&e, 1))?;
        memplan::verify(&graph).map_err(|e| self.failure(&e, 1))?;
        let expanded = memplan::expand(&graph).map_err(|e| self.failure(&e, 1))?;
        memplan::verify(&expanded).map_err(|e| {
            let mut failure = self.failure(&e, 3);
            failure.message = format!("internal error: the expanded step does not verify (a memplan bug; please report it):\n{}", failure.message);
            failure
        })?;
        Ok(expanded)
    }

    /// Plans `graph` and checks the plan independently; returns the graph the plan refers
    /// to (rewritten when ops are recomputed under a budget). Exit 2: a budget not met.
    fn plan(&self, graph: &Graph, options: &PlanOptions) -> Result<(Graph, Plan), Failure> {
        self.plan_observed(graph, options, &mut |_, _| {})
    }

    /// [`Source::plan`], showing the pipeline's context to `observe` after each pass.
    fn plan_observed(&self, graph: &Graph, options: &PlanOptions, observe: &mut Observer<'_>) -> Result<(Graph, Plan), Failure> {
        let (graph, plan) = memplan::passes::plan_step_observed(graph, options, observe).map_err(|e| {
            let code = if matches!(e, memplan::PlanError::BudgetUnmet { .. }) { 2 } else { 1 };
            self.failure(&e, code)
        })?;
        memplan::check(&graph, &plan).map_err(|violations| Failure {
            message: format!(
                "internal error: the checker rejected the plan of {} (a memplan bug; please report it):\n{violations}\n",
                self.file
            ),
            code: 3,
        })?;
        Ok((graph, plan))
    }

    /// `graph` (parsed from this source) and its plan, with source locations.
    fn subject(self, graph: Graph, plan: Plan) -> Subject {
        let locs = Locs::from_source(&graph, &self.file, &self.text);
        Subject { source: self.file, graph, plan, locs }
    }
}

/// A plan to report on, from a .step file (planned with `options`) or a plan JSON (read
/// back and checked), and the name it goes by in reports.
fn load_subject(path: &Path, options: &PlanOptions) -> Result<(String, Subject), Failure> {
    let source = Source::read(path)?;
    if path.extension().is_some_and(|e| e == "json") || source.text.trim_start().starts_with('{') {
        let subject = report::json::load(&source.text)
            .map_err(|e| Failure { message: format!("error: {}: {e}
", source.file), code: e.exit_code() })?;
        let name = format!("{} (@{}, planned from {})", source.file, subject.graph.name, subject.source);
        return Ok((name, subject));
    }
    let graph = source.graph()?;
    let (graph, plan) = source.plan(&graph, options)?;
    let name = format!("{} (@{})", source.file, graph.name);
    Ok((name, source.subject(graph, plan)))
}

fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Check { file, passes } => {
            let source = Source::read(&file)?;
            let (graph, plan) = source.plan(&source.graph()?, &passes.options(DEFAULT_ALIGNMENT)?)?;
            outln!(
                "ok: {}: step @{} ({} args, {} ops) is valid; its plan ({}) passes the checker",
                source.file,
                graph.name,
                graph.args.len(),
                graph.ops.len(),
                format_bytes(plan.arena_bytes)
            );
        }
        Command::Plan { file, format, alignment, top, mut emit, output, mut print_ir_after, print_ir_after_all, passes } => {
            let source = Source::read(&file)?;
            let graph = source.graph()?;
            let options = passes.options(alignment)?;
            if print_ir_after_all {
                print_ir_after = Pass::ALL.to_vec();
            }
            print_ir_after.sort();
            print_ir_after.dedup();
            // `--print-ir-after`: the step after each pass asked for, annotated, on stderr.
            let mut dump = |pass: Pass, cx: &Context<'_>| {
                if print_ir_after.contains(&pass) {
                    use std::io::Write;
                    let _ = std::io::stderr().write_all(memplan::passes::dump::dump(pass, cx).as_bytes());
                }
            };
            let (graph, plan) = source.plan_observed(&graph, &options, &mut dump)?;
            let subject = source.subject(graph, plan);
            let report = Report::new(&subject.graph, &subject.plan);
            emit.sort();
            emit.dedup();
            if emit.is_empty() {
                match format {
                    Format::Text => out!("{}", report::text::render(&report, top)),
                    Format::Json => out!("{}", report::json::render(&subject, &report)),
                }
            } else {
                let outputs: Vec<(Emit, String)> = emit.iter().map(|&e| (e, e.render(&subject, &report, top))).collect();
                let written = report::emit::write(&output, &outputs)
                    .map_err(|e| Failure { message: format!("error: {e}\n"), code: 1 })?;
                for path in written {
                    outln!("wrote {}", path.display());
                }
            }
        }
        Command::Report { file, at, top, by, alignment, passes } => {
            let (name, subject) = load_subject(&file, &passes.options(alignment)?)?;
            let set = report::live::live_set(&subject, at)
                .map_err(|e| Failure { message: format!("error: {name}: {e}\n"), code: 1 })?;
            let by = match by {
                ByArg::Class => GroupBy::Class,
                ByArg::Op => GroupBy::Op,
                ByArg::Loc => GroupBy::Loc,
            };
            out!("{}", report::live::render(&set, &name, by, top));
        }
        Command::Diff { a, b, top, alignment, passes } => {
            let options = passes.options(alignment)?;
            let (name_a, a) = load_subject(&a, &options)?;
            let (name_b, b) = load_subject(&b, &options)?;
            out!("{}", report::diff::render(&a, &b, (&name_a, &name_b), top));
        }
        Command::Run { file, device, steps, seed, weights, save, compare_unplanned, check, passes } => {
            let usage = |message: &str| Err(Failure { message: format!("error: {message}\n"), code: 1 });
            if device == Device::Cuda && !cfg!(feature = "cuda") {
                return usage("memplan was built without the `cuda` feature; rebuild with --features cuda");
            }
            if check && device != Device::Cuda {
                return usage("--check compares a CUDA run with the CPU reference: use it with --device cuda");
            }
            if compare_unplanned && device == Device::Cuda {
                return usage("--compare-unplanned runs on the CPU; with --device cuda use --check");
            }
            let source = Source::read(&file)?;
            let original = source.graph()?;
            let (graph, plan) = source.plan(&original, &passes.options(DEFAULT_ALIGNMENT)?)?;
            #[cfg(feature = "cuda")]
            if device == Device::Cuda {
                return run_cuda(&graph, &plan, steps, initial_args(&graph, seed, weights.as_deref())?, check, save.as_deref());
            }
            let compare = compare_unplanned.then_some(&original);
            run_steps(&graph, &plan, steps, seed, weights.as_deref(), save.as_deref(), compare)?;
        }
        Command::Schedule { file, output } => schedule_graph(&file, output.as_deref())?,
        Command::Alloc { file, capacity, solver, time_limit, output } => {
            alloc(&file, capacity, solver, time_limit, output.as_deref())?;
        }
        Command::Remat { file, budget, checkpoint, time_limit, output } => {
            let limit = std::time::Duration::try_from_secs_f64(time_limit)
                .map_err(|_| Failure { message: format!("error: --time-limit {time_limit}: expected seconds, a number ≥ 0\n"), code: 1 })?;
            let report = cli::remat::run(&file, budget, checkpoint, limit, output.as_deref())
                .map_err(|e| Failure { message: format!("error: {e}\n"), code: e.exit_code() })?;
            out!("{report}");
        }
        Command::Expand { file } => {
            let source = Source::read(&file)?;
            out!("{}", memplan::print(&source.graph()?));
        }
        Command::Print { file } => {
            let source = Source::read(&file)?;
            let graph = memplan::parse(&source.text).map_err(|e| source.failure(&e, 1))?;
            out!("{}", memplan::print(&graph));
        }
    }
    Ok(())
}

/// `memplan schedule`: our order of a Checkmate/Moccasin graph beside its reference orders.
fn schedule_graph(path: &Path, output: Option<&Path>) -> Result<(), Failure> {
    use memplan::solve::order::Effort;
    let fail = |message: String| Failure { message: format!("error: {message}\n"), code: 1 };
    let file = path.display().to_string();
    if let Some(out) = output
        && out.exists()
    {
        return Err(fail(format!("{} exists; memplan never overwrites a file", out.display())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read {file}: {e}")))?;
    let graph = memplan::checkmate::parse(&text).map_err(|e| fail(format!("{file}: {e}")))?;
    let dag = &graph.dag;
    let ids_ascending = dag.smallest_first();
    let reference = graph.reference.as_ref().map(|order| (order, dag.peak(order)));
    let mut baselines: Vec<&[u32]> = Vec::new();
    if let Some((order, Ok(_))) = &reference {
        baselines.push(order);
    }
    baselines.push(&ids_ascending);
    let started = std::time::Instant::now();
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
    if let Some(out) = output {
        let ids: Vec<u64> = found.order.iter().map(|&n| graph.ids[n as usize]).collect();
        let json = serde_json::to_string(&ids).map_err(|e| fail(e.to_string()))?;
        write_new(out, format!("{json}\n").as_bytes()).map_err(|e| fail(format!("cannot write {}: {e}", out.display())))?;
        outln!("wrote {} ({} node ids in execution order)", out.display(), ids.len());
    }
    Ok(())
}

/// `memplan alloc`: place a buffer list, check it, report, write the offsets.
fn alloc(path: &Path, capacity: Option<u64>, solver: SolverArg, time_limit: Duration, output: Option<&Path>) -> Result<(), Failure> {
    use memplan::buffer_list::{parse_buffer_list, write_buffer_list};
    let bad = |message: String| Failure { message: format!("error: {message}\n"), code: 1 };
    // The output is refused before any work: never the input, never an existing file.
    if let Some(out) = output {
        let same = std::fs::canonicalize(out).ok().is_some_and(|o| std::fs::canonicalize(path).ok() == Some(o));
        if same {
            return Err(bad(format!("refusing to write the output over the input file {}", path.display())));
        }
        if out.exists() {
            return Err(bad(format!("{} exists; memplan never overwrites a file (choose another -o)", out.display())));
        }
    }
    let source = Source::read(path)?;
    let list = parse_buffer_list(&source.text).map_err(|e| source.failure(&e, 1))?;
    let mut intervals = Vec::with_capacity(list.len());
    for b in &list {
        let (Ok(first), Ok(last)) = (usize::try_from(b.lower), usize::try_from(b.upper - 1)) else {
            return Err(bad(format!("{}: buffer {}: time steps beyond this machine's word size", source.file, b.id)));
        };
        intervals.push(offsets::Live { first, last, size: b.size });
    }
    let triples: Vec<(usize, usize, u64)> = intervals.iter().map(|l| (l.first, l.last, l.size)).collect();
    let options = offsets::SolveOptions { solver: solver.solver(), capacity, time_limit, search_nodes: u64::MAX };
    let mut log = Vec::new();
    let started = Instant::now();
    let result = offsets::solve_reporting(&intervals, &options, &mut log, &Bar::new());
    let elapsed = started.elapsed();
    let lower = offsets::lower_bound(&intervals).unwrap_or(u64::MAX);
    let (solution, fits) = match result {
        Ok(solution) => (solution, true),
        Err(offsets::SolveError::OverCapacity { best: Some(best), .. }) => (best, false),
        Err(offsets::SolveError::OverCapacity { best: None, .. } | offsets::SolveError::Overflow) => {
            return Err(bad(format!("{}: the sizes or offsets overflow 2^64 - 1 bytes", source.file)));
        }
    };
    if let Err(violations) = memplan::checker::check_offsets(&triples, &solution.offsets, None) {
        let lines: Vec<String> = violations.0.iter().map(|v| name_buffers(&v.to_string(), &list)).collect();
        return Err(Failure {
            message: format!(
                "internal error: the checker rejected the placement of {} (a memplan bug; please report it):\n{}\n",
                source.file,
                lines.join("\n")
            ),
            code: 3,
        });
    }
    let ratio = |arena: u64| if lower == 0 { 1.0 } else { arena as f64 / lower as f64 };
    outln!("{}: {} buffers", source.file, list.len());
    outln!("lower bound: {}", format_bytes(lower));
    outln!("arena:       {}  ratio {:.4}", format_bytes(solution.arena), ratio(solution.arena));
    let chosen = log.iter().find(|a| a.chosen).map_or("-", |a| a.method.name());
    let label = match solver {
        SolverArg::Exact => "exact",
        SolverArg::Auto => "auto",
        SolverArg::Greedy => "greedy",
        SolverArg::BestFit => "bestfit",
    };
    outln!("solver:      {label}: {chosen}");
    for a in &log {
        outln!(
            "  {:<28} arena {:>14}  ratio {:.4}  {:.1} ms{}",
            a.method.name(),
            a.arena,
            ratio(a.arena),
            a.elapsed.as_secs_f64() * 1000.0,
            if a.chosen { "  (kept)" } else { "" }
        );
    }
    outln!(
        "optimal:     {}",
        if solution.proved_optimal { "proved (arena = lower bound)" } else { "not proved (arena above the lower bound)" }
    );
    outln!("time:        {:.1} ms", elapsed.as_secs_f64() * 1000.0);
    if let Some(own) = list.iter().map(|b| b.offset).collect::<Option<Vec<u64>>>() {
        match memplan::checker::check_offsets(&triples, &own, None) {
            Ok(()) => {
                let arena = offsets::arena_of(&intervals, &own).unwrap_or(u64::MAX);
                outln!("file's own placement: {}  ratio {:.4}", format_bytes(arena), ratio(arena));
            }
            Err(v) => outln!("file's own placement: invalid ({} violations, e.g. {})", v.0.len(), name_buffers(&v.0[0].to_string(), &list)),
        }
    }
    if let Some(capacity) = capacity {
        if !fits {
            return Err(Failure {
                message: format!(
                    "error: no placement within the capacity of {} was found in {:.1} ms (time limit {:.1} s); the best arena is {}{}\n",
                    format_bytes(capacity),
                    elapsed.as_secs_f64() * 1000.0,
                    time_limit.as_secs_f64(),
                    format_bytes(solution.arena),
                    if lower > capacity { " (none exists: the lower bound is above the capacity)" } else { "" }
                ),
                code: 2,
            });
        }
        outln!("capacity:    {}: fits", format_bytes(capacity));
    }
    if let Some(out) = output {
        use std::io::Write;
        let text = write_buffer_list(&list, &solution.offsets);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            return Err(bad(format!("cannot write {}: {e} (memplan never overwrites a file)", out.display())));
        }
        outln!("wrote {}", out.display());
    }
    Ok(())
}

/// Writes `bytes` to a file that must not exist yet.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new().write(true).create_new(true).open(path)?.write_all(bytes)
}

/// A progress bar on stderr for work that may take more than a second: it appears at the
/// first report after one second, and only when stderr is a terminal (never in pipes,
/// files or tests). Dropping it clears it.
struct Bar {
    bar: indicatif::ProgressBar,
    started: std::time::Instant,
    shown: std::cell::Cell<bool>,
}

impl Bar {
    fn new() -> Bar {
        Bar { bar: indicatif::ProgressBar::hidden(), started: std::time::Instant::now(), shown: false.into() }
    }
}

impl memplan::progress::Progress for Bar {
    fn start(&self, what: &str, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_prefix(what.to_string());
        if let Ok(style) = indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {wide_msg} {elapsed}") {
            self.bar.set_style(style.progress_chars("=> "));
        }
    }

    fn update(&self, done: u64, note: &str) {
        if !self.shown.get() && self.started.elapsed().as_secs() >= 1 && std::io::stderr().is_terminal() {
            self.bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            self.shown.set(true);
        }
        self.bar.set_position(done);
        self.bar.set_message(note.to_string());
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// `text` (a check_offsets violation) with each `#i` followed by buffer i's id in the file.
fn name_buffers(text: &str, list: &[memplan::buffer_list::ListedBuffer]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('#') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        out.push_str(&rest[..digits]);
        if let Some(b) = rest[..digits].parse::<usize>().ok().and_then(|i| list.get(i)) {
            out.push_str(&format!(" (id `{}`)", b.id));
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

fn exec_failure(error: memplan::exec::ExecError) -> Failure {
    Failure { message: format!("error: {error}\n"), code: 1 }
}

/// `memplan run`: trains for `steps` steps in the planned arena, printing each loss;
/// `compare_unplanned`: the step as written, run unplanned beside each planned step.
fn run_steps(
    graph: &Graph,
    plan: &Plan,
    steps: u32,
    seed: u64,
    weights: Option<&Path>,
    save: Option<&Path>,
    compare_unplanned: Option<&Graph>,
) -> Result<(), Failure> {
    use memplan::exec::cpu::{Placement, advance, run_step};

    let mut args = initial_args(graph, seed, weights)?;
    outln!(
        "@{}: {} ops in one arena of {}; {} step(s) on the CPU",
        graph.name,
        graph.ops.len(),
        format_bytes(plan.arena_bytes),
        steps
    );
    let bar = Bar::new();
    bar.start("training steps", u64::from(steps));
    for step in 1..=steps {
        let result = run_step(graph, Placement::Planned(plan), &args).map_err(exec_failure)?;
        let line = match result.loss() {
            Some(loss) => format!("step {step}: loss {loss:.6}"),
            None => format!("step {step}: done (no scalar loss returned)"),
        };
        bar.bar.suspend(|| outln!("{line}"));
        bar.update(u64::from(step), &line);
        if let Some(original) = compare_unplanned {
            let reference = run_step(original, Placement::Unplanned, &args).map_err(exec_failure)?;
            let differences = result.differences(&reference);
            if !differences.is_empty() {
                return Err(Failure {
                    message: format!(
                        "error: step {step}: the planned run differs from the unplanned run (a memplan bug):\n  {}\n",
                        differences.join("\n  ")
                    ),
                    code: 3,
                });
            }
        }
        args = advance(&args, &result);
    }
    bar.finish();
    if compare_unplanned.is_some() {
        outln!(
            "planned and unplanned runs agree bit for bit: {} returned value(s) and {} updated param/state tensor(s) in each of {steps} step(s)",
            graph.returns.len(),
            graph.updates.len()
        );
    }
    if let Some(path) = save {
        save_args(graph, &args, path)?;
    }
    Ok(())
}

/// Seeded arguments of `graph`, the ones in `weights` (a safetensors file) replaced.
fn initial_args(graph: &Graph, seed: u64, weights: Option<&Path>) -> Result<memplan::exec::data::Tensors, Failure> {
    use memplan::exec::data::{init_args, load_safetensors};
    let mut args = init_args(graph, seed);
    if let Some(path) = weights {
        for (name, tensor) in load_safetensors(path).map_err(exec_failure)? {
            match args.get_mut(&name) {
                Some(slot) if slot.ty == tensor.ty => *slot = tensor,
                Some(slot) => {
                    return Err(Failure {
                        message: format!("error: {}: %{name} is {} but the step declares {}\n", path.display(), tensor.ty, slot.ty),
                        code: 1,
                    });
                }
                None => eprintln!("note: {}: %{name} is not an argument of @{}; ignored", path.display(), graph.name),
            }
        }
    }
    Ok(args)
}

/// Writes the params and state of `args` to a new safetensors file.
fn save_args(graph: &Graph, args: &memplan::exec::data::Tensors, path: &Path) -> Result<(), Failure> {
    let persistent = graph
        .args
        .iter()
        .filter(|&&a| graph.role(a).is_some_and(|r| r.persists()))
        .map(|&a| {
            let name = &graph.values[a].name;
            (name.clone(), args[name].clone())
        })
        .collect();
    memplan::exec::data::save_safetensors(path, &persistent).map_err(exec_failure)?;
    outln!("saved params and state to {}", path.display());
    Ok(())
}

/// `memplan run --device cuda`: see `memplan::exec::cuda::run`. Exit 1 when the GPU cannot
/// run the step (no driver included), 3 when `--check` finds a difference.
#[cfg(feature = "cuda")]
fn run_cuda(
    graph: &Graph,
    plan: &Plan,
    steps: u32,
    args: memplan::exec::data::Tensors,
    check: bool,
    save: Option<&Path>,
) -> Result<(), Failure> {
    use memplan::exec::cuda::run::{RunError, run_steps};
    match run_steps(graph, plan, args, steps, check, save.is_some(), &mut |line| outln!("{line}")) {
        Ok(kept) => match (save, kept) {
            (Some(path), Some(args)) => save_args(graph, &args, path),
            _ => Ok(()),
        },
        Err(e @ RunError::CheckFailed { .. }) => Err(Failure { message: format!("error: {e}\n"), code: 3 }),
        Err(e) => Err(Failure { message: format!("error: {e}\n"), code: 1 }),
    }
}
