//! `memplan alloc FILE.csv`: place a bare buffer list (minimalloc's CSV: `id,lower,upper,size`,
//! live on `[lower, upper)`) in one arena, check the placement independently, report, and
//! write the offsets to a new file.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use memplan::bytes::format_bytes;
use memplan::formats::buffer_list::{ListedBuffer, parse_buffer_list, write_buffer_list};
use memplan::solve::offsets::{self, Live, SolveError, SolveOptions};

use super::bar::Bar;
use super::files::{refuse_existing, write_new};
use super::flags::{SolverArg, parse_seconds};
use super::step::Source;
use super::{Exit, Failure, outln};

#[derive(clap::Args)]
pub struct Args {
    /// The CSV file.
    file: PathBuf,
    /// The arena must fit in N bytes (exit 2 if no such placement is found).
    #[arg(long, value_name = "N")]
    capacity: Option<u64>,
    /// Offset solver.
    #[arg(long, value_enum, default_value_t = SolverArg::Auto)]
    solver: SolverArg,
    /// Seconds the command may take with auto and exact, from reading the file to writing the placement: the solver stops early enough to leave time for checking and writing (estimated from how long the lower bound took); a heuristic stops once a placement exists (on 100,000 buffers or more one is made first, online).
    #[arg(long = "time-limit", value_name = "SECS", default_value = "10", value_parser = parse_seconds)]
    time_limit: Duration,
    /// Write the list with an `offset` column to this new file (never overwritten; not the input).
    #[arg(short = 'o', long = "output", value_name = "OUT.csv")]
    output: Option<PathBuf>,
}

/// Places the list, checks the placement, reports, writes the offsets.
pub fn run(Args { file, capacity, solver, time_limit, output }: Args) -> Result<(), Failure> {
    // The limit counts from here: reading the list is part of the time it promises.
    let command_started = Instant::now();
    let path = file.as_path();
    // The output is refused before any work: never the input, never an existing file.
    if let Some(out) = &output {
        let same = std::fs::canonicalize(out).ok().is_some_and(|o| std::fs::canonicalize(path).ok() == Some(o));
        if same {
            return Err(Failure::bad_input(format_args!("refusing to write the output over the input file {}", path.display())));
        }
        refuse_existing(out)?;
    }
    let source = Source::read(path)?;
    let list = parse_buffer_list(&source.text).map_err(|e| source.failure(&e, Exit::BadInput))?;
    let mut intervals = Vec::with_capacity(list.len());
    for b in &list {
        let (Ok(first), Ok(last)) = (usize::try_from(b.lower), usize::try_from(b.upper - 1)) else {
            return Err(Failure::bad_input(format_args!("{}:{}: buffer {}: time steps beyond this machine's word size", source.file, b.line, b.id)));
        };
        intervals.push(Live { first, last, size: b.size });
    }
    let triples: Vec<(usize, usize, u64)> = intervals.iter().map(|l| (l.first, l.last, l.size)).collect();
    let too_large = |lower: Option<u64>| {
        Failure::bad_input(match (overflowing_row(&list), lower) {
            (Some((b, step)), _) => {
                format!("{}:{}: buffer {}: the buffers live at step {step} add up to more than 2^64 - 1 bytes with it: too large", source.file, b.line, b.id)
            }
            (None, Some(lower)) => {
                format!("{}: no placement found that ends below 2^64 - 1 bytes (the lower bound is {})", source.file, format_bytes(lower))
            }
            (None, None) => format!("{}: the buffers live at one step add up to more than 2^64 - 1 bytes: too large", source.file),
        })
    };
    // The lower bound is a sort and a sweep over the list, as the check is: how long it
    // took says how long to leave for checking (and writing) after the solver stops;
    // and heuristics stop a little after the solver's limit.
    let lower_started = Instant::now();
    let lower = offsets::lower_bound(&intervals).ok_or_else(|| too_large(None))?;
    let reserve = lower_started.elapsed().saturating_mul(if output.is_some() { CHECK_RESERVE + WRITE_RESERVE } else { CHECK_RESERVE })
        + time_limit / LATE_SHARE;
    let left = time_limit.saturating_sub(command_started.elapsed().saturating_add(reserve));
    let options = SolveOptions { solver: solver.solver(), capacity, time_limit: left, search_nodes: u64::MAX, halt_heuristics: true };
    let mut log = Vec::new();
    let started = Instant::now();
    let result = offsets::solve_reporting(&intervals, lower, &options, &mut log, &Bar::new());
    let elapsed = started.elapsed();
    let (solution, fits) = match result {
        Ok(solution) => (solution, true),
        Err(SolveError::OverCapacity { best: Some(best), .. }) => (best, false),
        Err(SolveError::OverCapacity { best: None, .. } | SolveError::Overflow) => return Err(too_large(Some(lower))),
    };
    if let Err(violations) = memplan::checker::check_offsets(&triples, &solution.offsets, None) {
        let lines: Vec<String> = violations.0.iter().map(|v| name_buffers(&v.to_string(), &list)).collect();
        return Err(Failure::bug(format_args!("the checker rejected the placement of {}", source.file), format_args!("{}\n", lines.join("\n"))));
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
            Ok(()) => match offsets::arena_of(&intervals, &own) {
                Some(arena) => outln!("file's own placement: {}  ratio {:.4}", format_bytes(arena), ratio(arena)),
                None => outln!("file's own placement: too large (it ends past 2^64 - 1 bytes)"),
            },
            Err(v) => outln!("file's own placement: invalid ({} violations, e.g. {})", v.0.len(), name_buffers(&v.0[0].to_string(), &list)),
        }
    }
    // A limit shorter than what reading, one placement and checking take cannot be kept:
    // say so rather than pass it silently.
    let took = command_started.elapsed();
    if matches!(solver, SolverArg::Auto | SolverArg::Exact) && took.as_secs_f64() > time_limit.as_secs_f64() * 1.1 {
        eprintln!(
            "note: alloc took {:.1} s, past its time limit of {:.1} s: reading {} buffers, placing them once and checking the placement take that long here",
            took.as_secs_f64(),
            time_limit.as_secs_f64(),
            list.len()
        );
    }
    if let Some(capacity) = capacity {
        if !fits {
            return Err(Failure::error(
                Exit::Unmet,
                format_args!(
                    "no placement within the capacity of {} was found in {:.1} ms (time limit {:.1} s); the best arena is {}{}",
                    format_bytes(capacity),
                    elapsed.as_secs_f64() * 1000.0,
                    time_limit.as_secs_f64(),
                    format_bytes(solution.arena),
                    if lower > capacity { " (none exists: the lower bound is above the capacity)" } else { "" }
                ),
            ));
        }
        outln!("capacity:    {}: fits", format_bytes(capacity));
    }
    if let Some(out) = &output {
        write_new(out, write_buffer_list(&list, &solution.offsets).as_bytes())?;
        outln!("wrote {}", out.display());
    }
    Ok(())
}

