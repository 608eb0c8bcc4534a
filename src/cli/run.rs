//! `memplan run FILE`: train for N steps on real numbers inside the planned arena, on the
//! CPU reference executor (`--compare-unplanned` proves the plan changes nothing but
//! memory) or on an NVIDIA GPU (`--device cuda`, built with `--features cuda`; `--check`
//! holds every step to the CPU reference). Weights come in and go out as safetensors.

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use memplan::bytes::format_bytes;
use memplan::exec::ExecError;
use memplan::exec::cpu::{Footprint, Placement, run_step};
use memplan::exec::data::{Tensors, init_args};
use memplan::formats::safetensors;
use memplan::ir::graph::Graph;
use memplan::plan::{DEFAULT_ALIGNMENT, Plan};
use memplan::progress::Progress;

use super::bar::Bar;
use super::files::{read_bytes, refuse_existing, write_new};
use super::flags::PassFlags;
use super::step::Source;
use super::{Exit, Failure, outln};

#[derive(clap::Args)]
pub struct Args {
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
    /// With --device cuda: after the steps, time one more step op by op and print the GPU time by op kind and the slowest ops.
    #[arg(long)]
    profile: bool,
    #[command(flatten)]
    passes: PassFlags,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Device {
    /// The CPU reference executor.
    Cpu,
    /// An NVIDIA GPU through CUDA.
    Cuda,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let Args { file, device, steps, seed, weights, save, compare_unplanned, check, profile, passes } = args;
    if device == Device::Cuda && !cfg!(feature = "cuda") {
        return Err(Failure::bad_input("memplan was built without the `cuda` feature; rebuild with --features cuda"));
    }
    if check && device != Device::Cuda {
        return Err(Failure::bad_input("--check compares a CUDA run with the CPU reference: use it with --device cuda"));
    }
    if profile && device != Device::Cuda {
        return Err(Failure::bad_input("--profile times the ops on the GPU: use it with --device cuda"));
    }
    if compare_unplanned && device == Device::Cuda {
        return Err(Failure::bad_input("--compare-unplanned runs on the CPU; with --device cuda use --check"));
    }
    // The output is refused before any step runs, not after the last.
    if let Some(path) = &save {
        refuse_existing(path)?;
    }
    let source = Source { expand: passes.expand_options(), ..Source::read(&file)? };
    let original = source.graph()?;
    // Another framework's ops can be planned but not run: say so before planning.
    memplan::exec::refuse_extern(&original).map_err(exec_failure)?;
    let (graph, plan) = source.plan(original.clone(), &passes.options(DEFAULT_ALIGNMENT)?)?;
    #[cfg(feature = "cuda")]
    if device == Device::Cuda {
        let args = initial_args(&graph, seed, weights.as_deref()).map_err(|e| e.shown(&source))?;
        return run_cuda(&graph, &plan, steps, args, check, profile, save.as_deref());
    }
    let compare = compare_unplanned.then_some(&original);
    let footprint = fits_in_memory(&graph, &plan, compare, available_memory())?;
    let args = initial_args(&graph, seed, weights.as_deref()).map_err(|e| e.shown(&source))?;
    run_steps(&graph, &plan, steps, args, save.as_deref(), compare, footprint).map_err(|e| e.shown(&source))
}

fn exec_failure(error: ExecError) -> Failure {
    Failure::bad_input(error)
}

/// A failure of the CPU run: an executor's error (shown against the step's file, so an
/// op's error is located) or any other.
enum RunFailure {
    Exec(ExecError),
    Other(Failure),
}

impl From<Failure> for RunFailure {
    fn from(failure: Failure) -> RunFailure {
        RunFailure::Other(failure)
    }
}

impl From<ExecError> for RunFailure {
    fn from(error: ExecError) -> RunFailure {
        RunFailure::Exec(error)
    }
}

impl RunFailure {
    fn shown(self, source: &Source) -> Failure {
        match self {
            RunFailure::Exec(error) => source.failure(&error, Exit::BadInput),
            RunFailure::Other(failure) => failure,
        }
    }
}

/// What the CPU run holds at most (the planned run's footprint, or with
/// `compare_unplanned` the larger of the two runs plus the planned run's results, kept
/// for the comparison), refused when it is more than `available` bytes or past 2^64 - 1,
/// before anything is allocated.
fn fits_in_memory(graph: &Graph, plan: &Plan, compare_unplanned: Option<&Graph>, available: Option<Available>) -> Result<Footprint, Failure> {
    let too_large = |what: &str| Failure::bad_input(format_args!("running @{} on the CPU is too large: {what} needs more than 2^64 - 1 bytes", graph.name));
    let planned = Footprint::of(graph, Placement::Planned(plan)).ok_or_else(|| too_large("a value"))?;
    let mut needed = planned.total().ok_or_else(|| too_large("the run"))?;
    if let Some(original) = compare_unplanned {
        let unplanned = Footprint::of(original, Placement::Unplanned).and_then(|f| f.total()).ok_or_else(|| too_large("the unplanned run"))?;
        needed = needed.max(unplanned).checked_add(planned.results).ok_or_else(|| too_large("the comparison"))?;
    }
    match available {
        Some(available) if needed > available.bytes => Err(Failure::bad_input(format_args!(
            "running @{} on the CPU needs {}{}, but {} is available ({})\n  hint: the CPU executor holds {}; --budget shrinks the arena",
            graph.name,
            format_bytes(needed),
            if compare_unplanned.is_some() { " with --compare-unplanned" } else { "" },
            format_bytes(available.bytes),
            available.source,
            describe(&planned)
        ))),
        _ => Ok(planned),
    }
}

/// The parts of a footprint, for people.
fn describe(footprint: &Footprint) -> String {
    format!(
        "the arena ({}), the arguments ({}), the largest op's inputs and outputs as f64 numbers ({}) and the results ({})",
        format_bytes(footprint.memory),
        format_bytes(footprint.args),
        format_bytes(footprint.op),
        format_bytes(footprint.results)
    )
}

/// The bytes this process may still allocate, and what limits them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Available {
    bytes: u64,
    /// Where the figure comes from, for people.
    source: &'static str,
}

