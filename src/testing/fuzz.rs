//! A seeded mutation fuzzer over memplan's input formats, on stable Rust (no nightly, no
//! sanitizer runtime): the hunt for panics, hangs and silent wrong answers made permanent.
//!
//! Each [`Format`] has seed inputs (the corpus: `ir/**/*.step`, and what memplan itself
//! writes from it: buffer lists, plan JSONs, safetensors; small Checkmate graphs made here;
//! the PyTorch memory snapshots under `tests/data/torch_snapshots`),
//! a mutator that damages them the ways hostile or broken files are damaged (bit flips,
//! cuts, splices, repeated lines, words from elsewhere in the corpus, numbers at the edges of
//! every integer type), and a target that pushes the result through the same library calls
//! the command does. The oracles:
//!
//! - no panic anywhere, error rendering included (every error is rendered against its text,
//!   as the CLI shows it);
//! - every plan memplan makes passes the independent checker, and every placement of a
//!   buffer list passes `check_offsets`;
//! - a step that plans round-trips through `print` and `parse`; a small one runs planned
//!   and unplanned with bit-identical results (the CPU executor);
//! - a recomputation sequence re-evaluates at or under its budget;
//! - safetensors and buffer lists written back read back the same;
//! - a memory snapshot that reads replays to curves whose peaks are their maxima, its ideal
//!   placement passes `check_offsets` at or above its lower bound, and every file of
//!   `snapshot --emit` renders (the JSON parses);
//! - no case takes longer than [`Limits::slow`] (a finding, with the input).
//!
//! A finding carries the input that caused it, so it can be saved and turned into a
//! regression test. The same seed gives the same cases on every machine: a finding is
//! reproduced by its format, seed and case number.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::diagnostics;
use crate::exec::cpu::{Placement, run_step};
use crate::exec::data::init_args;
use crate::formats::torch_snapshot::picture::SnapshotEmit;
use crate::formats::torch_snapshot::render::Subject as SnapshotSubject;
use crate::formats::torch_snapshot::{self, timeline};
use crate::caching::{self, Event};
use crate::formats::alloc_trace::{self, AllocTrace};
use crate::formats::{buffer_list, checkmate, plan_json, safetensors};
use crate::passes::{Budget, PlanOptions};
use crate::report::locs::Locs;
use crate::report::{Report, Subject};
use crate::rng::Rng;
use crate::solve::offsets::{self, Live, SolveOptions};
use crate::solve::order::Effort;
use crate::solve::remat::{Strategy, evaluate, solve_with};

/// An input format memplan reads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    /// A `.step` file: check, plan (with and without a budget), run.
    Step,
    /// A buffer list (minimalloc's CSV): `alloc`.
    Csv,
    /// A Checkmate / Moccasin graph (node-link JSON): `schedule` and `remat`.
    Checkmate,
    /// A plan JSON (`plan --emit json`): `report` and `diff` read it back.
    PlanJson,
    /// Weights (`run --weights`, `--save`).
    Safetensors,
    /// A PyTorch memory snapshot (a pickle): `snapshot`.
    TorchSnapshot,
    /// An allocation trace: `replay`.
    AllocTrace,
}

impl Format {
    pub const ALL: [Format; 7] =
        [Format::Step, Format::Csv, Format::Checkmate, Format::PlanJson, Format::Safetensors, Format::TorchSnapshot, Format::AllocTrace];

    pub fn name(self) -> &'static str {
        match self {
            Format::Step => "step",
            Format::Csv => "csv",
            Format::Checkmate => "checkmate",
            Format::PlanJson => "plan-json",
            Format::Safetensors => "safetensors",
            Format::TorchSnapshot => "torch-snapshot",
            Format::AllocTrace => "alloc-trace",
        }
    }

    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// What a case may cost before it is a finding, and what a target may attempt.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A case slower than this is a finding (a hang or a blow-up).
    pub slow: Duration,
    /// Steps whose arena is at most this many bytes (and with at most `run_ops` ops) are
    /// also run on the CPU executor, planned against unplanned.
    pub run_arena: u64,
    pub run_ops: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { slow: Duration::from_secs(10), run_arena: 1 << 20, run_ops: 400 }
    }
}