/// How many times the lower bound's time alloc leaves for checking the placement after
/// the solver stops (and for writing it, with `-o`, as many again as [`WRITE_RESERVE`]):
/// on lists of 2,000,000 buffers checking took 4 to 5.5 times as long as the lower bound,
/// writing 2 to 3 times (benches/BENCHMARKS.md, "Scale (issue 21)"). Generous, as the
/// limit is a promise: the solver also notices it a little late, and this machine's speed
/// drifts.
const CHECK_RESERVE: u32 = 8;
const WRITE_RESERVE: u32 = 4;

/// The share of the limit (1 / this) left besides for heuristics that notice the limit
/// late: they look at the clock between buffers and between the steps of their set-up (a
/// sort of millions of buffers is one step), and the solver waits for them to stop.
const LATE_SHARE: u32 = 20;

/// `text` (a check_offsets violation) with each `#i` followed by buffer i's id in the file.
/// The first buffer, by its first step, whose size makes the bytes live at that step
/// overflow a `u64`, and the step (the rows that make the lower bound overflow).
fn overflowing_row(list: &[ListedBuffer]) -> Option<(&ListedBuffer, u64)> {
    let mut by_start: Vec<&ListedBuffer> = list.iter().collect();
    by_start.sort_by_key(|b| b.lower);
    // Live buffers by their end (first step no longer live), and their bytes.
    let mut live = std::collections::BinaryHeap::new();
    let mut bytes = 0u64;
    for b in by_start {
        while let Some(&std::cmp::Reverse((upper, size))) = live.peek() {
            if upper > b.lower {
                break;
            }
            live.pop();
            bytes -= size;
        }
        bytes = match bytes.checked_add(b.size) {
            Some(sum) => sum,
            None => return Some((b, b.lower)),
        };
        live.push(std::cmp::Reverse((b.upper, b.size)));
    }
    None
}

fn name_buffers(text: &str, list: &[ListedBuffer]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_name_the_buffers_by_their_ids() {
        let list = parse_buffer_list("id,lower,upper,size\na,0,2,4\nb,1,3,4\n").unwrap();
        assert_eq!(name_buffers("#0 and #1 overlap; #7 is not listed", &list), "#0 (id `a`) and #1 (id `b`) overlap; #7 is not listed");
    }
}
