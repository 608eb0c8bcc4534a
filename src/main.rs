//! The `memplan` command line. See docs/CLI.md.
//!
//! Exit status: 0 success; 1 bad input (unreadable file, parse or verify errors, a step
//! that cannot be planned); 3 the checker rejected a plan memplan made (always a memplan
//! bug: please report it). Errors go to stderr with file:line:col, a label and a hint.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use memplan::diagnostics;
use memplan::ir::graph::Graph;
use memplan::passes::PlanOptions;
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
    /// Parse and verify a step, plan it and run the independent checker on the plan.
    Check {
        /// The .step file.
        file: PathBuf,
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
    },
    /// Print a step in canonical form.
    Print {
        /// The .step file.
        file: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
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

    fn graph(&self) -> Result<Graph, Failure> {
        let graph = memplan::parse(&self.text).map_err(|e| self.failure(&e, 1))?;
        memplan::verify(&graph).map_err(|e| self.failure(&e, 1))?;
        Ok(graph)
    }

    /// Plans `graph` and checks the plan independently.
    fn plan(&self, graph: &Graph, options: &PlanOptions) -> Result<Plan, Failure> {
        let plan = memplan::plan(graph, options).map_err(|e| self.failure(&e, 1))?;
        memplan::check(graph, &plan).map_err(|violations| Failure {
            message: format!(
                "internal error: the checker rejected the plan of {} (a memplan bug; please report it):\n{violations}\n",
                self.file
            ),
            code: 3,
        })?;
        Ok(plan)
    }
}

fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Check { file } => {
            let source = Source::read(&file)?;
            let graph = source.graph()?;
            let plan = source.plan(&graph, &PlanOptions::default())?;
            println!(
                "ok: {}: step @{} ({} args, {} ops) is valid; its plan ({}) passes the checker",
                source.file,
                graph.name,
                graph.args.len(),
                graph.ops.len(),
                report::format_bytes(plan.arena_bytes)
            );
        }
        Command::Plan { file, format, alignment, top } => {
            let source = Source::read(&file)?;
            let graph = source.graph()?;
            let options = PlanOptions { alignment, ..PlanOptions::default() };
            let plan = source.plan(&graph, &options)?;
            let report = Report::new(&graph, &plan);
            match format {
                Format::Text => print!("{}", report::text::render(&report, top)),
                Format::Json => print!("{}", report::json::render(&report)),
            }
        }
        Command::Print { file } => {
            let source = Source::read(&file)?;
            let graph = memplan::parse(&source.text).map_err(|e| source.failure(&e, 1))?;
            print!("{}", memplan::print(&graph));
        }
    }
    Ok(())
}