/// The bytes this process may still allocate, as Linux tells: `MemAvailable` in
/// /proc/meminfo, less under a cgroup v2 memory limit, less under an address-space limit
/// (`ulimit -v`: the limit less what the process has mapped already); `None` where none is
/// known.
fn available_memory() -> Option<Available> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let number = |text: &str| text.trim().parse::<u64>().ok();
    let meminfo = read("/proc/meminfo").and_then(|text| kib_field(&text, "MemAvailable:"));
    let cgroup = read("/sys/fs/cgroup/memory.max")
        .and_then(|max| number(&max))
        .zip(read("/sys/fs/cgroup/memory.current").and_then(|used| number(&used)))
        .map(|(max, used)| max.saturating_sub(used));
    let mapped = read("/proc/self/status").and_then(|text| kib_field(&text, "VmSize:"));
    let address_space = read("/proc/self/limits").and_then(|text| address_space_limit(&text)).map(|limit| limit.saturating_sub(mapped.unwrap_or(0)));
    [
        (meminfo, "MemAvailable in /proc/meminfo"),
        (cgroup, "the cgroup's memory.max less its memory.current"),
        (address_space, "the address-space limit (`ulimit -v`) less what this process has mapped"),
    ]
    .into_iter()
    .filter_map(|(bytes, source)| bytes.map(|bytes| Available { bytes, source }))
    .min_by_key(|a| a.bytes)
}

/// A `NAME:   N kB` line of /proc/meminfo or /proc/PID/status, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let kib = text.lines().find_map(|line| line.strip_prefix(name))?.trim().strip_suffix("kB")?.trim();
    kib.parse::<u64>().ok().map(|kib| kib.saturating_mul(1024))
}

