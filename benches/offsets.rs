//! Offset solvers on every buffer list in `benches/data` and on a synthetic 200000-buffer
//! training step: `cargo bench --bench offsets` prints one markdown table per instance set
//! (benches/BENCHMARKS.md records a run).
//!
//! Sets: minimalloc's challenging suite at its capacity (1048576; arenas over it are marked
//! "over") and minimising; idealloc's real lists minimising (with the file's own placement
//! where it has one); two synthetic 200000-buffer lists (no exact column): ten rounds of a
//! 20000-buffer training step one after the other, and one 200000-buffer step whose live
//! set grows with it (see `memplan::testing::synthetic`). Every solution is checked with
//! the independent `check_offsets`; a violation aborts the run.
//!
//! Time per search-based run (auto, exact): `--quick` gives 100 ms, else
//! `MEMPLAN_BENCH_LIMIT_MS` or 5 s. Heuristic timings are means over repeated runs (at
//! least 200 ms in all, or one run). Other arguments name the sets to run (`minimalloc`,
//! `idealloc`, `synthetic`): `cargo bench --bench offsets -- synthetic`; none runs all.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memplan::solve::offsets::Live;
use memplan::formats::buffer_list::{ListedBuffer, parse_buffer_list};
use memplan::checker::check_offsets;
use memplan::solve::offsets::{self, Attempt, SolveError, SolveOptions, Solver};
use memplan::testing::synthetic;

/// The columns: a solver each (`None` would print a dash).
const SOLVERS: [(&str, Option<Solver>); 4] =
    [("greedy", Some(Solver::Greedy)), ("best-fit", Some(Solver::BestFit)), ("auto", Some(Solver::Auto)), ("exact", Some(Solver::Exact))];

struct Cell {
    arena: u64,
    time: Duration,
    over: bool,
    proved: bool,
    pick: Option<&'static str>,
}