/// One thing the fuzzer found.
#[derive(Clone, Debug)]
pub struct Finding {
    pub format: Format,
    /// The case's number in the run (with the run's seed, it reproduces the input).
    pub case: u64,
    /// What went wrong: a panic's message, a failed oracle, or the time a case took.
    pub what: String,
    pub input: Vec<u8>,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub cases: u64,
    /// Cases whose input was accepted far enough to be planned, placed, solved or loaded
    /// (a measure of how deep the mutations reach).
    pub accepted: u64,
    pub findings: Vec<Finding>,
}

/// The seed inputs of `format`, from the corpus under `root` (the repository).
pub fn seeds(format: Format, root: &Path) -> Vec<Vec<u8>> {
    let steps = step_texts(root);
    let small = || {
        steps.iter().filter_map(|(name, text)| {
            let graph = crate::parse(text).ok()?;
            crate::verify(&graph).ok()?;
            let graph = crate::expand(&graph).ok()?;
            let (graph, plan) = crate::plan_step(&graph, &quick_options()).ok()?;
            (plan.arena_bytes <= 4 << 20).then(|| (name.clone(), text.clone(), graph, plan))
        })
    };
    match format {
        Format::Step => steps.iter().map(|(_, text)| text.clone().into_bytes()).collect(),
        Format::Csv => small().map(|(_, _, _, plan)| buffer_list::from_plan(&plan).into_bytes()).collect(),
        Format::PlanJson => small()
            .map(|(name, text, graph, plan)| {
                let locs = Locs::from_source(&graph, &name, &text);
                let report = Report::new(&graph, &plan);
                plan_json::render(&Subject { source: name, graph, plan, locs }, &report).into_bytes()
            })
            .collect(),
        Format::Safetensors => {
            small().filter_map(|(_, _, graph, _)| Some(safetensors::to_bytes(&init_args(&graph, 1).ok()?))).collect()
        }
        Format::Checkmate => (0..12u64).map(|seed| checkmate_graph(seed).into_bytes()).collect(),
        Format::TorchSnapshot => pickles(root),
        Format::AllocTrace => traces(root),
    }
}

/// Every `.trace` under `root/tests/data/traces`, and one written here: storages of every
/// pool's sizes allocated and freed out of order around a peak reset.
fn traces(root: &Path) -> Vec<Vec<u8>> {
    let mut found: Vec<Vec<u8>> = std::fs::read_dir(root.join("tests/data/traces"))
        .map(|entries| {
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "trace")).collect();
            paths.sort();
            paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
        })
        .unwrap_or_default();
    let mut events = Vec::new();
    for (id, size) in [100u64, 600_000, 1 << 20, 3 << 20, 12 << 20, 40 << 20, 512].into_iter().enumerate() {
        events.push(Event::Alloc { id: id as u32, size });
    }
    events.extend([Event::Free { id: 1 }, Event::Free { id: 4 }, Event::ResetPeaks, Event::Alloc { id: 9, size: 5 << 20 }, Event::Free { id: 0 }]);
    let labels = events.iter().map(|_| "op".to_string()).collect();
    let lines = (1..=events.len()).collect();
    found.push(alloc_trace::write_alloc_trace(&AllocTrace { events, lines, labels }).into_bytes());
    found
}

/// Every `.pickle` under `root/tests/data/torch_snapshots`, by name.
fn pickles(root: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(root.join("tests/data/torch_snapshots")) else { return Vec::new() };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "pickle")).collect();
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Every `.step` file under `root/ir` (valid and invalid), with its path, sorted.
fn step_texts(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.join("ir")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "step")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                let name = path.strip_prefix(root).unwrap_or(&path).display().to_string();
                out.push((name, text));
            }
        }
    }
    out.sort();
    out
}