/// The soft address-space limit in /proc/PID/limits (`Max address space  SOFT  HARD
/// bytes`), in bytes; `None` when unlimited.
fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find_map(|line| line.strip_prefix("Max address space"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Trains for `steps` steps in the planned arena from `args`, printing each loss;
/// `compare_unplanned`: the step as written, run unplanned beside each planned step.
fn run_steps(
    graph: &Graph,
    plan: &Plan,
    steps: u32,
    mut args: Tensors,
    save: Option<&Path>,
    compare_unplanned: Option<&Graph>,
    footprint: Footprint,
) -> Result<(), RunFailure> {
    outln!("@{}: {} ops in one arena of {}; {} step(s) on the CPU", graph.name, graph.ops.len(), format_bytes(plan.arena_bytes), steps);
    // The footprint's parts fit in 2^64 - 1 together: `fits_in_memory` added them up.
    outln!("CPU memory: {} in all: {}", format_bytes(footprint.total().unwrap_or(u64::MAX)), describe(&footprint));
    let bar = Bar::new();
    bar.start("training steps", u64::from(steps));
    for step in 1..=steps {
        let result = run_step(graph, Placement::Planned(plan), &args)?;
        let line = match result.loss() {
            // Every digit of the loss's value (f32, or a bf16/f16 value f32 holds exactly):
            // the shortest decimal that reads back as it, so a comparison sees all of it.
            Some(loss) => format!("step {step}: loss {}", loss as f32),
            None => format!("step {step}: done (no scalar loss returned)"),
        };
        bar.suspend(|| outln!("{line}"));
        bar.update(u64::from(step), &line);
        if let Some(original) = compare_unplanned {
            let reference = run_step(original, Placement::Unplanned, &args)?;
            let differences = result.differences(&reference);
            if !differences.is_empty() {
                return Err(RunFailure::Other(Failure::error(
                    Exit::Bug,
                    format_args!(
                        "step {step}: the planned run differs from the unplanned run (a memplan bug):\n  {}",
                        differences.join("\n  ")
                    ),
                )));
            }
        }
        // In place: a copy of every argument would be held beside the old ones.
        for (name, tensor) in result.updated {
            args.insert(name, tensor);
        }
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
fn initial_args(graph: &Graph, seed: u64, weights: Option<&Path>) -> Result<Tensors, RunFailure> {
    let mut args = init_args(graph, seed)?;
    if let Some(path) = weights {
        let tensors = safetensors::from_bytes(&read_bytes(path)?).map_err(|e| Failure::bad_input(format_args!("{}: {e}", path.display())))?;
        for (name, tensor) in tensors {
            match args.get_mut(&name) {
                Some(slot) if slot.ty == tensor.ty => *slot = tensor,
                Some(slot) => {
                    return Err(RunFailure::Other(Failure::bad_input(format_args!(
                        "{}: %{name} is {} but the step declares {}",
                        path.display(),
                        tensor.ty,
                        slot.ty
                    ))));
                }
                None => eprintln!("note: {}: %{name} is not an argument of @{}; ignored", path.display(), graph.name),
            }
        }
    }
    Ok(args)
}

/// Writes the params and state of `args` to a new safetensors file.
fn save_args(graph: &Graph, args: &Tensors, path: &Path) -> Result<(), Failure> {
    let persistent: Tensors = graph
        .args
        .iter()
        .filter(|&&a| graph.role(a).is_some_and(|r| r.persists()))
        .map(|&a| {
            let name = &graph.values[a].name;
            (name.clone(), args[name].clone())
        })
        .collect();
    write_new(path, &safetensors::to_bytes(&persistent))?;
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
    args: Tensors,
    check: bool,
    profile: bool,
    save: Option<&Path>,
) -> Result<(), Failure> {
    use memplan::exec::cuda::run::{RunError, RunOptions, run_steps};
    let options = RunOptions { steps, check, keep: save.is_some(), profile };
    match run_steps(graph, plan, args, options, &mut |line| outln!("{line}")) {
        Ok(kept) => match (save, kept) {
            (Some(path), Some(args)) => save_args(graph, &args, path),
            _ => Ok(()),
        },
        Err(e @ RunError::CheckFailed { .. }) => Err(Failure::error(Exit::Bug, e)),
        Err(e) => Err(Failure::bad_input(e)),
    }
}
