//! The `memplan` command line. See docs/CLI.md.
//!
//! Every command that needs a full step expands a forward-only one first (parse → verify →
//! autodiff → verify → passes).
//!
//! Exit status: 0 success; 1 bad input (unreadable file, parse or verify errors, a step
//! that cannot be differentiated or planned); 2 a `--budget` that cannot be met (the message
//! says the smallest budget that works); 3 the checker rejected a plan memplan made,
//! or an expanded step does not verify (always a memplan bug: please report it). Errors go to stderr with file:line:col, a label and a hint.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use memplan::diagnostics;
use memplan::ir::graph::Graph;
use memplan::passes::{PlanOptions, ScheduleKind};
use memplan::plan::{DEFAULT_ALIGNMENT, Plan};
use memplan::report::{self, Report};
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
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Offset alignment in bytes (a power of two).
        #[arg(long = "align", default_value_t = DEFAULT_ALIGNMENT, value_name = "N")]
        alignment: u64,
        /// How many live values to list at the peak (text format).
        #[arg(long, default_value_t = 20, value_name = "N")]
        top: usize,
        #[command(flatten)]
        passes: PassFlags,
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
        Ok(PlanOptions { alignment, schedule, inplace: !self.no_inplace, budget, checkpoint, ..defaults })
    }
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Device {
    /// The CPU reference executor.
    Cpu,
    /// An NVIDIA GPU through CUDA.
    Cuda,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
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
    let cli = Cli::parse();
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
        let (graph, plan) = memplan::passes::plan_step(graph, options).map_err(|e| {
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
                report::format_bytes(plan.arena_bytes)
            );
        }
        Command::Plan { file, format, alignment, top, passes } => {
            let source = Source::read(&file)?;
            let graph = source.graph()?;
            let options = passes.options(alignment)?;
            let (graph, plan) = source.plan(&graph, &options)?;
            let report = Report::new(&graph, &plan);
            match format {
                Format::Text => out!("{}", report::text::render(&report, top)),
                Format::Json => out!("{}", report::json::render(&report)),
            }
        }
        Command::Run { file, device, steps, seed, weights, save, compare_unplanned, passes } => {
            if device == Device::Cuda {
                return Err(Failure {
                    message: "error: this memplan was built without the `cuda` feature; run with --device cpu\n".into(),
                    code: 1,
                });
            }
            let source = Source::read(&file)?;
            let original = source.graph()?;
            let (graph, plan) = source.plan(&original, &passes.options(DEFAULT_ALIGNMENT)?)?;
            let compare = compare_unplanned.then_some(&original);
            run_steps(&graph, &plan, steps, seed, weights.as_deref(), save.as_deref(), compare)?;
        }
        Command::Schedule { file, output } => schedule_graph(&file, output.as_deref())?,
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
    use memplan::passes::schedule::dag::Effort;
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
    outln!("  {:15} {:>30}   (found by {method})", "ours", report::format_bytes(found.peak));
    let row = |label: &str, peak: u64| {
        let ratio = if peak == 0 { 1.0 } else { found.peak as f64 / peak as f64 };
        outln!("  {label:15} {:>30}   ours / this {ratio:.4}", report::format_bytes(peak));
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

/// Writes `bytes` to a file that must not exist yet.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new().write(true).create_new(true).open(path)?.write_all(bytes)
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
    use memplan::exec::data::{init_args, load_safetensors, save_safetensors};

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
    outln!(
        "@{}: {} ops in one arena of {}; {} step(s) on the CPU",
        graph.name,
        graph.ops.len(),
        report::format_bytes(plan.arena_bytes),
        steps
    );
    for step in 1..=steps {
        let result = run_step(graph, Placement::Planned(plan), &args).map_err(exec_failure)?;
        match result.loss() {
            Some(loss) => outln!("step {step}: loss {loss:.6}"),
            None => outln!("step {step}: done (no scalar loss returned)"),
        }
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
    if compare_unplanned.is_some() {
        outln!(
            "planned and unplanned runs agree bit for bit: {} returned value(s) and {} updated param/state tensor(s) in each of {steps} step(s)",
            graph.returns.len(),
            graph.updates.len()
        );
    }
    if let Some(path) = save {
        let persistent = graph
            .args
            .iter()
            .filter(|&&a| graph.role(a).is_some_and(|r| r.persists()))
            .map(|&a| {
                let name = &graph.values[a].name;
                (name.clone(), args[name].clone())
            })
            .collect();
        save_safetensors(path, &persistent).map_err(exec_failure)?;
        outln!("saved params and state to {}", path.display());
    }
    Ok(())
}