/// A small Checkmate-style training graph (a forward chain, the loss, the backward chain
/// reading its forward partner), shaped by `seed`; odd seeds write the random-layered kind
/// (`name`/`out_cost`, `graph.order`).
fn checkmate_graph(seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let f = 2 + rng.below(6) as usize;
    let n = 2 * f + 1;
    let mut links: Vec<(usize, usize)> = (0..n - 1).map(|k| (k, k + 1)).collect();
    links.extend((0..f).map(|k| (k, 2 * f - k)));
    if seed.is_multiple_of(2) {
        let nodes: Vec<String> = (0..n)
            .map(|k| {
                let (cpu, ram) = (1 + rng.below(50), 1 + rng.below(5000));
                format!(r#"{{"id": {k}, "name": "n{k}", "backward": {}, "cost_cpu": {cpu}, "cost_ram": {ram}}}"#, k > f)
            })
            .collect();
        let links: Vec<String> = links.iter().map(|(s, t)| format!(r#"{{"source": {s}, "target": {t}}}"#)).collect();
        format!(r#"{{"directed": true, "graph": {{"name": "g{seed}"}}, "nodes": [{}], "links": [{}]}}"#, nodes.join(", "), links.join(", "))
    } else {
        let nodes: Vec<String> =
            (0..n).map(|k| format!(r#"{{"out_cost": {}, "duration": {}, "name": {k}}}"#, 1 + rng.below(900), 1 + rng.below(9))).collect();
        let links: Vec<String> = links.iter().map(|(s, t)| format!(r#"{{"0": {s}, "1": {t}}}"#)).collect();
        let order: Vec<String> = (0..n).map(|k| k.to_string()).collect();
        format!(
            r#"{{"directed": true, "multigraph": false, "graph": {{"order": [{}]}}, "nodes": [{}], "links": [{}]}}"#,
            order.join(", "),
            nodes.join(", "),
            links.join(", ")
        )
    }
}

/// Numbers at the edges of the integer and float types, as text.
const EDGE_NUMBERS: [&str; 18] = [
    "0",
    "-1",
    "1",
    "2",
    "255",
    "65536",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "1e308",
    "1000000000",
    "0.5",
    "NaN",
];

/// Bytes that end tokens, lines or strings, and bytes that are not UTF-8.
const EDGE_BYTES: [u8; 14] = [0, b'\n', b'"', b',', b':', b'{', b'}', b'[', b']', b'%', b'(', b'=', 0xc3, 0xff];

/// The words of a text (identifiers, op and dtype names, keys), for word swaps.
fn words(text: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &b) in text.iter().enumerate().chain(std::iter::once((text.len(), &b' '))) {
        let word = b.is_ascii_alphanumeric() || b == b'_' || b == b'.';
        match (word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                if i - s <= 40 {
                    out.push(text[s..i].to_vec());
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// A damaged copy of `input`: 1 to 4 mutations, some splicing in `other`.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8], dictionary: &[Vec<u8>]) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = data.len() as u64;
        let at = |rng: &mut Rng| if len == 0 { 0 } else { rng.below(len) as usize };
        match rng.below(12) {
            0 if len > 0 => {
                let i = at(rng);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = at(rng);
                data[i] = EDGE_BYTES[rng.below(EDGE_BYTES.len() as u64) as usize];
            }
            2 if len > 0 => {
                // Cut a range.
                let i = at(rng);
                let n = (1 + rng.below(64) as usize).min(data.len() - i);
                data.drain(i..i + n);
            }
            3 if len > 0 => {
                // Repeat a range elsewhere (lines, ops, nodes twice).
                let i = at(rng);
                let n = (1 + rng.below(200) as usize).min(data.len() - i);
                let piece = data[i..i + n].to_vec();
                let j = at(rng);
                data.splice(j..j, piece);
            }
            4 => {
                // A number at the edge of its type, over a number of the input.
                let digits: Vec<usize> = (0..data.len()).filter(|&i| data[i].is_ascii_digit()).collect();
                if !digits.is_empty() {
                    let mut i = digits[rng.below(digits.len() as u64) as usize];
                    while i > 0 && data[i - 1].is_ascii_digit() {
                        i -= 1;
                    }
                    let mut end = i;
                    while end < data.len() && (data[end].is_ascii_digit() || data[end] == b'.') {
                        end += 1;
                    }
                    let edge = EDGE_NUMBERS[rng.below(EDGE_NUMBERS.len() as u64) as usize];
                    data.splice(i..end, edge.bytes());
                }
            }
            5 if !dictionary.is_empty() => {
                // A word of the input replaced by a word from elsewhere in the corpus.
                let here = words(&data);
                if !here.is_empty() {
                    let word = &here[rng.below(here.len() as u64) as usize];
                    let replacement = &dictionary[rng.below(dictionary.len() as u64) as usize];
                    if let Some(i) = find(&data, word) {
                        data.splice(i..i + word.len(), replacement.iter().copied());
                    }
                }
            }
            6 => {
                // Splice: a prefix of this input, a suffix of another.
                let i = at(rng);
                let j = if other.is_empty() { 0 } else { rng.below(other.len() as u64) as usize };
                data.truncate(i);
                data.extend_from_slice(&other[j..]);
            }
            7 if rng.below(4) == 0 => {
                // A long run (rarely: it makes a case slow): very long names, lines and
                // numbers, columns past 65535.
                let i = at(rng);
                let b = if rng.below(2) == 0 { b'a' } else { b'9' };
                let n = 1 + rng.below(70_000) as usize;
                data.splice(i..i, std::iter::repeat_n(b, n));
            }
            8 if len > 0 => {
                // Truncate.
                data.truncate(at(rng));
            }
            9 => {
                // Swap two lines.
                let lines: Vec<usize> =
                    std::iter::once(0).chain((0..data.len()).filter(|&i| data[i] == b'\n').map(|i| i + 1)).collect();
                if lines.len() > 2 {
                    let a = rng.below(lines.len() as u64 - 1) as usize;
                    let b = rng.below(lines.len() as u64 - 1) as usize;
                    let (a, b) = (a.min(b), a.max(b));
                    if a != b {
                        let (a0, a1, b0, b1) = (lines[a], lines[a + 1], lines[b], lines[b + 1]);
                        let mut swapped = data[..a0].to_vec();
                        swapped.extend_from_slice(&data[b0..b1]);
                        swapped.extend_from_slice(&data[a1..b0]);
                        swapped.extend_from_slice(&data[a0..a1]);
                        swapped.extend_from_slice(&data[b1..]);
                        data = swapped;
                    }
                }
            }
            _ => {
                let i = at(rng);
                data.insert(i.min(data.len()), rng.below(256) as u8);
            }
        }
    }
    data
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Planning options that keep a case short: the solvers' searches bounded.
fn quick_options() -> PlanOptions {
    PlanOptions { time_limit: Duration::from_millis(200), search_nodes: 20_000, ..PlanOptions::default() }
}

/// How far a case got: rejected with an error (rendered), or accepted.
enum Reached {
    Rejected,
    Accepted,
}

type Checked = Result<Reached, String>;

/// Renders `error` as the CLI shows it (rendering must not panic either).
fn rejected(error: &dyn miette::Diagnostic, text: &str) -> Checked {
    let _ = diagnostics::render(error, "fuzz.step", text, false);
    Ok(Reached::Rejected)
}

/// A `.step` through check, plan, plan under a budget, print/parse, run.
fn step_case(bytes: &[u8], limits: &Limits, budget: bool) -> Checked {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(Reached::Rejected) };
    let graph = match crate::parse(text) {
        Ok(g) => g,
        Err(e) => return rejected(&e, text),
    };
    if let Err(e) = crate::verify(&graph) {
        return rejected(&e, text);
    }
    for warning in crate::autodiff::warnings(&graph) {
        let _ = diagnostics::render(&warning, "fuzz.step", text, false);
    }
    let printed = crate::print(&graph);
    let reparsed = crate::parse(&printed).map_err(|e| format!("print → parse fails: {e}\n{printed}"))?;
    if crate::print(&reparsed) != printed {
        return Err(format!("print → parse → print differs:\n{printed}"));
    }
    let expanded = match crate::expand(&graph) {
        Ok(g) => g,
        Err(e) => return rejected(&e, text),
    };
    crate::verify(&expanded).map_err(|e| format!("the expanded step does not verify: {e}"))?;
    let mut options = quick_options();
    if budget {
        options.budget = Some(Budget::Fraction(0.6));
    }
    let (planned, plan) = match crate::plan_step(&expanded, &options) {
        Ok(p) => p,
        Err(e) => return rejected(&e, text),
    };
    crate::check(&planned, &plan).map_err(|v| format!("the checker rejected memplan's plan:\n{v}"))?;
    if plan.arena_bytes <= limits.run_arena && planned.ops.len() <= limits.run_ops {
        // Arguments that do not fit in memory are a reported error, as in `run`.
        let Ok(args) = init_args(&planned, 0) else { return Ok(Reached::Accepted) };
        let ran = run_step(&planned, Placement::Planned(&plan), &args);
        let unplanned = run_step(&planned, Placement::Unplanned, &args);
        match (ran, unplanned) {
            (Ok(a), Ok(b)) => {
                let differences = a.differences(&b);
                if !differences.is_empty() {
                    return Err(format!("planned and unplanned runs differ: {}", differences.join("; ")));
                }
            }
            (Err(a), Err(b)) if a.to_string() == b.to_string() => {}
            (a, b) => return Err(format!("planned and unplanned runs disagree: {:?} / {:?}", a.err(), b.err())),
        }
    }
    Ok(Reached::Accepted)
}

/// A buffer list through every solver and the independent placement check; written back
/// and read again.
fn csv_case(bytes: &[u8]) -> Checked {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(Reached::Rejected) };
    let list = match buffer_list::parse_buffer_list(text) {
        Ok(list) => list,
        Err(e) => return rejected(&e, text),
    };
    let mut intervals = Vec::with_capacity(list.len());
    for b in &list {
        let (Ok(first), Ok(last)) = (usize::try_from(b.lower), usize::try_from(b.upper - 1)) else {
            return Ok(Reached::Rejected);
        };
        intervals.push(Live { first, last, size: b.size });
    }
    let triples: Vec<(usize, usize, u64)> = intervals.iter().map(|l| (l.first, l.last, l.size)).collect();
    for solver in [offsets::Solver::Greedy, offsets::Solver::BestFit, offsets::Solver::Auto] {
        let options = SolveOptions { solver, capacity: None, time_limit: Duration::from_millis(100), search_nodes: 5_000, halt_heuristics: true };
        let solution = match offsets::solve(&intervals, &options) {
            Ok(s) => s,
            Err(_) => return Ok(Reached::Rejected),
        };
        crate::checker::check_offsets(&triples, &solution.offsets, None)
            .map_err(|v| format!("{solver:?}: the checker rejected the placement: {v}"))?;
        let written = buffer_list::write_buffer_list(&list, &solution.offsets);
        let back = buffer_list::parse_buffer_list(&written).map_err(|e| format!("written list does not read back: {e}"))?;
        if back.len() != list.len() {
            return Err("written list reads back with another length".into());
        }
    }
    Ok(Reached::Accepted)
}

/// A Checkmate graph through `schedule` (its order's peak) and `remat` (every strategy at
/// 80% of the topological peak, re-evaluated).
fn checkmate_case(bytes: &[u8]) -> Checked {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(Reached::Rejected) };
    let mut reached = Reached::Rejected;
    if let Ok(graph) = checkmate::parse(text) {
        let dag = &graph.dag;
        let ascending = dag.smallest_first();
        let found = dag.best_order(&[&ascending], Effort::for_nodes(dag.nodes()));
        match dag.peak(&found.order) {
            Ok(peak) if peak == found.peak => {}
            other => return Err(format!("schedule: the order's peak re-evaluates to {other:?}, not {}", found.peak)),
        }
        reached = Reached::Accepted;
    }
    if let Ok(graph) = checkmate::parse_remat(text) {
        let problem = &graph.problem;
        let plain: Vec<_> = (0..problem.nodes.len() as crate::solve::Node).collect();
        let Ok(topological) = evaluate(problem, &plain) else { return Ok(reached) };
        let budget = (topological.peak as f64 * 0.8).floor() as u64;
        for strategy in [Strategy::None, Strategy::ChenSqrt, Strategy::ChenGreedy, Strategy::Auto] {
            if let Ok(solution) = solve_with(problem, budget, strategy, Duration::from_millis(100)) {
                let eval = evaluate(problem, &solution.sequence).map_err(|e| format!("remat {strategy:?}: {e}"))?;
                if eval.peak > budget {
                    return Err(format!("remat {strategy:?}: peak {} over the budget {budget}", eval.peak));
                }
            }
        }
        reached = Reached::Accepted;
    }
    Ok(reached)
}

/// A plan JSON read back (parsed, verified, checked: it trusts nothing in the file) and
/// reported on.
fn plan_json_case(bytes: &[u8]) -> Checked {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(Reached::Rejected) };
    match plan_json::load(text) {
        Ok(subject) => {
            let report = Report::new(&subject.graph, &subject.plan);
            let _ = plan_json::render(&subject, &report);
            Ok(Reached::Accepted)
        }
        Err(e) => {
            let _ = e.to_string();
            Ok(Reached::Rejected)
        }
    }
}

/// Weights read, written and read again.
fn safetensors_case(bytes: &[u8]) -> Checked {
    match safetensors::from_bytes(bytes) {
        Ok(tensors) => {
            let again = safetensors::from_bytes(&safetensors::to_bytes(&tensors))
                .map_err(|e| format!("written weights do not read back: {e}"))?;
            if again != tensors {
                return Err("weights read back differ from the ones written".into());
            }
            Ok(Reached::Accepted)
        }
        Err(e) => {
            let _ = e.to_string();
            Ok(Reached::Rejected)
        }
    }
}

/// A memory snapshot read, replayed (the default device), placed, checked and rendered.
/// An allocation trace through the caching allocator's model under three settings: the
/// blocks cover the requests and the segments the blocks at every event, the peaks are the
/// timeline's, and the trace writes and reads back to the same events.
fn alloc_trace_case(bytes: &[u8]) -> Checked {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(Reached::Rejected) };
    let trace = match alloc_trace::parse_alloc_trace(text) {
        Ok(t) => t,
        Err(e) => return rejected(&e, text),
    };
    let back = alloc_trace::parse_alloc_trace(&alloc_trace::write_alloc_trace(&trace)).map_err(|e| format!("the written trace does not read back: {e}"))?;
    if back.events != trace.events {
        return Err("the written trace reads back with other events".into());
    }
    let settings = [
        caching::Config::default(),
        caching::Config { expandable_segments: true, max_split_size: None },
        caching::Config { expandable_segments: false, max_split_size: Some(4 << 20) },
    ];
    for config in settings {
        let r = match caching::replay(&trace.events, config) {
            Ok(r) => r,
            Err(e) => {
                let _ = e.to_string();
                return Ok(Reached::Rejected);
            }
        };
        if let Some(&(allocated, reserved)) = r.timeline.iter().find(|(a, r)| a > r) {
            return Err(format!("{config:?}: {allocated} bytes allocated in {reserved} reserved"));
        }
        if r.max_allocated < r.max_requested || r.max_reserved < r.max_allocated {
            return Err(format!("{config:?}: peaks out of order: requested {}, allocated {}, reserved {}", r.max_requested, r.max_allocated, r.max_reserved));
        }
        let window = trace.events.iter().rposition(|e| *e == caching::Event::ResetPeaks).unwrap_or(0);
        let seen = r.timeline[window..].iter().map(|&(a, _)| a).max().unwrap_or(0);
        if seen > r.max_allocated || (trace.events.iter().all(|e| *e != caching::Event::ResetPeaks) && seen != r.max_allocated) {
            return Err(format!("{config:?}: max_allocated {} but the timeline reaches {seen}", r.max_allocated));
        }
        let in_segments: u64 = r.segments_at_peak.iter().map(|s| s.allocated).sum();
        if r.peak_event.is_some() && in_segments != r.max_allocated {
            return Err(format!("{config:?}: the segments at the peak hold {in_segments} bytes, the peak is {}", r.max_allocated));
        }
    }
    Ok(Reached::Accepted)
}

fn torch_snapshot_case(bytes: &[u8]) -> Checked {
    let snapshot = match torch_snapshot::parse(bytes) {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return Ok(Reached::Rejected);
        }
    };
    let t = match timeline::replay(&snapshot, None) {
        Ok(t) => t,
        Err(e) => {
            let _ = e.to_string();
            return Ok(Reached::Rejected);
        }
    };
    if t.allocated.len() != t.events + 1 || t.reserved.len() != t.events + 1 {
        return Err(format!("{} events but {} and {} positions", t.events, t.allocated.len(), t.reserved.len()));
    }
    for (name, curve, peak) in [("allocated", &t.allocated, t.max_allocated), ("reserved", &t.reserved, t.max_reserved)] {
        if curve.iter().copied().max().unwrap_or(0) != peak.bytes || curve.get(peak.at) != Some(&peak.bytes) {
            return Err(format!("the {name} peak {peak:?} is not the curve's maximum"));
        }
    }
    let options = SolveOptions { solver: offsets::Solver::Auto, capacity: None, time_limit: Duration::from_millis(100), search_nodes: 5_000, halt_heuristics: false };
    let ideal = match timeline::ideal(&t, timeline::BLOCK_ROUNDING, &options) {
        Ok(i) => i,
        Err(e) => {
            let _ = e.to_string();
            return Ok(Reached::Rejected);
        }
    };
    crate::checker::check_offsets(&ideal.intervals(&t), &ideal.offsets, None).map_err(|v| format!("the checker rejected the ideal placement: {v}"))?;
    if ideal.arena < ideal.lower_bound {
        return Err(format!("arena {} below the lower bound {}", ideal.arena, ideal.lower_bound));
    }
    let subject = SnapshotSubject { source: "fuzz.pickle", snapshot: &snapshot, timeline: &t, ideal: &ideal };
    for emit in SnapshotEmit::ALL {
        let text = emit.render(&subject, 5);
        if emit == SnapshotEmit::Json {
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| format!("the JSON report does not parse: {e}"))?;
        }
    }
    Ok(Reached::Accepted)
}

/// Runs one case of `format` on `input`: `Ok(accepted)`, or what went wrong.
pub fn exercise(format: Format, input: &[u8], limits: &Limits, case: u64) -> Result<bool, String> {
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| match format {
        Format::Step => step_case(input, limits, case % 4 == 3),
        Format::Csv => csv_case(input),
        Format::Checkmate => checkmate_case(input),
        Format::PlanJson => plan_json_case(input),
        Format::Safetensors => safetensors_case(input),
        Format::TorchSnapshot => torch_snapshot_case(input),
        Format::AllocTrace => alloc_trace_case(input),
    }));
    let elapsed = started.elapsed();
    let outcome = match result {
        Ok(Ok(reached)) => Ok(matches!(reached, Reached::Accepted)),
        Ok(Err(failed)) => Err(failed),
        Err(panic) => Err(format!(
            "panic: {}",
            panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied()).unwrap_or("(no message)")
        )),
    };
    if outcome.is_ok() && elapsed > limits.slow {
        return Err(format!("slow: {:.1} s (limit {:.1} s)", elapsed.as_secs_f64(), limits.slow.as_secs_f64()));
    }
    outcome
}

