//! The `memplan` command line (docs/CLI.md): the arguments parsed, each command run by its
//! module in `src/cli/`, the exit status decided by [`cli::Exit`].
//!
//! Every command that needs a full step expands a forward-only one first (parse → verify →
//! autodiff → verify → passes). Errors go to stderr with file:line:col, a label and a hint.
//!
//! The process allocates with mimalloc and keeps freed memory for reuse (see `main`): the
//! library itself uses whatever allocator its caller has.

mod cli;

/// mimalloc (see Cargo.toml for why): glibc's malloc was a third of planning a
/// 1,000,000-op step.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (the same in its v2 and v3): how long freed memory
/// waits before it goes back to the OS.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Check(cli::check::Args),
    /// Plan a step and print the report: arena, lower bound, peak, bytes by class, buffers.
    Plan(cli::plan::Args),
    /// What is live at one step (the peak by default), grouped by class, op or source line, with cumulative bytes.
    Report(cli::report::Args),
    /// Compare two plans (two .step files, two plan JSONs, or one of each): figures, classes, values that changed most.
    Diff(cli::diff::Args),
    /// Place a bare buffer list (minimalloc's CSV: `id,lower,upper,size`, live on [lower, upper)) in one arena.
    ///
    /// Solves, checks the placement independently, prints the lower bound, arena, ratio,
    /// time and solver, and writes the list with an `offset` column to a NEW file (-o).
    /// An `offset` column in the input (IREE's lists have one) is ignored for solving and
    /// reported as "file's own placement". Exit 2 when no placement within --capacity was
    /// found in the time limit.
    Alloc(cli::alloc::Args),
    /// Run a step on real numbers inside its planned arena, for one or more training steps.
    Run(cli::run::Args),
    /// Find a low-peak order of a Checkmate/Moccasin graph (node-link JSON) and compare it with the file's reference order and ids ascending.
    Schedule(cli::schedule::Args),
    /// Choose what to recompute in a Checkmate/Moccasin graph so that its peak fits a budget, at the least extra compute.
    Remat(cli::remat::Args),
    /// Read a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot): reserved and allocated peaks, what is live there and from which lines, fragmentation, and the arena an ideal placement of the same allocations needs.
    Snapshot(cli::snapshot::Args),
    /// Expand a forward-only step (`backward %loss with ...`) and print the full step in canonical form.
    Expand(cli::expand::Args),
    /// Print a step in canonical form.
    Print(cli::print::Args),
    /// Replay a trace of PyTorch's tensor allocations through a model of its CUDA caching allocator: max_memory_allocated, max_memory_reserved, segments, and memplan's arena for the same allocations.
    Replay(cli::replay::Args),
}

fn main() -> ExitCode {
    // A command is one short batch job whose passes free million-entry tables and build
    // new ones: handed back after mimalloc's default 10 ms, their pages were faulted in
    // and zeroed again by the kernel (a quarter of planning a 1,000,000-op step). Kept
    // instead (`MIMALLOC_PURGE_DELAY` in the environment still decides, if set).
    // SAFETY: sets one of mimalloc's documented options to a documented value (-1: never
    // purge), before this process starts a second thread (mimalloc reads options without
    // locks).
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, -1) };
    // A usage error is bad input (exit 1): clap's own status 2 means "capacity not met" here.
    let parsed = match Cli::try_parse() {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(cli::Exit::BadInput as u8) } else { ExitCode::SUCCESS };
        }
    };
    let result = match parsed.command {
        Command::Check(args) => cli::check::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Report(args) => cli::report::run(args),
        Command::Diff(args) => cli::diff::run(args),
        Command::Alloc(args) => cli::alloc::run(args),
        Command::Run(args) => cli::run::run(args),
        Command::Schedule(args) => cli::schedule::run(args),
        Command::Remat(args) => cli::remat::run(args),
        Command::Snapshot(args) => cli::snapshot::run(args),
        Command::Expand(args) => cli::expand::run(args),
        Command::Print(args) => cli::print::run(args),
        Command::Replay(args) => cli::replay::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprint!("{}", failure.message);
            ExitCode::from(failure.exit as u8)
        }
    }
}