struct Row {
    name: String,
    buffers: usize,
    lower: u64,
    own: Option<Result<u64, String>>,
    cells: Vec<Option<Cell>>,
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // cargo passes `--bench` to a harness-less bench; other words starting with `-` too.
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let runs = |set: &str| wanted.is_empty() || wanted.iter().any(|w| w == set);
    let limit_ms = if quick {
        100
    } else {
        std::env::var("MEMPLAN_BENCH_LIMIT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000)
    };
    let limit = Duration::from_millis(limit_ms);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data");
    println!("# memplan offset solvers (release; time limit per search {limit_ms} ms)\n");

    if runs("minimalloc") {
        minimalloc(&root, limit);
    }
    if runs("idealloc") {
        let idealloc: Vec<Row> = csv_files(&root.join("idealloc"))
            .iter()
            .map(|p| {
                let (name, list) = read(p);
                row(&name, &list, &SOLVERS, None, limit)
            })
            .collect();
        table("idealloc, minimising", &idealloc, true);
    }
    if runs("synthetic") {
        synthetic_lists(limit);
    }
}

/// minimalloc's suite, at its capacity and minimising.
fn minimalloc(root: &Path, limit: Duration) {
    let mut minimalloc = csv_files(&root.join("minimalloc/challenging"));
    minimalloc.push(root.join("minimalloc/input.12.csv"));
    let lists: Vec<(String, Vec<ListedBuffer>)> = minimalloc.iter().map(|p| read(p)).collect();
    for (title, with_capacity) in [("minimalloc, capacity from the file name", true), ("minimalloc, minimising", false)] {
        let rows = lists
            .iter()
            .map(|(name, list)| {
                let capacity = if with_capacity { capacity_of(name) } else { None };
                row(name, list, &SOLVERS, capacity, limit)
            })
            .collect::<Vec<_>>();
        table(title, &rows, false);
    }
}

/// The two synthetic 200000-buffer lists, heuristics only.
fn synthetic_lists(limit: Duration) {
    let heuristics = [SOLVERS[0], SOLVERS[1], SOLVERS[2]];
    let synthetic_rows: Vec<Row> = [
        ("rounds(200000, 20000, seed 1)", synthetic::rounds(200_000, 20_000, 1)),
        ("training_like(200000, seed 1)", synthetic::training_like(200_000, 1)),
    ]
    .into_iter()
    .map(|(name, intervals)| {
        let listed: Vec<ListedBuffer> = intervals
            .iter()
            .enumerate()
            .map(|(i, l)| ListedBuffer { id: i.to_string(), lower: l.first as u64, upper: l.last as u64 + 1, size: l.size, offset: None, line: i + 2 })
            .collect();
        row(name, &listed, &heuristics, None, limit)
    })
    .collect();
    table("synthetic, 200000 buffers (greedy, best-fit, auto)", &synthetic_rows, false);
}

fn csv_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> (String, Vec<ListedBuffer>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let list = parse_buffer_list(&text)
        .unwrap_or_else(|e| panic!("{}", memplan::diagnostics::render(&e, &path.display().to_string(), &text, false)));
    (name, list)
}

/// `A.1048576.csv` → 1048576.
fn capacity_of(name: &str) -> Option<u64> {
    name.strip_suffix(".csv")?.rsplit('.').next()?.parse().ok()
}

fn intervals_of(list: &[ListedBuffer]) -> Vec<Live> {
    list.iter()
        .map(|b| Live { first: b.lower as usize, last: (b.upper - 1) as usize, size: b.size })
        .collect()
}

fn row(name: &str, list: &[ListedBuffer], solvers: &[(&str, Option<Solver>)], capacity: Option<u64>, limit: Duration) -> Row {
    let intervals = intervals_of(list);
    let triples: Vec<(usize, usize, u64)> = intervals.iter().map(|l| (l.first, l.last, l.size)).collect();
    let lower = offsets::lower_bound(&intervals).expect("no overflow");
    let own = list.iter().map(|b| b.offset).collect::<Option<Vec<u64>>>().map(|own| {
        check_offsets(&triples, &own, None)
            .map(|()| offsets::arena_of(&intervals, &own).expect("no overflow"))
            .map_err(|v| format!("invalid: {} violations", v.0.len()))
    });
    let cells = solvers
        .iter()
        .map(|&(_, solver)| {
            let solver = solver?;
            let options = SolveOptions { solver, capacity, time_limit: limit, search_nodes: u64::MAX, halt_heuristics: false };
            let (mut runs, started) = (0u32, Instant::now());
            let (result, log) = loop {
                let mut log: Vec<Attempt> = Vec::new();
                let result = offsets::solve_logged(&intervals, &options, &mut log);
                runs += 1;
                if started.elapsed() >= Duration::from_millis(200) || runs >= 50 {
                    break (result, log);
                }
            };
            let time = started.elapsed() / runs;
            let (solution, over) = match result {
                Ok(s) => (s, false),
                Err(SolveError::OverCapacity { best: Some(s), .. }) => (s, true),
                Err(e) => panic!("{name}: {e:?}"),
            };
            if let Err(v) = check_offsets(&triples, &solution.offsets, None) {
                panic!("{name}: {solver:?} made an invalid placement:\n{v}");
            }
            let pick = log.iter().find(|a| a.chosen).map(|a| a.method.name());
            Some(Cell { arena: solution.arena, time, over, proved: solution.proved_optimal, pick })
        })
        .collect();
    Row { name: name.to_string(), buffers: list.len(), lower, own, cells }
}

fn table(title: &str, rows: &[Row], own: bool) {
    println!("## {title}\n");
    let mut header = String::from("| file | buffers | lower bound |");
    let mut rule = String::from("|---|---:|---:|");
    if own {
        header.push_str(" file's own placement |");
        rule.push_str("---:|");
    }
    let columns = rows.iter().map(|r| r.cells.len()).max().unwrap_or(0);
    for (name, solver) in SOLVERS.into_iter().take(columns) {
        match solver {
            Some(_) => {
                header.push_str(&format!(" {name} arena | ratio | ms |"));
                rule.push_str("---:|---:|---:|");
            }
            None => {
                header.push_str(&format!(" {name} |"));
                rule.push_str("---|");
            }
        }
    }
    if rows.iter().any(|r| r.cells.len() > 2) {
        header.push_str(" auto's pick |");
        rule.push_str("---|");
    }
    println!("{header}\n{rule}");
    for r in rows {
        let mut line = format!("| {} | {} | {} |", r.name, r.buffers, r.lower);
        if own {
            match &r.own {
                Some(Ok(arena)) => line.push_str(&format!(" {arena} ({:.4}) |", ratio(*arena, r.lower))),
                Some(Err(why)) => line.push_str(&format!(" {why} |")),
                None => line.push_str(" - |"),
            }
        }
        for cell in &r.cells {
            match cell {
                Some(c) => line.push_str(&format!(
                    " {}{}{} | {:.4} | {:.1} |",
                    c.arena,
                    if c.over { " over" } else { "" },
                    if c.proved { " ✓" } else { "" },
                    ratio(c.arena, r.lower),
                    c.time.as_secs_f64() * 1000.0
                )),
                None => line.push_str(" pending: exact solver |"),
            }
        }
        if r.cells.len() > 2 {
            let pick = r.cells.get(2).and_then(|c| c.as_ref()).and_then(|c| c.pick).unwrap_or("-");
            line.push_str(&format!(" {pick} |"));
        }
        println!("{line}");
    }
    println!("\n\"over\": above the capacity; ✓: proved optimal (arena = lower bound).\n");
}

fn ratio(arena: u64, lower: u64) -> f64 {
    if lower == 0 { 1.0 } else { arena as f64 / lower as f64 }
}