/// Fuzzes `format` from `seeds` with `seed`: `cases` cases, or until `deadline`, whichever
/// comes first. `on_finding` sees each finding as it happens (to save its input).
pub fn run(
    format: Format,
    seeds: &[Vec<u8>],
    seed: u64,
    cases: u64,
    deadline: Option<Instant>,
    limits: &Limits,
    on_finding: &mut dyn FnMut(&Finding),
) -> Outcome {
    let mut outcome = Outcome::default();
    if seeds.is_empty() {
        return outcome;
    }
    let dictionary: Vec<Vec<u8>> = {
        let mut all: Vec<Vec<u8>> = seeds.iter().flat_map(|s| words(s)).collect();
        all.sort();
        all.dedup();
        all
    };
    let mut rng = Rng::new(seed);
    for case in 0..cases {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let input = &seeds[rng.below(seeds.len() as u64) as usize];
        let other = &seeds[rng.below(seeds.len() as u64) as usize];
        let mutated = mutate(&mut rng, input, other, &dictionary);
        outcome.cases += 1;
        match exercise(format, &mutated, limits, case) {
            Ok(accepted) => outcome.accepted += u64::from(accepted),
            Err(what) => {
                let finding = Finding { format, case, what, input: mutated };
                on_finding(&finding);
                outcome.findings.push(finding);
            }
        }
    }
    outcome
}
